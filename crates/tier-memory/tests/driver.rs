//! The real core driver against the memory cluster, on virtual time.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tier_core::{
    DesiredSet, DriverConfig, ErrorClass, Mode, Status, Stopped, TierSpec, TierState, WriteError,
};
use tier_memory::{CacheConfig, CallOutcome, MemoryCluster, RandomFaults, SyncMode, Verb, faults};
use tier_runtime::Ensurer;
use tokio::time::{Instant, sleep, timeout};

fn antrea() -> DesiredSet {
    DesiredSet::antrea()
}

fn start(cluster: &MemoryCluster, mode: Mode) -> Ensurer {
    tier_runtime::spawn(
        cluster.clone(),
        cluster.clone(),
        antrea(),
        DriverConfig::default(),
        mode,
    )
    .unwrap()
}

/// Whether the store holds every desired Tier exactly.
fn store_converged(cluster: &MemoryCluster) -> bool {
    antrea().tiers().iter().all(|want| {
        cluster
            .get(&want.name)
            .is_some_and(|t| t.priority == want.priority && t.description == want.description)
    })
}

/// The state of the Tier `name` (`None` before the driver's first status).
fn state<'a>(status: &'a Status, name: &str) -> Option<&'a TierState> {
    status
        .tiers
        .iter()
        .find(|t| t.name == name)
        .map(|t| &t.state)
}

fn converged(status: &Status, name: &str) -> bool {
    state(status, name) == Some(&TierState::Converged)
}

/// A cluster holding the six Tiers, three of them drifted (two priorities, one description).
fn drifted() -> tier_memory::ClusterBuilder {
    let mut tiers = antrea().tiers().to_vec();
    for t in &mut tiers {
        match t.name.as_str() {
            "application" => t.priority = 240,
            "platform" => t.description = "hand edited".into(),
            "networkops" => t.priority = 151,
            _ => {}
        }
    }
    MemoryCluster::builder().with_tiers(tiers)
}

const DRIFTED: [&str; 3] = ["application", "platform", "networkops"];
const IN_SYNC: [&str; 3] = ["baseline", "securityops", "emergency"];

async fn converge_once(cluster: &MemoryCluster) {
    let run = start(cluster, Mode::Once);
    let stopped = timeout(Duration::from_secs(600), run.join()).await;
    assert_eq!(stopped, Ok(Stopped::Converged));
    assert!(store_converged(cluster), "{:#?}", cluster.tiers());
}

