//! The lister side: sync modes, the lagging cache and change notifications, on virtual time.

use std::time::Duration;

use tier_core::{Observed, TierLister, TierSpec, TierWriter};
use tier_memory::{Admission, AdmissionView, CacheConfig, MemoryCluster, SyncMode};
use tokio::time::{Instant, sleep, timeout};

const MS: Duration = Duration::from_millis(1);

fn tier(name: &str, priority: i64) -> TierSpec {
    TierSpec::new(name, priority, "")
}

/// Whether `fut` is still pending after virtual time has run for `within`.
async fn pending_for<F: Future>(within: Duration, fut: F) -> bool {
    timeout(within, fut).await.is_err()
}

#[tokio::test(start_paused = true)]
async fn snapshot_is_none_and_wait_synced_pends_until_sync() {
    let cluster = MemoryCluster::builder()
        .with_tier(tier("a", 1))
        .sync(SyncMode::Manual)
        .build();
    let snap = cluster.snapshot();
    assert_eq!((snap.generation, snap.tiers), (0, None));
    assert_eq!(cluster.snapshot().observe("a"), Observed::Unknown);
    assert!(pending_for(Duration::from_secs(3600), cluster.wait_synced()).await);

    let waiter = tokio::spawn({
        let cluster = cluster.clone();
        async move { cluster.wait_synced().await }
    });
    tokio::task::yield_now().await;
    cluster.lister().sync();
    timeout(MS, waiter).await.unwrap().unwrap();
    let snap = cluster.snapshot();
    assert!(snap.generation > 0);
    assert_eq!(snap.observe("a").resource_version(), Some("1"));
    assert_eq!(cluster.snapshot().observe("b"), Observed::Absent);
}

#[tokio::test(start_paused = true)]
async fn a_sync_delay_runs_on_virtual_time() {
    let start = Instant::now();
    let cluster = MemoryCluster::builder()
        .sync(SyncMode::After(Duration::from_secs(5)))
        .build();
    assert!(!cluster.lister().is_synced());
    cluster.wait_synced().await;
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert!(cluster.snapshot().is_synced());
}

#[tokio::test(start_paused = true)]
async fn without_lag_a_write_is_visible_when_it_returns() {
    let cluster = MemoryCluster::new();
    let before = cluster.snapshot().generation;
    cluster.create(&tier("a", 1)).await.unwrap();
    let snap = cluster.snapshot();
    assert_eq!(snap.generation, before + 1);
    assert_eq!(snap.observe("a").resource_version(), Some("1"));
    cluster.delete("a").unwrap();
    assert_eq!(cluster.snapshot().observe("a"), Observed::Absent);
    assert_eq!(cluster.snapshot().generation, before + 2);
}

#[tokio::test(start_paused = true)]
async fn a_lag_hides_each_write_for_exactly_the_lag() {
    let lag = Duration::from_secs(2);
    let cluster = MemoryCluster::builder().lag(lag).build();
    let g0 = cluster.snapshot().generation;
    cluster.create(&tier("a", 1)).await.unwrap();
    sleep(Duration::from_secs(1)).await;
    cluster.edit("a", |t| t.priority = 2).unwrap();
    assert_eq!(cluster.lister().pending(), 2);

    sleep(lag - Duration::from_secs(1) - MS).await;
    assert_eq!(
        cluster.snapshot().observe("a"),
        Observed::Absent,
        "just before the lag"
    );
    assert_eq!(cluster.snapshot().generation, g0);
    sleep(MS).await;
    let Observed::Present(a) = cluster.snapshot().observe("a") else {
        panic!("visible after the lag")
    };
    assert_eq!(a.priority, 1, "the edit is still hidden");
    assert_eq!(cluster.snapshot().generation, g0 + 1);
    sleep(Duration::from_secs(1)).await;
    let Observed::Present(a) = cluster.snapshot().observe("a") else {
        panic!("still there")
    };
    assert_eq!(a.priority, 2);
    assert_eq!(cluster.lister().pending(), 0);
    // The store itself was never behind.
    assert_eq!(cluster.get("a").unwrap().priority, 2);
}

#[tokio::test(start_paused = true)]
async fn a_shorter_lag_never_reorders_changes() {
    let cluster = MemoryCluster::builder().lag(Duration::from_secs(5)).build();
    cluster.create_raw(&tier("a", 1)).unwrap();
    cluster.lister().set_lag(Duration::ZERO);
    cluster.delete("a").unwrap();
    assert_eq!(cluster.lister().lag(), Duration::ZERO);
    assert_eq!(cluster.lister().pending(), 2);
    sleep(Duration::from_secs(5)).await;
    assert_eq!(cluster.snapshot().observe("a"), Observed::Absent);
    assert_eq!(cluster.lister().pending(), 0);
}

