//! TLS with a self-signed certificate, and rotation without restart.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use rustls::pki_types::CertificateDer;
use tier_server::tls::Reload;
use tier_server::{CertFiles, CertReloader, Readiness, Routes, Server, TlsError};

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
