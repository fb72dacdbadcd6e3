//! The files in `deploy/` say what tierd needs and nothing more.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use clap::Parser;
use serde::Deserialize;
use serde_yaml::Value;
use tier_bin::cli::Cli;

fn deploy(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn documents(file: &str) -> Vec<Value> {
    let text = deploy(file);
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

#[test]
fn the_crd_file_is_what_tierd_crd_prints() {
    assert_eq!(
        deploy("crd.yaml"),
        tier_bin::commands::crd().unwrap(),
        "regenerate with: cargo run -p tier-bin -- crd > deploy/crd.yaml"
    );
}

#[test]
fn rbac_is_least_privilege() {
    let docs = documents("rbac.yaml");
    let role = kind(&docs, "ClusterRole");
    let rules = role["rules"].as_sequence().unwrap();
    assert_eq!(rules.len(), 3);
    assert_eq!(strings(&rules[0]["apiGroups"]), ["crd.antrea.io"]);
    assert_eq!(strings(&rules[0]["resources"]), ["tiers"]);
    assert_eq!(
        strings(&rules[0]["verbs"]),
        ["get", "list", "watch", "create", "update"]
    );
    assert_eq!(strings(&rules[1]["resources"]), ["events"]);
    assert_eq!(strings(&rules[1]["verbs"]), ["create", "patch"]);
    // Antrea's policies: read-only, for the webhook's DELETE rule.
    let policies = rules
        .iter()
        .find(|r| strings(&r["resources"]).contains(&"networkpolicies"))
        .expect("a rule for Antrea's policies");
    assert_eq!(strings(&policies["apiGroups"]), ["crd.antrea.io"]);
    assert_eq!(
        strings(&policies["resources"]),
        ["clusternetworkpolicies", "networkpolicies"]
    );
    assert_eq!(strings(&policies["verbs"]), ["get", "list", "watch"]);
    let binding = kind(&docs, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"].as_str(), Some("tierd"));
    assert_eq!(
        kind(&docs, "ServiceAccount")["metadata"]["name"].as_str(),
        Some("tierd")
    );
}

#[test]
fn the_deployment_is_probed_hardened_and_runs_a_valid_command_line() {
    let docs = documents("deployment.yaml");
    let pod = &kind(&docs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"].as_str(), Some("tierd"));
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    let container = &pod["containers"][0];
    assert_eq!(
        container["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/livez")
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(security["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert!(container["resources"]["requests"]["cpu"].is_string());
    assert!(container["resources"]["requests"]["memory"].is_string());
    let args = std::iter::once("tierd").chain(strings(&container["args"]));
    let cli = Cli::try_parse_from(args).unwrap();
    assert!(matches!(cli.command, tier_bin::cli::Command::Run(_)));
}

#[test]
fn the_webhook_reaches_tierd_through_its_service() {
    let service = documents("service.yaml");
    let service = kind(&service, "Service");
    assert_eq!(service["spec"]["ports"][0]["port"].as_u64(), Some(443));
    let docs = documents("webhook.yaml");
    let hook = &kind(&docs, "ValidatingWebhookConfiguration")["webhooks"][0];
    assert_eq!(
        hook["clientConfig"]["service"]["name"],
        service["metadata"]["name"]
    );
    assert_eq!(
        hook["clientConfig"]["service"]["path"].as_str(),
        Some("/validate/tier")
    );
    assert_eq!(hook["failurePolicy"].as_str(), Some("Fail"));
    assert_eq!(hook["timeoutSeconds"].as_u64(), Some(5));
    assert_eq!(
        strings(&hook["rules"][0]["operations"]),
        ["CREATE", "UPDATE", "DELETE"]
    );
    assert_eq!(strings(&hook["rules"][0]["resources"]), ["tiers"]);
}
