//! The fleet: every desired Tier's machine and all cross-Tier logic, synchronous and sans-I/O.

use std::collections::VecDeque;
use std::time::Instant;

use crate::antrea::Antrea;
use crate::backoff::Backoff;
use crate::controller::{Controller, DesiredTier};
use crate::error::{ErrorClass, WriteError};
use crate::machine::{Action, ConfigError, MachineConfig, TierEvent, TierMachine, WriteKind};
use crate::observe::{Generation, Snapshot};
use crate::spec::DesiredSet;
use crate::status::Status;

/// Which machine of a fleet an action or outcome belongs to: its index in the desired set.
pub type TierId = usize;

/// Configuration of a [`Fleet`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetConfig<C: Controller = Antrea> {
    /// Timing of every per-Tier machine.
    pub machine: MachineConfig,
    /// The admission rules the server applies to creates, used to predict denials from the
    /// observed set; `None` predicts nothing (every create is sent). Default: the controller's
    /// ([`Controller::default_admission`]).
    pub admission: Option<C::Admission>,
    /// Seed of the jitter; each Tier's machine derives its own from it.
    pub seed: u64,
}

impl<C: Controller> Default for FleetConfig<C> {
    fn default() -> Self {
        Self {
            machine: MachineConfig::default(),
            admission: C::default_admission(),
            seed: 0,
        }
    }
}

/// How long a Tier whose own retry is due may be held by another Tier's outage probe: then
/// it retries on its own. This bounds what an outage (or a failure mistaken for one) costs a
/// Tier that could be written: its own wait, then at most `OUTAGE_RELEASE`.
pub const OUTAGE_RELEASE: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a probe's call may stay unanswered before the next Tier probes instead (a call
/// that hangs until the call timeout holds nobody).
pub const PROBE_RELEASE: std::time::Duration = std::time::Duration::from_secs(5);

/// Failures of one Tier, each followed by an answer to another Tier, after which its failures
/// are its own object's: they no longer start or prolong a fleet-wide hold.
pub const LONE_FAILURES: u32 = 3;

/// What a fleet-wide hold is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldCause {
    /// Calls fail transiently (5xx, timeouts): the server or its webhook is down. Only the
    /// probe retries Tiers that failed so; others, whose writes may still pass, are not held.
    Outage,
    /// A create was refused for a missing permission: RBAC cannot restrict `create` by name,
    /// so every create would be refused alike. Only the probe creates; updates are not held.
    CreateForbidden,
}

/// Which answers to other Tiers show that a Tier's failure was its own object's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FailedFor {
    /// A transient failure: any answer shows the server is up.
    AnyCall,
    /// A refusal of one verb (RBAC is per verb): only an answered call of that verb.
    Verb(WriteKind),
}

/// A fleet-wide hold: one Tier (the probe) calls for all, on the fleet's own backoff, and the
/// role rotates after each failed probe.
#[derive(Clone, Debug)]
struct Hold {
    probe: TierId,
    /// Failed probes in a row.
    attempt: u32,
    /// The probe calls no earlier.
    next_at: Instant,
    /// When the probe's call in flight was sent.
    sent_at: Option<Instant>,
}

