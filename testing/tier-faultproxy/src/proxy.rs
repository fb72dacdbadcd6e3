//! The proxy: its configuration and [`FaultProxy`], the handle tests steer it with; the
//! listener and its outages; connections; and forwarding with faults applied.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, Scheme};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::error::Error;
use crate::faults::{Fault, FaultAction, FaultId, FaultKind, Faults, WatchEnd};
use crate::held::Held;
use crate::io::{ConnControl, ResetOnDrop};
use crate::log::{LogBook, RequestLog, RequestRecord};
use crate::request::{Matcher, RequestInfo, Verb, query_value};
use crate::status;
use crate::watch::{BoxError, EndPlan, Framing, OpenWatch, WatchBody};

/// How long a TLS handshake may take before the connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may wait for its next request (or the rest of a request's head):
/// kube-apiserver's `IdleTimeout`.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How long dialing the upstream may take before the request fails.
pub const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle upstream connections kept per client (one client without, one with the client
/// certificate), each closed after hyper-util's 90 s idle timeout.
pub const UPSTREAM_IDLE_CONNECTIONS: usize = 16;

/// The bounds of one proxy. Every table the proxy keeps is bounded by one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Client connections served at once; further ones wait in the listen backlog (default
    /// 128). Each holds at most one request at a time (HTTP/1.1, no pipelining).
    pub max_connections: usize,
    /// Request records kept; the oldest is dropped beyond it (default 10,000).
    pub max_log_records: usize,
    /// Requests [`Hang`](FaultAction::Hang) faults hold at once; one more is answered 503
    /// with a message naming this bound (default 64).
    pub max_held: usize,
    /// Faults active at once; [`FaultProxy::inject`] fails beyond it (default 1,024).
    pub max_faults: usize,
    /// Bytes of a create's body the proxy reads to learn the object's name; a larger create
    /// is answered 413, as kube-apiserver answers bodies over its 3 MiB (default 3 MiB).
    /// Other bodies stream through unread.
    pub max_create_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 128,
            max_log_records: 10_000,
            max_held: 64,
            max_faults: 1024,
            max_create_body: 3 * 1024 * 1024,
        }
    }
}

/// How a proxy is started: where it forwards to and with which credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    upstream: String,
    upstream_ca_pem: Option<String>,
    client_identity: Option<(String, String)>,
    upstream_server_name: Option<String>,
    serving_names: Vec<String>,
    limits: Limits,
}

impl ProxyConfig {
    /// Forward to `upstream`: `https://host:port` (kube-apiserver, a webhook), or `http://`
    /// (tier-testserver), optionally with a path prefix that is put before every request's
    /// path.
    pub fn new(upstream: impl Into<String>) -> Self {
        Self {
            upstream: upstream.into(),
            upstream_ca_pem: None,
            client_identity: None,
            upstream_server_name: None,
            serving_names: Vec::new(),
            limits: Limits::default(),
        }
    }

    /// Trust this PEM bundle (and only it) for the upstream's certificate. Required for an
    /// `https://` upstream.
    #[must_use]
    pub fn upstream_ca_pem(mut self, pem: impl Into<String>) -> Self {
        self.upstream_ca_pem = Some(pem.into());
        self
    }

    /// Present this client certificate (chain PEM, key PEM) upstream on requests that carry
    /// no `Authorization` header: the admin of a cluster that authenticates by certificate.
    ///
    /// Requests with a bearer token are sent without it, because kube-apiserver authenticates
    /// a client certificate before a token and the caller would silently become the
    /// certificate's user. Anyone who can reach the proxy's port (any local process) can use
    /// this identity: give it only in tests.
    ///
    /// The proxy does not ask callers for certificates, so none is passed on: in front of a
    /// webhook that checks kube-apiserver's client certificate (tierd's `--client-ca`), give
    /// the proxy the certificate the AdmissionConfiguration makes kube-apiserver present.
    #[must_use]
    pub fn client_identity(
        mut self,
        cert_pem: impl Into<String>,
        key_pem: impl Into<String>,
    ) -> Self {
        self.client_identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Verify the upstream's certificate for this name instead of the URL's host.
    #[must_use]
    pub fn upstream_server_name(mut self, name: impl Into<String>) -> Self {
        self.upstream_server_name = Some(name.into());
        self
    }

    /// Put `name` in the proxy's serving certificate, besides `127.0.0.1` and `localhost`.
    #[must_use]
    pub fn serving_name(mut self, name: impl Into<String>) -> Self {
        self.serving_names.push(name.into());
        self
    }

    /// Use these bounds.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
}

/// How [`FaultProxy::outage`] makes the proxy unreachable. Either way, every open connection
/// is reset at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outage {
    /// Stop listening: connecting fails with "connection refused", as when the API server's
    /// process is gone.
    Refuse,
    /// Keep listening but reset every new connection at accept, before TLS, as when a load
    /// balancer has no healthy backend.
    ResetAtAccept,
}

