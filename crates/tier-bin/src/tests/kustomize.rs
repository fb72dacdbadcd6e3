//! The two install shapes render with `kubectl kustomize` (offline) and hold what they promise:
//! standalone (`deploy/`: CRD, webhook, self-signed certificate) and beside Antrea
//! (`deploy/overlays/beside-antrea`: no CRD, no webhook, an organisation's Tiers). Where no
//! `kubectl` is found the tests say so and check the kustomizations' structure only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::Cli;
use clap::CommandFactory;
use serde::Deserialize;
use serde_yaml::Value;

/// The `deploy/` directory of the repository.
pub(super) fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .canonicalize()
        .unwrap()
}

fn kubectl() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|candidate| candidate.is_file())
}

/// The non-empty YAML documents of `text`.
pub(super) fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// `kubectl kustomize dir`, or None (said on stderr) without kubectl.
fn render(dir: &Path) -> Option<Vec<Value>> {
    render_text(dir).map(|text| documents(&text))
}

/// `kubectl kustomize dir` as text, or None (said on stderr) without kubectl.
fn render_text(dir: &Path) -> Option<String> {
    let Some(kubectl) = kubectl() else {
        eprintln!(
            "no kubectl on PATH: not rendering {}; checking its structure only",
            dir.display()
        );
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
    Some(String::from_utf8(output.stdout).unwrap())
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
}

fn get<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    find(docs, kind, name).unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn container(docs: &[Value]) -> &Value {
    &get(docs, "Deployment", "tierd")["spec"]["template"]["spec"]["containers"][0]
}

fn env<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"].as_str() == Some(name))
        .map(|e| e["value"].as_str().unwrap_or_default())
}

/// Every environment variable `tierd run` reads, from its clap definition.
fn run_env_vars() -> BTreeSet<String> {
    let command = Cli::command();
    let run = command.find_subcommand("run").unwrap();
    run.get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect()
}

/// What every rendering must satisfy: the Deployment's arguments parse, each environment
/// variable it sets is one tierd reads, and namespaced objects sit in `namespace`.
fn common_checks(docs: &[Value], namespace: &str) {
    let container = container(docs);
    let args = std::iter::once("tierd").chain(
        container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap()),
    );
    let args: Vec<&str> = args.collect();
    if let Err(e) = <Cli as clap::Parser>::try_parse_from(&args) {
        panic!("the Deployment's arguments {args:?} do not parse: {e}");
    }
    let known = run_env_vars();
    for var in container["env"].as_sequence().unwrap() {
        let name = var["name"].as_str().unwrap();
        assert!(
            known.contains(name),
            "the Deployment sets {name}, which tierd does not read (it reads {known:?})"
        );
    }
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap();
        // kustomize does not know the admission policies are cluster-scoped and gives them a
        // namespace, which the API server ignores for cluster-scoped objects.
        let cluster_scoped = [
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ];
        // Events about cluster-scoped Tiers are written in `default`: the Role that lets tierd
        // write them must be there, whatever namespace tierd runs in.
        let events_rbac = matches!(kind, "Role" | "RoleBinding")
            && doc["metadata"]["name"].as_str() == Some("tierd-events");
        if events_rbac {
            assert_eq!(
                doc["metadata"]["namespace"].as_str(),
                Some("default"),
                "{kind} tierd-events must stay where Events about Tiers are written"
            );
        } else if !cluster_scoped.contains(&kind) {
            assert_eq!(
                doc["metadata"]["namespace"].as_str(),
                Some(namespace),
                "{kind} {:?}",
                doc["metadata"]["name"]
            );
        }
        for subject in doc["subjects"].as_sequence().into_iter().flatten() {
            assert_eq!(subject["namespace"].as_str(), Some(namespace), "{doc:?}");
        }
    }
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap())
        .collect()
}