/// Every desired Tier's [`TierMachine`], and what spans them.
///
/// A [`Fleet`] is to [`TierMachine`] what quinn-proto's `Endpoint` is to its `Connection`: it
/// fans a [`Snapshot`] out to the machines, predicts from the observed set which creates the
/// admission rules would deny (calling the controller's [`Controller::predict`]) and
/// names the Tiers in the way, derives each Tier's jitter seed from one seed, latches
/// "initialized" per Tier, queues every event and shares what one call learns about the server:
/// after a transient failure only one Tier (the *probe*) retries the Tiers that failed so, and
/// after a create refused for a missing permission only one Tier creates, each on the fleet's
/// backoff with the role rotating among the Tiers concerned; an answer ends the hold, a timer
/// releases it ([`OUTAGE_RELEASE`], [`PROBE_RELEASE`]), and a failure only one object gets is
/// recognised as its own ([`LONE_FAILURES`]). It owns no timer and does no I/O; the async
/// [`Driver`](crate::Driver) is a thin loop around it, and tests step it by hand.
///
/// Call order, over and over: inputs ([`handle_snapshot`](Fleet::handle_snapshot),
/// [`handle_outcome`](Fleet::handle_outcome), [`handle_timeout`](Fleet::handle_timeout)), then
/// outputs ([`poll_action`](Fleet::poll_action) until `None`, [`poll_event`](Fleet::poll_event)
/// until `None`, [`poll_timeout`](Fleet::poll_timeout)), then [`status`](Fleet::status).
///
/// ```
/// use std::time::Instant;
/// use tier_core::{Action, DesiredSet, Fleet, FleetConfig, ObservedTier, Snapshot, TierState};
///
/// let now = Instant::now();
/// let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), now)?;
/// let squatter = ObservedTier {
///     name: "team-a".into(),
///     priority: 150,
///     description: String::new(),
///     resource_version: "1".into(),
///     last_writer: None,
/// };
/// fleet.handle_snapshot(&Snapshot::synced(1, [squatter]), now);
/// let mut creates = Vec::new();
/// while let Some((_, action)) = fleet.poll_action(now) {
///     creates.push(action.tier().name.clone());
/// }
/// assert!(!creates.contains(&"networkops".to_owned()), "no doomed create");
/// let status = fleet.status();
/// let networkops = status.tiers.iter().find(|t| t.name == "networkops").unwrap();
/// assert_eq!(
///     networkops.to_string(),
///     "networkops blocked: priority 150 is held by Tier team-a"
/// );
/// # Ok::<(), tier_core::ConfigError>(())
/// ```
///
///
/// # Liveness
///
/// A Tier that the world allows to be written is written within a bound of the world allowing
/// it, independent of every other Tier: its own wait (the cap of the backoff its last error put
/// it on, or its write budget's `hold_cap`; 60 s with the defaults), plus at most
/// [`OUTAGE_RELEASE`] (10 s) of a fleet-wide [`HoldCause::Outage`] it is held by. A probe whose
/// call hangs is replaced after [`PROBE_RELEASE`]; a Tier whose failures follow answers to
/// others [`LONE_FAILURES`] times is no longer taken for an outage. Under a
/// [`HoldCause::CreateForbidden`] hold, creates are probed by one Tier at a time on the
/// forbidden backoff, so once the permission is granted every create goes within one probe
/// step (at most `forbidden_backoff.cap`, plus [`PROBE_RELEASE`]). A create that would be
/// denied only together with another create still unseen by the cache waits for that one's
/// answer and echo (the call timeout plus the echo wait), then is predicted again.
#[derive(Debug)]
pub struct Fleet<C: Controller = Antrea> {
    machines: Vec<TierMachine<C>>,
    admission: Option<C::Admission>,
    config: MachineConfig,
    rng: fastrand::Rng,
    synced: bool,
    generation: Generation,
    started_at: Instant,
    initialized_at: Option<Instant>,
    events: VecDeque<TierEvent>,
    /// The latest snapshot: creates are predicted against it and each other.
    snapshot: Snapshot<C>,
    /// The echo wait shared by every machine (see [`TierMachine::echo_wait`]).
    echo_wait: std::time::Duration,
    /// The outage hold, if one is on.
    outage: Option<Hold>,
    /// The create-forbidden hold, if one is on.
    create_forbidden: Option<Hold>,
    /// Per Tier: since when it has been due but held by the outage.
    held_since: Vec<Option<Instant>>,
    /// Per Tier: whether it failed transiently (or was refused a create) since the last answer
    /// that would show the failure was its own.
    failed_since_answer: Vec<Option<FailedFor>>,
    /// Per Tier: failures of its own, each followed by another Tier's answer (see
    /// [`LONE_FAILURES`]).
    lone: Vec<u32>,
    /// Whether this replica may start writes (see [`Fleet::handle_leadership`]).
    may_write: bool,
}

