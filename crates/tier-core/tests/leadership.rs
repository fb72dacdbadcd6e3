//! Leadership as an input: the "may write" gate, stepped by hand on the fleet and through the
//! driver on virtual time. A standby observes, keeps its states and its timers, and starts no
//! write; a write that was due goes once the gate opens.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::{FakeCache, TestClock, antrea};
use tier_core::TierLister as _;
use tier_core::{
    DesiredSet, Driver, DriverConfig, Fleet, FleetConfig, MockTierWriter, Mode, ObservedTier,
    Snapshot, Status, Stopped, TierState, WriteError,
};
use tokio::sync::watch;

fn observed(name: &str, priority: i64, description: &str, rv: &str) -> ObservedTier {
    ObservedTier {
        name: name.into(),
        priority,
        description: description.into(),
        resource_version: rv.into(),
        last_writer: None,
    }
}

fn fleet(now: Instant) -> Fleet {
    Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), now).unwrap()
}

fn drain(fleet: &mut Fleet, now: Instant) -> Vec<String> {
    let mut names = Vec::new();
    while let Some((_, action)) = fleet.poll_action(now) {
        names.push(action.tier().name.clone());
    }
    names
}

#[test]
fn a_standby_fleet_polls_no_action_and_a_due_write_goes_once_it_leads() {
    let t0 = Instant::now();
    let mut fleet = fleet(t0);
    fleet.handle_leadership(false, t0);
    assert!(!fleet.may_write());
    fleet.handle_snapshot(&Snapshot::synced(1, []), t0);
    assert_eq!(drain(&mut fleet, t0), Vec::<String>::new());
    let status = fleet.status();
    assert!(status.standby, "the status says standby");
    assert!(status.synced, "the cache is kept");
    assert!(
        status.tiers.iter().all(|t| t.state == TierState::Pending),
        "{status:?}"
    );
    // An hour on standby: still nothing, and no timer wakes the driver for nothing.
    let later = t0 + Duration::from_secs(3600);
    fleet.handle_timeout(later);
    assert_eq!(drain(&mut fleet, later), Vec::<String>::new());
    assert!(fleet.poll_timeout().is_none_or(|at| at > later));

    fleet.handle_leadership(true, later);
    assert!(!fleet.status().standby);
    let mut created = drain(&mut fleet, later);
    created.sort();
    let mut all: Vec<String> = DesiredSet::antrea()
        .tiers()
        .iter()
        .map(|t| t.name.clone())
        .collect();
    all.sort();
    assert_eq!(created, all, "every pending create goes at once");
}

#[test]
fn a_standby_converges_on_what_the_leader_writes() {
    let t0 = Instant::now();
    let mut fleet = fleet(t0);
    fleet.handle_leadership(false, t0);
    fleet.handle_snapshot(&Snapshot::synced(1, []), t0);
    let written: Vec<ObservedTier> = DesiredSet::antrea()
        .tiers()
        .iter()
        .enumerate()
        .map(|(i, t)| observed(&t.name, t.priority, &t.description, &(i + 2).to_string()))
        .collect();
    fleet.handle_snapshot(&Snapshot::synced(2, written), t0);
    assert!(fleet.is_converged());
    let status = fleet.status();
    assert!(status.initialized, "initialized latches on a standby too");
    assert!(status.standby);
    assert_eq!(drain(&mut fleet, t0), Vec::<String>::new());
}

#[test]
fn losing_the_lead_stops_new_writes_and_keeps_the_call_in_flight() {
    let t0 = Instant::now();
    let mut fleet = fleet(t0);
    fleet.handle_snapshot(&Snapshot::synced(1, []), t0);
    let (first, _) = fleet.poll_action(t0).unwrap();
    fleet.handle_leadership(false, t0);
    assert_eq!(drain(&mut fleet, t0), Vec::<String>::new(), "no new write");
    assert!(
        fleet.machines()[first].is_in_flight(),
        "the call is not forgotten"
    );
    // Its outcome is still taken: a transient failure waits on the Tier's own backoff.
    let t1 = t0 + Duration::from_millis(10);
    fleet.handle_outcome(first, Err(WriteError::transient("timeout")), t1);
    assert!(!fleet.machines()[first].is_in_flight());
    assert!(matches!(
        fleet.status().tiers[first].state,
        TierState::Retrying { .. }
    ));
    // On standby the outage hold's probe step and release do not wake anybody.
    let far = t1 + Duration::from_secs(600);
    fleet.handle_timeout(far);
    assert!(fleet.poll_timeout().is_none_or(|at| at > far));
    assert_eq!(drain(&mut fleet, far), Vec::<String>::new());
    fleet.handle_leadership(true, far);
    assert!(
        !drain(&mut fleet, far).is_empty(),
        "the writes resume once it leads"
    );
}

