//! TLS with a self-signed certificate, and rotation without restart.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use rustls::pki_types::CertificateDer;
use tier_server::readiness::Readiness;
use tier_server::server::{Routes, Server};
use tier_server::tls::Reload;
use tier_server::tls::{CertFiles, CertReloader, TlsError};

use crate::common::{Running, get_tls, temp_dir};

/// A self-signed certificate for localhost: its DER and the PEM of certificate and key.
struct Cert {
    der: CertificateDer<'static>,
    cert_pem: String,
    key_pem: String,
}

fn self_signed() -> Cert {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    Cert {
        der: cert.der().clone(),
        cert_pem: cert.pem(),
        key_pem: signing_key.serialize_pem(),
    }
}

fn write(files: &CertFiles, cert_pem: &str, key_pem: &str) {
    std::fs::write(&files.cert, cert_pem).unwrap();
    std::fs::write(&files.key, key_pem).unwrap();
}

fn files_in(dir: &Path) -> CertFiles {
    CertFiles::new(dir.join("tls.crt"), dir.join("tls.key"))
}

async fn serve_tls(reloader: &Arc<CertReloader>) -> Running {
    let router = Routes::new(Readiness::new()).into_router();
    let config = reloader.server_config().unwrap();
    Running::start(
        Server::new(router)
            .tls(config)
            .handshake_timeout(Duration::from_secs(5)),
    )
    .await
}

