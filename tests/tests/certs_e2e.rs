//! `tierd run --self-signed-cert` end to end: two replicas against the test API server share one
//! Secret, and the caBundle they keep in the ValidatingWebhookConfiguration verifies the
//! certificate each of them serves, for the Service's name, as kube-apiserver checks it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tier_tests::{Cluster, TempFile, Tierd};
use tier_testserver::ObjectKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SERVICE_HOST: &str = "tierd.kube-system.svc";

fn decoded(value: &Value) -> Vec<u8> {
    let bytes: k8s_openapi::ByteString = serde_json::from_value(value.clone()).unwrap();
    bytes.0
}

/// The ValidatingWebhookConfiguration as `deploy/webhook.yaml` has it: an empty caBundle.
fn webhook_configuration() -> Value {
    json!({
        "metadata": {"name": "tierd"},
        "webhooks": [{
            "name": "tiervalidator.tierd.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {
                "service": {"name": "tierd", "namespace": "kube-system", "path": "/validate/tier", "port": 443},
                "caBundle": ""
            }
        }]
    })
}

/// GETs `path` from `tierd` over TLS, trusting only `ca_pem` and checking the certificate for
/// the Service's name: the status line and the certificate it served.
async fn get_verified(
    tierd: &Tierd,
    ca_pem: &[u8],
    path: &str,
) -> Result<(String, CertificateDer<'static>), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(tierd.addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(SERVICE_HOST).unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let served = tls.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned();
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {SERVICE_HOST}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    let _ = tls.read_to_string(&mut response).await;
    let status = response.lines().next().unwrap_or_default().to_owned();
    Ok((status, served))
}

async fn replica(cluster: &Cluster, dir: &str) -> (Tierd, TempFile, TempFile) {
    let cert = TempFile::new(&format!("{dir}-tls"), "crt");
    let key = TempFile::new(&format!("{dir}-tls"), "key");
    let (cert_arg, key_arg) = (cert.0.display().to_string(), key.0.display().to_string());
    let tierd = Tierd::run(
        cluster,
        None,
        &[
            "--self-signed-cert",
            "--self-signed-cert-namespace",
            "kube-system",
            "--webhook-configuration",
            "tierd",
            "--tls-cert",
            &cert_arg,
            "--tls-key",
            &key_arg,
        ],
    )
    .await;
    (tierd, cert, key)
}

#[tokio::test]
async fn two_replicas_share_one_secret_and_the_ca_bundle_verifies_what_they_serve() {
    let cluster = Cluster::antrea().await;
    let store = cluster.server.store();
    store
        .put_object(
            ObjectKind::ValidatingWebhookConfiguration,
            "",
            webhook_configuration(),
        )
        .unwrap();

    let ((a, _a_cert, _a_key), (b, _b_cert, _b_key)) =
        tokio::join!(replica(&cluster, "a"), replica(&cluster, "b"));

    let secrets = store.objects(ObjectKind::Secret);
    assert_eq!(
        secrets.len(),
        1,
        "one Secret for both replicas: {secrets:?}"
    );
    assert_eq!(secrets[0]["metadata"]["name"], "tierd-self-signed-cert");
    assert_eq!(secrets[0]["metadata"]["namespace"], "kube-system");
    let secret_cert = decoded(&secrets[0]["data"]["tls.crt"]);
    let secret_ca = decoded(&secrets[0]["data"]["ca.crt"]);

    let configuration = store
        .object(ObjectKind::ValidatingWebhookConfiguration, "", "tierd")
        .unwrap();
    let ca_bundle = decoded(&configuration["webhooks"][0]["clientConfig"]["caBundle"]);
    assert_eq!(ca_bundle, secret_ca, "the caBundle is the Secret's CA");

    let expected = CertificateDer::from_pem_slice(&secret_cert).unwrap();
    for tierd in [&a, &b] {
        // Ready (on the plain probe port), and the webhook port's TLS verifies with the caBundle
        // alone; any HTTP answer to the GET proves the handshake.
        tierd.until_ok("/readyz").await;
        let (status, served) = get_verified(tierd, &ca_bundle, "/validate/tier")
            .await
            .unwrap();
        assert_eq!(
            served, expected,
            "every replica serves the Secret's certificate"
        );
        assert!(status.starts_with("HTTP/1.1 "), "{status}");
    }

    // The certificate is for the Service's name, not any name: another host fails verification.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&ca_bundle).unwrap())
        .unwrap();
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .unwrap();
    use rustls::client::danger::ServerCertVerifier;
    let other = ServerName::try_from("evil.kube-system.svc").unwrap();
    assert!(
        verifier
            .verify_server_cert(
                &expected,
                &[],
                &other,
                &[],
                rustls::pki_types::UnixTime::now()
            )
            .is_err()
    );

    // A Secret created by one replica was created exactly once.
    let creates = cluster.server.requests().count_created("/secrets");
    assert_eq!(creates, 1);
}

/// A Secret tierd may not read is not fatal: tierd stays up, `/readyz` names the certificate
/// and why, the webhook waits; once the RBAC is fixed (the fault lifted) it settles and serves.
#[tokio::test]
async fn without_permission_to_read_the_secret_tierd_waits_saying_what_is_missing() {
    let cluster = Cluster::antrea().await;
    let forbidden = cluster.server.inject(
        tier_testserver::Fault::status(
            tier_testserver::Verb::Get,
            403,
            "Forbidden",
            "secrets \"tierd-self-signed-cert\" is forbidden",
        )
        .named("tierd-self-signed-cert")
        .forever(),
    );
    let cert = TempFile::new("forbidden-tls", "crt");
    let key = TempFile::new("forbidden-tls", "key");
    let (cert_path, key_path) = (cert.0.display().to_string(), key.0.display().to_string());
    let mut tierd = Tierd::probes_first(
        &cluster.kubeconfig.0,
        None,
        &[
            "--self-signed-cert",
            "--tls-cert",
            &cert_path,
            "--tls-key",
            &key_path,
        ],
        Some(tier_tests::USER),
    )
    .await;
    let deadline = std::time::Instant::now() + tier_tests::PATIENCE;
    let verbose = loop {
        let (code, body) = tierd.get("/readyz?verbose").await;
        assert_eq!(code, 503, "{body}");
        if body.contains("[-]serving-certificate failed") && body.contains("forbidden") {
            break body;
        }
        assert!(std::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(
        verbose.contains("Secret kube-system/tierd-self-signed-cert"),
        "{verbose}"
    );
    assert_eq!(tierd.get("/livez").await.0, 200);
    assert_eq!(tierd.exited(), None, "{:?}", tierd.logs());

    assert!(cluster.server.remove_fault(forbidden));
    tierd.until_serving().await;
    tierd.until_ok("/readyz").await;
    assert!(
        std::fs::read_to_string(&cert.0)
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
}
