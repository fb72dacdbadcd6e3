//! The fleet's fleet-wide holds in detail (written against `cargo mutants`: each test pins one
//! decision a surviving mutant showed untested): which failure starts which hold, which answer
//! ends it, who probes next, and when a Tier's failures are its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Instant;

use common::{Fault, MS, S, World, converged, fleet, id_of, refused, run};
use tier_core::{Action, DesiredSet, Fleet, FleetConfig, TierId, TierSpec, TierState, WriteError};

/// Puts Tier `name` into `world` exactly as desired.
fn put_desired(world: &mut World, name: &str) {
    let desired = DesiredSet::antrea();
    let spec = desired.tiers().iter().find(|t| t.name == name).unwrap();
    world.put(name, spec.priority, &spec.description);
}

/// Every action `fleet` asks for at `now`, none performed.
fn take_actions(fleet: &mut Fleet, now: Instant) -> Vec<(TierId, Action)> {
    std::iter::from_fn(|| fleet.poll_action(now)).collect()
}

/// Fires the timers due at `now` and takes every action.
fn step(fleet: &mut Fleet, now: Instant) -> Vec<(TierId, Action)> {
    fleet.handle_timeout(now);
    take_actions(fleet, now)
}

/// A fleet over an empty world whose six creates were all refused by RBAC at `t0`: a
/// create-forbidden hold is on.
fn creates_refused(t0: Instant) -> Fleet {
    let world = World::default();
    let mut fleet = fleet(t0);
    fleet.handle_snapshot(&world.snapshot(), t0);
    let calls = take_actions(&mut fleet, t0);
    assert_eq!(calls.len(), 6);
    for (id, _) in calls {
        fleet.handle_outcome(id, Err(refused("create")), t0);
    }
    assert!(fleet.create_probe().is_some(), "a create-forbidden hold");
    fleet
}

// -------------------------------------------------------------------------------------------
// Which refusal is a fleet-wide fact.

#[test]
fn a_create_refusal_that_names_no_create_permission_holds_no_other_create() {
    // A 403 on a create that does not say RBAC is missing `create` (an admission policy, a
    // per-object rule) is that Tier's: a Tier deleted meanwhile is re-created at once.
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    run(&mut fleet, &mut world, t0, t0, S, |_, _, _| Fault::None);
    assert!(fleet.is_converged());
    let refusals = [
        WriteError::forbidden("denied by policy tier-guard", None),
        WriteError::forbidden("cannot update", Some("update tiers.crd.antrea.io".into())),
    ];
    for (n, refusal) in refusals.into_iter().enumerate() {
        let t1 = t0 + (n as u32 * 100 + 1) * S;
        world.delete("networkops");
        fleet.handle_snapshot(&world.snapshot(), t1);
        let calls = step(&mut fleet, t1);
        assert_eq!(calls.len(), 1);
        fleet.handle_outcome(calls[0].0, Err(refusal.clone()), t1);
        assert_eq!(fleet.create_probe(), None, "{refusal:?} is not fleet-wide");
        world.delete("securityops");
        fleet.handle_snapshot(&world.snapshot(), t1 + MS);
        let calls = step(&mut fleet, t1 + MS);
        assert_eq!(calls.len(), 1, "{refusal:?}: {calls:?}");
        assert_eq!(calls[0].1.tier().name, "securityops");
        fleet.handle_outcome(calls[0].0, world.perform(&calls[0].1), t1 + MS);
        fleet.handle_snapshot(&world.snapshot(), t1 + MS);
        assert!(converged(&fleet, "securityops"));
        // networkops is created once its own backoff ends.
        put_desired(&mut world, "networkops");
        fleet.handle_snapshot(&world.snapshot(), t1 + 2 * MS);
        assert!(fleet.is_converged());
    }
}

#[test]
fn a_refused_update_holds_no_create_the_set_later_allows() {
    // RBAC refuses updates. networkops is drifted (its update refused) while two missing Tiers
    // are blocked by squatters; the squatters go: both creates go at once.
    let t0 = Instant::now();
    let mut world = World::default();
    world.put("networkops", 151, "");
    world.put("squatter-a", 100, ""); // securityops
    world.put("squatter-b", 50, ""); // emergency
    for name in ["platform", "application", "baseline"] {
        put_desired(&mut world, name);
    }
    let mut fleet = fleet(t0);
    fleet.handle_snapshot(&world.snapshot(), t0);
    let calls = take_actions(&mut fleet, t0);
    assert_eq!(calls.len(), 1, "only the update: {calls:?}");
    assert!(matches!(calls[0].1, Action::Update { .. }));
    fleet.handle_outcome(calls[0].0, Err(refused("update")), t0);
    assert_eq!(fleet.create_probe(), None);
    assert!(take_actions(&mut fleet, t0).is_empty());
    let t1 = t0 + 100 * MS;
    world.delete("squatter-a");
    world.delete("squatter-b");
    fleet.handle_snapshot(&world.snapshot(), t1);
    let calls = step(&mut fleet, t1);
    let mut names: Vec<&str> = calls.iter().map(|(_, a)| a.tier().name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["emergency", "securityops"]);
    assert!(calls.iter().all(|(_, a)| matches!(a, Action::Create(_))));
}

