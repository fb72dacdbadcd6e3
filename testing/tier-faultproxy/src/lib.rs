//! A fault-injecting, TLS-terminating HTTP/1.1 reverse proxy for tests: it goes between a
//! Kubernetes client (tierd, a kube client, kubectl) and a real kube-apiserver, or between
//! kube-apiserver and a webhook, and produces the faults tier-testserver's fault worlds need,
//! while admission, RBAC and validation stay the real server's.
//!
//! It listens on `127.0.0.1:0` with a serving certificate signed by a CA of its own (made
//! fresh per proxy; [`FaultProxy::ca_pem`] is what a kubeconfig or a `caBundle` trusts) and
//! forwards every request to one upstream URL (`https://`, trusting the CA given, or `http://`
//! for tier-testserver). The caller's headers pass through (bearer tokens, impersonation),
//! except hop-by-hop ones; requests without `Authorization` can present a client certificate
//! upstream ([`ProxyConfig::client_identity`]). Responses stream through as they arrive:
//! watches and chunked lists are never buffered. Only a create's body is read (to learn the
//! object's name), everything else streams.
//!
//! # Faults
//!
//! Each [`Fault`] matches requests by [`Verb`], [`Resource`], namespace, name or path (a
//! [`Matcher`], read from the request as kube-apiserver's `RequestInfo` reads it), fires once,
//! `n` times or until removed, and does one [`FaultAction`]:
//!
//! - answer a Kubernetes `Status` without forwarding, with `Retry-After` if asked
//!   ([`Fault::too_many_requests`], [`Fault::unavailable`], [`Fault::internal_error`],
//!   [`Fault::timeout`], [`Fault::status`]);
//! - hold the request until [`FaultProxy::release`] or for a while, then forward it
//!   ([`Fault::hang`], [`Fault::delay`]);
//! - reset the connection before forwarding ([`Fault::reset`]);
//! - forward, let the upstream apply it, then reset instead of answering: the response lost
//!   after the write was applied ([`Fault::lose_response`]);
//! - end a watch after `n` events or a duration, cleanly or by reset
//!   ([`Fault::end_watch_after_events`], [`Fault::end_watch_after`], [`Fault::abruptly`]), or
//!   answer it with kube-apiserver's `410 Expired` ERROR event ([`Fault::expire_watch`]).
//!
//! Beside faults: [`FaultProxy::drop_watches`] ends every open watch now;
//! [`FaultProxy::outage`] refuses connections (or resets them at accept) and resets the open
//! ones, until [`FaultProxy::resume`].
//!
//! Every request is recorded in a [`RequestLog`] (method, path, query, what it addressed,
//! status sent and status the upstream answered, fault, arrival time and latency).
//!
//! # Bounds
//!
//! Every table the proxy keeps is bounded ([`Limits`]; the test that starts a proxy owns it):
//! client connections served at once (128; more wait in the backlog), request records (the last
//! 10,000), held requests (64; one more is answered 503 naming the bound), active faults
//! (1,024; [`FaultProxy::inject`] fails beyond), a create's body read (3 MiB, then 413), idle
//! upstream connections ([`UPSTREAM_IDLE_CONNECTIONS`] per client). Time bounds:
//! [`HANDSHAKE_TIMEOUT`], [`IDLE_TIMEOUT`], [`UPSTREAM_CONNECT_TIMEOUT`]; forwarded requests
//! have no deadline of the proxy's own (a watch lasts as long as the upstream keeps it).
//!
//! # Limits of the imitation
//!
//! HTTP/1.1 only (Go clients fall back to it), no protocol upgrades (`exec`, `port-forward`).
//! A failure to reach the upstream resets the caller's connection, as the caller would have
//! seen without a proxy; the log says why. Watch requests are forwarded with
//! `Accept-Encoding: identity` so events can be counted. The proxy trusts whoever reaches its
//! port on loopback: with a client identity, that is anyone on the machine.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use tier_faultproxy::{Fault, FaultProxy, Matcher, ProxyConfig, Verb};
//!
//! # async fn example(apiserver_url: &str, apiserver_ca: &str, token: &str) -> Result<(), tier_faultproxy::Error> {
//! let proxy = FaultProxy::start(ProxyConfig::new(apiserver_url).upstream_ca_pem(apiserver_ca)).await?;
//! let kubeconfig = proxy.kubeconfig_yaml("tierd", Some(token));
//! // ... run the code under test with `kubeconfig` ...
//! proxy.inject(Fault::lose_response(Verb::Create).on("tiers.crd.antrea.io").named("baseline"))?;
//! let creates = Matcher::verb(Verb::Create).named("baseline");
//! assert!(proxy.wait_for_count(creates.clone(), 2, Duration::from_secs(10)).await);
//! assert_eq!(proxy.requests().matching(creates)[0].upstream_code, Some(201));
//! # let _ = kubeconfig;
//! # Ok(())
//! # }
//! ```

mod error;
mod faults;
mod held;
mod io;
mod kubeconfig;
mod log;
mod proxy;
mod request;
mod status;
mod tls;
mod watch;

pub use error::Error;
pub use faults::{Fault, FaultAction, FaultId, FaultKind, WatchEnd};
pub use log::{RequestLog, RequestRecord};
pub use proxy::{
    FaultProxy, HANDSHAKE_TIMEOUT, IDLE_TIMEOUT, Limits, Outage, ProxyConfig,
    UPSTREAM_CONNECT_TIMEOUT, UPSTREAM_IDLE_CONNECTIONS,
};
pub use request::{Matcher, RequestInfo, Resource, Verb};
