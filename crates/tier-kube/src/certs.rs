//! Self-signed serving certificates (`tierd run --self-signed-cert`), as antrea-controller signs
//! its own: no cert-manager and no hand-pasted `caBundle`.
//!
//! A CA and a serving certificate for the webhook's Service (`NAME`, `NAME.NS`, `NAME.NS.svc`,
//! `NAME.NS.svc.cluster.local`) live in one Secret (keys `tls.crt`, `tls.key`, `ca.crt`,
//! `ca.key`; any type, the install's is `Opaque`) in tierd's namespace. The install ships that
//! Secret with no data at all (`deploy/components/self-signed-cert/secret.yaml`), so that
//! re-applying the install has nothing to put back over what tierd wrote: tierd only reads and
//! updates it, it never creates Secrets. Both updates name tierd as their field manager
//! ([`FIELD_MANAGER`]), so a server-side apply that does claim those fields names tierd in its
//! conflict. [`reconcile`] is one step, run at start (tierd retries it on its start-up
//! backoff until it succeeds) and then periodically by [`maintain`]:
//!
//! 1. **The Secret** ([`ensure_secret`]): empty (as shipped), a fresh CA and certificate are
//!    written into it with an update on the resourceVersion read; that update is the lock: a
//!    replica that loses the race (409 Conflict) reads the winner's Secret, so every replica
//!    serves the same certificate. Absent, [`CertError::SecretMissing`] says to apply the
//!    install. Present and filled, it is checked before use ([`check`]), because whoever can
//!    update that Secret decides whom kube-apiserver trusts as tierd's webhook:
//!    - each of the four fields holds exactly one PEM block of at most [`MAX_PEM_BYTES`];
//!    - both keys are EC P-256 or RSA of 2048 to 4096 bits, and each matches its certificate;
//!    - `ca.crt` is a CA (basicConstraints `CA:TRUE`, keyUsage `keyCertSign`) tierd can sign
//!      with, not expiring within [`SelfSignedConfig::renew_before`];
//!    - `tls.crt` chains to `ca.crt` (its signature verified, as a TLS client verifies it),
//!      names exactly the Service's DNS names, and does not expire within `renew_before`.
//!
//!    A bad CA is replaced with a new CA and certificate ([`SecretAction::Replaced`]); a bad
//!    serving certificate alone is signed again by the same CA, so the `caBundle` stays valid
//!    ([`SecretAction::Renewed`]). Content found bad (not merely due for renewal) is logged as
//!    a Warning and reported as a Warning Event on the Secret naming what was wrong. The update
//!    goes on the resourceVersion read (409 Conflict: another replica renewed first, use its
//!    Secret). The CA itself is valid for ten years.
//! 2. **The files** (`write_files`): the serving certificate and key are written (atomically:
//!    a temporary file, then a rename) to the paths tierd's TLS reloader watches, when they
//!    differ from what the files hold.
//! 3. **The `caBundle`** ([`ensure_ca_bundle`]): every webhook of the named
//!    ValidatingWebhookConfiguration gets the CA as its `caBundle`, with an update on the
//!    resourceVersion read, only when it differs.
//!
//! Time comes in as a value (`now`), so renewal is tested without waiting. RBAC needs only
//! `get` and `update` on the named Secret and webhook configuration, and `create`/`patch` on
//! Events in tierd's namespace: `deploy/components/self-signed-cert`, whose
//! ValidatingAdmissionPolicy further lets tierd change nothing of its webhook configuration but
//! `caBundle`.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::runtime::events::Recorder;
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::public_key::PublicKey;

/// Secret key of the serving certificate (PEM).
pub(crate) const TLS_CRT: &str = "tls.crt";
/// Secret key of the serving certificate's private key (PEM).
pub(crate) const TLS_KEY: &str = "tls.key";
/// Secret key of the CA certificate (PEM), the webhook configuration's `caBundle`.
pub(crate) const CA_CRT: &str = "ca.crt";
/// Secret key of the CA's private key (PEM).
pub(crate) const CA_KEY: &str = "ca.key";