#[tokio::test]
async fn serves_https_and_rotates_on_reload() {
    let dir = temp_dir();
    let files = files_in(&dir);
    let first = self_signed();
    write(&files, &first.cert_pem, &first.key_pem);
    let reloader = CertReloader::load(files.clone()).await.unwrap();
    let server = serve_tls(&reloader).await;

    let (reply, presented) = get_tls(server.addr, &first.der, "/livez").await.unwrap();
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(presented, first.der);
    assert_eq!(reloader.reload().await.unwrap(), Reload::Unchanged);

    // Rotate: the next connection gets the new certificate, without a restart.
    let second = self_signed();
    write(&files, &second.cert_pem, &second.key_pem);
    assert_eq!(reloader.reload().await.unwrap(), Reload::Rotated);
    let (reply, presented) = get_tls(server.addr, &second.der, "/livez").await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(presented, second.der);
    // A client trusting only the old certificate is refused now.
    assert!(get_tls(server.addr, &first.der, "/livez").await.is_err());

    server.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_bad_new_pair_keeps_the_old_certificate() {
    let dir = temp_dir();
    let files = files_in(&dir);
    let good = self_signed();
    write(&files, &good.cert_pem, &good.key_pem);
    let reloader = CertReloader::load(files.clone()).await.unwrap();
    let server = serve_tls(&reloader).await;

    // Half a rotation: a new certificate with the old key.
    let next = self_signed();
    write(&files, &next.cert_pem, &good.key_pem);
    let error = reloader.reload().await.unwrap_err();
    assert!(matches!(error, TlsError::Key { .. }), "{error}");
    assert!(error.to_string().starts_with("the key in "), "{error}");
    // Reported once per content.
    assert_eq!(reloader.reload().await.unwrap(), Reload::Unchanged);
    let (_, presented) = get_tls(server.addr, &good.der, "/livez").await.unwrap();
    assert_eq!(presented, good.der);

    // Garbage.
    write(&files, "not a certificate", &good.key_pem);
    assert!(matches!(
        reloader.reload().await,
        Err(TlsError::NoCertificate { .. })
    ));
    write(&files, &good.cert_pem, "");
    assert!(matches!(
        reloader.reload().await,
        Err(TlsError::NoPrivateKey { .. })
    ));
    let (_, presented) = get_tls(server.addr, &good.der, "/livez").await.unwrap();
    assert_eq!(presented, good.der);

    // The rotation completes: the key arrives.
    write(&files, &next.cert_pem, &next.key_pem);
    assert_eq!(reloader.reload().await.unwrap(), Reload::Rotated);
    let (_, presented) = get_tls(server.addr, &next.der, "/livez").await.unwrap();
    assert_eq!(presented, next.der);

    server.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn load_reports_missing_files() {
    let dir = temp_dir();
    let error = CertReloader::load(files_in(&dir)).await.unwrap_err();
    assert!(matches!(error, TlsError::Read { .. }));
    assert!(error.to_string().starts_with("cannot read "), "{error}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_watch_task_picks_up_a_rotation() {
    let dir = temp_dir();
    let files = files_in(&dir);
    let first = self_signed();
    write(&files, &first.cert_pem, &first.key_pem);
    let reloader = CertReloader::load(files.clone()).await.unwrap();
    let server = serve_tls(&reloader).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watching = tokio::spawn(
        Arc::clone(&reloader).watch(Duration::from_millis(10), async {
            let _ = stopped.await;
        }),
    );

    let second = self_signed();
    write(&files, &second.cert_pem, &second.key_pem);
    let mut presented = None;
    for _ in 0..500 {
        if let Ok((_, cert)) = get_tls(server.addr, &second.der, "/livez").await {
            presented = Some(cert);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(presented, Some(second.der));

    let _ = stop.send(());
    watching.await.unwrap();
    server.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_expired_certificate_is_served_flagged_and_exported() {
    use std::time::{SystemTime, UNIX_EPOCH};

    use tier_server::tls::Expiry;

    let dir = temp_dir();
    let files = files_in(&dir);
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    write(&files, &cert.pem(), &key.serialize_pem());

    let reloader = CertReloader::load(files.clone()).await.unwrap();
    let not_after = reloader.not_after().unwrap();
    assert_eq!(
        not_after.duration_since(UNIX_EPOCH).unwrap().as_secs(),
        1_609_459_200
    );
    assert!(matches!(
        reloader.expiry(SystemTime::now()),
        Expiry::Expired(_)
    ));
    let day = Duration::from_secs(24 * 3600);
    assert_eq!(
        reloader.expiry(not_after - day),
        Expiry::Soon(day),
        "a day before expiry"
    );
    assert_eq!(reloader.expiry(not_after - 30 * day), Expiry::Valid);

    let mut registry = prometheus_client::registry::Registry::default();
    reloader.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("tierd_serving_certificate_expiry_timestamp_seconds 1609459200"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn pem_errors_are_in_words() {
    let dir = temp_dir();
    let files = files_in(&dir);
    let good = self_signed();
    write(&files, "-----BEGIN CERTIFICATE-----\nMIIB\n", &good.key_pem);
    let error = CertReloader::load(files).await.unwrap_err().to_string();
    assert!(
        error.contains("a section has no end line (-----END CERTIFICATE-----)"),
        "{error}"
    );
    assert!(!error.contains('['), "a byte array: {error}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A CA that signs client certificates.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

fn ca(name: &str) -> Ca {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca {
        issuer: rcgen::Issuer::new(params, key),
        pem: cert.pem(),
    }
}

/// A client certificate (clientAuth) signed by `ca` with subject CN `cn` and DNS SANs `sans`.
fn client_cert(ca: &Ca, cn: &str, sans: &[&str]) -> (CertificateDer<'static>, Vec<u8>) {
    client_cert_shaped(ca, cn, sans, |_| {})
}

/// [`client_cert`], its parameters changed by `shape` before signing.
fn client_cert_shaped(
    ca: &Ca,
    cn: &str,
    sans: &[&str],
    shape: impl FnOnce(&mut rcgen::CertificateParams),
) -> (CertificateDer<'static>, Vec<u8>) {
    let mut params =
        rcgen::CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    shape(&mut params);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.der().clone(), key.serialize_der())
}

/// `GET /livez` over TLS trusting `root`, presenting `client` if given: the raw answer, or the
/// error that ended the connection.
async fn get_as(
    addr: std::net::SocketAddr,
    root: &CertificateDer<'static>,
    client: Option<&(CertificateDer<'static>, Vec<u8>)>,
) -> Result<String, std::io::Error> {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![cert.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.clone())),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    tls.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await?;
    let mut reply = Vec::new();
    tls.read_to_end(&mut reply).await?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

fn admitted(reply: &Result<String, std::io::Error>) -> bool {
    reply.as_ref().is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
}

async fn serve_with_client_auth(
    reloader: &Arc<CertReloader>,
    client: &Arc<tier_server::tls::ClientAuth>,
    metrics: tier_server::server::ServerMetrics,
) -> Running {
    let router = Routes::new(Readiness::new()).into_router();
    let config = reloader.server_config_with_client_auth(client).unwrap();
    Running::start(
        Server::new(router)
            .tls(config)
            .name("webhook")
            .metrics(metrics),
    )
    .await
}

#[tokio::test]
async fn client_auth_admits_only_allowed_names_chained_to_the_ca() {
    let dir = temp_dir();
    let files = files_in(&dir);
    let server_cert = self_signed();
    write(&files, &server_cert.cert_pem, &server_cert.key_pem);
    let reloader = CertReloader::load(files).await.unwrap();
    let (trusted, other) = (ca("trusted"), ca("other"));
    let ca_file = dir.join("client-ca.crt");
    std::fs::write(&ca_file, &trusted.pem).unwrap();
    let client = tier_server::tls::ClientAuth::load(&ca_file, ["kube-apiserver".to_owned()])
        .await
        .unwrap();
    let metrics = tier_server::server::ServerMetrics::default();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let server = serve_with_client_auth(&reloader, &client, metrics).await;
    let root = &server_cert.der;

    let no_cert = get_as(server.addr, root, None).await;
    assert!(!admitted(&no_cert), "no client certificate: {no_cert:?}");
    let wrong_ca = client_cert(&other, "kube-apiserver", &[]);
    let reply = get_as(server.addr, root, Some(&wrong_ca)).await;
    assert!(!admitted(&reply), "another CA: {reply:?}");
    let wrong_name = client_cert(&trusted, "system:node:evil", &["evil.example"]);
    let reply = get_as(server.addr, root, Some(&wrong_name)).await;
    assert!(!admitted(&reply), "a name not allowed: {reply:?}");

    let right = client_cert(&trusted, "kube-apiserver", &[]);
    let reply = get_as(server.addr, root, Some(&right)).await;
    assert!(admitted(&reply), "kube-apiserver by CN: {reply:?}");
    let by_san = client_cert(&trusted, "apiserver-1", &["kube-apiserver"]);
    let reply = get_as(server.addr, root, Some(&by_san)).await;
    assert!(admitted(&reply), "kube-apiserver by DNS SAN: {reply:?}");

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(
            "tierd_tls_handshake_failures_total{server=\"webhook\",reason=\"client_certificate\"} 3"
        ),
        "{text}"
    );
    server.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_refused_client_certificate_is_counted_by_reason_and_logged_with_the_peer() {
    let dir = temp_dir();
    let files = files_in(&dir);
    let server_cert = self_signed();
    write(&files, &server_cert.cert_pem, &server_cert.key_pem);
    let reloader = CertReloader::load(files).await.unwrap();
    let (trusted, other) = (ca("trusted"), ca("other"));
    let ca_file = dir.join("client-ca.crt");
    std::fs::write(&ca_file, &trusted.pem).unwrap();
    let client = tier_server::tls::ClientAuth::load(&ca_file, ["kube-apiserver".to_owned()])
        .await
        .unwrap();
    let metrics = tier_server::server::ServerMetrics::default();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let server = serve_with_client_auth(&reloader, &client, metrics).await;
    let root = &server_cert.der;
    crate::common::capture_logs();

    let untrusted = client_cert(&other, "kube-apiserver", &[]);
    let wrong_name = client_cert(&trusted, "system:node:evil", &["evil.example"]);
    let server_only = client_cert_shaped(&trusted, "kube-apiserver", &[], |params| {
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    });
    let expired = client_cert_shaped(&trusted, "kube-apiserver", &[], |params| {
        params.not_before = rcgen::date_time_ymd(2001, 1, 1);
        params.not_after = rcgen::date_time_ymd(2002, 1, 1);
    });
    let cases = [
        (None, "missing", "the client sent no certificate"),
        (
            Some(&untrusted),
            "untrusted",
            "not signed by a CA of the --client-ca file",
        ),
        (
            Some(&wrong_name),
            "name_not_allowed",
            "names no client of --client-names",
        ),
        (
            Some(&server_only),
            "not_for_clients",
            "lacks the clientAuth extended key usage",
        ),
        (Some(&expired), "expired", "has expired"),
    ];
    for (cert, reason, _) in &cases {
        let reply = get_as(server.addr, root, *cert).await;
        assert!(!admitted(&reply), "{reason}: {reply:?}");
    }
    // The server counts a refusal as its handshake ends, a moment after the client saw it.
    let scrape = || {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    };
    for _ in 0..500 {
        if scrape().contains("reason=\"client_certificate\"} 5") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let text = scrape();
    let logged = crate::common::captured_logs();
    for (_, reason, words) in &cases {
        let sample = format!(
            "tierd_tls_client_certificates_rejected_total{{server=\"webhook\",reason=\"{reason}\"}} 1"
        );
        assert!(text.contains(&sample), "{sample} not in\n{text}");
        let line = logged
            .lines()
            .find(|line| line.contains(words))
            .unwrap_or_else(|| panic!("no log line says {words:?}:\n{logged}"));
        assert!(line.contains(" WARN "), "{line}");
        assert!(line.contains("peer=127.0.0.1:"), "{line}");
        assert!(line.contains("server=\"webhook\""), "{line}");
        assert!(line.contains(reason), "{line}");
    }
    // The name check says which names were presented and which are allowed.
    assert!(
        logged.contains("system:node:evil") && logged.contains("kube-apiserver"),
        "{logged}"
    );
    // An admitted client is neither counted nor logged.
    let right = client_cert(&trusted, "kube-apiserver", &[]);
    assert!(admitted(&get_as(server.addr, root, Some(&right)).await));
    assert_eq!(
        scrape()
            .matches("tierd_tls_client_certificates_rejected_total{")
            .count(),
        5
    );
    server.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_client_ca_is_reloaded_and_a_bad_one_keeps_the_old() {
    let dir = temp_dir();
    let files = files_in(&dir);
    let server_cert = self_signed();
    write(&files, &server_cert.cert_pem, &server_cert.key_pem);
    let reloader = CertReloader::load(files).await.unwrap();
    let (first, second) = (ca("first"), ca("second"));
    let ca_file = dir.join("client-ca.crt");
    std::fs::write(&ca_file, &first.pem).unwrap();
    let client = tier_server::tls::ClientAuth::load(&ca_file, ["kube-apiserver".to_owned()])
        .await
        .unwrap();
    let server = serve_with_client_auth(
        &reloader,
        &client,
        tier_server::server::ServerMetrics::default(),
    )
    .await;
    let root = &server_cert.der;
    let (old, new) = (
        client_cert(&first, "kube-apiserver", &[]),
        client_cert(&second, "kube-apiserver", &[]),
    );
    assert!(admitted(&get_as(server.addr, root, Some(&old)).await));
    assert!(!admitted(&get_as(server.addr, root, Some(&new)).await));
    assert_eq!(client.reload().await.unwrap(), Reload::Unchanged);

    // Rotated: the new CA's clients get in, the old one's do not, without a restart.
    std::fs::write(&ca_file, &second.pem).unwrap();
    assert_eq!(client.reload().await.unwrap(), Reload::Rotated);
    assert!(admitted(&get_as(server.addr, root, Some(&new)).await));
    assert!(!admitted(&get_as(server.addr, root, Some(&old)).await));

    // A broken file is refused once and the CAs in use stay.
    std::fs::write(&ca_file, "not a certificate").unwrap();
    let error = client.reload().await.unwrap_err();
    assert!(matches!(error, TlsError::NoCertificate { .. }), "{error}");
    assert_eq!(client.reload().await.unwrap(), Reload::Unchanged);
    assert!(admitted(&get_as(server.addr, root, Some(&new)).await));

    server.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn client_auth_needs_a_ca_and_a_name() {
    let dir = temp_dir();
    let ca_file = dir.join("client-ca.crt");
    std::fs::write(&ca_file, ca("ca").pem).unwrap();
    let error = tier_server::tls::ClientAuth::load(&ca_file, [String::new()])
        .await
        .unwrap_err();
    assert!(matches!(error, TlsError::NoClientNames), "{error}");
    std::fs::write(&ca_file, "").unwrap();
    let error = tier_server::tls::ClientAuth::load(&ca_file, ["kube-apiserver".to_owned()])
        .await
        .unwrap_err();
    assert!(matches!(error, TlsError::NoCertificate { .. }), "{error}");
    let missing = tier_server::tls::ClientAuth::load(dir.join("absent"), ["x".to_owned()])
        .await
        .unwrap_err();
    assert!(matches!(missing, TlsError::Read { .. }), "{missing}");
    let _ = std::fs::remove_dir_all(dir);
}
