//! Assembling the routes and serving them until shutdown.
//!
//! [`Routes`] builds the routers: `/livez`, `/livez/{name}`, `/readyz`, `/readyz/{name}` always,
//! `/metrics` and `POST /validate/tier` when given. [`Routes::into_ports`] splits them the way
//! controller-runtime does, one [`Router`] per port ([`Ports`]): the webhook on its own TLS
//! port, the probes on a plain port for the kubelet, the metrics on a third port (bound to
//! localhost, or protected with [`auth::protect`](crate::auth::protect)). An embedder can
//! instead merge any of them into its own axum router, next to its own checks.
//! [`Routes::into_router`] puts everything on one router.
//!
//! [`Server`] serves one router on one listener, over TLS when given a rustls configuration
//! (see [`CertReloader`](crate::tls::CertReloader)), plain HTTP otherwise, through hyper's HTTP/1.1
//! connection builder. Every connection lives under the [`Limits`]
//! (handshake, idle, header and body timeouts; caps on connections and handshakes that shed
//! the longest-waiting connection instead of pausing `accept`); see [`conn`](crate::conn).
//! On shutdown it stops accepting, lets requests in flight finish, closes idle connections
//! and returns.
//!
//! # Shutdown order
//!
//! On SIGTERM, [`Shutdown::trigger`](crate::readiness::Shutdown::trigger) first (the `shutdown`
//! check fails at once, so the pod leaves its Service's endpoints), then let the server drain: pass
//! [`Shutdown::drained`](crate::readiness::Shutdown::drained) as the shutdown future. Idle
//! connections and handshakes in progress are closed at once; draining takes at most the longer of
//! [`Limits::header_timeout`] and [`Limits::body_timeout`] (a request still in flight then gets
//! `408`), plus a second.
//!
//! ```
//! # async fn example() -> Result<(), tier_server::server::ServeError> {
//! use std::time::Duration;
//!
//! use tier_server::server::{Routes, Server};
//! use tier_server::readiness::{Readiness, Shutdown};
//!
//! let shutdown = Shutdown::new();
//! let ports = Routes::new(Readiness::new()).into_ports();
//! let listener = tier_server::server::bind(([127, 0, 0, 1], 0).into()).await?;
//! let serving = tokio::spawn(
//!     Server::new(ports.probes)
//!         .name("probes")
//!         .serve(listener, shutdown.drained(Duration::ZERO)),
//! );
//! shutdown.trigger();
//! # let _ = serving.await;
//! # Ok(())
//! # }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;
use tower_service::Service;

use crate::conn::{
    Admitted, BodyBudget, BudgetRefusal, Budgeted, Charge, Closed, Limits, MIN_HEADER_BYTES, Phase,
    Pool, Slot, Tracked,
};
use crate::health::{self, HealthConfig};
use crate::metrics;
use crate::readiness::Readiness;
use crate::webhook::Webhook;

