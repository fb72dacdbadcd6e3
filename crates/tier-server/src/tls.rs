//! TLS: a certificate resolver that reloads its PEM files when they change.
//!
//! [`CertReloader`] holds the current certificate chain and key and answers every handshake with
//! them (a rustls [`ResolvesServerCert`]). [`CertReloader::watch`] re-reads the two files every
//! `interval` and installs them when their content changed, so a rotated Secret (cert-manager,
//! a kubelet-projected volume) is picked up without a restart. A new pair that does not parse or
//! whose key does not match the certificate is refused: the old one stays in service and the
//! error is logged once per distinct content (a half-written rotation heals on the next poll).
//!
//! A certificate that has expired, or expires within [`EXPIRY_WARNING`], is still served (a
//! webhook that refuses to start locks every Tier write out) but logged as a warning at load
//! and at every rotation, and its expiry is exported as
//! `tierd_serving_certificate_expiry_timestamp_seconds` ([`CertReloader::register`]).
//!
//! # Client authentication
//!
//! [`ClientAuth`] makes the webhook port authenticate its callers, as controller-runtime's
//! `ClientCAName` and Gatekeeper's `--client-ca-name`/`--client-cn-name` do: every connection
//! must present a client certificate that chains to the CA file (rustls's
//! [`WebPkiClientVerifier`]: validity, `clientAuth` extended key usage, signatures) and whose
//! subject CN or one of whose DNS SANs is among the allowed names (default `kube-apiserver`).
//! Anything else fails the handshake: the connection is closed before a byte of HTTP is read,
//! counted by reason in `tierd_tls_client_certificates_rejected_total{server, reason}`
//! ([`ClientCertRejection::LABELS`]) and logged as a warning naming the peer and the reason in
//! words, at a bounded rate (a burst of 20 lines, then one a second; the next line says how many
//! were left out), so a caller cannot flood the log. The CA file is reloaded like the serving
//! certificate: a
//! changed file that parses replaces the trusted CAs for new connections; one that does not is
//! refused (logged once per content) and the previous CAs stay in use. Build the configuration
//! with [`CertReloader::server_config_with_client_auth`]; the probe and metrics ports keep
//! [`CertReloader::server_config`].
//!
//! [`Server::tls`](crate::server::Server::tls) serves a configuration built here, with a short
//! ClientHello deadline and a cap on pending handshakes (see [`conn`](crate::conn)). ALPN
//! offers `http/1.1`; rustls's safe defaults allow TLS 1.2 and 1.3 with AEAD suites only.
//!
//! ```no_run
//! # async fn example() -> Result<(), tier_server::tls::TlsError> {
//! use std::time::Duration;
//!
//! use tier_server::tls::{CertFiles, CertReloader};
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
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, RootCertStore,
    ServerConfig, SignatureScheme,
};

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
    #[error(
        "cannot parse {path} as PEM: {}; it must hold PEM blocks such as -----BEGIN CERTIFICATE-----",
        pem_words(source)
    )]
    Pem {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: pem::Error,
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
    /// A certificate of the client CA file cannot be a trust anchor.
    #[error(
        "{path} holds a certificate that cannot be a client CA: {source}; it must hold the PEM CA certificates that sign kube-apiserver's client certificate"
    )]
    ClientCa {
        /// The CA file.
        path: PathBuf,
        /// rustls's error.
        #[source]
        source: rustls::Error,
    },
    /// rustls refused to build a client verifier from the CA file.
    #[error("cannot verify client certificates with the CAs in {path}: {source}")]
    ClientVerifier {
        /// The CA file.
        path: PathBuf,
        /// rustls's error.
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// No client name was allowed.
    #[error("no allowed client name: give at least one (e.g. --client-names kube-apiserver)")]
    NoClientNames,
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
    current: RwLock<Installed>,
    /// The contents last tried (installed or refused), so a refused pair is logged once.
    seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

/// The certificate in service and when it expires.
#[derive(Debug)]
struct Installed {
    key: Arc<CertifiedKey>,
    not_after: Option<SystemTime>,
}

impl Installed {
    fn new(key: CertifiedKey) -> Self {
        let not_after = key.cert.first().and_then(not_after);
        Self {
            key: Arc::new(key),
            not_after,
        }
    }
}

/// How close to expiry a certificate may be before tierd warns: 7 days.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 24 * 3600);

/// Where a certificate stands against its expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// More than [`EXPIRY_WARNING`] left.
    Valid,
    /// Expires within [`EXPIRY_WARNING`]: this much is left.
    Soon(Duration),
    /// Expired this long ago.
    Expired(Duration),
    /// The leaf certificate's validity could not be read.
    Unknown,
}