/// The field manager of tierd's updates of the Secret and the `caBundle`, as of its Tier writes.
pub const FIELD_MANAGER: &str = crate::writer::DEFAULT_FIELD_MANAGER;

/// Parameters of tierd's updates: its field manager.
fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// The most bytes each of the Secret's four PEM fields may hold (a P-256 or RSA-4096
/// certificate or key is a few KiB).
pub const MAX_PEM_BYTES: usize = 16 * 1024;

/// The largest RSA key accepted, in bits (a bigger one makes every TLS handshake slow: an
/// RSA-8192 key allows about 44 handshakes per second).
pub(crate) const MAX_RSA_BITS: usize = 4096;

/// The smallest RSA key accepted, in bits.
pub(crate) const MIN_RSA_BITS: usize = 2048;

/// Where the certificates live and for whom they are; see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfSignedConfig {
    /// tierd's namespace: the Secret's and the Service's.
    pub namespace: String,
    /// The Secret's name.
    pub secret: String,
    /// The Service the webhook is called through.
    pub service: String,
    /// The ValidatingWebhookConfiguration whose `caBundle` is kept equal to the CA, if any.
    pub webhook_configuration: Option<String>,
    /// How long a serving certificate is valid (default one year).
    pub validity: Duration,
    /// Renew the serving certificate when it expires within this (default 90 days).
    pub renew_before: Duration,
    /// How long the CA is valid (default ten years).
    pub ca_validity: Duration,
    /// The reporting instance (the pod name) of the Events about the Secret.
    pub instance: Option<String>,
}

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

impl SelfSignedConfig {
    /// Certificates for `service` in `namespace`, kept in the Secret `secret`; no webhook
    /// configuration.
    pub fn new(
        namespace: impl Into<String>,
        secret: impl Into<String>,
        service: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            secret: secret.into(),
            service: service.into(),
            webhook_configuration: None,
            validity: 365 * DAY,
            renew_before: 90 * DAY,
            ca_validity: 10 * 365 * DAY,
            instance: None,
        }
    }

    /// Report Events about the Secret as `instance` (usually the pod name).
    #[must_use]
    pub fn instance(mut self, instance: Option<String>) -> Self {
        self.instance = instance;
        self
    }

    /// Also keep the `caBundle` of the ValidatingWebhookConfiguration `name`.
    #[must_use]
    pub fn webhook_configuration(mut self, name: impl Into<String>) -> Self {
        self.webhook_configuration = Some(name.into());
        self
    }

    /// The serving certificate's DNS names, as kube-apiserver may call the Service.
    pub fn dns_names(&self) -> Vec<String> {
        let (svc, ns) = (&self.service, &self.namespace);
        vec![
            svc.clone(),
            format!("{svc}.{ns}"),
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.cluster.local"),
        ]
    }
}

/// Managing the self-signed certificate failed; the previous certificate stays in service.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// An API call failed.
    #[error(
        "cannot {verb} {object}: {}; check that the object exists and that tierd's RBAC \
         allows it (deploy/components/self-signed-cert/rbac.yaml)",
        crate::explain::error_words(.source)
    )]
    Api {
        /// What tierd tried: `get` or `update`.
        verb: &'static str,
        /// The object, e.g. `Secret kube-system/tierd-self-signed-cert`.
        object: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// The Secret does not exist. tierd never creates Secrets (it has no `create` on them):
    /// the install ships it empty.
    #[error(
        "{0} does not exist; tierd does not create it (it has no `create` on Secrets): apply the \
         install (`kubectl apply -k deploy/`, whose components/self-signed-cert ships the Secret \
         empty) and tierd fills it; retrying"
    )]
    SecretMissing(String),
    /// Other replicas kept changing the object while this one tried to settle it.
    #[error("{0} kept changing under tierd; retrying on the next round")]
    Contended(String),
    /// rcgen could not generate or sign a certificate.
    #[error("cannot generate a certificate (a bug, please report it): {0}")]
    Generate(#[from] rcgen::Error),
    /// A certificate file could not be written.
    #[error("cannot write {path}: {source}; the directory must be writable (an emptyDir volume)")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// The certificates as stored in the Secret, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct CertBundle {
    /// The CA certificate: the webhook configuration's `caBundle`.
    pub ca_crt: String,
    /// The CA's private key.
    pub ca_key: String,
    /// The serving certificate.
    pub tls_crt: String,
    /// The serving certificate's private key.
    pub tls_key: String,
}

