//! Antrea's system Tier initialization before and after its fix (PR 6696, issue 6694),
//! re-implemented from `antrea-tiers.md` over the core's ports, so that they run against the same
//! backend, faults and checks as tierd.
//!
//! Both are one-shot and sequential: they handle the desired Tiers one after another, in order,
//! and return when the last is done (or never). Neither reports a status.
//!
//! | | [`antrea_old`] | [`antrea_new`] |
//! |---|---|---|
//! | waits for the cache to sync | no: an unsynced lister reads as "not found" | yes |
//! | absent | create, retried until success or AlreadyExists, never re-reading the cache | create |
//! | other priority | update a copy of the cached object, retried until success, never re-reading | update a copy of the cached object |
//! | equal priority | done (description ignored) | done (description ignored) |
//! | after an error | retry the same call | re-read the lister and decide again |
//! | backoff | 1 s, 2 s, 4 s, then 8 s forever, no jitter | the same |
//!
//! Assumptions where the reference is silent: both stop handling a Tier as soon as one write for
//! it succeeds; the old code's handling of a present Tier with another priority (an update retried
//! forever on the copy it read once) is inferred from "it never looked at the cache again".
//! Through the port, AlreadyExists is the one [`Stale`](tier_core::ErrorClass::Stale) error a
//! create can get. The harness gives both the driver's call timeout ([`CallTimeout`]), so that a
//! hanging call costs them what it costs tierd.

use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use tier_core::{
    Clock, Controller, DesiredSet, ErrorClass, Observed, ObservedTier, TierLister, TierSpec,
    TierWriter, WriteError,
};

/// A [`TierWriter`] decorator failing a call that takes longer than `timeout` with a transient
/// error (and dropping it), as an HTTP client with a request timeout does.
#[derive(Debug)]
pub struct CallTimeout<W, C> {
    inner: W,
    clock: C,
    timeout: Duration,
}

impl<W, C> CallTimeout<W, C> {
    /// Bounds every call of `inner` by `timeout` on `clock`.
    pub fn new(inner: W, clock: C, timeout: Duration) -> Self {
        Self {
            inner,
            clock,
            timeout,
        }
    }

    async fn bounded(
        &self,
        call: impl std::future::Future<Output = Result<(), WriteError>> + Send,
    ) -> Result<(), WriteError>
    where
        C: Clock,
    {
        let deadline = self.clock.now() + self.timeout;
        futures::select_biased! {
            result = call.fuse() => result,
            () = self.clock.sleep_until(deadline).fuse() => {
                Err(WriteError::transient("request timed out: context deadline exceeded"))
            }
        }
    }
}

#[async_trait]
impl<Ctl: Controller, W: TierWriter<Ctl>, C: Clock> TierWriter<Ctl> for CallTimeout<W, C> {
    async fn create(&self, tier: &Ctl::Spec) -> Result<(), WriteError> {
        self.bounded(self.inner.create(tier)).await
    }

    async fn update(&self, tier: &Ctl::Spec, resource_version: &str) -> Result<(), WriteError> {
        self.bounded(self.inner.update(tier, resource_version))
            .await
    }
}

/// Antrea's retry delay before attempt `attempt + 1` (from 1): 1 s, 2 s, 4 s, then 8 s forever.
pub fn antrea_backoff(attempt: u32) -> Duration {
    Duration::from_secs(1 << attempt.saturating_sub(1).min(3))
}

pub(crate) async fn sleep<C: Clock>(clock: &C, delay: Duration) {
    clock.sleep_until(clock.now() + delay).await;
}

/// The copy of a cached Tier with the desired priority (its description kept as cached).
fn with_priority(cached: &ObservedTier, want: &TierSpec) -> TierSpec {
    TierSpec::new(&want.name, want.priority, &cached.description)
}

/// Antrea's initialization before the fix: reads the lister without waiting for the cache to
/// sync (an unsynced cache reads as "not found"), then per Tier in order creates or updates it,
/// retrying that same call forever on any error except AlreadyExists on a create. A Tier that
/// can never be written blocks every Tier after it.
pub async fn antrea_old<L, W, C>(lister: &L, writer: &W, clock: &C, desired: &DesiredSet)
where
    L: TierLister,
    W: TierWriter,
    C: Clock,
{
    for want in desired.tiers() {
        match lister.snapshot().observe(&want.name) {
            Observed::Unknown | Observed::Absent => {
                let mut attempt = 0;
                loop {
                    match writer.create(want).await {
                        Ok(()) => break,
                        Err(e) if e.class == ErrorClass::Stale => {
                            tracing::info!(tier = %want.name, "system Tier already exists");
                            break;
                        }
                        Err(e) => {
                            attempt += 1;
                            tracing::info!(tier = %want.name, attempt, err = %e,
                                "failed to create system Tier on init, will retry");
                            sleep(clock, antrea_backoff(attempt)).await;
                        }
                    }
                }
            }
            Observed::Present(cached) if cached.priority != want.priority => {
                let copy = with_priority(&cached, want);
                let mut attempt = 0;
                while let Err(e) = writer.update(&copy, &cached.resource_version).await {
                    attempt += 1;
                    tracing::info!(tier = %want.name, attempt, err = %e,
                        "failed to update system Tier on init, will retry");
                    sleep(clock, antrea_backoff(attempt)).await;
                }
            }
            Observed::Present(_) => {}
        }
    }
}

/// Antrea's initialization since the fix: waits for the cache to sync, then per Tier in order
/// loops: read the lister; absent → create; another priority → update a copy of the cached
/// object; equal priority → done. Any error → wait (1 s, 2 s, 4 s, then 8 s forever), read again
/// and decide again. Description drift is ignored; a Tier that can never be written retries
/// forever and blocks every Tier after it.
pub async fn antrea_new<L, W, C>(lister: &L, writer: &W, clock: &C, desired: &DesiredSet)
where
    L: TierLister,
    W: TierWriter,
    C: Clock,
{
    lister.wait_synced().await;
    for want in desired.tiers() {
        let mut attempt = 0;
        loop {
            let result = match lister.snapshot().observe(&want.name) {
                Observed::Present(cached) if cached.priority == want.priority => break,
                Observed::Present(cached) => {
                    writer
                        .update(&with_priority(&cached, want), &cached.resource_version)
                        .await
                }
                Observed::Absent | Observed::Unknown => writer.create(want).await,
            };
            match result {
                Ok(()) => break,
                Err(e) => {
                    attempt += 1;
                    tracing::info!(tier = %want.name, attempt, err = %e,
                        "failed to initialize system Tier, will retry");
                    sleep(clock, antrea_backoff(attempt)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_antreas() {
        let secs: Vec<u64> = (1..=6).map(|n| antrea_backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 8, 8]);
        assert_eq!(antrea_backoff(u32::MAX), Duration::from_secs(8));
    }
}
