//! Reports that stay true (issue 24), on virtual time: a denial is never a contest, an Event
//! names only the fields that differed, and a deletion the cache saw ends the echo wait.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_core::{
    Action, DesiredSet, FieldWriter, Fleet, FleetConfig, MachineConfig, Observed, ObservedTier,
    Snapshot, TierEvent, TierMachine, TierSpec, TierState, WriteError,
};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// The message Antrea's webhook answers a priority change by anyone but antrea-controller.
const ANTREA_DENIAL: &str = "admission webhook \"tiervalidator.antrea.io\" denied the request: \
                             update to Tier priority is not allowed";

fn org_security() -> TierSpec {
    TierSpec::new("org-security", 90, "Security team's rules")
}

fn observed(spec: &TierSpec, priority: i64, description: &str, rv: u64) -> ObservedTier {
    ObservedTier {
        name: spec.name.clone(),
        priority,
        description: description.into(),
        resource_version: rv.to_string(),
        last_writer: None,
    }
}

fn kubectl_edit() -> FieldWriter {
    FieldWriter {
        manager: "kubectl-edit".into(),
        time: Some("2026-12-01T09:00:00Z".into()),
    }
}

fn drain(m: &mut TierMachine) -> Vec<TierEvent> {
    std::iter::from_fn(|| m.poll_event()).collect()
}

/// Someone moves org-security from 90 to 95 once; Antrea's webhook denies every correction.
/// For 15 s (and long after) the Tier is `denied`, with Antrea's rule and the fix in words, and
/// never `contested`: the server never accepted a correction, so nobody undid one.
#[test]
fn a_denied_correction_is_denied_never_contested() {
    let spec = org_security();
    let t0 = Instant::now();
    let mut m = TierMachine::new(spec.clone(), MachineConfig::default(), 7).unwrap();
    m.handle_observation(
        Observed::Present(observed(&spec, 90, &spec.description, 1)),
        1,
        t0,
    );
    assert!(m.is_converged());
    let mut moved = observed(&spec, 95, &spec.description, 2);
    moved.last_writer = Some(kubectl_edit());
    m.handle_observation(Observed::Present(moved), 2, t0 + S);

    let mut now = t0 + S;
    let mut events = Vec::new();
    let mut writes = 0;
    let mut denied_since = None;
    while now < t0 + 120 * S {
        m.handle_timeout(now);
        if let Some(action) = m.poll_action(now) {
            assert!(matches!(action, Action::Update { .. }), "{action:?}");
            writes += 1;
            m.handle_outcome(Err(WriteError::denied(ANTREA_DENIAL)), now + 5 * MS);
        }
        events.extend(drain(&mut m));
        let status = m.status();
        assert!(!status.contested, "at {:?}: {status}", now - t0);
        assert!(
            !matches!(status.state, TierState::Contested { .. }),
            "at {:?}: {status}",
            now - t0
        );
        if writes > 0 {
            assert_eq!(
                status.state.as_str(),
                "denied",
                "at {:?}: {status}",
                now - t0
            );
            denied_since.get_or_insert(now);
            let words = status.to_string();
            assert!(words.contains(ANTREA_DENIAL), "Antrea's message: {words}");
            assert!(
                words.contains("only antrea-controller"),
                "Antrea's rule in words: {words}"
            );
            assert!(
                words.contains("kubectl delete tier org-security"),
                "the fix: {words}"
            );
            assert!(words.contains("Tiers file"), "the other fix: {words}");
            assert!(!words.contains("may lag"), "not a lag: {words}");
        }
        now = m.poll_timeout().unwrap_or(now + S).max(now + MS);
    }
    assert!(now - denied_since.unwrap() >= 15 * S);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, TierEvent::Contested { .. })),
        "{events:?}"
    );
    let denied: Vec<&TierEvent> = events
        .iter()
        .filter(|e| matches!(e, TierEvent::Denied { .. }))
        .collect();
    assert_eq!(denied.len(), 1, "one Denied Event per episode: {events:?}");
    let note = denied[0].to_string();
    assert!(note.contains("only antrea-controller"), "{note}");
    assert!(note.contains("kubectl delete tier org-security"), "{note}");
    // The budget still bounds the retries: a burst of 3, then one per hold-off.
    assert!(writes <= 12, "{writes} denied writes in two minutes");
}