impl std::fmt::Debug for CertBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertBundle")
            .field("ca_crt", &self.ca_crt)
            .field("tls_crt", &self.tls_crt)
            .finish_non_exhaustive()
    }
}

/// What [`ensure_secret`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretAction {
    /// The Secret was valid and is used as is (possibly filled by another replica).
    Unchanged,
    /// The Secret was empty (as the install ships it): this replica filled it.
    Filled,
    /// This replica signed a new serving certificate with the stored CA.
    Renewed,
    /// The stored CA was unusable; this replica replaced the whole Secret's content.
    Replaced,
}

/// What one [`reconcile`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciled {
    /// What happened to the Secret.
    pub secret: SecretAction,
    /// Whether the certificate files were (re)written.
    pub files_written: bool,
    /// Whether the webhook configuration's `caBundle` was updated.
    pub ca_bundle_updated: bool,
    /// The bundle in service.
    pub bundle: CertBundle,
}

fn offset(time: SystemTime) -> OffsetDateTime {
    OffsetDateTime::from(time)
}

/// A new CA; its subject names tierd and the time, so each CA is told apart.
fn new_ca(config: &SelfSignedConfig, now: SystemTime) -> Result<(String, String), CertError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let stamp = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{}-ca@{stamp}", config.service));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = offset(now - Duration::from_secs(3600).min(elapsed(now)));
    params.not_after = offset(now + config.ca_validity);
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Time since the epoch, so `now - x` never underflows.
fn elapsed(now: SystemTime) -> Duration {
    now.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// A serving certificate for the Service, signed by the CA in `ca_crt`/`ca_key`.
fn new_serving(
    config: &SelfSignedConfig,
    ca_crt: &str,
    ca_key: &str,
    now: SystemTime,
) -> Result<(String, String), CertError> {
    let issuer = Issuer::from_ca_cert_pem(ca_crt, KeyPair::from_pem(ca_key)?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(config.dns_names())?;
    params.distinguished_name.push(
        DnType::CommonName,
        format!("{}.{}.svc", config.service, config.namespace),
    );
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    params.not_before = offset(now - Duration::from_secs(3600).min(elapsed(now)));
    params.not_after = offset(now + config.validity);
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A fresh CA and serving certificate.
pub fn generate(config: &SelfSignedConfig, now: SystemTime) -> Result<CertBundle, CertError> {
    let (ca_crt, ca_key) = new_ca(config, now)?;
    let (tls_crt, tls_key) = new_serving(config, &ca_crt, &ca_key, now)?;
    Ok(CertBundle {
        ca_crt,
        ca_key,
        tls_crt,
        tls_key,
    })
}

/// What [`check`] found in a stored bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Every check passed: use it as is.
    Good,
    /// All four fields are empty or absent (the Secret as the install ships it): fill it.
    Empty,
    /// The serving certificate must be signed again by the stored CA.
    RenewServing(Problem),
    /// The CA is unusable: a new CA and serving certificate.
    ReplaceAll(Problem),
}

/// Why a stored bundle cannot be used as is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// What is wrong, in words (bounded: at most a few hundred characters).
    pub reason: String,
    /// True when the content is bad (someone wrote it, or it is corrupt); false when it is
    /// merely due (expiring). Bad content is logged as a Warning and reported in an Event.
    pub bad: bool,
}

impl Problem {
    fn bad(reason: impl Into<String>) -> Self {
        Self {
            reason: truncated(reason.into(), 400),
            bad: true,
        }
    }

    fn due(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            bad: false,
        }
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), marked when cut.
fn truncated(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// Checks a stored bundle before use, as listed in the [module docs](self): what to do with it.
pub fn check(config: &SelfSignedConfig, bundle: &CertBundle, now: SystemTime) -> Health {
    let fields = [
        &bundle.ca_crt,
        &bundle.ca_key,
        &bundle.tls_crt,
        &bundle.tls_key,
    ];
    if fields.iter().all(|f| f.trim().is_empty()) {
        return Health::Empty;
    }
    if let Err(problem) = check_ca(config, bundle, now) {
        return Health::ReplaceAll(problem);
    }
    if let Err(problem) = check_serving(config, bundle, now) {
        return Health::RenewServing(problem);
    }
    Health::Good
}

/// The DER of the one certificate `pem` (the field `field`) must hold.
fn one_certificate(field: &str, pem: &str) -> Result<CertificateDer<'static>, Problem> {
    one_block(field, pem)?;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| Problem::bad(format!("{field} holds no PEM certificate: {e}")))
}

