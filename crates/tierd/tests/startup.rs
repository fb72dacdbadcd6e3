//! The assembly with its API server away at start: `start` succeeds at once, every fact the
//! API server holds is a failing readiness check naming why, and each settles once the server
//! appears on its port (here the self-signed certificate, the identity and the Tier cache).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_core::DesiredSet;
use tier_kube::certs::SelfSignedConfig;
use tier_server::readiness::TIER_CACHE_SYNCED;
use tier_testserver::{ServerConfig, TestApiServer};
use tierd::{CONTROLLER_IDENTITY, Clients, Events, SERVING_CERTIFICATE, SelfSigned, Tierd};

const USER: &str = "system:serviceaccount:kube-system:tierd";
const PATIENCE: Duration = Duration::from_secs(30);

async fn clients(url: &str) -> Clients {
    let yaml = tier_testserver::kubeconfig_for(url, USER, "tierd-token", "test");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    Clients::from_config(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fact_waits_behind_its_check_until_the_api_server_appears() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("tierd-startup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let tierd = Tierd::builder(
        clients(&format!("http://127.0.0.1:{port}")).await,
        DesiredSet::antrea(),
    )
    .events(Events::Off)
    .self_signed_cert(SelfSigned {
        config: SelfSignedConfig::new("kube-system", "tierd-self-signed-cert", "tierd"),
        cert: cert.clone(),
        key: key.clone(),
    })
    .start()
    .unwrap();

    // Away: each check fails saying why, after the first attempts.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let certificate = format!("{:?}", tierd.readiness().state(SERVING_CERTIFICATE));
        let identity = format!("{:?}", tierd.readiness().state(CONTROLLER_IDENTITY));
        if certificate.contains("Secret kube-system/tierd-self-signed-cert")
            && identity.contains("cannot ask the API server")
        {
            break;
        }
        assert!(Instant::now() < deadline, "{certificate} {identity}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!tierd.readiness().state(TIER_CACHE_SYNCED).unwrap().is_ok());
    assert!(!cert.exists());

    // The server appears, holding the Secret as the install ships it (empty): the
    // certificate settles (written), the identity and cache follow.
    let server = TestApiServer::start(ServerConfig::default().user("tierd-token", USER).port(port))
        .await
        .unwrap();
    tier_testserver::install_shipped_secret(&server.store()).unwrap();
    tokio::time::timeout(PATIENCE, tierd.certificate_settled())
        .await
        .unwrap();
    assert!(
        std::fs::read_to_string(&cert)
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    assert_eq!(
        tokio::time::timeout(PATIENCE, tierd.identity().wait())
            .await
            .unwrap(),
        USER
    );
    tokio::time::timeout(PATIENCE, tierd.initialized())
        .await
        .unwrap()
        .unwrap();
    for check in [SERVING_CERTIFICATE, CONTROLLER_IDENTITY, TIER_CACHE_SYNCED] {
        assert!(tierd.readiness().state(check).unwrap().is_ok(), "{check}");
    }
    tierd.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
