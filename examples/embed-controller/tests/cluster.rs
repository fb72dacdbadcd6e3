//! The example controller, run as in production against a real kube-apiserver and etcd
//! (tier-testcluster) with the install's RBAC, through a fault proxy that counts its requests
//! (tier-faultproxy): it ensures Antrea's six Tiers, labels them, keeps its labels through
//! tierd's corrections, shares one Tier watch with tierd, and serves tierd's routes beside its
//! own; as the cluster's Tier webhook (kube-apiserver calls it through a second proxy that
//! terminates TLS), it lets a user delete an unreferenced Tier and admits exactly one of two
//! concurrent creates at one priority.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use base64::Engine as _;
use embed_controller::SEEN_LABEL;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use tier_core::TierLister;
use tier_faultproxy::{FaultProxy, Matcher, ProxyConfig, Verb};
use tier_kube::crd::Tier;
use tier_kube::lister::KubeLister;
use tier_testcluster::TestCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PATIENCE: Duration = Duration::from_secs(30);

/// The install's RBAC (tierd's ServiceAccount, its ClusterRole, its Events Role).
const INSTALL_RBAC: &str = include_str!("../../../deploy/base/rbac.yaml");

/// What the example controller needs beyond tierd's own grants: patching its label onto
/// Tiers; and alice, a user who manages her own Tiers.
const EXTRA_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: example-controller
rules:
  - apiGroups: ["crd.antrea.io"]
    resources: ["tiers"]
    verbs: ["patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: example-controller
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: example-controller
subjects:
  - kind: ServiceAccount
    name: tierd
    namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: tier-admin
rules:
  - apiGroups: ["crd.antrea.io"]
    resources: ["tiers"]
    verbs: ["get", "list", "watch", "create", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: alice
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: tier-admin
subjects:
  - kind: ServiceAccount
    name: alice
    namespace: kube-system
"#;

/// `GET path` over plain HTTP/1.1: (status code, body).
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: example\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let code = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// A real API server with the Tier CRD tier-kube renders and the RBAC above, and a proxy in
/// front of it.
struct World {
    cluster: TestCluster,
    proxy: FaultProxy,
    tiers: Api<Tier>,
}

impl World {
    async fn start() -> Self {
        let cluster = TestCluster::start().await.unwrap();
        cluster
            .apply(&tier_kube::crd::crd_yaml().unwrap())
            .await
            .unwrap();
        cluster.apply(INSTALL_RBAC).await.unwrap();
        cluster.apply(EXTRA_RBAC).await.unwrap();
        let proxy =
            FaultProxy::start(ProxyConfig::new(cluster.url()).upstream_ca_pem(cluster.ca_pem()))
                .await
                .unwrap();
        let tiers = Api::all(cluster.client());
        Self {
            cluster,
            proxy,
            tiers,
        }
    }

    /// A kube configuration for the ServiceAccount `kube-system/name`, through the proxy.
    async fn config_for(&self, name: &str) -> kube::Config {
        let token = self.cluster.token("kube-system", name).await.unwrap();
        let yaml = self.proxy.kubeconfig_yaml(name, Some(&token));
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap()
    }

    /// The stored Tier `name` as JSON (admin, straight to the server).
    async fn get(&self, name: &str) -> Option<serde_json::Value> {
        let tier = self.tiers.get_opt(name).await.unwrap()?;
        Some(serde_json::to_value(tier).unwrap())
    }

    /// Waits (bounded) until every one of the six system Tiers is stored with the label and
    /// satisfies `pred`, waking on every change the test's own lister sees.
    async fn until_stored(&self, watcher: &KubeLister, pred: impl Fn(&serde_json::Value) -> bool) {
        tokio::time::timeout(PATIENCE, async {
            loop {
                let generation = watcher.generation();
                let mut done = true;
                for t in tier_core::DesiredSet::antrea().tiers() {
                    let ok = self.get(&t.name).await.is_some_and(|obj| {
                        obj["metadata"]["labels"][SEEN_LABEL] == "true" && pred(&obj)
                    });
                    done &= ok;
                }
                if done {
                    return;
                }
                // Bounded: a change the observer missed is seen on the next tick.
                let _ =
                    tokio::time::timeout(Duration::from_millis(500), watcher.changed(generation))
                        .await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("never reached: {:?}", watcher.snapshot()));
    }
}

/// The ValidatingWebhookConfiguration that makes kube-apiserver call `url` (the second
/// proxy, which trusts `ca_pem`) for Tier creates, updates and deletes.
fn webhook_configuration(url: &str, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: tierd
webhooks:
  - name: tiervalidator.antrea.io
    clientConfig:
      url: {url}
      caBundle: {ca}
    rules:
      - apiGroups: ["crd.antrea.io"]
        apiVersions: ["v1beta1"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["tiers"]
        scope: Cluster
    failurePolicy: Fail
    sideEffects: None
    admissionReviewVersions: ["v1"]
    timeoutSeconds: 10
"#
    )
}

/// The example controller as the cluster's Tier webhook (kube-apiserver calls its
/// `/validate/tier`): alice deletes a Tier she created, and of her two concurrent creates at
/// one priority exactly one is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_webhook_serves_deletes_and_admits_one_of_two_creates() {
    let world = World::start().await;
    let config = world.config_for("tierd").await;
    let observer =
        KubeLister::start(tier_kube::client::client_from_config(config.clone()).unwrap()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(embed_controller::run(config, listener, async {
        let _ = stopped.await;
    }));
    world.until_stored(&observer, |_| true).await;
    // kube-apiserver calls webhooks over HTTPS only: a TLS-terminating proxy in front of the
    // controller's plain-HTTP server, trusted through the caBundle.
    let webhook = FaultProxy::start(ProxyConfig::new(format!("http://{addr}")))
        .await
        .unwrap();
    world
        .cluster
        .apply(&webhook_configuration(
            &format!("{}/validate/tier", webhook.url()),
            webhook.ca_pem(),
        ))
        .await
        .unwrap();

    let alice: Api<Tier> =
        Api::all(tier_kube::client::client_from_config(world.config_for("alice").await).unwrap());
    let tier = |name: &str, priority: i32| {
        Tier::new(
            name,
            tier_kube::crd::TierSpec {
                priority,
                description: None,
            },
        )
    };
    // A user Tier, created and deleted through the embedder's webhook. The webhook
    // configuration takes effect once kube-apiserver's informer has it: retry until it did.
    let deadline = Instant::now() + PATIENCE;
    loop {
        alice
            .create(&PostParams::default(), &tier("team-a", 10))
            .await
            .unwrap();
        if webhook
            .requests()
            .count(Matcher::any().at_path("/validate/tier"))
            > 0
        {
            break;
        }
        alice
            .delete("team-a", &DeleteParams::default())
            .await
            .unwrap();
        assert!(
            Instant::now() < deadline,
            "kube-apiserver never called the webhook"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // DELETE waits for the policy caches (a retryable refusal until they sync), then passes.
    let deadline = Instant::now() + PATIENCE;
    loop {
        match alice.delete("team-a", &DeleteParams::default()).await {
            Ok(_) => break,
            Err(error) => assert!(Instant::now() < deadline, "never deleted: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(world.get("team-a").await.is_none());
    // A reserved one is still protected, with the webhook's reason in the real server's words.
    let refused = alice.delete("baseline", &DeleteParams::default()).await;
    let Err(kube::Error::Api(status)) = refused else {
        panic!("{refused:?}");
    };
    assert_eq!(status.code, 400, "{status:?}");
    assert_eq!(
        status.message,
        "admission webhook \"tiervalidator.antrea.io\" denied the request: cannot delete reserved tier baseline"
    );
    assert!(world.get("baseline").await.is_some());

    // Two concurrent creates at one priority: exactly one admitted.
    let (params, team_x, team_y) = (
        PostParams::default(),
        tier("team-x", 30),
        tier("team-y", 30),
    );
    let (x, y) = tokio::join!(
        alice.create(&params, &team_x),
        alice.create(&params, &team_y),
    );
    assert_eq!(
        usize::from(x.is_ok()) + usize::from(y.is_ok()),
        1,
        "{x:?} {y:?}"
    );
    let loser = if x.is_ok() { y } else { x };
    // Refused for the overlap, or (when the winner is not cached yet) for its reservation.
    let why = format!("{loser:?}");
    assert!(
        why.contains("overlaps") || why.contains("is reserved by a create of Tier"),
        "refused for the overlap: {loser:?}"
    );

    stop.send(()).unwrap();
    tokio::time::timeout(PATIENCE, controller)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_controller_embeds_tierd() {
    let world = World::start().await;
    let config = world.config_for("tierd").await;

    // The test's own observer (its requests are subtracted below).
    let observer =
        KubeLister::start(tier_kube::client::client_from_config(config.clone()).unwrap()).unwrap();
    tokio::time::timeout(PATIENCE, observer.wait_synced())
        .await
        .unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(embed_controller::run(config, listener, async {
        let _ = stopped.await;
    }));

    // The six Tiers exist, with the controller's label (its reconciler ran after them).
    world.until_stored(&observer, |_| true).await;
    let stored = world.get("platform").await.unwrap();
    let managers: Vec<_> = stored["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["manager"].as_str().unwrap().to_owned())
        .collect();
    assert!(managers.contains(&"tierd".to_owned()), "{managers:?}");

    // Another actor (the admin, no webhook installed) drifts a Tier; tierd corrects it and
    // the controller's label survives the correction (the writer starts from the shared
    // store).
    let mut platform = world.tiers.get("platform").await.unwrap();
    platform.spec.priority = 7;
    platform.metadata.managed_fields = None;
    world
        .tiers
        .replace("platform", &PostParams::default(), &platform)
        .await
        .unwrap();
    world
        .until_stored(&observer, |obj| {
            obj["metadata"]["name"] != "platform" || obj["spec"]["priority"] == 200
        })
        .await;

    // One list and one watch of Tiers for the controller and tierd together (+1 each for
    // the test's observer).
    let log = world.proxy.requests();
    let tiers = |verb| Matcher::verb(verb).on("tiers.crd.antrea.io");
    assert_eq!(
        log.count(tiers(Verb::List)),
        2,
        "one list besides the observer's"
    );
    assert_eq!(
        log.count(tiers(Verb::Watch)),
        2,
        "one watch besides the observer's"
    );

    // tierd's routes, served by the controller's own server, beside its own.
    let (code, body) = get(addr, "/readyz?verbose").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("[+]tier-cache-synced ok"), "{body}");
    assert!(body.contains("[+]example-reconciler ok"), "{body}");
    assert_eq!(get(addr, "/readyz/system-tiers").await.0, 200);
    let (code, body) = get(addr, "/tiers").await;
    assert_eq!(code, 200);
    assert_eq!(
        body,
        "application\nbaseline\nemergency\nnetworkops\nplatform\nsecurityops\n"
    );

    stop.send(()).unwrap();
    tokio::time::timeout(PATIENCE, controller)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