/// `pem` is non-empty, at most [`MAX_PEM_BYTES`] and exactly one PEM block.
fn one_block(field: &str, pem: &str) -> Result<(), Problem> {
    if pem.trim().is_empty() {
        return Err(Problem::bad(format!("{field} is empty")));
    }
    if pem.len() > MAX_PEM_BYTES {
        return Err(Problem::bad(format!(
            "{field} is {} bytes, more than the {MAX_PEM_BYTES} allowed",
            pem.len()
        )));
    }
    let blocks = pem.matches("-----BEGIN ").count();
    if blocks != 1 {
        return Err(Problem::bad(format!(
            "{field} holds {blocks} PEM blocks; exactly one is allowed"
        )));
    }
    Ok(())
}

fn parse<'a>(field: &str, der: &'a [u8]) -> Result<X509Certificate<'a>, Problem> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, cert)| cert)
        .map_err(|e| Problem::bad(format!("{field} does not parse: {e}")))
}

/// The certificate's key is EC P-256 or RSA of [`MIN_RSA_BITS`] to [`MAX_RSA_BITS`].
fn key_kind(field: &str, cert: &X509Certificate<'_>) -> Result<(), Problem> {
    let spki = cert.public_key();
    match spki.parsed() {
        Ok(PublicKey::EC(_)) => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok());
            if curve.as_ref() == Some(&x509_parser::oid_registry::OID_EC_P256) {
                Ok(())
            } else {
                Err(Problem::bad(format!(
                    "{field} has an EC key on a curve other than P-256; EC P-256 or RSA of \
                     {MIN_RSA_BITS} to {MAX_RSA_BITS} bits is allowed"
                )))
            }
        }
        Ok(PublicKey::RSA(rsa)) => {
            let bits = rsa.key_size();
            if (MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) {
                Ok(())
            } else {
                Err(Problem::bad(format!(
                    "{field} has an RSA key of {bits} bits; {MIN_RSA_BITS} to {MAX_RSA_BITS} \
                     is allowed (a bigger key slows every TLS handshake)"
                )))
            }
        }
        _ => Err(Problem::bad(format!(
            "{field} has a key of type {}; EC P-256 or RSA of {MIN_RSA_BITS} to {MAX_RSA_BITS} \
             bits is allowed",
            spki.algorithm.algorithm
        ))),
    }
}

fn not_after(cert: &X509Certificate<'_>) -> SystemTime {
    let seconds = u64::try_from(cert.validity().not_after.timestamp()).unwrap_or_default();
    SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
}