impl Expiry {
    /// Classifies a certificate valid until `not_after`, at `now`.
    pub fn at(not_after: Option<SystemTime>, now: SystemTime) -> Self {
        let Some(not_after) = not_after else {
            return Self::Unknown;
        };
        match not_after.duration_since(now) {
            Ok(left) if left > EXPIRY_WARNING => Self::Valid,
            Ok(left) => Self::Soon(left),
            Err(past) => Self::Expired(past.duration()),
        }
    }
}

/// The `notAfter` of a DER certificate.
fn not_after(der: &CertificateDer<'_>) -> Option<SystemTime> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let seconds = u64::try_from(cert.validity().not_after.timestamp()).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// A PEM error in words (rustls's `Display` shows section names as byte arrays).
fn pem_words(error: &pem::Error) -> String {
    match error {
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "a section has no end line (-----END {}-----)",
            String::from_utf8_lossy(end_marker)
        ),
        pem::Error::IllegalSectionStart { line } => format!(
            "a section starts with a malformed line ({})",
            String::from_utf8_lossy(line)
        ),
        pem::Error::Base64Decode(detail) => {
            format!("a section's base64 content is invalid ({detail})")
        }
        pem::Error::Io(error) => format!("reading failed ({error})"),
        pem::Error::NoItemsFound => "no PEM section found".to_owned(),
        other => other.to_string(),
    }
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
        let reloader = Arc::new(Self {
            files,
            provider,
            current: RwLock::new(Installed::new(key)),
            seen: Mutex::new((cert_pem, key_pem)),
        });
        reloader.warn_if_expiring(SystemTime::now());
        Ok(reloader)
    }

    /// The files it reads.
    pub fn files(&self) -> &CertFiles {
        &self.files
    }

    /// The certificate and key in service.
    pub fn current(&self) -> Arc<CertifiedKey> {
        Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .key,
        )
    }

    /// When the leaf certificate in service expires (`None` if its validity cannot be read).
    pub fn not_after(&self) -> Option<SystemTime> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .not_after
    }

    /// Where the certificate in service stands against its expiry at `now`.
    pub fn expiry(&self, now: SystemTime) -> Expiry {
        Expiry::at(self.not_after(), now)
    }

    /// Logs a warning when the certificate in service has expired or expires soon.
    fn warn_if_expiring(&self, now: SystemTime) {
        let cert = self.files.cert.display();
        match self.expiry(now) {
            Expiry::Valid | Expiry::Unknown => {}
            Expiry::Soon(left) => tracing::warn!(
                %cert,
                hours_left = left.as_secs() / 3600,
                "the serving certificate expires soon; rotate it (kube-apiserver will refuse it once expired)"
            ),
            Expiry::Expired(ago) => tracing::warn!(
                %cert,
                hours_ago = ago.as_secs() / 3600,
                "the serving certificate has expired; kube-apiserver refuses it, so Tier writes fail until it is rotated"
            ),
        }
    }

    /// Registers `tierd_serving_certificate_expiry_timestamp_seconds` (the Unix time at which
    /// the certificate in service expires, read at scrape time) in `registry`.
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        registry
            .sub_registry_with_prefix(crate::metrics::PREFIX)
            .register_collector(Box::new(ExpiryCollector(Arc::clone(self))));
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
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Installed::new(key);
        self.warn_if_expiring(SystemTime::now());
        Ok(Reload::Rotated)
    }

    /// Reloads every `interval` until `shutdown` resolves, logging rotations and errors. Spawn it.
    pub async fn watch(self: Arc<Self>, interval: Duration, shutdown: impl Future<Output = ()>) {
        let this = &self;
        every(interval, shutdown, || async move {
            match this.reload().await {
                Ok(Reload::Unchanged) => {}
                Ok(Reload::Rotated) => tracing::info!(
                    cert = %this.files.cert.display(),
                    "serving certificate reloaded"
                ),
                Err(error) => tracing::error!(
                    %error,
                    "serving certificate not reloaded; the previous one stays in service"
                ),
            }
        })
        .await;
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

impl CertReloader {
    /// As [`server_config`](Self::server_config), but every client must present a certificate
    /// that `client` accepts (see the [module docs](self#client-authentication)).
    ///
    /// # Errors
    ///
    /// [`TlsError::Config`] if rustls refuses the provider's defaults.
    pub fn server_config_with_client_auth(
        self: &Arc<Self>,
        client: &Arc<ClientAuth>,
    ) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_client_cert_verifier(Arc::clone(client) as Arc<dyn ClientCertVerifier>)
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Client authentication for the webhook port: a client certificate chained to the CAs of a
/// PEM file (reloaded when it changes) and naming an allowed client. See the
/// [module docs](self#client-authentication).
pub struct ClientAuth {
    path: PathBuf,
    names: Vec<String>,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<dyn ClientCertVerifier>>,
    /// The content last tried (installed or refused), so a refused file is logged once.
    seen: Mutex<Vec<u8>>,
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientAuth")
            .field("path", &self.path)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl ClientAuth {
    /// Trusts the CA certificates in the PEM file `path` (ring provider) and admits clients
    /// whose certificate's subject CN or a DNS SAN is exactly one of `names`.
    ///
    /// # Errors
    ///
    /// [`TlsError`] when the file cannot be read, holds no usable CA certificate, or `names`
    /// is empty (or holds only empty names).
    pub async fn load(
        path: impl Into<PathBuf>,
        names: impl IntoIterator<Item = String>,
    ) -> Result<Arc<Self>, TlsError> {
        let path = path.into();
        let names: Vec<String> = names.into_iter().filter(|n| !n.is_empty()).collect();
        if names.is_empty() {
            return Err(TlsError::NoClientNames);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pem = read_file(&path).await?;
        let verifier = client_verifier(&path, &pem, &provider)?;
        Ok(Arc::new(Self {
            path,
            names,
            provider,
            current: RwLock::new(verifier),
            seen: Mutex::new(pem),
        }))
    }

    /// The CA file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The client names admitted.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Reads the CA file again and trusts its CAs if its content changed.
    ///
    /// # Errors
    ///
    /// [`TlsError`] when the changed file cannot be read or used; the previous CAs stay
    /// trusted. A refused content is reported once (then [`Reload::Unchanged`]).
    pub async fn reload(&self) -> Result<Reload, TlsError> {
        let pem = read_file(&self.path).await?;
        {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if *seen == pem {
                return Ok(Reload::Unchanged);
            }
            seen.clone_from(&pem);
        }
        let verifier = client_verifier(&self.path, &pem, &self.provider)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = verifier;
        Ok(Reload::Rotated)
    }

    /// Reloads every `interval` until `shutdown` resolves, logging changes and errors. Spawn it.
    pub async fn watch(self: Arc<Self>, interval: Duration, shutdown: impl Future<Output = ()>) {
        let this = &self;
        every(interval, shutdown, || async move {
            match this.reload().await {
                Ok(Reload::Unchanged) => {}
                Ok(Reload::Rotated) => tracing::info!(
                    ca = %this.path.display(),
                    "client CA reloaded"
                ),
                Err(error) => tracing::error!(
                    %error,
                    "client CA not reloaded; the previous CAs stay trusted"
                ),
            }
        })
        .await;
    }

    fn verifier(&self) -> Arc<dyn ClientCertVerifier> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether the certificate's subject CN or a DNS SAN is an allowed name; the names it
    /// carries otherwise (for the error).
    fn check_name(&self, end_entity: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        let bad_encoding = || rustls::Error::InvalidCertificate(CertificateError::BadEncoding);
        let (_, cert) =
            x509_parser::parse_x509_certificate(end_entity).map_err(|_| bad_encoding())?;
        let mut presented: Vec<String> = cert
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
            .collect();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            presented.extend(
                san.value
                    .general_names
                    .iter()
                    .filter_map(|name| match name {
                        x509_parser::extensions::GeneralName::DNSName(dns) => {
                            Some((*dns).to_owned())
                        }
                        _ => None,
                    }),
            );
        }
        if presented.iter().any(|p| self.names.contains(p)) {
            return Ok(());
        }
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            OtherError(Arc::new(NameNotAllowed {
                presented: presented
                    .into_iter()
                    .take(8)
                    .map(|n| truncate(&n))
                    .collect(),
                allowed: self.names.clone(),
            })),
        )))
    }
}

