//! Two replicas of tierd behind one webhook, on a real kube-apiserver (`tier-testcluster`), as
//! issue 27 found the shipped install: Tier creates go through kube-apiserver's admission to
//! the webhook, a front standing in for the Service sends each review to one replica (by the
//! Tier's name: `a…` to A, `b…` to B), and each replica's Tier cache runs half a second behind
//! the API server. Two creates at one priority, one reviewed by each replica, at once or 100 ms
//! apart: without claims both are stored (the race), with `--priority-claims` exactly one.
//!
//! The replicas are the `tierd` assembly itself (`Tierd::builder`), with the install's RBAC for
//! Tiers and for the claims' Lease (`deploy/base/rbac.yaml`,
//! `deploy/components/priority-claims/rbac.yaml`) and a ServiceAccount token of `tierd`. The one
//! change from Antrea's rules: up to 64 distinct priorities, so that the trials' Tiers need no
//! deleting between trials.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::runtime::{reflector, watcher};
use serde_yaml::Value;
use tier_core::{DesiredSet, ValidationRules};
use tier_kube::claims::ClaimsConfig;
use tier_kube::crd::{Tier, TierSpec};
use tier_kube::lister::KubeLister;
use tier_server::server::Server;
use tier_server::tls::{CertFiles, CertReloader};
use tier_testcluster::TestCluster;
use tierd::{Clients, Events, Tierd};

/// How far behind the API server each replica's Tier cache runs ("a normal half-second").
const LAG: Duration = Duration::from_millis(500);

/// The install's RBAC: the base's (Tiers, policies, reviews, Events) and the claims' Role.
async fn install(cluster: &TestCluster) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let crd = std::fs::read_to_string(root.join("crd.yaml")).unwrap();
    cluster.apply(&crd).await.unwrap();
    for file in ["base/rbac.yaml", "components/priority-claims/rbac.yaml"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let mut docs = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let mut doc: Value = serde::Deserialize::deserialize(doc).unwrap();
            // kustomize's `namespace:` would set it: kube-system, as deploy/ does.
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            if matches!(kind.as_str(), "Role" | "RoleBinding" | "ServiceAccount")
                && doc["metadata"]["namespace"].is_null()
            {
                doc["metadata"]["namespace"] = "kube-system".into();
            }
            docs.push(serde_yaml::to_string(&doc).unwrap());
        }
        cluster.apply(&docs.join("---\n")).await.unwrap();
    }
}

/// A Tier cache whose every watch event reaches the store `LAG` after the API server sent it.
fn lagging_cache(client: kube::Client) -> KubeLister {
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel();
    let mut events = watcher(Api::<Tier>::all(client), watcher::Config::default()).boxed();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if sent.send((tokio::time::Instant::now(), event)).is_err() {
                return;
            }
        }
    });
    let delayed = futures::stream::poll_fn(move |cx| received.poll_recv(cx)).then(
        |(arrived, event)| async move {
            tokio::time::sleep_until(arrived + LAG).await;
            event
        },
    );
    let writer = reflector::store::Writer::default();
    let store = writer.as_reader();
    KubeLister::from_reflector(store, reflector(writer, delayed)).unwrap()
}

/// One replica: the assembly on the `tierd` ServiceAccount's token, with a lagging cache.
async fn replica(cluster: &TestCluster, name: &str, claims: bool) -> Tierd {
    let token = cluster.token("kube-system", "tierd").await.unwrap();
    let kubeconfig = cluster.write_token_kubeconfig(name, &token).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let clients = Clients::from_config(config).unwrap();
    let cache = lagging_cache(clients.shared().clone());
    let mut builder = Tierd::builder(clients, DesiredSet::antrea())
        .tier_cache(cache)
        .controller_user("system:serviceaccount:kube-system:tierd")
        .rules(ValidationRules {
            max_distinct_priorities: 64,
            ..ValidationRules::default()
        })
        .events(Events::Off);
    if claims {
        builder = builder.priority_claims(ClaimsConfig::new("kube-system", name));
    }
    builder.start().unwrap()
}

/// The Service in front of the replicas: each review goes to A, or to B for a Tier whose name
/// starts with `b`.
#[derive(Clone)]
struct Front {
    a: axum::Router,
    b: axum::Router,
}

async fn front(State(front): State<Front>, body: Bytes) -> Response {
    let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let name = review["request"]["name"].as_str().unwrap_or_default();
    let mut router = if name.starts_with('b') {
        front.b
    } else {
        front.a
    };
    let request = axum::http::Request::post(tier_server::webhook::PATH)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    tower_service::Service::call(&mut router, request)
        .await
        .unwrap()
}

