//! Retry timing: exponential backoff with jitter, capped, with `Retry-After` as a lower bound.

use std::time::Duration;

/// Exponential backoff with "equal jitter": attempt `n` (from 1) waits a random duration in
/// `[d/2, d]` where `d = min(cap, initial * 2^(n-1))`, then at least `Retry-After`, then at most
/// `cap`. Every wait therefore lies in `[0, cap]`.
///
/// The defaults (250 ms initial, 10 s cap) give about 0.25, 0.5, 1, 2, 4, 8, 10, 10... seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The nominal wait after the first failure.
    pub initial: Duration,
    /// The longest wait; also the upper bound for `Retry-After`.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(250),
            cap: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    /// The nominal (un-jittered) wait before retry number `attempt` (1 = first retry).
    pub fn nominal(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(31);
        self.initial
            .checked_mul(1u32 << exp)
            .unwrap_or(self.cap)
            .min(self.cap)
    }

    /// The jittered wait before retry number `attempt`; `unit` is a random number in `[0, 1)`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        let nominal = self.nominal(attempt);
        let half = nominal / 2;
        // In f64 and back, without a panic whatever the durations: at worst no jitter.
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let extra = Duration::try_from_secs_f64(half.as_secs_f64() * unit).unwrap_or_default();
        let jittered = half.saturating_add(extra.min(half)).min(nominal);
        jittered.max(retry_after.unwrap_or_default()).min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let b = Backoff::default();
        let ms: Vec<u128> = (1..=8).map(|n| b.nominal(n).as_millis()).collect();
        assert_eq!(ms, [250, 500, 1000, 2000, 4000, 8000, 10000, 10000]);
        assert_eq!(b.nominal(u32::MAX), b.cap);
    }

    #[test]
    fn jitter_and_retry_after_stay_in_bounds() {
        let b = Backoff::default();
        assert_eq!(b.delay(3, None, 0.0), Duration::from_millis(500));
        assert_eq!(b.delay(3, None, 1.0), Duration::from_millis(1000));
        assert_eq!(
            b.delay(1, Some(Duration::from_secs(3)), 0.5),
            Duration::from_secs(3)
        );
        assert_eq!(b.delay(1, Some(Duration::from_secs(60)), 0.5), b.cap);
    }

    #[test]
    fn huge_durations_and_odd_units_do_not_panic() {
        let b = Backoff {
            initial: Duration::MAX,
            cap: Duration::MAX,
        };
        for unit in [0.0, 0.5, 0.999_999_999, 1.0, f64::NAN, f64::INFINITY, -1.0] {
            let d = b.delay(u32::MAX, Some(Duration::MAX), unit);
            assert!(d >= Duration::MAX / 2);
        }
    }
}
