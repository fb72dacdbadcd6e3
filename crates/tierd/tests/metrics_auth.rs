//! `/metrics` protected as controller-runtime protects it ([`tierd::Builder::metrics_auth`]):
//! TokenReview and SubjectAccessReview of the scraper's bearer token, made by tierd's kube
//! client against the test API server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;

use prometheus_client::registry::Registry;
use tier_core::DesiredSet;
use tier_server::server::Server;
use tier_testserver::{ServerConfig, TestApiServer};
use tierd::{Clients, Events, Tierd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIERD: &str = "system:serviceaccount:kube-system:tierd";
const PROMETHEUS: &str = "system:serviceaccount:monitoring:prometheus";

async fn clients(server: &TestApiServer, user: &str) -> Clients {
    let yaml = server.kubeconfig_yaml(user, "test").unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    Clients::from_config(config).unwrap()
}

/// GET /metrics with an optional bearer token: status code and body.
async fn scrape(addr: SocketAddr, token: Option<&str>) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{authorization}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    let code = reply[9..12].parse().unwrap();
    let body = reply.split_once("\r\n\r\n").unwrap().1.to_owned();
    (code, body)
}

#[tokio::test]
async fn metrics_refuse_unauthenticated_scrapes_and_accept_an_approved_token() {
    let api = TestApiServer::start(
        ServerConfig::default()
            .user("tierd-token", TIERD)
            .user("prometheus-token", PROMETHEUS)
            .user("nosy-token", "nosy"),
    )
    .await
    .unwrap();
    api.grant_non_resource(PROMETHEUS, "get", "/metrics");

    let tierd = Tierd::builder(clients(&api, TIERD).await, DesiredSet::antrea())
        .controller_user(TIERD)
        .events(Events::Off)
        .metrics_auth(true)
        .start()
        .unwrap();
    let router = tierd.metrics(Registry::default());
    let listener = tier_server::server::bind(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(Server::new(router).name("metrics").serve(listener, async {
        let _ = stopped.await;
    }));

    // No token, a token the TokenReview rejects: 401, and nothing leaks.
    let (code, body) = scrape(addr, None).await;
    assert_eq!(code, 401, "{body}");
    assert!(!body.contains("tierd_"), "{body}");
    assert_eq!(scrape(addr, Some("forged-token")).await.0, 401);
    // Authenticated, but the SubjectAccessReview says no.
    let (code, body) = scrape(addr, Some("nosy-token")).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("\"nosy\""), "{body}");
    // Authenticated and allowed to get /metrics.
    let (code, body) = scrape(addr, Some("prometheus-token")).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("tierd_cache_synced "), "{body}");

    // The reviews were made with tierd's own credentials.
    let log = api.requests();
    let reviews: Vec<_> = log
        .records()
        .iter()
        .filter(|r| r.path.ends_with("reviews"))
        .map(|r| {
            (
                r.path.rsplit('/').next().unwrap().to_owned(),
                r.user.clone(),
            )
        })
        .collect();
    assert!(
        reviews.contains(&("tokenreviews".into(), Some(TIERD.into()))),
        "{reviews:?}"
    );
    assert!(
        reviews.contains(&("subjectaccessreviews".into(), Some(TIERD.into()))),
        "{reviews:?}"
    );

    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    tierd.shutdown().await;
}