/// Serves the front over TLS on loopback and registers it as the Tier webhook; returns when
/// kube-apiserver calls it (a create at a reserved priority is denied with tierd's message).
async fn register(cluster: &TestCluster, a: &Tierd, b: &Tierd, dir: &std::path::Path) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let tls = CertReloader::load(CertFiles::new(&cert, &key))
        .await
        .unwrap()
        .server_config()
        .unwrap();
    let router = axum::Router::new()
        .route(tier_server::webhook::PATH, axum::routing::post(front))
        .with_state(Front {
            a: a.webhook(),
            b: b.webhook(),
        });
    let listener = tier_server::server::bind(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(
        Server::new(router)
            .tls(tls)
            .serve(listener, std::future::pending()),
    );
    let configuration = ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some("tierd".into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "tiervalidator.tierd.io".into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(5),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec!["crd.antrea.io".into()]),
                api_versions: Some(vec!["v1beta1".into()]),
                operations: Some(vec!["CREATE".into(), "UPDATE".into(), "DELETE".into()]),
                resources: Some(vec!["tiers".into()]),
                scope: Some("Cluster".into()),
            }]),
            client_config: WebhookClientConfig {
                url: Some(format!("https://127.0.0.1:{port}/validate/tier")),
                ca_bundle: Some(ByteString(certified.cert.pem().into_bytes())),
                service: None,
            },
            ..ValidatingWebhook::default()
        }]),
    };
    Api::<ValidatingWebhookConfiguration>::all(cluster.client())
        .create(&PostParams::default(), &configuration)
        .await
        .unwrap();
    let tiers: Api<Tier> = Api::all(cluster.client());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let probe = Tier::new("probe", spec(254));
        match tiers.create(&PostParams::default(), &probe).await {
            Err(kube::Error::Api(status)) if status.message.contains("is reserved") => return,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "the webhook never answered: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn spec(priority: i32) -> TierSpec {
    TierSpec {
        priority,
        description: None,
    }
}

/// How many Tiers are stored at `priority` (a quorum read).
async fn stored_at(tiers: &Api<Tier>, priority: i32) -> usize {
    tiers
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|t| t.spec.priority == priority)
        .count()
}

/// The two replicas, the front, and 20 trials of two creates at a fresh priority each (one to
/// each replica): at once, then (at other priorities) 100 ms apart. How many were stored, per
/// trial.
async fn race(claims: bool, trials: i32) -> (Vec<usize>, Vec<usize>) {
    let cluster = TestCluster::start().await.unwrap();
    install(&cluster).await;
    let dir = tempfile_dir();
    let a = replica(&cluster, "tierd-a", claims).await;
    let b = replica(&cluster, "tierd-b", claims).await;
    register(&cluster, &a, &b, &dir).await;
    for replica in [&a, &b] {
        tokio::time::timeout(Duration::from_secs(60), replica.initialized())
            .await
            .expect("the system Tiers converge")
            .unwrap();
    }
    let tiers: Api<Tier> = Api::all(cluster.client());
    let create = |name: String, priority: i32| {
        let tiers = tiers.clone();
        async move {
            let tier = Tier::new(&name, spec(priority));
            tiers.create(&PostParams::default(), &tier).await.is_ok()
        }
    };
    let mut at_once = Vec::new();
    for trial in 0..trials {
        let priority = 1 + trial;
        let (x, y) = tokio::join!(
            create(format!("a{trial}"), priority),
            create(format!("b{trial}"), priority)
        );
        let stored = stored_at(&tiers, priority).await;
        assert_eq!(stored, usize::from(x) + usize::from(y), "trial {trial}");
        at_once.push(stored);
    }
    let mut apart = Vec::new();
    for trial in 0..trials {
        let priority = 21 + trial;
        let first = create(format!("a-apart{trial}"), priority).await;
        // A real gap, shorter than the caches' lag: the scenario itself.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let second = create(format!("b-apart{trial}"), priority).await;
        let stored = stored_at(&tiers, priority).await;
        assert_eq!(
            stored,
            usize::from(first) + usize::from(second),
            "trial {trial}"
        );
        apart.push(stored);
    }
    for replica in [a, b] {
        replica.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    (at_once, apart)
}

fn tempfile_dir() -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("tierd-claims-real-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_claims_two_replicas_store_two_tiers_at_one_priority() {
    // The race of issue 27 on the install as it was: the harness reproduces it.
    let (at_once, apart) = race(false, 5).await;
    assert_eq!(at_once, [2; 5]);
    assert_eq!(apart, [2; 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_claims_two_replicas_store_exactly_one_tier_per_priority() {
    let (at_once, apart) = race(true, 20).await;
    assert_eq!(at_once, [1; 20], "concurrent creates");
    assert_eq!(apart, [1; 20], "creates 100 ms apart");
}
