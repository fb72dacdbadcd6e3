//! The assembly with the embedder's own leadership signal, against the test API server: on
//! standby it syncs, serves and stays Ready, and writes no Tier; `leader-election` and
//! `tierd_leader` say so; once the signal says it leads, an empty cluster gets its six creates.
//! Timing that cannot fence starts nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_core::DesiredSet;
use tier_kube::lease::{ElectionConfig, ElectionError};
use tier_server::readiness::{LEADER_ELECTION, TIER_CACHE_SYNCED};
use tier_testserver::{ServerConfig, TestApiServer, Verb};
use tierd::{Clients, Events, Leadership, StartError, Tierd};
use tokio::sync::watch;

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

fn tier_writes(server: &TestApiServer) -> usize {
    let log = server.requests();
    log.count(Verb::Create, None) + log.count(Verb::Update, None)
}

/// The metrics tierd registers, read from its status as a scrape would.
fn scrape(tierd: &Tierd) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    tier_server::metrics::register(&mut registry, tierd.status());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_writes_nothing_until_the_embedders_signal_says_it_leads() {
    let server = TestApiServer::start(ServerConfig::default().user("tierd-token", USER))
        .await
        .unwrap();
    let (lead, signal) = watch::channel(false);
    let tierd = Tierd::builder(clients(&server.url()).await, DesiredSet::antrea())
        .events(Events::Off)
        .controller_user(USER)
        .leadership(Leadership::Signal(signal))
        .start()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while !tierd.readiness().state(TIER_CACHE_SYNCED).unwrap().is_ok() {
        assert!(Instant::now() < deadline, "the cache never synced");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A second of standby (the driver would have written at once).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(tier_writes(&server), 0, "a standby writes no Tier");
    assert!(tierd.status().current().standby);
    let check = tierd.readiness().state(LEADER_ELECTION).unwrap();
    assert!(format!("{check:?}").contains("standby"), "{check:?}");
    let readyz = tierd.readiness().gate(&[TIER_CACHE_SYNCED, "shutdown"]);
    assert!(readyz.check().is_ok(), "a standby stays Ready");
    let metrics = scrape(&tierd);
    assert!(metrics.contains("tierd_leader 0"), "{metrics}");

    lead.send_replace(true);
    tokio::time::timeout(PATIENCE, tierd.initialized())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tier_writes(&server), 6, "one create per system Tier");
    assert!(tierd.readiness().state(LEADER_ELECTION).unwrap().is_ok());
    assert!(scrape(&tierd).contains("tierd_leader 1"));
    tierd.shutdown().await;
}

#[tokio::test]
async fn timing_that_cannot_fence_starts_nothing() {
    let server = TestApiServer::start(ServerConfig::default().user("tierd-token", USER))
        .await
        .unwrap();
    let config = ElectionConfig {
        renew_deadline: Duration::from_secs(20),
        ..ElectionConfig::new("kube-system", "tierd", "tierd-0_1")
    };
    let error = Tierd::builder(clients(&server.url()).await, DesiredSet::antrea())
        .leadership(Leadership::Lease(config))
        .start()
        .unwrap_err();
    assert!(
        matches!(
            error,
            StartError::Election(ElectionError::CannotFence { .. })
        ),
        "{error}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.requests().len(), 0, "no request sent");
}