fn check_ca(
    config: &SelfSignedConfig,
    bundle: &CertBundle,
    now: SystemTime,
) -> Result<(), Problem> {
    let der = one_certificate(CA_CRT, &bundle.ca_crt)?;
    one_block(CA_KEY, &bundle.ca_key)?;
    let ca = parse(CA_CRT, &der)?;
    key_kind(CA_CRT, &ca)?;
    match ca.basic_constraints() {
        Ok(Some(constraints)) if constraints.value.ca => {}
        _ => {
            return Err(Problem::bad(format!(
                "{CA_CRT} is not a CA certificate (no basicConstraints CA:TRUE)"
            )));
        }
    }
    match ca.key_usage() {
        Ok(Some(usage)) if usage.value.key_cert_sign() => {}
        _ => {
            return Err(Problem::bad(format!(
                "{CA_CRT} may not sign certificates (no keyUsage keyCertSign)"
            )));
        }
    }
    let expires = not_after(&ca);
    if expires <= now + config.renew_before {
        return Err(Problem::due(format!(
            "the CA expires at {}",
            offset(expires)
        )));
    }
    if !key_matches(&bundle.ca_crt, &bundle.ca_key) {
        return Err(Problem::bad(format!("{CA_KEY} does not match {CA_CRT}")));
    }
    KeyPair::from_pem(&bundle.ca_key)
        .and_then(|key| Issuer::from_ca_cert_pem(&bundle.ca_crt, key).map(|_| ()))
        .map_err(|e| Problem::bad(format!("the CA cannot sign: {e}")))
}

fn check_serving(
    config: &SelfSignedConfig,
    bundle: &CertBundle,
    now: SystemTime,
) -> Result<(), Problem> {
    let der = one_certificate(TLS_CRT, &bundle.tls_crt)?;
    one_block(TLS_KEY, &bundle.tls_key)?;
    let leaf = parse(TLS_CRT, &der)?;
    key_kind(TLS_CRT, &leaf)?;
    let expires = not_after(&leaf);
    if expires <= now + config.renew_before {
        return Err(Problem::due(format!(
            "the certificate expires at {}",
            offset(expires)
        )));
    }
    let names = dns_names(&leaf)?;
    if names != config.dns_names() {
        return Err(Problem::bad(format!(
            "{TLS_CRT} is for {names:?}, not for the Service's names {:?}",
            config.dns_names()
        )));
    }
    chains_to_ca(config, &der, &bundle.ca_crt, now)?;
    if !key_matches(&bundle.tls_crt, &bundle.tls_key) {
        return Err(Problem::bad(format!("{TLS_KEY} does not match {TLS_CRT}")));
    }
    Ok(())
}

fn dns_names(cert: &X509Certificate<'_>) -> Result<Vec<String>, Problem> {
    match cert.subject_alternative_name() {
        Ok(Some(san)) => Ok(san
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                x509_parser::extensions::GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                _ => None,
            })
            .collect()),
        Ok(None) => Ok(Vec::new()),
        Err(e) => Err(Problem::bad(format!(
            "{TLS_CRT}'s subjectAltName does not parse: {e}"
        ))),
    }
}

/// The serving certificate verifies with `ca_pem` alone as its root, for the Service's name
/// at `now`: what kube-apiserver checks when it calls the webhook.
fn chains_to_ca(
    config: &SelfSignedConfig,
    leaf: &CertificateDer<'_>,
    ca_pem: &str,
    now: SystemTime,
) -> Result<(), Problem> {
    let not_chained = |e: &dyn std::fmt::Display| {
        Problem::bad(format!("{TLS_CRT} does not verify with {CA_CRT}: {e}"))
    };
    let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes()).map_err(|e| not_chained(&e))?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).map_err(|e| not_chained(&e))?;
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        std::sync::Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| not_chained(&e))?;
    let host = format!("{}.{}.svc", config.service, config.namespace);
    let name = ServerName::try_from(host).map_err(|e| not_chained(&e))?;
    verifier
        .verify_server_cert(
            leaf,
            &[],
            &name,
            &[],
            UnixTime::since_unix_epoch(elapsed(now)),
        )
        .map(|_| ())
        .map_err(|e| not_chained(&e))
}

