//! The retry loops of the watches and the start-up requests: their pace ([`RetryBackoff`]),
//! a watcher stream retried at that pace ([`RetryWatch`]) and what they log about an outage
//! ([`OutageLog`]).
//!
//! kube's `DefaultBackoff` (client-go's: 0.8 s doubling to 30 s) is kind to a struggling API
//! server but, after a ten-second outage at start, can leave a watch waiting twenty more
//! seconds. A [`RetryBackoff`] with [`RetryBackoff::STARTUP`] waits at most two seconds
//! between attempts, with equal jitter so replicas never retry in lockstep.
//!
//! # Why not kube-runtime's `StreamBackoff`
//!
//! `WatchStreamExt::backoff` resets its backoff on every `Ok` item. After a failed list the
//! watcher starts over with `Event::Init`, an `Ok` item it yields before sending any request,
//! so the backoff was reset before every list: with the API server refusing connections, every
//! wait was the first one (200 ms), and three watches made 403 attempts in 20 s. A
//! [`RetryWatch`] resets only when the API server answered (a complete list, or a change on an
//! established watch), honours a `Retry-After` the server sent (in the Status's
//! `details.retryAfterSeconds`, at most [`RETRY_AFTER_CAP`]) and counts the attempts.
//!
//! # Quiet outages
//!
//! An [`OutageLog`] turns the failures of one retry loop into at most three kinds of line: one
//! WARN when it starts failing (with the failure in words), a WARN reminder at most every
//! [`OUTAGE_REMINDER`] while it keeps failing, and one INFO when it recovers ("recovered after
//! 20.3 s and 97 failed attempts"). Every other attempt is logged at DEBUG.
//!
//! ```
//! use tier_kube::backoff::RetryBackoff;
//!
//! let mut backoff = RetryBackoff::new(RetryBackoff::STARTUP);
//! assert!(backoff.take(100).all(|wait| wait <= RetryBackoff::STARTUP.cap));
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher;
use tokio::time::{Instant, Sleep};

/// The longest `Retry-After` a watch honours: a longer one (or a hostile one) is read as this.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(60);

/// How often an [`OutageLog`] reminds, at most, that a loop is still failing.
pub const OUTAGE_REMINDER: Duration = Duration::from_secs(60);

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
    /// away, and at most two seconds between its return and the next attempt (unless the server
    /// asked for longer with `Retry-After`).
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

/// The `Retry-After` of a watcher failure: the `details.retryAfterSeconds` of the API server's
/// Status (kube-apiserver sets it with the header, on 429 and some 5xx), at most
/// [`RETRY_AFTER_CAP`].
pub(crate) fn retry_after(error: &watcher::Error) -> Option<Duration> {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status,
        _ => return None,
    };
    let seconds = u64::from(status.details.as_ref()?.retry_after_seconds);
    (seconds > 0).then(|| Duration::from_secs(seconds).min(RETRY_AFTER_CAP))
}

/// Whether a watcher item shows the API server answered and the watch made progress: a
/// complete list (`InitDone`) or a change on an established watch. `Init` is yielded before
/// any request and `InitApply` by a list that may still fail on a later page: neither is.
pub(crate) fn is_progress<K>(event: &watcher::Event<K>) -> bool {
    matches!(
        event,
        watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_)
    )
}

/// A watcher stream retried at `backoff`'s pace: after an error it is not polled again until
/// the wait passed (at least the `Retry-After` of the error's Status, `details.retryAfterSeconds`,
/// at most [`RETRY_AFTER_CAP`]); the backoff resets only on progress (a complete list, a change
/// on an established watch: not `Init`, not a first page). Ends after an error when the
/// backoff gives up (a [`RetryBackoff`] never does).
///
/// Built by [`RetryWatch::new`] around `kube::runtime::watcher(..)`, before the reflector or
/// after it.
pub struct RetryWatch<S, B> {
    stream: Pin<Box<S>>,
    backoff: B,
    sleep: Option<Pin<Box<Sleep>>>,
    given_up: bool,
    failures: u64,
}

impl<S, B> std::fmt::Debug for RetryWatch<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryWatch")
            .field("backing_off", &self.sleep.is_some())
            .field("failures", &self.failures)
            .finish_non_exhaustive()
    }
}

impl<S, B: Backoff> RetryWatch<S, B> {
    /// Retries `stream` (a watcher, or a reflector on one) at `backoff`'s pace.
    pub fn new(stream: S, backoff: B) -> Self {
        Self {
            stream: Box::pin(stream),
            backoff,
            sleep: None,
            given_up: false,
            failures: 0,
        }
    }

    /// Errors seen so far.
    pub fn failures(&self) -> u64 {
        self.failures
    }
}

impl<K, S, B> Stream for RetryWatch<S, B>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    B: Backoff,
{
    type Item = Result<watcher::Event<K>, watcher::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.given_up {
            return Poll::Ready(None);
        }
        if let Some(sleep) = this.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
        let item = match this.stream.as_mut().poll_next(cx) {
            Poll::Ready(item) => item,
            Poll::Pending => return Poll::Pending,
        };
        match &item {
            Some(Err(error)) => {
                this.failures = this.failures.saturating_add(1);
                match this.backoff.next() {
                    Some(wait) => {
                        let wait = wait.max(retry_after(error).unwrap_or_default());
                        tracing::debug!(?wait, "watch failed; backing off");
                        this.sleep = Some(Box::pin(tokio::time::sleep(wait)));
                    }
                    None => this.given_up = true,
                }
            }
            Some(Ok(event)) if is_progress(event) => this.backoff.reset(),
            Some(Ok(_)) | None => {}
        }
        Poll::Ready(item)
    }
}

