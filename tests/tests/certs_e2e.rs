//! `tierd run --self-signed-cert` end to end: two replicas against the test API server fill the
//! one Secret the install ships empty (creating none), and the caBundle they keep in the
//! ValidatingWebhookConfiguration verifies the certificate each of them serves, for the
//! Service's name, as kube-apiserver checks it. A missing Secret is waited for with a clear
//! error, never a crash.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

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

/// The Secret as deploy/components/self-signed-cert ships it (empty).
fn install_empty_secret(store: &tier_testserver::Store) {
    tier_testserver::install_shipped_secret(store).unwrap();
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
    install_empty_secret(&store);

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

    // The shipped Secret was filled, never created: tierd has no `create` on Secrets.
    let posts = cluster
        .server
        .requests()
        .records()
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("/secrets"))
        .count();
    assert_eq!(posts, 0);
}

#[tokio::test]
async fn a_missing_secret_is_waited_for_with_a_clear_error_and_then_filled() {
    let cluster = Cluster::antrea().await;
    let store = cluster.server.store();
    store
        .put_object(
            ObjectKind::ValidatingWebhookConfiguration,
            "",
            webhook_configuration(),
        )
        .unwrap();
    // The install is applied only after tierd looked for the Secret a few times.
    let server = &cluster.server;
    let secret_reads = || {
        server
            .requests()
            .records()
            .iter()
            .filter(|r| r.method == "GET" && r.path.ends_with("/secrets/tierd-self-signed-cert"))
            .count()
    };
    let apply_later = async {
        tokio::time::timeout(Duration::from_secs(20), async {
            while secret_reads() < 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("tierd keeps looking for the Secret");
        install_empty_secret(&store);
    };
    let ((tierd, _cert, _key), ()) = tokio::join!(replica(&cluster, "late"), apply_later);
    tierd.until_ok("/readyz").await;
    let logs = tierd.logs().join("\n");
    assert!(
        logs.contains("Secret kube-system/tierd-self-signed-cert does not exist")
            && logs.contains("apply the install"),
        "{logs}"
    );
    let secret = store
        .object(ObjectKind::Secret, "kube-system", "tierd-self-signed-cert")
        .unwrap();
    assert!(!decoded(&secret["data"]["ca.crt"]).is_empty());
    let posts = cluster
        .server
        .requests()
        .records()
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("/secrets"))
        .count();
    assert_eq!(posts, 0, "tierd never creates the Secret");
}

/// A Secret tierd may not read is not fatal: tierd stays up, `/readyz` names the certificate
/// and why, the webhook waits; once the RBAC is fixed (the fault lifted) it settles and serves.
#[tokio::test]
async fn without_permission_to_read_the_secret_tierd_waits_saying_what_is_missing() {
    let cluster = Cluster::antrea().await;
    install_empty_secret(&cluster.server.store());
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

#[tokio::test]
async fn beside_antrea_tierd_serves_probes_and_metrics_with_its_certificate_and_no_webhook_port() {
    use tokio::io::AsyncBufReadExt;

    let cluster = Cluster::antrea().await;
    install_empty_secret(&cluster.server.store());
    let cert = TempFile::new("beside-tls", "crt");
    let key = TempFile::new("beside-tls", "key");
    // The overlay's command line: --webhook-listen= (empty) and no webhook configuration.
    let mut child = tokio::process::Command::new(tier_tests::tierd_binary())
        .args(["run", "--webhook-listen="])
        .args(["--probe-listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0", "--metrics-auth"])
        .args([
            "--log-format",
            "json",
            "--controller-user",
            tier_tests::USER,
        ])
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig.0)
        .args([
            "--self-signed-cert",
            "--self-signed-cert-namespace",
            "kube-system",
        ])
        .arg("--tls-cert")
        .arg(&cert.0)
        .arg("--tls-key")
        .arg(&key.0)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut servers = std::collections::BTreeMap::new();
    let mut seen = Vec::new();
    tokio::time::timeout(tier_tests::PATIENCE, async {
        while servers.len() < 2 {
            let line = lines.next_line().await.unwrap().expect("tierd exited");
            if let Ok(json) = serde_json::from_str::<Value>(&line) {
                let fields = &json["fields"];
                if fields["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("serving"))
                {
                    servers.insert(
                        fields["server"].as_str().unwrap().to_owned(),
                        fields["addr"].as_str().unwrap().to_owned(),
                    );
                }
            }
            seen.push(line);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("tierd did not serve probes and metrics: {seen:#?}"));
    assert_eq!(
        servers.keys().map(String::as_str).collect::<Vec<_>>(),
        ["metrics", "probes"],
        "{seen:#?}"
    );
    let probes = &servers["probes"];
    let ready = tokio::time::timeout(tier_tests::PATIENCE, async {
        loop {
            let (code, body) = tier_tests::get(&format!("http://{probes}/readyz"), None).await;
            if code == 200 {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("tierd becomes ready without a webhook port");
    assert!(ready.contains("ok"), "{ready}");
    // Still nothing serves a webhook, and the certificate tierd signed is in place for metrics.
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_millis(200), lines.next_line()).await
    {
        seen.push(line);
    }
    assert!(
        !seen.iter().any(|l| l.contains("\"server\":\"webhook\"")),
        "{seen:#?}"
    );
    assert!(
        std::fs::read_to_string(&cert.0)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    child.kill().await.unwrap();
}
