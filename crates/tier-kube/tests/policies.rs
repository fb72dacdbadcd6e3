//! The policy caches through real HTTP: listing (paged, every namespace), watch events, and a
//! CRD that is not installed (synced and empty, picked up once installed).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{PATIENCE, start};
use kube::runtime::watcher;
use tier_core::admission::ReferenceIndex;
use tier_kube::policies::{
    CacheState, ClusterNetworkPolicies, NetworkPolicies, PolicyCache, PolicyKind,
};
use tier_testserver::policies::policy;
use tier_testserver::{PolicyResource, ServerConfig};

const ACNP: PolicyResource = PolicyResource::ClusterNetworkPolicies;
const ANNP: PolicyResource = PolicyResource::NetworkPolicies;

/// A retry pace short enough for a test to see a CRD installed later.
struct Every(Duration);

impl Iterator for Every {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.0)
    }
}

impl kube::runtime::utils::Backoff for Every {
    fn reset(&mut self) {}
}

fn cache<K: PolicyKind>(client: &kube::Client, page: u32) -> PolicyCache<K> {
    PolicyCache::start_with(
        client.clone(),
        watcher::Config::default().page_size(page),
        Every(Duration::from_millis(50)),
    )
    .unwrap()
}

/// Waits (bounded) until `pred` holds, waking on every change of the cache.
async fn until<K: PolicyKind>(cache: &PolicyCache<K>, pred: impl Fn(&PolicyCache<K>) -> bool) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let seen = cache.version();
            if pred(cache) {
                return;
            }
            cache.changed(seen).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the cache never got there: {cache:?}"));
}

#[tokio::test]
async fn indexes_every_namespace_by_raw_tier_and_follows_the_watch() {
    let h = start(ServerConfig::default()).await;
    let policies = h.server.store().policies();
    for (ns, name, tier) in [
        ("a", "p1", "mine"),
        ("b", "p1", "mine"),
        ("b", "p2", "Mine"),
        ("c", "p3", "theirs"),
        ("c", "p4", "mine"),
    ] {
        policies
            .create(ANNP, policy(ANNP, Some(ns), name, tier))
            .unwrap();
    }
    policies
        .create(ACNP, policy(ACNP, None, "c1", "mine"))
        .unwrap();
    // Pages of two: the watcher follows `continue` tokens.
    let annps = cache::<NetworkPolicies>(&h.client, 2);
    let acnps = cache::<ClusterNetworkPolicies>(&h.client, 2);
    assert_eq!(annps.references("mine"), None, "not synced yet");
    tokio::time::timeout(PATIENCE, annps.wait_synced())
        .await
        .unwrap();
    tokio::time::timeout(PATIENCE, acnps.wait_synced())
        .await
        .unwrap();
    assert_eq!(annps.state(), CacheState::Synced);
    assert_eq!(annps.len(), 5);
    assert_eq!(annps.references("mine"), Some(3));
    assert_eq!(annps.references("Mine"), Some(1));
    assert_eq!(annps.references("theirs"), Some(1));
    assert_eq!(acnps.references("mine"), Some(1));

    policies.delete(ANNP, Some("a"), "p1").unwrap();
    policies
        .create(ACNP, policy(ACNP, None, "c2", "theirs"))
        .unwrap();
    until(&annps, |c| c.references("mine") == Some(2)).await;
    until(&acnps, |c| c.references("theirs") == Some(1)).await;
}

#[tokio::test]
async fn a_missing_crd_is_synced_and_empty_until_it_is_installed() {
    let h = start(ServerConfig::default()).await;
    let policies = h.server.store().policies();
    policies.uninstall(ACNP);
    let acnps = cache::<ClusterNetworkPolicies>(&h.client, 500);
    tokio::time::timeout(PATIENCE, acnps.wait_synced())
        .await
        .unwrap();
    assert_eq!(acnps.state(), CacheState::NotInstalled);
    assert_eq!(acnps.references("mine"), Some(0));
    assert!(acnps.describe().unwrap().unwrap().contains("not installed"));

    // Installed later: the watch keeps retrying and picks it up.
    policies.install(ACNP);
    policies
        .create(ACNP, policy(ACNP, None, "c1", "mine"))
        .unwrap();
    until(&acnps, |c| c.references("mine") == Some(1)).await;
    assert_eq!(acnps.state(), CacheState::Synced);
}

#[tokio::test]
async fn any_other_error_leaves_it_unsynced_with_the_reason() {
    // A client without credentials: every list is 401.
    let h = start(ServerConfig::default()).await;
    let config = kube::Config::new(h.server.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let annps = cache::<NetworkPolicies>(&client, 500);
    until(&annps, |c| {
        matches!(c.state(), CacheState::Unsynced(Some(_)))
    })
    .await;
    assert_eq!(annps.references("x"), None);
    let reason = annps.describe().unwrap_err();
    assert!(reason.contains("last error"), "{reason}");
}
