//! Integration tests of tier-testserver: plain HTTP requests and the real kube client.

// Test helpers outside `#[test]` functions may panic on unexpected input like the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod admission;
mod calico;
mod common;
mod faults;
mod http_api;
mod kube_client;
mod watch;