/// No Role or ClusterRole of the rendering grants `create` on Secrets, in any shape: a named
/// verb or `*`, the core group or `*`, `secrets` or `*`, with or without resourceNames
/// (Kubernetes ignores resourceNames for `create`).
fn no_create_on_secrets(docs: &[Value]) {
    for doc in docs {
        if !matches!(doc["kind"].as_str(), Some("Role" | "ClusterRole")) {
            continue;
        }
        for rule in doc["rules"].as_sequence().into_iter().flatten() {
            let groups = strings(&rule["apiGroups"]);
            let resources = strings(&rule["resources"]);
            let verbs = strings(&rule["verbs"]);
            let core = groups.iter().any(|g| g.is_empty() || *g == "*");
            let secrets = resources
                .iter()
                .any(|r| *r == "secrets" || *r == "*" || r.starts_with("secrets/"));
            let create = verbs.iter().any(|v| *v == "create" || *v == "*");
            assert!(
                !(core && secrets && create),
                "{} {:?} grants create on Secrets: {rule:?}",
                doc["kind"].as_str().unwrap(),
                doc["metadata"]["name"]
            );
        }
    }
}

/// The self-signed certificate's access: `get` and `update` on the one shipped Secret, Events,
/// nothing else; and the Secret itself shipped with no data, of type Opaque.
fn self_signed_rbac(docs: &[Value]) {
    no_create_on_secrets(docs);
    let role = get(docs, "Role", "tierd-self-signed-cert");
    let rules = role["rules"].as_sequence().unwrap();
    let secret_rules: Vec<&Value> = rules
        .iter()
        .filter(|r| strings(&r["resources"]).contains(&"secrets"))
        .collect();
    assert_eq!(secret_rules.len(), 1, "{rules:?}");
    let named = secret_rules[0];
    assert_eq!(strings(&named["resourceNames"]), ["tierd-self-signed-cert"]);
    assert_eq!(strings(&named["verbs"]), ["get", "update"]);
    for rule in rules {
        let resources = strings(&rule["resources"]);
        assert!(
            resources == ["secrets"] || resources == ["events"],
            "unexpected rule {rule:?}"
        );
    }
    // No data at all: a re-apply of the install then has nothing to put back over what tierd
    // wrote (an empty `tls.crt: ""` would blank it). Opaque, as kube-apiserver refuses a
    // kubernetes.io/tls Secret without tls.crt and tls.key.
    let secret = get(docs, "Secret", "tierd-self-signed-cert");
    assert_eq!(secret["type"].as_str(), Some("Opaque"));
    assert!(secret["data"].is_null(), "shipped with data: {secret:?}");
    assert!(
        secret["stringData"].is_null(),
        "shipped with data: {secret:?}"
    );
    let container = container(docs);
    assert_eq!(
        env(container, "TIERD_SELF_SIGNED_CERT_SECRET"),
        secret["metadata"]["name"].as_str()
    );
}

/// Whether a rule's `values` covers `want` (by name or `*`).
fn covers(values: &[&str], want: &str) -> bool {
    values.iter().any(|v| *v == want || *v == "*")
}

/// No ClusterRole grants anything on Leases (tierd's Leases live in its namespace), and no Role
/// grants `update`, `patch` or `delete` on Leases other than by name: in kube-system that would
/// let tierd take over kube-scheduler's or kube-controller-manager's leader Leases.
fn leases_only_by_name(docs: &[Value]) {
    for doc in docs {
        let kind = doc["kind"].as_str();
        if !matches!(kind, Some("Role" | "ClusterRole")) {
            continue;
        }
        for rule in doc["rules"].as_sequence().into_iter().flatten() {
            let leases = covers(&strings(&rule["apiGroups"]), "coordination.k8s.io")
                && covers(&strings(&rule["resources"]), "leases");
            if !leases {
                continue;
            }
            assert_ne!(
                kind,
                Some("ClusterRole"),
                "Leases in a ClusterRole: {doc:?}"
            );
            let verbs = strings(&rule["verbs"]);
            let changes = ["update", "patch", "delete", "deletecollection"]
                .iter()
                .any(|v| covers(&verbs, v));
            assert!(
                !changes || !strings(&rule["resourceNames"]).is_empty(),
                "changes every Lease of the namespace: {rule:?}"
            );
        }
    }
}

