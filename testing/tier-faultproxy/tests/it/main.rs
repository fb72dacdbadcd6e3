//! The proxy in front of a real upstream (tier-testserver, its test webhook, a TLS server
//! checking client certificates), seen through the real kube client and kube-runtime's
//! watcher.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;
mod faults;
mod identity;
mod outage;
mod watch;
mod webhook;