/// A client certificate chained to the CA but names no allowed client.
#[derive(Debug, thiserror::Error)]
#[error(
    "the client certificate names {presented:?} (CN and DNS SANs), none of the allowed {allowed:?}"
)]
struct NameNotAllowed {
    presented: Vec<String>,
    allowed: Vec<String>,
}

/// Why a client certificate was refused in the handshake: the `reason` label of
/// `tierd_tls_client_certificates_rejected_total` (a closed set, [`LABELS`](Self::LABELS)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientCertRejection {
    /// The client sent no certificate.
    Missing,
    /// The certificate does not chain to a CA of the `--client-ca` file (or its signature does
    /// not verify).
    Untrusted,
    /// The certificate has expired.
    Expired,
    /// The certificate is not valid yet.
    NotYetValid,
    /// The certificate is not for client authentication (no `clientAuth` extended key usage).
    NotForClients,
    /// The certificate chains to the CA but names no allowed client (`--client-names`).
    NameNotAllowed,
    /// The certificate cannot be parsed, or carries a critical extension nobody handles.
    Malformed,
    /// Any other refusal of the certificate (e.g. an unsupported signature algorithm).
    Other,
}

impl ClientCertRejection {
    /// Every label [`as_str`](Self::as_str) can return.
    pub const LABELS: [&'static str; 8] = [
        "missing",
        "untrusted",
        "expired",
        "not_yet_valid",
        "not_for_clients",
        "name_not_allowed",
        "malformed",
        "other",
    ];

