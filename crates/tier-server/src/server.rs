//! Assembling the routes and serving them until shutdown.
//!
//! [`Routes`] builds the router: `/livez`, `/livez/{name}`, `/readyz`, `/readyz/{name}` always,
//! `/metrics` and `POST /validate/tier` when given. [`Server`] serves a router on one listener,
//! over TLS when given a rustls configuration (see [`CertReloader`](crate::CertReloader)), plain
//! HTTP otherwise, and shuts down gracefully when a future resolves: it stops accepting, lets
//! requests in flight finish, then returns. To serve health and metrics in plain HTTP next to a
//! TLS webhook, run two servers on two listeners (a [`Router`] is cheap to clone).
//!
//! # Shutdown order
//!
//! On SIGTERM, [`Shutdown::trigger`](crate::Shutdown::trigger) first (the `shutdown` check fails
//! at once, so the pod leaves its Service's endpoints), then let the server drain: pass
//! [`Shutdown::drained`](crate::Shutdown::drained) as the shutdown future. Wrap `serve` in a
//! timeout if a client may hold a request open for long.
//!
//! ```
//! # async fn example() -> Result<(), tier_server::ServeError> {
//! use std::time::Duration;
//!
//! use tier_server::{Readiness, Routes, Server, Shutdown};
//!
//! let shutdown = Shutdown::new();
//! let router = Routes::new(Readiness::new()).into_router();
//! let listener = tier_server::server::bind(([127, 0, 0, 1], 0).into()).await?;
//! let serving = tokio::spawn(Server::new(router).serve(listener, shutdown.drained(Duration::ZERO)));
//! shutdown.trigger();
//! # let _ = serving.await;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::serve::ListenerExt;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::health::{self, HealthConfig};
use crate::metrics;
use crate::readiness::Readiness;
use crate::tls::TlsListener;
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
#[must_use = "call into_router to build the router"]
pub struct Routes {
    readiness: Readiness,
    health: HealthConfig,
    metrics: Option<Arc<Registry>>,
    webhook: Option<Webhook>,
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

    /// The router.
    pub fn into_router(self) -> Router {
        let mut router = health::routes(self.readiness, self.health);
        if let Some(registry) = self.metrics {
            router = router.merge(metrics::routes(registry));
        }
        if let Some(webhook) = self.webhook {
            router = router.merge(webhook.routes());
        }
        router
    }
}

/// Serves a router on one listener, TLS or plain, until a shutdown future resolves.
#[derive(Debug)]
#[must_use = "call serve to run the server"]
pub struct Server {
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    handshake_timeout: Duration,
}

impl Server {
    /// A plain-HTTP server of `router`.
    pub fn new(router: Router) -> Self {
        Self {
            router,
            tls: None,
            handshake_timeout: Duration::from_secs(10),
        }
    }

    /// Serve TLS with `config` (e.g. [`CertReloader::server_config`](crate::CertReloader::server_config)).
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(config);
        self
    }

    /// The longest a TLS handshake may take (default 10 s).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Serves on `listener` until `shutdown` resolves, then stops accepting, finishes the
    /// requests in flight and returns.
    ///
    /// # Errors
    ///
    /// [`ServeError`] if the listener fails.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
        match self.tls {
            Some(config) => {
                tracing::info!(%addr, "serving HTTPS");
                let listener =
                    TlsListener::new(listener, config).handshake_timeout(self.handshake_timeout);
                axum::serve(listener, self.router)
                    .with_graceful_shutdown(shutdown)
                    .await
            }
            None => {
                tracing::info!(%addr, "serving HTTP");
                // Small responses must not wait for the peer's delayed ACK.
                let listener = listener.tap_io(|tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                axum::serve(listener, self.router)
                    .with_graceful_shutdown(shutdown)
                    .await
            }
        }
        .map_err(ServeError::Serve)?;
        tracing::info!(%addr, "server stopped");
        Ok(())
    }
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
        let readiness = crate::Readiness::standard(status, cache, &crate::Shutdown::new());
        let required = |name: &str| readiness.kind(name) == Some(CheckKind::Required);
        for name in Webhook::REQUIRES {
            assert!(required(name), "{name}");
        }
        assert!(required(SHUTDOWN));
        assert!(!required(SYSTEM_TIERS));
        assert_eq!(readiness.kind(SYSTEM_TIERS), Some(CheckKind::Informational));
    }
}
