//! The proxy's TLS: its own CA and serving certificate (made fresh for every proxy), and the
//! client configuration it dials the upstream with (trusting the given CA, optionally
//! presenting a client certificate).

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::Error;

/// What the proxy serves with.
pub(crate) struct Serving {
    /// The PEM of the CA that signed the serving certificate.
    pub(crate) ca_pem: String,
    /// The rustls configuration (HTTP/1.1 only in ALPN, no client certificates asked).
    pub(crate) config: rustls::ServerConfig,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A new CA and a serving certificate it signs for `127.0.0.1`, `localhost` and `names`.
pub(crate) fn serving(names: &[String]) -> Result<Serving, Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "tier-faultproxy CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut sans = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    sans.extend(names.iter().cloned());
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(sans)?;
    leaf.distinguished_name
        .push(DnType::CommonName, "tier-faultproxy");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.use_authority_key_identifier_extension = true;
    let leaf_cert = leaf.signed_by(&key, &issuer)?;

    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![leaf_cert.der().clone(), ca_cert.der().clone()], key)?;
    // HTTP/1.1 only: Go clients (kubectl, kube-apiserver calling a webhook) fall back to it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Serving {
        ca_pem: ca_cert.pem(),
        config,
    })
}

/// The certificates of a PEM bundle; an error when it holds none.
fn certificates(what: &'static str, pem: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Pem {
            what,
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(Error::Pem {
            what,
            reason: "no CERTIFICATE block found".to_owned(),
        });
    }
    Ok(certs)
}

/// The client configuration for the upstream: trusting `ca_pem` (nothing when `None`, for a
/// plain-HTTP upstream), presenting `identity` (certificate chain PEM, key PEM) when given.
pub(crate) fn upstream(
    ca_pem: Option<&str>,
    identity: Option<(&str, &str)>,
) -> Result<rustls::ClientConfig, Error> {
    let mut roots = RootCertStore::empty();
    if let Some(pem) = ca_pem {
        for cert in certificates("upstream CA", pem)? {
            roots.add(cert).map_err(|e| Error::Pem {
                what: "upstream CA",
                reason: e.to_string(),
            })?;
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    Ok(match identity {
        Some((cert_pem, key_pem)) => {
            let chain = certificates("client certificate", cert_pem)?;
            let key =
                PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| Error::Pem {
                    what: "client key",
                    reason: e.to_string(),
                })?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_inputs_without_certificates_are_refused_by_name() {
        let error = upstream(Some("not a pem"), None).unwrap_err().to_string();
        assert!(error.starts_with("upstream CA: no CERTIFICATE"), "{error}");
        let ca = serving(&[]).unwrap().ca_pem;
        let error = upstream(Some(&ca), Some((&ca, "junk")))
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("client key:"), "{error}");
        assert!(upstream(Some(&ca), None).is_ok());
    }
}
