//! The server: the loopback listener, per-connection tasks, and [`TestApiServer`], the
//! handle tests use to steer and inspect it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinHandle;

use crate::admission::Admission;
use crate::config::{AdmissionMode, ServerConfig};
use crate::context::{Grant, Shared};
use crate::error::Error;
use crate::faults::{Fault, FaultId, Faults, Verb};
use crate::kubeconfig;
use crate::log::{LogBook, RequestLog};
use crate::reply::Outcome;
use crate::store::Store;

/// An in-process Kubernetes API server serving Antrea's (and, when configured, Calico's) Tiers
/// over plain HTTP on 127.0.0.1.
///
/// Start it inside a tokio runtime; it serves from spawned tasks until it is dropped or
/// [`shutdown`](Self::shutdown). Point the real kube client at it with
/// [`kubeconfig_yaml`](Self::kubeconfig_yaml). Steer it with
/// [`set_admission`](Self::set_admission), [`inject`](Self::inject),
/// [`drop_watches`](Self::drop_watches), [`expire_next_watch`](Self::expire_next_watch) and
/// [`store`](Self::store); inspect it with [`requests`](Self::requests).
pub struct TestApiServer {
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TestApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApiServer")
            .field("url", &self.url())
            .field("store", &self.shared.store)
            .finish_non_exhaustive()
    }
}

impl TestApiServer {
    /// Binds 127.0.0.1 (on [`ServerConfig::port`], any free port by default) and starts
    /// serving. Must be called inside a tokio runtime.
    pub async fn start(config: ServerConfig) -> Result<Self, Error> {
        let listener = TcpListener::bind(("127.0.0.1", config.port))
            .await
            .map_err(Error::Bind)?;
        let addr = listener.local_addr().map_err(Error::LocalAddr)?;
        let admission = Admission::new(config.admission.clone(), config.cluster_network_policy)?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (watch_generation, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            store: Store::new(&config),
            users: RwLock::new(config.users.clone()),
            grants: RwLock::new(Vec::new()),
            admission: RwLock::new(Arc::new(admission)),
            faults: Faults::default(),
            log: LogBook::new(config.limits.max_log_records),
            watch_generation,
            expire_watches: AtomicUsize::new(0),
            open_watches: AtomicUsize::new(0),
            shutdown: shutdown_rx,
            config,
            addr,
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        tracing::debug!(%addr, "test API server listening");
        Ok(Self {
            shared,
            shutdown,
            accept: Some(accept),
        })
    }

    /// Base URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The storage, for reading state and for "other actor" writes that bypass admission.
    pub fn store(&self) -> Store {
        self.shared.store.clone()
    }

    /// Events recorded through the Events endpoints, oldest first.
    pub fn events(&self) -> Vec<Value> {
        self.shared.store.events()
    }

    /// Adds (or replaces) a user authenticated by bearer `token`.
    pub fn add_user(&self, token: &str, name: &str) {
        self.shared
            .users
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.to_owned(), name.to_owned());
    }

