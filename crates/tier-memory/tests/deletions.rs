//! A deletion the cache saw reaches the decision at once (issue 24): a Tier deleted a few
//! milliseconds after tierd created it, the create's echo and the deletion reaching tierd's
//! cache together, is re-created without waiting for the echo timeout. On virtual time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use tier_core::{DesiredSet, DriverConfig, Mode, Observed, TierLister, TierSpec};
use tier_memory::{CacheConfig, CallOutcome, MemoryCluster, Verb};
use tokio::time::{Instant, sleep};

const LAG: Duration = Duration::from_millis(10);

/// The creates of `name` that succeeded, by when they were answered.
fn creates(cluster: &MemoryCluster, name: &str) -> Vec<Instant> {
    cluster
        .calls()
        .records()
        .iter()
        .filter(|r| r.verb == Verb::Create && r.name == name && r.outcome == CallOutcome::Ok)
        .filter_map(|r| r.finished.map(Instant::from_std))
        .collect()
}

async fn until(what: &str, cond: impl Fn() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(600);
    while !cond() {
        assert!(Instant::now() < give_up, "never: {what}");
        sleep(Duration::from_millis(1)).await;
    }
}

/// The lister level: a create and its deletion applied between two looks leave the view as it
/// was, and the snapshot carries the deletion at a generation after the first look.
#[tokio::test(start_paused = true)]
async fn a_lagging_cache_shows_a_deletion_read_together_with_its_create() {
    let cluster = MemoryCluster::new();
    let cache = cluster.cache(CacheConfig::default().lag(LAG));
    let before = cache.snapshot();
    cluster.create_raw(&TierSpec::new("a", 1, "")).unwrap();
    cluster.delete("a").unwrap();
    sleep(LAG).await;
    let after = cache.snapshot();
    assert_eq!(after.observe("a"), Observed::Absent);
    assert_eq!(after.tiers, before.tiers, "the set looks unchanged");
    assert!(after.generation > before.generation);
    assert!(after.deleted_at("a").unwrap() > before.generation);
    assert_eq!(before.deleted_at("a"), None);
}

#[tokio::test(start_paused = true)]
async fn a_delete_right_after_the_create_is_recreated_without_the_echo_timeout() {
    let desired = DesiredSet::antrea();
    let tiers: Vec<_> = desired
        .tiers()
        .iter()
        .filter(|t| t.name != "emergency")
        .cloned()
        .collect();
    let cluster = MemoryCluster::builder().with_tiers(tiers).build();
    // tierd's own cache lags 10 ms behind the store.
    let own = cluster.cache(CacheConfig::default().lag(LAG));
    let run = tier_runtime::spawn(
        own.clone(),
        cluster.clone(),
        desired,
        DriverConfig {
            seed: Some(11),
            ..DriverConfig::default()
        },
        Mode::Continuous,
    )
    .unwrap();
    let mut delays = Vec::new();
    for trial in 0..20u32 {
        // Each trial: tierd creates emergency; someone deletes it `d` ms later (0-10 ms), so
        // the create's echo and the deletion reach tierd's cache together.
        let d = Duration::from_millis(u64::from(trial % 11));
        let before = creates(&cluster, "emergency").len();
        until("the create", || {
            creates(&cluster, "emergency").len() > before
        })
        .await;
        let created = *creates(&cluster, "emergency").last().unwrap();
        sleep(d.saturating_sub(created.elapsed())).await;
        // The deletion is queued behind the create's echo: the cache shows both at once.
        own.set_lag(Duration::ZERO);
        cluster.delete("emergency").unwrap();
        own.set_lag(LAG);
        let deleted = Instant::now();
        until("the re-create", || {
            creates(&cluster, "emergency").len() > before + 1
        })
        .await;
        let recreated = *creates(&cluster, "emergency").last().unwrap();
        delays.push(recreated - deleted);
        // Let the Tier settle and the write budget fill again before the next trial.
        until("the re-created Tier in the cache", || {
            own.snapshot()
                .observe("emergency")
                .resource_version()
                .is_some()
        })
        .await;
        sleep(Duration::from_secs(90)).await;
        cluster.delete("emergency").unwrap();
    }
    let slowest = delays.iter().max().copied().unwrap();
    eprintln!("measured: re-created {delays:?} after the deletion");
    assert!(
        slowest < Duration::from_millis(100),
        "re-created after {slowest:?} (the echo timeout is 3 s): {delays:?}"
    );
    run.shutdown().await;
}
