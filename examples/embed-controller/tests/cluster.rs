//! The example controller, run as in production against the test API server: it ensures
//! Antrea's six Tiers, labels them, keeps its labels through tierd's corrections, shares one
//! Tier watch with tierd, and serves tierd's routes beside its own; as the cluster's Tier
//! webhook, it lets a user delete an unreferenced Tier and admits exactly one of two
//! concurrent creates at one priority.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use embed_controller::SEEN_LABEL;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use tier_core::TierLister;
use tier_kube::crd::Tier;
use tier_kube::lister::KubeLister;
use tier_testserver::{AdmissionMode, ServerConfig, TestApiServer, Verb, WebhookConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const USER: &str = "system:serviceaccount:kube-system:my-controller";
const PATIENCE: Duration = Duration::from_secs(30);

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

/// Waits (bounded) until every one of the six system Tiers is stored with the label and
/// satisfies `pred`, waking on every change the test's own lister sees.
async fn until_stored(
    server: &TestApiServer,
    watcher: &KubeLister,
    pred: impl Fn(&serde_json::Value) -> bool,
) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let generation = watcher.generation();
            let done = tier_core::DesiredSet::antrea().tiers().iter().all(|t| {
                server.store().get(&t.name).is_some_and(|obj| {
                    obj["metadata"]["labels"][SEEN_LABEL] == "true" && pred(&obj)
                })
            });
            if done {
                return;
            }
            watcher.changed(generation).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never reached: {:?}", server.store().list()));
}

/// A kube configuration for `user` of `server`.
async fn config_for(server: &TestApiServer, user: &str) -> kube::Config {
    let yaml = server.kubeconfig_yaml(user, "test").unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap()
}

/// A test API server with Antrea's built-in admission, the controller's user and alice.
async fn cluster() -> TestApiServer {
    TestApiServer::start(
        ServerConfig::default()
            .user("my-controller-token", USER)
            .user("alice-token", "alice")
            .admission(AdmissionMode::BuiltinAntrea {
                controller_user: USER.to_owned(),
            }),
    )
    .await
    .unwrap()
}

/// The example controller as the cluster's Tier webhook (kube-apiserver calls its
/// `/validate/tier`): alice deletes a Tier she created, and of her two concurrent creates at
/// one priority exactly one is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_webhook_serves_deletes_and_admits_one_of_two_creates() {
    let server = cluster().await;
    let config = config_for(&server, USER).await;
    let observer =
        KubeLister::start(tier_kube::client::client_from_config(config.clone()).unwrap()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(embed_controller::run(config, listener, async {
        let _ = stopped.await;
    }));
    until_stored(&server, &observer, |_| true).await;
    server
        .set_admission(AdmissionMode::Webhook(WebhookConfig::new(format!(
            "http://{addr}/validate/tier"
        ))))
        .unwrap();

    let alice: Api<Tier> = Api::all(
        tier_kube::client::client_from_config(config_for(&server, "alice").await).unwrap(),
    );
    let tier = |name: &str, priority: i32| {
        Tier::new(
            name,
            tier_kube::crd::TierSpec {
                priority,
                description: None,
            },
        )
    };
    // A user Tier, created and deleted through the embedder's webhook.
    alice
        .create(&PostParams::default(), &tier("team-a", 10))
        .await
        .unwrap();
    // DELETE waits for the policy caches (a retryable refusal until they sync), then passes.
    let deadline = Instant::now() + PATIENCE;
    loop {
        match alice.delete("team-a", &DeleteParams::default()).await {
            Ok(_) => break,
            Err(error) => assert!(Instant::now() < deadline, "never deleted: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(server.store().get("team-a").is_none());
    // A reserved one is still protected.
    let refused = alice.delete("baseline", &DeleteParams::default()).await;
    assert!(refused.is_err(), "{refused:?}");

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
    let server = cluster().await;
    let config = config_for(&server, USER).await;

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
    until_stored(&server, &observer, |_| true).await;

    // Another actor drifts a Tier (bypassing admission); tierd corrects it and the
    // controller's label survives the correction (the writer starts from the shared store).
    server
        .store()
        .modify("platform", |obj| obj["spec"]["priority"] = 7.into())
        .unwrap();
    until_stored(&server, &observer, |obj| {
        obj["metadata"]["name"] != "platform" || obj["spec"]["priority"] == 200
    })
    .await;

    // One list and one watch of Tiers for the controller and tierd together (+1 each for
    // the test's observer).
    let log = server.requests();
    assert_eq!(
        log.count(Verb::List, None),
        2,
        "one list besides the observer's"
    );
    assert_eq!(
        log.count(Verb::Watch, None),
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