/// What one retry loop logs about an outage (see the [module docs](self)): WARN once when it
/// starts failing, a WARN reminder at most every [`OUTAGE_REMINDER`], INFO once when it
/// recovers; DEBUG for every other failed attempt. Time is tokio's (virtual under a paused
/// clock). Owned by the loop; holds one outage at a time.
#[derive(Debug)]
pub struct OutageLog {
    subject: String,
    outage: Option<Outage>,
}

#[derive(Debug)]
struct Outage {
    since: Instant,
    failures: u32,
    reminded: Instant,
}

impl OutageLog {
    /// A log about `subject`, e.g. "the Tier watch (tiers.crd.antrea.io)", which starts every
    /// line.
    pub fn new(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            outage: None,
        }
    }

    /// One failed attempt, `error` in words.
    pub fn failed(&mut self, error: &str) {
        let now = Instant::now();
        let subject = &self.subject;
        let Some(outage) = self.outage.as_mut() else {
            tracing::warn!(
                "{subject} failing: {error}; retrying with backoff (a reminder every {} s \
                 until it recovers)",
                OUTAGE_REMINDER.as_secs()
            );
            self.outage = Some(Outage {
                since: now,
                failures: 1,
                reminded: now,
            });
            return;
        };
        outage.failures = outage.failures.saturating_add(1);
        let failures = outage.failures;
        if now.saturating_duration_since(outage.reminded) >= OUTAGE_REMINDER {
            outage.reminded = now;
            tracing::warn!(
                failures,
                "{subject} still failing after {} and {failures} failed attempts: {error}",
                seconds(now.saturating_duration_since(outage.since))
            );
        } else {
            tracing::debug!(failures, "{subject} failing: {error}");
        }
    }

    /// The server answered: ends the outage, if one was on, with one line saying so.
    pub fn answered(&mut self) {
        if let Some(outage) = self.outage.take() {
            let failures = outage.failures;
            tracing::info!(
                failures,
                "{} recovered after {} and {failures} failed attempts",
                self.subject,
                seconds(Instant::now().saturating_duration_since(outage.since))
            );
        }
    }

    /// Whether an outage is on, and since when.
    pub fn failing_since(&self) -> Option<Instant> {
        self.outage.as_ref().map(|o| o.since)
    }
}

/// A duration for people: `20.3 s`.
fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use futures::channel::mpsc;
    use kube::core::Status;

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

    type Item = Result<watcher::Event<()>, watcher::Error>;

    fn refused() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            Status::failure("the server is currently unable to handle the request", "")
                .with_code(503)
                .boxed(),
        ))
    }

    fn too_many(seconds: u32) -> watcher::Error {
        let mut status = Status::failure("slow down", "TooManyRequests").with_code(429);
        status.details =
            serde_json::from_value(serde_json::json!({"retryAfterSeconds": seconds})).unwrap();
        watcher::Error::InitialListFailed(kube::Error::Api(status.boxed()))
    }

    /// Polls `stream` until it yields, returning how long that took (virtual time).
    async fn next_after(
        stream: &mut RetryWatch<mpsc::UnboundedReceiver<Item>, RetryBackoff>,
    ) -> Duration {
        let start = Instant::now();
        stream.next().await;
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn init_does_not_reset_the_backoff_progress_does() {
        let (tx, rx) = mpsc::unbounded::<Item>();
        let mut stream = RetryWatch::new(rx, RetryBackoff::default());
        // The watcher's shape after failed lists: Init (no request), then the list's error.
        for _ in 0..12 {
            tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
            tx.unbounded_send(Err(refused())).unwrap();
        }
        let mut waits = Vec::new();
        for _ in 0..12 {
            waits.push(next_after(&mut stream).await); // Init, after the previous wait
            next_after(&mut stream).await; // the error, at once
        }
        // The first Init comes at once; each later one after the wait of the error before it.
        for (n, wait) in waits.iter().enumerate().skip(1) {
            let d = RetryBackoff::STARTUP.nominal(n as u32);
            assert!(
                *wait >= d / 2 && *wait <= d,
                "wait {n}: {wait:?} not in [{:?}, {d:?}]",
                d / 2
            );
        }
        assert!(
            waits[8..].iter().all(|w| *w >= Duration::from_secs(1)),
            "{waits:?}"
        );
        assert_eq!(stream.failures(), 12);

        // A complete list resets it.
        tx.unbounded_send(Ok(watcher::Event::InitDone)).unwrap();
        assert!(next_after(&mut stream).await >= Duration::from_secs(1));
        tx.unbounded_send(Err(refused())).unwrap();
        tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        next_after(&mut stream).await;
        assert!(next_after(&mut stream).await <= Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_a_lower_bound_and_capped() {
        let (tx, rx) = mpsc::unbounded::<Item>();
        let mut stream = RetryWatch::new(rx, RetryBackoff::default());
        tx.unbounded_send(Err(too_many(5))).unwrap();
        tx.unbounded_send(Err(too_many(86_400))).unwrap();
        tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        next_after(&mut stream).await;
        assert_eq!(next_after(&mut stream).await, Duration::from_secs(5));
        assert_eq!(next_after(&mut stream).await, RETRY_AFTER_CAP);
        assert_eq!(retry_after(&refused()), None);
    }
}