    /// Lets `user` use `verb` (`*`: any) on the non-resource URL `path`, as an RBAC rule with
    /// `nonResourceURLs` would: SubjectAccessReviews for it answer `allowed: true`.
    pub fn grant_non_resource(&self, user: &str, verb: &str, path: &str) {
        self.shared
            .grants
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Grant {
                user: user.to_owned(),
                verb: verb.to_owned(),
                path: path.to_owned(),
            });
    }

    /// Switches the admission mode for requests that arrive from now on.
    ///
    /// Fails when a webhook mode's CA bundle is unusable (the mode is then unchanged).
    pub fn set_admission(&self, mode: AdmissionMode) -> Result<(), Error> {
        let admission = Arc::new(Admission::new(
            mode,
            self.shared.config.cluster_network_policy,
        )?);
        *self
            .shared
            .admission
            .write()
            .unwrap_or_else(PoisonError::into_inner) = admission;
        Ok(())
    }

    /// The current admission mode.
    pub fn admission(&self) -> AdmissionMode {
        self.shared.admission().mode().clone()
    }

    /// Activates a fault; see [`Fault`].
    pub fn inject(&self, fault: Fault) -> FaultId {
        self.shared.faults.inject(fault)
    }

    /// Removes one fault; returns whether it was still active.
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

    /// Ends every open watch stream now (a clean end of the chunked body, as when
    /// kube-apiserver restarts gracefully).
    pub fn drop_watches(&self) {
        self.shared.watch_generation.send_modify(|g| *g += 1);
    }

    /// The next watch request gets an ERROR event with a 410 Expired Status and ends.
    pub fn expire_next_watch(&self) {
        self.shared.expire_watches.fetch_add(1, Ordering::SeqCst);
    }

    /// Number of watch streams currently open.
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
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

    /// Waits until at least `n` Tier requests with `verb` (and `name`, when given) were
    /// logged, or `timeout` passes; returns whether they were.
    pub async fn wait_for_count(
        &self,
        verb: Verb,
        name: Option<&str>,
        n: usize,
        timeout: Duration,
    ) -> bool {
        self.wait_for_requests(|log| log.count(verb, name) >= n, timeout)
            .await
    }

    /// Waits until `open_watches() >= n` or `timeout` passes; returns whether it happened.
    pub async fn wait_for_watches(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.open_watches() >= n {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A kubeconfig (YAML) for `user` with one cluster (this server, plain HTTP), one user
    /// (its bearer token) and one context named `context_name`, selected as current.
    pub fn kubeconfig_yaml(&self, user: &str, context_name: &str) -> Result<String, Error> {
        let token = self.token_of(user)?;
        Ok(kubeconfig::render(&self.url(), user, &token, context_name))
    }

    /// Writes [`kubeconfig_yaml`](Self::kubeconfig_yaml) for `user` (context `tier-testserver`)
    /// to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>, user: &str) -> Result<(), Error> {
        let path = path.as_ref();
        let yaml = self.kubeconfig_yaml(user, "tier-testserver")?;
        std::fs::write(path, yaml).map_err(|source| Error::WriteKubeconfig {
            path: path.to_owned(),
            source,
        })
    }

    fn token_of(&self, user: &str) -> Result<String, Error> {
        self.shared
            .users
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(_, name)| name.as_str() == user)
            .map(|(token, _)| token.clone())
            .ok_or_else(|| Error::UnknownUser(user.to_owned()))
    }

    /// Stops serving: closes the listener, every connection and every watch, and waits for
    /// the listener task to end.
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        if let Some(accept) = self.accept.take() {
            accept.abort();
        }
    }
}

/// How long a connection may wait for its next request (or for the rest of a request's head)
/// before it is closed: kube-apiserver's `IdleTimeout` (90 s; its `ReadHeaderTimeout` is 32 s,
/// and hyper has one timer for both). It bounds how long a client that sends nothing holds one
/// of [`Limits::max_connections`](crate::Limits::max_connections).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.clone();
    // At most `max_connections` are served at once; further clients wait in the backlog.
    let permits = Arc::new(Semaphore::new(shared.config.limits.max_connections.max(1)));
    loop {
        let permit = tokio::select! {
            () = crate::util::stopped(&mut shutdown) => break,
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        tokio::select! {
            () = crate::util::stopped(&mut shutdown) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // As kube-apiserver (Go enables TCP_NODELAY by default): without it, a
                    // watch event written in pieces waits for the client's delayed ACK.
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_connection(stream, Arc::clone(&shared), permit));
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// Serves one HTTP/1.1 connection until it closes, waits [`IDLE_TIMEOUT`] for a request, a
/// fault kills it, or the server stops;
/// `_permit` counts it against the connection bound meanwhile.
async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, _permit: OwnedSemaphorePermit) {
    let mut shutdown = shared.shutdown.clone();
    let kill = Arc::new(Notify::new());
    let service = {
        let kill = Arc::clone(&kill);
        service_fn(move |request| {
            let shared = Arc::clone(&shared);
            let kill = Arc::clone(&kill);
            async move {
                match crate::api::handle(shared, request).await {
                    Outcome::Respond(response) => Ok::<_, Infallible>(response),
                    Outcome::Drop => {
                        kill.notify_one();
                        std::future::pending().await
                    }
                    Outcome::Hang => std::future::pending().await,
                }
            }
        })
    };
    let connection = http1::Builder::new()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(IDLE_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
        }
        () = kill.notified() => tracing::debug!("connection dropped by a fault"),
        () = crate::util::stopped(&mut shutdown) => {}
    }
}