#[tokio::test(start_paused = true)]
async fn changed_wakes_on_a_write_and_after_the_lag() {
    let cluster = MemoryCluster::new();
    let seen = cluster.snapshot().generation;
    assert!(pending_for(Duration::from_secs(60), cluster.changed(seen)).await);
    let waiter = tokio::spawn({
        let cluster = cluster.clone();
        async move { cluster.changed(seen).await }
    });
    tokio::task::yield_now().await;
    cluster.create_raw(&tier("a", 1)).unwrap();
    timeout(MS, waiter).await.unwrap().unwrap();
    // An older generation resolves at once.
    timeout(MS, cluster.changed(seen)).await.unwrap();

    let lag = Duration::from_secs(3);
    cluster.lister().set_lag(lag);
    let seen = cluster.snapshot().generation;
    let start = Instant::now();
    let waiter = tokio::spawn({
        let cluster = cluster.clone();
        async move { cluster.changed(seen).await }
    });
    tokio::task::yield_now().await;
    cluster.edit("a", |t| t.description = "x".into()).unwrap();
    waiter.await.unwrap();
    assert_eq!(start.elapsed(), lag);
    assert_eq!(cluster.snapshot().generation, seen + 1);
}

#[tokio::test(start_paused = true)]
async fn changed_is_cancel_safe() {
    let cluster = MemoryCluster::builder().lag(Duration::from_secs(1)).build();
    let seen = cluster.snapshot().generation;
    cluster.create_raw(&tier("a", 1)).unwrap();
    // Dropped twice before the change is due: nothing is lost.
    assert!(pending_for(Duration::from_millis(400), cluster.changed(seen)).await);
    assert!(pending_for(Duration::from_millis(400), cluster.changed(seen)).await);
    let start = Instant::now();
    cluster.changed(seen).await;
    assert_eq!(start.elapsed(), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn caches_are_independent() {
    let cluster = MemoryCluster::builder().with_tier(tier("a", 1)).build();
    let slow = cluster.cache(CacheConfig::default().lag(Duration::from_secs(10)));
    let late = cluster.cache(CacheConfig::default().sync(SyncMode::Manual));
    cluster.create(&tier("b", 2)).await.unwrap();
    assert!(cluster.snapshot().observe("b").resource_version().is_some());
    assert_eq!(
        slow.snapshot().observe("a").resource_version(),
        Some("1"),
        "listed at creation"
    );
    assert_eq!(slow.snapshot().observe("b"), Observed::Absent);
    assert_eq!(late.snapshot().tiers, None);
    late.sync();
    assert!(late.snapshot().observe("b").resource_version().is_some());
    drop(slow);
    // A dropped cache is forgotten; writes still work.
    cluster.create(&tier("c", 3)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_webhook_reading_a_lagging_cache_lets_overlaps_through() {
    let cluster = MemoryCluster::builder()
        .admission(Admission::antrea().reading(AdmissionView::Cache))
        .lag(Duration::from_secs(1))
        .build();
    cluster.create(&tier("a", 7)).await.unwrap();
    cluster.create(&tier("b", 7)).await.unwrap();
    assert_eq!(
        cluster.tiers().len(),
        2,
        "both passed the stale overlap check"
    );
    sleep(Duration::from_secs(1)).await;
    let err = cluster.create(&tier("c", 7)).await.unwrap_err();
    assert!(
        err.message.ends_with("overlaps with existing Tier"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_huge_lag_hides_writes_until_a_flush() {
    let cluster = MemoryCluster::builder().lag(Duration::MAX).build();
    let seen = cluster.snapshot().generation;
    cluster.create_raw(&tier("a", 1)).unwrap();
    assert!(pending_for(Duration::from_secs(365 * 24 * 3600), cluster.changed(seen)).await);
    assert_eq!(cluster.snapshot().observe("a"), Observed::Absent);
    let waiter = tokio::spawn({
        let cluster = cluster.clone();
        async move { cluster.changed(seen).await }
    });
    tokio::task::yield_now().await;
    cluster.lister().flush();
    timeout(MS, waiter).await.unwrap().unwrap();
    assert!(cluster.snapshot().observe("a").resource_version().is_some());
}