type UpstreamBody = Either<Incoming, Full<Bytes>>;
type UpstreamClient = Client<HttpsConnector<HttpConnector>, UpstreamBody>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Where and how requests are forwarded.
struct Upstream {
    scheme: Scheme,
    authority: Authority,
    prefix: String,
    plain: UpstreamClient,
    with_identity: Option<UpstreamClient>,
}

impl Upstream {
    fn new(config: &ProxyConfig) -> Result<Self, Error> {
        let url_error = |reason| Error::UpstreamUrl {
            url: config.upstream.clone(),
            reason,
        };
        let uri: Uri = config
            .upstream
            .parse()
            .map_err(|_| url_error("not a URL"))?;
        let scheme = uri
            .scheme()
            .cloned()
            .ok_or_else(|| url_error("no scheme"))?;
        if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
            return Err(url_error("the scheme is neither http nor https"));
        }
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| url_error("no host"))?;
        if uri.query().is_some() {
            return Err(url_error("it has a query"));
        }
        if scheme == Scheme::HTTPS && config.upstream_ca_pem.is_none() {
            return Err(Error::MissingUpstreamCa {
                url: config.upstream.clone(),
            });
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        let ca = config.upstream_ca_pem.as_deref();
        let client = |identity: Option<(&str, &str)>| -> Result<UpstreamClient, Error> {
            let tls = crate::tls::upstream(ca, identity)?;
            let mut http = HttpConnector::new();
            http.enforce_http(false);
            http.set_connect_timeout(Some(UPSTREAM_CONNECT_TIMEOUT));
            http.set_nodelay(true);
            let builder = HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http();
            let builder = match &config.upstream_server_name {
                Some(name) => {
                    let server_name = ServerName::try_from(name.clone())
                        .map_err(|_| Error::ServerName { name: name.clone() })?;
                    builder.with_server_name_resolver(FixedServerNameResolver::new(server_name))
                }
                None => builder,
            };
            let connector = builder.enable_http1().wrap_connector(http);
            Ok(Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(UPSTREAM_IDLE_CONNECTIONS)
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .build(connector))
        };
        Ok(Self {
            plain: client(None)?,
            with_identity: config
                .client_identity
                .as_ref()
                .map(|(cert, key)| client(Some((cert, key))))
                .transpose()?,
            scheme,
            authority,
            prefix,
        })
    }

    fn target(&self, path_and_query: &str) -> Option<Uri> {
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{path_and_query}", self.prefix))
            .build()
            .ok()
    }
}