    /// The reason's label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Untrusted => "untrusted",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::NotForClients => "not_for_clients",
            Self::NameNotAllowed => "name_not_allowed",
            Self::Malformed => "malformed",
            Self::Other => "other",
        }
    }

    /// The reason for a handshake that failed with `error`, if it is about the client's
    /// certificate.
    pub fn of(error: &rustls::Error) -> Option<Self> {
        let certificate = match error {
            rustls::Error::NoCertificatesPresented => return Some(Self::Missing),
            rustls::Error::InvalidCertificate(certificate) => certificate,
            _ => return None,
        };
        Some(match certificate {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => Self::Untrusted,
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => Self::Expired,
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                Self::NotYetValid
            }
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                Self::NotForClients
            }
            CertificateError::BadEncoding | CertificateError::UnhandledCriticalExtension => {
                Self::Malformed
            }
            CertificateError::Other(other)
                if other.0.downcast_ref::<NameNotAllowed>().is_some() =>
            {
                Self::NameNotAllowed
            }
            _ => Self::Other,
        })
    }

    /// What was wrong, in words, and what to check.
    pub fn words(self) -> &'static str {
        match self {
            Self::Missing => "the client sent no certificate, and the webhook port requires one",
            Self::Untrusted => {
                "the client certificate is not signed by a CA of the --client-ca file"
            }
            Self::Expired => "the client certificate has expired",
            Self::NotYetValid => "the client certificate is not valid yet (is a clock wrong?)",
            Self::NotForClients => {
                "the client certificate is not for client authentication (it lacks the \
                 clientAuth extended key usage)"
            }
            Self::NameNotAllowed => {
                "the client certificate names no client of --client-names (subject CN and DNS \
                 SANs)"
            }
            Self::Malformed => "the client certificate cannot be parsed or used",
            Self::Other => "the client certificate was refused",
        }
    }
}