// -------------------------------------------------------------------------------------------
// Who probes a create-forbidden hold, and what ends it.

#[test]
fn a_create_probe_that_gets_a_503_hands_the_probing_on() {
    // The probe's create meets a 503: it learned nothing about the permission, so the next
    // Tier probes on the hold's backoff (not the same Tier again on its short 503 backoff).
    let t0 = Instant::now();
    let mut fleet = creates_refused(t0);
    let probe = fleet.create_probe().unwrap();
    let t1 = t0 + 2 * S;
    let calls = step(&mut fleet, t1);
    assert_eq!(calls.len(), 1, "only the probe creates: {calls:?}");
    assert_eq!(calls[0].0, probe);
    fleet.handle_outcome(probe, Err(WriteError::transient("503")), t1);
    let next = fleet.create_probe().unwrap();
    assert_ne!(next, probe, "probing rotates");
    // The next create comes from the new probe, after the hold's backoff step (1 s doubled,
    // jittered: at least 1 s), and nobody else creates meanwhile.
    let mut now = t1;
    let call = loop {
        now = fleet.poll_timeout().unwrap().max(now + MS);
        let calls = step(&mut fleet, now);
        if !calls.is_empty() {
            assert_eq!(calls.len(), 1, "{calls:?}");
            break calls[0].clone();
        }
    };
    assert_eq!(call.0, next);
    assert!(now >= t1 + S, "one hold step: {:?}", now - t1);
}

#[test]
fn a_create_that_meets_an_existing_tier_ends_the_create_hold() {
    // The probe's create gets AlreadyExists: it passed authorization, so creates are allowed
    // again and every other create goes at once.
    let t0 = Instant::now();
    let mut fleet = creates_refused(t0);
    let probe = fleet.create_probe().unwrap();
    let t1 = t0 + 2 * S;
    let calls = step(&mut fleet, t1);
    assert_eq!(calls.len(), 1);
    fleet.handle_outcome(probe, Err(WriteError::stale("AlreadyExists")), t1);
    assert_eq!(fleet.create_probe(), None);
    let calls = take_actions(&mut fleet, t1);
    assert_eq!(calls.len(), 5, "{calls:?}");
    assert!(calls.iter().all(|(id, _)| *id != probe));
}

#[test]
fn a_conflict_on_an_update_does_not_end_the_create_hold() {
    // An update that meets a Conflict says nothing about creates: still only the probe creates.
    let t0 = Instant::now();
    let mut world = World::default();
    world.put("baseline", 253, "edited");
    let mut fleet = fleet(t0);
    fleet.handle_snapshot(&world.snapshot(), t0);
    let calls = take_actions(&mut fleet, t0);
    assert_eq!(calls.len(), 6);
    let mut update = None;
    for (id, action) in calls {
        match action {
            Action::Create(_) => fleet.handle_outcome(id, Err(refused("create")), t0),
            Action::Update { .. } => update = Some(id),
        }
    }
    let probe = fleet.create_probe().expect("a create-forbidden hold");
    fleet.handle_outcome(update.unwrap(), Err(WriteError::stale("Conflict")), t0);
    assert_eq!(fleet.create_probe(), Some(probe));
    let calls = step(&mut fleet, t0 + 2 * S);
    let creates: Vec<TierId> = calls
        .iter()
        .filter(|(_, a)| matches!(a, Action::Create(_)))
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(creates, [probe], "{calls:?}");
}

// -------------------------------------------------------------------------------------------
// The outage probe.

