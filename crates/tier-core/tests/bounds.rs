//! Issue 15 on virtual time: every write loop is bounded and reported, and no Tier waits on
//! another. The fleet is stepped by hand against a one-process world whose faults are chosen
//! per call (`common`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{Call, Fault, MS, S, World, converged, events, fleet, id_of, refused, run, run_with};
use tier_core::{Action, DesiredSet, Fleet, FleetConfig, TierEvent, TierId, TierState, WriteError};

/// How long after the world allows it a Tier in a transient backoff is written: its own
/// backoff (at most the 10 s cap), then at most the outage release, 10 s
/// (`tier_core::OUTAGE_RELEASE`).
const OTHERS_BOUND: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// 1. No Tier waits on another.

#[test]
fn a_per_object_503_after_an_outage_does_not_hold_the_other_five() {
    // All six fail at first (an outage); then the server is back for every Tier but the probe,
    // whose object keeps failing with 503.
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    run(&mut fleet, &mut world, t0, t0, S, |_, _, _| {
        Fault::Fail(WriteError::transient("503"))
    });
    let probe = fleet.probe().expect("an outage");
    let up = t0 + MS;
    let calls = run(&mut fleet, &mut world, up, up + 60 * S, S, |_, id, _| {
        if id == probe {
            Fault::Fail(WriteError::transient("503 for this object only"))
        } else {
            Fault::None
        }
    });
    for m in fleet.machines() {
        if fleet.machines()[probe].spec().name == m.spec().name {
            continue;
        }
        assert!(converged(&fleet, &m.spec().name), "{:#?}", fleet.status());
    }
    let last_other = calls
        .iter()
        .filter(|c| c.id != probe && c.ok)
        .map(|c| c.at)
        .max();
    let bound = OTHERS_BOUND;
    assert!(last_other.unwrap() <= up + bound, "{calls:#?}");
}

#[test]
fn a_probe_whose_call_hangs_holds_the_others_no_longer_than_the_release() {
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    run(&mut fleet, &mut world, t0, t0, S, |_, _, _| {
        Fault::Fail(WriteError::transient("503"))
    });
    let probe = fleet.probe().expect("an outage");
    let up = t0 + MS;
    // The probe's next call hangs (until the call timeout, 30 s, that never comes here); every
    // other call is fine.
    let calls = run(
        &mut fleet,
        &mut world,
        up,
        up + 30 * S,
        100 * MS,
        |_, id, _| {
            if id == probe {
                Fault::Hang
            } else {
                Fault::None
            }
        },
    );
    let others: Vec<&Call> = calls.iter().filter(|c| c.id != probe).collect();
    assert_eq!(others.len(), 5, "{calls:#?}");
    let bound = OTHERS_BOUND;
    assert!(
        others.iter().all(|c| c.ok && c.at <= up + bound),
        "{calls:#?}"
    );
}

#[test]
fn a_drifted_tier_is_not_held_by_another_tiers_failing_object() {
    // Everything converged; then one Tier's object starts failing with 503 on every write, and
    // another Tier drifts: it is corrected at once, whatever the failing Tier does.
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    run(&mut fleet, &mut world, t0, t0, S, |_, _, _| Fault::None);
    assert!(fleet.is_converged());
    let a = id_of(&fleet, "securityops");
    world.put("securityops", 1, "");
    let t1 = t0 + S;
    run(&mut fleet, &mut world, t1, t1 + 20 * S, S, |_, id, _| {
        if id == a {
            Fault::Fail(WriteError::transient("503"))
        } else {
            Fault::None
        }
    });
    assert!(!converged(&fleet, "securityops"));
    world.put("emergency", 7, "");
    let t2 = t1 + 20 * S + MS;
    let calls = run(&mut fleet, &mut world, t2, t2 + S, 100 * MS, |_, id, _| {
        if id == a {
            Fault::Fail(WriteError::transient("503"))
        } else {
            Fault::None
        }
    });
    assert!(converged(&fleet, "emergency"), "{calls:#?}");
    let e = id_of(&fleet, "emergency");
    assert_eq!(calls.iter().filter(|c| c.id == e).count(), 1);
    assert_eq!(calls.iter().find(|c| c.id == e).unwrap().at, t2);
}

