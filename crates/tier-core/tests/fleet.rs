//! The fleet stepped by hand: no runtime, no clock, time passed in (quinn-proto's `Pair` style).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_core::calico::{self, Calico, DefaultAction};
use tier_core::{
    Action, Antrea, CachedTier, Controller, DesiredSet, DesiredTier, ErrorClass, Fleet,
    FleetConfig, ObservedTier, Snapshot, TierEvent, TierId, TierSpec, TierState, WriteError,
};

/// What a [`Cluster`] needs from a controller: how its API server stores and admits writes.
trait Server: Controller {
    /// `spec` as stored at resourceVersion `rv`.
    fn stored(spec: &Self::Spec, rv: String) -> Self::Observed;
    /// Whether the server admits `action` given the `existing` Tiers.
    fn admit(existing: &[Self::Observed], action: &Action<Self>) -> Result<(), WriteError>;
}

impl Server for Antrea {
    fn stored(spec: &TierSpec, rv: String) -> ObservedTier {
        ObservedTier {
            resource_version: rv,
            ..Antrea::expected(spec)
        }
    }

    /// Antrea's API server denies a create at a priority another Tier holds.
    fn admit(existing: &[ObservedTier], action: &Action) -> Result<(), WriteError> {
        let tier = action.tier();
        if let Action::Create(_) = action
            && existing.iter().any(|t| t.priority == tier.priority)
        {
            return Err(WriteError::denied("overlaps with existing Tier"));
        }
        Ok(())
    }
}

impl Server for Calico {
    fn stored(spec: &calico::TierSpec, rv: String) -> calico::ObservedTier {
        calico::ObservedTier {
            resource_version: rv,
            ..Calico::expected(spec)
        }
    }

    /// Calico's API server refuses other values for its built-in Tiers, on any write.
    fn admit(_: &[calico::ObservedTier], action: &Action<Calico>) -> Result<(), WriteError> {
        calico::Admission::calico()
            .review_write(action.tier())
            .map_err(|denial| WriteError::denied(denial.to_string()))
    }
}

/// A one-process cluster: the store, a generation, and a view that is the store (no lag).
struct Cluster<C: Controller> {
    tiers: Vec<C::Observed>,
    generation: u64,
}

/// An Antrea cluster, the world of most tests.
type World = Cluster<Antrea>;

impl<C: Controller> Default for Cluster<C> {
    fn default() -> Self {
        Self {
            tiers: Vec::new(),
            generation: 0,
        }
    }
}

impl<C: Server> Cluster<C> {
    /// Stores `spec`, bypassing admission (as a seeded or older cluster holds it).
    fn store(&mut self, spec: &C::Spec) {
        self.generation += 1;
        self.tiers.retain(|t| t.name() != spec.name());
        self.tiers
            .push(C::stored(spec, self.generation.to_string()));
    }

    fn delete(&mut self, name: &str) {
        self.generation += 1;
        self.tiers.retain(|t| t.name() != name);
    }

    fn snapshot(&self) -> Snapshot<C> {
        Snapshot::synced(self.generation, self.tiers.clone())
    }

    /// Performs `action` as the controller's API server would.
    fn perform(&mut self, action: &Action<C>) -> Result<(), WriteError> {
        C::admit(&self.tiers, action)?;
        self.store(action.tier());
        Ok(())
    }
}

impl World {
    fn put(&mut self, name: &str, priority: i64, description: &str) {
        self.store(&TierSpec::new(name, priority, description));
    }
}

/// Drains every action of `fleet` at `now` and performs it in `world`; returns the writes.
fn drive<C: Server>(
    fleet: &mut Fleet<C>,
    world: &mut Cluster<C>,
    now: Instant,
) -> Vec<(TierId, Action<C>)> {
    let mut writes = Vec::new();
    fleet.handle_timeout(now);
    while let Some((id, action)) = fleet.poll_action(now) {
        let outcome = world.perform(&action);
        fleet.handle_outcome(id, outcome, now);
        fleet.handle_snapshot(&world.snapshot(), now);
        writes.push((id, action));
    }
    writes
}