impl<C: Controller> Fleet<C> {
    /// A fleet for `desired`, started at `now`. Nothing is decided before the first synced
    /// snapshot.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field of `config.machine` out of its range.
    pub fn new(
        desired: &DesiredSet<C>,
        config: FleetConfig<C>,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.machine.validate()?;
        let machines = desired
            .tiers()
            .iter()
            .zip(0u64..)
            .map(|(spec, i)| {
                let seed = config.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                TierMachine::new(spec.clone(), config.machine.clone(), seed)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let n = machines.len();
        Ok(Self {
            machines,
            admission: config.admission,
            config: config.machine.clone(),
            rng: fastrand::Rng::with_seed(config.seed.rotate_left(17) ^ 0x686f_6c64),
            synced: false,
            generation: 0,
            started_at: now,
            initialized_at: None,
            events: VecDeque::new(),
            snapshot: Snapshot::default(),
            echo_wait: config.machine.echo_timeout,
            outage: None,
            create_forbidden: None,
            held_since: vec![None; n],
            failed_since_answer: vec![None; n],
            lone: vec![0; n],
            may_write: true,
        })
    }

    /// The machines, in the order of the desired set.
    pub fn machines(&self) -> &[TierMachine<C>] {
        &self.machines
    }

    /// Input: the cache's current view. Each machine gets its Tier's observation and the
    /// deletions the lister saw ([`TierMachine::handle_snapshot`]), and each machine that needs
    /// a create gets the prediction of the admission rules.
    pub fn handle_snapshot(&mut self, snapshot: &Snapshot<C>, now: Instant) {
        self.snapshot = snapshot.clone();
        self.synced |= snapshot.is_synced();
        self.generation = self.generation.max(snapshot.generation);
        for machine in &mut self.machines {
            machine.handle_snapshot(snapshot, now);
            let blocker = match &self.admission {
                Some(policy) if machine.wants_create() => {
                    C::predict(policy, machine.spec(), snapshot)
                }
                _ => None,
            };
            machine.handle_blocker(blocker, now);
        }
        self.latch(now);
    }

    /// Input: the outcome of the call `poll_action` asked `tier` to make. Unknown ids are
    /// ignored.
    pub fn handle_outcome(&mut self, tier: TierId, outcome: Result<(), WriteError>, now: Instant) {
        let Some(machine) = self.machines.get_mut(tier) else {
            return;
        };
        let Some(kind) = machine.in_flight_kind() else {
            return;
        };
        let error = outcome.as_ref().err();
        let class = error.map(|e| e.class);
        // RBAC's message names the verb: `create resource "tiers" ...`.
        let create_refused = kind == WriteKind::Create
            && error.is_some_and(|e| {
                e.class == ErrorClass::Forbidden
                    && e.permission
                        .as_deref()
                        .is_some_and(|p| p.starts_with("create"))
            });
        machine.handle_outcome(outcome, now);
        for hold in [&mut self.outage, &mut self.create_forbidden]
            .into_iter()
            .flatten()
            .filter(|h| h.probe == tier)
        {
            hold.sent_at = None;
        }
        let lone = self.lone.get(tier).is_some_and(|n| *n >= LONE_FAILURES);
        match class {
            Some(ErrorClass::Transient) => {
                self.failed(tier, FailedFor::AnyCall);
                if !lone {
                    let backoff = self.config.backoff;
                    self.hold_failed(HoldCause::Outage, tier, backoff, now);
                }
                if kind == WriteKind::Create {
                    // The create probe learned nothing: the next Tier probes.
                    let backoff = self.config.forbidden_backoff;
                    if self
                        .create_forbidden
                        .as_ref()
                        .is_some_and(|h| h.probe == tier)
                    {
                        self.hold_failed(HoldCause::CreateForbidden, tier, backoff, now);
                    }
                }
            }
            // A Conflict comes from storage, before admission runs: it does not show that the
            // whole write path (a webhook that could not be reached) is back. The outage goes
            // on; if this was the probe, the next Tier still retrying takes over. A create
            // that met an existing object passed authorization, though.
            Some(ErrorClass::Stale) => {
                if kind == WriteKind::Create {
                    self.create_forbidden = None;
                }
            }
            Some(ErrorClass::Forbidden) if create_refused => {
                // RBAC is per verb: only another create that passes says this one was alone.
                self.failed(tier, FailedFor::Verb(WriteKind::Create));
                if !lone {
                    let backoff = self.config.forbidden_backoff;
                    self.hold_failed(HoldCause::CreateForbidden, tier, backoff, now);
                }
            }
            // A refused update says nothing about the server or about creates.
            Some(ErrorClass::Forbidden) => {}
            None | Some(ErrorClass::Denied | ErrorClass::NotInstalled) => {
                self.answered(tier, kind, now);
                if kind == WriteKind::Create {
                    self.create_forbidden = None;
                }
            }
        }
        self.latch(now);
    }

    /// `tier`'s call failed in a way that could be the server's (or the user's) for all; `what`
    /// says which answers to other Tiers would show it was not.
    fn failed(&mut self, tier: TierId, what: FailedFor) {
        if let Some(flag) = self.failed_since_answer.get_mut(tier) {
            *flag = Some(what);
        }
    }

    /// The server answered `tier`'s call of `kind`: its failures are not the fleet's. Every
    /// other Tier that failed since the last answer in a way this answer disproves (a transient
    /// failure: any answer; a refused create: an answered create) failed alone once more, and
    /// the outage is over: whoever waits on a transient backoff retries now.
    fn answered(&mut self, tier: TierId, kind: WriteKind, now: Instant) {
        for (id, (flag, lone)) in self
            .failed_since_answer
            .iter_mut()
            .zip(self.lone.iter_mut())
            .enumerate()
        {
            if id == tier {
                *lone = 0;
                *flag = None;
                continue;
            }
            let disproved = match flag {
                Some(FailedFor::AnyCall) => true,
                Some(FailedFor::Verb(verb)) => *verb == kind,
                None => false,
            };
            if disproved {
                *flag = None;
                *lone = lone.saturating_add(1);
            }
        }
        if self.outage.take().is_some() {
            for machine in &mut self.machines {
                machine.handle_server_answered(now);
            }
        }
        self.held_since.iter_mut().for_each(|h| *h = None);
    }

    /// A call of `tier` failed with `cause`: start the hold, or, if `tier` was its probe, pass
    /// the role on to the next Tier the hold concerns, on the fleet's backoff.
    fn hold_failed(&mut self, cause: HoldCause, tier: TierId, backoff: Backoff, now: Instant) {
        let unit = self.rng.f64();
        let slot = match cause {
            HoldCause::Outage => &mut self.outage,
            HoldCause::CreateForbidden => &mut self.create_forbidden,
        };
        match slot {
            None => {
                *slot = Some(Hold {
                    probe: tier,
                    attempt: 1,
                    next_at: now,
                    sent_at: None,
                });
            }
            Some(hold) if hold.probe == tier => {
                hold.attempt = hold.attempt.saturating_add(1);
                hold.next_at = saturating_add(now, backoff.delay(hold.attempt, None, unit));
                self.rotate(cause);
            }
            Some(_) => {}
        }
    }

    /// Passes the probe of the hold of `cause` to the next Tier it concerns, round robin.
    fn rotate(&mut self, cause: HoldCause) {
        let n = self.machines.len();
        let Some(hold) = self.hold(cause) else {
            return;
        };
        let from = hold.probe;
        let next = (1..=n)
            .map(|k| (from + k) % n)
            .find(|id| self.concerns(cause, *id));
        if let (Some(next), Some(hold)) = (next, self.hold_mut(cause)) {
            hold.probe = next;
            hold.sent_at = None;
        }
    }

    fn hold(&self, cause: HoldCause) -> Option<&Hold> {
        match cause {
            HoldCause::Outage => self.outage.as_ref(),
            HoldCause::CreateForbidden => self.create_forbidden.as_ref(),
        }
    }

    fn hold_mut(&mut self, cause: HoldCause) -> Option<&mut Hold> {
        match cause {
            HoldCause::Outage => self.outage.as_mut(),
            HoldCause::CreateForbidden => self.create_forbidden.as_mut(),
        }
    }

    /// Whether the hold of `cause` concerns Tier `id`: it failed transiently (an outage) or
    /// needs a create (a create refused), and its failures are not known to be its own.
    fn concerns(&self, cause: HoldCause, id: TierId) -> bool {
        let Some(machine) = self.machines.get(id) else {
            return false;
        };
        if self.lone.get(id).is_some_and(|n| *n >= LONE_FAILURES) {
            return false;
        }
        let create_refused = machine.wants_create() && !machine.is_converged();
        match cause {
            // A create refused for the whole fleet is the stronger fact: such a Tier is held
            // by that hold alone.
            HoldCause::Outage => {
                machine.is_retrying_transient()
                    && !(create_refused && self.create_forbidden.is_some())
            }
            HoldCause::CreateForbidden => create_refused,
        }
    }

    /// Keeps each hold's probe one the hold concerns (a probe that converged, got blocked or
    /// whose call hangs hands on); a hold that concerns no Tier is over.
    fn hand_on(&mut self, now: Instant) {
        for cause in [HoldCause::Outage, HoldCause::CreateForbidden] {
            let Some(hold) = self.hold(cause) else {
                continue;
            };
            let probe = hold.probe;
            let hung = hold
                .sent_at
                .is_some_and(|at| now >= saturating_add(at, PROBE_RELEASE));
            if self.concerns(cause, probe) && !hung {
                continue;
            }
            let any = (0..self.machines.len()).any(|id| id != probe && self.concerns(cause, id));
            if any {
                self.rotate(cause);
            } else if hung {
                // Nobody to hand on to: the release is spent; the call ends by itself (the
                // driver's call timeout bounds it).
                if let Some(hold) = self.hold_mut(cause) {
                    hold.sent_at = None;
                }
            } else {
                match cause {
                    HoldCause::Outage => self.outage = None,
                    HoldCause::CreateForbidden => self.create_forbidden = None,
                }
            }
        }
    }

    /// Whether Tier `id` wants a create the cache allows but that, together with the creates
    /// of other Tiers sent and not yet shown by the cache, the admission rules would deny (for
    /// example, with Antrea, two creates that jointly exceed its limit of distinct priorities).
    fn jointly_denied(&self, id: TierId) -> bool {
        let (Some(policy), Some(tiers)) = (&self.admission, &self.snapshot.tiers) else {
            return false;
        };
        let Some(machine) = self.machines.get(id) else {
            return false;
        };
        // A create the cache alone denies is the machine's own business (it is blocked).
        if !machine.is_ready()
            || !machine.wants_create()
            || C::predict(policy, machine.spec(), &self.snapshot).is_some()
        {
            return false;
        }
        let unseen: Vec<&C::Spec> = self
            .machines
            .iter()
            .enumerate()
            .filter(|(other, m)| *other != id && m.has_unseen_create())
            .map(|(_, m)| m.spec())
            .filter(|spec| !tiers.contains_key(spec.name()))
            .collect();
        if unseen.is_empty() {
            return false;
        }
        let mut joint = (**tiers).clone();
        for spec in unseen {
            joint.insert(spec.name().to_owned(), C::expected(spec));
        }
        let joint = Snapshot {
            generation: self.snapshot.generation,
            tiers: Some(std::sync::Arc::new(joint)),
            deleted: self.snapshot.deleted.clone(),
        };
        C::predict(policy, machine.spec(), &joint).is_some()
    }

    /// Which fleet-wide hold keeps Tier `id` from calling at `now`, if any.
    fn held_by(&self, id: TierId, now: Instant) -> Option<HoldCause> {
        [HoldCause::Outage, HoldCause::CreateForbidden]
            .into_iter()
            .find(|cause| {
                let Some(hold) = self.hold(*cause) else {
                    return false;
                };
                if !self.concerns(*cause, id) {
                    return false;
                }
                if hold.probe == id {
                    return now < hold.next_at || hold.sent_at.is_some();
                }
                let released = *cause == HoldCause::Outage
                    && self
                        .held_since
                        .get(id)
                        .copied()
                        .flatten()
                        .is_some_and(|since| now >= saturating_add(since, OUTAGE_RELEASE));
                !released
            })
    }

    /// Input: time has passed; fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for machine in &mut self.machines {
            machine.handle_timeout(now);
        }
        self.latch(now);
    }

