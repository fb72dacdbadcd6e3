//! Where a Tier stands, as published: [`TierState`] (one variant per cause) and
//! [`TierStatus`] (the state, the counts, a spent write budget).

use std::fmt;
use std::time::{Duration, Instant};

use super::WriteKind;
use crate::error::ErrorClass;
use crate::observe::FieldWriter;

/// `1 time in a row`, `3 times in a row`.
pub(crate) fn times(n: u32) -> String {
    if n == 1 {
        "1 time in a row".to_owned()
    } else {
        format!("{n} times in a row")
    }
}

/// `another writer (kubectl-edit, at ...)`, or `another writer`.
pub(crate) fn writer_words(by: Option<&FieldWriter>) -> String {
    match by {
        Some(writer) => format!("another writer ({writer})"),
        None => "another writer".to_owned(),
    }
}

/// Where a Tier stands, as published to readiness, metrics and logs. Each cause of not being
/// converged has its own state; [`fmt::Display`] is the one human rendering.
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
    /// The observed set shows that a create would be denied: nothing is sent until it changes.
    Blocked {
        /// Since when.
        since: Instant,
        /// The Tiers in the way (see [`Blocker::tiers`](super::Blocker::tiers)).
        blockers: Vec<String>,
        /// Why, e.g. `priority 150 is held by Tier team-a`.
        reason: String,
    },
    /// The server denies a write the observed set allows: its admission webhook's view lags
    /// ours (retried on a short backoff), or it applies a rule the controller recognises
    /// (`rule`, retried on the slow backoff).
    Denied {
        /// When the first denial in a row arrived.
        since: Instant,
        /// Consecutive denials.
        attempt: u32,
        /// The server's message.
        message: String,
        /// The rule the denial comes from and its fix, in words, when the controller recognises
        /// it ([`Controller::explain_denial`](crate::Controller::explain_denial)).
        rule: Option<String>,
    },
    /// tierd lacks a permission; retried on a slow backoff.
    Forbidden {
        /// When the first refusal in a row arrived.
        since: Instant,
        /// Consecutive refusals.
        attempt: u32,
        /// The missing permission, if the server said.
        permission: Option<String>,
        /// The server's message.
        message: String,
    },
    /// The Tier resource type is not served (the CRD is missing).
    NotInstalled {
        /// When the first such answer in a row arrived.
        since: Instant,
        /// Consecutive attempts.
        attempt: u32,
        /// The server's message.
        message: String,
    },
    /// Another writer undid writes the server had accepted from tierd, and the write budget is
    /// spent: the next correction is held off. Judged by what the server confirmed: denied,
    /// refused or failed writes never make a contest.
    Contested {
        /// tierd's accepted writes another writer undid, since the budget was last full.
        streak: u32,
        /// When the held-off correction will be made.
        until: Instant,
        /// The writer that last undid one, where the object names it (the `managedFields`
        /// manager that last set a field tierd corrects); `None` for a deletion.
        by: Option<FieldWriter>,
    },
}

impl TierState {
    /// Every label [`as_str`](Self::as_str) can return.
    pub const LABELS: [&'static str; 8] = [
        "pending",
        "converged",
        "retrying",
        "blocked",
        "denied",
        "forbidden",
        "not-installed",
        "contested",
    ];

    /// A short lowercase label, stable for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            TierState::Pending => "pending",
            TierState::Converged => "converged",
            TierState::Retrying { .. } => "retrying",
            TierState::Blocked { .. } => "blocked",
            TierState::Denied { .. } => "denied",
            TierState::Forbidden { .. } => "forbidden",
            TierState::NotInstalled { .. } => "not-installed",
            TierState::Contested { .. } => "contested",
        }
    }
}

fn attempts(n: u32) -> String {
    if n == 1 {
        "1 failed attempt".to_owned()
    } else {
        format!("{n} failed attempts")
    }
}

