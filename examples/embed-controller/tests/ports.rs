//! How an embedder unit-tests its own code without a cluster: tierd's ports mocked
//! (`tier-core`'s `mock` feature: mockall's `MockTierWriter`, `MockTierLister`) or served by the
//! in-memory backend (`tier-memory`), on tokio's paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use embed_controller::{after_initialized, tier_names};
use tier_core::{
    DesiredSet, DriverConfig, MockTierLister, MockTierWriter, Mode, ObservedTier, Snapshot,
    WriteError,
};
use tier_memory::MemoryCluster;

/// The controller's reconciler must not start while tierd cannot create the system Tiers:
/// every create is refused (a mocked writer), the cache is the in-memory backend's.
#[tokio::test(start_paused = true)]
async fn the_reconciler_waits_while_the_tiers_are_blocked() {
    let cluster = MemoryCluster::new();
    let mut writer = MockTierWriter::new();
    writer
        .expect_create()
        .returning(|_| Err(WriteError::denied("admission webhook denied the request")));
    writer.expect_update().never();
    let ensurer = tier_runtime::spawn(
        cluster,
        writer,
        DesiredSet::antrea(),
        DriverConfig::default(),
        Mode::Continuous,
    )
    .unwrap();
    let reconciler = after_initialized(ensurer.status(), async { "reconciled" });
    // Ten virtual minutes of refusals.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(
        !reconciler.is_finished(),
        "started before the Tiers existed"
    );
    let status = ensurer.status().current();
    assert!(!status.initialized);
    assert_eq!(status.unconverged().count(), 6);

    // If tierd stops first, the reconciler never starts.
    ensurer.shutdown().await;
    assert_eq!(reconciler.await.unwrap(), None);
}

/// On the in-memory backend the Tiers converge and the reconciler starts, after them.
#[tokio::test(start_paused = true)]
async fn the_reconciler_starts_once_the_tiers_exist() {
    let cluster = MemoryCluster::new();
    let observed = cluster.clone();
    let ensurer = tier_runtime::spawn(
        cluster.clone(),
        cluster,
        DesiredSet::antrea(),
        DriverConfig::default(),
        Mode::Continuous,
    )
    .unwrap();
    let reconciler = after_initialized(ensurer.status(), async move { observed.tiers().len() });
    let tiers_when_started = tokio::time::timeout(Duration::from_secs(60), reconciler)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tiers_when_started, Some(6));
    ensurer.shutdown().await;
}

/// The controller's `/tiers` listing, on a mocked cache.
#[test]
fn tier_names_follow_the_cache() {
    let mut lister = MockTierLister::new();
    lister
        .expect_snapshot()
        .times(1)
        .return_const(Snapshot::default());
    assert_eq!(tier_names(&lister), None, "not synced: no names");

    let tiers = BTreeMap::from([(
        "platform".to_owned(),
        ObservedTier {
            name: "platform".into(),
            priority: 200,
            description: String::new(),
            resource_version: "1".into(),
            last_writer: None,
        },
    )]);
    let mut lister = MockTierLister::new();
    lister.expect_snapshot().return_const(Snapshot {
        generation: 1,
        tiers: Some(Arc::new(tiers)),
        ..Snapshot::default()
    });
    assert_eq!(tier_names(&lister), Some(vec!["platform".to_owned()]));
}
