//! The timing of a [`TierMachine`](super::TierMachine): its backoffs, waits and write budget,
//! validated at construction.

use std::time::Duration;

use crate::backoff::Backoff;

/// Timing of a [`TierMachine`](super::TierMachine). Checked by [`validate`](Self::validate)
/// when a machine, fleet or driver is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineConfig {
    /// Backoff after transient errors (250 ms doubling to 10 s); its cap also bounds the stale
    /// fallback wait.
    pub backoff: Backoff,
    /// Backoff after a denial that the observed set does not explain (400 ms doubling to 1 s,
    /// so a webhook whose view lags ours by L is retried by L + 1 s).
    pub denied_backoff: Backoff,
    /// Denials in a row, unexplained by the observed set, retried on `denied_backoff`; the
    /// last warns with a [`TierEvent::Denied`](super::TierEvent::Denied) and later ones wait on `backoff` (default 4,
    /// about 3 s of retries).
    pub denied_warn_after: u32,
    /// Backoff after Forbidden or Unauthorized (1 s doubling to 60 s).
    pub forbidden_backoff: Backoff,
    /// How long a Tier whose resource type is not installed waits when the set does not change
    /// (default 10 s).
    pub not_installed_retry: Duration,
    /// How long to wait for the cache to show a successful write before deciding again on what
    /// it shows (default 3 s). Once a wait for the cache ends on its timer with the cache
    /// unchanged, later waits double, up to the backoff cap, for every Tier of the fleet; an
    /// echo within half the wait halves it again, down to `echo_timeout`.
    pub echo_timeout: Duration,
    /// The write budget: how every write, and so every correction, is limited.
    pub contest: ContestPolicy,
}

impl Default for MachineConfig {
    fn default() -> Self {
        Self {
            backoff: Backoff::default(),
            denied_backoff: Backoff {
                initial: Duration::from_millis(400),
                cap: Duration::from_secs(1),
            },
            denied_warn_after: 4,
            forbidden_backoff: Backoff {
                initial: Duration::from_secs(1),
                cap: Duration::from_secs(60),
            },
            not_installed_retry: Duration::from_secs(10),
            echo_timeout: Duration::from_secs(3),
            contest: ContestPolicy::default(),
        }
    }
}

/// The write budget of a Tier, and the contest rule: every write is limited by a token bucket.
///
/// Every write (a create, an update, a retry after any error) spends a token; the bucket holds
/// `burst` tokens and gains one every `refill` (outside holds), so an actor slower than one
/// change per `refill` is corrected at once, every time, and a fault-free run spends one token
/// per drifted Tier. Without a token a write is held `hold_initial`, doubling with each hold in
/// a row up to `hold_cap`: a window holds at most [`max_writes`](Self::max_writes) writes of a
/// Tier (with the defaults 10 plus one per 15 s).
///
/// A contest is judged by what the server confirmed: if the held write would restore what
/// another writer undid of a write the server had *accepted* from tierd (changed its fields
/// again, or deleted it, as the cache shows: a delete the lister saw counts even when the cache
/// never showed the create), the Tier is *contested*
/// ([`TierEvent::Contested`](super::TierEvent::Contested), counting the undone writes and
/// naming the writer that undid the last). A held write after a denial, a refusal, a missing
/// resource or a transient failure keeps that cause's state, and its status notes the budget
/// ([`TierStatus::held`](super::TierStatus::held)): such writes never make a contest, whatever
/// they spend. Once the bucket is full again the holds reset and a contest ends
/// ([`TierEvent::ContestEnded`](super::TierEvent::ContestEnded)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContestPolicy {
    /// Immediate corrections before holding off (default 3).
    pub burst: u32,
    /// The time to earn back one token (default 20 s).
    pub refill: Duration,
    /// The first hold-off (default 1 s).
    pub hold_initial: Duration,
    /// The longest hold-off (default 60 s).
    pub hold_cap: Duration,
}

impl ContestPolicy {
    /// The most writes one Tier makes in any window of length `window`, whatever happens:
    /// `burst`, plus one per `refill` (the tokens), plus the holds (one write each) until the
    /// hold-off reaches `hold_cap` and one per `hold_cap` after that.
    pub fn max_writes(&self, window: Duration) -> u64 {
        let per = |d: Duration| {
            u64::try_from(window.as_nanos() / d.as_nanos().max(1)).unwrap_or(u64::MAX)
        };
        let mut doublings = 0u64;
        let mut hold = self.hold_initial;
        while hold < self.hold_cap && doublings < 64 {
            hold = hold.saturating_mul(2);
            doublings += 1;
        }
        u64::from(self.burst)
            .saturating_add(per(self.refill))
            .saturating_add(doublings.saturating_add(1))
            .saturating_add(per(self.hold_cap))
    }

