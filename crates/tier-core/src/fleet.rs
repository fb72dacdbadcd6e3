//! The fleet: every desired Tier's machine and all cross-Tier logic, synchronous and sans-I/O.
//!
//! A [`Fleet`] is to [`TierMachine`] what quinn-proto's `Endpoint` is to its `Connection`: it
//! fans a [`Snapshot`] out to the machines, predicts from the observed set which creates the
//! admission rules would deny (calling [`admission::review`], the one copy of those rules) and
//! names the Tiers in the way, derives each Tier's jitter seed from one seed, latches
//! "initialized" per Tier, queues every event and shares what one call learns about the server:
//! after a transient failure only one Tier (the *probe*) retries, on its backoff, until the
//! server answers; then every Tier waiting on a transient backoff retries at once. It owns no timer and does no I/O; the async
//! [`Driver`](crate::Driver) is a thin loop around it, and tests step it by hand.
//!
//! Call order, over and over: inputs ([`handle_snapshot`](Fleet::handle_snapshot),
//! [`handle_outcome`](Fleet::handle_outcome), [`handle_timeout`](Fleet::handle_timeout)), then
//! outputs ([`poll_action`](Fleet::poll_action) until `None`, [`poll_event`](Fleet::poll_event)
//! until `None`, [`poll_timeout`](Fleet::poll_timeout)), then [`status`](Fleet::status).
//!
//! ```
//! use std::time::Instant;
//! use tier_core::{Action, DesiredSet, Fleet, FleetConfig, ObservedTier, Snapshot, TierState};
//!
//! let now = Instant::now();
//! let mut fleet = Fleet::new(&DesiredSet::antrea(), FleetConfig::default(), now);
//! let squatter = ObservedTier {
//!     name: "team-a".into(),
//!     priority: 150,
//!     description: String::new(),
//!     resource_version: "1".into(),
//! };
//! fleet.handle_snapshot(&Snapshot::synced(1, [squatter]), now);
//! let mut creates = Vec::new();
//! while let Some((_, action)) = fleet.poll_action(now) {
//!     creates.push(action.tier().name.clone());
//! }
//! assert!(!creates.contains(&"networkops".to_owned()), "no doomed create");
//! let status = fleet.status();
//! let networkops = status.tiers.iter().find(|t| t.name == "networkops").unwrap();
//! assert_eq!(
//!     networkops.to_string(),
//!     "networkops blocked: priority 150 is held by Tier team-a"
//! );
//! ```

use std::collections::VecDeque;
use std::time::Instant;

use crate::admission::{self, AdmissionPolicy, Request};
use crate::error::{ErrorClass, WriteError};
use crate::machine::{Action, Blocker, MachineConfig, TierEvent, TierMachine};
use crate::observe::{Generation, Snapshot};
use crate::spec::{DesiredSet, TierSpec};
use crate::status::Status;

/// Which machine of a fleet an action or outcome belongs to: its index in the desired set.
pub type TierId = usize;

/// Configuration of a [`Fleet`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetConfig {
    /// Timing of every per-Tier machine.
    pub machine: MachineConfig,
    /// The admission rules the server applies to creates, used to predict denials from the
    /// observed set; `None` predicts nothing (every create is sent). Default: Antrea's.
    pub admission: Option<AdmissionPolicy>,
    /// Seed of the jitter; each Tier's machine derives its own from it.
    pub seed: u64,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            machine: MachineConfig::default(),
            admission: Some(AdmissionPolicy::antrea(String::new())),
            seed: 0,
        }
    }
}

/// Every desired Tier's [`TierMachine`], and what spans them. See the [module docs](self).
#[derive(Debug)]
pub struct Fleet {
    machines: Vec<TierMachine>,
    admission: Option<AdmissionPolicy>,
    synced: bool,
    generation: Generation,
    started_at: Instant,
    initialized_at: Option<Instant>,
    events: VecDeque<TierEvent>,
    /// During a server outage (a transient failure, no answer since), the one Tier that retries.
    probe: Option<TierId>,
}

impl Fleet {
    /// A fleet for `desired`, started at `now`. Nothing is decided before the first synced
    /// snapshot.
    pub fn new(desired: &DesiredSet, config: FleetConfig, now: Instant) -> Self {
        let machines = desired
            .tiers()
            .iter()
            .zip(0u64..)
            .map(|(spec, i)| {
                let seed = config.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                TierMachine::new(spec.clone(), config.machine.clone(), seed)
            })
            .collect();
        Self {
            machines,
            admission: config.admission,
            synced: false,
            generation: 0,
            started_at: now,
            initialized_at: None,
            events: VecDeque::new(),
            probe: None,
        }
    }

    /// The machines, in the order of the desired set.
    pub fn machines(&self) -> &[TierMachine] {
        &self.machines
    }

