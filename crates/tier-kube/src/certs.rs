//! Self-signed serving certificates (`tierd run --self-signed-cert`), as antrea-controller signs
//! its own: no cert-manager and no hand-pasted `caBundle`.
//!
//! A CA and a serving certificate for the webhook's Service (`NAME`, `NAME.NS`, `NAME.NS.svc`,
//! `NAME.NS.svc.cluster.local`) live in one Secret (type `kubernetes.io/tls`; keys `tls.crt`,
//! `tls.key`, `ca.crt`, `ca.key`) in tierd's namespace. [`reconcile`] is one step, run at start
//! and then periodically by [`maintain`]:
//!
//! 1. **The Secret** ([`ensure_secret`]): absent, a fresh CA and certificate are *created*; the
//!    create is the lock: a replica that loses the race (409 AlreadyExists) reads the winner's
//!    Secret, so every replica serves the same certificate. Present, it is used as is unless the
//!    serving certificate expires within [`SelfSignedConfig::renew_before`], names other hosts,
//!    or does not parse or match its key: then a new serving certificate is signed by the same
//!    CA (the `caBundle` stays valid) and written with an update on the resourceVersion read
//!    (409 Conflict: another replica renewed first, use its Secret). A CA that cannot be used is
//!    replaced with a new one. The CA itself is valid for ten years and is not rotated.
//! 2. **The files** ([`write_files`]): the serving certificate and key are written (atomically:
//!    a temporary file, then a rename) to the paths tierd's TLS reloader watches, when they
//!    differ from what the files hold.
//! 3. **The `caBundle`** ([`ensure_ca_bundle`]): every webhook of the named
//!    ValidatingWebhookConfiguration gets the CA as its `caBundle`, with an update on the
//!    resourceVersion read, only when it differs.
//!
//! Time comes in as a value (`now`), so renewal is tested without waiting. RBAC needs `get` and
//! `update` on the named Secret and webhook configuration, and `create` on Secrets in the
//! namespace (Kubernetes cannot limit `create` by name): `deploy/components/self-signed-cert`.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use time::OffsetDateTime;

/// Secret key of the serving certificate (PEM).
pub const TLS_CRT: &str = "tls.crt";
/// Secret key of the serving certificate's private key (PEM).
pub const TLS_KEY: &str = "tls.key";
/// Secret key of the CA certificate (PEM), the webhook configuration's `caBundle`.
pub const CA_CRT: &str = "ca.crt";
/// Secret key of the CA's private key (PEM).
pub const CA_KEY: &str = "ca.key";

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
        }
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
        "cannot {verb} {object}: {source}; check that the object exists and that tierd's RBAC \
         allows it (deploy/components/self-signed-cert/rbac.yaml)"
    )]
    Api {
        /// What tierd tried: `get`, `create`, `update`.
        verb: &'static str,
        /// The object, e.g. `Secret kube-system/tierd-self-signed-cert`.
        object: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
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
    /// The Secret was valid and is used as is (possibly created by another replica).
    Unchanged,
    /// This replica created the Secret.
    Created,
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

/// What is wrong with a stored bundle.
#[derive(Debug, PartialEq, Eq)]
enum Health {
    Good,
    /// The serving certificate must be signed again (expiring, wrong names, unusable).
    RenewServing(String),
    /// The CA is unusable: start over.
    ReplaceAll(String),
}

fn check(config: &SelfSignedConfig, bundle: &CertBundle, now: SystemTime) -> Health {
    let usable_ca = KeyPair::from_pem(&bundle.ca_key)
        .and_then(|key| Issuer::from_ca_cert_pem(&bundle.ca_crt, key).map(|_| ()));
    if let Err(e) = usable_ca {
        return Health::ReplaceAll(format!("the CA cannot be used: {e}"));
    }
    match parse_pem(&bundle.ca_crt) {
        Ok(ca) if ca.not_after <= now + config.renew_before => {
            return Health::ReplaceAll(format!("the CA expires at {}", offset(ca.not_after)));
        }
        Ok(_) => {}
        Err(e) => return Health::ReplaceAll(format!("the CA does not parse: {e}")),
    }
    let serving = match parse_pem(&bundle.tls_crt) {
        Ok(parsed) => parsed,
        Err(e) => return Health::RenewServing(format!("the certificate does not parse: {e}")),
    };
    if serving.not_after <= now + config.renew_before {
        return Health::RenewServing(format!(
            "the certificate expires at {}",
            offset(serving.not_after)
        ));
    }
    if serving.dns_names != config.dns_names() {
        return Health::RenewServing(format!("the certificate is for {:?}", serving.dns_names));
    }
    if !key_matches(&bundle.tls_crt, &bundle.tls_key) {
        return Health::RenewServing("the key does not match the certificate".to_owned());
    }
    Health::Good
}

/// What [`check`] reads from a certificate.
struct Parsed {
    not_after: SystemTime,
    dns_names: Vec<String>,
}

fn parse_pem(pem: &str) -> Result<Parsed, String> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| e.to_string())?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| e.to_string())?;
    let seconds = u64::try_from(cert.validity().not_after.timestamp()).unwrap_or_default();
    let dns_names = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                x509_parser::extensions::GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                _ => None,
            })
            .collect(),
        Ok(None) => Vec::new(),
        Err(e) => return Err(e.to_string()),
    };
    Ok(Parsed {
        not_after: SystemTime::UNIX_EPOCH + Duration::from_secs(seconds),
        dns_names,
    })
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