    /// Input: whether this replica may start writes: it leads (holds the Lease), or nobody
    /// elects a leader (the default: a fleet starts permitted). While it may not (a *standby*),
    /// [`poll_action`](Self::poll_action) returns `None`; everything else goes on as before:
    /// observations, outcomes of calls already in flight, timers, the initialized latch and
    /// the status, which says [`Status::standby`]. A write that was due resumes at the first
    /// poll after the gate opens again (its own waits still stand); the fleet-wide holds'
    /// release timers restart then, so none fires for time spent on standby.
    pub fn handle_leadership(&mut self, may_write: bool, now: Instant) {
        if self.may_write == may_write {
            return;
        }
        self.may_write = may_write;
        // Time spent on standby is nobody's outage: no Tier is released for it, and a probe's
        // call in flight is replaced only after its own PROBE_RELEASE.
        self.held_since.iter_mut().for_each(|h| *h = None);
        self.latch(now);
    }

    /// Whether this replica may start writes (see [`handle_leadership`](Self::handle_leadership)).
    pub fn may_write(&self) -> bool {
        self.may_write
    }

    /// Output: the next call to make, with the Tier it belongs to. Call until `None`; always
    /// `None` while the replica may not write ([`handle_leadership`](Self::handle_leadership)).
    pub fn poll_action(&mut self, now: Instant) -> Option<(TierId, Action<C>)> {
        if !self.may_write {
            self.collect_events();
            return None;
        }
        // Polling a probe can end what made it one (it turns out blocked or held off): then
        // hand the role on and poll again, so no Tier waits on a probe that will not call.
        for _ in 0..=self.machines.len() {
            self.hand_on(now);
            let probes = (self.probe(), self.create_probe());
            let found = self.poll_once(now);
            self.collect_events();
            if found.is_some() {
                return found;
            }
            self.hand_on(now);
            if probes == (self.probe(), self.create_probe()) {
                return None;
            }
        }
        None
    }

