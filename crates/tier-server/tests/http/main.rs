//! The HTTP side of tierd over real loopback connections.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod claims;
mod common;
mod health;
mod hostile;
mod metrics;
mod tls;
mod webhook;