#[test]
fn a_hanging_probe_is_replaced_after_the_probe_release_whatever_else_ends() {
    // Five creates fail with 503 (an outage), the sixth with a Conflict. The probe's retry
    // hangs; the Conflict's retry ends meanwhile. 5 s after the hanging call was sent
    // (`PROBE_RELEASE`), another Tier probes.
    let t0 = Instant::now();
    let mut fleet = fleet(t0);
    fleet.handle_snapshot(&World::default().snapshot(), t0);
    let calls = take_actions(&mut fleet, t0);
    let (last, failing) = calls.split_last().unwrap();
    for (id, _) in failing {
        fleet.handle_outcome(*id, Err(WriteError::transient("503")), t0);
    }
    fleet.handle_outcome(last.0, Err(WriteError::stale("Conflict")), t0);
    let probe = fleet.probe().unwrap();
    let t1 = t0 + 20 * S;
    let calls = step(&mut fleet, t1);
    let ids: Vec<TierId> = calls.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [probe, last.0], "the probe, and the Conflict's retry");
    // The probe's call hangs; the Conflict's retry gets another Conflict.
    fleet.handle_outcome(last.0, Err(WriteError::stale("Conflict")), t1 + S);
    assert!(step(&mut fleet, t1 + 5 * S - MS).is_empty());
    let calls = step(&mut fleet, t1 + 5 * S);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_ne!(calls[0].0, probe);
    assert_eq!(fleet.probe(), Some(calls[0].0));
}

// -------------------------------------------------------------------------------------------
// A failure only one object gets.

#[test]
fn a_tier_whose_503s_follow_answers_to_others_holds_nobody() {
    // securityops's object fails with 503 on every write; meanwhile someone edits baseline
    // now and then, and tierd's corrections of it are answered. After three failures each
    // followed by an answer to another Tier, securityops's failures are its own: a one-off 503
    // of another Tier is retried on that Tier's own short backoff, not held behind it.
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    let a = id_of(&fleet, "securityops");
    let failing = |_: Instant, id: TierId, _: &Action| {
        if id == a {
            Fault::Fail(WriteError::transient("503 for this object"))
        } else {
            Fault::None
        }
    };
    let mut now = t0;
    for _ in 0..3 {
        run(&mut fleet, &mut world, now, now + 30 * S, S, failing);
        now += 30 * S + MS;
        world.put("baseline", 253, "edited");
    }
    run(&mut fleet, &mut world, now, now + S, S, failing);
    assert!(fleet.fails_alone(a), "{:#?}", fleet.status());
    assert!(!fleet.fails_alone(id_of(&fleet, "baseline")));
    let t1 = now + S + MS;
    world.put("emergency", 51, "");
    let e = id_of(&fleet, "emergency");
    let mut first = true;
    let calls = run(
        &mut fleet,
        &mut world,
        t1,
        t1 + 2 * S,
        10 * MS,
        |_, id, _| {
            if id == a {
                Fault::Fail(WriteError::transient("503 for this object"))
            } else if id == e && std::mem::take(&mut first) {
                Fault::Fail(WriteError::transient("a one-off 503"))
            } else {
                Fault::None
            }
        },
    );
    assert!(converged(&fleet, "emergency"), "{calls:#?}");
    let retry = calls.iter().filter(|c| c.id == e).nth(1).unwrap();
    assert!(retry.at <= t1 + 300 * MS, "{calls:#?}");
    assert!(matches!(
        fleet.status().tiers[a].state,
        TierState::Retrying { .. }
    ));
}

#[test]
fn a_create_hold_does_not_hold_an_update() {
    // Creates are refused by RBAC (a create hold is on); baseline, present, drifts: its
    // update goes at once.
    let t0 = Instant::now();
    let mut world = World::default();
    put_desired(&mut world, "baseline");
    let mut fleet = fleet(t0);
    fleet.handle_snapshot(&world.snapshot(), t0);
    let calls = take_actions(&mut fleet, t0);
    assert_eq!(calls.len(), 5);
    for (id, _) in calls {
        fleet.handle_outcome(id, Err(refused("create")), t0);
    }
    let probe = fleet.create_probe().expect("a create hold");
    let t1 = t0 + 2 * S;
    let calls = step(&mut fleet, t1);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, probe);
    world.put("baseline", 253, "edited");
    fleet.handle_snapshot(&world.snapshot(), t1 + MS);
    let calls = step(&mut fleet, t1 + MS);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].1.tier().name, "baseline");
    assert!(matches!(calls[0].1, Action::Update { .. }));
}

