//! The files in `deploy/` say what tierd needs and nothing more.

use std::path::PathBuf;

use crate::cli::Cli;
use clap::Parser;
use serde::Deserialize;
use serde_yaml::Value;

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
        crate::commands::crd().unwrap(),
        "regenerate with: cargo run -p tier-bin -- crd > deploy/crd.yaml"
    );
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn rbac_is_least_privilege() {
    let docs = documents("base/rbac.yaml");
    let role = named(&docs, "ClusterRole", "tierd");
    let rules = role["rules"].as_sequence().unwrap();
    assert_eq!(rules.len(), 4);
    assert_eq!(strings(&rules[0]["apiGroups"]), ["crd.antrea.io"]);
    assert_eq!(strings(&rules[0]["resources"]), ["tiers"]);
    assert_eq!(
        strings(&rules[0]["verbs"]),
        ["get", "list", "watch", "create", "update"]
    );
    // For --metrics-auth.
    assert_eq!(strings(&rules[2]["resources"]), ["tokenreviews"]);
    assert_eq!(strings(&rules[2]["verbs"]), ["create"]);
    assert_eq!(strings(&rules[3]["resources"]), ["subjectaccessreviews"]);
    assert_eq!(strings(&rules[3]["verbs"]), ["create"]);
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
    let binding = named(&docs, "ClusterRoleBinding", "tierd");
    assert_eq!(binding["subjects"][0]["name"].as_str(), Some("tierd"));
    assert_eq!(
        kind(&docs, "ServiceAccount")["metadata"]["name"].as_str(),
        Some("tierd")
    );

    // Events only where they are written: Tiers are cluster-scoped, so `default`.
    let events = kind(&docs, "Role");
    assert_eq!(events["metadata"]["namespace"].as_str(), Some("default"));
    let rules = events["rules"].as_sequence().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(strings(&rules[0]["resources"]), ["events"]);
    assert_eq!(strings(&rules[0]["verbs"]), ["create", "patch"]);
    let binding = kind(&docs, "RoleBinding");
    assert_eq!(binding["metadata"]["namespace"].as_str(), Some("default"));
    assert_eq!(binding["roleRef"]["name"], events["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"].as_str(), Some("tierd"));
    assert_eq!(
        binding["subjects"][0]["namespace"].as_str(),
        Some("kube-system")
    );
    for doc in &docs {
        if doc["kind"].as_str() == Some("ClusterRole") {
            let text = serde_yaml::to_string(doc).unwrap();
            assert!(!text.contains("events"), "Events in a ClusterRole: {text}");
        }
    }

    // Scrapers get /metrics from this ClusterRole.
    let reader = named(&docs, "ClusterRole", "tierd-metrics-reader");
    assert_eq!(
        strings(&reader["rules"][0]["nonResourceURLs"]),
        ["/metrics"]
    );
    assert_eq!(strings(&reader["rules"][0]["verbs"]), ["get"]);
}

/// The Deployment's container and its command line.
fn container() -> (Value, crate::cli::RunArgs) {
    let docs = documents("base/deployment.yaml");
    let pod = &kind(&docs, "Deployment")["spec"]["template"]["spec"];
    let container = pod["containers"][0].clone();
    let args = std::iter::once("tierd").chain(strings(&container["args"]));
    let cli = Cli::try_parse_from(args).unwrap();
    let crate::cli::Command::Run(args) = cli.command else {
        panic!("the Deployment does not run `tierd run`");
    };
    (container, args)
}

/// The container port named `name`.
fn container_port(container: &Value, name: &str) -> u64 {
    container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no container port {name}"))["containerPort"]
        .as_u64()
        .unwrap()
}

#[test]
fn the_deployment_is_probed_hardened_and_runs_a_valid_command_line() {
    let docs = documents("base/deployment.yaml");
    let pod = &kind(&docs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"].as_str(), Some("tierd"));
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    let (container, args) = container();
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(security["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert!(container["resources"]["requests"]["cpu"].is_string());
    assert!(container["resources"]["requests"]["memory"].is_string());

    // Each named port is the one tierd listens on for it.
    assert_eq!(
        container_port(&container, "webhook"),
        u64::from(
            <tier_core::Antrea as crate::controller::ControllerMode>::webhook_listen(&args)
                .unwrap()
                .expect("the base Deployment listens for the webhook")
                .port()
        )
    );
    assert_eq!(
        container_port(&container, "probes"),
        u64::from(args.probe_listen.port())
    );
    assert_eq!(
        container_port(&container, "metrics"),
        u64::from(args.metrics_listen.port())
    );
    // Metrics leave the pod only with authentication.
    assert!(args.metrics_auth || args.metrics_listen.ip().is_loopback());
    // Probes go to the plain probe port.
    for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path));
        assert_eq!(get["port"].as_str(), Some("probes"));
        assert_eq!(get["scheme"].as_str(), Some("HTTP"));
    }
}