/// The same world through a fleet: `tierd_tier_state{state="denied"}` reads the fleet's status.
#[test]
fn a_fleet_reports_the_denied_correction_as_denied() {
    let spec = org_security();
    let desired = DesiredSet::new(vec![spec.clone()], &Default::default()).unwrap();
    let t0 = Instant::now();
    let mut fleet = Fleet::new(&desired, FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(
        &Snapshot::synced(1, [observed(&spec, 90, &spec.description, 1)]),
        t0,
    );
    let mut moved = observed(&spec, 95, &spec.description, 2);
    moved.last_writer = Some(kubectl_edit());
    fleet.handle_snapshot(&Snapshot::synced(2, [moved]), t0);
    let mut now = t0;
    let mut contested = false;
    while now < t0 + 30 * S {
        fleet.handle_timeout(now);
        while let Some((id, _)) = fleet.poll_action(now) {
            fleet.handle_outcome(id, Err(WriteError::denied(ANTREA_DENIAL)), now);
        }
        while let Some(event) = fleet.poll_event() {
            contested |= matches!(event, TierEvent::Contested { .. });
        }
        let status = fleet.status();
        contested |= status.tiers[0].contested;
        if now >= t0 + S {
            assert_eq!(
                status.tiers[0].state.as_str(),
                "denied",
                "{}",
                status.tiers[0]
            );
        }
        now = fleet.poll_timeout().unwrap_or(now + S).max(now + MS);
    }
    assert!(!contested);
}

/// One hand edit of only a description: one update, and the Event names the description only.
#[test]
fn one_description_edit_is_one_update_naming_the_description() {
    let spec = TierSpec::new(
        "platform",
        200,
        "[READ-ONLY]: System generated Platform Tier",
    );
    let t0 = Instant::now();
    let mut m = TierMachine::new(spec.clone(), MachineConfig::default(), 3).unwrap();
    m.handle_observation(
        Observed::Present(observed(&spec, 200, &spec.description, 1)),
        1,
        t0,
    );
    m.handle_observation(
        Observed::Present(observed(&spec, 200, "hand edited", 2)),
        2,
        t0 + S,
    );
    let mut now = t0 + S;
    let mut updates = 0;
    while now < t0 + 60 * S {
        m.handle_timeout(now);
        if let Some(action) = m.poll_action(now) {
            assert!(matches!(action, Action::Update { .. }), "{action:?}");
            updates += 1;
            m.handle_outcome(Ok(()), now + 5 * MS);
            m.handle_observation(
                Observed::Present(observed(&spec, 200, &spec.description, 3)),
                3,
                now + 20 * MS,
            );
        }
        now = m.poll_timeout().unwrap_or(now + S).max(now + 10 * MS);
    }
    assert_eq!(updates, 1);
    assert!(m.is_converged());
    let notes: Vec<String> = drain(&mut m).iter().map(ToString::to_string).collect();
    assert_eq!(notes, ["corrected the description of Tier platform"]);
}

/// A priority and a description both wrong: the Event names both, in the controller's order.
#[test]
fn both_fields_wrong_are_both_named() {
    let spec = TierSpec::new("platform", 200, "desc");
    let t0 = Instant::now();
    let mut m = TierMachine::new(spec.clone(), MachineConfig::default(), 3).unwrap();
    m.handle_observation(Observed::Present(observed(&spec, 201, "x", 1)), 1, t0);
    assert!(m.poll_action(t0).is_some());
    m.handle_outcome(Ok(()), t0);
    let notes: Vec<String> = drain(&mut m).iter().map(ToString::to_string).collect();
    assert_eq!(
        notes,
        ["corrected the priority and description of Tier platform"]
    );
}

fn emergency() -> TierSpec {
    TierSpec::new(
        "emergency",
        50,
        "[READ-ONLY]: System generated Emergency Tier",
    )
}

/// A snapshot at `generation` without `spec`'s Tier, whose lister saw it deleted at `deleted`.
fn gone(spec: &TierSpec, generation: u64, deleted: u64) -> Snapshot {
    let mut deletions = tier_core::Deletions::default();
    deletions.record(&spec.name, deleted);
    Snapshot::synced(generation, Vec::<ObservedTier>::new()).with_deleted(deletions)
}

/// The create's echo and the deletion reach the cache together: the snapshot looks as before
/// the create, but carries the deletion. The echo wait ends at once and the Tier is created
/// again, and the deletion counts as an undone write.
#[test]
fn a_deletion_seen_with_the_create_ends_the_echo_wait_at_once() {
    let spec = emergency();
    let t0 = Instant::now();
    let mut m = TierMachine::new(spec.clone(), MachineConfig::default(), 5).unwrap();
    m.handle_snapshot(&Snapshot::synced(1, Vec::<ObservedTier>::new()), t0);
    assert_eq!(m.poll_action(t0), Some(Action::Create(spec.clone())));
    m.handle_outcome(Ok(()), t0 + 2 * MS);
    assert_eq!(m.poll_action(t0 + 2 * MS), None, "waits for the echo");
    // Created at generation 2, deleted at 3: the cache shows both at once.
    m.handle_snapshot(&gone(&spec, 3, 3), t0 + 12 * MS);
    assert_eq!(
        m.poll_action(t0 + 12 * MS),
        Some(Action::Create(spec.clone())),
        "re-created at once, not after the echo timeout"
    );
    assert_eq!(m.status().corrections, 1, "the re-create is a correction");
    // A deletion seen while the create was in flight ends the wait as soon as it is answered.
    m.handle_snapshot(&gone(&spec, 5, 5), t0 + 13 * MS);
    m.handle_outcome(Ok(()), t0 + 14 * MS);
    assert_eq!(
        m.poll_action(t0 + 14 * MS),
        Some(Action::Create(spec.clone()))
    );
    // The learned echo wait did not grow: the cache did not lag.
    assert_eq!(m.echo_wait(), MachineConfig::default().echo_timeout);
}

/// An old deletion (before the write was decided) does not end the wait.
#[test]
fn a_deletion_before_the_write_does_not_end_its_echo_wait() {
    let spec = emergency();
    let t0 = Instant::now();
    let mut m = TierMachine::new(spec.clone(), MachineConfig::default(), 5).unwrap();
    m.handle_snapshot(&gone(&spec, 4, 2), t0);
    assert!(m.poll_action(t0).is_some());
    m.handle_outcome(Ok(()), t0);
    m.handle_snapshot(&gone(&spec, 4, 2), t0 + 100 * MS);
    assert_eq!(m.poll_action(t0 + 100 * MS), None);
    assert_eq!(
        m.poll_timeout(),
        Some(t0 + MachineConfig::default().echo_timeout)
    );
}

/// After a Conflict-like failure (the create met an object the cache does not show yet), a
/// deletion seen since wakes the retry without waiting out the backoff.
#[test]
fn a_deletion_wakes_a_stale_create() {
    let spec = emergency();
    let t0 = Instant::now();
    let mut m = TierMachine::new(spec.clone(), MachineConfig::default(), 5).unwrap();
    m.handle_snapshot(&Snapshot::synced(1, Vec::<ObservedTier>::new()), t0);
    assert!(m.poll_action(t0).is_some());
    m.handle_outcome(
        Err(WriteError::stale("tiers \"emergency\" already exists")),
        t0,
    );
    assert_eq!(m.poll_action(t0 + MS), None);
    m.handle_snapshot(&gone(&spec, 3, 3), t0 + 10 * MS);
    assert_eq!(m.poll_action(t0 + 10 * MS), Some(Action::Create(spec)));
}

/// A prune controller deletes every create, each deletion seen with the create: a contest of
/// undone writes, rate-limited by the budget, naming no writer.
#[test]
fn deletions_seen_with_their_creates_make_a_contest() {
    let spec = emergency();
    let t0 = Instant::now();
    let mut m = TierMachine::new(spec.clone(), MachineConfig::default(), 5).unwrap();
    let mut generation = 1;
    m.handle_snapshot(
        &Snapshot::synced(generation, Vec::<ObservedTier>::new()),
        t0,
    );
    let mut now = t0;
    let mut creates = Vec::new();
    while now < t0 + 10 * S {
        m.handle_timeout(now);
        if let Some(action) = m.poll_action(now) {
            assert_eq!(action, Action::Create(spec.clone()));
            creates.push(now - t0);
            m.handle_outcome(Ok(()), now);
            generation += 2;
            m.handle_snapshot(&gone(&spec, generation, generation), now + 10 * MS);
        }
        now = m
            .poll_timeout()
            .unwrap_or(now + S)
            .min(now + 10 * MS)
            .max(now + MS);
    }
    assert!(
        creates[1] < 100 * MS && creates[2] < 100 * MS,
        "{creates:?}"
    );
    assert!(creates.len() <= 6, "{creates:?}");
    let events = drain(&mut m);
    let contested: Vec<&TierEvent> = events
        .iter()
        .filter(|e| matches!(e, TierEvent::Contested { .. }))
        .collect();
    // Two creates proven undone by the next accepted create; the third's deletion is only
    // seen (it could have been another's object) until the server accepts the next one.
    assert_eq!(
        contested,
        [&TierEvent::Contested {
            tier: "emergency".into(),
            streak: 2,
            by: None,
        }]
    );
    assert!(m.status().contested);
}

/// The writer a Contested Event names is the one that undid tierd's accepted write, and the
/// count is of undone writes: an edit that came before any write of tierd's is no undo.
#[test]
fn a_contest_names_the_writer_that_undid_tierds_writes() {
    let spec = org_security();
    let t0 = Instant::now();
    let mut m = TierMachine::new(spec.clone(), MachineConfig::default(), 5).unwrap();
    let writer = |manager: &str| FieldWriter {
        manager: manager.into(),
        time: None,
    };
    let edited = |rv: u64, by: &str| {
        let mut tier = observed(&spec, 90, "edited", rv);
        tier.last_writer = Some(writer(by));
        Observed::Present(tier)
    };
    let mut rv = 1;
    // The Tier starts edited by a GitOps tool: tierd's first correction undoes nothing.
    m.handle_observation(edited(rv, "argocd"), rv, t0);
    let mut now = t0;
    let mut writes = 0;
    while !m.status().contested {
        assert!(now < t0 + 20 * S, "{}", m.status());
        m.handle_timeout(now);
        if m.poll_action(now).is_some() {
            writes += 1;
            m.handle_outcome(Ok(()), now);
            rv += 1;
            m.handle_observation(
                Observed::Present(observed(&spec, 90, &spec.description, rv)),
                rv,
                now + MS,
            );
            // Someone else puts their description back right after each correction.
            rv += 1;
            m.handle_observation(edited(rv, "kubectl-edit"), rv, now + 2 * MS);
        }
        now += 10 * MS;
    }
    assert_eq!(writes, 3);
    let contested = drain(&mut m)
        .into_iter()
        .find(|e| matches!(e, TierEvent::Contested { .. }))
        .unwrap();
    assert_eq!(
        contested,
        TierEvent::Contested {
            tier: "org-security".into(),
            streak: 3,
            by: Some(writer("kubectl-edit")),
        }
    );
    assert_eq!(
        contested.to_string(),
        "another writer (kubectl-edit) undid tierd's accepted writes of Tier org-security (3 \
         times in a row); tierd now holds off its corrections"
    );
}

/// A create and someone else's object deleted while the create was in flight look alike: the
/// deletion ends the echo wait, but no contest follows until the server confirms an undo.
#[test]
fn a_deletion_that_may_be_someone_elses_object_makes_no_contest() {
    let spec = emergency();
    let t0 = Instant::now();
    let mut config = MachineConfig::default();
    config.contest.burst = 1;
    let mut m = TierMachine::new(spec.clone(), config, 5).unwrap();
    m.handle_snapshot(&Snapshot::synced(1, Vec::<ObservedTier>::new()), t0);
    assert!(m.poll_action(t0).is_some());
    m.handle_outcome(Ok(()), t0 + MS);
    // Another replica's Tier appeared and was deleted; ours may still be on its way.
    m.handle_snapshot(&gone(&spec, 3, 3), t0 + 2 * MS);
    assert_eq!(
        m.poll_action(t0 + 2 * MS),
        None,
        "held: the budget of one is spent"
    );
    assert!(!m.status().contested, "{}", m.status());
    // Ours shows up: nothing was undone.
    m.handle_snapshot(
        &Snapshot::synced(4, [observed(&spec, 50, &spec.description, 4)])
            .with_deleted(gone(&spec, 3, 3).deleted),
        t0 + 3 * MS,
    );
    assert!(m.is_converged());
    assert!(
        drain(&mut m)
            .iter()
            .all(|e| !matches!(e, TierEvent::Contested { .. }))
    );
}
