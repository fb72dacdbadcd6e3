//! The per-Tier state machine: deterministic, no I/O, time passed in.
//!
//! A [`TierMachine`] owns one desired Tier. Its methods come in three kinds, called in this order
//! by a driver (see [`crate::driver`]), over and over:
//!
//! 1. inputs: [`handle_observation`](TierMachine::handle_observation) whenever the cache may have
//!    changed, [`handle_outcome`](TierMachine::handle_outcome) when the call it asked for ends,
//!    [`handle_timeout`](TierMachine::handle_timeout) when the instant from `poll_timeout` passes;
//! 2. outputs: [`poll_action`](TierMachine::poll_action) (the one call to make now, if any) and
//!    [`poll_timeout`](TierMachine::poll_timeout) (when to wake it next);
//! 3. getters: [`status`](TierMachine::status), [`is_converged`](TierMachine::is_converged).
//!
//! ```text
//!              observation known
//!  Unsynced ─────────────────────▶ Ready ──decide: Create/Update──▶ InFlight
//!                                   ▲  ▲                              │
//!        in sync (any state but      │  │ wait over / woken          │ outcome
//!        InFlight) ─▶ Converged      │  └──── Waiting ◀── error ─────┤
//!                        │ drift     │                               │ ok
//!                        └───────────┴──── AwaitEcho ◀───────────────┘
//! ```
//!
//! How a failed call is retried depends on its [`ErrorClass`]:
//!
//! | class | next attempt |
//! |---|---|
//! | stale | as soon as this Tier's observation changes; at the latest after the backoff, but not before `echo_timeout` |
//! | transient | after exponential backoff with jitter, at least `Retry-After`, at most the cap |
//! | blocked | as soon as the observed Tier set changes (but not within `backoff.initial` of the refusal); at the latest after `blocked_retry` |
//!
//! After a successful write the machine waits for the cache to show it (or for `echo_timeout`)
//! before deciding again, so a fault-free run sends exactly one write per drifted Tier. A Tier
//! that someone keeps changing back is *contested*: corrections then wait longer and longer.

use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::error::{ErrorClass, WriteError};
use crate::observe::{Decision, Generation, Observed, decide};
use crate::spec::TierSpec;

/// Timing of a [`TierMachine`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineConfig {
    /// Backoff after transient errors; its cap also bounds the stale fallback wait.
    pub backoff: Backoff,
    /// How long a blocked Tier waits before retrying when nothing changes (default 10 s).
    pub blocked_retry: Duration,
    /// How long to wait for the cache to show a successful write before deciding again on what
    /// it shows (default 3 s).
    pub echo_timeout: Duration,
    /// How corrections of a contested Tier back off.
    pub fight: FightPolicy,
}

impl Default for MachineConfig {
    fn default() -> Self {
        Self {
            backoff: Backoff::default(),
            blocked_retry: Duration::from_secs(10),
            echo_timeout: Duration::from_secs(3),
            fight: FightPolicy::default(),
        }
    }
}

/// When a Tier counts as contested, and how its corrections then back off.
///
/// Each correction (a write of a Tier this machine had already written successfully) that comes
/// within `quiet` of the previous one raises the contest level by one; a longer pause resets it.
/// From level `threshold` on, the next correction waits `initial * 2^(level - threshold)`, at
/// most `cap`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FightPolicy {
    /// Corrections in a row (each within `quiet` of the previous) before backing off (default 3).
    pub threshold: u32,
    /// A pause without corrections that ends a contest (default 5 min).
    pub quiet: Duration,
    /// The first hold-off of a contested correction (default 1 s).
    pub initial: Duration,
    /// The longest hold-off (default 60 s).
    pub cap: Duration,
}

impl Default for FightPolicy {
    fn default() -> Self {
        Self {
            threshold: 3,
            quiet: Duration::from_secs(300),
            initial: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        }
    }
}

/// The one call a machine asks its driver to make.
#[must_use = "an action must be performed and its outcome handed back"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the Tier.
    Create(TierSpec),
    /// Replace the Tier's fields, if its resourceVersion is still `resource_version`.
    Update {
        /// The desired Tier.
        tier: TierSpec,
        /// The precondition.
        resource_version: String,
    },
}

/// The kind of a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// A create.
    Create,
    /// An update.
    Update,
}

impl Action {
    /// Whether the action creates or updates.
    pub fn kind(&self) -> WriteKind {
        match self {
            Action::Create(_) => WriteKind::Create,
            Action::Update { .. } => WriteKind::Update,
        }
    }

