//! The lister through real HTTP: sync, watch events, and recovery from dropped and expired
//! watches without losing a change.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{PATIENCE, start, synced, until};
use tier_core::{Observed, ObservedTier, TierLister};
use tier_testserver::{Fault, ServerConfig, Verb};

fn present(snapshot: &tier_core::Snapshot, name: &str) -> ObservedTier {
    match snapshot.observe(name) {
        Observed::Present(tier) => tier,
        other => panic!("{name} is {other:?}"),
    }
}

#[tokio::test]
async fn syncs_on_an_empty_cluster() {
    let h = start(ServerConfig::default()).await;
    let lister = h.lister();
    assert!(!lister.snapshot().is_synced() || lister.generation() > 0);
    let generation = synced(&lister).await;
    assert_eq!(generation, 1);
    let snapshot = lister.snapshot();
    assert_eq!(snapshot.generation, 1);
    assert_eq!(snapshot.tiers.as_deref().map(|t| t.len()), Some(0));
    assert_eq!(snapshot.observe("baseline"), Observed::Absent);
    // The store is ready too, and the webhook can use it.
    tokio::time::timeout(PATIENCE, lister.store().wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    let stats = lister.watch_stats();
    assert_eq!((stats.lists, stats.errors), (1, 0));
}

#[tokio::test]
async fn syncs_on_a_populated_cluster() {
    let h = start(ServerConfig::default()).await;
    for tier in tier_core::DesiredSet::antrea().tiers() {
        h.seed(&tier.name, tier.priority, Some(&tier.description));
    }
    h.seed("user-tier", 10, None);
    let lister = h.lister();
    synced(&lister).await;
    let snapshot = lister.snapshot();
    assert_eq!(snapshot.tiers.as_deref().map(|t| t.len()), Some(7));
    for tier in tier_core::DesiredSet::antrea().tiers() {
        let observed = present(&snapshot, &tier.name);
        assert!(tier_core::in_sync(tier, &observed), "{observed:?}");
        assert_eq!(observed.resource_version, h.rv(&tier.name));
    }
    let user = present(&snapshot, "user-tier");
    assert_eq!((user.priority, user.description.as_str()), (10, ""));
    assert_eq!(lister.store().state().len(), 7);
}

#[tokio::test]
async fn watch_events_bump_the_generation() {
    let h = start(ServerConfig::default()).await;
    let lister = h.lister();
    let generation = synced(&lister).await;
    h.seed("a", 1, None);
    let snapshot = until(&lister, |s| s.observe("a") != Observed::Absent).await;
    assert!(snapshot.generation > generation);

    h.server
        .store()
        .modify("a", |obj| {
            obj["spec"]["description"] = "now described".into()
        })
        .unwrap();
    let snapshot = until(&lister, |s| present(s, "a").description == "now described").await;
    assert_eq!(present(&snapshot, "a").resource_version, h.rv("a"));

    h.server.store().delete("a").unwrap();
    until(&lister, |s| s.observe("a") == Observed::Absent).await;
}

#[tokio::test]
async fn bookmarks_do_not_bump_the_generation() {
    let config = ServerConfig::default().bookmark_interval(Some(Duration::from_millis(50)));
    let h = start(config).await;
    let lister = h.lister();
    let generation = synced(&lister).await;
    assert!(h.server.wait_for_watches(1, PATIENCE).await);
    let woke = tokio::time::timeout(Duration::from_millis(400), lister.changed(generation)).await;
    assert!(woke.is_err(), "a bookmark bumped the generation");
    assert_eq!(lister.generation(), generation);
}

/// Makes changes of every kind while the lister's watch is down, then lets it back.
/// `expire` forces the next watch to get 410 Gone, so the lister must list again.
async fn changes_while_the_watch_is_down(expire: bool) {
    let h = start(ServerConfig::default()).await;
    h.seed("kept", 1, None);
    h.seed("deleted", 2, None);
    h.seed("changed", 3, None);
    let lister = h.lister();
    synced(&lister).await;
    assert!(h.server.wait_for_watches(1, PATIENCE).await);
    let lists_before = h.server.requests().count(Verb::List, None);

    // Hold the watch down: every new watch fails until the fault is removed.
    let outage = h.server.inject(Fault::unavailable(Verb::Watch).forever());
    h.server.drop_watches();
    assert!(
        h.server
            .wait_for_requests(|log| log.count_code(Verb::Watch, None, 503) >= 1, PATIENCE)
            .await,
        "the lister never tried to watch again"
    );
    assert_eq!(h.server.open_watches(), 0);

    h.server.store().delete("deleted").unwrap();
    h.server
        .store()
        .modify("changed", |obj| obj["spec"]["priority"] = 30.into())
        .unwrap();
    h.seed("added", 4, Some("new"));
    if expire {
        h.server.store().compact();
        h.server.expire_next_watch();
    }
    // Nothing was seen yet.
    let snapshot = lister.snapshot();
    assert_eq!(present(&snapshot, "changed").priority, 3);
    assert!(snapshot.observe("deleted") != Observed::Absent);
    h.server.remove_fault(outage);

    let snapshot = until(&lister, |s| {
        s.observe("deleted") == Observed::Absent
            && s.observe("added") != Observed::Absent
            && present(s, "changed").priority == 30
    })
    .await;
    assert_eq!(present(&snapshot, "kept").resource_version, h.rv("kept"));
    assert_eq!(
        present(&snapshot, "changed").resource_version,
        h.rv("changed")
    );
    assert_eq!(present(&snapshot, "added").description, "new");
    assert_eq!(snapshot.tiers.as_deref().map(|t| t.len()), Some(3));

    let stats = lister.watch_stats();
    assert!(stats.errors >= 1, "{stats:?}");
    assert!(stats.last_error.is_some());
    let lists_after = h.server.requests().count(Verb::List, None);
    if expire {
        assert!(
            lists_after > lists_before,
            "a 410 must make the lister list again"
        );
        assert!(stats.lists >= 2, "{stats:?}");
    } else {
        assert_eq!(
            lists_after, lists_before,
            "a dropped watch resumes without a list"
        );
        assert_eq!(stats.lists, 1, "{stats:?}");
    }
}

#[tokio::test]
async fn a_dropped_watch_loses_no_change() {
    changes_while_the_watch_is_down(false).await;
}

#[tokio::test]
async fn a_watch_expired_with_410_loses_no_change() {
    changes_while_the_watch_is_down(true).await;
}

#[tokio::test]
async fn a_failing_initial_list_is_retried() {
    let h = start(ServerConfig::default()).await;
    h.seed("a", 1, None);
    h.server.inject(Fault::unavailable(Verb::List));
    let lister = h.lister();
    synced(&lister).await;
    assert!(lister.snapshot().observe("a") != Observed::Absent);
    let stats = lister.watch_stats();
    assert_eq!(stats.errors, 1);
    assert!(
        stats
            .last_error
            .unwrap()
            .contains("unable to handle the request")
    );
}