/// Every action `fleet` asks for at `now`, none performed.
fn take_actions(fleet: &mut Fleet, now: Instant) -> Vec<(TierId, Action)> {
    std::iter::from_fn(|| fleet.poll_action(now)).collect()
}

/// A fleet over `world` whose first calls all failed with a 503 at `t0`: an outage.
fn in_an_outage(world: &World, t0: Instant) -> (Fleet, Vec<(TierId, Action)>) {
    let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&world.snapshot(), t0);
    let calls = take_actions(&mut fleet, t0);
    for (id, _) in &calls {
        fleet.handle_outcome(*id, Err(WriteError::transient("503")), t0);
    }
    (fleet, calls)
}

fn events<C: Controller>(fleet: &mut Fleet<C>) -> Vec<TierEvent> {
    std::iter::from_fn(|| fleet.poll_event()).collect()
}

fn state<'a>(status: &'a tier_core::Status, name: &str) -> &'a TierState {
    &status.tiers.iter().find(|t| t.name == name).unwrap().state
}

#[test]
fn nothing_is_decided_before_the_first_synced_snapshot() {
    let t0 = Instant::now();
    let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&Snapshot::default(), t0);
    assert_eq!(fleet.poll_action(t0), None);
    assert!(!fleet.status().synced);
    assert!(!fleet.is_converged());
}

#[test]
fn a_squatter_gets_no_create_and_is_named_until_it_goes() {
    let t0 = Instant::now();
    let mut world = World::default();
    world.put("team-a", 150, "");
    let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&world.snapshot(), t0);
    let writes = drive(&mut fleet, &mut world, t0);
    assert_eq!(writes.len(), 5, "the five others are created");
    assert!(writes.iter().all(|(_, a)| a.tier().name != "networkops"));
    let status = fleet.status();
    assert_eq!(
        state(&status, "networkops"),
        &TierState::Blocked {
            since: t0,
            blockers: vec!["team-a".into()],
            reason: "priority 150 is held by Tier team-a".into(),
        }
    );
    assert!(!status.initialized);
    // Unrelated churn: still nothing for networkops.
    for i in 1..=50u32 {
        let now = t0 + i * Duration::from_millis(100);
        world.put("unrelated", 7, &i.to_string());
        fleet.handle_snapshot(&world.snapshot(), now);
        assert!(drive(&mut fleet, &mut world, now).is_empty());
    }
    let blocked = events(&mut fleet)
        .into_iter()
        .filter(|e| matches!(e, TierEvent::Blocked { .. }))
        .count();
    assert_eq!(blocked, 1);
    // The squatter goes: created in the same step.
    let gone = t0 + Duration::from_secs(6);
    world.delete("team-a");
    fleet.handle_snapshot(&world.snapshot(), gone);
    let writes = drive(&mut fleet, &mut world, gone);
    assert_eq!(writes.len(), 1);
    assert!(fleet.is_converged());
    assert!(fleet.status().initialized);
}

#[test]
fn a_system_tier_in_the_way_unblocks_once_it_is_corrected() {
    // networkops sits at platform's priority and platform is missing: correct networkops
    // first, then create platform, with no doomed create in between.
    let t0 = Instant::now();
    let mut world = World::default();
    world.put("networkops", 200, "");
    let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&world.snapshot(), t0);
    let writes = drive(&mut fleet, &mut world, t0);
    let failed = fleet
        .status()
        .tiers
        .iter()
        .map(|t| t.outcomes.failed())
        .sum::<u64>();
    assert_eq!(failed, 0, "{writes:?}");
    assert!(fleet.is_converged(), "{:#?}", fleet.status());
}