fn key_matches(cert_pem: &str, key_pem: &str) -> bool {
    let Ok(chain) =
        CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()
    else {
        return false;
    };
    let Ok(key) = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()) else {
        return false;
    };
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(chain, key, &provider).is_ok()
}

fn from_secret(secret: &Secret) -> CertBundle {
    let text = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    CertBundle {
        ca_crt: text(CA_CRT),
        ca_key: text(CA_KEY),
        tls_crt: text(TLS_CRT),
        tls_key: text(TLS_KEY),
    }
}

fn data(bundle: &CertBundle) -> BTreeMap<String, ByteString> {
    [
        (CA_CRT, &bundle.ca_crt),
        (CA_KEY, &bundle.ca_key),
        (TLS_CRT, &bundle.tls_crt),
        (TLS_KEY, &bundle.tls_key),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect()
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// How often [`ensure_secret`] re-reads a Secret other replicas keep changing before giving up.
const ATTEMPTS: usize = 4;

/// The longest publishing one Event may take before it is dropped.
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Publishes a Warning Event on the Secret saying what was wrong and what tierd did; a failure
/// is logged and dropped (the Warning log already said it).
async fn warn_event(client: &Client, config: &SelfSignedConfig, note: String) {
    let recorder = Recorder::new(
        client.clone(),
        crate::events::reporter(config.instance.clone()),
    );
    let reference = ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Secret".to_owned()),
        name: Some(config.secret.clone()),
        namespace: Some(config.namespace.clone()),
        ..ObjectReference::default()
    };
    // events.k8s.io caps a note at 1 kB.
    let event = crate::events::bad_certificate(truncated(note, 1000));
    match tokio::time::timeout(EVENT_TIMEOUT, recorder.publish(&event, &reference)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "cannot publish the BadCertificate Event"),
        Err(_) => tracing::warn!(
            "publishing the BadCertificate Event took over {EVENT_TIMEOUT:?}; dropped"
        ),
    }
}

/// Makes the Secret hold a valid bundle (fill when empty, check, renew or replace) and returns
/// it; see the [module docs](self).
///
/// # Errors
///
/// [`CertError::SecretMissing`] when the Secret does not exist (apply the install),
/// [`CertError::Api`] when a call fails (RBAC), [`CertError::Contended`] when other replicas
/// changed the Secret on every attempt.
pub async fn ensure_secret(
    client: &Client,
    config: &SelfSignedConfig,
    now: SystemTime,
) -> Result<(CertBundle, SecretAction), CertError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let object = format!("Secret {}/{}", config.namespace, config.secret);
    let api_error = |verb, source| CertError::Api {
        verb,
        object: object.clone(),
        source,
    };
    for _ in 0..ATTEMPTS {
        let current = api
            .get_opt(&config.secret)
            .await
            .map_err(|e| api_error("get", e))?;
        let Some(mut secret) = current else {
            return Err(CertError::SecretMissing(object));
        };
        let stored = from_secret(&secret);
        let (bundle, action, bad) = match check(config, &stored, now) {
            Health::Good => return Ok((stored, SecretAction::Unchanged)),
            Health::Empty => {
                tracing::info!(secret = %object, "filling the empty Secret with a new self-signed CA and serving certificate");
                (generate(config, now)?, SecretAction::Filled, None)
            }
            Health::RenewServing(problem) => {
                let (tls_crt, tls_key) = new_serving(config, &stored.ca_crt, &stored.ca_key, now)?;
                let bad = problem.bad.then(|| {
                    format!(
                        "{object}: {}; tierd signed a new serving certificate with its CA",
                        problem.reason
                    )
                });
                if bad.is_none() {
                    tracing::info!(secret = %object, reason = %problem.reason, "renewing the serving certificate");
                }
                let bundle = CertBundle {
                    tls_crt,
                    tls_key,
                    ..stored
                };
                (bundle, SecretAction::Renewed, bad)
            }
            Health::ReplaceAll(problem) => {
                let bad = problem.bad.then(|| {
                    format!(
                        "{object}: {}; tierd replaced the CA and the serving certificate (the \
                         webhook's caBundle follows)",
                        problem.reason
                    )
                });
                if bad.is_none() {
                    tracing::info!(secret = %object, reason = %problem.reason, "replacing the self-signed CA");
                }
                (generate(config, now)?, SecretAction::Replaced, bad)
            }
        };
        secret.data = Some(data(&bundle));
        secret.string_data = None;
        match api.replace(&config.secret, &post_params(), &secret).await {
            Ok(_) => {
                if let Some(note) = bad {
                    tracing::warn!(
                        secret = %object,
                        problem = %note,
                        "the self-signed certificate Secret held bad content; whoever can \
                         update it controls the webhook's trust"
                    );
                    warn_event(client, config, note).await;
                }
                return Ok((bundle, action));
            }
            // Another replica changed it since the read: look again.
            Err(e) if is_status(&e, 409) => {}
            Err(e) => return Err(api_error("update", e)),
        }
    }
    Err(CertError::Contended(object))
}

