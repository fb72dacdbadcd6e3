//! [`RetryBackoff`]: kube-runtime's [`Backoff`] on the core's jittered, capped
//! [`tier_core::Backoff`], for the watches and the start-up retries of an assembly that must
//! converge soon after the API server comes back.
//!
//! kube's `DefaultBackoff` (client-go's: 0.8 s doubling to 30 s) is kind to a struggling API
//! server but, after a ten-second outage at start, can leave a watch waiting twenty more
//! seconds. A [`RetryBackoff`] with [`RetryBackoff::STARTUP`] waits at most two seconds
//! between attempts, with equal jitter so replicas never retry in lockstep.
//!
//! ```
//! use tier_kube::backoff::RetryBackoff;
//!
//! let mut backoff = RetryBackoff::new(RetryBackoff::STARTUP);
//! assert!(backoff.take(100).all(|wait| wait <= RetryBackoff::STARTUP.cap));
//! ```

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// A kube-runtime [`Backoff`] on [`tier_core::Backoff`]: attempt `n` waits a random duration in
/// `[d/2, d]`, `d = min(cap, initial * 2^(n-1))`; never ends; [`reset`](Backoff::reset) on
/// success starts over.
#[derive(Clone, Debug)]
pub struct RetryBackoff {
    policy: tier_core::Backoff,
    attempt: u32,
}

impl RetryBackoff {
    /// 200 ms doubling to 2 s: a cheap request every one to two seconds while the API server is
    /// away, and at most two seconds between its return and the next attempt.
    pub const STARTUP: tier_core::Backoff = tier_core::Backoff {
        initial: Duration::from_millis(200),
        cap: Duration::from_secs(2),
    };

    /// A fresh backoff on `policy`.
    pub fn new(policy: tier_core::Backoff) -> Self {
        Self { policy, attempt: 0 }
    }

    /// How many waits were handed out since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

impl Default for RetryBackoff {
    fn default() -> Self {
        Self::new(Self::STARTUP)
    }
}

impl Iterator for RetryBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.attempt = self.attempt.saturating_add(1);
        Some(self.policy.delay(self.attempt, None, fastrand::f64()))
    }
}

impl Backoff for RetryBackoff {
    fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_to_the_cap_and_start_over_after_a_reset() {
        let mut backoff = RetryBackoff::default();
        let first = backoff.next().unwrap_or_default();
        assert!(first >= Duration::from_millis(100) && first <= Duration::from_millis(200));
        let later: Vec<Duration> = backoff.by_ref().skip(20).take(50).collect();
        assert!(later.iter().all(|w| *w >= Duration::from_secs(1)));
        assert!(later.iter().all(|w| *w <= Duration::from_secs(2)));
        assert!(later.windows(2).any(|w| w[0] != w[1]), "jittered");
        backoff.reset();
        assert_eq!(backoff.attempts(), 0);
        assert!(backoff.next().unwrap_or_default() <= Duration::from_millis(200));
    }
}