#[test]
fn initialized_latches_per_tier_not_all_at_once() {
    // Two Tiers converge at different times, and the first drifts before the second does:
    // never all converged at one instant, yet each converged once.
    let t0 = Instant::now();
    let desired = DesiredSet::new(
        vec![TierSpec::new("a", 10, ""), TierSpec::new("b", 20, "")],
        &Default::default(),
    )
    .unwrap();
    let config = FleetConfig {
        admission: None,
        ..FleetConfig::default()
    };
    let mut fleet = Fleet::new(&desired, config, t0).unwrap();
    let mut world = World::default();
    world.put("a", 10, "");
    world.put("b", 99, "");
    fleet.handle_snapshot(&world.snapshot(), t0);
    assert!(!fleet.is_initialized());
    let mut b_write = None;
    while let Some((id, action)) = fleet.poll_action(t0) {
        b_write = Some((id, action));
    }
    let (b_id, _) = b_write.expect("b is updated");
    // a drifts while b's write is in flight...
    world.put("a", 11, "");
    fleet.handle_snapshot(&world.snapshot(), t0 + Duration::from_millis(1));
    // ...and b converges.
    fleet.handle_outcome(b_id, Ok(()), t0 + Duration::from_millis(2));
    world.put("b", 20, "");
    fleet.handle_snapshot(&world.snapshot(), t0 + Duration::from_millis(2));
    let status = fleet.status();
    assert!(!status.all_converged());
    assert!(status.initialized, "each Tier converged once: {status:#?}");
    assert!(fleet.is_initialized());
    assert_eq!(status.initialized_at, Some(t0 + Duration::from_millis(2)));
}

#[test]
fn events_come_out_in_order_and_none_is_lost() {
    let t0 = Instant::now();
    let mut world = World::default();
    world.put("team-a", 150, "");
    let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&world.snapshot(), t0);
    drive(&mut fleet, &mut world, t0);
    world.delete("team-a");
    fleet.handle_snapshot(&world.snapshot(), t0);
    drive(&mut fleet, &mut world, t0);
    // Blocked and created within one step: a status read before and after shows neither.
    let evs = events(&mut fleet);
    let networkops: Vec<&TierEvent> = evs.iter().filter(|e| e.tier() == "networkops").collect();
    assert!(
        matches!(
            networkops.as_slice(),
            [TierEvent::Blocked { .. }, TierEvent::Created { .. }]
        ),
        "{evs:?}"
    );
    assert_eq!(
        evs.iter()
            .filter(|e| matches!(e, TierEvent::Created { .. }))
            .count(),
        6
    );
    assert_eq!(fleet.poll_event(), None);
}

#[test]
fn predictions_can_be_turned_off() {
    let t0 = Instant::now();
    let mut world = World::default();
    world.put("team-a", 150, "");
    let config = FleetConfig {
        admission: None,
        ..FleetConfig::default()
    };
    let mut fleet = Fleet::new(&DesiredSet::antrea(), config, t0).unwrap();
    fleet.handle_snapshot(&world.snapshot(), t0);
    let writes = drive(&mut fleet, &mut world, t0);
    assert_eq!(writes.len(), 6, "every create is sent");
    let networkops = fleet
        .status()
        .tiers
        .into_iter()
        .find(|t| t.name == "networkops")
        .unwrap();
    assert_eq!(networkops.outcomes.of(ErrorClass::Denied), 1);
    assert_eq!(networkops.outcomes.failed(), 1);
    assert!(matches!(networkops.state, TierState::Denied { .. }));
}

