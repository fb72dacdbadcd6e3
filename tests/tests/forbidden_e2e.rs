//! The real `tierd` binary while RBAC refuses it every create (issue 15): RBAC cannot restrict
//! `create` by name, so a 403 on one Tier's create is a 403 for every create, and one probe
//! for the whole fleet is all that is worth sending.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_tests::{Cluster, PATIENCE, Tierd, USER};
use tier_testserver::{Fault, Verb};

/// How long creates are counted from the first one.
const WINDOW: Duration = Duration::from_secs(6);

/// The most creates one probe for the fleet sends within `window` of its first: one, then one
/// per step of tierd's Forbidden backoff (1 s doubling, each step at least half its nominal
/// wait, the jitter): 0.5 + 1 + 2 s fit in 6 s, 4 s more do not.
fn fleet_probe_limit(window: Duration) -> usize {
    let mut elapsed = Duration::ZERO;
    let mut sent = 1;
    for step in 0..16 {
        elapsed += Duration::from_secs(1 << step) / 2;
        if elapsed > window {
            break;
        }
        sent += 1;
    }
    sent
}

/// An empty cluster whose RBAC refuses tierd every create, forever.
async fn refusing_creates() -> Cluster {
    let cluster = Cluster::antrea().await;
    cluster
        .server
        .inject(Fault::forbidden(Verb::Create, USER).forever());
    cluster
}

/// Waits for the first create; returns when it was seen.
async fn first_create(cluster: &Cluster) -> Instant {
    assert!(
        cluster
            .eventually(|c| c.server.requests().count(Verb::Create, None) > 0)
            .await,
        "tierd sent no create"
    );
    Instant::now()
}

#[tokio::test]
async fn refused_creates_keep_tierd_running_and_name_the_permission() {
    let cluster = refusing_creates().await;
    let mut tierd = Tierd::run(&cluster, None, &[]).await;
    first_create(&cluster).await;
    let deadline = Instant::now() + PATIENCE;
    let verbose = loop {
        let (code, body) = tierd.get("/readyz?verbose").await;
        if body.contains("may not create") || Instant::now() > deadline {
            break (code, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        verbose.1.contains(
            "tierd may not create resource \"tiers\" in API group \"crd.antrea.io\" at the \
             cluster scope"
        ),
        "{}",
        verbose.1
    );
    let (_, metrics) = tierd.get("/metrics").await;
    assert!(
        metrics.contains("tierd_tier_state{tier=\"baseline\",state=\"forbidden\"} 1"),
        "{metrics}"
    );
    assert!(
        cluster
            .eventually(|c| c.server.events().iter().any(|e| e["reason"] == "Forbidden"))
            .await,
        "{:?}",
        cluster.server.events()
    );
    assert_eq!(cluster.server.store().get("baseline"), None);
    // Still running, still serving.
    assert!(tierd.wait(Duration::from_millis(100)).await.is_none());
    assert_eq!(tierd.get("/livez").await.0, 200);

    // RBAC fixed: the next probe creates everything.
    cluster.server.clear_faults();
    assert!(
        cluster.eventually(Cluster::has_antrea_tiers).await,
        "{:?}",
        tierd.logs()
    );
}

#[tokio::test]
async fn refused_creates_are_one_probe_for_the_fleet() {
    let cluster = refusing_creates().await;
    let _tierd = Tierd::run(&cluster, None, &[]).await;
    first_create(&cluster).await;
    // The real binary runs on the wall clock: count what it sends in the window.
    tokio::time::sleep(WINDOW).await;
    let creates = cluster.server.requests().count(Verb::Create, None);
    // The first wave (one create per missing Tier, sent before the first refusal is known),
    // then one per backoff step for the whole fleet.
    let first_wave = 6; // Antrea's six, all missing

    let limit = first_wave - 1 + fleet_probe_limit(WINDOW);
    eprintln!("{creates} creates within {WINDOW:?} of the first (limit {limit})");
    assert!(
        creates <= limit,
        "{creates} creates within {WINDOW:?} of the first, more than one per backoff step for \
         the fleet ({limit})"
    );
}
