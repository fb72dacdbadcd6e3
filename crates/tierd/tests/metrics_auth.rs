//! `/metrics` protected as controller-runtime protects it ([`tierd::Builder::metrics_auth`]):
//! TokenReview and SubjectAccessReview of the scraper's bearer token, made by tierd's kube
//! client against a real kube-apiserver (tier-testcluster; its authenticator and RBAC
//! authorizer answer the reviews) through a fault proxy that records them (tier-faultproxy).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;

use prometheus_client::registry::Registry;
use tier_core::DesiredSet;
use tier_faultproxy::{FaultProxy, Matcher, ProxyConfig};
use tier_server::server::Server;
use tier_testcluster::TestCluster;
use tierd::{Clients, Events, Tierd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIERD: &str = "system:serviceaccount:kube-system:tierd";

/// The install's RBAC: tierd may create TokenReviews and SubjectAccessReviews, and
/// `tierd-metrics-reader` grants `get` on `/metrics`.
const INSTALL_RBAC: &str = include_str!("../../../deploy/base/rbac.yaml");

/// Prometheus bound to the install's metrics reader role, as the install's comment says.
const PROMETHEUS_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: prometheus-tierd-metrics
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: tierd-metrics-reader
subjects:
  - kind: ServiceAccount
    name: prometheus
    namespace: monitoring
"#;

/// tierd's clients through `proxy` with `token`.
async fn clients(proxy: &FaultProxy, token: &str) -> Clients {
    let yaml = proxy.kubeconfig_yaml("tierd", Some(token));
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
    let cluster = TestCluster::start().await.unwrap();
    cluster.apply(INSTALL_RBAC).await.unwrap();
    cluster.apply(PROMETHEUS_RBAC).await.unwrap();
    let tierd_token = cluster.token("kube-system", "tierd").await.unwrap();
    let prometheus_token = cluster.token("monitoring", "prometheus").await.unwrap();
    let nosy_token = cluster.token("default", "nosy").await.unwrap();
    let proxy =
        FaultProxy::start(ProxyConfig::new(cluster.url()).upstream_ca_pem(cluster.ca_pem()))
            .await
            .unwrap();

    let tierd = Tierd::builder(clients(&proxy, &tierd_token).await, DesiredSet::antrea())
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
    let (code, body) = scrape(addr, Some(&nosy_token)).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("\"system:serviceaccount:default:nosy\""),
        "{body}"
    );
    // Authenticated and allowed to get /metrics.
    let (code, body) = scrape(addr, Some(&prometheus_token)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("tierd_cache_synced "), "{body}");

    // The reviews were made through tierd's own client (the only one behind the proxy, with
    // tierd's token) and the real server accepted them: RBAC lets tierd create them.
    let log = proxy.requests();
    let created = |path: &str| log.count_code(Matcher::any().at_path(path), 201);
    assert!(
        created("/apis/authentication.k8s.io/v1/tokenreviews") >= 3,
        "{:?}",
        log.records()
    );
    assert!(
        created("/apis/authorization.k8s.io/v1/subjectaccessreviews") >= 2,
        "{:?}",
        log.records()
    );

    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    tierd.shutdown().await;
}