/// Binding or serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}; pick a free port or another address")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The listener's address could not be read.
    #[error("cannot read the listener's address: {0}")]
    LocalAddr(#[source] io::Error),
    /// Serving stopped with an I/O error.
    #[error("serving stopped: {0}")]
    Serve(#[source] io::Error),
}

/// Binds a TCP listener on `addr` (port 0 picks a free port).
///
/// # Errors
///
/// [`ServeError::Bind`] when the address is taken or not available.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// The routes of tierd's server; see the [module docs](self).
#[derive(Debug)]
#[must_use = "call into_ports or into_router to build the routers"]
pub struct Routes {
    readiness: Readiness,
    health: HealthConfig,
    metrics: Option<Arc<Registry>>,
    webhook: Option<Webhook>,
}

/// One router per port, as controller-runtime serves them. Each is a plain axum [`Router`]:
/// serve it with a [`Server`] or merge it into your own.
#[derive(Debug)]
#[non_exhaustive]
pub struct Ports {
    /// `/livez`, `/livez/{name}`, `/readyz`, `/readyz/{name}`: for the kubelet, plain HTTP.
    pub probes: Router,
    /// `/metrics`, when a registry was given: bind it to localhost or protect it
    /// ([`auth::protect`](crate::auth::protect)).
    pub metrics: Option<Router>,
    /// `POST /validate/tier`, when a webhook was given: for kube-apiserver, over TLS.
    pub webhook: Option<Router>,
}

impl Routes {
    /// The health routes over `readiness`, with the default [`HealthConfig`].
    pub fn new(readiness: Readiness) -> Self {
        Self {
            readiness,
            health: HealthConfig::default(),
            metrics: None,
            webhook: None,
        }
    }

    /// Which checks `/livez` and `/readyz` include.
    pub fn health(mut self, config: HealthConfig) -> Self {
        self.health = config;
        self
    }

    /// Serve `/metrics` from `registry` (see [`metrics::register`]).
    pub fn metrics(mut self, registry: Arc<Registry>) -> Self {
        self.metrics = Some(registry);
        self
    }

    /// Serve `POST /validate/tier`.
    pub fn webhook(mut self, webhook: Webhook) -> Self {
        self.webhook = Some(webhook);
        self
    }

    /// One router per port.
    pub fn into_ports(self) -> Ports {
        Ports {
            probes: health::routes(self.readiness, self.health),
            metrics: self.metrics.map(metrics::routes),
            webhook: self.webhook.map(Webhook::routes),
        }
    }

    /// Every route on one router.
    pub fn into_router(self) -> Router {
        let ports = self.into_ports();
        let mut router = ports.probes;
        if let Some(metrics) = ports.metrics {
            router = router.merge(metrics);
        }
        if let Some(webhook) = ports.webhook {
            router = router.merge(webhook);
        }
        router
    }
}

type Labels = [(&'static str, &'static str); 2];

/// The connection metrics of every [`Server`] sharing it, labelled by server name (see
/// [`Server::name`]); register them once with [`ServerMetrics::register`].
///
/// | metric | type | labels |
/// |---|---|---|
/// | `tierd_http_connections` | gauge | `server`: connections open now |
/// | `tierd_http_connections_closed_total` | counter | `server`, `reason` (`shed`, `idle_timeout`, `header_timeout`, `body_timeout`, `body_budget`): connections the server closed |
/// | `tierd_tls_handshake_failures_total` | counter | `server`, `reason` (`client_hello_timeout`, `timeout`, `error`, `client_certificate` (missing or refused, see [`ClientAuth`](crate::tls::ClientAuth)), `shed`) |
/// | `tierd_tls_client_certificates_rejected_total` | counter | `server`, `reason` ([`ClientCertRejection::LABELS`](crate::tls::ClientCertRejection::LABELS)): client certificates refused, each also logged with the peer at a bounded rate |
#[derive(Clone, Debug, Default)]
pub struct ServerMetrics {
    open: Family<[(&'static str, &'static str); 1], Gauge>,
    closed: Family<Labels, Counter>,
    handshake_failures: Family<Labels, Counter>,
    client_certificates: crate::tls::ClientCertRejections,
}

impl ServerMetrics {
    /// Registers the metrics in `registry` under the `tierd_` prefix (prometheus-client ends
    /// each help text with a full stop, so the texts here have none).
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix(metrics::PREFIX);
        registry.register(
            "http_connections",
            "Connections open now",
            self.open.clone(),
        );
        registry.register(
            "http_connections_closed",
            "Connections the server closed: shed to admit a new one, or past a timeout",
            self.closed.clone(),
        );
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes that failed, timed out or were shed",
            self.handshake_failures.clone(),
        );
        self.client_certificates.register(registry);
    }

    fn closed(&self, server: &'static str, reason: Closed, n: usize) {
        let labels = [("server", server), ("reason", reason.as_str())];
        self.closed
            .get_or_create(&labels)
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }

    fn handshake_failed(&self, server: &'static str, reason: &'static str) {
        let labels = [("server", server), ("reason", reason)];
        self.handshake_failures.get_or_create(&labels).inc();
    }

    fn open(&self, server: &'static str) -> Gauge {
        self.open.get_or_create(&[("server", server)]).clone()
    }
}

/// Serves a router on one listener, TLS or plain, until a shutdown future resolves; see the
/// [module docs](self).
#[derive(Debug)]
#[must_use = "call serve to run the server"]
pub struct Server {
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    name: &'static str,
    metrics: ServerMetrics,
    budget: Option<BodyBudget>,
}

