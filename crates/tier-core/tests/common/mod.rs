//! The harness shared by the fleet's virtual-time tests: a one-process world whose faults are
//! chosen per call, and a loop that runs a fleet against it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_core::{
    Action, DesiredSet, Fleet, FleetConfig, ObservedTier, Snapshot, TierEvent, TierId, TierState,
    WriteError,
};

pub const S: Duration = Duration::from_secs(1);
pub const MS: Duration = Duration::from_millis(1);

/// A one-process cluster whose view is the store (no lag).
#[derive(Default)]
pub struct World {
    pub tiers: Vec<ObservedTier>,
    pub generation: u64,
}

impl World {
    pub fn put(&mut self, name: &str, priority: i64, description: &str) {
        self.generation += 1;
        self.tiers.retain(|t| t.name != name);
        self.tiers.push(ObservedTier {
            name: name.into(),
            priority,
            description: description.into(),
            resource_version: self.generation.to_string(),
            last_writer: None,
        });
    }

    pub fn delete(&mut self, name: &str) {
        self.generation += 1;
        self.tiers.retain(|t| t.name != name);
    }

    pub fn get(&self, name: &str) -> Option<&ObservedTier> {
        self.tiers.iter().find(|t| t.name == name)
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot::synced(self.generation, self.tiers.clone())
    }

    /// Performs `action` as the API server would (stale writes are Conflicts).
    pub fn perform(&mut self, action: &Action) -> Result<(), WriteError> {
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
pub enum Fault {
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
pub struct Call {
    pub at: Instant,
    pub id: TierId,
    pub action: Action,
    pub ok: bool,
}

/// Runs `fleet` against `world` from `from` until `to`, waking at every timeout (and at least
/// every `tick`); `fault` decides each call's fate. Returns every call made.
pub fn run(
    fleet: &mut Fleet,
    world: &mut World,
    from: Instant,
    to: Instant,
    tick: Duration,
    fault: impl FnMut(Instant, TierId, &Action) -> Fault,
) -> Vec<Call> {
    run_with(
        fleet,
        world,
        from,
        to,
        tick,
        Duration::ZERO,
        |_, _| {},
        fault,
    )
}

/// [`run`], with tierd's cache showing the world as it was `lag` ago, and `actor` changing the
/// world at every step (before tierd looks).
#[allow(clippy::too_many_arguments)]
pub fn run_with(
    fleet: &mut Fleet,
    world: &mut World,
    from: Instant,
    to: Instant,
    tick: Duration,
    lag: Duration,
    mut actor: impl FnMut(Instant, &mut World),
    mut fault: impl FnMut(Instant, TierId, &Action) -> Fault,
) -> Vec<Call> {
    let mut calls = Vec::new();
    let mut history: Vec<(Instant, Snapshot)> = vec![(from, world.snapshot())];
    let view = |history: &[(Instant, Snapshot)], now: Instant| {
        history
            .iter()
            .rev()
            .find(|(at, _)| *at + lag <= now)
            .map_or_else(|| history[0].1.clone(), |(_, s)| s.clone())
    };
    let mut now = from;
    while now <= to {
        actor(now, world);
        history.push((now, world.snapshot()));
        // Only what the lag still hides is kept (and the last one it shows).
        let shown = history.iter().rposition(|(at, _)| *at + lag <= now);
        if let Some(keep) = shown.filter(|k| *k > 0) {
            history.drain(..keep);
        }
        fleet.handle_snapshot(&view(&history, now), now);
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
            actor(now, world);
            history.push((now, world.snapshot()));
            fleet.handle_snapshot(&view(&history, now), now);
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

pub fn fleet(t0: Instant) -> Fleet {
    Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0).unwrap()
}

pub fn id_of(fleet: &Fleet, name: &str) -> TierId {
    fleet
        .machines()
        .iter()
        .position(|m| m.spec().name == name)
        .unwrap()
}

pub fn converged(fleet: &Fleet, name: &str) -> bool {
    fleet.status().tiers[id_of(fleet, name)].state == TierState::Converged
}

pub fn refused(verb: &str) -> WriteError {
    WriteError::forbidden(
        format!("tiers.crd.antrea.io is forbidden: User \"tierd\" cannot {verb} resource"),
        Some(format!("{verb} tiers.crd.antrea.io")),
    )
}

pub fn events(fleet: &mut Fleet) -> Vec<TierEvent> {
    std::iter::from_fn(|| fleet.poll_event()).collect()
}