impl fmt::Display for TierState {
    /// The label, then the cause in words: `blocked: priority 150 is held by Tier team-a`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = self.as_str();
        match self {
            TierState::Pending | TierState::Converged => f.write_str(label),
            TierState::Retrying {
                attempt,
                class,
                error,
            } => write!(f, "{label} after {} ({class}): {error}", attempts(*attempt)),
            TierState::Blocked { reason, .. } => write!(f, "{label}: {reason}"),
            TierState::Denied {
                attempt,
                message,
                rule: Some(rule),
                ..
            } => write!(f, "{label} after {}: {message}; {rule}", attempts(*attempt)),
            TierState::Denied {
                attempt, message, ..
            } => write!(
                f,
                "{label} after {} although the cache shows no reason (the admission webhook's \
                 view may lag): {message}",
                attempts(*attempt)
            ),
            TierState::Forbidden {
                attempt,
                permission,
                message,
                ..
            } => match permission {
                Some(permission) => write!(
                    f,
                    "{label} after {}: tierd may not {permission}; grant it: {message}",
                    attempts(*attempt)
                ),
                None => write!(f, "{label} after {}: {message}", attempts(*attempt)),
            },
            TierState::NotInstalled {
                attempt, message, ..
            } => write!(f, "{label} after {}: {message}", attempts(*attempt)),
            TierState::Contested { streak, by, .. } => write!(
                f,
                "{label}: {} undid tierd's accepted writes ({}); the next correction is held off",
                writer_words(by.as_ref()),
                times(*streak)
            ),
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
    /// Calls the server's admission denied.
    pub denied: u64,
    /// Calls refused for a missing permission.
    pub forbidden: u64,
    /// Calls answered "resource type not installed".
    pub not_installed: u64,
}

impl OutcomeCounts {
    /// All finished calls.
    pub fn total(&self) -> u64 {
        self.ok + self.failed()
    }

    /// All failed calls.
    pub fn failed(&self) -> u64 {
        ErrorClass::ALL.iter().map(|c| self.of(*c)).sum()
    }

    /// Failed calls of `class`.
    pub fn of(&self, class: ErrorClass) -> u64 {
        match class {
            ErrorClass::Stale => self.stale,
            ErrorClass::Transient => self.transient,
            ErrorClass::Denied => self.denied,
            ErrorClass::Forbidden => self.forbidden,
            ErrorClass::NotInstalled => self.not_installed,
        }
    }

    pub(crate) fn count(&mut self, class: ErrorClass) {
        let slot = match class {
            ErrorClass::Stale => &mut self.stale,
            ErrorClass::Transient => &mut self.transient,
            ErrorClass::Denied => &mut self.denied,
            ErrorClass::Forbidden => &mut self.forbidden,
            ErrorClass::NotInstalled => &mut self.not_installed,
        };
        *slot = slot.saturating_add(1);
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
    /// Corrections made so far (see [`ContestPolicy`](super::ContestPolicy)).
    pub corrections: u64,
    /// Whether the Tier is contested: another writer undid tierd's accepted writes until the
    /// write budget ran out; back to `false` once the budget is full again (see
    /// [`ContestPolicy`](super::ContestPolicy)).
    pub contested: bool,
    /// Set while the Tier's write budget is spent (see [`ContestPolicy`](super::ContestPolicy)): its writes are held
    /// off, whatever their cause. The state says the cause (contested, or the error).
    pub held: Option<WriteHold>,
    /// When the Tier first converged, if it has (latched).
    pub converged_at: Option<Instant>,
    /// The kind of the last successful write, if any.
    pub last_write: Option<WriteKind>,
}

impl TierStatus {
    /// Whether the Tier reached its write bound: its budget is spent (every further write is
    /// held off, [`held`](Self::held)) or it is [`TierState::Contested`]. Such a Tier is in a
    /// visible state: the state names the cause, and the rendering notes the budget.
    pub fn is_write_limited(&self) -> bool {
        self.held.is_some() || matches!(self.state, TierState::Contested { .. })
    }
}

impl fmt::Display for TierStatus {
    /// `networkops blocked: priority 150 is held by Tier team-a`: the one rendering shared by
    /// logs, readiness reasons, `tierd ensure` and the demo. A spent write budget is noted:
    /// `...; write budget spent, next write held 4s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.state)?;
        match (&self.held, &self.state) {
            (Some(held), state) if !matches!(state, TierState::Contested { .. }) => {
                write!(f, "; write budget spent, next write held {:?}", held.hold)
            }
            _ => Ok(()),
        }
    }
}

/// A Tier's spent write budget: writes are held off (see [`ContestPolicy`](super::ContestPolicy)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteHold {
    /// When the current (or last) hold ends.
    pub until: Instant,
    /// How long it is: the hold-off doubles with each hold in a row, up to `hold_cap`.
    pub hold: Duration,
}
