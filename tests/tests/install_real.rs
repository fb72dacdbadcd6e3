//! The install, for real: each shape rendered from `deploy/` and applied to a real kube-apiserver
//! (tier-testcluster), accepted whole; tierd run as the shipped Deployment runs it, with a token
//! of its ServiceAccount and only the shipped RBAC; kube-apiserver calling tierd's webhook
//! through the shipped configuration (its `service` reference routed by kube-apiserver's egress
//! proxy, the caBundle tierd writes); the ValidatingAdmissionPolicy type-checked and holding
//! tierd's account to `caBundle`; and re-applying the install changing nothing tierd wrote.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use tier_testcluster::Options;
use tier_tests::real::{self, Apply, Install, NAMESPACE};

/// Antrea's six system Tiers and their priorities.
const ANTREA: [(&str, i64); 6] = [
    ("emergency", 50),
    ("securityops", 100),
    ("networkops", 150),
    ("platform", 200),
    ("application", 250),
    ("baseline", 253),
];

/// A change to a stored webhook configuration.
type Change = fn(&mut Value);

/// Every rendered object is stored (kubectl applied the shape whole).
fn accepted_whole(install: &Install) {
    let rendered: BTreeSet<String> = install
        .docs
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    let stored: BTreeSet<String> = install.stored().into_keys().collect();
    assert_eq!(rendered, stored);
}

/// A Tier object.
fn tier(name: &str, priority: i64) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "crd.antrea.io/v1beta1",
        "kind": "Tier",
        "metadata": {"name": name},
        "spec": {"priority": priority, "description": "a test's"},
    }))
    .unwrap()
}

/// The webhook configuration `tierd` as stored.
async fn webhook_configuration(install: &Install) -> Value {
    let api: Api<DynamicObject> = Api::all_with(
        install.cluster.client(),
        &kube::api::ApiResource::erase::<
            k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
        >(&()),
    );
    serde_json::to_value(api.get("tierd").await.unwrap()).unwrap()
}

/// The self-signed certificate Secret's data (base64, as stored).
async fn secret_data(install: &Install) -> Value {
    let api: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(install.cluster.client(), NAMESPACE);
    serde_json::to_value(api.get("tierd-self-signed-cert").await.unwrap()).unwrap()["data"].clone()
}

/// What tierd wrote: the Secret's data and the caBundle, once both are filled and agree.
async fn what_tierd_wrote(install: &Install) -> (Value, Value) {
    let last = std::sync::Mutex::new((Value::Null, Value::Null));
    let settled = real::eventually(|| async {
        let data = secret_data(install).await;
        let bundle =
            webhook_configuration(install).await["webhooks"][0]["clientConfig"]["caBundle"].clone();
        let filled = data["ca.crt"].as_str().is_some_and(|ca| !ca.is_empty());
        let agree = bundle == data["ca.crt"];
        *last.lock().unwrap() = (data, bundle);
        filled && agree
    })
    .await;
    let last = last.into_inner().unwrap();
    assert!(
        settled,
        "the Secret and the caBundle never settled: {last:?}"
    );
    last
}