    fn poll_once(&mut self, now: Instant) -> Option<(TierId, Action<C>)> {
        for id in 0..self.machines.len() {
            if let Some(cause) = self.held_by(id, now) {
                // The outage's release timer runs for a Tier that is due and not its probe
                // (a create refusal is released by its probe's answer or rotation only).
                let probe = self.hold(cause).map(|h| h.probe);
                if cause == HoldCause::Outage
                    && probe != Some(id)
                    && self.machines.get(id).is_some_and(TierMachine::is_ready)
                    && let Some(since) = self.held_since.get_mut(id)
                {
                    since.get_or_insert(now);
                } else if let Some(since) = self.held_since.get_mut(id) {
                    *since = None;
                }
                continue;
            }
            if let Some(since) = self.held_since.get_mut(id) {
                *since = None;
            }
            if self.jointly_denied(id) {
                // Another create, sent but not yet in the cache, would make this one fail:
                // it waits for that one's answer (and echo), then is predicted again.
                continue;
            }
            let Some(machine) = self.machines.get_mut(id) else {
                continue;
            };
            if let Some(action) = machine.poll_action(now) {
                for hold in [&mut self.outage, &mut self.create_forbidden]
                    .into_iter()
                    .flatten()
                {
                    if hold.probe == id {
                        hold.sent_at = Some(now);
                    }
                }
                return Some((id, action));
            }
        }
        None
    }