/// `--priority-claims`: on, and its access exactly `get` and `update` on the claims' Lease (the
/// name the code uses) and `create` on Leases, in tierd's namespace, bound to its service
/// account.
fn priority_claims_rbac(docs: &[Value], namespace: &str) {
    leases_only_by_name(docs);
    let container = container(docs);
    assert_eq!(env(container, "TIERD_PRIORITY_CLAIMS"), Some("true"));
    let role = get(docs, "Role", "tierd-priority-claims");
    assert_eq!(role["metadata"]["namespace"].as_str(), Some(namespace));
    let rules = role["rules"].as_sequence().unwrap();
    assert_eq!(rules.len(), 2, "{rules:?}");
    for rule in rules {
        assert_eq!(strings(&rule["apiGroups"]), ["coordination.k8s.io"]);
        assert_eq!(strings(&rule["resources"]), ["leases"]);
    }
    assert_eq!(
        strings(&rules[0]["resourceNames"]),
        [tier_kube::claims::DEFAULT_LEASE]
    );
    assert_eq!(strings(&rules[0]["verbs"]), ["get", "update"]);
    assert!(rules[1]["resourceNames"].is_null());
    assert_eq!(strings(&rules[1]["verbs"]), ["create"]);
    let binding = get(docs, "RoleBinding", "tierd-priority-claims");
    assert_eq!(binding["metadata"]["namespace"].as_str(), Some(namespace));
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("Role"));
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let account = find_kind(docs, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap();
    assert_eq!(
        binding["subjects"][0]["kind"].as_str(),
        Some("ServiceAccount")
    );
    assert_eq!(binding["subjects"][0]["name"].as_str(), Some(account));
    assert_eq!(
        binding["subjects"][0]["namespace"].as_str(),
        Some(namespace)
    );
}

/// The ValidatingAdmissionPolicy and its binding: tierd's service account may change only the
/// `caBundle` of its own webhook configuration.
fn ca_bundle_only_policy(docs: &[Value]) {
    let configuration = find_kind(docs, "ValidatingWebhookConfiguration");
    let configuration = configuration["metadata"]["name"].as_str().unwrap();
    let account = find_kind(docs, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap();
    let policy = get(docs, "ValidatingAdmissionPolicy", "tierd-webhook-ca-only");
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"].as_str(), Some("Fail"));
    let rules = spec["matchConstraints"]["resourceRules"]
        .as_sequence()
        .unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        strings(&rules[0]["apiGroups"]),
        ["admissionregistration.k8s.io"]
    );
    assert_eq!(
        strings(&rules[0]["resources"]),
        ["validatingwebhookconfigurations"]
    );
    assert_eq!(strings(&rules[0]["operations"]), ["UPDATE"]);
    assert_eq!(strings(&rules[0]["resourceNames"]), [configuration]);
    // kube-apiserver's type check of the expressions gives up at a wildcard group, version or
    // resource (the policy then shows an empty status.typeChecking, checked by nobody).
    assert_eq!(strings(&rules[0]["apiVersions"]), ["v1"]);
    assert!(spec["matchPolicy"].is_null() || spec["matchPolicy"].as_str() == Some("Equivalent"));
    // Only tierd's service account is held to it.
    let conditions = spec["matchConditions"].as_sequence().unwrap();
    assert_eq!(conditions.len(), 1);
    let who = conditions[0]["expression"].as_str().unwrap();
    assert!(who.contains("'system:serviceaccount:'"), "{who}");
    assert!(who.contains(&format!("endsWith(':{account}')")), "{who}");
    // Every webhook field but caBundle is compared, and the metadata people rely on.
    let validations: String = spec["validations"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v["expression"].as_str().unwrap().to_owned())
        .collect();
    assert!(!validations.contains("caBundle"), "{validations}");
    for field in [
        "variables.after.size() == variables.before.size()",
        "o.name == w.name",
        "o.?admissionReviewVersions == w.?admissionReviewVersions",
        "o.clientConfig.?service == w.clientConfig.?service",
        "o.clientConfig.?url == w.clientConfig.?url",
        "o.?failurePolicy == w.?failurePolicy",
        "o.?matchConditions == w.?matchConditions",
        "o.?matchPolicy == w.?matchPolicy",
        "o.?namespaceSelector == w.?namespaceSelector",
        "o.?objectSelector == w.?objectSelector",
        "o.?rules == w.?rules",
        "o.?sideEffects == w.?sideEffects",
        "o.?timeoutSeconds == w.?timeoutSeconds",
        "object.metadata.?labels == oldObject.metadata.?labels",
        "object.metadata.?annotations == oldObject.metadata.?annotations",
    ] {
        assert!(
            validations.contains(field),
            "{field} not compared: {validations}"
        );
    }
    let binding = get(
        docs,
        "ValidatingAdmissionPolicyBinding",
        "tierd-webhook-ca-only",
    );
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(strings(&binding["spec"]["validationActions"]), ["Deny"]);
}