// ---------------------------------------------------------------------------------------------
// 4. Backoff keyed by cause and verb.

#[test]
fn a_create_403_is_one_probe_for_the_fleet_and_the_grant_releases_every_create() {
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    let granted = t0 + 60 * S;
    let calls = run(
        &mut fleet,
        &mut world,
        t0,
        granted,
        S,
        |now, _, action| match action {
            Action::Create(_) if now < granted => Fault::Fail(refused("create")),
            _ => Fault::None,
        },
    );
    // The first refusal comes back before the second create is sent: from then on, one
    // create per step of the forbidden backoff for the whole fleet.
    let after_first: Vec<Instant> = calls.iter().map(|c| c.at).collect();
    assert!(
        after_first.windows(2).all(|w| w[1] - w[0] >= 500 * MS),
        "{after_first:?}"
    );
    assert!(
        after_first.len() <= 9,
        "{} creates: {after_first:?}",
        after_first.len()
    );
    // Granted: the next probe gets through, and every other create follows at once.
    let calls = run(
        &mut fleet,
        &mut world,
        granted,
        granted + 120 * S,
        S,
        |_, _, _| Fault::None,
    );
    assert!(fleet.is_converged(), "{:#?}", fleet.status());
    let last = calls.iter().map(|c| c.at).max().unwrap();
    let first = calls.iter().map(|c| c.at).min().unwrap();
    assert_eq!(last, first, "all at the probe's answer: {calls:#?}");
    assert!(first <= granted + 60 * S + S);
}

#[test]
fn a_refused_update_does_not_delay_the_create_that_follows_a_deletion() {
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    run(&mut fleet, &mut world, t0, t0, S, |_, _, _| Fault::None);
    world.put("networkops", 151, "");
    let t1 = t0 + S;
    // Updates are refused for five minutes: the update backoff reaches its 60 s cap.
    run(
        &mut fleet,
        &mut world,
        t1,
        t1 + 300 * S,
        S,
        |_, _, action| match action {
            Action::Update { .. } => Fault::Fail(refused("update")),
            Action::Create(_) => Fault::None,
        },
    );
    assert!(matches!(
        fleet.status().tiers[id_of(&fleet, "networkops")].state,
        TierState::Forbidden { .. }
    ));
    // Someone deletes it: the create (allowed) goes at once.
    world.delete("networkops");
    let t2 = t1 + 300 * S + MS;
    let calls = run(
        &mut fleet,
        &mut world,
        t2,
        t2 + S,
        100 * MS,
        |_, _, action| match action {
            Action::Update { .. } => Fault::Fail(refused("update")),
            Action::Create(_) => Fault::None,
        },
    );
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].at, t2);
    assert!(converged(&fleet, "networkops"));
}

// ---------------------------------------------------------------------------------------------
// 2. One write budget per Tier, whatever the cause.

fn contested_events(events: &[TierEvent], name: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, TierEvent::Contested { .. }) && e.tier() == name)
        .count()
}

#[test]
fn an_editor_faster_than_the_cache_lag_gets_a_bounded_contested_tierd() {
    // An editor changes networkops every 100 ms; tierd's cache lags 200 ms: every update meets
    // a Conflict. Before: 2,997 updates in 300 s, never contested.
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    run(&mut fleet, &mut world, t0, t0, S, |_, _, _| Fault::None);
    let _ = events(&mut fleet);
    let t1 = t0 + S;
    let mut next_edit = t1;
    let mut n = 0;
    let calls = run_with(
        &mut fleet,
        &mut world,
        t1,
        t1 + 300 * S,
        100 * MS,
        200 * MS,
        |now, world| {
            while now >= next_edit {
                n += 1;
                world.put("networkops", 151, &n.to_string());
                next_edit += 100 * MS;
            }
        },
        |_, _, _| Fault::None,
    );
    let id = id_of(&fleet, "networkops");
    let writes = calls.iter().filter(|c| c.id == id).count();
    eprintln!("measured: editor every 100 ms, lag 200 ms: {writes} updates in 300 s");
    // 3 at once, then hold-offs of 1, 2, 4 ... 60 s: about 13 in 300 s.
    assert!(writes <= 16, "{writes} writes");
    let policy = <FleetConfig>::default().machine.contest;
    assert!(writes as u64 <= policy.max_writes(300 * S));
    assert_eq!(policy.max_writes(300 * S), 3 + 15 + 7 + 5);
    let status = &fleet.status().tiers[id];
    assert!(status.contested, "{status:#?}");
    assert!(
        matches!(status.state, TierState::Contested { .. }),
        "{status:#?}"
    );
    assert_eq!(contested_events(&events(&mut fleet), "networkops"), 1);
}