impl fmt::Display for ClientCertRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.words())
    }
}

/// Client certificates refused in TLS handshakes: counted by server and reason, and logged
/// with the peer at a bounded rate (one log budget for every server sharing it: the webhook's
/// [`LOG_BURST`](crate::webhook::LOG_BURST) lines, then one per
/// [`LOG_REFILL`](crate::webhook::LOG_REFILL)). Cheap to clone; clones share the counts and the
/// budget. Held by [`ServerMetrics`](crate::server::ServerMetrics), which registers it.
#[derive(Clone, Debug)]
pub(crate) struct ClientCertRejections {
    counts: Family<[(&'static str, &'static str); 2], Counter>,
    log: Arc<Mutex<crate::webhook::LogBudget>>,
}

impl Default for ClientCertRejections {
    fn default() -> Self {
        Self {
            counts: Family::default(),
            log: Arc::new(Mutex::new(crate::webhook::LogBudget::new())),
        }
    }
}

impl ClientCertRejections {
    /// Registers `tls_client_certificates_rejected` in `registry` (already under the `tierd_`
    /// prefix).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "tls_client_certificates_rejected",
            "Client certificates the webhook's TLS handshake refused (--client-ca), by reason",
            self.counts.clone(),
        );
    }

    /// Counts a handshake of `server` with `peer` that failed with `error`, and logs it if the
    /// budget allows; `false` (nothing done) when the error is not about the client's
    /// certificate.
    pub(crate) fn record(
        &self,
        server: &'static str,
        peer: SocketAddr,
        error: &rustls::Error,
    ) -> bool {
        let Some(rejection) = ClientCertRejection::of(error) else {
            return false;
        };
        let labels = [("server", server), ("reason", rejection.as_str())];
        self.counts.get_or_create(&labels).inc();
        let now = tokio::time::Instant::now().into_std();
        let allowed = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(now);
        let Some(suppressed) = allowed else {
            return true;
        };
        if suppressed > 0 {
            tracing::warn!(
                server,
                suppressed,
                "{suppressed} more refused client certificates were not logged (at most {} at \
                 once, then one per {:?}); tierd_tls_client_certificates_rejected_total counts \
                 every one",
                crate::webhook::LOG_BURST,
                crate::webhook::LOG_REFILL,
            );
        }
        tracing::warn!(
            %peer,
            server,
            reason = rejection.as_str(),
            detail = %error,
            "refused a TLS connection: {rejection}"
        );
        true
    }
}

/// At most 64 characters of a name from a certificate, for errors and logs.
fn truncate(name: &str) -> String {
    match name.char_indices().nth(64) {
        Some((end, _)) => format!("{}…", &name[..end]),
        None => name.to_owned(),
    }
}

/// A webpki client verifier trusting the CA certificates in `pem`.
fn client_verifier(
    path: &Path,
    pem: &[u8],
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|source| TlsError::ClientCa {
            path: path.to_owned(),
            source,
        })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .build()
        .map_err(|source| TlsError::ClientVerifier {
            path: path.to_owned(),
            source,
        })
}

