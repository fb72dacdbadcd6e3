//! `deploy/overlays/calico` renders with `kubectl kustomize` (offline) and holds what it
//! promises: tierd in Calico mode with no webhook, no certificate and no Secret, and RBAC for
//! exactly the Tier resource this crate's Calico adapter reads and writes (by default
//! [`CalicoApi::V3`]), plus Events where kube's recorder writes them. Where no `kubectl` is
//! found the test says so and checks the files parse only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_yaml::Value;
use tier_kube::calico::CalicoApi;

fn overlay() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/overlays/calico")
        .canonicalize()
        .unwrap()
}

fn kubectl() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|candidate| candidate.is_file())
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// `kubectl kustomize dir`, or None (said on stderr, after checking the files parse).
fn render(dir: &Path) -> Option<Vec<Value>> {
    let Some(kubectl) = kubectl() else {
        eprintln!(
            "no kubectl on PATH: not rendering {}; checking its files parse only",
            dir.display()
        );
        for entry in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            assert!(!documents(&text).is_empty());
        }
        return None;
    };
    let output = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(documents(&String::from_utf8(output.stdout).unwrap()))
}

fn kinds<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect()
}

fn get<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap())
        .collect()
}

fn container(docs: &[Value]) -> &Value {
    &get(docs, "Deployment", "tierd")["spec"]["template"]["spec"]["containers"][0]
}

/// One granted permission: (namespace or "" for cluster-wide, API group, resource, verb).
type Grant = (String, String, String, String);