#[test]
fn a_deletion_the_cache_never_shows_is_a_correction() {
    // A deleter removes networkops in the same batch as tierd's create: the cache never shows
    // it. Before: re-created about every 10 s forever, never contested.
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    let id = id_of(&fleet, "networkops");
    let calls = run_with(
        &mut fleet,
        &mut world,
        t0,
        t0 + 600 * S,
        S,
        Duration::ZERO,
        |_, world| {
            if world.get("networkops").is_some() {
                world.delete("networkops");
            }
        },
        |_, _, _| Fault::None,
    );
    let creates = calls.iter().filter(|c| c.id == id).count();
    eprintln!("measured: coalesced deleter: {creates} creates in 600 s");
    assert!(creates <= 16, "{creates} creates");
    let status = &fleet.status().tiers[id];
    assert!(status.contested, "{status:#?}");
    assert!(status.corrections >= 3, "{status:#?}");
    assert_eq!(contested_events(&events(&mut fleet), "networkops"), 1);
}

#[test]
fn every_write_counts_a_persistent_503_is_bounded_and_says_so() {
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    let id = id_of(&fleet, "networkops");
    let calls = run(&mut fleet, &mut world, t0, t0 + 600 * S, S, |_, i, _| {
        if i == id {
            Fault::Fail(WriteError::transient("503"))
        } else {
            Fault::None
        }
    });
    let writes = calls.iter().filter(|c| c.id == id).count();
    eprintln!("measured: per-object 503: {writes} writes in 600 s");
    // 3 at once, then hold-offs doubling to 60 s: 3 + 7 + about 8 in 600 s.
    assert!(writes <= 20, "{writes} writes");
    let status = &fleet.status().tiers[id];
    assert!(
        matches!(status.state, TierState::Retrying { .. }),
        "{status:#?}"
    );
    assert!(status.to_string().contains("write budget"), "{status}");
}

// ---------------------------------------------------------------------------------------------
// 3. A contest can end.

#[test]
fn a_contest_ends_when_the_fighter_slows_to_every_hundred_seconds() {
    let t0 = Instant::now();
    let mut world = World::default();
    let mut fleet = fleet(t0);
    run(&mut fleet, &mut world, t0, t0, S, |_, _, _| Fault::None);
    let id = id_of(&fleet, "networkops");
    // A fast fighter for 60 s (every 500 ms), then an editor every 100 s.
    let t1 = t0 + S;
    let fast_until = t1 + 60 * S;
    let mut next_edit = t1;
    let mut wrong_since: Option<Instant> = None;
    let mut wrong_total = Duration::ZERO;
    let end = t1 + 1200 * S;
    run_with(
        &mut fleet,
        &mut world,
        t1,
        end,
        100 * MS,
        Duration::ZERO,
        |now, world| {
            if now >= next_edit {
                world.put("networkops", 151, "");
                next_edit += if now < fast_until { 500 * MS } else { 100 * S };
            }
            let wrong = world.get("networkops").is_some_and(|t| t.priority != 150);
            match (wrong, wrong_since) {
                (true, None) if now >= fast_until + 200 * S => wrong_since = Some(now),
                (false, Some(since)) => {
                    wrong_total += now - since;
                    wrong_since = None;
                }
                _ => {}
            }
        },
        |_, _, _| Fault::None,
    );
    let evs = events(&mut fleet);
    assert!(
        evs.iter()
            .any(|e| matches!(e, TierEvent::ContestEnded { .. })),
        "{evs:#?}"
    );
    assert!(!fleet.status().tiers[id].contested);
    eprintln!("measured: editor every 100 s after a fight: wrong for {wrong_total:?} after 200 s");
    // From 200 s after the fast fight, every edit is corrected at once.
    assert!(wrong_total <= 2 * S, "wrong for {wrong_total:?}");
}