    /// The Tier probing a server outage, if one is under way: only it retries the Tiers that
    /// failed transiently, until the server answers.
    pub fn probe(&self) -> Option<TierId> {
        self.outage.as_ref().map(|h| h.probe)
    }

    /// The Tier probing whether creates are allowed again after a create was refused for a
    /// missing permission, if such a hold is on: only it creates.
    pub fn create_probe(&self) -> Option<TierId> {
        self.create_forbidden.as_ref().map(|h| h.probe)
    }

    /// Whether Tier `id`'s failures were seen to be its own object's ([`LONE_FAILURES`]):
    /// they hold no other Tier.
    pub fn fails_alone(&self, id: TierId) -> bool {
        self.lone.get(id).is_some_and(|n| *n >= LONE_FAILURES)
    }

    /// Output: the earliest instant at which [`handle_timeout`](Self::handle_timeout) is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let machines = self.machines.iter().filter_map(TierMachine::poll_timeout);
        if !self.may_write {
            // On standby nothing is polled: the holds' steps and releases would wake the
            // driver for calls it may not make. The machines' own timers still run.
            return machines.min();
        }
        // A held Tier that is due wakes at its release; a probe that is due at the hold's
        // next step, or when its hanging call is replaced.
        let released = self
            .held_since
            .iter()
            .flatten()
            .map(|since| saturating_add(*since, OUTAGE_RELEASE));
        let probes = [&self.outage, &self.create_forbidden]
            .into_iter()
            .flatten()
            .filter_map(|hold| match hold.sent_at {
                Some(at) => Some(saturating_add(at, PROBE_RELEASE)),
                None => self
                    .machines
                    .get(hold.probe)
                    .filter(|m| m.is_ready())
                    .map(|_| hold.next_at),
            });
        machines.chain(released).chain(probes).min()
    }

    /// Output: the next event, in the order they happened (per Tier; Tiers in desired order
    /// within one step). Nothing is coalesced or lost.
    pub fn poll_event(&mut self) -> Option<TierEvent> {
        self.collect_events();
        self.events.pop_front()
    }

    /// Whether every Tier is converged and no call is in flight.
    pub fn is_converged(&self) -> bool {
        self.synced && self.machines.iter().all(TierMachine::is_converged)
    }

    /// Whether every desired Tier has converged at least once since the start (latched).
    pub fn is_initialized(&self) -> bool {
        self.initialized_at.is_some()
    }

    /// Getter: the status of every Tier and of the whole run.
    pub fn status(&self) -> Status {
        Status {
            synced: self.synced,
            initialized: self.initialized_at.is_some(),
            generation: self.generation,
            tiers: self.machines.iter().map(TierMachine::status).collect(),
            stopped: false,
            started_at: Some(self.started_at),
            initialized_at: self.initialized_at,
            standby: !self.may_write,
        }
    }

    fn collect_events(&mut self) {
        for machine in &mut self.machines {
            while let Some(event) = machine.poll_event() {
                self.events.push_back(event);
            }
        }
    }

    /// One cache serves every Tier: what one Tier learned about its lag (longer, or gone)
    /// holds for all. A longer wait wins over a shorter one learned in the same step.
    fn share_echo_wait(&mut self) {
        let shared = self.echo_wait;
        let learned = self
            .machines
            .iter()
            .map(TierMachine::echo_wait)
            .filter(|w| *w != shared);
        let wait = learned
            .clone()
            .filter(|w| *w > shared)
            .max()
            .or_else(|| learned.min());
        if let Some(wait) = wait {
            self.echo_wait = wait;
            for machine in &mut self.machines {
                machine.share_echo_wait(wait);
            }
        }
    }

    fn latch(&mut self, now: Instant) {
        self.share_echo_wait();
        self.collect_events();
        if self.initialized_at.is_none()
            && self.synced
            && self
                .machines
                .iter()
                .all(|m| m.status().converged_at.is_some())
        {
            self.initialized_at = Some(now);
        }
    }
}

/// `at + d`, or far in the future when that is not representable.
pub(crate) fn saturating_add(at: Instant, d: std::time::Duration) -> Instant {
    at.checked_add(d).unwrap_or_else(|| far_future(at))
}

/// An instant about a century after `at`: "never" for timers, without overflow.
pub(crate) fn far_future(at: Instant) -> Instant {
    const CENTURY: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);
    [CENTURY, CENTURY / 1000, CENTURY / 1_000_000]
        .into_iter()
        .find_map(|d| at.checked_add(d))
        .unwrap_or(at)
}
