//! A kubeconfig pointing at the proxy: its HTTPS URL, its CA inline, an optional bearer token.

use base64::Engine as _;

/// A kubeconfig YAML document for the proxy at `url` trusted through `ca_pem`, with one user
/// (`token` as its bearer token, or no credentials at all) and one context, selected.
/// Strings are JSON-quoted, which YAML reads as double-quoted scalars.
pub(crate) fn render(url: &str, ca_pem: &str, user: &str, token: Option<&str>) -> String {
    let q = |s: &str| serde_json::Value::from(s).to_string();
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let credentials = match token {
        Some(token) => format!("\n    token: {}", q(token)),
        None => " {}".to_owned(),
    };
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: tier-faultproxy
  cluster:
    server: {url}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:{credentials}
contexts:
- name: tier-faultproxy
  context:
    cluster: tier-faultproxy
    user: {user}
current-context: tier-faultproxy
preferences: {{}}
",
        url = q(url),
        ca = q(&ca),
        user = q(user),
    )
}