#[tokio::test(start_paused = true)]
async fn converges_from_empty_with_exactly_six_creates() {
    let cluster = MemoryCluster::new();
    let begin = Instant::now();
    converge_once(&cluster).await;
    assert_eq!(begin.elapsed(), Duration::ZERO);
    let calls = cluster.calls();
    assert_eq!(calls.count(Verb::Create), 6);
    assert_eq!(calls.count(Verb::Update), 0);
    assert_eq!(calls.failed(Verb::Create), 0);
    assert_eq!(calls.peak_in_flight(), 1);
    for t in antrea().tiers() {
        assert_eq!(calls.count_for(Verb::Create, &t.name), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn converges_from_empty_through_a_lagging_cache_with_exactly_six_creates() {
    let cluster = MemoryCluster::builder().lag(Duration::from_secs(2)).build();
    converge_once(&cluster).await;
    assert_eq!(cluster.calls().count(Verb::Create), 6);
    assert_eq!(cluster.calls().total(), 6);
}

#[tokio::test(start_paused = true)]
async fn drifted_tiers_get_exactly_one_update_each_and_in_sync_ones_none() {
    let cluster = drifted().build();
    converge_once(&cluster).await;
    let calls = cluster.calls();
    assert_eq!(calls.count(Verb::Create), 0);
    assert_eq!(calls.count(Verb::Update), 3);
    for name in DRIFTED {
        assert_eq!(calls.count_for(Verb::Update, name), 1, "{name}");
    }
    for name in IN_SYNC {
        assert_eq!(calls.count_for(Verb::Update, name), 0, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn drifted_tiers_get_exactly_one_update_each_through_a_lagging_cache() {
    let cluster = drifted().lag(Duration::from_secs(2)).build();
    let begin = Instant::now();
    converge_once(&cluster).await;
    assert_eq!(
        begin.elapsed(),
        Duration::from_secs(2),
        "converged when the cache showed it"
    );
    let calls = cluster.calls();
    assert_eq!(calls.total(), 3);
    for name in DRIFTED {
        assert_eq!(calls.count_for(Verb::Update, name), 1, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_cache_lagging_past_the_echo_timeout_costs_only_harmless_conflicts() {
    // The machine waits 3 s (echo_timeout) for its write to show, then decides again on what
    // the cache shows: the stale resourceVersion makes that second update a Conflict.
    let cluster = drifted().lag(Duration::from_secs(5)).build();
    let revision = cluster.revision();
    converge_once(&cluster).await;
    assert_eq!(
        cluster.revision(),
        revision + 3,
        "one effective write per drifted Tier"
    );
    let calls = cluster.calls();
    for record in calls.records() {
        assert!(
            match &record.outcome {
                CallOutcome::Ok => true,
                CallOutcome::Failed { error, applied } =>
                    error.class == ErrorClass::Stale && !applied,
                _ => false,
            },
            "{record:?}"
        );
    }
    for name in DRIFTED {
        assert_eq!(calls.count_for(Verb::Update, name), 2, "{name}");
        assert_eq!(calls.failed_for(Verb::Update, name), 1, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_squatter_blocks_networkops_only_until_it_is_deleted() {
    let cluster = MemoryCluster::builder()
        .with_tier(TierSpec::new("squatter", 150, "a user Tier"))
        .build();
    let run = start(&cluster, Mode::Continuous);
    let mut status = run.status();
    let others = [
        "baseline",
        "application",
        "platform",
        "securityops",
        "emergency",
    ];
    timeout(
        Duration::from_secs(1),
        status.wait_for(|s| others.iter().all(|n| converged(s, n))),
    )
    .await
    .unwrap()
    .unwrap();

    sleep(Duration::from_secs(5)).await;
    let current = status.current();
    let Some(TierState::Blocked { reason, .. }) = state(&current, "networkops") else {
        panic!("networkops should be blocked: {current:#?}");
    };
    assert_eq!(reason, "priority 150 is held by Tier squatter");
    assert!(cluster.get("networkops").is_none());
    assert_eq!(
        cluster.calls().count_for(Verb::Create, "networkops"),
        0,
        "no create the cache shows will be denied"
    );

    cluster.delete("squatter").unwrap();
    let deleted = Instant::now();
    timeout(
        Duration::from_secs(1),
        status.wait_for(|s| converged(s, "networkops")),
    )
    .await
    .expect("networkops converges on the first observation of the removal")
    .unwrap();
    assert_eq!(deleted.elapsed(), Duration::ZERO);
    assert_eq!(cluster.calls().count_for(Verb::Create, "networkops"), 1);
    assert_eq!(cluster.calls().count(Verb::Create), 6);
    assert_eq!(cluster.calls().failed(Verb::Create), 0);
    assert!(store_converged(&cluster));
    assert_eq!(run.shutdown().await, Stopped::Cancelled);
}

#[tokio::test(start_paused = true)]
async fn transient_faults_are_retried_no_sooner_than_retry_after() {
    let cluster = MemoryCluster::new();
    let retry_after = Duration::from_secs(5);
    cluster
        .faults()
        .fail_next(Verb::Create, 2)
        .for_name("baseline")
        .with(faults::unavailable().with_retry_after(retry_after));
    let begin = Instant::now();
    converge_once(&cluster).await;
    let calls = cluster.calls();
    let attempts: Vec<Duration> = calls
        .records()
        .iter()
        .filter(|r| r.name == "baseline")
        .map(|r| r.started - begin.into_std())
        .collect();
    assert_eq!(attempts, [Duration::ZERO, retry_after, retry_after * 2]);
    assert_eq!(calls.failed_for(Verb::Create, "baseline"), 2);
    assert_eq!(calls.count(Verb::Create), 8);
    assert_eq!(begin.elapsed(), retry_after * 2);
}

#[tokio::test(start_paused = true)]
async fn a_lost_create_response_needs_no_further_create_when_the_cache_is_current() {
    let cluster = MemoryCluster::new();
    cluster
        .faults()
        .fail_next(Verb::Create, 1)
        .for_name("platform")
        .lose_response(faults::timeout());
    converge_once(&cluster).await;
    let calls = cluster.calls();
    assert_eq!(calls.count_for(Verb::Create, "platform"), 1);
    assert_eq!(calls.count(Verb::Create), 6);
}

#[tokio::test(start_paused = true)]
async fn a_lost_create_response_costs_at_most_one_denied_retry_with_a_lagging_cache() {
    let cluster = MemoryCluster::builder().lag(Duration::from_secs(1)).build();
    cluster
        .faults()
        .fail_next(Verb::Create, 1)
        .for_name("platform")
        .lose_response(faults::timeout());
    converge_once(&cluster).await;
    let calls = cluster.calls();
    let platform: Vec<&CallOutcome> = calls
        .records()
        .iter()
        .filter(|r| r.name == "platform")
        .map(|r| &r.outcome)
        .collect();
    assert_eq!(platform.len(), 2, "{platform:#?}");
    assert!(matches!(
        platform[0],
        CallOutcome::Failed { applied: true, .. }
    ));
    let CallOutcome::Failed {
        error,
        applied: false,
    } = platform[1]
    else {
        panic!("the retry is denied: {platform:#?}");
    };
    assert_eq!(error.class, ErrorClass::Denied);
    assert_eq!(calls.count(Verb::Create), 7);
}

#[tokio::test(start_paused = true)]
async fn a_hung_call_is_cut_by_the_call_timeout_and_retried() {
    let cluster = MemoryCluster::new();
    cluster
        .faults()
        .fail_next(Verb::Create, 1)
        .for_name("emergency")
        .hang();
    let begin = Instant::now();
    converge_once(&cluster).await;
    let calls = cluster.calls();
    assert_eq!(calls.count_for(Verb::Create, "emergency"), 2);
    assert_eq!(calls.dropped(Verb::Create), 1);
    assert_eq!(calls.peak_in_flight(), 1);
    let call_timeout = <DriverConfig>::default().call_timeout;
    assert!(begin.elapsed() >= call_timeout, "{:?}", begin.elapsed());
    assert!(begin.elapsed() <= call_timeout + Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn nothing_is_written_before_the_cache_syncs() {
    // Issue 6694: every Tier exists, but the cache has not synced yet.
    let cluster = MemoryCluster::builder()
        .with_tiers(antrea().tiers().to_vec())
        .sync(SyncMode::Manual)
        .build();
    let run = start(&cluster, Mode::Once);
    sleep(Duration::from_secs(3600)).await;
    assert_eq!(cluster.calls().total(), 0);
    assert!(!run.status().current().synced);
    cluster.lister().sync();
    assert_eq!(
        timeout(Duration::from_secs(1), run.join()).await,
        Ok(Stopped::Converged)
    );
    assert_eq!(cluster.calls().total(), 0);
}

#[tokio::test(start_paused = true)]
async fn drift_after_convergence_is_corrected_with_one_update() {
    let cluster = MemoryCluster::new();
    let run = start(&cluster, Mode::Continuous);
    let mut status = run.status();
    timeout(Duration::from_secs(1), status.initialized())
        .await
        .unwrap()
        .unwrap();
    cluster.reset_calls();

    sleep(Duration::from_secs(60)).await;
    cluster.edit("platform", |t| t.priority = 201).unwrap();
    sleep(Duration::from_secs(60)).await;
    assert!(store_converged(&cluster));
    assert_eq!(cluster.calls().count_for(Verb::Update, "platform"), 1);
    assert_eq!(cluster.calls().total(), 1);

    // Deleted by someone: recreated once.
    cluster.delete("emergency").unwrap();
    sleep(Duration::from_secs(60)).await;
    assert_eq!(cluster.get("emergency").map(|t| t.priority), Some(50));
    assert_eq!(cluster.calls().total(), 2);
    run.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn writes_wait_for_the_webhook_to_become_reachable() {
    let cluster = MemoryCluster::new();
    cluster.set_webhook_reachable(false);
    let run = start(&cluster, Mode::Once);
    sleep(Duration::from_secs(20)).await;
    assert!(cluster.tiers().is_empty());
    // Six creates fail at once; then one Tier at a time probes the server, on the fleet's
    // backoff (at most 8 in 20 s), and each other Tier whose own retry is due retries once
    // the outage has held it for `OUTAGE_RELEASE` (10 s): at most once more each.
    let failed = cluster.calls().failed(Verb::Create);
    assert!((6..=6 + 8 + 5).contains(&failed), "{failed}");
    cluster.set_webhook_reachable(true);
    let reachable = Instant::now();
    assert_eq!(
        timeout(Duration::from_secs(30), run.join()).await,
        Ok(Stopped::Converged)
    );
    // The backoff is capped at 10 s.
    assert!(reachable.elapsed() <= Duration::from_secs(10));
    assert!(store_converged(&cluster));
}

/// Three initializers, each with its own cache and writer, on one cluster.
async fn three_initializers(seed: u64) -> (MemoryCluster, Vec<(String, Verb, CallOutcome)>) {
    let cluster = MemoryCluster::new();
    cluster.faults().random(
        RandomFaults::new(seed)
            .failing(0.2)
            .losing_responses(0.1)
            .latency(Duration::from_millis(300))
            .retry_after(Duration::from_secs(1)),
    );
    let runs: Vec<Ensurer> = (0..3u64)
        .map(|i| {
            let cache = cluster.cache(
                CacheConfig::default()
                    .sync(SyncMode::After(Duration::from_millis(100 * i)))
                    .lag(Duration::from_millis(400 * i)),
            );
            let writer = cluster.writer(&format!("init-{i}"));
            let config = DriverConfig {
                seed: Some(seed ^ i),
                ..DriverConfig::default()
            };
            tier_runtime::spawn(cache, writer, antrea(), config, Mode::Once).unwrap()
        })
        .collect();
    for run in runs {
        let stopped = timeout(Duration::from_secs(600), run.join()).await;
        assert_eq!(stopped, Ok(Stopped::Converged));
    }
    let log = cluster
        .calls()
        .records()
        .iter()
        .map(|r| (r.client.clone(), r.verb, r.outcome.clone()))
        .collect();
    (cluster, log)
}

#[tokio::test(start_paused = true)]
async fn three_initializers_with_random_faults_converge_without_overlapping_calls() {
    let (cluster, log) = three_initializers(11).await;
    assert!(store_converged(&cluster));
    assert_eq!(cluster.tiers().len(), 6);
    let calls = cluster.calls();
    for i in 0..3 {
        let mine = calls.for_client(&format!("init-{i}"));
        assert_eq!(mine.peak_in_flight(), 1, "init-{i}");
    }
    let applied = |o: &CallOutcome| {
        matches!(
            o,
            CallOutcome::Ok | CallOutcome::Failed { applied: true, .. }
        )
    };
    let creates = log
        .iter()
        .filter(|(_, verb, o)| *verb == Verb::Create && applied(o))
        .count();
    assert_eq!(creates, 6, "each Tier was created exactly once");
    assert!(
        log.iter()
            .any(|(_, _, o)| matches!(o, CallOutcome::Failed { .. }))
    );
}

#[tokio::test(start_paused = true)]
async fn a_seeded_run_replays_identically() {
    let (_, a) = three_initializers(5).await;
    let (_, b) = three_initializers(5).await;
    assert_eq!(a, b);
}

#[tokio::test(start_paused = true)]
async fn a_forbidden_tier_waits_for_its_own_backoff_not_for_tier_changes() {
    let cluster = MemoryCluster::new();
    cluster
        .faults()
        .fail_next(Verb::Create, 1)
        .for_name("securityops")
        .with(WriteError::forbidden(
            "tiers.crd.antrea.io is forbidden",
            Some("create resource \"tiers\"".into()),
        ));
    let begin = Instant::now();
    converge_once(&cluster).await;
    // Other Tiers' creates change the observed set; that must not wake it: a permission is not
    // granted by a Tier change. The first forbidden backoff is 0.5 s to 1 s.
    let elapsed = begin.elapsed();
    assert!(
        elapsed >= Duration::from_millis(500) && elapsed <= Duration::from_secs(1),
        "{elapsed:?}"
    );
    assert_eq!(cluster.calls().count_for(Verb::Create, "securityops"), 2);
}

#[tokio::test(start_paused = true)]
async fn a_lagging_webhook_costs_a_short_backoff_not_the_slow_timer() {
    // networkops sits at platform's priority and platform is missing; the webhook reads a
    // cache 1 s behind tierd's.
    let mut tiers = antrea().tiers().to_vec();
    tiers.retain(|t| t.name != "platform");
    for t in &mut tiers {
        if t.name == "networkops" {
            t.priority = 200;
        }
    }
    let cluster = MemoryCluster::builder()
        .with_tiers(tiers)
        .lag(Duration::from_secs(1))
        .admission(tier_memory::Admission::antrea().reading(tier_memory::AdmissionView::Cache))
        .build();
    let own = cluster.cache(CacheConfig::default());
    let run = tier_runtime::spawn(
        own,
        cluster.clone(),
        antrea(),
        DriverConfig {
            seed: Some(7),
            ..DriverConfig::default()
        },
        Mode::Once,
    )
    .unwrap();
    let begin = Instant::now();
    assert_eq!(run.join().await, Stopped::Converged);
    let elapsed = begin.elapsed();
    // The denied backoff (400 ms doubling to 1 s) retries within the lag; every write spends
    // from the Tier's budget (a burst of 3), so when the third denial still falls inside the
    // lag the fourth waits for a 1 s hold: never the slow timer.
    assert!(
        elapsed < Duration::from_secs(3),
        "converged after {elapsed:?}: {:#?}",
        cluster.calls().records()
    );
    assert!(store_converged(&cluster));
}

#[tokio::test(start_paused = true)]
async fn a_tier_someone_keeps_changing_back_is_corrected_ever_more_slowly() {
    let cluster = MemoryCluster::builder()
        .lag(Duration::from_millis(200))
        .build();
    let run = start(&cluster, Mode::Continuous);
    let fighter = tokio::spawn({
        let cluster = cluster.clone();
        async move {
            loop {
                sleep(Duration::from_millis(100)).await;
                if cluster.get("platform").is_some_and(|t| t.priority == 200) {
                    let _ = cluster.edit("platform", |t| t.priority = 201);
                }
            }
        }
    });
    sleep(Duration::from_secs(300)).await;
    fighter.abort();
    let updates = cluster.calls().count_for(Verb::Update, "platform");
    // Corrections back off up to one a minute: 3 quick ones, then 1, 2, 4... 60 s apart.
    assert!((8..=12).contains(&updates), "{updates}");
    let status = run.status().current();
    let platform = status.tiers.iter().find(|t| t.name == "platform").unwrap();
    assert!(platform.contested, "{platform:#?}");
    assert_eq!(
        cluster.calls().total(),
        6 + updates,
        "the other Tiers are left alone"
    );
    run.shutdown().await;
}
