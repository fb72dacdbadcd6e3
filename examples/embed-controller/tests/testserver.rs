//! The example controller, run as in production against the test API server: it ensures
//! Antrea's six Tiers, labels them, keeps its labels through tierd's corrections, shares one
//! Tier watch with tierd, and serves tierd's routes beside its own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use embed_controller::SEEN_LABEL;
use tier_core::TierLister;
use tier_kube::KubeLister;
use tier_testserver::{AdmissionMode, ServerConfig, TestApiServer, Verb};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_controller_embeds_tierd() {
    let token = "my-controller-token";
    let server = TestApiServer::start(ServerConfig::default().user(token, USER).admission(
        AdmissionMode::BuiltinAntrea {
            controller_user: USER.to_owned(),
        },
    ))
    .await
    .unwrap();
    let kubeconfig = std::env::temp_dir().join(format!(
        "embed-controller-{}.kubeconfig",
        std::process::id()
    ));
    server.write_kubeconfig(&kubeconfig, USER).unwrap();
    let config = tier_kube::client::config(&tier_kube::ClientOptions {
        kubeconfig: Some(kubeconfig.clone()),
        ..tier_kube::ClientOptions::default()
    })
    .await
    .unwrap();

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
    let _ = std::fs::remove_file(&kubeconfig);
}