#[test]
fn the_limit_of_distinct_priorities_blocks_without_naming_one_tier() {
    let t0 = Instant::now();
    let mut world = World::default();
    for p in 0..20 {
        world.put(&format!("user-{p}"), p, "");
    }
    let desired =
        DesiredSet::new(vec![TierSpec::new("mine", 100, "")], &Default::default()).unwrap();
    let mut fleet = Fleet::new(&desired, FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&world.snapshot(), t0);
    assert!(drive(&mut fleet, &mut world, t0).is_empty());
    match state(&fleet.status(), "mine") {
        TierState::Blocked {
            reason, blockers, ..
        } => {
            assert_eq!(reason, "maximum number of Tiers supported: 20");
            assert!(
                blockers.is_empty(),
                "no single Tier is to blame: {blockers:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    world.delete("user-3");
    fleet.handle_snapshot(&world.snapshot(), t0);
    assert_eq!(drive(&mut fleet, &mut world, t0).len(), 1);
}

#[test]
fn tiers_get_different_seeds_and_an_outage_is_probed_by_one_tier() {
    let t0 = Instant::now();
    let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&Snapshot::synced(1, []), t0);
    // Six creates in flight at once; the server fails them all (503).
    let ids: Vec<TierId> = take_actions(&mut fleet, t0)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids.len(), 6);
    for id in ids {
        fleet.handle_outcome(id, Err(WriteError::transient("503")), t0);
    }
    let mut deadlines: Vec<Instant> = fleet
        .machines()
        .iter()
        .map(|m| m.poll_timeout().unwrap())
        .collect();
    assert_eq!(fleet.poll_timeout(), deadlines.iter().min().copied());
    deadlines.sort();
    deadlines.dedup();
    assert_eq!(deadlines.len(), 6, "Tiers retried at one offset");
    // While the server is down only the probe retries, however much time passes.
    let probe = fleet.probe().expect("an outage");
    let later = t0 + Duration::from_secs(20);
    fleet.handle_timeout(later);
    let (id, _) = fleet.poll_action(later).expect("the probe retries");
    assert_eq!(id, probe);
    assert_eq!(
        fleet.poll_action(later),
        None,
        "the others wait for the probe"
    );
    fleet.handle_outcome(id, Err(WriteError::transient("503")), later);
    assert_eq!(
        fleet.poll_action(later),
        None,
        "the probe waits on its backoff"
    );
    // The probe role rotates: the next Tier probes on the fleet's backoff; the server answers
    // it, and everyone retries at once.
    let (next, (id, _)) = loop {
        let next = fleet.poll_timeout().unwrap();
        fleet.handle_timeout(next);
        if let Some(call) = fleet.poll_action(next) {
            break (next, call);
        }
    };
    assert!(next < later + Duration::from_secs(1), "one backoff step");
    assert_ne!(id, probe, "probing rotates");
    assert_eq!(fleet.probe(), Some(id));
    fleet.handle_outcome(id, Ok(()), next);
    assert_eq!(fleet.probe(), None);
    let others = take_actions(&mut fleet, next).len();
    assert_eq!(others, 5);
}

#[test]
fn an_outage_passes_to_another_probe_when_its_probe_converges() {
    let t0 = Instant::now();
    let mut world = World::default();
    let (mut fleet, ids) = in_an_outage(&world, t0);
    let probe = fleet.probe().unwrap();
    // Someone else creates the probe's Tier: it converges without a call, and another Tier
    // still retrying takes over as the probe.
    let (_, action) = ids.iter().find(|(id, _)| *id == probe).unwrap();
    world.perform(action).unwrap();
    fleet.handle_snapshot(&world.snapshot(), t0);
    let later = t0 + Duration::from_secs(20);
    fleet.handle_timeout(later);
    let (next, _) = fleet.poll_action(later).expect("the new probe retries");
    assert_ne!(next, probe);
    assert_eq!(fleet.probe(), Some(next));
    assert_eq!(fleet.poll_action(later), None);
    // Once the server answers, the remaining four go at once.
    fleet.handle_outcome(next, Ok(()), later);
    let writes = take_actions(&mut fleet, later).len();
    assert_eq!(writes, 4);
    assert_eq!(fleet.probe(), None);
}

#[test]
fn a_probe_that_gets_blocked_hands_the_outage_on() {
    let t0 = Instant::now();
    let mut world = World::default();
    let (mut fleet, ids) = in_an_outage(&world, t0);
    let probe = fleet.probe().unwrap();
    // A squatter takes the probe's priority: the probe is blocked, not retrying.
    let (_, action) = ids.iter().find(|(id, _)| *id == probe).unwrap();
    world.put("squatter", action.tier().priority, "");
    let later = t0 + Duration::from_secs(20);
    fleet.handle_snapshot(&world.snapshot(), later);
    fleet.handle_timeout(later);
    let (next, _) = fleet.poll_action(later).expect("another Tier probes");
    assert_ne!(next, probe);
    assert!(matches!(
        fleet.status().tiers[probe].state,
        TierState::Blocked { .. }
    ));
}

#[test]
fn a_missed_echo_lengthens_the_wait_of_every_tier_awaiting_one() {
    // The cache lags past the echo timeout. The first Tier to miss its echo writes again (a
    // fallback); the others, whose writes the server also confirmed, wait twice as long for
    // the one cache instead of meeting their own writes.
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&Snapshot::synced(1, []), t0);
    let ids: Vec<TierId> = take_actions(&mut fleet, t0)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids.len(), 6);
    let (first, rest) = ids.split_first().unwrap();
    fleet.handle_outcome(*first, Ok(()), t0);
    for id in rest {
        fleet.handle_outcome(*id, Ok(()), t0 + s);
    }
    assert_eq!(fleet.poll_timeout(), Some(t0 + 3 * s), "the echo timeout");
    fleet.handle_timeout(t0 + 3 * s);
    let (id, _) = fleet.poll_action(t0 + 3 * s).expect("the fallback write");
    assert_eq!(id, *first);
    fleet.handle_outcome(id, Err(WriteError::stale("AlreadyExists")), t0 + 3 * s);
    assert_eq!(fleet.poll_action(t0 + 3 * s), None);
    // Their echo timeout (t0 + 4 s) has become t0 + 1 s + 6 s.
    fleet.handle_timeout(t0 + 4 * s);
    assert_eq!(fleet.poll_action(t0 + 4 * s), None, "no write meets itself");
    fleet.handle_timeout(t0 + 7 * s - Duration::from_millis(1));
    assert_eq!(
        fleet.poll_action(t0 + 7 * s - Duration::from_millis(1)),
        None
    );
    // The cache shows the writes: every Tier converges without another call.
    let tiers = DesiredSet::antrea()
        .tiers()
        .iter()
        .zip(1u64..)
        .map(|(t, rv)| ObservedTier {
            name: t.name.clone(),
            priority: t.priority,
            description: t.description.clone(),
            resource_version: rv.to_string(),
            last_writer: None,
        })
        .collect::<Vec<_>>();
    fleet.handle_snapshot(&Snapshot::synced(2, tiers), t0 + 5 * s);
    assert!(fleet.is_converged());
}