/// Writes `contents` to `path` through a temporary file and a rename, unless it already holds
/// them; whether it wrote.
async fn write_if_changed(path: &Path, contents: &str) -> Result<bool, CertError> {
    if tokio::fs::read(path).await.ok().as_deref() == Some(contents.as_bytes()) {
        return Ok(false);
    }
    let error = |source| CertError::Write {
        path: path.to_owned(),
        source,
    };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    tokio::fs::write(&temporary, contents)
        .await
        .map_err(error)?;
    tokio::fs::rename(&temporary, path).await.map_err(error)?;
    Ok(true)
}

/// Writes the serving certificate and key to `cert` and `key` where they differ; whether either
/// was written. The key goes first: a reader seeing the new key with the old certificate
/// refuses the pair and keeps the old one until the certificate follows.
///
/// # Errors
///
/// [`CertError::Write`] when a file cannot be written.
pub(crate) async fn write_files(
    bundle: &CertBundle,
    cert: &Path,
    key: &Path,
) -> Result<bool, CertError> {
    let key_written = write_if_changed(key, &bundle.tls_key).await?;
    let cert_written = write_if_changed(cert, &bundle.tls_crt).await?;
    Ok(key_written || cert_written)
}

/// Sets the `caBundle` of every webhook in the ValidatingWebhookConfiguration `name` to
/// `ca_pem`, with an update on the resourceVersion read when any differs; whether it updated.
/// A 409 Conflict (another replica or actor wrote in between) reads it again.
///
/// # Errors
///
/// [`CertError::Api`] when the configuration cannot be read or updated,
/// [`CertError::Contended`] when it changed under every attempt.
pub async fn ensure_ca_bundle(
    client: &Client,
    name: &str,
    ca_pem: &str,
) -> Result<bool, CertError> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let object = format!("ValidatingWebhookConfiguration {name}");
    let api_error = |verb, source| CertError::Api {
        verb,
        object: object.clone(),
        source,
    };
    let wanted = ByteString(ca_pem.as_bytes().to_vec());
    for _ in 0..ATTEMPTS {
        let mut configuration = api.get(name).await.map_err(|e| api_error("get", e))?;
        let mut changed = false;
        for webhook in configuration.webhooks.iter_mut().flatten() {
            if webhook.client_config.ca_bundle.as_ref() != Some(&wanted) {
                webhook.client_config.ca_bundle = Some(wanted.clone());
                changed = true;
            }
        }
        if !changed {
            return Ok(false);
        }
        match api.replace(name, &post_params(), &configuration).await {
            Ok(_) => {
                tracing::info!(configuration = %name, "caBundle set to the self-signed CA");
                return Ok(true);
            }
            Err(e) if is_status(&e, 409) => {}
            Err(e) => return Err(api_error("update", e)),
        }
    }
    Err(CertError::Contended(object))
}

