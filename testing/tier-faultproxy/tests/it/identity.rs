//! An HTTPS upstream that asks for client certificates: the proxy presents its client
//! identity on requests without a bearer token, and never on requests with one.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use serde_json::{Value, json};
use tier_faultproxy::{FaultProxy, ProxyConfig};

/// A CA, and what it signed for the test: a serving certificate for 127.0.0.1 and an admin
/// client certificate.
struct Pki {
    ca_pem: String,
    server: (CertificateDer<'static>, PrivateKeyDer<'static>),
    client_cert_pem: String,
    client_key_pem: String,
    client_der: CertificateDer<'static>,
}

fn pki() -> Pki {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);

    let server_key = rcgen::KeyPair::generate().unwrap();
    let server_cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let mut client = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    client
        .distinguished_name
        .push(rcgen::DnType::CommonName, "admin");
    client
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:masters");
    client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = rcgen::KeyPair::generate().unwrap();
    let client_cert = client.signed_by(&client_key, &issuer).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        server: (
            server_cert.der().clone(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        ),
        client_cert_pem: client_cert.pem(),
        client_key_pem: client_key.serialize_pem(),
        client_der: client_cert.der().clone(),
    }
}

/// An HTTPS server on 127.0.0.1 that accepts (but does not require) client certificates from
/// the CA and answers every request with what it saw: the client certificate (DER, as bytes)
/// and the `Authorization` header.
async fn echo_upstream(pki: &Pki) -> String {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![pki.server.0.clone()], pki.server.1.clone_key())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let cert = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| c.as_ref().to_vec());
                let service = hyper::service::service_fn(move |request: http::Request<_>| {
                    let seen = json!({
                        "cert": cert,
                        "authorization": request
                            .headers()
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_owned()),
                    });
                    async move {
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(
                            seen.to_string(),
                        ))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    url
}

/// A plain HTTPS client trusting only `ca_pem`.
fn https_client(
    ca_pem: &str,
) -> Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    Client::builder(TokioExecutor::new()).build(connector)
}

async fn seen_upstream(proxy: &FaultProxy, token: Option<&str>) -> Value {
    let client = https_client(proxy.ca_pem());
    let mut request = http::Request::get(format!("{}/api/v1/namespaces", proxy.url()));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = client
        .request(request.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn the_client_certificate_goes_upstream_only_on_requests_without_a_token() {
    let pki = pki();
    let upstream = echo_upstream(&pki).await;
    let proxy = FaultProxy::start(
        ProxyConfig::new(upstream)
            .upstream_ca_pem(pki.ca_pem.clone())
            .client_identity(pki.client_cert_pem.clone(), pki.client_key_pem.clone()),
    )
    .await
    .unwrap();
    let admin = seen_upstream(&proxy, None).await;
    assert_eq!(
        admin["cert"],
        json!(pki.client_der.as_ref().to_vec()),
        "the admin certificate reaches the upstream"
    );
    assert_eq!(admin["authorization"], Value::Null);
    // A token holder must stay who the token says: no certificate with it.
    let bearer = seen_upstream(&proxy, Some("sa-token")).await;
    assert_eq!(bearer["cert"], Value::Null);
    assert_eq!(bearer["authorization"], "Bearer sa-token");
}

#[tokio::test]
async fn an_upstream_certificate_from_another_ca_is_refused() {
    let pki = pki();
    let upstream = echo_upstream(&pki).await;
    let other = pki_other_ca();
    let proxy = FaultProxy::start(ProxyConfig::new(upstream).upstream_ca_pem(other))
        .await
        .unwrap();
    let client = https_client(proxy.ca_pem());
    let request = http::Request::get(format!("{}/version", proxy.url()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    // The caller's connection fails as it would without a proxy; the log says why.
    assert!(client.request(request).await.is_err());
    let log = proxy.requests();
    let error = log.records()[0].error.clone().unwrap();
    assert!(error.to_lowercase().contains("certificate"), "{error}");
}

fn pki_other_ca() -> String {
    pki().ca_pem
}