    /// The longest a spent budget (a contest) can last after the other writer stopped: the
    /// last hold, then the time to refill the bucket (`hold_cap + burst × refill`, default
    /// 120 s).
    pub fn quiet(&self) -> Duration {
        self.hold_cap
            .saturating_add(self.refill.saturating_mul(self.burst))
    }
}

impl Default for ContestPolicy {
    fn default() -> Self {
        Self {
            burst: 3,
            refill: Duration::from_secs(20),
            hold_initial: Duration::from_secs(1),
            hold_cap: Duration::from_secs(60),
        }
    }
}

/// The longest duration any timing field may hold: a day. Longer waits are never useful to a
/// controller that must converge, and the bound keeps every deadline computable.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// The largest `burst` (and `denied_warn_after`) accepted.
pub const MAX_COUNT: u32 = 1000;

/// A configuration value outside its allowed range. Nothing was built; fix the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid tierd configuration: {field} is {value}, but must be {allowed}")]
pub struct ConfigError {
    /// The field, as a path (`machine.contest.hold_cap`).
    pub field: &'static str,
    /// Its value, rendered.
    pub value: String,
    /// The allowed range, in words.
    pub allowed: String,
}

impl ConfigError {
    /// Checks that `value` lies in `min..=max` (durations).
    pub fn check_duration(
        field: &'static str,
        value: Duration,
        min: Duration,
        max: Duration,
    ) -> Result<(), ConfigError> {
        if (min..=max).contains(&value) {
            return Ok(());
        }
        Err(ConfigError {
            field,
            value: format!("{value:?}"),
            allowed: format!("between {min:?} and {max:?}"),
        })
    }

    fn check_count(field: &'static str, value: u32, min: u32, max: u32) -> Result<(), Self> {
        if (min..=max).contains(&value) {
            return Ok(());
        }
        Err(ConfigError {
            field,
            value: value.to_string(),
            allowed: format!("between {min} and {max}"),
        })
    }

    fn check_backoff(
        initial: &'static str,
        cap: &'static str,
        backoff: &Backoff,
    ) -> Result<(), Self> {
        let ms = Duration::from_millis(1);
        Self::check_duration(initial, backoff.initial, ms, MAX_DURATION)?;
        Self::check_duration(cap, backoff.cap, backoff.initial, MAX_DURATION)
    }
}

impl MachineConfig {
    /// Checks every field against its allowed range: every duration between 1 ms and
    /// [`MAX_DURATION`] (a cap at least its initial value), `burst` and `denied_warn_after`
    /// between 1 and [`MAX_COUNT`].
    ///
    /// # Errors
    ///
    /// The first field out of range, with the range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let ms = Duration::from_millis(1);
        ConfigError::check_backoff(
            "machine.backoff.initial",
            "machine.backoff.cap",
            &self.backoff,
        )?;
        ConfigError::check_backoff(
            "machine.denied_backoff.initial",
            "machine.denied_backoff.cap",
            &self.denied_backoff,
        )?;
        ConfigError::check_backoff(
            "machine.forbidden_backoff.initial",
            "machine.forbidden_backoff.cap",
            &self.forbidden_backoff,
        )?;
        ConfigError::check_count(
            "machine.denied_warn_after",
            self.denied_warn_after,
            1,
            MAX_COUNT,
        )?;
        ConfigError::check_duration(
            "machine.not_installed_retry",
            self.not_installed_retry,
            ms,
            MAX_DURATION,
        )?;
        ConfigError::check_duration("machine.echo_timeout", self.echo_timeout, ms, MAX_DURATION)?;
        let contest = &self.contest;
        ConfigError::check_count("machine.contest.burst", contest.burst, 1, MAX_COUNT)?;
        ConfigError::check_duration("machine.contest.refill", contest.refill, ms, MAX_DURATION)?;
        ConfigError::check_duration(
            "machine.contest.hold_initial",
            contest.hold_initial,
            ms,
            MAX_DURATION,
        )?;
        ConfigError::check_duration(
            "machine.contest.hold_cap",
            contest.hold_cap,
            contest.hold_initial,
            MAX_DURATION,
        )
    }
}
