//! The driver against a mocked writer (exact call counts) and a fake cache, on virtual time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::{FakeCache, TestClock, antrea, description};
use tier_core::TierLister as _;
use tier_core::{
    DesiredSet, Driver, DriverConfig, MockTierWriter, Mode, Stopped, TierState, WriteError,
};
use tokio::time::{Instant, sleep, timeout};

fn driver(
    cache: &FakeCache,
    writer: MockTierWriter,
    desired: DesiredSet,
) -> Driver<FakeCache, MockTierWriter, TestClock> {
    Driver::new(
        cache.clone(),
        writer,
        TestClock,
        desired,
        DriverConfig::default(),
    )
    .unwrap()
}

/// Runs `driver` in `Once` mode, failing the test if it takes over an hour of virtual time.
async fn run_once(driver: Driver<FakeCache, MockTierWriter, TestClock>) -> Stopped {
    timeout(
        Duration::from_secs(3600),
        driver.run(Mode::Once, std::future::pending()),
    )
    .await
    .expect("did not converge within an hour of virtual time")
}

fn unavailable() -> WriteError {
    WriteError::transient("the server is currently unable to handle the request")
}

#[tokio::test(start_paused = true)]
async fn create_succeeds_with_one_create() {
    let cache = FakeCache::synced(&[]);
    let mut writer = MockTierWriter::new();
    let c = cache.clone();
    writer.expect_create().times(1).returning(move |t| {
        c.apply(t);
        Ok(())
    });
    writer.expect_update().never();
    assert_eq!(
        run_once(driver(&cache, writer, antrea(&["baseline"]))).await,
        Stopped::Converged
    );
}

#[tokio::test(start_paused = true)]
async fn all_six_from_empty_with_six_creates() {
    let cache = FakeCache::synced(&[]);
    let mut writer = MockTierWriter::new();
    let c = cache.clone();
    writer.expect_create().times(6).returning(move |t| {
        c.apply(t);
        Ok(())
    });
    writer.expect_update().never();
    let start = Instant::now();
    assert_eq!(
        run_once(driver(&cache, writer, DesiredSet::antrea())).await,
        Stopped::Converged
    );
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "no wait in a fault-free run"
    );
}

#[tokio::test(start_paused = true)]
async fn create_fails_503_once_then_two_creates() {
    let cache = FakeCache::synced(&[]);
    let mut writer = MockTierWriter::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let (c, n) = (cache.clone(), calls.clone());
    writer.expect_create().times(2).returning(move |t| {
        if n.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(unavailable());
        }
        c.apply(t);
        Ok(())
    });
    writer.expect_update().never();
    let start = Instant::now();
    run_once(driver(&cache, writer, antrea(&["baseline"]))).await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(125) && waited <= Duration::from_millis(250),
        "first retry waits within the jittered first backoff step, waited {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn update_succeeds_with_one_update_on_the_observed_version() {
    let cache = FakeCache::synced(&[("baseline", 100, "old")]);
    let rv = cache.rv("baseline");
    let mut writer = MockTierWriter::new();
    let c = cache.clone();
    writer.expect_create().never();
    writer
        .expect_update()
        .withf(move |t, v| t.priority == 253 && t.description == description("baseline") && v == rv)
        .times(1)
        .returning(move |t, _| {
            c.apply(t);
            Ok(())
        });
    run_once(driver(&cache, writer, antrea(&["baseline"]))).await;
}

#[tokio::test(start_paused = true)]
async fn description_drift_alone_is_corrected() {
    let cache = FakeCache::synced(&[("baseline", 253, "")]);
    let mut writer = MockTierWriter::new();
    let c = cache.clone();
    writer.expect_create().never();
    writer.expect_update().times(1).returning(move |t, _| {
        c.apply(t);
        Ok(())
    });
    run_once(driver(&cache, writer, antrea(&["baseline"]))).await;
}

#[tokio::test(start_paused = true)]
async fn update_fails_503_once_then_two_updates() {
    let cache = FakeCache::synced(&[("baseline", 100, "")]);
    let mut writer = MockTierWriter::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let (c, n) = (cache.clone(), calls.clone());
    writer.expect_create().never();
    writer.expect_update().times(2).returning(move |t, _| {
        if n.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(unavailable().with_retry_after(Duration::from_secs(2)));
        }
        c.apply(t);
        Ok(())
    });
    let start = Instant::now();
    run_once(driver(&cache, writer, antrea(&["baseline"]))).await;
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "Retry-After is a lower bound"
    );
}

