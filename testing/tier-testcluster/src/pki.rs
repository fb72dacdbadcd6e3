//! The certificates and keys one control plane needs, generated fresh with rcgen: a serving CA
//! and kube-apiserver's serving certificate (for `127.0.0.1` and `localhost`), a client CA
//! (`--client-ca-file`) and the admin's client certificate (CN `admin`, O `system:masters`),
//! and the ServiceAccount token signing key (EC P-256, so tokens are ES256).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Pair {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// A CA that signs further certificates.
pub struct Authority {
    /// Its certificate and key.
    pub pair: Pair,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("pair", &self.pair)
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// A new self-signed CA named `name`.
    ///
    /// # Errors
    ///
    /// [`Error::Certificate`] when rcgen fails.
    pub fn new(name: &str) -> Result<Self, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        let pair = Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        let issuer = Issuer::new(params, key);
        Ok(Self { pair, issuer })
    }

    /// A serving certificate for `names` (DNS names or IP addresses).
    ///
    /// # Errors
    ///
    /// [`Error::Certificate`] when rcgen fails.
    pub fn server(&self, names: &[&str]) -> Result<Pair, Error> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("server"),
        );
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A client certificate for the user `name` in the groups `groups` (Kubernetes reads the
    /// CN as the user and each O as a group).
    ///
    /// # Errors
    ///
    /// [`Error::Certificate`] when rcgen fails.
    pub fn client(&self, name: &str, groups: &[&str]) -> Result<Pair, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Every file kube-apiserver's flags name, written into one directory.
#[derive(Debug)]
pub struct Files {
    /// The CA kube-apiserver's serving certificate chains to (what clients trust).
    pub serving_ca: Pair,
    /// `--tls-cert-file`.
    pub serving_cert: PathBuf,
    /// `--tls-private-key-file`.
    pub serving_key: PathBuf,
    /// The client CA, which signs client certificates kube-apiserver accepts.
    pub client_ca: Authority,
    /// `--client-ca-file`.
    pub client_ca_file: PathBuf,
    /// The admin's client certificate (O `system:masters`).
    pub admin: Pair,
    /// `--service-account-key-file` (the public key).
    pub sa_public: PathBuf,
    /// `--service-account-signing-key-file`.
    pub sa_private: PathBuf,
}

impl Files {
    /// Generates everything and writes the files kube-apiserver reads into `dir`.
    ///
    /// # Errors
    ///
    /// [`Error::Certificate`] when rcgen fails, [`Error::Io`] when a file cannot be written.
    pub fn write(dir: &Path) -> Result<Self, Error> {
        let serving_authority = Authority::new("tier-testcluster serving CA")?;
        let serving = serving_authority.server(&["127.0.0.1", "localhost"])?;
        let client_ca = Authority::new("tier-testcluster client CA")?;
        let admin = client_ca.client("admin", &["system:masters"])?;
        let sa = KeyPair::generate()?;
        let write = |name: &str, text: &str| -> Result<PathBuf, Error> {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
            Ok(path)
        };
        Ok(Self {
            serving_cert: write("serving.crt", &serving.cert_pem)?,
            serving_key: write("serving.key", &serving.key_pem)?,
            client_ca_file: write("client-ca.crt", &client_ca.pair.cert_pem)?,
            sa_public: write("sa.pub", &sa.public_key_pem())?,
            sa_private: write("sa.key", &sa.serialize_pem())?,
            serving_ca: serving_authority.pair,
            client_ca,
            admin,
        })
    }
}