#[test]
fn an_outage_that_ends_without_an_answer_leaves_no_longer_backoff_behind() {
    // Two Tiers; their creates fail with 503 until the probe's backoff has grown, then someone
    // else creates both: nobody is left in the outage, so it is over. A later one-off 503 of
    // an update is retried on the first backoff step, not on the old outage's long one.
    let t0 = Instant::now();
    let desired = DesiredSet::new(
        vec![TierSpec::new("a", 10, ""), TierSpec::new("b", 20, "")],
        &Default::default(),
    )
    .unwrap();
    // A budget that never runs out: only the outage's backoff is at stake.
    let mut config = FleetConfig::default();
    config.machine.contest.burst = 1000;
    let mut fleet = Fleet::new(&desired, config, t0).unwrap();
    let mut world = World::default();
    fleet.handle_snapshot(&world.snapshot(), t0);
    let mut now = t0;
    while now < t0 + 8 * S {
        for (id, _) in take_actions(&mut fleet, now) {
            fleet.handle_outcome(id, Err(WriteError::transient("503")), now);
        }
        now = fleet.poll_timeout().unwrap().max(now + MS);
        fleet.handle_timeout(now);
    }
    for (id, _) in take_actions(&mut fleet, now) {
        fleet.handle_outcome(id, Err(WriteError::transient("503")), now);
    }
    assert!(fleet.probe().is_some(), "an outage");
    world.put("a", 10, "");
    world.put("b", 20, "");
    fleet.handle_snapshot(&world.snapshot(), now);
    assert!(take_actions(&mut fleet, now).is_empty());
    assert!(fleet.is_converged());
    assert_eq!(
        fleet.probe(),
        None,
        "the outage concerns nobody: it is over"
    );
    let t1 = now + MS;
    world.put("b", 21, "");
    fleet.handle_snapshot(&world.snapshot(), t1);
    let calls = step(&mut fleet, t1);
    assert_eq!(calls.len(), 1);
    fleet.handle_outcome(calls[0].0, Err(WriteError::transient("a one-off 503")), t1);
    let retry = loop {
        now = fleet.poll_timeout().unwrap();
        if !step(&mut fleet, now).is_empty() {
            break now;
        }
        assert!(now < t1 + 10 * S);
    };
    assert!(retry <= t1 + 250 * MS, "retried after {:?}", retry - t1);
}

#[test]
fn an_update_is_never_held_for_a_joint_prediction() {
    // 19 users' Tiers at 19 priorities; desired a is present (drifted to a user's priority),
    // b is missing. b's create fits (20 distinct priorities); a's update goes in the same
    // step: joint prediction concerns creates only.
    let t0 = Instant::now();
    let mut world = World::default();
    for p in 0..19 {
        world.put(&format!("user-{p}"), p, "");
    }
    world.put("a", 18, "");
    let desired = DesiredSet::new(
        vec![TierSpec::new("b", 101, ""), TierSpec::new("a", 100, "")],
        &Default::default(),
    )
    .unwrap();
    let mut fleet = Fleet::new(&desired, FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&world.snapshot(), t0);
    let calls = take_actions(&mut fleet, t0);
    let kinds: Vec<(&str, &str)> = calls
        .iter()
        .map(|(_, a)| (a.tier().name.as_str(), a.verb()))
        .collect();
    assert_eq!(kinds, [("b", "create"), ("a", "update")]);
}

#[test]
fn an_update_answered_during_a_create_hold_does_not_delay_the_probe() {
    // Creates are refused (a create hold is on); baseline drifts and is corrected before the
    // probe's next create is due: the probe still creates on time.
    let t0 = Instant::now();
    let mut world = World::default();
    put_desired(&mut world, "baseline");
    let mut fleet = fleet(t0);
    fleet.handle_snapshot(&world.snapshot(), t0);
    for (id, _) in take_actions(&mut fleet, t0) {
        fleet.handle_outcome(id, Err(refused("create")), t0);
    }
    let probe = fleet.create_probe().expect("a create hold");
    let t1 = t0 + 100 * MS;
    world.put("baseline", 253, "edited");
    fleet.handle_snapshot(&world.snapshot(), t1);
    let calls = step(&mut fleet, t1);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(matches!(calls[0].1, Action::Update { .. }));
    fleet.handle_outcome(calls[0].0, world.perform(&calls[0].1), t1);
    fleet.handle_snapshot(&world.snapshot(), t1);
    // The probe's forbidden backoff (1 s, jittered) is over by t0 + 2 s.
    let calls = step(&mut fleet, t0 + 2 * S);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].0, probe);
}