// ---------------------------------------------------------------------------------------------
// 7. Configuration validated at construction.

#[test]
fn every_timing_field_is_validated_naming_the_field_and_the_range() {
    use tier_core::{DriverConfig, MachineConfig};
    type Set = fn(&mut DriverConfig, Duration);
    let fields: [(&str, Set); 12] = [
        ("machine.backoff.initial", |c, d| {
            c.machine.backoff.initial = d
        }),
        ("machine.backoff.cap", |c, d| c.machine.backoff.cap = d),
        ("machine.denied_backoff.initial", |c, d| {
            c.machine.denied_backoff.initial = d
        }),
        ("machine.denied_backoff.cap", |c, d| {
            c.machine.denied_backoff.cap = d
        }),
        ("machine.forbidden_backoff.initial", |c, d| {
            c.machine.forbidden_backoff.initial = d
        }),
        ("machine.forbidden_backoff.cap", |c, d| {
            c.machine.forbidden_backoff.cap = d
        }),
        ("machine.not_installed_retry", |c, d| {
            c.machine.not_installed_retry = d
        }),
        ("machine.echo_timeout", |c, d| c.machine.echo_timeout = d),
        ("machine.contest.refill", |c, d| {
            c.machine.contest.refill = d
        }),
        ("machine.contest.hold_initial", |c, d| {
            c.machine.contest.hold_initial = d
        }),
        ("machine.contest.hold_cap", |c, d| {
            c.machine.contest.hold_cap = d
        }),
        ("call_timeout", |c, d| c.call_timeout = d),
    ];
    for (name, set) in fields {
        for bad in [Duration::MAX, Duration::ZERO] {
            let mut config = DriverConfig::default();
            set(&mut config, bad);
            // An initial above the default cap is reported as the cap's fault only when the
            // initial itself is in range.
            let error = config.validate().unwrap_err();
            let expected_field = match (name, bad) {
                ("machine.backoff.initial", Duration::MAX) => "machine.backoff.initial",
                _ => name,
            };
            assert_eq!(error.field, expected_field, "{name} = {bad:?}: {error}");
            assert!(error.to_string().contains("must be between"), "{error}");
            if let Some(machine) = name
                .strip_prefix("machine.")
                .map(|_| config.machine.clone())
            {
                let fleet = Fleet::new(
                    &DesiredSet::antrea(),
                    FleetConfig {
                        machine,
                        ..FleetConfig::default()
                    },
                    Instant::now(),
                );
                assert_eq!(fleet.unwrap_err().field, expected_field);
            }
        }
    }
    for count in [0, tier_core::MAX_COUNT + 1] {
        let mut config = MachineConfig::default();
        config.contest.burst = count;
        assert_eq!(
            config.validate().unwrap_err().field,
            "machine.contest.burst"
        );
    }
    assert_eq!(<DriverConfig>::default().validate(), Ok(()));
}

#[test]
fn the_largest_valid_timings_never_overflow() {
    // Every timing at the one-day maximum, every kind of failure, a long run: no panic, and
    // every deadline is in the future.
    let day = tier_core::MAX_DURATION;
    let mut config = FleetConfig::default();
    let m = &mut config.machine;
    for b in [
        &mut m.backoff,
        &mut m.denied_backoff,
        &mut m.forbidden_backoff,
    ] {
        b.initial = day;
        b.cap = day;
    }
    m.not_installed_retry = day;
    m.echo_timeout = day;
    m.contest.refill = day;
    m.contest.hold_initial = day;
    m.contest.hold_cap = day;
    let t0 = Instant::now();
    let mut fleet = Fleet::new(&DesiredSet::antrea(), config, t0).unwrap();
    let mut world = World::default();
    let mut n = 0u32;
    let calls = run(&mut fleet, &mut world, t0, t0 + 30 * day, day, |_, _, _| {
        n += 1;
        match n % 5 {
            0 => Fault::Fail(WriteError::transient("503").with_retry_after(Duration::MAX)),
            1 => Fault::Fail(WriteError::stale("Conflict")),
            2 => Fault::Fail(WriteError::denied("no")),
            3 => Fault::Fail(refused("create")),
            _ => Fault::None,
        }
    });
    assert!(!calls.is_empty());
}

