//! The per-Tier state machine: deterministic, no I/O, time passed in.

mod action;
mod config;
mod event;
mod state;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub use action::{Action, Blocker, WriteKind};
pub use config::{ConfigError, ContestPolicy, MAX_COUNT, MAX_DURATION, MachineConfig};
pub use event::TierEvent;
pub use state::{OutcomeCounts, TierState, TierStatus, WriteHold};

use crate::antrea::Antrea;
use crate::budget::{Budget, Spend};
use crate::controller::{CachedTier, Controller, DesiredTier};
use crate::error::{ErrorClass, WriteError};
use crate::fleet::saturating_add;
use crate::observe::{Decision, Drift, FieldWriter, Generation, Observed, Snapshot, decide};

/// A fingerprint of one Tier's observation: its resourceVersion, or `None` when absent.
type Fingerprint = Option<String>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Wake {
    /// Only time (or convergence) ends the wait.
    Never,
    /// This Tier's observation differs from `basis`, or the cache saw it deleted after
    /// `generation` (the one the failed call was decided at).
    TierChange {
        basis: Fingerprint,
        generation: Generation,
    },
    /// The observed set's generation exceeds `generation`; a change seen before `not_before`
    /// ends the wait at `not_before`, so a busy set cannot make the Tier spin.
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
        /// The fields an update corrects (empty for a create).
        drift: Drift,
    },
    AwaitEcho {
        basis: Fingerprint,
        /// The generation the write was decided at: a deletion seen after it ends the wait.
        generation: Generation,
        deadline: Instant,
        /// When the write was confirmed: the echo's delay is measured from here.
        confirmed: Instant,
    },
    Waiting {
        until: Instant,
        wake: Wake,
    },
    Blocked {
        since: Instant,
    },
    Hold {
        until: Instant,
    },
    Converged,
}

/// A write the server accepted, as long as no other writer is seen to have undone it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Accepted {
    /// A create or an update.
    kind: WriteKind,
    /// The observation the write was decided on.
    basis: Fingerprint,
    /// The generation it was decided at.
    generation: Generation,
    /// Whether the cache has shown the Tier moved past `basis` since: after that, any
    /// observation not in sync (absent included) is another writer's.
    echoed: bool,
}

/// What the contest rule knows beyond the budget: which accepted write stands, how many were
/// undone, and whether it is a contest. Judged by what the server confirmed: only an accepted
/// write can be undone, and an undo counts once it is certain.
///
/// An accepted update is certainly undone when the cache shows the Tier not in sync at another
/// resourceVersion than the update's basis, or absent: the update applied to that basis, so
/// whatever the cache shows after it came later. An accepted create is certainly undone when
/// the cache shows the Tier changed with no deletion since the create was decided. Gone, it
/// cannot be told from an object someone else created and deleted while the create was in
/// flight (the writer does not say which resourceVersion it wrote): that undo is only
/// *suspected* until the server accepts tierd's next write, which proves the create's object
/// was gone or changed.
#[derive(Debug)]
struct Contest {
    /// tierd's accepted writes another writer undid, since the budget was last full.
    streak: u32,
    /// Whether a write held by the budget would restore an undone accepted write.
    contested: bool,
    /// The last accepted write, until the cache shows it undone.
    standing: Option<Accepted>,
    /// Whether the last accepted write was undone (or, for a create, is suspected so) and no
    /// write has been accepted since: the next write restores someone else's change.
    undone: bool,
    /// Whether that undo is of a create, suspected until the next accepted write.
    suspected: bool,
    /// Whether that undo is not yet counted in `corrections` (it is, once a write for it goes).
    undo_uncounted: bool,
    /// Whether a create was confirmed and the cache has not shown the Tier since: if the
    /// server accepts another create, someone deleted it unseen (the first create was undone).
    created_unseen: bool,
    /// The writer that last undid an accepted write, as the object named it.
    by: Option<FieldWriter>,
}