/// The accept loop in service, and how to stop it.
struct AcceptTask {
    stop: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

/// What every connection task shares.
struct Shared {
    upstream: Upstream,
    acceptor: TlsAcceptor,
    addr: SocketAddr,
    limits: Limits,
    faults: Faults,
    log: LogBook,
    held: Arc<Held>,
    next_seq: AtomicU64,
    connections: Arc<Semaphore>,
    open_connections: Arc<AtomicUsize>,
    open_watches: Arc<AtomicUsize>,
    watch_drops: watch::Sender<WatchEnd>,
    /// Bumped to reset every open connection (an outage).
    generation: watch::Sender<u64>,
    reset_at_accept: AtomicBool,
    reset_connections: AtomicU64,
    shutdown: watch::Receiver<bool>,
}

/// A running fault-injecting proxy on `127.0.0.1`; it stops when dropped.
///
/// Start it inside a tokio runtime with [`start`](Self::start). Point clients at
/// [`url`](Self::url) trusting [`ca_pem`](Self::ca_pem) (or use
/// [`kubeconfig_yaml`](Self::kubeconfig_yaml)); steer it with [`inject`](Self::inject),
/// [`release`](Self::release), [`drop_watches`](Self::drop_watches),
/// [`outage`](Self::outage) and [`resume`](Self::resume); inspect it with
/// [`requests`](Self::requests).
pub struct FaultProxy {
    shared: Arc<Shared>,
    ca_pem: String,
    accept: Mutex<Option<AcceptTask>>,
    shutdown: watch::Sender<bool>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("url", &self.url())
            .field("upstream", &self.shared.upstream.authority)
            .finish_non_exhaustive()
    }
}

