//! Issue 15 on virtual time: every write loop is bounded and reported, and no Tier waits on
//! another. The fleet is stepped by hand against a one-process world whose faults are chosen
//! per call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_core::{
    Action, DesiredSet, Fleet, FleetConfig, ObservedTier, Snapshot, TierId, TierState, WriteError,
};

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// A one-process cluster whose view is the store (no lag).
#[derive(Default)]
struct World {
    tiers: Vec<ObservedTier>,
    generation: u64,
}

impl World {
    fn put(&mut self, name: &str, priority: i64, description: &str) {
        self.generation += 1;
        self.tiers.retain(|t| t.name != name);
        self.tiers.push(ObservedTier {
            name: name.into(),
            priority,
            description: description.into(),
            resource_version: self.generation.to_string(),
        });
    }

    #[allow(dead_code)]
    fn delete(&mut self, name: &str) {
        self.generation += 1;
        self.tiers.retain(|t| t.name != name);
    }

    fn get(&self, name: &str) -> Option<&ObservedTier> {
        self.tiers.iter().find(|t| t.name == name)
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot::synced(self.generation, self.tiers.clone())
    }

    /// Performs `action` as the API server would (stale writes are Conflicts).
    fn perform(&mut self, action: &Action) -> Result<(), WriteError> {
        let tier = action.tier();
        match action {
            Action::Create(_) if self.get(&tier.name).is_some() => {
                return Err(WriteError::stale("AlreadyExists"));
            }
            Action::Create(_) if self.tiers.iter().any(|t| t.priority == tier.priority) => {
                return Err(WriteError::denied("overlaps with existing Tier"));
            }
            Action::Update {
                resource_version, ..
            } if self.get(&tier.name).map(|t| &t.resource_version) != Some(resource_version) => {
                return Err(WriteError::stale("Conflict"));
            }
            _ => {}
        }
        self.put(&tier.name, tier.priority, &tier.description);
        Ok(())
    }
}

/// What happens to one call.
enum Fault {
    /// The world performs it.
    None,
    /// It fails with this error, the world unchanged.
    Fail(WriteError),
    /// It never returns (until the test hands in an outcome).
    Hang,
}

/// One call the fleet made.
#[derive(Debug)]
#[allow(dead_code)]
struct Call {
    at: Instant,
    id: TierId,
    action: Action,
    ok: bool,
}

/// Runs `fleet` against `world` from `from` until `to`, waking at every timeout (and at least
/// every `tick`); `fault` decides each call's fate. Returns every call made.
fn run(
    fleet: &mut Fleet,
    world: &mut World,
    from: Instant,
    to: Instant,
    tick: Duration,
    mut fault: impl FnMut(Instant, TierId, &Action) -> Fault,
) -> Vec<Call> {
    let mut calls = Vec::new();
    let mut now = from;
    while now <= to {
        fleet.handle_snapshot(&world.snapshot(), now);
        fleet.handle_timeout(now);
        while let Some((id, action)) = fleet.poll_action(now) {
            let ok = match fault(now, id, &action) {
                Fault::None => {
                    let outcome = world.perform(&action);
                    let ok = outcome.is_ok();
                    fleet.handle_outcome(id, outcome, now);
                    ok
                }
                Fault::Fail(error) => {
                    fleet.handle_outcome(id, Err(error), now);
                    false
                }
                Fault::Hang => false,
            };
            fleet.handle_snapshot(&world.snapshot(), now);
            calls.push(Call {
                at: now,
                id,
                action,
                ok,
            });
        }
        let next = fleet
            .poll_timeout()
            .map_or(now + tick, |t| t.min(now + tick));
        now = next.max(now + MS);
    }
    calls
}

/// How long another Tier's hold may delay a Tier whose own backoff (at most the 10 s cap) is
/// over: the outage release, 5 s (`tier_core::fleet::OUTAGE_RELEASE`).
const OTHERS_BOUND: Duration = Duration::from_secs(15);

fn fleet(t0: Instant) -> Fleet {
    Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0)
}

fn id_of(fleet: &Fleet, name: &str) -> TierId {
    fleet
        .machines()
        .iter()
        .position(|m| m.spec().name == name)
        .unwrap()
}

fn converged(fleet: &Fleet, name: &str) -> bool {
    fleet.status().tiers[id_of(fleet, name)].state == TierState::Converged
}

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

fn refused(verb: &str) -> WriteError {
    WriteError::forbidden(
        format!("tiers.crd.antrea.io is forbidden: User \"tierd\" cannot {verb} resource"),
        Some(format!("{verb} tiers.crd.antrea.io")),
    )
}

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