/// The state machine of one desired Tier: deterministic, no I/O, time passed in.
///
/// A [`TierMachine`] owns one desired Tier. Its methods come in three kinds, called in this order
/// by a [`Fleet`](crate::Fleet), over and over:
///
/// 1. inputs: [`handle_snapshot`](TierMachine::handle_snapshot) (or
///    [`handle_observation`](TierMachine::handle_observation), without deletions) whenever the
///    cache may have changed, [`handle_blocker`](TierMachine::handle_blocker) with what the observed set
///    predicts about a create, [`handle_outcome`](TierMachine::handle_outcome) when the call it
///    asked for ends, [`handle_server_answered`](TierMachine::handle_server_answered) when the
///    server answered another Tier's call (an outage is over),
///    [`handle_timeout`](TierMachine::handle_timeout) when the instant from `poll_timeout`
///    passes (timers fire only there);
/// 2. outputs: [`poll_action`](TierMachine::poll_action) (the one call to make now, if any),
///    [`poll_timeout`](TierMachine::poll_timeout) (when to wake it next) and
///    [`poll_event`](TierMachine::poll_event) (what to tell people, losslessly, in order);
/// 3. getters: [`status`](TierMachine::status), [`is_converged`](TierMachine::is_converged),
///    [`is_ready`](TierMachine::is_ready), [`echo_wait`](TierMachine::echo_wait) and the
///    others the fleet reads.
///
/// The module holds one idea per file: [`MachineConfig`] and its validation (`config.rs`),
/// [`Action`] and [`Blocker`] (`action.rs`), the published [`TierState`] and [`TierStatus`]
/// (`state.rs`), [`TierEvent`] (`event.rs`), the write budget (`budget.rs`, crate-private),
/// and the machine itself (here).
///
/// ```text
///              observation known
///  Unsynced ─────────────────────▶ Ready ──decide: Create/Update──▶ InFlight
///                                  ▲ │ ▲ ▲                            │
///        in sync (any state but    │ │ │ └──── Waiting ◀── error ────┤
///        InFlight) ─▶ Converged    │ │ │  wait over / woken           │ ok
///                        │ drift   │ │ └──────── AwaitEcho ◀──────────┘
///                        └─────────┘ │ create predicted denied
///                                    ├──────▶ Blocked (until the blocker changes)
///                                    │ write without a budget token
///                                    └──────▶ Hold (until the hold-off ends)
/// ```
///
/// How a failed call is retried depends on its [`ErrorClass`] (and, for a refusal, its verb):
///
/// | class | next attempt | state |
/// |---|---|---|
/// | stale | as soon as this Tier's observation changes; at the latest after the backoff, but not before the echo wait (`echo_timeout`, doubled up to the backoff cap once the cache lagged past it, halved again by quick echoes) | retrying |
/// | transient | after exponential backoff with jitter, at least `Retry-After`, at most the cap; at once when the server answers another Tier | retrying |
/// | denied | after the short `denied_backoff` (the webhook's view lags ours), the transient backoff once that outlasts `denied_warn_after` attempts, or at once for a rule the controller recognises ([`Controller::explain_denial`], e.g. Antrea's priority rule); never while the cache shows a blocker. After a create whose answer was lost: when this Tier's observation changes, at the latest after `echo_timeout` | denied (with the rule and its fix, when recognised), or blocked once the cache shows why |
/// | forbidden | after the slow `forbidden_backoff`, whatever the Tier set does; at once when the Tier needs the other verb (a refused update does not delay a create) | forbidden, naming the permission |
/// | not installed | when the observed set changes (the cache listed again), not within `backoff.initial`; at the latest after `not_installed_retry` | not-installed |
///
/// Every write, whatever its cause, also spends from the Tier's one write budget
/// ([`ContestPolicy`]): a burst of `burst` writes, then one per hold-off doubling from
/// `hold_initial` to `hold_cap`. A held write is visible. The Tier is *contested* only when the
/// held write would restore what another writer undid of a write the server *accepted* (the
/// cache shows it changed again or deleted after that write, or the server accepts a second
/// create while the cache never showed the first), and no cause of its own stands in the way;
/// otherwise (a denial, a refusal, a failure) its state keeps the error's cause and
/// [`TierStatus::held`] notes the budget. The budget (and a contest) recovers once the bucket
/// is full again.
///
/// A create the observed set says will be denied (see [`Blocker`]) is never sent: the machine
/// is *blocked* until the blocker goes away. After a successful write the machine waits for the
/// cache to show it, or a deletion of the Tier since the write was decided (a lister's
/// [`Snapshot::deleted`], through [`handle_snapshot`](Self::handle_snapshot)), or for the echo
/// wait, before deciding again, so a fault-free run sends exactly one write per drifted Tier. Sent again from the basis it replaced, a confirmed write
/// can only meet itself, so once the cache is seen to lag past the echo wait, the wait doubles;
/// an echo within half of it halves it again, down to `echo_timeout`.
///
/// # Bound
///
/// A Tier whose world allows the write it needs is written within its own wait: at most the
/// cap of the backoff its last error put it on, or the budget's `hold_cap` (60 s by default),
/// whichever is longer; fleet-wide holds add at most what [`Fleet`](crate::Fleet) documents.
///
///
/// Inputs: [`handle_snapshot`](Self::handle_snapshot),
/// [`handle_observation`](Self::handle_observation),
/// [`handle_blocker`](Self::handle_blocker), [`handle_outcome`](Self::handle_outcome),
/// [`handle_server_answered`](Self::handle_server_answered),
/// [`handle_timeout`](Self::handle_timeout). Outputs: [`poll_action`](Self::poll_action),
/// [`poll_timeout`](Self::poll_timeout), [`poll_event`](Self::poll_event). Every other public
/// method only reads; the fleet also hands in the echo wait the other Tiers learned (crate-
/// private, see [`echo_wait`](Self::echo_wait)).
#[derive(Debug)]
pub struct TierMachine<C: Controller = Antrea> {
    spec: C::Spec,
    config: MachineConfig,
    rng: fastrand::Rng,
    observed: Observed<C>,
    generation: Generation,
    /// The generation at which the cache last saw this Tier deleted, if it did.
    deleted_at: Option<Generation>,
    blocker: Option<Blocker>,
    phase: Phase,
    attempt: u32,
    last_error: Option<WriteError>,
    /// The controller's words for `last_error`, a denial by a rule it recognises.
    denial_rule: Option<String>,
    /// Whether the current run of denials was reported (one `Denied` event per episode).
    denial_reported: bool,
    /// The verb of the call that failed with `last_error`: backoffs are per cause and verb.
    failed_kind: Option<WriteKind>,
    error_since: Option<Instant>,
    /// Whether the Tier was observed in sync since our last write: a write now is a correction.
    was_in_sync: bool,
    /// The fingerprint our last successful write was based on: a write decided on an
    /// observation that differs from it corrects someone else's change even if the cache never
    /// showed our write in between; one decided on the same observation only retries a write
    /// the cache never showed.
    written_basis: Option<Fingerprint>,
    /// Whether the last failed create may have been applied (its answer was lost): a denial of
    /// the retry then most likely concerns the Tier itself, which the cache will show.
    maybe_created: bool,
    /// How long the next successful write waits for its echo: `echo_timeout` until the cache
    /// is seen to lag past it, then doubled by each echo that does not come in time, up to the
    /// backoff cap. A write sent again from the basis it replaced can only meet itself.
    echo_wait: Duration,
    budget: Budget,
    contest: Contest,
    corrections: u64,
    outcomes: OutcomeCounts,
    converged_at: Option<Instant>,
    last_write: Option<WriteKind>,
    events: VecDeque<TierEvent>,
}

