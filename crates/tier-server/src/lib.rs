//! The HTTP side of tierd: health and readiness endpoints, Prometheus metrics, the Tier
//! validating webhook and TLS with certificate reload. The `tierd` binary only wires it.
//!
//! - [`readiness`]: the readiness gate, a registry of named [`Check`](readiness::Check)s. Every
//!   handler declares the checks it depends on and answers 503 until they pass; nothing waits for
//!   "all caches".
//! - [`health`]: `/livez`, `/readyz`, `/readyz/{name}` with kube-apiserver's output format.
//! - [`metrics`]: `/metrics`, read from the latest [`tier_core::Status`] at scrape time.
//! - [`webhook`]: `POST /validate/tier`, Antrea's Tier admission rules
//!   ([`tier_core::admission::review`]) against the Tier cache.
//! - [`tls`]: a rustls certificate resolver that reloads its PEM files when they change, and
//!   exports and warns about its expiry.
//! - [`auth`]: `/metrics` protected as controller-runtime protects it (TokenReview and
//!   SubjectAccessReview, behind the [`auth::Authorizer`] port).
//! - [`conn`]: the [`Limits`](conn::Limits) every connection lives under, and load shedding.
//! - [`server`]: [`Routes`](server::Routes) assembles one router per port
//!   ([`Ports`](server::Ports): probes, metrics, webhook), each mountable in an embedder's own
//!   axum router; [`Server`](server::Server) serves one (TLS or plain) until
//!   a shutdown future resolves.
//!
//! # Architecture invariants
//!
//! - The server starts serving at once, before any cache has synced: a handler that needs a cache
//!   declares it (e.g. [`Webhook::REQUIRES`](webhook::Webhook::REQUIRES)) and answers "not ready"
//!   until the check passes, instead of the whole server waiting (Antrea's first dependency loop).
//! - `/readyz` does not include `system-tiers` by default: creating a Tier may need this very
//!   webhook, which kube-apiserver reaches only through Ready pods (the second loop; see
//!   [`health`]).
//! - No background task updates metrics or checks: both read the latest status when asked.
//! - A full [`Server`](server::Server) does not pause `accept`: at a connection or handshake cap it
//!   sheds the connection that has waited longest without a request, and every connection lives
//!   under the [`Limits`](conn::Limits)' timeouts, so memory is bounded by configuration, not by
//!   clients. Only an `accept` error (such as running out of file descriptors) pauses it: it sheds
//!   one waiting connection and accepts again 50 ms later.
//!
//! ```no_run
//! # async fn example(
//! #     status: tier_core::StatusHandle,
//! #     lister: std::sync::Arc<dyn tier_core::TierLister>,
//! # ) -> Result<(), tier_server::server::ServeError> {
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use tier_core::admission::AdmissionPolicy;
//! use tier_server::metrics;
//! use tier_server::readiness::{Readiness, Shutdown};
//! use tier_server::server::{Routes, Server};
//! use tier_server::webhook::Webhook;
//!
//! let shutdown = Shutdown::new();
//! let cache = tier_server::readiness::CacheSynced::new(lister.clone());
//! let readiness = Readiness::standard(status.clone(), cache, &shutdown);
//! let mut registry = prometheus_client::registry::Registry::default();
//! metrics::register(&mut registry, status);
//! let policy = AdmissionPolicy::antrea("system:serviceaccount:kube-system:tierd");
//! let ports = Routes::new(readiness.clone())
//!     .metrics(Arc::new(registry))
//!     .webhook(Webhook::new(lister, policy, &readiness))
//!     .into_ports();
//! // The probes on their own plain port; the webhook and the metrics likewise.
//! let listener = tier_server::server::bind(([0, 0, 0, 0], 8081).into()).await?;
//! Server::new(ports.probes)
//!     .name("probes")
//!     .serve(listener, shutdown.drained(Duration::from_secs(5)))
//!     .await
//! # }
//! ```

pub mod auth;
pub mod conn;
pub mod health;
pub mod metrics;
pub mod readiness;
pub mod server;
pub mod tls;
pub mod webhook;
