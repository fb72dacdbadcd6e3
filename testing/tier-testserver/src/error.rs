//! Errors of setting up and steering the test servers (request failures are
//! [`StatusError`](crate::StatusError)s instead). None of them is worth retrying.

use std::path::PathBuf;

/// A failure to start or configure a test server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding the loopback listener failed.
    #[error("binding 127.0.0.1:0 failed")]
    Bind(#[source] std::io::Error),
    /// The listener has no local address.
    #[error("reading the listener address failed")]
    LocalAddr(#[source] std::io::Error),
    /// A kubeconfig was requested for a user that has no token.
    #[error("no bearer token is configured for user {0:?}")]
    UnknownUser(String),
    /// Writing a kubeconfig file failed.
    #[error("writing kubeconfig {path:?} failed")]
    WriteKubeconfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The webhook CA bundle holds no usable certificate.
    #[error("the webhook CA bundle is invalid: {0}")]
    InvalidCa(String),
    /// Building a TLS configuration failed.
    #[error("building the TLS configuration failed")]
    Tls(#[source] rustls::Error),
    /// Seeding the store at start failed.
    #[error("seeding the store failed: {0}")]
    Seed(#[source] crate::status::StatusError),
    /// Generating the test webhook's certificate failed.
    #[error("generating a self-signed certificate failed")]
    Certificate(#[source] rcgen::Error),
}