impl<C: Controller> TierMachine<C> {
    /// A machine for `spec`; `seed` makes its jitter deterministic.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field of `config` out of its range (see
    /// [`MachineConfig::validate`]).
    pub fn new(spec: C::Spec, config: MachineConfig, seed: u64) -> Result<Self, ConfigError> {
        config.validate()?;
        let budget = Budget::new(&config.contest);
        let echo_wait = config.echo_timeout;
        Ok(Self {
            spec,
            config,
            rng: fastrand::Rng::with_seed(seed),
            observed: Observed::Unknown,
            generation: 0,
            deleted_at: None,
            blocker: None,
            phase: Phase::Unsynced,
            attempt: 0,
            last_error: None,
            denial_rule: None,
            denial_reported: false,
            failed_kind: None,
            error_since: None,
            was_in_sync: false,
            written_basis: None,
            maybe_created: false,
            echo_wait,
            budget,
            contest: Contest {
                streak: 0,
                contested: false,
                standing: None,
                undone: false,
                suspected: false,
                undo_uncounted: false,
                created_unseen: false,
                by: None,
            },
            corrections: 0,
            outcomes: OutcomeCounts::default(),
            converged_at: None,
            last_write: None,
            events: VecDeque::new(),
        })
    }

    /// The desired Tier.
    pub fn spec(&self) -> &C::Spec {
        &self.spec
    }