    /// Input: the cache's current view. Each machine gets its Tier's observation, and each
    /// machine that needs a create gets the prediction of the admission rules.
    pub fn handle_snapshot(&mut self, snapshot: &Snapshot, now: Instant) {
        self.synced |= snapshot.is_synced();
        self.generation = self.generation.max(snapshot.generation);
        for machine in &mut self.machines {
            let observed = snapshot.observe(&machine.spec().name);
            machine.handle_observation(observed, snapshot.generation, now);
            let blocker = match &self.admission {
                Some(policy) if machine.wants_create() => predict(policy, machine.spec(), snapshot),
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
        let class = outcome.as_ref().err().map(|e| e.class);
        machine.handle_outcome(outcome, now);
        if class == Some(ErrorClass::Transient) {
            self.probe.get_or_insert(tier);
        } else if class == Some(ErrorClass::Stale) {
            // A Conflict comes from storage, before admission runs: it does not show that the
            // whole write path (a webhook that could not be reached) is back. The outage goes
            // on; if this was the probe, the next Tier still retrying takes over.
        } else if self.probe.take().is_some() {
            // The server answered: whoever waits on a transient backoff retries now.
            for machine in &mut self.machines {
                machine.handle_server_answered(now);
            }
        }
        self.latch(now);
    }

    /// Input: time has passed; fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for machine in &mut self.machines {
            machine.handle_timeout(now);
        }
        // One cache serves every Tier: a lag one Tier learned holds for all.
        let echo_wait = self.machines.iter().map(TierMachine::echo_wait).max();
        for machine in &mut self.machines {
            machine.share_echo_wait(echo_wait.unwrap_or_default());
        }
        self.latch(now);
    }

    /// Output: the next call to make, with the Tier it belongs to. Call until `None`.
    pub fn poll_action(&mut self, now: Instant) -> Option<(TierId, Action)> {
        // Polling the probe can end its retrying (it turns out blocked or held off): then hand
        // the outage on and poll again, so no Tier waits on a probe that will not call.
        for _ in 0..=self.machines.len() {
            self.hand_on_probe();
            let probe = self.probe;
            let found = self
                .machines
                .iter_mut()
                .enumerate()
                .filter(|(id, _)| probe.is_none_or(|p| p == *id))
                .find_map(|(id, machine)| machine.poll_action(now).map(|action| (id, action)));
            self.collect_events();
            if found.is_some() || probe == self.probe_after_hand_on() {
                return found;
            }
        }
        None
    }

    /// A probe that converged, got blocked or held off hands the outage to another Tier still
    /// retrying a transient failure; with none left, the outage is over.
    fn hand_on_probe(&mut self) {
        self.probe = self.probe_after_hand_on();
    }

    fn probe_after_hand_on(&self) -> Option<TierId> {
        let probe = self.probe?;
        if self
            .machines
            .get(probe)
            .is_some_and(TierMachine::is_retrying_transient)
        {
            return Some(probe);
        }
        self.machines
            .iter()
            .position(TierMachine::is_retrying_transient)
    }

    /// The Tier probing a server outage, if one is under way: only it retries until the server
    /// answers.
    pub fn probe(&self) -> Option<TierId> {
        self.probe
    }

    /// Output: the earliest instant at which [`handle_timeout`](Self::handle_timeout) is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.machines
            .iter()
            .filter_map(TierMachine::poll_timeout)
            .min()
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
        }
    }

    fn collect_events(&mut self) {
        for machine in &mut self.machines {
            while let Some(event) = machine.poll_event() {
                self.events.push_back(event);
            }
        }
    }

    fn latch(&mut self, now: Instant) {
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

/// What `policy` says about creating `spec` given `snapshot`: `None` if the create would pass,
/// else the Tiers whose removal would let it through and why, in words.
pub fn predict(policy: &AdmissionPolicy, spec: &TierSpec, snapshot: &Snapshot) -> Option<Blocker> {
    let tiers = snapshot.tiers.as_ref()?;
    let request = Request::Create {
        name: &spec.name,
        priority: spec.priority,
    };
    let others = || tiers.values().filter(|t| t.name != spec.name);
    let denial = admission::review(
        policy,
        &request,
        others().map(|t| (t.name.as_str(), t.priority)),
    )
    .err()?;
    let blockers: Vec<&crate::ObservedTier> = others()
        .filter(|b| {
            let without = others()
                .filter(|t| t.name != b.name)
                .map(|t| (t.name.as_str(), t.priority));
            admission::review(policy, &request, without).is_ok()
        })
        .collect();
    let names: Vec<String> = blockers.iter().map(|t| t.name.clone()).collect();
    let reason = if !blockers.is_empty() && blockers.iter().all(|t| t.priority == spec.priority) {
        let holder = if names.len() == 1 { "Tier" } else { "Tiers" };
        format!(
            "priority {} is held by {holder} {}",
            spec.priority,
            names.join(", ")
        )
    } else {
        denial.to_string()
    };
    Some(Blocker {
        tiers: names,
        reason,
    })
}