impl FaultProxy {
    /// Generates the proxy's CA and serving certificate, binds `127.0.0.1:0` and starts
    /// serving. Must be called inside a tokio runtime.
    pub async fn start(config: ProxyConfig) -> Result<Self, Error> {
        let upstream = Upstream::new(&config)?;
        let serving = crate::tls::serving(&config.serving_names)?;
        let listener = bind("127.0.0.1:0".parse().ok()).await?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: "127.0.0.1:0".to_owned(),
            source,
        })?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let limits = config.limits;
        let shared = Arc::new(Shared {
            upstream,
            acceptor: TlsAcceptor::from(Arc::new(serving.config)),
            addr,
            limits,
            faults: Faults::new(limits.max_faults),
            log: LogBook::new(limits.max_log_records),
            held: Arc::new(Held::new(limits.max_held)),
            next_seq: AtomicU64::new(0),
            connections: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            open_connections: Arc::new(AtomicUsize::new(0)),
            open_watches: Arc::new(AtomicUsize::new(0)),
            watch_drops: watch::channel(WatchEnd::Clean).0,
            generation: watch::channel(0).0,
            reset_at_accept: AtomicBool::new(false),
            reset_connections: AtomicU64::new(0),
            shutdown: shutdown_rx,
        });
        let accept = spawn_accept(Arc::clone(&shared), listener);
        tracing::debug!(%addr, upstream = %shared.upstream.authority, "fault proxy listening");
        Ok(Self {
            shared,
            ca_pem: serving.ca_pem,
            accept: Mutex::new(Some(accept)),
            shutdown,
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.shared.addr)
    }

    /// The bound address (kept across [`outage`](Self::outage) and [`resume`](Self::resume)).
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The PEM of the CA that signed the proxy's serving certificate, for a kubeconfig's
    /// `certificate-authority-data` or a webhook configuration's `caBundle`.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A kubeconfig (YAML) for the proxy: its URL and CA, one user named `user` with bearer
    /// `token` (or no credentials, for the [`client_identity`](ProxyConfig::client_identity)
    /// to be used upstream), one selected context.
    pub fn kubeconfig_yaml(&self, user: &str, token: Option<&str>) -> String {
        crate::kubeconfig::render(&self.url(), &self.ca_pem, user, token)
    }

    /// Writes [`kubeconfig_yaml`](Self::kubeconfig_yaml) to `path`.
    pub fn write_kubeconfig(
        &self,
        path: impl AsRef<Path>,
        user: &str,
        token: Option<&str>,
    ) -> Result<(), Error> {
        let path = path.as_ref();
        std::fs::write(path, self.kubeconfig_yaml(user, token)).map_err(|source| {
            Error::WriteKubeconfig {
                path: path.to_owned(),
                source,
            }
        })
    }

    /// Activates a fault; fails when [`Limits::max_faults`] are active already.
    pub fn inject(&self, fault: Fault) -> Result<FaultId, Error> {
        self.shared.faults.inject(fault)
    }

    /// Removes one fault (requests it holds stay held: [`release`](Self::release) them);
    /// returns whether it was still active.
    pub fn remove_fault(&self, id: FaultId) -> bool {
        self.shared.faults.remove(id)
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.shared.faults.clear();
    }

    /// Number of faults with budget left.
    pub fn active_faults(&self) -> usize {
        self.shared.faults.active()
    }

    /// Lets the requests `fault` holds go on to the upstream; returns how many.
    pub fn release(&self, fault: FaultId) -> usize {
        self.shared.held.release(Some(fault))
    }

    /// Lets every held request go on; returns how many.
    pub fn release_all(&self) -> usize {
        self.shared.held.release(None)
    }

    /// Number of requests held now.
    pub fn held(&self) -> usize {
        self.shared.held.count()
    }

    /// Waits until at least `n` requests are held or `timeout` passes; returns whether they were.
    pub async fn wait_for_held(&self, n: usize, timeout: Duration) -> bool {
        self.shared.held.wait_for(n, timeout).await
    }

    /// Ends every watch stream open now, in the way `end` says (later watches are untouched).
    pub fn drop_watches(&self, end: WatchEnd) {
        self.shared.watch_drops.send_replace(end);
    }

    /// Number of watch streams passing through now.
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
    }

    /// Number of client connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.open_connections.load(Ordering::SeqCst)
    }

    /// Number of connections reset at accept during [`Outage::ResetAtAccept`] outages.
    pub fn connections_reset_at_accept(&self) -> u64 {
        self.shared.reset_connections.load(Ordering::SeqCst)
    }

    /// Makes the proxy unreachable as `outage` says and resets every open connection (held
    /// requests and watches with them). When this returns, new connections fail. Ended by
    /// [`resume`](Self::resume).
    pub async fn outage(&self, outage: Outage) {
        match outage {
            Outage::Refuse => {
                let task = self
                    .accept
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if let Some(task) = task {
                    task.stop.send_replace(true);
                    let _ = task.handle.await;
                }
            }
            Outage::ResetAtAccept => self.shared.reset_at_accept.store(true, Ordering::SeqCst),
        }
        self.shared
            .generation
            .send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Ends an outage: accepts and serves connections again, on the same address. Fails when
    /// the address cannot be bound again (another process took the port meanwhile).
    pub async fn resume(&self) -> Result<(), Error> {
        self.shared.reset_at_accept.store(false, Ordering::SeqCst);
        let listening = self
            .accept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        if listening {
            return Ok(());
        }
        let listener = bind(Some(self.shared.addr)).await?;
        let task = spawn_accept(Arc::clone(&self.shared), listener);
        let previous = self
            .accept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(task);
        if let Some(previous) = previous {
            // A concurrent resume won the race; keep one loop.
            previous.stop.send_replace(true);
        }
        Ok(())
    }

    /// A snapshot of the request log.
    pub fn requests(&self) -> RequestLog {
        self.shared.log.snapshot()
    }

    /// Empties the request log.
    pub fn clear_log(&self) {
        self.shared.log.clear();
    }

    /// Waits until `predicate` holds for the request log or `timeout` passes; returns
    /// whether it held.
    pub async fn wait_for_requests(
        &self,
        predicate: impl Fn(&RequestLog) -> bool,
        timeout: Duration,
    ) -> bool {
        self.shared.log.wait_for(predicate, timeout).await
    }

    /// Waits until at least `n` requests `matcher` matches were logged, or `timeout` passes.
    pub async fn wait_for_count(
        &self,
        matcher: impl Into<Matcher>,
        n: usize,
        timeout: Duration,
    ) -> bool {
        let matcher = matcher.into();
        self.wait_for_requests(|log| log.count(matcher.clone()) >= n, timeout)
            .await
    }

    /// Stops: closes the listener and every connection, and waits for the listener task.
    pub async fn shutdown(self) {
        self.shutdown.send_replace(true);
        let task = self
            .accept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            task.stop.send_replace(true);
            let _ = task.handle.await;
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        let task = self
            .accept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            task.stop.send_replace(true);
            task.handle.abort();
        }
    }
}

async fn bind(addr: Option<SocketAddr>) -> Result<TcpListener, Error> {
    let addr = addr.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
    TcpListener::bind(addr).await.map_err(|source| Error::Bind {
        addr: addr.to_string(),
        source,
    })
}