#[test]
fn the_network_policy_admits_only_what_each_port_needs() {
    let docs = documents("base/networkpolicy.yaml");
    let policy = kind(&docs, "NetworkPolicy");
    let (container, _) = container();
    let pod_labels =
        &documents("base/deployment.yaml")[0]["spec"]["template"]["metadata"]["labels"];
    for (key, value) in policy["spec"]["podSelector"]["matchLabels"]
        .as_mapping()
        .unwrap()
    {
        assert_eq!(
            &pod_labels[key], value,
            "the policy does not select tierd's pods"
        );
    }
    assert_eq!(strings(&policy["spec"]["policyTypes"]), ["Ingress"]);
    let rules = policy["spec"]["ingress"].as_sequence().unwrap();
    let mut admitted = Vec::new();
    for rule in rules {
        for port in rule["ports"].as_sequence().unwrap() {
            let name = port["port"].as_str().unwrap();
            container_port(&container, name);
            admitted.push((name, rule["from"].is_sequence()));
        }
    }
    // The webhook from anywhere (kube-apiserver's address cannot be expressed), the metrics
    // from a selected namespace only, the probes from nowhere (the kubelet's node is always
    // admitted).
    admitted.sort_unstable();
    assert_eq!(admitted, [("metrics", true), ("webhook", false)]);
}

#[test]
fn the_webhook_reaches_tierd_through_its_service() {
    let service = documents("base/service.yaml");
    let service = named(&service, "Service", "tierd");
    assert_eq!(service["spec"]["ports"][0]["port"].as_u64(), Some(443));
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"].as_str(),
        Some("webhook")
    );
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

/// The Calico shape's `tierd run` arguments: the `replace` of the Deployment's args in its
/// kustomization patch.
fn calico_args() -> Vec<String> {
    let kustomization: Value =
        serde_yaml::from_str(&deploy("overlays/calico/kustomization.yaml")).unwrap();
    let patches = kustomization["patches"].as_sequence().unwrap();
    patches
        .iter()
        .filter_map(|p| p["patch"].as_str())
        .flat_map(|patch| serde_yaml::from_str::<Vec<Value>>(patch).unwrap())
        .find(|op| {
            op["op"].as_str() == Some("replace")
                && op["path"].as_str() == Some("/spec/template/spec/containers/0/args")
        })
        .map(|op| {
            strings(&op["value"])
                .into_iter()
                .map(str::to_owned)
                .collect()
        })
        .expect("the Calico overlay replaces tierd's args")
}

#[test]
fn the_calico_shape_runs_a_valid_calico_command_line_without_a_webhook() {
    use crate::controller::ControllerMode as _;

    let args = calico_args();
    let cli = Cli::try_parse_from(std::iter::once("tierd").chain(args.iter().map(String::as_str)))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let crate::cli::Command::Run(run) = cli.command else {
        panic!("the Calico shape does not run `tierd run`");
    };
    assert_eq!(run.cluster.controller, crate::cli::ControllerKind::Calico);
    // None of Antrea's webhook flags, which Calico mode refuses.
    assert_eq!(
        tier_core::calico::Calico::webhook_listen(&run).unwrap(),
        None,
        "{args:?}"
    );
    assert_eq!(
        tier_core::calico::Calico::desired(&run.cluster).unwrap(),
        tier_core::DesiredSet::<tier_core::calico::Calico>::calico()
    );
}

#[test]
fn leader_election_is_on_with_leases_in_tierds_namespace_only() {
    let (container, args) = container();
    assert!(args.leader_elect.leader_elect, "--leader-elect is off");
    let env: Vec<&str> = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        env.contains(&"POD_NAME") && env.contains(&"POD_NAMESPACE"),
        "{env:?}"
    );
    // The Calico shape replaces the args: it elects too.
    assert!(calico_args().iter().any(|a| a == "--leader-elect"));

    let docs = documents("base/leader-election.yaml");
    let role = named(&docs, "Role", "tierd-leader-election");
    let rules = role["rules"].as_sequence().unwrap();
    assert_eq!(strings(&rules[0]["apiGroups"]), ["coordination.k8s.io"]);
    assert_eq!(strings(&rules[0]["resources"]), ["leases"]);
    assert_eq!(strings(&rules[0]["verbs"]), ["create"]);
    assert_eq!(strings(&rules[1]["resourceNames"]), ["tierd"]);
    assert_eq!(strings(&rules[1]["verbs"]), ["get", "update"]);
    let binding = named(&docs, "RoleBinding", "tierd-leader-election");
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("Role"));
    assert_eq!(binding["subjects"][0]["name"].as_str(), Some("tierd"));
    // No ClusterRole of the base grants Leases.
    for doc in documents("base/rbac.yaml") {
        let text = serde_yaml::to_string(&doc).unwrap();
        assert!(!text.contains("leases"), "{text}");
    }
}
