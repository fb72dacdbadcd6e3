//! Kubeconfig rendering for the real kube client: one plain-HTTP cluster, one token user,
//! one context.

/// A kubeconfig YAML document for the plain-HTTP server at `server_url` (which need not be
/// listening yet: e.g. a server started later on a chosen [`ServerConfig::port`]), the bearer
/// `token` of `user`, and one context; strings are JSON-quoted, which YAML reads as
/// double-quoted scalars.
///
/// [`ServerConfig::port`]: crate::ServerConfig::port
pub fn render(server_url: &str, user: &str, token: &str, context: &str) -> String {
    let q = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: tier-testserver
  cluster:
    server: {server}
users:
- name: {user}
  user:
    token: {token}
contexts:
- name: {context}
  context:
    cluster: tier-testserver
    user: {user}
current-context: {context}
preferences: {{}}
",
        server = q(server_url),
        user = q(user),
        token = q(token),
        context = q(context),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_quoted_fields() {
        let yaml = render(
            "http://127.0.0.1:1",
            "system:serviceaccount:a:b",
            "t\"k",
            "ctx",
        );
        assert!(yaml.contains("server: \"http://127.0.0.1:1\""));
        assert!(yaml.contains("- name: \"system:serviceaccount:a:b\""));
        assert!(yaml.contains("token: \"t\\\"k\""));
        assert!(yaml.contains("current-context: \"ctx\""));
    }
}