impl ClientCertVerifier for ClientAuth {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    /// No hints: the CAs can change at a reload, and kube-apiserver (Go) then sends the one
    /// client certificate it is configured with.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .verifier()
            .verify_client_cert(end_entity, intermediates, now)?;
        self.check_name(end_entity)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Exports the expiry of a [`CertReloader`]'s certificate.
#[derive(Debug)]
struct ExpiryCollector(Arc<CertReloader>);

impl Collector for ExpiryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let Some(seconds) = self
            .0
            .not_after()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        else {
            return Ok(());
        };
        let gauge = ConstGauge::new(i64::try_from(seconds.as_secs()).unwrap_or(i64::MAX));
        gauge.encode(encoder.encode_descriptor(
            "serving_certificate_expiry_timestamp_seconds",
            "Unix time at which the serving certificate in service expires.",
            None,
            MetricType::Gauge,
        )?)
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
        pem::Error::NoItemsFound => TlsError::NoPrivateKey {
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

/// Runs `tick` every `interval` (the first after one interval; missed ticks delayed, never
/// bunched) until `shutdown` resolves: the polling loop of both reloaders.
async fn every<F, Fut>(interval: Duration, shutdown: impl Future<Output = ()>, mut tick: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut shutdown = std::pin::pin!(shutdown);
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = ticks.tick() => {}
        }
        tick().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use prometheus_client::registry::Registry;

    use super::*;

    /// A writer collecting what a scoped subscriber logs.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_certificate_error_has_a_bounded_reason() {
        use rustls::Error;

        let name = Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
            NameNotAllowed {
                presented: vec!["evil".into()],
                allowed: vec!["kube-apiserver".into()],
            },
        ))));
        let cases = [
            (Error::NoCertificatesPresented, "missing"),
            (
                Error::InvalidCertificate(CertificateError::UnknownIssuer),
                "untrusted",
            ),
            (
                Error::InvalidCertificate(CertificateError::BadSignature),
                "untrusted",
            ),
            (
                Error::InvalidCertificate(CertificateError::Expired),
                "expired",
            ),
            (
                Error::InvalidCertificate(CertificateError::NotValidYet),
                "not_yet_valid",
            ),
            (
                Error::InvalidCertificate(CertificateError::InvalidPurpose),
                "not_for_clients",
            ),
            (
                Error::InvalidCertificate(CertificateError::BadEncoding),
                "malformed",
            ),
            (name, "name_not_allowed"),
            (
                Error::InvalidCertificate(CertificateError::Revoked),
                "other",
            ),
        ];
        for (error, label) in cases {
            let reason = ClientCertRejection::of(&error).unwrap();
            assert_eq!(reason.as_str(), label, "{error}");
            assert!(ClientCertRejection::LABELS.contains(&label));
        }
        assert_eq!(ClientCertRejection::of(&Error::DecryptError), None);
    }

    #[tokio::test(start_paused = true)]
    async fn refused_certificates_are_all_counted_but_logged_at_a_bounded_rate() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let rejections = ClientCertRejections::default();
        let mut registry = Registry::default();
        rejections.register(&mut registry);
        let peer: SocketAddr = ([10, 0, 0, 7], 40_000).into();
        let untrusted = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        // A caller hammering the port: 1000 refusals at one instant.
        for _ in 0..1000 {
            assert!(rejections.record("webhook", peer, &untrusted));
        }
        assert!(!rejections.record("webhook", peer, &rustls::Error::DecryptError));
        let logged = |lines: &Lines| String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let text = logged(&lines);
        let refused = text.matches("refused a TLS connection").count();
        assert_eq!(refused, usize::try_from(crate::webhook::LOG_BURST).unwrap());
        assert!(text.contains("peer=10.0.0.7:40000"), "{text}");
        assert!(text.contains("reason=\"untrusted\"") || text.contains("reason=untrusted"));
        assert!(
            text.contains("not signed by a CA of the --client-ca file"),
            "{text}"
        );
        // One period later: one more line, saying how many were left out.
        tokio::time::advance(crate::webhook::LOG_REFILL).await;
        assert!(rejections.record("webhook", peer, &untrusted));
        let text = logged(&lines);
        assert!(
            text.contains("980 more refused client certificates were not logged"),
            "{text}"
        );
        assert_eq!(text.matches("refused a TLS connection").count(), 21);
        let mut scraped = String::new();
        prometheus_client::encoding::text::encode(&mut scraped, &registry).unwrap();
        assert!(
            scraped.contains(
                "tls_client_certificates_rejected_total{server=\"webhook\",reason=\"untrusted\"} 1001"
            ),
            "{scraped}"
        );
    }
}
