//! TLS: a certificate resolver that reloads its PEM files when they change, and a TLS listener
//! for axum.
//!
//! [`CertReloader`] holds the current certificate chain and key and answers every handshake with
//! them (a rustls [`ResolvesServerCert`]). [`CertReloader::watch`] re-reads the two files every
//! `interval` and installs them when their content changed, so a rotated Secret (cert-manager,
//! a kubelet-projected volume) is picked up without a restart. A new pair that does not parse or
//! whose key does not match the certificate is refused: the old one stays in service and the
//! error is logged once per distinct content (a half-written rotation heals on the next poll).
//!
//! [`TlsListener`] wraps a `TcpListener` for [`axum::serve()`]. Handshakes run concurrently, each
//! with a timeout, so one slow client cannot hold up others. ALPN offers `http/1.1`.
//!
//! One listener serves everything; it speaks TLS when certificate files are configured, plain
//! HTTP otherwise (see [`Server`](crate::Server)). With TLS, kubelet probes and scrapers use
//! `scheme: HTTPS` (they do not verify the certificate by default).
//!
//! ```no_run
//! # async fn example() -> Result<(), tier_server::TlsError> {
//! use std::time::Duration;
//!
//! use tier_server::{CertFiles, CertReloader};
//!
//! let reloader = CertReloader::load(CertFiles::new("/certs/tls.crt", "/certs/tls.key")).await?;
//! let config = reloader.server_config()?;
//! tokio::spawn(reloader.watch(Duration::from_secs(5), std::future::pending()));
//! # let _ = config;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Loading or using a certificate failed. Fix the files (or the paths) and reload; an error
/// during a reload keeps the previous certificate in service.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}; check the path and the file's permissions")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A PEM file is malformed.
    #[error("cannot parse {path} as PEM: {source}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("{path} holds no CERTIFICATE block; it must hold the certificate chain in PEM")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no private key.
    #[error("{path} holds no private key; it must hold a PKCS#8, PKCS#1 or SEC1 key in PEM")]
    NoPrivateKey {
        /// The file.
        path: PathBuf,
    },
    /// The key is unsupported or does not match the certificate.
    #[error("the key in {key} does not fit the certificate in {cert}: {source}")]
    Key {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's error.
        #[source]
        source: rustls::Error,
    },
    /// rustls refused the server configuration.
    #[error("cannot build the TLS configuration: {0}")]
    Config(#[source] rustls::Error),
}

/// The PEM files of a serving certificate: the chain (leaf first) and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    /// The certificate chain, PEM.
    pub cert: PathBuf,
    /// The private key, PEM.
    pub key: PathBuf,
}

impl CertFiles {
    /// The files `cert` and `key`.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self {
            cert: cert.into(),
            key: key.into(),
        }
    }
}

/// What a [`CertReloader::reload`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// The files hold what was last seen: nothing to do.
    Unchanged,
    /// A new certificate is in service.
    Rotated,
}

