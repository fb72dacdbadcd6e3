//! The bounds of the two per-Tier invariants of issue 15, in one place, and the one question
//! they ask tierd's status ([`is_visible`]).
//!
//! - **Per-Tier liveness** ([`Invariant::Liveness`](crate::Invariant::Liveness)): a desired
//!   Tier that the world allows to be written (no fault aimed at it or at the verb it needs, no
//!   other Tier on its priority, faults not fleet-wide) is in sync in the store within
//!   [`Scenario::liveness_bound`](crate::Scenario::liveness_bound) of the world allowing it,
//!   whatever the other Tiers do. A Tier someone else changed at least [`HOT_EDITS`] times in the
//!   [`HOT_WINDOW`] before is in a fight: it gets [`ContestPolicy::hold_cap`] more (a contested
//!   correction may be held off that long). Only allowances that start before faults stop are
//!   checked: after that the convergence invariant applies.
//! - **Per-Tier write bound** ([`Invariant::WriteBound`](crate::Invariant::WriteBound)): an
//!   initializer's writes of one Tier, failed ones included, in any window `w` of
//!   [`WRITE_WINDOWS`] are at most [`WRITE_BURST`] `+ w /` [`WRITE_HOLD_OFF`] (hard); more than
//!   [`SOFT_LIMIT`] in [`SOFT_WINDOW`] only while its status shows why ([`is_visible`]).
//!
//! [`ContestPolicy::hold_cap`]: tier_core::ContestPolicy::hold_cap

use std::time::Duration;

use tier_core::{Backoff, ErrorClass, TierState, TierStatus};

/// Added to every liveness bound: scheduling, jitter, a denied retry more.
pub const LIVENESS_SLACK: Duration = Duration::from_secs(5);
/// How far back someone else's changes of a Tier count as a fight (the contest's quiet period).
pub const HOT_WINDOW: Duration = Duration::from_secs(120);
/// Changes by someone else within [`HOT_WINDOW`] that make a fight (the contest's burst).
pub const HOT_EDITS: usize = 3;

/// Writes of one Tier an initializer may send at once before the hold-off rate applies.
pub const WRITE_BURST: usize = 10;
/// The sustained rate of the hard write bound: one write per this long.
pub const WRITE_HOLD_OFF: Duration = Duration::from_secs(5);
/// The windows the hard write bound is checked over (the longest is also how long write times
/// are kept).
pub const WRITE_WINDOWS: [Duration; 3] = [
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(300),
];
/// The window of the soft write rate.
pub const SOFT_WINDOW: Duration = Duration::from_secs(120);
/// Writes of one Tier within [`SOFT_WINDOW`] beyond which its status must show why
/// ([`is_visible`]): what tierd's write budget allows without holding a write (a burst of 3,
/// then one token per 20 s, in a window closed at both ends: 3 + 120 / 20 + 1). A Tier that
/// writes more has been held, and must say so.
pub const SOFT_LIMIT: usize = 10;

/// The most creates one initializer may send in `duration` while RBAC refuses every create:
/// one, then one per step of `backoff` for the whole fleet, each step at least half its nominal
/// wait (the jitter).
pub fn fleet_probe_limit(backoff: &Backoff, duration: Duration) -> usize {
    let mut elapsed = Duration::ZERO;
    let mut sent = 1;
    for attempt in 1..=u32::MAX {
        let step = backoff.nominal(attempt) / 2;
        elapsed = elapsed.saturating_add(step.max(Duration::from_millis(1)));
        if elapsed > duration {
            break;
        }
        sent += 1;
    }
    sent
}

/// The most writes of one Tier allowed in `window` by the hard bound.
pub fn hard_limit(window: Duration) -> usize {
    let rate = window.as_millis() / WRITE_HOLD_OFF.as_millis().max(1);
    WRITE_BURST.saturating_add(usize::try_from(rate).unwrap_or(usize::MAX))
}

/// Whether a Tier's status shows a person why it keeps being written: contested (someone else
/// keeps changing it), or a cause the writes cannot fix by themselves (the server failing,
/// admission denying, a permission or the resource type missing, a blocker). A Tier retrying
/// after Conflicts (stale), pending or converged is not: a write loop there is one nobody
/// reports.
///
/// A Tier whose write budget is spent says so (`TierStatus::is_write_limited`: a held write
/// noted in the status, or contested) and is visible whatever its state.
///
/// This is the one place that reads tier-core's status for the write bound.
pub fn is_visible(tier: &TierStatus) -> bool {
    tier.contested
        || tier.is_write_limited()
        || match &tier.state {
            TierState::Contested { .. }
            | TierState::Blocked { .. }
            | TierState::Denied { .. }
            | TierState::Forbidden { .. }
            | TierState::NotInstalled { .. } => true,
            TierState::Retrying { class, .. } => *class != ErrorClass::Stale,
            TierState::Pending | TierState::Converged => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hard_limit_is_burst_plus_window_over_hold_off() {
        assert_eq!(hard_limit(Duration::from_secs(10)), 12);
        assert_eq!(hard_limit(Duration::from_secs(300)), 70);
        assert_eq!(hard_limit(Duration::ZERO), WRITE_BURST);
    }

    #[test]
    fn the_fleet_probe_limit_counts_backoff_steps() {
        let forbidden = Backoff {
            initial: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        };
        // Halves 0.5, 1, 2, 4, 8, 16, 30: 61.5 s for seven steps.
        assert_eq!(fleet_probe_limit(&forbidden, Duration::from_secs(60)), 7);
        assert_eq!(fleet_probe_limit(&forbidden, Duration::ZERO), 1);
        assert_eq!(fleet_probe_limit(&forbidden, Duration::from_secs(5)), 4);
    }

    #[test]
    fn only_stale_retries_and_quiet_states_are_invisible() {
        let mut tier = TierStatus {
            name: "a".into(),
            state: TierState::Retrying {
                attempt: 3,
                class: ErrorClass::Stale,
                error: "Conflict".into(),
            },
            outcomes: tier_core::OutcomeCounts::default(),
            corrections: 0,
            contested: false,
            converged_at: None,
            last_write: None,
            held: None,
        };
        assert!(!is_visible(&tier));
        tier.contested = true;
        assert!(is_visible(&tier));
        tier.contested = false;
        tier.state = TierState::Retrying {
            attempt: 3,
            class: ErrorClass::Transient,
            error: "503".into(),
        };
        assert!(is_visible(&tier));
        tier.state = TierState::Pending;
        assert!(!is_visible(&tier));
    }
}