#[test]
fn a_conflict_does_not_end_an_outage() {
    // A Conflict comes from storage, before admission: the webhook may still be unreachable,
    // so the Tiers waiting on the outage keep waiting for the probe.
    let t0 = Instant::now();
    let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&Snapshot::synced(1, []), t0);
    let ids: Vec<TierId> = take_actions(&mut fleet, t0)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let (last, failing) = ids.split_last().unwrap();
    for id in failing {
        fleet.handle_outcome(*id, Err(WriteError::transient("webhook unreachable")), t0);
    }
    let probe = fleet.probe().expect("an outage");
    fleet.handle_outcome(*last, Err(WriteError::stale("Conflict")), t0);
    assert_eq!(fleet.probe(), Some(probe), "the outage goes on");
    let later = t0 + Duration::from_secs(20);
    fleet.handle_timeout(later);
    let (id, _) = fleet.poll_action(later).expect("the probe retries");
    assert_eq!(id, probe);
    // The Tier whose Conflict fell back is not held by the outage; the others wait for it.
    let (id_last, _) = fleet.poll_action(later).expect("the Conflict's retry");
    assert_eq!(id_last, *last);
    assert_eq!(
        fleet.poll_action(later),
        None,
        "the others wait for the probe"
    );
    fleet.handle_outcome(id, Ok(()), later);
    assert_eq!(fleet.probe(), None, "an answer past admission ends it");
    let others = take_actions(&mut fleet, later).len();
    // The four others that waited on the outage.
    assert_eq!(others, failing.len() - 1);
}

#[test]
fn the_shared_echo_wait_comes_back_down_for_every_tier() {
    // One Tier misses its echo: every Tier waits 6 s. Later one Tier's echo comes at once:
    // every Tier is back to the 3 s echo timeout.
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut world = World::default();
    let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&Snapshot::synced(1, []), t0);
    let ids: Vec<TierId> = take_actions(&mut fleet, t0)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for id in &ids {
        fleet.handle_outcome(*id, Ok(()), t0);
    }
    fleet.handle_timeout(t0 + 3 * s);
    assert!(fleet.machines().iter().all(|m| m.echo_wait() == 6 * s));
    for (id, action) in take_actions(&mut fleet, t0 + 3 * s) {
        world.perform(&action).unwrap();
        fleet.handle_outcome(id, Ok(()), t0 + 3 * s);
    }
    fleet.handle_snapshot(&world.snapshot(), t0 + 3 * s + Duration::from_millis(100));
    assert!(fleet.is_converged());
    assert!(
        fleet.machines().iter().all(|m| m.echo_wait() == 3 * s),
        "{:?}",
        fleet
            .machines()
            .iter()
            .map(|m| m.echo_wait())
            .collect::<Vec<_>>()
    );
}