/// A rustls certificate resolver serving the latest valid certificate from a pair of PEM files.
/// See the [module docs](self).
pub struct CertReloader {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The contents last tried (installed or refused), so a refused pair is logged once.
    seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for CertReloader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertReloader")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl CertReloader {
    /// Loads `files` with the ring crypto provider.
    ///
    /// # Errors
    ///
    /// [`TlsError`] when the files cannot be read or do not hold a matching certificate and key.
    pub async fn load(files: CertFiles) -> Result<Arc<Self>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (cert_pem, key_pem) = read(&files).await?;
        let key = parse(&files, &cert_pem, &key_pem, &provider)?;
        Ok(Arc::new(Self {
            files,
            provider,
            current: RwLock::new(Arc::new(key)),
            seen: Mutex::new((cert_pem, key_pem)),
        }))
    }

    /// The files it reads.
    pub fn files(&self) -> &CertFiles {
        &self.files
    }

    /// The certificate and key in service.
    pub fn current(&self) -> Arc<CertifiedKey> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Reads the files again and installs them if their content changed.
    ///
    /// # Errors
    ///
    /// [`TlsError`] when the changed files cannot be read or used; the previous certificate
    /// stays in service. A refused content is reported once: asking again without a further
    /// change answers [`Reload::Unchanged`]. A file that cannot be read is reported every time.
    pub async fn reload(&self) -> Result<Reload, TlsError> {
        let (cert_pem, key_pem) = read(&self.files).await?;
        {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if seen.0 == cert_pem && seen.1 == key_pem {
                return Ok(Reload::Unchanged);
            }
            *seen = (cert_pem.clone(), key_pem.clone());
        }
        let key = parse(&self.files, &cert_pem, &key_pem, &self.provider)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(key);
        Ok(Reload::Rotated)
    }

    /// Reloads every `interval` until `shutdown` resolves, logging rotations and errors. Spawn it.
    pub async fn watch(self: Arc<Self>, interval: Duration, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = ticks.tick() => {}
            }
            match self.reload().await {
                Ok(Reload::Unchanged) => {}
                Ok(Reload::Rotated) => tracing::info!(
                    cert = %self.files.cert.display(),
                    "serving certificate reloaded"
                ),
                Err(error) => tracing::error!(
                    %error,
                    "serving certificate not reloaded; the previous one stays in service"
                ),
            }
        }
    }

    /// A rustls server configuration (ring provider, safe default protocol versions, no client
    /// authentication, ALPN `http/1.1`) answering with this resolver.
    ///
    /// # Errors
    ///
    /// [`TlsError::Config`] if rustls refuses the provider's defaults.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

async fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    tokio::fs::read(path)
        .await
        .map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
}

async fn read(files: &CertFiles) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    Ok((read_file(&files.cert).await?, read_file(&files.key).await?))
}

fn parse(
    files: &CertFiles,
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: files.cert.clone(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: files.cert.clone(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|source| match source {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoPrivateKey {
            path: files.key.clone(),
        },
        source => TlsError::Pem {
            path: files.key.clone(),
            source,
        },
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|source| TlsError::Key {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    })
}

type Handshake = Pin<Box<dyn Future<Output = Option<(TlsStream<TcpStream>, SocketAddr)>> + Send>>;

/// The most handshakes in progress at once; further connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;

/// A TLS listener for [`axum::serve()`]: accepts TCP connections and completes their handshakes
/// concurrently, each within a timeout (default 10 s). Failed handshakes are logged and dropped.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshake_timeout: Duration,
    handshakes: FuturesUnordered<Handshake>,
}

impl fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsListener")
            .field("tcp", &self.tcp)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("handshakes", &self.handshakes.len())
            .finish()
    }
}

impl TlsListener {
    /// Serves TLS with `config` on `tcp`.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        Self {
            tcp,
            acceptor: TlsAcceptor::from(config),
            handshake_timeout: Duration::from_secs(10),
            handshakes: FuturesUnordered::new(),
        }
    }

    /// The longest a handshake may take.
    #[must_use]
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    fn start_handshake(&self, stream: TcpStream, addr: SocketAddr) {
        let acceptor = self.acceptor.clone();
        let timeout = self.handshake_timeout;
        self.handshakes.push(Box::pin(async move {
            match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => Some((tls, addr)),
                Ok(Err(error)) => {
                    tracing::info!(%addr, %error, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::info!(%addr, ?timeout, "TLS handshake timed out");
                    None
                }
            }
        }));
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let room = self.handshakes.len() < MAX_HANDSHAKES;
            let busy = !self.handshakes.is_empty();
            tokio::select! {
                accepted = self.tcp.accept(), if room => match accepted {
                    Ok((stream, addr)) => {
                        // Small responses must not wait for the peer's delayed ACK.
                        let _ = stream.set_nodelay(true);
                        self.start_handshake(stream, addr)
                    }
                    Err(error) => accept_error(error).await,
                },
                Some(done) = self.handshakes.next(), if busy => {
                    if let Some(connection) = done {
                        return connection;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// As axum's listener: per-connection errors are skipped, others (e.g. too many open files) are
/// logged and followed by a pause.
async fn accept_error(error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "accepting a connection failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