/// Resolves once `flag` is true or its sender is gone.
async fn stopped(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|stop| *stop).await;
}

fn spawn_accept(shared: Arc<Shared>, listener: TcpListener) -> AcceptTask {
    let (stop, stop_rx) = watch::channel(false);
    let handle = tokio::spawn(accept_loop(shared, listener, stop_rx));
    AcceptTask { stop, handle }
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let mut shutdown = shared.shutdown.clone();
    loop {
        let permit = tokio::select! {
            () = stopped(&mut stop) => break,
            () = stopped(&mut shutdown) => break,
            permit = Arc::clone(&shared.connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        tokio::select! {
            () = stopped(&mut stop) => break,
            () = stopped(&mut shutdown) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    if shared.reset_at_accept.load(Ordering::SeqCst) {
                        let _ = stream.set_zero_linger();
                        shared.reset_connections.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_connection(Arc::clone(&shared), stream, permit));
                }
                Err(error) => {
                    tracing::warn!(%error, "fault proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// Counts an open connection while it lives.
struct OpenConnection(Arc<AtomicUsize>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves one client connection: TLS, then HTTP/1.1 requests until it closes, idles past
/// [`IDLE_TIMEOUT`], a fault resets it, an outage resets every connection, or the proxy stops.
async fn serve_connection(shared: Arc<Shared>, stream: TcpStream, _permit: OwnedSemaphorePermit) {
    shared.open_connections.fetch_add(1, Ordering::SeqCst);
    let _open = OpenConnection(Arc::clone(&shared.open_connections));
    let control = ConnControl::default();
    let io = ResetOnDrop::new(stream, control.flag());
    let mut generation = shared.generation.subscribe();
    let mut shutdown = shared.shutdown.clone();
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, shared.acceptor.accept(io));
    let tls = tokio::select! {
        done = handshake => match done {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => {
                tracing::debug!(%error, "fault proxy: TLS handshake failed");
                return;
            }
            Err(_) => return,
        },
        _ = generation.changed() => return,
        () = stopped(&mut shutdown) => return,
    };
    let service = {
        let shared = Arc::clone(&shared);
        let control = control.clone();
        service_fn(move |request| {
            let shared = Arc::clone(&shared);
            let control = control.clone();
            async move { Ok::<_, Infallible>(handle(shared, control, request).await) }
        })
    };
    let connection = http1::Builder::new()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(IDLE_TIMEOUT)
        .serve_connection(TokioIo::new(tls), service);
    tokio::select! {
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(%error, "fault proxy: connection ended with an error");
            }
        }
        () = control.killed() => tracing::debug!("fault proxy: connection reset by a fault"),
        _ = generation.changed() => control.mark_reset(),
        () = stopped(&mut shutdown) => {}
    }
}

/// A request's record, pushed to the log when finished or, failing that, when dropped (the
/// connection went away while the request was held or forwarded).
struct Recorder {
    shared: Arc<Shared>,
    record: Option<RequestRecord>,
}

impl Recorder {
    fn fault(&mut self, kind: FaultKind) {
        if let Some(record) = &mut self.record {
            record.fault = Some(kind);
        }
    }

    fn upstream_answered(&mut self, code: u16) {
        if let Some(record) = &mut self.record {
            record.upstream_code = Some(code);
        }
    }

    fn failed(&mut self, error: String) {
        if let Some(record) = &mut self.record {
            record.error = Some(error);
        }
    }

    fn finish(&mut self, code: Option<u16>) {
        if let Some(mut record) = self.record.take() {
            record.code = code;
            record.elapsed = record.received.elapsed();
            self.shared.log.push(record);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.finish(None);
    }
}

fn full(bytes: Bytes) -> ProxyBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn status_response(
    code: u16,
    reason: &str,
    message: &str,
    retry_after: Option<u64>,
) -> Response<ProxyBody> {
    let mut response = Response::new(full(status::status_body(
        code,
        reason,
        message,
        retry_after,
    )));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(seconds) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// Never resolves: the connection task drops the request with its connection.
async fn abandon() -> Response<ProxyBody> {
    std::future::pending().await
}

/// Whether a create body should be read for its name: JSON (or unlabelled).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|ct| ct.starts_with("application/json"))
}

/// Handles one request: classify, log, apply the first matching fault, forward.
async fn handle(
    shared: Arc<Shared>,
    control: ConnControl,
    request: Request<Incoming>,
) -> Response<ProxyBody> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let mut info = RequestInfo::classify(&parts.method, &path, &query);
    let seq = shared.next_seq.fetch_add(1, Ordering::SeqCst);
    let received = Instant::now();

    // A create's name is in its body: read it (bounded) so faults and the log can name it.
    let body = if info.verb == Some(Verb::Create) && is_json(&parts.headers) {
        match Limited::new(body, shared.limits.max_create_body)
            .collect()
            .await
        {
            Ok(collected) => {
                let bytes = collected.to_bytes();
                info.name = serde_json::from_slice::<serde_json::Value>(&bytes)
                    .ok()
                    .and_then(|v| v["metadata"]["name"].as_str().map(str::to_owned));
                Either::Right(Full::new(bytes))
            }
            Err(error) => {
                let too_large = error.is::<http_body_util::LengthLimitError>();
                let mut recorder =
                    recorder(&shared, seq, &parts.method, &path, &query, &info, received);
                recorder.failed(format!("reading the create body: {error}"));
                if too_large {
                    recorder.finish(Some(413));
                    return status_response(
                        413,
                        "RequestEntityTooLarge",
                        &format!(
                            "tier-faultproxy: the request body is larger than {} bytes (Limits::max_create_body)",
                            shared.limits.max_create_body
                        ),
                        None,
                    );
                }
                recorder.finish(None);
                control.reset_now();
                return abandon().await;
            }
        }
    } else {
        Either::Left(body)
    };

    let mut recorder = recorder(&shared, seq, &parts.method, &path, &query, &info, received);
    let fired = shared.faults.take(&path, &info);
    if let Some((_, action)) = &fired {
        recorder.fault(action.kind());
    }
    let mut plan = EndPlan::default();
    let mut lose_response = false;
    match fired {
        None => {}
        Some((
            _,
            FaultAction::Status {
                code,
                reason,
                message,
                retry_after,
            },
        )) => {
            recorder.finish(Some(code));
            return status_response(code, &reason, &message, retry_after);
        }
        Some((_, FaultAction::Reset)) => {
            recorder.finish(None);
            control.reset_now();
            return abandon().await;
        }
        Some((id, FaultAction::Hang { release_after })) => {
            let Some(hold) = shared.held.hold(id) else {
                let message = format!(
                    "tier-faultproxy: {} requests are held already (Limits::max_held); release \
                     some with FaultProxy::release",
                    shared.limits.max_held
                );
                recorder.failed(message.clone());
                recorder.finish(Some(503));
                return status_response(503, "ServiceUnavailable", &message, None);
            };
            hold.wait(release_after).await;
        }
        Some((_, FaultAction::LoseResponse)) => lose_response = true,
        Some((
            _,
            FaultAction::EndWatch {
                after_events,
                after,
                end,
            },
        )) => {
            plan = EndPlan {
                after_events,
                after,
                end,
            };
        }
        Some((_, FaultAction::ExpireWatch)) => {
            recorder.finish(Some(200));
            let rv = query_value(&query, "resourceVersion");
            let mut response = Response::new(full(status::expired_watch_event(rv.as_deref())));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return response;
        }
    }

    let Some(target) = parts
        .uri
        .path_and_query()
        .and_then(|pq| shared.upstream.target(pq.as_str()))
    else {
        recorder.finish(Some(400));
        return status_response(
            400,
            "BadRequest",
            "tier-faultproxy: unusable request path",
            None,
        );
    };
    let is_watch = info.verb == Some(Verb::Watch);
    let mut upstream_request = Request::new(body);
    *upstream_request.method_mut() = parts.method.clone();
    *upstream_request.uri_mut() = target;
    *upstream_request.headers_mut() = forwarded_headers(&parts.headers);
    if is_watch {
        // Events are counted in plain bytes: ask the upstream not to compress the stream.
        upstream_request.headers_mut().insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    let client = match &shared.upstream.with_identity {
        Some(with_identity) if !parts.headers.contains_key(header::AUTHORIZATION) => with_identity,
        _ => &shared.upstream.plain,
    };
    let response = match client.request(upstream_request).await {
        Ok(response) => response,
        Err(error) => {
            // As without a proxy, the caller sees its connection fail, not a made-up answer.
            let error = error_chain(&error);
            tracing::warn!(%error, %path, "fault proxy: forwarding failed");
            recorder.failed(error);
            recorder.finish(None);
            control.reset_now();
            return abandon().await;
        }
    };
    let code = response.status().as_u16();
    recorder.upstream_answered(code);
    if lose_response {
        recorder.finish(None);
        control.reset_now();
        return abandon().await;
    }
    recorder.finish(Some(code));
    let (mut head, upstream_body) = response.into_parts();
    head.headers = forwarded_headers(&head.headers);
    let body = if is_watch && head.status.is_success() {
        head.headers.remove(header::CONTENT_LENGTH);
        let framing = Framing::for_content_type(
            head.headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
        );
        WatchBody::new(
            upstream_body,
            framing,
            plan,
            shared.watch_drops.subscribe(),
            control,
            OpenWatch::new(&shared.open_watches),
        )
        .boxed_unsync()
    } else {
        upstream_body.map_err(BoxError::from).boxed_unsync()
    };
    Response::from_parts(head, body)
}

fn recorder(
    shared: &Arc<Shared>,
    seq: u64,
    method: &Method,
    path: &str,
    query: &str,
    info: &RequestInfo,
    received: Instant,
) -> Recorder {
    Recorder {
        shared: Arc::clone(shared),
        record: Some(RequestRecord {
            seq,
            method: method.to_string(),
            path: path.to_owned(),
            query: query.to_owned(),
            verb: info.verb,
            resource: info.resource.clone(),
            namespace: info.namespace.clone(),
            name: info.name.clone(),
            code: None,
            upstream_code: None,
            fault: None,
            received,
            elapsed: Duration::ZERO,
            error: None,
        }),
    }
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), which a proxy must not pass on, plus `Host` (the
/// client sets the upstream's) and `Expect` (hyper answered it already).
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// `headers` without the hop-by-hop ones (and those `Connection` names), `Host` and `Expect`.
fn forwarded_headers(headers: &HeaderMap) -> HeaderMap {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    let mut forwarded = headers.clone();
    for name in HOP_BY_HOP.iter().chain(&named) {
        forwarded.remove(name);
    }
    forwarded.remove(header::HOST);
    forwarded.remove(header::EXPECT);
    forwarded
}

/// An error and its sources, joined with `: `.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_stay_behind_and_credentials_pass() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-private"),
        );
        headers.insert("x-private", HeaderValue::from_static("1"));
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:1"));
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        headers.insert("impersonate-user", HeaderValue::from_static("u"));
        let forwarded = forwarded_headers(&headers);
        let mut names: Vec<&str> = forwarded.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["authorization", "impersonate-user"]);
    }

    #[test]
    fn upstream_urls_are_checked_before_anything_starts() {
        let refused = |url: &str| {
            Upstream::new(&ProxyConfig::new(url))
                .err()
                .map(|e| e.to_string())
        };
        assert!(
            refused("ftp://127.0.0.1")
                .unwrap()
                .contains("neither http nor https")
        );
        assert!(refused("127.0.0.1:6443").is_some());
        assert!(
            refused("http://127.0.0.1:1/?a=b")
                .unwrap()
                .contains("query")
        );
        assert!(
            refused("https://127.0.0.1:6443")
                .unwrap()
                .contains("no CA was given")
        );
        let prefixed = Upstream::new(&ProxyConfig::new("http://127.0.0.1:1/base/")).unwrap();
        assert_eq!(
            prefixed.target("/api/v1/pods?watch=1").unwrap().to_string(),
            "http://127.0.0.1:1/base/api/v1/pods?watch=1"
        );
    }
}