impl Server {
    /// A plain-HTTP server of `router` with the default [`Limits`].
    pub fn new(router: Router) -> Self {
        Self {
            router,
            tls: None,
            limits: Limits::default(),
            name: "http",
            metrics: ServerMetrics::default(),
            budget: None,
        }
    }

    /// Charge request bodies to `budget` (shared with other servers, or read by a test)
    /// instead of a budget of its own of [`Limits::max_body_bytes_held`].
    pub fn body_budget(mut self, budget: BodyBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Serve TLS with `config` (e.g.
    /// [`CertReloader::server_config`](crate::tls::CertReloader::server_config)).
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(config);
        self
    }

    /// The limits of every connection.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The longest a TLS handshake may take (default 5 s).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.limits.handshake_timeout = timeout;
        self
    }

    /// The server's name in logs and in the `server` label of its metrics (default `http`).
    pub fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// Count connections in `metrics` (registered elsewhere).
    pub fn metrics(mut self, metrics: ServerMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Serves on `listener` until `shutdown` resolves, then stops accepting, finishes the
    /// requests in flight, closes idle connections and returns.
    ///
    /// # Errors
    ///
    /// [`ServeError`] if the listener's address cannot be read.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
        let scheme = if self.tls.is_some() { "HTTPS" } else { "HTTP" };
        tracing::info!(%addr, server = self.name, "serving {scheme}");
        let mut limits = self.limits;
        limits.max_header_bytes = limits.max_header_bytes.max(MIN_HEADER_BYTES);
        let budget = self
            .budget
            .unwrap_or_else(|| BodyBudget::new(limits.max_body_bytes_held));
        let shared = Arc::new(Shared {
            budget,
            router: self.router,
            tls: self.tls,
            limits,
            name: self.name,
            metrics: self.metrics,
            pool: Pool::new(&limits),
            draining: watch::channel(false).0,
        });
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, peer)) => Arc::clone(&shared).spawn(tcp, peer),
                    Err(error) => accept_error(&shared, error).await,
                },
            }
        }
        drop(listener);
        shared.draining.send_replace(true);
        shared.pool.emptied().await;
        tracing::info!(%addr, server = shared.name, "server stopped");
        Ok(())
    }
}

/// What every connection task of one server shares.
#[derive(Debug)]
struct Shared {
    budget: BodyBudget,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    name: &'static str,
    metrics: ServerMetrics,
    pool: Arc<Pool>,
    draining: watch::Sender<bool>,
}

impl Shared {
    fn spawn(self: Arc<Self>, tcp: TcpStream, peer: SocketAddr) {
        // Small responses must not wait for the peer's delayed ACK.
        let _ = tcp.set_nodelay(true);
        let phase = if self.tls.is_some() {
            Phase::Handshake
        } else {
            Phase::Idle
        };
        let (admitted, shed) = self.pool.admit(phase);
        if shed > 0 {
            self.metrics.closed(self.name, Closed::Shed, shed);
            tracing::debug!(
                server = self.name,
                shed,
                "connection limit reached; shed the longest-waiting connections"
            );
        }
        tokio::spawn(async move {
            let open = self.metrics.open(self.name);
            open.inc();
            self.connection(tcp, peer, &admitted).await;
            open.dec();
            drop(admitted);
        });
    }

    async fn connection(&self, tcp: TcpStream, peer: SocketAddr, admitted: &Admitted) {
        let slot = &admitted.slot;
        let Some(config) = &self.tls else {
            return self.http(tcp, peer, slot).await;
        };
        let mut draining = self.draining.subscribe();
        let tls = tokio::select! {
            tls = handshake(tcp, Arc::clone(config), &self.limits) => tls,
            () = slot.shed() => Err(HandshakeFailure::Shed),
            _ = draining.wait_for(|d| *d) => return,
        };
        match tls {
            Ok(tls) => {
                slot.set(Phase::Idle);
                self.http(tls, peer, slot).await;
            }
            Err(failure) => {
                self.metrics.handshake_failed(self.name, failure.reason());
                let refused = match &failure {
                    HandshakeFailure::ClientCertificate(error) => self
                        .metrics
                        .client_certificates
                        .record(self.name, peer, error),
                    _ => false,
                };
                if !refused {
                    tracing::debug!(%peer, server = self.name, %failure, "TLS handshake failed");
                }
            }
        }
    }