/// A fleet of `desired` on `world`, driven at `t0` until it settles.
fn calico_run(
    desired: &DesiredSet<Calico>,
    world: &mut Cluster<Calico>,
    t0: Instant,
) -> (Fleet<Calico>, Vec<(TierId, Action<Calico>)>) {
    let mut fleet = Fleet::new(desired, FleetConfig::default(), t0).unwrap();
    fleet.handle_snapshot(&world.snapshot(), t0);
    let writes = drive(&mut fleet, world, t0);
    (fleet, writes)
}

#[test]
fn an_empty_calico_cluster_gets_its_three_built_in_tiers() {
    let t0 = Instant::now();
    let mut world = Cluster::<Calico>::default();
    let (mut fleet, writes) = calico_run(&DesiredSet::calico(), &mut world, t0);
    let created: Vec<&str> = writes
        .iter()
        .map(|(_, a)| match a {
            Action::Create(tier) => tier.name(),
            Action::Update { .. } => panic!("no update in an empty cluster: {a:?}"),
        })
        .collect();
    assert_eq!(created, ["default", "kube-admin", "kube-baseline"]);
    assert!(fleet.is_converged(), "{:#?}", fleet.status());
    assert!(fleet.status().initialized);
    assert!(world.snapshot().tiers.unwrap().values().all(|t| {
        DesiredSet::calico()
            .get(t.name())
            .is_some_and(|want| Calico::in_sync(want, t))
    }));
    assert!(drive(&mut fleet, &mut world, t0 + Duration::from_secs(60)).is_empty());
}

#[test]
fn a_calico_built_in_with_a_wrong_order_is_updated() {
    let t0 = Instant::now();
    let mut world = Cluster::<Calico>::default();
    for tier in calico::built_ins() {
        world.store(&tier);
    }
    // An older install, or someone with the CRD's validation off, left `default` wrong.
    let wrong = calico::TierSpec::new(calico::DEFAULT, Some(5.0), DefaultAction::Deny);
    world.store(&wrong);
    let rv = world
        .snapshot()
        .observe(calico::DEFAULT)
        .resource_version()
        .map(str::to_owned);
    let (mut fleet, writes) = calico_run(&DesiredSet::calico(), &mut world, t0);
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(
        writes[0].1,
        Action::Update {
            tier: calico::built_ins()[0].clone(),
            resource_version: rv.unwrap(),
        }
    );
    assert!(fleet.is_converged());
    let corrected: Vec<String> = events(&mut fleet).iter().map(ToString::to_string).collect();
    // Only the order was wrong: the event names it alone.
    assert_eq!(corrected, ["corrected the order of Tier default"]);
}

#[test]
fn two_calico_tiers_at_one_order_are_fine() {
    let t0 = Instant::now();
    let mut world = Cluster::<Calico>::default();
    // A user Tier sits at kube-admin's order: Calico allows it, so nothing blocks.
    world.store(&calico::TierSpec::new(
        "mine",
        Some(calico::KUBE_ADMIN_ORDER),
        DefaultAction::Deny,
    ));
    let desired = DesiredSet::<Calico>::new(
        [
            calico::built_ins().to_vec(),
            vec![
                calico::TierSpec::new("team-a", Some(50.0), DefaultAction::Pass),
                calico::TierSpec::new("team-b", Some(50.0), DefaultAction::Deny),
                calico::TierSpec::new("last", None, DefaultAction::Deny),
            ],
        ]
        .concat(),
        &calico::Rules::default(),
    )
    .unwrap();
    let (fleet, writes) = calico_run(&desired, &mut world, t0);
    assert_eq!(writes.len(), 6, "{writes:?}");
    assert!(fleet.is_converged(), "{:#?}", fleet.status());
    let blocked = fleet
        .status()
        .tiers
        .iter()
        .filter(|t| matches!(t.state, TierState::Blocked { .. }))
        .count();
    assert_eq!(blocked, 0);
}