// ---------------------------------------------------------------------------------------------
// 6. Joint prediction.

#[test]
fn creates_sent_together_never_jointly_exceed_the_limit_of_priorities() {
    use tier_core::TierSpec;
    use tier_core::admission::{AdmissionPolicy, Request, review};
    let t0 = Instant::now();
    // 19 Tiers of users at distinct priorities; two desired Tiers at two more: either fits,
    // both do not (Antrea allows 20 distinct priorities).
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
    fleet.handle_snapshot(&world.snapshot(), t0);
    // Both decided in one step, against one snapshot.
    let sent: Vec<(TierId, Action)> = std::iter::from_fn(|| fleet.poll_action(t0)).collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    // The server (Antrea's rules) accepts it; the cache shows it; the other is blocked.
    let policy = AdmissionPolicy::antrea("");
    for (id, action) in sent {
        let tier = action.tier();
        let request = Request::Create {
            name: &tier.name,
            priority: tier.priority,
        };
        let existing: Vec<(String, i64)> = world
            .tiers
            .iter()
            .map(|t| (t.name.clone(), t.priority))
            .collect();
        let outcome = review(
            &policy,
            &request,
            existing.iter().map(|(n, p)| (n.as_str(), *p)),
        )
        .map_err(|e| WriteError::denied(e.to_string()));
        assert!(outcome.is_ok());
        world.put(&tier.name, tier.priority, "");
        fleet.handle_outcome(id, outcome, t0);
        fleet.handle_snapshot(&world.snapshot(), t0);
    }
    assert_eq!(fleet.poll_action(t0), None);
    let status = fleet.status();
    let denied: u64 = status.tiers.iter().map(|t| t.outcomes.failed()).sum();
    assert_eq!(denied, 0);
    let blocked: Vec<&tier_core::TierStatus> = status.blocked().collect();
    assert_eq!(blocked.len(), 1, "{status:#?}");
    match &blocked[0].state {
        TierState::Blocked {
            blockers, reason, ..
        } => {
            assert_eq!(reason, "maximum number of Tiers supported: 20");
            assert!(
                blockers.is_empty(),
                "no single Tier is to blame: {blockers:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn answered_updates_do_not_make_a_refused_create_look_like_its_own() {
    // RBAC is per verb: updates of other Tiers that pass say nothing about creates. Before,
    // three answered updates marked every Tier whose create was refused as failing alone, and
    // each then created on its own backoff.
    let t0 = Instant::now();
    let mut world = World::default();
    for (name, priority) in [("baseline", 253), ("application", 250), ("platform", 200)] {
        world.put(name, priority, "edited");
    }
    let mut fleet = fleet(t0);
    let to = t0 + 600 * S;
    let mut next_edit = t0;
    let calls = run_with(
        &mut fleet,
        &mut world,
        t0,
        to,
        S,
        Duration::ZERO,
        |now, world| {
            // Someone edits a description every 10 s: tierd's updates keep being answered.
            if now >= next_edit {
                world.put("baseline", 253, "edited again");
                next_edit = now + 10 * S;
            }
        },
        |_, _, action| match action {
            Action::Create(_) => Fault::Fail(refused("create")),
            _ => Fault::None,
        },
    );
    let updates = calls
        .iter()
        .filter(|c| matches!(c.action, Action::Update { .. }) && c.ok)
        .count();
    assert!(updates >= 3, "{updates} answered updates: {calls:#?}");
    let creates: Vec<Instant> = calls
        .iter()
        .filter(|c| matches!(c.action, Action::Create(_)))
        .map(|c| c.at)
        .collect();
    // The first wave (three missing Tiers), then one per forbidden-backoff step (1 s doubling
    // to 60 s, at least half of it with jitter: 0.5 + 1 + ... + 16 s, then 30 s steps, fit 24
    // steps in 600 s).
    assert!(
        creates.len() <= 3 + 24,
        "{} creates: {creates:?}",
        creates.len()
    );
}