    /// The desired Tier the action writes.
    pub fn tier(&self) -> &TierSpec {
        match self {
            Action::Create(tier) | Action::Update { tier, .. } => tier,
        }
    }

    /// `"create"` or `"update"`.
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Create(_) => "create",
            Action::Update { .. } => "update",
        }
    }
}

/// Where a Tier stands, as published to readiness, metrics and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TierState {
    /// Not converged yet, and no call has failed since the last success.
    Pending,
    /// Observed exactly as desired.
    Converged,
    /// The last call failed with a stale or transient error; another attempt will follow.
    Retrying {
        /// Consecutive failed calls.
        attempt: u32,
        /// The class of the last error.
        class: ErrorClass,
        /// The last error's message.
        error: String,
    },
    /// The server refuses the write; something else must change first.
    Blocked {
        /// When the first refusal in a row arrived.
        since: Instant,
        /// Consecutive failed calls.
        attempt: u32,
        /// The server's message.
        message: String,
    },
    /// Someone keeps changing the Tier back; the next correction is held off.
    Contested {
        /// The contest level: corrections in a row.
        corrections: u32,
        /// When the held-off correction will be made.
        until: Instant,
    },
}

impl TierState {
    /// Every label [`as_str`](Self::as_str) can return.
    pub const LABELS: [&'static str; 5] =
        ["pending", "converged", "retrying", "blocked", "contested"];

    /// A short lowercase label, stable for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            TierState::Pending => "pending",
            TierState::Converged => "converged",
            TierState::Retrying { .. } => "retrying",
            TierState::Blocked { .. } => "blocked",
            TierState::Contested { .. } => "contested",
        }
    }
}

/// Counts of call outcomes of one Tier, by class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutcomeCounts {
    /// Calls that succeeded.
    pub ok: u64,
    /// Calls that failed as stale.
    pub stale: u64,
    /// Calls that failed as transient.
    pub transient: u64,
    /// Calls that failed as blocked.
    pub blocked: u64,
}

impl OutcomeCounts {
    /// All finished calls.
    pub fn total(&self) -> u64 {
        self.ok + self.stale + self.transient + self.blocked
    }
}

/// A published snapshot of one Tier's machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierStatus {
    /// The Tier's name.
    pub name: String,
    /// Where it stands.
    pub state: TierState,
    /// Outcomes of every call made so far.
    pub outcomes: OutcomeCounts,
    /// Writes made to correct a Tier this machine had already written successfully.
    pub corrections: u64,
    /// Whether someone keeps changing the Tier back (see [`FightPolicy`]).
    pub contested: bool,
    /// When the Tier first converged, if it has.
    pub converged_at: Option<Instant>,
    /// The kind of the last successful write, if any.
    pub last_write: Option<WriteKind>,
}