#[test]
fn a_probe_asked_to_come_back_later_holds_the_others_at_most_the_outage_release() {
    // Every create fails with 503 at once (an outage); the probe's answer asks it to come back
    // in 60 s (`Retry-After`). The server is fine again at once: the others, due on their own
    // short backoff, are released after `OUTAGE_RELEASE` (10 s), not after the probe's 60 s.
    let t0 = Instant::now();
    let mut world = World::default();
    // A backoff cap above the Retry-After, so the server's 60 s is what the probe waits.
    let mut config = FleetConfig::default();
    config.machine.backoff.cap = 60 * S;
    let mut fleet = Fleet::new(&DesiredSet::antrea(), config, t0).unwrap();
    let calls = run(
        &mut fleet,
        &mut world,
        t0,
        t0 + 70 * S,
        100 * MS,
        |now, id, _| {
            if now > t0 {
                Fault::None
            } else if id == 0 {
                Fault::Fail(WriteError::transient("503").with_retry_after(60 * S))
            } else {
                Fault::Fail(WriteError::transient("503"))
            }
        },
    );
    assert!(fleet.is_converged(), "{:#?}", fleet.status());
    let others = calls.iter().filter(|c| c.id != 0 && c.ok);
    let last = others.map(|c| c.at).max().unwrap();
    let brief: Vec<_> = calls
        .iter()
        .map(|c| (c.id, (c.at - t0).as_millis(), c.ok))
        .collect();
    assert!(last > t0 + 10 * S, "held first: {brief:?}");
    assert!(last <= t0 + 11 * S, "released after 10 s: {calls:#?}");
    let probe_retry = calls.iter().filter(|c| c.id == 0).nth(1).unwrap();
    assert!(
        probe_retry.at >= t0 + 60 * S,
        "the server's Retry-After stands"
    );
}

#[test]
fn a_joint_denial_waits_for_the_echo_of_the_create_it_depends_on() {
    // 19 users' Tiers; desired a and b each fit, together they exceed Antrea's 20 distinct
    // priorities. a's create is confirmed while the cache does not show it yet: b still waits
    // (the server would deny it), and once the cache shows a, b is blocked, never denied.
    let t0 = Instant::now();
    let mut world = World::default();
    for p in 0..19 {
        world.put(&format!("user-{p}"), p, "");
    }
    let desired = DesiredSet::new(
        vec![TierSpec::new("a", 100, ""), TierSpec::new("b", 101, "")],
        &Default::default(),
    )
    .unwrap();
    let mut fleet = Fleet::new(&desired, FleetConfig::default(), t0).unwrap();
    let lagging = world.snapshot();
    fleet.handle_snapshot(&lagging, t0);
    let calls = take_actions(&mut fleet, t0);
    assert_eq!(calls.len(), 1, "{calls:?}");
    fleet.handle_outcome(calls[0].0, world.perform(&calls[0].1), t0 + 100 * MS);
    fleet.handle_snapshot(&lagging, t0 + 100 * MS);
    assert!(
        step(&mut fleet, t0 + 200 * MS).is_empty(),
        "b waits for a's echo"
    );
    fleet.handle_snapshot(&world.snapshot(), t0 + 300 * MS);
    assert!(step(&mut fleet, t0 + 300 * MS).is_empty());
    let status = fleet.status();
    assert!(matches!(status.tiers[1].state, TierState::Blocked { .. }));
    assert_eq!(status.tiers[1].outcomes.failed(), 0);
}

/// The latest instant this platform's clock can represent, found by bisection.
fn end_of_time() -> Instant {
    let now = Instant::now();
    let (mut lo, mut hi) = (0u64, u64::MAX);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if now
            .checked_add(std::time::Duration::from_secs(mid))
            .is_some()
        {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    now + std::time::Duration::from_secs(lo)
}

#[test]
fn at_the_end_of_the_clock_a_timer_that_cannot_be_represented_still_waits() {
    // Two hours before the clock's last instant, a write is confirmed and its echo wait is a
    // day (the largest valid): the deadline cannot be represented, so it is put as late as
    // can be in steps (about an hour here), never now (a hot loop) nor within minutes.
    let t0 = end_of_time() - 2 * 3600 * S;
    let mut config = FleetConfig::default();
    config.machine.echo_timeout = tier_core::MAX_DURATION;
    config.machine.backoff.cap = tier_core::MAX_DURATION;
    let desired = DesiredSet::new(vec![TierSpec::new("a", 10, "")], &Default::default()).unwrap();
    let mut fleet = Fleet::new(&desired, config, t0).unwrap();
    fleet.handle_snapshot(&World::default().snapshot(), t0);
    let calls = take_actions(&mut fleet, t0);
    assert_eq!(calls.len(), 1);
    fleet.handle_outcome(calls[0].0, Ok(()), t0);
    let deadline = fleet.poll_timeout().unwrap();
    let wait = deadline - t0;
    assert!(wait >= 50 * 60 * S, "woken after {wait:?}");
    assert!(step(&mut fleet, t0 + 49 * 60 * S).is_empty());
}