/// One round: the Secret, the files, the `caBundle`; see the [module docs](self).
///
/// # Errors
///
/// The first [`CertError`] met; nothing after it was attempted.
pub async fn reconcile(
    client: &Client,
    config: &SelfSignedConfig,
    cert: &Path,
    key: &Path,
    now: SystemTime,
) -> Result<Reconciled, CertError> {
    let (bundle, secret) = ensure_secret(client, config, now).await?;
    let files_written = write_files(&bundle, cert, key).await?;
    let ca_bundle_updated = match &config.webhook_configuration {
        Some(name) => ensure_ca_bundle(client, name, &bundle.ca_crt).await?,
        None => false,
    };
    Ok(Reconciled {
        secret,
        files_written,
        ca_bundle_updated,
        bundle,
    })
}

/// Runs [`reconcile`] every `interval` (the wall clock's `now`) until `shutdown` resolves,
/// logging failures; the certificate in service stays until a round succeeds. Spawn it after a
/// first successful [`reconcile`].
pub async fn maintain(
    client: Client,
    config: SelfSignedConfig,
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = ticks.tick() => {}
        }
        if let Err(error) = reconcile(&client, &config, &cert, &key, SystemTime::now()).await {
            tracing::error!(%error, "self-signed certificate not reconciled; the current one stays in service");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn config() -> SelfSignedConfig {
        SelfSignedConfig::new("kube-system", "tierd-self-signed-cert", "tierd")
    }

    #[test]
    fn a_fresh_bundle_is_good_until_renewal_is_due() {
        let now = SystemTime::now();
        let bundle = generate(&config(), now).unwrap();
        assert_eq!(check(&config(), &bundle, now), Health::Good);
        let due = now + config().validity - config().renew_before + DAY;
        assert!(matches!(
            check(&config(), &bundle, due),
            Health::RenewServing(problem) if problem.reason.contains("expires") && !problem.bad
        ));
    }

    #[test]
    fn other_names_or_a_foreign_key_need_a_new_serving_certificate() {
        let now = SystemTime::now();
        let bundle = generate(&config(), now).unwrap();
        let other = SelfSignedConfig::new("tierd", "s", "tierd");
        assert!(matches!(
            check(&other, &bundle, now),
            Health::RenewServing(_)
        ));
        let foreign = generate(&config(), now).unwrap();
        let mixed = CertBundle {
            tls_key: foreign.tls_key,
            ..bundle
        };
        assert_eq!(
            check(&config(), &mixed, now),
            Health::RenewServing(Problem::bad("tls.key does not match tls.crt"))
        );
    }

    #[test]
    fn a_broken_ca_is_replaced() {
        let now = SystemTime::now();
        let bundle = CertBundle {
            ca_key: "garbage".into(),
            ..generate(&config(), now).unwrap()
        };
        assert!(matches!(
            check(&config(), &bundle, now),
            Health::ReplaceAll(_)
        ));
    }

    #[test]
    fn the_serving_certificate_chains_to_the_ca_and_names_the_service() {
        let bundle = generate(&config(), SystemTime::now()).unwrap();
        let ca = CertificateDer::from_pem_slice(bundle.ca_crt.as_bytes()).unwrap();
        let leaf = CertificateDer::from_pem_slice(bundle.tls_crt.as_bytes()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let name = rustls::pki_types::ServerName::try_from("tierd.kube-system.svc").unwrap();
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], rustls::pki_types::UnixTime::now())
            .unwrap();
        let wrong = rustls::pki_types::ServerName::try_from("other.kube-system.svc").unwrap();
        assert!(
            verifier
                .verify_server_cert(&leaf, &[], &wrong, &[], rustls::pki_types::UnixTime::now())
                .is_err()
        );
    }
}
