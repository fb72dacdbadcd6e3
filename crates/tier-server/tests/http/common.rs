//! Test helpers: a loopback server, a small HTTP(S) client, a fake Tier lister and statuses.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use tier_core::{ObservedTier, OutcomeCounts, Snapshot, TierState, TierStatus};
use tier_server::server::{ServeError, Server};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server on 127.0.0.1 with a random port.
pub struct Running {
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Running {
    pub async fn start(server: Server) -> Self {
        let listener = tier_server::server::bind(([127, 0, 0, 1], 0).into())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(listener, async {
            let _ = stopped.await;
        }));
        Self { addr, stop, task }
    }

    pub async fn plain(router: Router) -> Self {
        Self::start(Server::new(router)).await
    }

    /// Stops the server and waits for `serve` to return.
    pub async fn stop(self) -> Result<(), ServeError> {
        let _ = self.stop.send(());
        self.task.await.unwrap()
    }
}

/// A response, body as text.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

async fn exchange<S>(io: S, request: Request<Full<Bytes>>) -> Reply
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(connection);
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

fn request(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Request<Full<Bytes>> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "localhost");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Full::new(Bytes::from(body))).unwrap()
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    get_with(addr, path, &[]).await
}

pub async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let stream = TcpStream::connect(addr).await.unwrap();
    exchange(stream, request("GET", path, headers, Vec::new())).await
}

pub async fn post(addr: SocketAddr, path: &str, body: impl Into<Vec<u8>>) -> Reply {
    let stream = TcpStream::connect(addr).await.unwrap();
    let headers = [("content-type", "application/json")];
    exchange(stream, request("POST", path, &headers, body.into())).await
}

/// GET over TLS trusting only `root`; also returns the certificate the server presented.
pub async fn get_tls(
    addr: SocketAddr,
    root: &CertificateDer<'static>,
    path: &str,
) -> Result<(Reply, CertificateDer<'static>), std::io::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = TcpStream::connect(addr).await?;
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), stream)
        .await?;
    let presented = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let reply = exchange(tls, request("GET", path, &[], Vec::new())).await;
    Ok((reply, presented))
}

/// The answer of a webhook without claims, which never waits.
pub fn now<T>(answer: impl std::future::Future<Output = T>) -> T {
    futures::FutureExt::now_or_never(answer).expect("a webhook without claims answers at once")
}

pub fn observed(name: &str, priority: i64) -> ObservedTier {
    ObservedTier {
        name: name.into(),
        priority,
        description: String::new(),
        resource_version: "1".into(),
        last_writer: None,
    }
}

/// A synced snapshot of Antrea's six system Tiers.
pub fn system_tiers() -> Snapshot {
    Snapshot::synced(
        1,
        [
            observed("baseline", 253),
            observed("application", 250),
            observed("platform", 200),
            observed("networkops", 150),
            observed("securityops", 100),
            observed("emergency", 50),
        ],
    )
}

pub fn tier_status(name: &str, state: TierState) -> TierStatus {
    TierStatus {
        name: name.into(),
        state,
        outcomes: OutcomeCounts::default(),
        corrections: 0,
        contested: false,
        held: None,
        converged_at: None,
        last_write: None,
    }
}

/// A fresh empty directory under the system temp dir.
pub fn temp_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tier-server-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Prometheus text samples: `name{labels}` to value.
pub fn samples(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_owned(), value.to_owned())
        })
        .collect()
}

thread_local! {
    static CAPTURED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Starts capturing what this thread logs at INFO and above (from now until
/// [`captured_logs`]). One global subscriber writes each thread's lines to that thread's buffer
/// (a scoped subscriber per test races with tracing's callsite cache when tests run in
/// parallel); a current-thread tokio test sees the lines of every task it spawned.
pub fn capture_logs() {
    struct ThisThread;
    impl std::io::Write for ThisThread {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            CAPTURED.with(|c| c.borrow_mut().extend_from_slice(bytes));
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(|| ThisThread)
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
    CAPTURED.with(|c| c.borrow_mut().clear());
}

/// What this thread logged since [`capture_logs`].
pub fn captured_logs() -> String {
    let text = CAPTURED.with(|c| String::from_utf8(std::mem::take(&mut *c.borrow_mut())));
    text.unwrap()
}