    /// The latest observation handed in.
    pub fn observed(&self) -> &Observed<C> {
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

    /// Whether the machine would call if polled now (its waits are over).
    pub fn is_ready(&self) -> bool {
        self.phase == Phase::Ready
    }

    /// The kind of the call in flight, if any.
    pub fn in_flight_kind(&self) -> Option<WriteKind> {
        match self.phase {
            Phase::InFlight { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// Whether this machine's create may exist on the server but not yet in the cache: it is
    /// in flight, or confirmed and not yet shown. Other creates are predicted with it.
    pub fn has_unseen_create(&self) -> bool {
        let unseen = self.observed == Observed::Absent;
        match self.phase {
            Phase::InFlight { kind, .. } => kind == WriteKind::Create,
            Phase::AwaitEcho { .. } => unseen && self.last_write == Some(WriteKind::Create),
            _ => false,
        }
    }

    /// The verb the current observation calls for, if any.
    fn wanted_kind(&self) -> Option<WriteKind> {
        match decide(&self.spec, &self.observed) {
            Decision::Create => Some(WriteKind::Create),
            Decision::Update { .. } => Some(WriteKind::Update),
            Decision::WaitForSync | Decision::InSync => None,
        }
    }

    /// Whether the decision for the current observation is a create.
    pub fn wants_create(&self) -> bool {
        decide(&self.spec, &self.observed) == Decision::Create
    }

    /// Input: a snapshot of the cache: this Tier's observation and whether the lister saw it
    /// deleted ([`Snapshot::deleted_at`]), which the observation alone may not show (a create
    /// and its deletion seen together). What a [`Fleet`](crate::Fleet) hands in.
    pub fn handle_snapshot(&mut self, snapshot: &Snapshot<C>, now: Instant) {
        if let Some(at) = snapshot.deleted_at(self.spec.name()) {
            self.deleted_at = Some(self.deleted_at.map_or(at, |seen| seen.max(at)));
        }
        self.handle_observation(snapshot.observe(self.spec.name()), snapshot.generation, now);
    }

    /// Input: what the cache now says about this Tier, at `generation` of the whole set
    /// (without the deletions a snapshot carries: see [`handle_snapshot`](Self::handle_snapshot)).
    ///
    /// An [`Observed::Unknown`] after a known observation is ignored: a cache does not forget.
    pub fn handle_observation(
        &mut self,
        observed: Observed<C>,
        generation: Generation,
        now: Instant,
    ) {
        if observed != Observed::Unknown || self.observed == Observed::Unknown {
            self.observed = observed;
        }
        if matches!(self.observed, Observed::Present(_)) {
            self.contest.created_unseen = false;
        }
        self.generation = self.generation.max(generation);
        self.advance(now);
    }

    /// Input: whether the observed set predicts that creating this Tier would be denied, and
    /// why. `None` lifts a block; a new blocker while blocked starts a new episode.
    pub fn handle_blocker(&mut self, blocker: Option<Blocker>, now: Instant) {
        if let (Phase::Blocked { .. }, Some(new)) = (&self.phase, &blocker)
            && self.blocker.as_ref() != Some(new)
        {
            self.emit_blocked(new.clone());
        }
        self.blocker = blocker;
        self.advance(now);
    }

    /// Input: the outcome of the call from the last [`poll_action`](Self::poll_action).
    /// An outcome without a call in flight is ignored.
    pub fn handle_outcome(&mut self, outcome: Result<(), WriteError>, now: Instant) {
        let Phase::InFlight {
            basis,
            generation,
            kind,
            drift,
        } = self.phase.clone()
        else {
            return;
        };
        match outcome {
            Ok(()) => {
                self.outcomes.ok = self.outcomes.ok.saturating_add(1);
                // The server accepted this write: a create undone as suspected was (the object
                // it wrote is gone or changed). A second create accepted while the cache never
                // showed the first proves the same. A budget spent on such writes is a contest.
                let suspected = std::mem::take(&mut self.contest.suspected);
                let unseen = kind == WriteKind::Create
                    && std::mem::replace(&mut self.contest.created_unseen, true);
                if unseen && !suspected {
                    self.contest.by = None;
                    self.corrections = self.corrections.saturating_add(1);
                }
                if unseen || suspected {
                    self.contest.streak = self.contest.streak.saturating_add(1);
                    if self.budget.is_spent() {
                        self.declare_contest();
                    }
                }
                self.contest.standing = Some(Accepted {
                    kind,
                    basis: basis.clone(),
                    generation,
                    echoed: false,
                });
                self.contest.undone = false;
                self.contest.undo_uncounted = false;
                self.last_write = Some(kind);
                self.written_basis = Some(basis.clone());
                self.attempt = 0;
                self.clear_error();
                let tier = self.spec.name().to_owned();
                self.events.push_back(match kind {
                    WriteKind::Create => TierEvent::Created { tier },
                    WriteKind::Update => TierEvent::Corrected {
                        tier,
                        fields: drift,
                    },
                });
                self.phase = Phase::AwaitEcho {
                    basis,
                    generation,
                    deadline: saturating_add(now, self.echo_wait),
                    confirmed: now,
                };
            }
            Err(error) => self.failed(error, basis, generation, kind, now),
        }
        self.advance(now);
    }

    fn failed(
        &mut self,
        error: WriteError,
        basis: Fingerprint,
        generation: Generation,
        kind: WriteKind,
        now: Instant,
    ) {
        let class = error.class;
        let maybe_created = std::mem::replace(
            &mut self.maybe_created,
            kind == WriteKind::Create && class == ErrorClass::Transient,
        );
        self.outcomes.count(class);
        if self.last_error.as_ref().map(|e| e.class) != Some(class)
            || self.failed_kind != Some(kind)
        {
            self.attempt = 0;
            self.error_since = Some(now);
            self.denial_reported = false;
        }
        self.denial_rule = None;
        self.failed_kind = Some(kind);
        self.attempt = self.attempt.saturating_add(1);
        let unit = self.rng.f64();
        let config = &self.config;
        let tier = self.spec.name().to_owned();
        let (wait, wake) = match class {
            ErrorClass::Stale => {
                // The server knows something the cache does not show yet: give the cache as
                // long to catch up as after a successful write.
                let wait = config
                    .backoff
                    .delay(self.attempt, None, unit)
                    .max(self.echo_wait)
                    .min(config.backoff.cap);
                (wait, Wake::TierChange { basis, generation })
            }
            ErrorClass::Transient => (
                config.backoff.delay(self.attempt, error.retry_after, unit),
                Wake::Never,
            ),
            ErrorClass::Denied if maybe_created && kind == WriteKind::Create => {
                // The create before this one may have been applied: the denial most likely
                // names the Tier itself. Wait for the cache to show it, as after a stale error.
                let wait = config
                    .denied_backoff
                    .delay(self.attempt, error.retry_after, unit)
                    .max(self.echo_wait)
                    .min(config.backoff.cap);
                (wait, Wake::TierChange { basis, generation })
            }
            ErrorClass::Denied => {
                // A lagging webhook catches up within a few seconds: retry fast until then. A
                // denial that outlasts that is not lag; it warns once and slows to the
                // transient backoff. A denial by a rule the controller recognises is not lag
                // either: it warns at once, in the rule's words, and retries slowly.
                let observed = match &self.observed {
                    Observed::Present(tier) => Some(tier),
                    _ => None,
                };
                let rule = C::explain_denial(&self.spec, observed, &error.message);
                let lag_possible = rule.is_none() && self.attempt <= config.denied_warn_after;
                let backoff = if lag_possible {
                    config.denied_backoff
                } else {
                    config.backoff
                };
                if !self.denial_reported
                    && (rule.is_some() || self.attempt >= config.denied_warn_after)
                {
                    self.denial_reported = true;
                    self.events.push_back(TierEvent::Denied {
                        tier,
                        message: error.message.clone(),
                        rule: rule.clone(),
                    });
                }
                self.denial_rule = rule;
                (
                    backoff.delay(self.attempt, error.retry_after, unit),
                    Wake::Never,
                )
            }
            ErrorClass::Forbidden => {
                if self.attempt == 1 {
                    self.events.push_back(TierEvent::Forbidden {
                        tier,
                        permission: error.permission.clone(),
                        message: error.message.clone(),
                    });
                }
                (
                    config
                        .forbidden_backoff
                        .delay(self.attempt, error.retry_after, unit),
                    Wake::Never,
                )
            }
            ErrorClass::NotInstalled => {
                if self.attempt == 1 {
                    self.events.push_back(TierEvent::NotInstalled {
                        tier,
                        message: error.message.clone(),
                    });
                }
                let wake = Wake::SetChange {
                    generation,
                    not_before: saturating_add(now, config.backoff.initial),
                };
                (config.not_installed_retry, wake)
            }
        };
        self.last_error = Some(error);
        self.phase = Phase::Waiting {
            until: saturating_add(now, wait),
            wake,
        };
    }

    /// Input: the server answered another call (it is reachable again): a wait after a
    /// transient error ends now, unless the server asked for it with `Retry-After`.
    pub fn handle_server_answered(&mut self, now: Instant) {
        // A `Retry-After` is the server's own request: it stands.
        if matches!(self.phase, Phase::Waiting { .. })
            && self
                .last_error
                .as_ref()
                .is_some_and(|e| e.class == ErrorClass::Transient && e.retry_after.is_none())
        {
            self.phase = Phase::Ready;
        }
        self.advance(now);
    }

    /// The cause of the last failed call, while the Tier is not converged.
    pub fn failing_with(&self) -> Option<ErrorClass> {
        self.last_error.as_ref().map(|e| e.class)
    }

    /// Whether the machine is waiting to retry, about to retry or retrying after a transient
    /// failure, and nothing else (a block, a hold-off) stands in the way.
    pub fn is_retrying_transient(&self) -> bool {
        matches!(
            self.phase,
            Phase::Waiting { .. } | Phase::Ready | Phase::InFlight { .. }
        ) && self.failing_with() == Some(ErrorClass::Transient)
    }

    /// Input: time has passed (call when `now` reaches [`poll_timeout`](Self::poll_timeout)).
    /// Timers (backoffs, hold-offs, the echo timeout, the end of a contest) fire only here.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.recover(now);
        self.advance_timers(now);
        self.advance(now);
    }

    /// Output: the call to make now, if any. At most one call is ever in flight: after an
    /// action, the next comes only once its outcome has been handed in.
    pub fn poll_action(&mut self, now: Instant) -> Option<Action<C>> {
        if self.phase != Phase::Ready {
            return None;
        }
        let (action, drift) = match decide(&self.spec, &self.observed) {
            Decision::WaitForSync | Decision::InSync => return None,
            Decision::Create => {
                if let Some(blocker) = self.blocker.clone() {
                    self.phase = Phase::Blocked { since: now };
                    self.emit_blocked(blocker);
                    return None;
                }
                (Action::Create(self.spec.clone()), Drift::default())
            }
            Decision::Update {
                resource_version,
                drift,
            } => (
                Action::Update {
                    tier: self.spec.clone(),
                    resource_version,
                },
                drift,
            ),
        };
        let overwritten = self
            .written_basis
            .as_ref()
            .is_some_and(|basis| *basis != self.fingerprint());
        let correction = self.was_in_sync || overwritten || self.contest.undo_uncounted;
        if !self.spend(now, correction) {
            return None;
        }
        self.phase = Phase::InFlight {
            basis: self.fingerprint(),
            generation: self.generation,
            kind: action.kind(),
            drift,
        };
        Some(action)
    }

    /// Output: when the machine next needs [`handle_timeout`](Self::handle_timeout), if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let phase = match &self.phase {
            Phase::AwaitEcho { deadline, .. } => Some(*deadline),
            Phase::Waiting { until, .. } | Phase::Hold { until } => Some(*until),
            _ => None,
        };
        // The budget's recovery (and the end of a contest) is due outside a hold or a call.
        let quiet = self
            .budget
            .full_at(&self.config.contest)
            .filter(|_| !matches!(self.phase, Phase::Hold { .. } | Phase::InFlight { .. }));
        match (phase, quiet) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Output: the next event, oldest first; `None` when all were taken.
    pub fn poll_event(&mut self) -> Option<TierEvent> {
        self.events.pop_front()
    }

    /// Getter: the published status.
    pub fn status(&self) -> TierStatus {
        let held = self
            .budget
            .last_hold()
            .map(|(until, hold)| WriteHold { until, hold });
        let contested_until = match &self.phase {
            Phase::Hold { until } => Some(*until),
            _ => held.map(|h| h.until),
        };
        // A cause of its own (a block, an error other than a Conflict) is what the Tier shows,
        // contested or not: only another writer's undo makes a contest.
        let own_cause = matches!(self.phase, Phase::Blocked { .. })
            || self
                .last_error
                .as_ref()
                .is_some_and(|e| e.class != ErrorClass::Stale);
        let contested = contested_until
            .filter(|_| self.contest.contested && self.phase != Phase::Converged && !own_cause)
            .map(|until| TierState::Contested {
                streak: self.contest.streak,
                until,
                by: self.contest.by.clone(),
            });
        let state = match (&self.phase, &self.last_error, self.error_since) {
            _ if contested.is_some() => contested.unwrap_or(TierState::Pending),
            (Phase::Converged, _, _) => TierState::Converged,
            (Phase::Blocked { since }, _, _) => {
                let blocker = self.blocker.clone().unwrap_or(Blocker {
                    tiers: Vec::new(),
                    reason: String::new(),
                });
                TierState::Blocked {
                    since: *since,
                    blockers: blocker.tiers,
                    reason: blocker.reason,
                }
            }
            (_, Some(error), Some(since)) => {
                let (attempt, message) = (self.attempt, error.message.clone());
                match error.class {
                    ErrorClass::Denied => TierState::Denied {
                        since,
                        attempt,
                        message,
                        rule: self.denial_rule.clone(),
                    },
                    ErrorClass::Forbidden => TierState::Forbidden {
                        since,
                        attempt,
                        permission: error.permission.clone(),
                        message,
                    },
                    ErrorClass::NotInstalled => TierState::NotInstalled {
                        since,
                        attempt,
                        message,
                    },
                    class @ (ErrorClass::Stale | ErrorClass::Transient) => TierState::Retrying {
                        attempt,
                        class,
                        error: message,
                    },
                }
            }
            _ => TierState::Pending,
        };
        TierStatus {
            name: self.spec.name().to_owned(),
            state,
            outcomes: self.outcomes,
            corrections: self.corrections,
            contested: self.contest.contested,
            held: held.filter(|_| !matches!(self.phase, Phase::Converged)),
            converged_at: self.converged_at,
            last_write: self.last_write,
        }
    }

    fn emit_blocked(&mut self, blocker: Blocker) {
        self.events.push_back(TierEvent::Blocked {
            tier: self.spec.name().to_owned(),
            blockers: blocker.tiers,
            reason: blocker.reason,
        });
    }

    /// Spends from the write budget for the write about to go, or holds it; `false` when
    /// held. `new_correction`: the write restores a Tier someone else changed (counted in
    /// `corrections` once it goes).
    ///
    /// A held write makes a contest only when it would restore an accepted write another
    /// writer undid, and no cause of its own (a denial, a refusal, a failure) stands in the
    /// way: judged by what the server confirmed.
    fn spend(&mut self, now: Instant, new_correction: bool) -> bool {
        match self.budget.spend(&self.config.contest, now) {
            Spend::Hold(until, _) => {
                self.phase = Phase::Hold { until };
                let own_cause = self
                    .last_error
                    .as_ref()
                    .is_some_and(|e| e.class != ErrorClass::Stale);
                if self.contest.undone && self.contest.streak > 0 && !own_cause {
                    self.declare_contest();
                }
                false
            }
            Spend::Go => {
                if new_correction {
                    self.corrections = self.corrections.saturating_add(1);
                    self.was_in_sync = false;
                    self.written_basis = None;
                    self.contest.undo_uncounted = false;
                }
                true
            }
        }
    }

    /// The Tier is contested (once per episode): another writer undid accepted writes until the
    /// budget ran out.
    fn declare_contest(&mut self) {
        if !std::mem::replace(&mut self.contest.contested, true) {
            self.events.push_back(TierEvent::Contested {
                tier: self.spec.name().to_owned(),
                streak: self.contest.streak,
                by: self.contest.by.clone(),
            });
        }
    }

    /// Whether the cache saw this Tier deleted after `generation`.
    fn deleted_since(&self, generation: Generation) -> bool {
        self.deleted_at.is_some_and(|at| at > generation)
    }

    /// Whether the cache shows the Tier changed since a write or failure decided on `basis` at
    /// `generation`: another resourceVersion (or absence), or a deletion seen since.
    fn changed_since(&self, basis: &Fingerprint, generation: Generation) -> bool {
        *basis != self.fingerprint() || self.deleted_since(generation)
    }

    /// Judges the standing accepted write against the current observation: undone when the
    /// cache shows the Tier deleted since the write was decided, or not in sync at another
    /// resourceVersion than the write's basis (the write's own result comes first: after it,
    /// any change is another writer's). An undo names the writer the object names (none for a
    /// deletion) and makes the next write a correction; it counts in the streak at once for an
    /// update, at the next accepted write for a create (see [`Contest`]).
    fn judge_standing(&mut self) {
        let Some(standing) = &mut self.contest.standing else {
            return;
        };
        let deleted = self.deleted_at.is_some_and(|at| at > standing.generation);
        let moved = standing.basis != self.observed.resource_version().map(str::to_owned);
        let undone = match decide(&self.spec, &self.observed) {
            Decision::WaitForSync => false,
            Decision::InSync => {
                standing.echoed |= moved;
                false
            }
            Decision::Create | Decision::Update { .. } => deleted || moved || standing.echoed,
        };
        if !undone {
            return;
        }
        let kind = standing.kind;
        self.contest.standing = None;
        self.contest.undone = true;
        self.contest.undo_uncounted = true;
        // The deletion is seen: a second create proves no other one.
        self.contest.created_unseen = false;
        // A create's object changed with no deletion seen since is certainly the create's;
        // gone, it may have been another's, deleted before the create applied.
        let certain = kind == WriteKind::Update
            || (!deleted && matches!(self.observed, Observed::Present(_)));
        if certain {
            self.contest.streak = self.contest.streak.saturating_add(1);
        } else {
            self.contest.suspected = true;
        }
        self.contest.by = match &self.observed {
            Observed::Present(tier) => tier.last_writer().cloned(),
            _ => None,
        };
    }

    /// The last failed call's cause is gone (a success, or the Tier converged).
    fn clear_error(&mut self) {
        self.last_error = None;
        self.error_since = None;
        self.denial_rule = None;
        self.denial_reported = false;
    }

    /// The budget is full again: its holds, the streak and a contest are over.
    fn recover(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Hold { .. } | Phase::InFlight { .. }) {
            return;
        }
        let recovered = self.budget.recover(&self.config.contest, now);
        if recovered || (!self.budget.is_spent() && self.budget.is_full(&self.config.contest)) {
            self.contest.streak = 0;
            if std::mem::take(&mut self.contest.contested) {
                self.events.push_back(TierEvent::ContestEnded {
                    tier: self.spec.name().to_owned(),
                });
            }
        }
    }

    /// Moves timed phases whose time has come.
    fn advance_timers(&mut self, now: Instant) {
        let ready = match &self.phase {
            Phase::AwaitEcho {
                deadline,
                basis,
                generation,
                ..
            } if now >= *deadline => {
                if !self.changed_since(basis, *generation) {
                    self.echo_missed();
                }
                true
            }
            Phase::AwaitEcho { .. } => false,
            Phase::Waiting { until, wake } if now >= *until => {
                if let Wake::TierChange { basis, generation } = wake
                    && !self.changed_since(basis, *generation)
                {
                    self.cache_lagged();
                }
                true
            }
            Phase::Waiting { .. } => false,
            Phase::Hold { until } => {
                let over = now >= *until;
                if over {
                    self.budget.hold_over();
                }
                over
            }
            _ => false,
        };
        if ready {
            self.phase = Phase::Ready;
        }
    }

    /// Moves through every transition that the current inputs (not time) allow.
    fn advance(&mut self, now: Instant) {
        self.judge_standing();
        match &self.phase {
            Phase::InFlight { .. } => return,
            Phase::Unsynced if self.observed == Observed::Unknown => return,
            Phase::AwaitEcho {
                basis,
                generation,
                confirmed,
                ..
            } if self.changed_since(basis, *generation) => {
                let delay = now.saturating_duration_since(*confirmed);
                self.echo_seen(delay);
            }
            _ => {}
        }
        if decide(&self.spec, &self.observed) == Decision::InSync {
            self.converge(now);
            return;
        }
        let ready = match &self.phase {
            Phase::Unsynced | Phase::Ready | Phase::Converged => true,
            // The cache shows the write (or what came after it), or a deletion since: a
            // create and its deletion seen together end the wait at once.
            Phase::AwaitEcho {
                basis, generation, ..
            } => self.changed_since(basis, *generation),
            Phase::Blocked { .. } => self.blocker.is_none() || !self.wants_create(),
            // A refusal concerns its verb: a Tier now needing the other verb does not wait
            // on it (RBAC grants create and update separately).
            Phase::Waiting { .. }
                if self.failing_with() == Some(ErrorClass::Forbidden)
                    && self.failed_kind != self.wanted_kind() =>
            {
                true
            }
            Phase::Waiting { wake, .. } => match wake {
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
                _ => self.woken(wake),
            },
            Phase::Hold { .. } | Phase::InFlight { .. } => false,
        };
        if ready {
            self.phase = Phase::Ready;
        }
    }

    /// The echo deadline passed with the cache still showing the write's basis: the cache lags
    /// more than `echo_wait` (or lost the event). The write goes out again, as a fallback; the
    /// next echo gets twice as long, and a denial of a create sent again concerns the Tier the
    /// first one created, so it waits for the cache as after a lost create.
    fn echo_missed(&mut self) {
        self.cache_lagged();
        self.maybe_created = self.last_write == Some(WriteKind::Create);
    }

    /// A wait for the cache ended on its timer with the cache unchanged: the cache lags more
    /// than `echo_wait`, so the next wait for it is twice as long (up to the backoff cap).
    fn cache_lagged(&mut self) {
        let cap = self.config.backoff.cap.max(self.config.echo_timeout);
        self.echo_wait = self.echo_wait.saturating_mul(2).min(cap);
    }

    /// The cache showed a write `delay` after it was confirmed. An echo within half the
    /// current wait means the lag that lengthened it is gone: the wait halves, down to
    /// `echo_timeout` (so a learned wait decays as it grew, one step per write).
    fn echo_seen(&mut self, delay: Duration) {
        if delay.saturating_mul(2) <= self.echo_wait {
            self.echo_wait = (self.echo_wait / 2).max(self.config.echo_timeout);
        }
    }

    /// How long this machine now waits for the cache after a write: `echo_timeout`, doubled
    /// by each echo that came too late (up to the backoff cap), halved by each that came in
    /// less than half of it.
    pub fn echo_wait(&self) -> Duration {
        self.echo_wait
    }

    /// The cache is shared: another Tier learned it lags by `wait` (or no longer does); wait
    /// as long from now on. A write still awaiting its echo gets a longer wait too.
    pub(crate) fn share_echo_wait(&mut self, wait: Duration) {
        let longer = wait.saturating_sub(self.echo_wait);
        if let Phase::AwaitEcho { deadline, .. } = &mut self.phase {
            *deadline = saturating_add(*deadline, longer);
        }
        self.echo_wait = wait;
    }

    fn converge(&mut self, now: Instant) {
        self.phase = Phase::Converged;
        self.maybe_created = false;
        self.attempt = 0;
        self.clear_error();
        self.budget.settle();
        // Someone else may have restored it (or a suspected undo was another's object):
        // nothing is left to correct.
        self.contest.undone = false;
        self.contest.suspected = false;
        self.contest.undo_uncounted = false;
        self.was_in_sync = true;
        self.converged_at.get_or_insert(now);
    }

    fn woken(&self, wake: &Wake) -> bool {
        match wake {
            Wake::Never => false,
            Wake::TierChange { basis, generation } => self.changed_since(basis, *generation),
            Wake::SetChange { generation, .. } => self.generation > *generation,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        self.observed.resource_version().map(str::to_owned)
    }
}