    /// Serves HTTP/1.1 on `io` until it closes, its slot is shed or times out, or the server
    /// drains.
    async fn http<I>(&self, io: I, peer: SocketAddr, slot: &Arc<Slot>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let limits = self.limits;
        let service = {
            let router = self.router.clone();
            let slot = Arc::clone(slot);
            let (metrics, name) = (self.metrics.clone(), self.name);
            let budget = self.budget.clone();
            hyper::service::service_fn(move |request: Request<Incoming>| {
                let mut router = router.clone();
                let slot = Arc::clone(&slot);
                let metrics = metrics.clone();
                let budget = budget.clone();
                async move {
                    slot.set(Phase::Busy);
                    let (request, charge) = charged(request, budget, limits.max_header_bytes);
                    let call = router.call(request);
                    let mut response = match tokio::time::timeout(limits.body_timeout, call).await {
                        Ok(Ok(response)) => response,
                        Ok(Err(never)) => match never {},
                        Err(_) => {
                            metrics.closed(name, Closed::BodyTimeout, 1);
                            request_timeout()
                        }
                    };
                    if let Some(refusal) = charge.as_deref().and_then(Charge::refused) {
                        metrics.closed(name, Closed::BodyBudget, 1);
                        tracing::debug!(server = name, %refusal, "request body refused");
                        response = budget_refused(refusal);
                    }
                    drop(charge);
                    slot.set(Phase::Idle);
                    Ok::<_, Infallible>(response)
                }
            })
        };
        // No hyper header timer: the slot's deadlines (idle, then head) close a slow head, and
        // hyper's would cost a boxed timer armed and dropped on every request.
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .max_buf_size(limits.max_header_bytes)
            .keep_alive(true)
            .serve_connection(TokioIo::new(Tracked::new(io, Arc::clone(slot))), service);
        let mut connection = std::pin::pin!(connection);
        let mut draining = self.draining.subscribe();
        let mut closing = false;
        loop {
            let (deadline, _) = slot.deadline(&limits);
            // An idle connection's head may begin at any moment without waking this loop (the
            // slot only records it), so look again at least every `header_timeout`: a head
            // started meanwhile is then held to its own deadline, not to the idle one.
            let wake = match tokio::time::Instant::now().checked_add(limits.header_timeout) {
                Some(look) if slot.phase() == Phase::Idle => deadline.min(look),
                _ => deadline,
            };
            tokio::select! {
                // The connection first: it is what wakes this task on nearly every poll.
                biased;
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, server = self.name, %error, "connection ended with an error");
                    }
                    return;
                }
                () = slot.shed() => {
                    tracing::debug!(%peer, server = self.name, "connection shed");
                    return;
                }
                () = tokio::time::sleep_until(wake) => {
                    let (deadline, reason) = slot.deadline(&limits);
                    if deadline <= tokio::time::Instant::now() {
                        if let Some(reason) = reason {
                            self.metrics.closed(self.name, reason, 1);
                            tracing::debug!(%peer, server = self.name, reason = reason.as_str(), "connection timed out");
                        }
                        return;
                    }
                }
                _ = draining.wait_for(|d| *d), if !closing => {
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// The request with its body (if it has one) charged to `budget` beyond its first `allowance`
/// bytes, and the charge.
fn charged(
    request: Request<Incoming>,
    budget: BodyBudget,
    allowance: usize,
) -> (Request<Body>, Option<Arc<Charge>>) {
    use hyper::body::Body as _;

    // No body, or one whose declared length (hyper never delivers more) is within the free
    // allowance: it can never take from the budget, so it is not wrapped.
    let body = request.body();
    let free = u64::try_from(allowance).unwrap_or(u64::MAX);
    if body.is_end_stream() || body.size_hint().upper().is_some_and(|n| n <= free) {
        return (request.map(Body::new), None);
    }
    let charge = Charge::new(budget);
    let request =
        request.map(|body| Body::new(Budgeted::new(body, Arc::clone(&charge), allowance)));
    (request, Some(charge))
}

/// `503` (or `413` for a chunk larger than the budget), closing the connection.
fn budget_refused(refusal: BudgetRefusal) -> Response<Body> {
    let mut response = Response::new(Body::from(format!("{refusal}\n")));
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    *response.status_mut() = match refusal {
        BudgetRefusal::Exhausted { .. } => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            StatusCode::SERVICE_UNAVAILABLE
        }
        BudgetRefusal::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
    };
    response
}

/// `408 Request Timeout`, closing the connection.
fn request_timeout() -> Response<Body> {
    let mut response = Response::new(Body::from(
        "request timed out: the body did not arrive in time\n",
    ));
    *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Why a TLS handshake did not complete.
#[derive(Debug, thiserror::Error)]
enum HandshakeFailure {
    #[error("no ClientHello within {0:?}")]
    ClientHelloTimeout(Duration),
    #[error("not completed within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Error(#[source] io::Error),
    #[error("client certificate refused: {0}")]
    ClientCertificate(#[source] rustls::Error),
    #[error("shed to admit a newer connection")]
    Shed,
}

impl HandshakeFailure {
    fn reason(&self) -> &'static str {
        match self {
            Self::ClientHelloTimeout(_) => "client_hello_timeout",
            Self::Timeout(_) => "timeout",
            Self::Error(_) => "error",
            Self::ClientCertificate(_) => "client_certificate",
            Self::Shed => "shed",
        }
    }
}

/// A TLS handshake: the ClientHello within `client_hello_timeout`, all of it within
/// `handshake_timeout`.
async fn handshake(
    tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    limits: &Limits,
) -> Result<TlsStream<TcpStream>, HandshakeFailure> {
    let started = tokio::time::Instant::now();
    let hello_limit = limits.client_hello_timeout.min(limits.handshake_timeout);
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
    let start = tokio::time::timeout(hello_limit, acceptor)
        .await
        .map_err(|_| HandshakeFailure::ClientHelloTimeout(hello_limit))?
        .map_err(HandshakeFailure::Error)?;
    let rest = limits.handshake_timeout.saturating_sub(started.elapsed());
    tokio::time::timeout(rest, start.into_stream(config))
        .await
        .map_err(|_| HandshakeFailure::Timeout(limits.handshake_timeout))?
        .map_err(|error| {
            let rustls = error
                .get_ref()
                .and_then(|e| e.downcast_ref::<rustls::Error>());
            match rustls {
                Some(
                    refused @ (rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented),
                ) => HandshakeFailure::ClientCertificate(refused.clone()),
                _ => HandshakeFailure::Error(error),
            }
        })
}

/// As axum's listener: per-connection errors are skipped. When the process is out of file
/// descriptors, the longest-waiting connection is shed rather than accepting pausing for long;
/// other errors are logged and followed by a short pause.
async fn accept_error(shared: &Shared, error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    if shared.pool.shed_waiting() {
        shared.metrics.closed(shared.name, Closed::Shed, 1);
    }
    tracing::warn!(%error, server = shared.name, "accepting a connection failed; shed the longest-waiting connection, retrying in 50 ms");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_readyz_covers_what_the_handlers_declare() {
        use crate::readiness::{CheckKind, SHUTDOWN, SYSTEM_TIERS};

        let (_tx, status) = tokio::sync::watch::channel(tier_core::Status::default());
        let cache = crate::readiness::CacheSynced::new(std::sync::Arc::new(
            tier_core::FixedLister::default(),
        ));
        let readiness = crate::readiness::Readiness::standard(
            status,
            cache,
            &crate::readiness::Shutdown::new(),
        );
        let required = |name: &str| readiness.kind(name) == Some(CheckKind::Required);
        for name in Webhook::REQUIRES {
            assert!(required(name), "{name}");
        }
        assert!(required(SHUTDOWN));
        assert!(!required(SYSTEM_TIERS));
        assert_eq!(readiness.kind(SYSTEM_TIERS), Some(CheckKind::Informational));
    }
}