#[tokio::test(start_paused = true)]
async fn already_in_sync_writes_nothing() {
    let antrea = DesiredSet::antrea();
    let rows: Vec<(&str, i64, &str)> = antrea
        .tiers()
        .iter()
        .map(|t| (t.name.as_str(), t.priority, t.description.as_str()))
        .collect();
    let cache = FakeCache::synced(&rows);
    let mut writer = MockTierWriter::new();
    writer.expect_create().never();
    writer.expect_update().never();
    let driver = driver(&cache, writer, DesiredSet::antrea());
    let status = driver.status();
    assert_eq!(run_once(driver).await, Stopped::Converged);
    let status = status.current();
    assert!(status.initialized && status.all_converged() && status.stopped);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_written_before_the_cache_syncs() {
    let cache = FakeCache::unsynced();
    let mut writer = MockTierWriter::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let (c, n) = (cache.clone(), calls.clone());
    writer.expect_create().times(1).returning(move |t| {
        n.fetch_add(1, Ordering::SeqCst);
        c.apply(t);
        Ok(())
    });
    let driver = driver(&cache, writer, antrea(&["baseline"]));
    let mut status = driver.status();
    let task = tokio::spawn(driver.run(Mode::Once, std::future::pending()));
    sleep(Duration::from_secs(600)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(!status.current().synced);
    assert_eq!(status.current().tiers[0].state, TierState::Pending);
    cache.sync();
    status.initialized().await.unwrap();
    assert_eq!(task.await.unwrap(), Stopped::Converged);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn lost_create_response_then_already_exists_converges_without_a_third_call() {
    let cache = FakeCache::synced(&[]);
    let mut writer = MockTierWriter::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let (c, n) = (cache.clone(), calls.clone());
    writer.expect_create().times(2).returning(move |t| {
        if n.fetch_add(1, Ordering::SeqCst) == 0 {
            // The server stored the Tier, the response is lost, and the cache lags.
            let (c, t) = (c.clone(), t.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                c.apply(&t);
            });
            return Err(WriteError::transient("connection reset by peer"));
        }
        Err(WriteError::stale(
            r#"tiers.crd.antrea.io "baseline" already exists"#,
        ))
    });
    writer.expect_update().never();
    run_once(driver(&cache, writer, antrea(&["baseline"]))).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn overlap_denial_while_the_tier_turns_up_converges_without_more_creates() {
    // The cache has not caught up with a Tier that exists: the webhook denies the create, the
    // Tier it overlaps being the desired one itself. That is no block: a short-backoff retry at
    // most, and the observation of the Tier settles it.
    let cache = FakeCache::synced(&[]);
    let mut writer = MockTierWriter::new();
    let c = cache.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let n = calls.clone();
    writer.expect_create().times(1..=2).returning(move |t| {
        if n.fetch_add(1, Ordering::SeqCst) == 0 {
            let (c, t) = (c.clone(), t.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                c.apply(&t);
            });
        }
        Err(WriteError::denied(
            "admission webhook \"tiervalidator.antrea.io\" denied the request: tier baseline priority 253 overlaps with existing Tier",
        ))
    });
    writer.expect_update().never();
    let mut driver = driver(&cache, writer, antrea(&["baseline"]));
    let mut events = driver.events();
    let start = Instant::now();
    run_once(driver).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(300),
        "converges as soon as the cache shows the Tier"
    );
    while let Ok(event) = events.try_recv() {
        assert!(!event.is_warning(), "a false alarm: {event:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn conflict_on_update_updates_again_with_the_new_resource_version() {
    let cache = FakeCache::synced(&[("baseline", 100, "")]);
    let first = cache.rv("baseline");
    let mut writer = MockTierWriter::new();
    let c = cache.clone();
    let stale = first.clone();
    writer
        .expect_update()
        .withf(move |_, v| v == stale)
        .times(1)
        .returning(move |_, _| {
            // Someone else wrote in between; the cache shows it.
            c.put("baseline", 100, "edited");
            Err(WriteError::stale(
                "Operation cannot be fulfilled on tiers.crd.antrea.io \"baseline\": the object has been modified",
            ))
        });
    let c = cache.clone();
    writer
        .expect_update()
        .withf(move |_, v| v != first)
        .times(1)
        .returning(move |t, _| {
            c.apply(t);
            Ok(())
        });
    writer.expect_create().never();
    let start = Instant::now();
    run_once(driver(&cache, writer, antrea(&["baseline"]))).await;
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "stale errors retry without backoff"
    );
}

/// Six Tiers; `squat` holds networkops' priority, so creating networkops is denied until it goes.
fn squatted() -> (FakeCache, MockTierWriter, Arc<AtomicUsize>) {
    let cache = FakeCache::synced(&[("squat", 150, "")]);
    let mut writer = MockTierWriter::new();
    let denials = Arc::new(AtomicUsize::new(0));
    let (c, d) = (cache.clone(), denials.clone());
    writer.expect_create().returning(move |t| {
        let squatted = c.snapshot().observe("squat") != tier_core::Observed::Absent;
        if t.name == "networkops" && squatted {
            d.fetch_add(1, Ordering::SeqCst);
            return Err(WriteError::denied(
                "admission webhook \"tiervalidator.antrea.io\" denied the request: tier networkops priority 150 overlaps with existing Tier",
            ));
        }
        c.apply(t);
        Ok(())
    });
    writer.expect_update().never();
    (cache, writer, denials)
}

#[tokio::test(start_paused = true)]
async fn a_blocked_tier_does_not_delay_the_other_five() {
    let (cache, writer, _) = squatted();
    let driver = driver(&cache, writer, DesiredSet::antrea());
    let mut status = driver.status();
    let task = tokio::spawn(driver.run(Mode::Continuous, std::future::pending()));
    let start = Instant::now();
    status
        .wait_for(|s| {
            s.tiers
                .iter()
                .filter(|t| t.state == TierState::Converged)
                .count()
                == 5
        })
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    let now = status.current();
    let networkops = now.tiers.iter().find(|t| t.name == "networkops").unwrap();
    match &networkops.state {
        TierState::Blocked {
            blockers, reason, ..
        } => {
            assert_eq!(blockers, &["squat"]);
            assert_eq!(reason, "priority 150 is held by Tier squat");
        }
        other => panic!("networkops should be blocked, is {other:?}"),
    }
    assert_eq!(now.blocked().count(), 1);
    assert!(!now.initialized);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_squatter_gets_no_doomed_create_while_the_set_churns_and_unblocks_at_once() {
    let (cache, writer, denials) = squatted();
    let driver = driver(&cache, writer, DesiredSet::antrea());
    let mut status = driver.status();
    let task = tokio::spawn(driver.run(Mode::Continuous, std::future::pending()));
    // Another controller touches an unrelated Tier every 100 ms for 4 s.
    for i in 0..40 {
        cache.put("unrelated", 7, &format!("touch {i}"));
        sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        denials.load(Ordering::SeqCst),
        0,
        "the cache showed the squatter: no create may be sent"
    );
    let now = status.current();
    let networkops = now.tiers.iter().find(|t| t.name == "networkops").unwrap();
    assert_eq!(
        networkops.to_string(),
        "networkops blocked: priority 150 is held by Tier squat"
    );
    cache.delete("squat");
    let removed = Instant::now();
    status.initialized().await.unwrap();
    assert_eq!(
        removed.elapsed(),
        Duration::ZERO,
        "converged on the first observation of the removal"
    );
    assert_eq!(denials.load(Ordering::SeqCst), 0);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn cancellation_during_a_backoff_returns_at_once_with_no_further_write() {
    let cache = FakeCache::synced(&[]);
    let mut writer = MockTierWriter::new();
    writer
        .expect_create()
        .times(1)
        .returning(|_| Err(unavailable().with_retry_after(Duration::from_secs(8))));
    let driver = driver(&cache, writer, antrea(&["baseline"]));
    let (cancel, shutdown) = shutdown_signal();
    let run = tokio::spawn(driver.run(Mode::Continuous, shutdown));
    sleep(Duration::from_secs(1)).await;
    let fired = Instant::now();
    cancel.send(()).unwrap();
    assert_eq!(run.await.unwrap(), Stopped::Cancelled);
    assert_eq!(fired.elapsed(), Duration::ZERO);
    // Letting the former backoff expire changes nothing: the mock allows one create only.
    sleep(Duration::from_secs(60)).await;
}

/// A shutdown signal and the future that resolves when it is sent.
fn shutdown_signal() -> (
    tokio::sync::oneshot::Sender<()>,
    impl std::future::Future<Output = ()> + Send,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    (tx, async move {
        let _ = rx.await;
    })
}

#[tokio::test(start_paused = true)]
async fn continuous_mode_corrects_drift_with_one_update() {
    let cache = FakeCache::synced(&[]);
    let mut writer = MockTierWriter::new();
    let c = cache.clone();
    writer.expect_create().times(1).returning(move |t| {
        c.apply(t);
        Ok(())
    });
    let c = cache.clone();
    writer.expect_update().times(1).returning(move |t, _| {
        c.apply(t);
        Ok(())
    });
    let driver = driver(&cache, writer, antrea(&["baseline"]));
    let mut status = driver.status();
    let task = tokio::spawn(driver.run(Mode::Continuous, std::future::pending()));
    status.initialized().await.unwrap();
    sleep(Duration::from_secs(30)).await;
    cache.put("baseline", 253, "someone edited this");
    status
        .wait_for(|s| s.all_converged() && s.tiers[0].corrections == 1)
        .await
        .unwrap();
    sleep(Duration::from_secs(30)).await;
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_contest_backs_off_and_is_reported() {
    // Another writer puts priority 100 back every time we correct it.
    let cache = FakeCache::synced(&[("baseline", 100, "")]);
    let mut writer = MockTierWriter::new();
    let updates = Arc::new(AtomicUsize::new(0));
    let (c, n) = (cache.clone(), updates.clone());
    writer.expect_update().returning(move |t, _| {
        n.fetch_add(1, Ordering::SeqCst);
        c.apply(t);
        let c = c.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            c.put("baseline", 100, "");
        });
        Ok(())
    });
    writer.expect_create().never();
    let driver = driver(&cache, writer, antrea(&["baseline"]));
    let mut status = driver.status();
    let task = tokio::spawn(driver.run(Mode::Continuous, std::future::pending()));
    status
        .wait_for(|s| {
            s.tiers
                .first()
                .is_some_and(|t| matches!(t.state, TierState::Contested { .. }))
        })
        .await
        .unwrap();
    assert!(status.current().tiers[0].contested);
    sleep(Duration::from_secs(600)).await;
    let n = updates.load(Ordering::SeqCst);
    // Without backing off this would be ~60,000 writes; with three free corrections, then
    // hold-offs of 1 s doubling to 60 s, it is about 18.
    assert!(
        (10..=20).contains(&n),
        "updates in 10 minutes of fighting: {n}"
    );
    task.abort();
}

/// The instants at which a driver with the default configuration retries a create answered
/// 503 (no Retry-After), for 30 s of virtual time.
async fn retry_offsets() -> Vec<Duration> {
    let cache = FakeCache::synced(&[]);
    let mut writer = MockTierWriter::new();
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let start = Instant::now();
    let log = calls.clone();
    writer.expect_create().returning(move |_| {
        log.lock().unwrap().push(start.elapsed());
        Err(unavailable())
    });
    let task = tokio::spawn(
        driver(&cache, writer, antrea(&["baseline"])).run(Mode::Continuous, std::future::pending()),
    );
    sleep(Duration::from_secs(30)).await;
    task.abort();
    calls.lock().unwrap().clone()
}

#[tokio::test(start_paused = true)]
async fn replicas_with_the_default_config_do_not_retry_in_lockstep() {
    assert_eq!(<DriverConfig>::default().seed, None);
    let one = retry_offsets().await;
    let two = retry_offsets().await;
    assert!(one.len() > 3, "{one:?}");
    assert_ne!(one, two, "two replicas retried at identical offsets");
}

#[tokio::test(start_paused = true)]
async fn no_event_is_lost_between_two_status_reads() {
    // networkops is blocked, then unblocked and created, between two reads of the status.
    let (cache, writer, _) = squatted();
    let mut driver = driver(&cache, writer, DesiredSet::antrea());
    let mut events = driver.events();
    let status = driver.status();
    let before = status.current();
    let task = tokio::spawn(driver.run(Mode::Continuous, std::future::pending()));
    sleep(Duration::from_millis(10)).await;
    cache.delete("squat");
    sleep(Duration::from_millis(10)).await;
    let after = status.current();
    assert!(
        !before
            .tiers
            .iter()
            .any(|t| matches!(t.state, TierState::Blocked { .. }))
    );
    assert!(after.all_converged());
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    let networkops: Vec<&tier_core::TierEvent> =
        seen.iter().filter(|e| e.tier() == "networkops").collect();
    assert!(
        matches!(
            networkops.as_slice(),
            [
                tier_core::TierEvent::Blocked { .. },
                tier_core::TierEvent::Created { .. }
            ]
        ),
        "{seen:?}"
    );
    assert_eq!(seen.len(), 7, "six creates and one block: {seen:?}");
    task.abort();
}
