//! The write budget of one Tier: a token bucket that every write spends from, whatever its
//! cause (a correction, a retry after a Conflict, a denial, a 5xx or a timeout).
//!
//! The bucket holds [`ContestPolicy::burst`] tokens and earns one every
//! [`ContestPolicy::refill`]. A write without a token is *held*: it waits
//! [`ContestPolicy::hold_initial`], doubling with each hold in a row up to
//! [`ContestPolicy::hold_cap`], then goes without a token. Tokens are not earned during a hold
//! (a long hold must not buy a new burst). Once the bucket is full again the holds reset: the
//! budget (and a contest) is over. Each write either spends a token (at most `burst` plus one
//! per `refill`) or follows a served hold (at most one per hold, the holds doubling to
//! `hold_cap`), so a window of length T holds at most [`ContestPolicy::max_writes`] writes.

use std::time::{Duration, Instant};

use crate::fleet::saturating_add;
use crate::machine::ContestPolicy;

/// Whether a write may go now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spend {
    /// It goes (a token was spent, or a hold was served).
    Go,
    /// It is held until the instant, for the duration.
    Hold(Instant, Duration),
}

/// The token bucket and its holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Budget {
    tokens: u32,
    /// Tokens accrue from this instant on (while not full).
    refill_from: Option<Instant>,
    /// Holds in a row (each doubles the next); 0 while the budget is not spent.
    holds: u32,
    /// Whether the hold just ended lets the next write through.
    hold_served: bool,
    /// The last hold: until when, and how long.
    last_hold: Option<(Instant, Duration)>,
}

impl Budget {
    /// A full bucket.
    pub(crate) fn new(policy: &ContestPolicy) -> Self {
        Self {
            tokens: policy.burst,
            refill_from: None,
            holds: 0,
            hold_served: false,
            last_hold: None,
        }
    }

    /// Asks to write at `now`.
    pub(crate) fn spend(&mut self, policy: &ContestPolicy, now: Instant) -> Spend {
        if std::mem::take(&mut self.hold_served) {
            // Tokens "earned" during the hold are forfeited.
            self.tokens = 0;
            self.refill_from = Some(now);
            return Spend::Go;
        }
        self.refill(policy, now);
        if self.tokens == 0 {
            let factor = 1u32.checked_shl(self.holds.min(31)).unwrap_or(u32::MAX);
            let hold = policy
                .hold_initial
                .saturating_mul(factor)
                .min(policy.hold_cap);
            self.holds = self.holds.saturating_add(1);
            let until = saturating_add(now, hold);
            self.last_hold = Some((until, hold));
            return Spend::Hold(until, hold);
        }
        self.tokens -= 1;
        self.refill_from.get_or_insert(now);
        Spend::Go
    }

    /// The hold is over: the next write goes without a token.
    pub(crate) fn hold_over(&mut self) {
        self.hold_served = true;
    }

    /// A write is no longer wanted (the Tier converged): a served hold buys nothing more.
    pub(crate) fn settle(&mut self) {
        self.hold_served = false;
    }

    /// Whether the budget is spent: writes are held, or were since it was last full.
    pub(crate) fn is_spent(&self) -> bool {
        self.holds > 0
    }

    /// Whether the bucket holds every token (as of its last refill).
    pub(crate) fn is_full(&self, policy: &ContestPolicy) -> bool {
        self.tokens >= policy.burst
    }

    /// The last hold (until when, how long), while the budget is spent.
    pub(crate) fn last_hold(&self) -> Option<(Instant, Duration)> {
        self.last_hold.filter(|_| self.is_spent())
    }

    /// When the bucket will be full again, while the budget is spent (outside a hold).
    pub(crate) fn full_at(&self, policy: &ContestPolicy) -> Option<Instant> {
        if !self.is_spent() {
            return None;
        }
        let from = self.refill_from?;
        let missing = policy.burst.saturating_sub(self.tokens);
        Some(saturating_add(from, policy.refill.saturating_mul(missing)))
    }

    /// Refills up to `now`; once full, the holds reset. Returns whether the budget just
    /// recovered from being spent.
    pub(crate) fn recover(&mut self, policy: &ContestPolicy, now: Instant) -> bool {
        self.refill(policy, now);
        if self.tokens >= policy.burst && self.holds > 0 && !self.hold_served {
            self.holds = 0;
            self.last_hold = None;
            return true;
        }
        false
    }

    /// Adds the tokens earned since `refill_from`, up to `burst`.
    fn refill(&mut self, policy: &ContestPolicy, now: Instant) {
        let Some(from) = self.refill_from else {
            self.tokens = policy.burst;
            return;
        };
        if self.tokens >= policy.burst {
            self.refill_from = None;
            return;
        }
        let elapsed = now.saturating_duration_since(from);
        let earned = if policy.refill.is_zero() {
            u128::from(policy.burst)
        } else {
            elapsed.as_nanos() / policy.refill.as_nanos()
        };
        let earned = u32::try_from(earned).unwrap_or(u32::MAX);
        self.tokens = self.tokens.saturating_add(earned).min(policy.burst);
        if self.tokens < policy.burst {
            self.refill_from = Some(saturating_add(from, policy.refill.saturating_mul(earned)));
        } else {
            self.refill_from = None;
        }
    }
}
