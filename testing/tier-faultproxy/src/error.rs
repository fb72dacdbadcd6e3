//! The errors of starting and steering a proxy.

use std::path::PathBuf;

/// Why a [`FaultProxy`](crate::FaultProxy) could not start, or a steering call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The upstream URL is not an absolute `http://` or `https://` URL with a host.
    #[error("upstream URL {url:?} is not usable: {reason}; give one like https://127.0.0.1:6443")]
    UpstreamUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The upstream is HTTPS but no CA was given to trust its certificate.
    #[error(
        "upstream {url} is HTTPS but no CA was given: pass the API server's CA PEM with \
         ProxyConfig::upstream_ca_pem"
    )]
    MissingUpstreamCa {
        /// The upstream URL.
        url: String,
    },
    /// The name to verify the upstream's certificate for is neither a DNS name nor an IP.
    #[error("upstream server name {name:?} is neither a DNS name nor an IP address")]
    ServerName {
        /// The name given.
        name: String,
    },
    /// A PEM input held no usable certificate or key.
    #[error("{what}: {reason}")]
    Pem {
        /// Which input (`upstream CA`, `client certificate`, `client key`).
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// rcgen could not generate the proxy's CA or serving certificate.
    #[error("cannot generate the proxy's serving certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused a configuration (a key that does not match its certificate, ...).
    #[error("TLS configuration refused: {0}")]
    Tls(#[from] rustls::Error),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Too many faults are active at once.
    #[error(
        "{limit} faults are already active: remove some (FaultProxy::remove_fault, \
         clear_faults) before injecting more"
    )]
    TooManyFaults {
        /// [`Limits::max_faults`](crate::Limits::max_faults).
        limit: usize,
    },
    /// The kubeconfig file could not be written.
    #[error("cannot write the kubeconfig {path}: {source}")]
    WriteKubeconfig {
        /// Its path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}