#[test]
fn the_gate_is_idempotent() {
    let t0 = Instant::now();
    let mut fleet = fleet(t0);
    fleet.handle_leadership(true, t0);
    fleet.handle_snapshot(&Snapshot::synced(1, []), t0);
    assert_eq!(drain(&mut fleet, t0).len(), 6);
    fleet.handle_leadership(true, t0);
    assert_eq!(drain(&mut fleet, t0).len(), 0, "no call twice");
}

fn counting_writer(cache: &FakeCache, calls: &Arc<AtomicUsize>) -> MockTierWriter {
    let mut writer = MockTierWriter::new();
    let (c, n) = (cache.clone(), calls.clone());
    writer.expect_create().returning(move |t| {
        n.fetch_add(1, Ordering::SeqCst);
        c.apply(t);
        Ok(())
    });
    writer.expect_update().never();
    writer
}

fn gated(
    cache: &FakeCache,
    writer: MockTierWriter,
    gate: watch::Receiver<bool>,
) -> Driver<FakeCache, MockTierWriter, TestClock> {
    let mut driver = Driver::new(
        cache.clone(),
        writer,
        TestClock,
        DesiredSet::antrea(),
        DriverConfig::default(),
    )
    .unwrap();
    driver.leadership(gate);
    driver
}

#[tokio::test(start_paused = true)]
async fn the_driver_writes_nothing_on_standby_then_six_creates_once_it_leads() {
    let cache = FakeCache::synced(&[]);
    let calls = Arc::new(AtomicUsize::new(0));
    let (lead, gate) = watch::channel(false);
    let driver = gated(&cache, counting_writer(&cache, &calls), gate);
    let mut status = driver.status();
    let run = tokio::spawn(driver.run(Mode::Once, std::future::pending()));
    status.wait_for(|s| s.synced && s.standby).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0, "a standby writes nothing");
    let start = tokio::time::Instant::now();
    lead.send_replace(true);
    assert_eq!(run.await.unwrap(), Stopped::Converged);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        6,
        "exactly one create per Tier"
    );
    assert_eq!(start.elapsed(), Duration::ZERO, "at once");
    assert!(!status.current().standby);
}

#[tokio::test(start_paused = true)]
async fn a_closed_gate_permits_no_write() {
    let cache = FakeCache::synced(&[]);
    let calls = Arc::new(AtomicUsize::new(0));
    let (lead, gate) = watch::channel(true);
    let driver = gated(&cache, counting_writer(&cache, &calls), gate);
    let status = driver.status();
    // The elector's end goes away before the cache synced: from then on no write.
    drop(lead);
    let run = tokio::spawn(driver.run(Mode::Continuous, std::future::pending()));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(status.current().standby);
    run.abort();
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_loses_the_lead_corrects_no_drift_until_it_leads_again() {
    let cache = FakeCache::synced(&[]);
    let calls = Arc::new(AtomicUsize::new(0));
    let (lead, gate) = watch::channel(true);
    let mut writer = MockTierWriter::new();
    let (c, n) = (cache.clone(), calls.clone());
    writer.expect_create().returning(move |t| {
        n.fetch_add(1, Ordering::SeqCst);
        c.apply(t);
        Ok(())
    });
    let (c, n) = (cache.clone(), calls.clone());
    writer.expect_update().returning(move |t, _| {
        n.fetch_add(1, Ordering::SeqCst);
        c.apply(t);
        Ok(())
    });
    let mut driver = Driver::new(
        cache.clone(),
        writer,
        TestClock,
        antrea(&["baseline"]),
        DriverConfig::default(),
    )
    .unwrap();
    driver.leadership(gate);
    let mut status = driver.status();
    let run = tokio::spawn(driver.run(Mode::Continuous, std::future::pending()));
    status.wait_for(Status::all_converged).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    lead.send_replace(false);
    status.wait_for(|s| s.standby).await.unwrap();
    cache.put("baseline", 100, "moved by someone");
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the standby leaves it");
    assert!(!status.current().all_converged(), "and sees the drift");
    lead.send_replace(true);
    status.wait_for(Status::all_converged).await.unwrap();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "one correction once it leads"
    );
    assert_eq!(
        cache.snapshot().observe("baseline").resource_version(),
        Some("3")
    );
    run.abort();
}