/// A fingerprint of one Tier's observation: its resourceVersion, or `None` when absent.
type Fingerprint = Option<String>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Wake {
    /// Only time (or convergence) ends the wait.
    Never,
    /// This Tier's observation differs from the fingerprint.
    TierChange(Fingerprint),
    /// The observed set's generation exceeds `generation`; a change seen before `not_before`
    /// ends the wait at `not_before`, so a busy set cannot make a blocked Tier spin.
    SetChange {
        generation: Generation,
        not_before: Instant,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Unsynced,
    Ready,
    InFlight {
        basis: Fingerprint,
        generation: Generation,
        kind: WriteKind,
    },
    AwaitEcho {
        basis: Fingerprint,
        deadline: Instant,
    },
    Waiting {
        until: Instant,
        wake: Wake,
    },
    Hold {
        until: Instant,
    },
    Converged,
}

/// The state machine of one desired Tier. See the [module docs](self) for the protocol.
#[derive(Debug)]
pub struct TierMachine {
    spec: TierSpec,
    config: MachineConfig,
    rng: fastrand::Rng,
    observed: Observed,
    generation: Generation,
    phase: Phase,
    attempt: u32,
    last_error: Option<WriteError>,
    blocked_since: Option<Instant>,
    /// The fingerprint our last successful write was based on, while no correction was made
    /// since. A write decided on an observation that differs from it corrects someone else's
    /// change; one decided on the same observation only retries a write the cache never showed.
    written_basis: Option<Fingerprint>,
    hold_served: bool,
    contest_level: u32,
    last_correction: Option<Instant>,
    corrections: u64,
    outcomes: OutcomeCounts,
    converged_at: Option<Instant>,
    last_write: Option<WriteKind>,
}

impl TierMachine {
    /// A machine for `spec`; `seed` makes its jitter deterministic.
    pub fn new(spec: TierSpec, config: MachineConfig, seed: u64) -> Self {
        Self {
            spec,
            config,
            rng: fastrand::Rng::with_seed(seed),
            observed: Observed::Unknown,
            generation: 0,
            phase: Phase::Unsynced,
            attempt: 0,
            last_error: None,
            blocked_since: None,
            written_basis: None,
            hold_served: false,
            contest_level: 0,
            last_correction: None,
            corrections: 0,
            outcomes: OutcomeCounts::default(),
            converged_at: None,
            last_write: None,
        }
    }

    /// The desired Tier.
    pub fn spec(&self) -> &TierSpec {
        &self.spec
    }

    /// The latest observation handed in.
    pub fn observed(&self) -> &Observed {
        &self.observed
    }

    /// Whether the Tier is observed exactly as desired (and no call is in flight).
    pub fn is_converged(&self) -> bool {
        self.phase == Phase::Converged
    }

    /// Whether a call is in flight.
    pub fn is_in_flight(&self) -> bool {
        matches!(self.phase, Phase::InFlight { .. })
    }

    /// Input: what the cache now says about this Tier, at `generation` of the whole set.
    ///
    /// An [`Observed::Unknown`] after a known observation is ignored: a cache does not forget.
    pub fn handle_observation(&mut self, observed: Observed, generation: Generation, now: Instant) {
        if observed != Observed::Unknown || self.observed == Observed::Unknown {
            self.observed = observed;
        }
        self.generation = self.generation.max(generation);
        self.advance(now);
    }

    /// Input: the outcome of the call from the last [`poll_action`](Self::poll_action).
    /// An outcome without a call in flight is ignored.
    pub fn handle_outcome(&mut self, outcome: Result<(), WriteError>, now: Instant) {
        let Phase::InFlight {
            basis,
            generation,
            kind,
        } = self.phase.clone()
        else {
            return;
        };
        match outcome {
            Ok(()) => {
                self.outcomes.ok += 1;
                self.last_write = Some(kind);
                self.attempt = 0;
                self.last_error = None;
                self.blocked_since = None;
                self.written_basis = Some(basis.clone());
                self.phase = Phase::AwaitEcho {
                    basis,
                    deadline: now + self.config.echo_timeout,
                };
            }
            Err(error) => {
                self.attempt = self.attempt.saturating_add(1);
                let backoff = self.config.backoff;
                let unit = self.rng.f64();
                let (wait, wake) = match error.class {
                    ErrorClass::Stale => {
                        // The server knows something the cache does not show yet: give the
                        // cache as long to catch up as after a successful write.
                        self.outcomes.stale += 1;
                        let wait = backoff
                            .delay(self.attempt, None, unit)
                            .max(self.config.echo_timeout)
                            .min(backoff.cap);
                        (wait, Wake::TierChange(basis))
                    }
                    ErrorClass::Transient => {
                        self.outcomes.transient += 1;
                        (
                            backoff.delay(self.attempt, error.retry_after, unit),
                            Wake::Never,
                        )
                    }
                    ErrorClass::Blocked => {
                        self.outcomes.blocked += 1;
                        let wake = Wake::SetChange {
                            generation,
                            not_before: now + backoff.initial,
                        };
                        (self.config.blocked_retry, wake)
                    }
                };
                if error.class == ErrorClass::Blocked {
                    self.blocked_since.get_or_insert(now);
                } else {
                    self.blocked_since = None;
                }
                self.last_error = Some(error);
                self.phase = Phase::Waiting {
                    until: now + wait,
                    wake,
                };
            }
        }
        self.advance(now);
    }

    /// Input: time has passed (call when `now` reaches [`poll_timeout`](Self::poll_timeout)).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
    }

    /// Output: the call to make now, if any. At most one call is ever in flight: after an
    /// action, the next comes only once its outcome has been handed in.
    pub fn poll_action(&mut self, now: Instant) -> Option<Action> {
        self.advance(now);
        if self.phase != Phase::Ready {
            return None;
        }
        let action = match decide(&self.spec, &self.observed) {
            Decision::WaitForSync | Decision::InSync => return None,
            Decision::Create => Action::Create(self.spec.clone()),
            Decision::Update { resource_version } => Action::Update {
                tier: self.spec.clone(),
                resource_version,
            },
        };
        let correction = self
            .written_basis
            .as_ref()
            .is_some_and(|basis| *basis != self.fingerprint());
        if correction {
            // Someone changed what we wrote: this write is a correction.
            if self.quiet_since_last_correction(now) {
                self.contest_level = 0;
            }
            if let Some(hold) = self.hold_off().filter(|_| !self.hold_served) {
                self.phase = Phase::Hold { until: now + hold };
                return None;
            }
            self.contest_level = self.contest_level.saturating_add(1);
            self.last_correction = Some(now);
            self.corrections += 1;
            self.written_basis = None;
        }
        self.hold_served = false;
        self.phase = Phase::InFlight {
            basis: self.fingerprint(),
            generation: self.generation,
            kind: action.kind(),
        };
        Some(action)
    }

    /// Output: when the machine next needs [`handle_timeout`](Self::handle_timeout), if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::AwaitEcho { deadline, .. } => Some(*deadline),
            Phase::Waiting { until, .. } | Phase::Hold { until } => Some(*until),
            _ => None,
        }
    }

    /// Getter: the published status.
    pub fn status(&self) -> TierStatus {
        let state = match (&self.phase, &self.last_error, self.blocked_since) {
            (Phase::Converged, _, _) => TierState::Converged,
            (Phase::Hold { until }, _, _) => TierState::Contested {
                corrections: self.contest_level,
                until: *until,
            },
            (_, Some(error), Some(since)) if error.class == ErrorClass::Blocked => {
                TierState::Blocked {
                    since,
                    attempt: self.attempt,
                    message: error.message.clone(),
                }
            }
            (_, Some(error), _) => TierState::Retrying {
                attempt: self.attempt,
                class: error.class,
                error: error.message.clone(),
            },
            (_, None, _) => TierState::Pending,
        };
        TierStatus {
            name: self.spec.name.clone(),
            state,
            outcomes: self.outcomes,
            corrections: self.corrections,
            contested: self.contest_level >= self.config.fight.threshold,
            converged_at: self.converged_at,
            last_write: self.last_write,
        }
    }

    /// Moves through every transition that the current inputs allow.
    fn advance(&mut self, now: Instant) {
        match &self.phase {
            Phase::InFlight { .. } => return,
            Phase::Unsynced if self.observed == Observed::Unknown => return,
            _ => {}
        }
        if decide(&self.spec, &self.observed) == Decision::InSync {
            self.converge(now);
            return;
        }
        let ready = match &self.phase {
            Phase::Unsynced | Phase::Ready | Phase::Converged => true,
            Phase::AwaitEcho { basis, deadline } => {
                *basis != self.fingerprint() || now >= *deadline
            }
            Phase::Waiting { until, wake } => match wake {
                Wake::SetChange {
                    generation,
                    not_before,
                } if self.generation > *generation && now < *not_before => {
                    // Woken too soon after the last refusal: retry at `not_before`.
                    self.phase = Phase::Waiting {
                        until: *not_before,
                        wake: Wake::Never,
                    };
                    false
                }
                _ => now >= *until || self.woken(wake),
            },
            Phase::Hold { until } => {
                let over = now >= *until;
                self.hold_served |= over;
                over
            }
            Phase::InFlight { .. } => false,
        };
        if ready {
            self.phase = Phase::Ready;
        }
    }

    fn converge(&mut self, now: Instant) {
        self.phase = Phase::Converged;
        self.attempt = 0;
        self.last_error = None;
        self.blocked_since = None;
        self.hold_served = false;
        self.converged_at.get_or_insert(now);
    }

    fn woken(&self, wake: &Wake) -> bool {
        match wake {
            Wake::Never => false,
            Wake::TierChange(basis) => *basis != self.fingerprint(),
            Wake::SetChange { generation, .. } => self.generation > *generation,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        self.observed.resource_version().map(str::to_owned)
    }

    fn quiet_since_last_correction(&self, now: Instant) -> bool {
        self.last_correction
            .is_none_or(|at| now.saturating_duration_since(at) > self.config.fight.quiet)
    }

    /// How long to hold off the next correction, if the Tier is contested.
    fn hold_off(&self) -> Option<Duration> {
        let fight = &self.config.fight;
        let over = self.contest_level.checked_sub(fight.threshold)?;
        let factor = 1u32.checked_shl(over.min(31)).unwrap_or(u32::MAX);
        Some(fight.initial.saturating_mul(factor).min(fight.cap))
    }
}