/// Every permission the rendering grants tierd's service account, through any binding.
fn grants(docs: &[Value]) -> BTreeSet<Grant> {
    let mut grants = BTreeSet::new();
    for kind in ["RoleBinding", "ClusterRoleBinding"] {
        for binding in kinds(docs, kind) {
            let subjects = binding["subjects"].as_sequence().unwrap();
            let ours = subjects.iter().any(|s| {
                s["kind"].as_str() == Some("ServiceAccount") && s["name"].as_str() == Some("tierd")
            });
            if !ours {
                continue;
            }
            let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
            let role_name = binding["roleRef"]["name"].as_str().unwrap();
            let role = get(docs, role_kind, role_name);
            let scope = match kind {
                "RoleBinding" => binding["metadata"]["namespace"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                _ => String::new(),
            };
            if role_kind == "Role" {
                assert_eq!(role["metadata"]["namespace"].as_str(), Some(scope.as_str()));
            }
            for rule in role["rules"].as_sequence().unwrap() {
                assert!(rule["nonResourceURLs"].is_null(), "unexpected {rule:?}");
                // A grant by name reads `resource/name`.
                let names = strings(&rule["resourceNames"]);
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        let targets: Vec<String> = if names.is_empty() {
                            vec![resource.to_owned()]
                        } else {
                            names.iter().map(|n| format!("{resource}/{n}")).collect()
                        };
                        for target in targets {
                            for verb in strings(&rule["verbs"]) {
                                grants.insert((
                                    scope.clone(),
                                    group.to_owned(),
                                    target.clone(),
                                    verb.to_owned(),
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    grants
}

fn grant(scope: &str, group: &str, resource: &str, verb: &str) -> Grant {
    (scope.into(), group.into(), resource.into(), verb.into())
}

#[test]
fn the_calico_overlay_grants_calicos_tiers_events_and_its_lease_only() {
    let Some(docs) = render(&overlay()) else {
        return;
    };
    let tiers = CalicoApi::default().resource();
    let mut expected: BTreeSet<Grant> = ["get", "list", "watch", "create", "update"]
        .into_iter()
        .map(|verb| grant("", &tiers.group, &tiers.plural, verb))
        .collect();
    for group in ["", "events.k8s.io"] {
        for verb in ["create", "patch"] {
            expected.insert(grant("default", group, "events", verb));
            // Events about the leader election Lease, in tierd's namespace.
            expected.insert(grant("kube-system", group, "events", verb));
        }
    }
    expected.insert(grant(
        "kube-system",
        "coordination.k8s.io",
        "leases",
        "create",
    ));
    for verb in ["get", "update"] {
        expected.insert(grant(
            "kube-system",
            "coordination.k8s.io",
            "leases/tierd",
            verb,
        ));
    }
    assert_eq!(grants(&docs), expected);
    // And no role at all beyond these (nothing bound elsewhere, no metrics reader without
    // --metrics-auth).
    let roles: BTreeSet<&str> = ["Role", "ClusterRole"]
        .into_iter()
        .flat_map(|kind| kinds(&docs, kind))
        .map(|role| role["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        BTreeSet::from(["tierd", "tierd-events", "tierd-leader-election"])
    );
}

#[test]
fn the_calico_overlay_runs_tierd_in_calico_mode_without_a_webhook() {
    let Some(docs) = render(&overlay()) else {
        return;
    };
    for kind in [
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "CustomResourceDefinition",
        "Secret",
        "ConfigMap",
    ] {
        assert!(kinds(&docs, kind).is_empty(), "unexpected {kind}");
    }
    let services: Vec<&str> = kinds(&docs, "Service")
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(services, ["tierd-metrics"]);

    let container = container(&docs);
    let args = strings(&container["args"]);
    assert_eq!(args[0], "run");
    assert!(args.contains(&"--controller=calico"), "{args:?}");
    assert!(args.contains(&"--webhook-listen="), "{args:?}");
    for arg in &args {
        assert!(
            !arg.starts_with("--tls-") && !arg.starts_with("--self-signed"),
            "no certificate in Calico mode: {arg}"
        );
        assert!(!arg.contains("9443"), "{arg}");
    }
    for var in container["env"].as_sequence().unwrap() {
        let name = var["name"].as_str().unwrap();
        assert!(
            !name.starts_with("TIERD_SELF_SIGNED") && name != "TIERD_WEBHOOK_CONFIGURATION",
            "{name}"
        );
    }
    let ports: Vec<(&str, u64)> = container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports, [("probes", 8081), ("metrics", 8080)]);
    assert!(args.contains(&"--metrics-listen=0.0.0.0:8080"), "{args:?}");
    let pod = &get(&docs, "Deployment", "tierd")["spec"]["template"]["spec"];
    assert!(pod["volumes"].is_null(), "no volume: {:?}", pod["volumes"]);
    assert!(container["volumeMounts"].is_null());

    // The NetworkPolicy admits the metrics port (from monitoring) and nothing else.
    let policy = get(&docs, "NetworkPolicy", "tierd");
    let ingress = policy["spec"]["ingress"].as_sequence().unwrap();
    let admitted: Vec<&str> = ingress
        .iter()
        .flat_map(|rule| rule["ports"].as_sequence().unwrap())
        .map(|p| p["port"].as_str().unwrap())
        .collect();
    assert_eq!(admitted, ["metrics"]);
    let metrics = get(&docs, "Service", "tierd-metrics");
    assert_eq!(metrics["spec"]["ports"][0]["port"].as_u64(), Some(8080));
    assert_eq!(
        metrics["spec"]["ports"][0]["targetPort"].as_str(),
        Some("metrics")
    );
}

#[test]
fn the_calico_overlay_keeps_events_rbac_in_default_and_the_rest_in_its_namespace() {
    let Some(docs) = render(&overlay()) else {
        return;
    };
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        let namespace = doc["metadata"]["namespace"].as_str();
        match (kind, name) {
            ("ClusterRole" | "ClusterRoleBinding", _) => assert_eq!(namespace, None),
            ("Role" | "RoleBinding", "tierd-events") => {
                assert_eq!(namespace, Some("default"), "{kind} {name}");
            }
            _ => assert_eq!(namespace, Some("kube-system"), "{kind} {name}"),
        }
        for subject in doc["subjects"].as_sequence().into_iter().flatten() {
            assert_eq!(
                subject["namespace"].as_str(),
                Some("kube-system"),
                "{doc:?}"
            );
        }
    }
}