/// `--leader-elect` is on, with its identity and namespace from the downward API, and the only
/// access to Leases is `get`, `create` and `update` in tierd's own namespace (with the Events
/// about the Lease there), bound to tierd's service account.
fn leader_election(docs: &[Value], namespace: &str) {
    let container = container(docs);
    let args: Vec<&str> = std::iter::once("tierd")
        .chain(strings(&container["args"]))
        .collect();
    let cli = <Cli as clap::Parser>::try_parse_from(&args).unwrap();
    let crate::cli::Command::Run(run) = cli.command else {
        panic!("not run");
    };
    assert!(
        run.leader_elect.leader_elect,
        "--leader-elect is off: {args:?}"
    );
    // The identity and the Lease's namespace come from the downward API.
    for (var, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let entry = container["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|e| e["name"].as_str() == Some(var))
            .unwrap_or_else(|| panic!("no {var}"));
        assert_eq!(
            entry["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            Some(field)
        );
    }
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--leader-elect-resource-namespace")),
        "the Lease's namespace is the pod's: {args:?}"
    );
    let role = get(docs, "Role", "tierd-leader-election");
    assert_eq!(role["metadata"]["namespace"].as_str(), Some(namespace));
    let rules = role["rules"].as_sequence().unwrap();
    assert_eq!(rules.len(), 3, "{rules:?}");
    assert_eq!(strings(&rules[0]["apiGroups"]), ["coordination.k8s.io"]);
    assert_eq!(strings(&rules[0]["resources"]), ["leases"]);
    assert_eq!(strings(&rules[0]["verbs"]), ["create"]);
    assert_eq!(strings(&rules[1]["resources"]), ["leases"]);
    assert_eq!(
        strings(&rules[1]["resourceNames"]),
        [run.leader_elect.leader_elect_resource_name.as_str()]
    );
    assert_eq!(strings(&rules[1]["verbs"]), ["get", "update"]);
    assert_eq!(strings(&rules[2]["resources"]), ["events"]);
    assert_eq!(strings(&rules[2]["verbs"]), ["create", "patch"]);
    let binding = get(docs, "RoleBinding", "tierd-leader-election");
    assert_eq!(binding["metadata"]["namespace"].as_str(), Some(namespace));
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("Role"));
    assert_eq!(
        binding["roleRef"]["name"].as_str(),
        Some("tierd-leader-election")
    );
    let account = find_kind(docs, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap();
    assert_eq!(
        binding["subjects"][0]["kind"].as_str(),
        Some("ServiceAccount")
    );
    assert_eq!(binding["subjects"][0]["name"].as_str(), Some(account));
    assert_eq!(
        binding["subjects"][0]["namespace"].as_str(),
        Some(namespace)
    );
    // Nothing else grants anything on Leases, by name or by wildcard (but the priority claims'
    // Role, checked by `priority_claims_rbac`).
    for doc in docs {
        if !matches!(doc["kind"].as_str(), Some("Role" | "ClusterRole"))
            || matches!(
                doc["metadata"]["name"].as_str(),
                Some("tierd-leader-election" | "tierd-priority-claims")
            )
        {
            continue;
        }
        for rule in doc["rules"].as_sequence().into_iter().flatten() {
            let groups = strings(&rule["apiGroups"]);
            let resources = strings(&rule["resources"]);
            assert!(
                !(groups
                    .iter()
                    .any(|g| *g == "coordination.k8s.io" || *g == "*")
                    && resources.iter().any(|r| *r == "leases" || *r == "*")),
                "{:?} grants Leases: {rule:?}",
                doc["metadata"]["name"]
            );
        }
    }
}

fn find_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn standalone_installs_the_crd_the_webhook_and_a_self_signed_certificate() {
    check_structure(&deploy());
    let Some(docs) = render(&deploy()) else {
        return;
    };
    common_checks(&docs, "kube-system");
    let crd = get(&docs, "CustomResourceDefinition", "tiers.crd.antrea.io");
    let ours: Value = serde_yaml::from_str(&crate::commands::crd().unwrap()).unwrap();
    assert_eq!(*crd, ours, "the rendered CRD is `tierd crd`");
    let hook = &get(&docs, "ValidatingWebhookConfiguration", "tierd")["webhooks"][0];
    assert_eq!(
        hook["clientConfig"]["service"]["namespace"].as_str(),
        Some("kube-system")
    );
    // tierd writes the caBundle: the install leaves it out, so a re-apply cannot blank it.
    assert!(
        hook["clientConfig"].get("caBundle").is_none(),
        "the install ships a caBundle: {hook:?}"
    );
    let container = container(&docs);
    assert_eq!(env(container, "TIERD_SELF_SIGNED_CERT"), Some("true"));
    assert_eq!(env(container, "TIERD_WEBHOOK_CONFIGURATION"), Some("tierd"));
    assert_eq!(container["image"].as_str(), Some("tierd:0.1.0"));
    let pod = &get(&docs, "Deployment", "tierd")["spec"]["template"]["spec"];
    let tls = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"].as_str() == Some("tls"))
        .unwrap();
    assert!(
        tls["secret"].is_null(),
        "no hand-made Secret needed: {tls:?}"
    );
    assert_eq!(tls["emptyDir"]["medium"].as_str(), Some("Memory"));
    self_signed_rbac(&docs);
    ca_bundle_only_policy(&docs);
    leader_election(&docs, "kube-system");
    priority_claims_rbac(&docs, "kube-system");
    let webhook_role = get(&docs, "ClusterRole", "tierd-webhook-ca");
    assert_eq!(
        webhook_role["rules"][0]["resourceNames"][0].as_str(),
        Some("tierd")
    );
}

#[test]
fn beside_antrea_installs_no_crd_no_webhook_and_ensures_the_organisations_tiers() {
    let dir = deploy().join("overlays/beside-antrea");
    check_structure(&dir);
    // The Tiers file shipped in the overlay is valid for tierd.
    let tiers = std::fs::read_to_string(dir.join("tiers.yaml")).unwrap();
    let desired = tierd::tiers_file::parse(&tiers).unwrap();
    for tier in desired.tiers() {
        assert!(
            antrea_free(tier.priority),
            "{} takes an Antrea priority",
            tier.name
        );
    }
    let Some(text) = render_text(&dir) else {
        return;
    };
    let docs = documents(&text);
    common_checks(&docs, "kube-system");
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(!kinds.contains("CustomResourceDefinition"), "{kinds:?}");
    assert!(!kinds.contains("ValidatingAdmissionPolicy"), "{kinds:?}");
    assert!(
        !kinds.contains("ValidatingAdmissionPolicyBinding"),
        "{kinds:?}"
    );
    assert!(
        !kinds.contains("ValidatingWebhookConfiguration"),
        "{kinds:?}"
    );
    assert!(find(&docs, "ClusterRole", "tierd-webhook-ca").is_none());
    // Antrea's webhook reviews Tiers here and reads no claims: none are made, no Lease access.
    leases_only_by_name(&docs);
    assert!(find(&docs, "Role", "tierd-priority-claims").is_none());
    let container = container(&docs);
    assert_eq!(env(container, "TIERD_PRIORITY_CLAIMS"), None);
    assert_eq!(env(container, "TIERD_WEBHOOK_CONFIGURATION"), Some(""));
    let tiers_path = env(container, "TIERD_TIERS").unwrap();
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| tiers_path.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("TIERD_TIERS lies in a mounted volume");
    let pod = &get(&docs, "Deployment", "tierd")["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    let map_name = volume["configMap"]["name"].as_str().unwrap();
    let map = get(&docs, "ConfigMap", map_name);
    let file = Path::new(tiers_path).file_name().unwrap().to_str().unwrap();
    assert_eq!(map["data"][file].as_str(), Some(tiers.as_str()));
    self_signed_rbac(&docs);
    leader_election(&docs, "kube-system");
    no_webhook_port(&text, &docs);
}

#[test]
fn the_calico_shape_elects_a_leader_too() {
    let dir = deploy().join("overlays/calico");
    check_structure(&dir);
    let Some(docs) = render(&dir) else {
        return;
    };
    common_checks(&docs, "kube-system");
    leader_election(&docs, "kube-system");
}

/// Beside Antrea nothing calls tierd's webhook: tierd listens for none (`--webhook-listen=`),
/// its pod declares no webhook port, no Service or NetworkPolicy rule leads to one, and 9443
/// appears nowhere.
fn no_webhook_port(text: &str, docs: &[Value]) {
    assert!(
        !text.contains("9443"),
        "9443 in the beside-Antrea shape:\n{text}"
    );
    let container = container(docs);
    let args: Vec<&str> = std::iter::once("tierd")
        .chain(strings(&container["args"]))
        .collect();
    assert!(args.contains(&"--webhook-listen="), "{args:?}");
    let cli = <Cli as clap::Parser>::try_parse_from(&args).unwrap();
    let crate::cli::Command::Run(run) = cli.command else {
        panic!("not run");
    };
    assert_eq!(run.listen, Some(crate::cli::Listen(None)));
    for port in container["ports"].as_sequence().into_iter().flatten() {
        assert_ne!(port["name"].as_str(), Some("webhook"), "{port:?}");
    }
    for doc in docs {
        match doc["kind"].as_str() {
            Some("Service") => {
                for port in doc["spec"]["ports"].as_sequence().into_iter().flatten() {
                    assert_ne!(port["targetPort"].as_str(), Some("webhook"), "{doc:?}");
                }
            }
            Some("NetworkPolicy") => {
                for rule in doc["spec"]["ingress"].as_sequence().into_iter().flatten() {
                    for port in rule["ports"].as_sequence().into_iter().flatten() {
                        assert_ne!(port["port"].as_str(), Some("webhook"), "{doc:?}");
                    }
                    assert!(
                        rule["from"].is_sequence(),
                        "a rule admitting every source: {rule:?}"
                    );
                }
            }
            _ => {}
        }
    }
}

/// Not one of Antrea's six system priorities, nor 220 (the upstream admin Tier's).
fn antrea_free(priority: i64) -> bool {
    ![50, 100, 150, 200, 220, 250, 253].contains(&priority)
}

#[test]
fn namespace_and_image_are_the_usual_kustomize_knobs() {
    // A consumer's kustomization elsewhere; kustomize wants a relative path to the base.
    let dir = std::env::temp_dir().join(format!("tierd-kustomize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: tierd-system\nresources:\n  - {}\nimages:\n  - name: tierd\n    \
             newName: registry.example/tierd\n    newTag: v9\ntransformers:\n  - {}\n",
            relative(&dir, &deploy()).display(),
            relative(&dir, &deploy().join("transformers/events-in-default")).display()
        ),
    )
    .unwrap();
    let rendered = render(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let Some(docs) = rendered else {
        return;
    };
    common_checks(&docs, "tierd-system");
    self_signed_rbac(&docs);
    ca_bundle_only_policy(&docs);
    leader_election(&docs, "tierd-system");
    priority_claims_rbac(&docs, "tierd-system");
    let container = container(&docs);
    assert_eq!(
        container["image"].as_str(),
        Some("registry.example/tierd:v9")
    );
    let hook = &get(&docs, "ValidatingWebhookConfiguration", "tierd")["webhooks"][0];
    assert_eq!(
        hook["clientConfig"]["service"]["namespace"].as_str(),
        Some("tierd-system")
    );
    // The controller user follows the namespace through the downward API.
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"--controller-user=system:serviceaccount:$(POD_NAMESPACE):tierd"),
        "{args:?}"
    );
    let namespace_env = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str() == Some("POD_NAMESPACE"))
        .unwrap();
    assert_eq!(
        namespace_env["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.namespace")
    );
}

/// `to` as a path relative to `from` (both absolute).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path = PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    for part in &to[common..] {
        path.push(part);
    }
    path
}

/// Without kubectl: every file a kustomization names exists, recursively, and each is YAML.
fn check_structure(dir: &Path) {
    let file = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let kustomization: Value = serde_yaml::from_str(&text).unwrap();
    let mut paths = Vec::new();
    for key in ["resources", "components"] {
        for entry in kustomization[key].as_sequence().into_iter().flatten() {
            paths.push(entry.as_str().unwrap().to_owned());
        }
    }
    for patch in kustomization["patches"].as_sequence().into_iter().flatten() {
        if let Some(path) = patch["path"].as_str() {
            paths.push(path.to_owned());
        }
    }
    for generator in kustomization["configMapGenerator"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        for file in generator["files"].as_sequence().into_iter().flatten() {
            paths.push(file.as_str().unwrap().to_owned());
        }
    }
    for path in paths {
        let target = dir.join(&path);
        assert!(
            target.exists(),
            "{} names {path}, which does not exist",
            file.display()
        );
        if target.is_dir() {
            check_structure(&target);
        } else {
            documents(&std::fs::read_to_string(&target).unwrap());
        }
    }
}
