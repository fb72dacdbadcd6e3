//! The real `tierd run` on its three ports: probes over plain HTTP, the webhook over TLS, and
//! `/metrics` protected by TokenReview + SubjectAccessReview with `--metrics-auth`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tier_tests::{Cluster, Tierd, Tls};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const PROMETHEUS: &str = "system:serviceaccount:monitoring:prometheus";

/// One GET `path` on `stream` with an optional bearer token: status code and body.
async fn get<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n{authorization}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply).await;
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let code = reply.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// GET over TLS trusting `tls`'s certificate.
async fn get_tls(addr: SocketAddr, tls: &Tls, path: &str, token: Option<&str>) -> (u16, String) {
    let config = tls.client_config();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    get(stream, path, token).await
}

#[tokio::test]
async fn three_ports_and_metrics_only_for_an_authorized_scraper() {
    let cluster = Cluster::antrea().await;
    cluster.server.add_user("prometheus-token", PROMETHEUS);
    cluster.server.add_user("nosy-token", "nosy");
    cluster
        .server
        .grant_non_resource(PROMETHEUS, "get", "/metrics");
    let tls = Tls::new();
    let tierd = Tierd::run(&cluster, Some(&tls), &["--metrics-auth"]).await;
    tierd.until_ok("/readyz").await;
    assert_ne!(tierd.addr.port(), tierd.probe_addr.port());
    assert_ne!(tierd.addr.port(), tierd.metrics_addr.port());

    // Probes: plain HTTP on their own port; nothing else there.
    let probe = || async { TcpStream::connect(tierd.probe_addr).await.unwrap() };
    assert_eq!(get(probe().await, "/livez", None).await.0, 200);
    assert_eq!(get(probe().await, "/metrics", None).await.0, 404);
    assert_eq!(get(probe().await, "/validate/tier", None).await.0, 404);
    // The webhook port serves no probes and no metrics.
    assert_eq!(get_tls(tierd.addr, &tls, "/metrics", None).await.0, 404);
    assert_eq!(get_tls(tierd.addr, &tls, "/readyz", None).await.0, 404);

    // Metrics: TLS, and only for a token the API server authenticates and authorizes.
    let metrics = |token| get_tls(tierd.metrics_addr, &tls, "/metrics", token);
    assert_eq!(metrics(None).await.0, 401);
    assert_eq!(metrics(Some("forged")).await.0, 401);
    assert_eq!(metrics(Some("nosy-token")).await.0, 403);
    let (code, body) = metrics(Some("prometheus-token")).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("tierd_cache_synced"), "{body}");
    assert!(
        body.contains("tierd_serving_certificate_expiry_timestamp_seconds"),
        "{body}"
    );
}