/// `status.typeChecking` of the ValidatingAdmissionPolicy `name`, once the type checker has
/// run (kube-controller-manager's status controller fills it; kube-apiserver alone never does).
async fn type_checking(install: &Install, name: &str) -> Value {
    let api: Api<DynamicObject> = Api::all_with(
        install.cluster.client(),
        &kube::api::ApiResource::erase::<
            k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
        >(&()),
    );
    let last = std::sync::Mutex::new(Value::Null);
    let checked = real::eventually(|| async {
        let policy = api.get(name).await.unwrap();
        let status = policy.data["status"].clone();
        let done = status["typeChecking"].is_object()
            && status["observedGeneration"].as_i64() == policy.metadata.generation;
        *last.lock().unwrap() = status;
        done
    })
    .await;
    let status = last.into_inner().unwrap();
    assert!(checked, "the policy was never type-checked: {status}");
    status["typeChecking"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_install_runs_tierd_on_its_rbac_behind_its_own_webhook() {
    let Some(install) = Install::new_with(
        Options::default().controllers([real::TYPE_CHECKER]),
        &real::deploy(),
        &[],
        Apply::ServerSide,
    )
    .await
    else {
        return;
    };
    accepted_whole(&install);
    // The policy's CEL, checked against the ValidatingWebhookConfiguration schema: no warning.
    let checking = type_checking(&install, "tierd-webhook-ca-only").await;
    assert!(
        checking["expressionWarnings"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{checking}"
    );
    // And the check did run: the same policy with one field misspelled is warned about
    // (kube-apiserver skips the check, silently, when the rules name no exact kind).
    let mut control = install
        .docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .unwrap()
        .clone();
    control["metadata"] = json!({"name": "control"});
    let text = serde_json::to_string(&control)
        .unwrap()
        .replace("object.metadata.?labels ==", "object.metadata.?labelz ==");
    assert!(text.contains("labelz"));
    install.cluster.apply(&text).await.unwrap();
    let warned = type_checking(&install, "control").await;
    assert!(
        warned["expressionWarnings"]
            .to_string()
            .contains("undefined field 'labelz'"),
        "a misspelt field passed the type check: {warned}"
    );

    let webhook = real::free_addr();
    install.route_webhook(webhook).await;
    let tierd = install.run_tierd(Some(webhook)).await;
    assert!(
        install.has_antrea_tiers(&ANTREA).await,
        "the six Tiers never appeared: {:?}",
        tierd.tierd.logs()
    );
    what_tierd_wrote(&install).await;

    // kube-apiserver calls tierd's webhook, which denies a taken priority.
    let api = install.api(&real::antrea_tiers());
    let denied = api
        .create(&PostParams::default(), &tier("mine", 50))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = denied else {
        panic!("{denied:?}")
    };
    assert!(
        status
            .message
            .contains(r#"admission webhook "tiervalidator.tierd.io" denied the request"#)
            && status.message.contains("overlaps with existing Tier"),
        "{status:?}"
    );
    // And admits a free one.
    api.create(&PostParams::default(), &tier("mine", 10))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tierds_account_may_change_only_the_ca_bundle_of_its_webhook_configuration() {
    let Some(install) = Install::new_with(
        Options::default().controllers([real::TYPE_CHECKER]),
        &real::deploy(),
        &[],
        Apply::ServerSide,
    )
    .await
    else {
        return;
    };
    type_checking(&install, "tierd-webhook-ca-only").await;
    let token = install
        .cluster
        .token(NAMESPACE, real::ACCOUNT)
        .await
        .unwrap();
    let as_tierd = install.cluster.token_client(&token).await.unwrap();
    let resource = kube::api::ApiResource::erase::<
        k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    >(&());
    let tierds: Api<DynamicObject> = Api::all_with(as_tierd, &resource);
    let admins: Api<DynamicObject> = Api::all_with(install.cluster.client(), &resource);

    // Each change but caBundle is refused by the policy (which the server loads in the
    // background: an update admitted before it did is put back and tried again).
    let changes: [(&str, Change); 4] = [
        ("timeoutSeconds", |c| {
            c["webhooks"][0]["timeoutSeconds"] = json!(30)
        }),
        ("failurePolicy", |c| {
            c["webhooks"][0]["failurePolicy"] = json!("Ignore")
        }),
        ("rules", |c| {
            c["webhooks"][0]["rules"][0]["operations"] = json!(["CREATE"])
        }),
        ("labels", |c| {
            c["metadata"]["labels"] = json!({"owner": "tierd"})
        }),
    ];
    for (what, change) in changes {
        let refused = real::eventually(|| async {
            let original = admins.get("tierd").await.unwrap();
            let mut changed = serde_json::to_value(&original).unwrap();
            change(&mut changed);
            let changed: DynamicObject = serde_json::from_value(changed).unwrap();
            match tierds
                .replace("tierd", &PostParams::default(), &changed)
                .await
            {
                Err(kube::Error::Api(status)) => {
                    assert!(
                        status.message.contains("tierd may"),
                        "{what}: refused, but not by the policy: {status:?}"
                    );
                    true
                }
                Err(e) => panic!("{what}: {e}"),
                Ok(stored) => {
                    let mut back = serde_json::to_value(&original).unwrap();
                    back["metadata"]["resourceVersion"] = json!(stored.metadata.resource_version);
                    admins
                        .replace(
                            "tierd",
                            &PostParams::default(),
                            &serde_json::from_value(back).unwrap(),
                        )
                        .await
                        .unwrap();
                    false
                }
            }
        })
        .await;
        assert!(refused, "tierd's account changed {what}");
    }

    // caBundle alone is allowed.
    let mut configuration = serde_json::to_value(admins.get("tierd").await.unwrap()).unwrap();
    configuration["webhooks"][0]["clientConfig"]["caBundle"] = json!("Q0E=");
    tierds
        .replace(
            "tierd",
            &PostParams::default(),
            &serde_json::from_value(configuration).unwrap(),
        )
        .await
        .unwrap();

    // Another webhook configuration is out of reach of its RBAC.
    let mut other = serde_json::to_value(admins.get("tierd").await.unwrap()).unwrap();
    other["metadata"] = json!({"name": "other"});
    admins
        .create(
            &PostParams::default(),
            &serde_json::from_value(other).unwrap(),
        )
        .await
        .unwrap();
    let mut other = serde_json::to_value(admins.get("other").await.unwrap()).unwrap();
    other["webhooks"][0]["clientConfig"]["caBundle"] = json!("Q0E=");
    let denied = tierds
        .replace(
            "other",
            &PostParams::default(),
            &serde_json::from_value(other).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&denied, kube::Error::Api(s) if s.code == 403),
        "{denied:?}"
    );
}

/// Installs the standalone shape the `first` way, lets tierd fill its Secret and caBundle,
/// re-applies it each of the `again` ways and checks that nothing tierd wrote changed and the
/// webhook still answers.
async fn reapplying_changes_nothing(first: Apply, again: &[Apply]) {
    let Some(install) = Install::new(&real::deploy(), &[], first).await else {
        return;
    };
    let webhook = real::free_addr();
    install.route_webhook(webhook).await;
    let tierd = install.run_tierd(Some(webhook)).await;
    assert!(
        install.has_antrea_tiers(&ANTREA).await,
        "{:?}",
        tierd.tierd.logs()
    );
    let (data, bundle) = what_tierd_wrote(&install).await;
    // tierd's writes name it: a conflict over them would say "tierd", not "unknown".
    assert_eq!(manager_of(&install, "Secret", "f:data").await, "tierd");
    assert_eq!(
        manager_of(&install, "ValidatingWebhookConfiguration", "f:caBundle").await,
        "tierd"
    );
    let api = install.api(&real::antrea_tiers());
    for (i, how) in again.iter().enumerate() {
        let (ok, output) = install.apply(*how);
        assert!(ok, "re-applying {how:?} failed:\n{output}");
        assert_eq!(
            secret_data(&install).await,
            data,
            "{how:?} changed the Secret"
        );
        let now = webhook_configuration(&install).await["webhooks"][0]["clientConfig"]["caBundle"]
            .clone();
        assert_eq!(now, bundle, "{how:?} changed the caBundle");
        // The webhook still answers through the same caBundle.
        let name = format!("after-{i}");
        api.create(
            &PostParams::default(),
            &tier(&name, 10 + i64::try_from(i).unwrap()),
        )
        .await
        .unwrap_or_else(|e| panic!("a Tier create after {how:?}: {e}"));
    }
}

/// The field manager whose `managedFields` entry holds `field` in tierd's Secret or webhook
/// configuration (`kind`).
async fn manager_of(install: &Install, kind: &str, field: &str) -> String {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::Secret;
    let client = install.cluster.client();
    let metadata = match kind {
        "Secret" => {
            Api::<Secret>::namespaced(client, NAMESPACE)
                .get("tierd-self-signed-cert")
                .await
                .unwrap()
                .metadata
        }
        _ => {
            Api::<ValidatingWebhookConfiguration>::all(client)
                .get("tierd")
                .await
                .unwrap()
                .metadata
        }
    };
    let entries = metadata.managed_fields.unwrap_or_default();
    entries
        .iter()
        .find(|e| serde_json::to_string(&e.fields_v1).unwrap().contains(field))
        .and_then(|e| e.manager.clone())
        .unwrap_or_else(|| panic!("no manager of {field}: {entries:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reapplying_client_side_changes_nothing_tierd_wrote() {
    reapplying_changes_nothing(
        Apply::ClientSide,
        &[Apply::ClientSide, Apply::ServerSideForced],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reapplying_server_side_changes_nothing_tierd_wrote() {
    reapplying_changes_nothing(
        Apply::ServerSide,
        &[
            Apply::ServerSide,
            Apply::ServerSideForced,
            Apply::ClientSide,
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_antrea_tierd_ensures_the_organisations_tiers_on_antreas_crd() {
    let crd = include_str!("../../crates/tier-kube/tests/fixtures/antrea-tier-crd.yaml");
    let shape = real::deploy().join("overlays/beside-antrea");
    let Some(install) = Install::new(&shape, &[crd], Apply::ServerSide).await else {
        return;
    };
    accepted_whole(&install);
    let tierd = install.run_tierd(None).await;
    assert!(
        install
            .has_antrea_tiers(&[
                ("org-incident", 20),
                ("org-security", 90),
                ("org-tenants", 230)
            ])
            .await,
        "{:?}",
        tierd.tierd.logs()
    );
    let data = secret_data(&install).await;
    assert!(
        data["tls.crt"].as_str().is_some_and(|c| !c.is_empty()),
        "the Secret was not filled: {data}"
    );
}

/// A minimal `tiers.projectcalico.org` CRD at v3 (the fields tierd reads and writes; Calico's
/// own CRD adds CEL rules for the built-in Tiers).
const CALICO_TIER_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: tiers.projectcalico.org
spec:
  group: projectcalico.org
  names: {kind: Tier, listKind: TierList, plural: tiers, singular: tier}
  scope: Cluster
  versions:
    - name: v3
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                order: {type: number, nullable: true}
                defaultAction: {type: string, enum: [Deny, Pass]}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calico_tierd_ensures_calicos_three_tiers_on_its_rbac() {
    let shape = real::deploy().join("overlays/calico");
    let Some(install) = Install::new(&shape, &[CALICO_TIER_CRD], Apply::ServerSide).await else {
        return;
    };
    accepted_whole(&install);
    let tierd = install.run_tierd(None).await;
    let api = install.api(&real::calico_tiers());
    let wanted = [
        ("kube-admin", 1000.0, "Pass"),
        ("default", 1_000_000.0, "Deny"),
        ("kube-baseline", 10_000_000.0, "Pass"),
    ];
    let present = real::eventually(|| async {
        let Ok(list) = api.list(&Default::default()).await else {
            return false;
        };
        wanted.iter().all(|(name, order, action)| {
            list.items.iter().any(|t| {
                t.metadata.name.as_deref() == Some(name)
                    && t.data["spec"]["order"].as_f64() == Some(*order)
                    && t.data["spec"]["defaultAction"] == *action
            })
        })
    })
    .await;
    assert!(present, "{:?}", tierd.tierd.logs());
}

/// A minimal `prometheusrules.monitoring.coreos.com` CRD (the Prometheus Operator's, its
/// schema left open).
const PROMETHEUS_RULE_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: prometheusrules.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: PrometheusRule, listKind: PrometheusRuleList, plural: prometheusrules, singular: prometheusrule}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alerts_component_applies_beside_the_standalone_install() {
    // A consumer's kustomization adding the component (kustomize wants relative paths).
    let dir = tempfile::tempdir().unwrap();
    let deploy = real::deploy();
    let path = dir.path().canonicalize().unwrap();
    std::fs::write(
        path.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\n\
             components:\n  - {}\n",
            real::relative(&path, &deploy).display(),
            real::relative(&path, &deploy.join("components/alerts")).display(),
        ),
    )
    .unwrap();
    let Some(install) = Install::new(dir.path(), &[PROMETHEUS_RULE_CRD], Apply::ServerSide).await
    else {
        return;
    };
    accepted_whole(&install);
    assert!(
        install.docs.iter().any(|d| d["kind"] == "PrometheusRule"),
        "the component rendered no PrometheusRule"
    );
}

/// The files docs/SECURITY.md tells an operator to give kube-apiserver (`{dir}`: its run
/// directory), for a client certificate to tierd's webhook.
fn documented_admission_configuration(client: &tier_testcluster::pki::Pair) -> Options {
    Options::default()
        .file(
            "admission.yaml",
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n  \
             - name: ValidatingAdmissionWebhook\n    configuration:\n      apiVersion: \
             apiserver.config.k8s.io/v1\n      kind: WebhookAdmissionConfiguration\n      \
             kubeConfigFile: {dir}/webhook-kubeconfig.yaml\n",
        )
        .file(
            "webhook-kubeconfig.yaml",
            "apiVersion: v1\nkind: Config\nusers:\n  - name: tierd.kube-system.svc\n    user:\n      \
             client-certificate: {dir}/tierd-client.crt\n      client-key: {dir}/tierd-client.key\n",
        )
        .file("tierd-client.crt", client.cert_pem.clone())
        .file("tierd-client.key", client.key_pem.clone())
        .apiserver_arg("--admission-control-config-file={dir}/admission.yaml")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_presents_the_documented_client_certificate_to_tierds_webhook() {
    let authority = tier_testcluster::pki::Authority::new("webhook client CA").unwrap();
    let client = authority.client("kube-apiserver", &[]).unwrap();
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), &authority.pair.cert_pem).unwrap();
    let ca = ca.path().display().to_string();
    let client_ca = [
        "--client-ca",
        ca.as_str(),
        "--client-names",
        "kube-apiserver",
    ];

    // With the documented configuration, tierd's creates pass its own webhook and a taken
    // priority is denied by it.
    let Some(install) = Install::new_with(
        documented_admission_configuration(&client),
        &real::deploy(),
        &[],
        Apply::ServerSide,
    )
    .await
    else {
        return;
    };
    let webhook = real::free_addr();
    install.route_webhook(webhook).await;
    let tierd = install.run_tierd_with(Some(webhook), &client_ca).await;
    assert!(
        install.has_antrea_tiers(&ANTREA).await,
        "{:?}",
        tierd.tierd.logs()
    );
    let api = install.api(&real::antrea_tiers());
    let denied = api
        .create(&PostParams::default(), &tier("mine", 50))
        .await
        .unwrap_err();
    assert!(
        denied.to_string().contains("overlaps with existing Tier"),
        "{denied}"
    );
    drop((tierd, install));

    // Without it kube-apiserver presents no certificate: the handshake fails, so does the call.
    let Some(install) = Install::new(&real::deploy(), &[], Apply::ServerSide).await else {
        return;
    };
    let webhook = real::free_addr();
    install.route_webhook(webhook).await;
    let _tierd = install.run_tierd_with(Some(webhook), &client_ca).await;
    what_tierd_wrote(&install).await;
    let api = install.api(&real::antrea_tiers());
    let refused = real::eventually(|| async {
        api.create(&PostParams::default(), &tier("mine", 10))
            .await
            .is_err_and(|e| e.to_string().contains("failed calling webhook"))
    })
    .await;
    assert!(
        refused,
        "the webhook answered a caller without a certificate"
    );
}