/// Makes the Secret hold a valid bundle (create-if-absent, renew when due) and returns it; see
/// the [module docs](self).
///
/// # Errors
///
/// [`CertError::Api`] when a call fails (RBAC, a missing namespace), [`CertError::Contended`]
/// when other replicas changed the Secret on every attempt.
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
            let bundle = generate(config, now)?;
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(config.secret.clone()),
                    namespace: Some(config.namespace.clone()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/name".to_owned(),
                        config.service.clone(),
                    )])),
                    ..ObjectMeta::default()
                },
                type_: Some("kubernetes.io/tls".to_owned()),
                data: Some(data(&bundle)),
                ..Secret::default()
            };
            match api.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    tracing::info!(secret = %object, "created the self-signed CA and serving certificate");
                    return Ok((bundle, SecretAction::Created));
                }
                // Another replica created it first: use theirs.
                Err(e) if is_status(&e, 409) => continue,
                Err(e) => return Err(api_error("create", e)),
            }
        };
        let stored = from_secret(&secret);
        let (bundle, action) = match check(config, &stored, now) {
            Health::Good => return Ok((stored, SecretAction::Unchanged)),
            Health::RenewServing(why) => {
                let (tls_crt, tls_key) = new_serving(config, &stored.ca_crt, &stored.ca_key, now)?;
                tracing::info!(secret = %object, reason = %why, "renewing the serving certificate");
                let bundle = CertBundle {
                    tls_crt,
                    tls_key,
                    ..stored
                };
                (bundle, SecretAction::Renewed)
            }
            Health::ReplaceAll(why) => {
                tracing::warn!(secret = %object, reason = %why, "replacing the self-signed CA");
                (generate(config, now)?, SecretAction::Replaced)
            }
        };
        secret.data = Some(data(&bundle));
        secret.string_data = None;
        match api
            .replace(&config.secret, &PostParams::default(), &secret)
            .await
        {
            Ok(_) => return Ok((bundle, action)),
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
pub async fn write_files(bundle: &CertBundle, cert: &Path, key: &Path) -> Result<bool, CertError> {
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
        match api
            .replace(name, &PostParams::default(), &configuration)
            .await
        {
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

    use rustls::client::danger::ServerCertVerifier;

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
            Health::RenewServing(why) if why.contains("expires")
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
            Health::RenewServing("the key does not match the certificate".into())
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
