//! Fault rules: which requests they match, how often they fire, and what they do instead of
//! (or on top of) forwarding.
//!
//! A [`Fault`] holds a [`Matcher`], a budget (once by default, `n` times, or until removed) and
//! a [`FaultAction`]. The first active fault whose matcher matches a request fires for it and
//! spends one of its budget; at most one fault applies to a request.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::error::Error;
use crate::request::{Matcher, RequestInfo, Resource};

/// How a watch stream the proxy ends, ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WatchEnd {
    /// The chunked body ends properly (the terminating chunk), as when kube-apiserver's watch
    /// times out or the server shuts down gracefully.
    #[default]
    Clean,
    /// The connection is reset mid-stream, as when a load balancer or the server dies.
    Reset,
}

/// What happens to a request a fault matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultAction {
    /// Answer a Kubernetes `Status` without forwarding.
    Status {
        /// HTTP and Status code.
        code: u16,
        /// Status reason (`ServiceUnavailable`, `TooManyRequests`, ...).
        reason: String,
        /// Status message.
        message: String,
        /// `Retry-After` header (and `details.retryAfterSeconds`) in seconds.
        retry_after: Option<u64>,
    },
    /// Hold the request without forwarding or answering until
    /// [`release`](crate::FaultProxy::release)d or, when set, for `release_after`; then
    /// forward it. If the client gives up first, nothing reaches the upstream.
    Hang {
        /// Release on its own after this long (`None`: only when released).
        release_after: Option<Duration>,
    },
    /// Reset the connection (TCP RST) without forwarding or answering.
    Reset,
    /// Forward the request and wait for the upstream's response head (the write is applied
    /// by then), then reset the connection instead of answering.
    LoseResponse,
    /// Forward a watch, then end its stream after `after_events` events or `after` time,
    /// whichever comes first. A watch the upstream answers with an error passes unchanged
    /// (the fault is spent all the same).
    EndWatch {
        /// End right after this many events (`None`: any number).
        after_events: Option<u64>,
        /// End after this long (`None`: never on time).
        after: Option<Duration>,
        /// How the stream ends.
        end: WatchEnd,
    },
    /// Answer a watch, without forwarding it, as kube-apiserver answers one whose
    /// resourceVersion was compacted: `200` and a single `ERROR` event holding a `410 Expired`
    /// Status, then the end of the stream.
    ExpireWatch,
}

/// The kind of a [`FaultAction`], as recorded in the request log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// [`FaultAction::Status`].
    Status,
    /// [`FaultAction::Hang`].
    Hang,
    /// [`FaultAction::Reset`].
    Reset,
    /// [`FaultAction::LoseResponse`].
    LoseResponse,
    /// [`FaultAction::EndWatch`].
    EndWatch,
    /// [`FaultAction::ExpireWatch`].
    ExpireWatch,
}

impl FaultAction {
    /// The kind of this action.
    pub fn kind(&self) -> FaultKind {
        match self {
            Self::Status { .. } => FaultKind::Status,
            Self::Hang { .. } => FaultKind::Hang,
            Self::Reset => FaultKind::Reset,
            Self::LoseResponse => FaultKind::LoseResponse,
            Self::EndWatch { .. } => FaultKind::EndWatch,
            Self::ExpireWatch => FaultKind::ExpireWatch,
        }
    }
}

/// A fault rule: which requests it matches, how many times it fires, and what it does.
///
/// ```
/// use tier_faultproxy::{Fault, Verb};
///
/// // The next two creates of the Tier "baseline" get 429 with Retry-After: 3.
/// let busy = Fault::too_many_requests(Verb::Create, 3)
///     .on("tiers.crd.antrea.io")
///     .named("baseline")
///     .times(2);
/// // Every watch of Tiers ends after one event, until the fault is removed.
/// let flaky = Fault::end_watch_after_events(1).on("tiers.crd.antrea.io").forever();
/// # let _ = (busy, flaky);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The requests it matches.
    pub matcher: Matcher,
    /// How many matching requests it fires for (`None`: until removed).
    pub times: Option<u32>,
    /// What it does.
    pub action: FaultAction,
}

const TIMEOUT_MESSAGE: &str =
    "Timeout: request did not complete within requested timeout - context deadline exceeded";

impl Fault {
    /// A fault firing once, for requests `matcher` matches (a [`Verb`](crate::Verb) or a
    /// [`Matcher`]), with `action`.
    pub fn new(matcher: impl Into<Matcher>, action: FaultAction) -> Self {
        Self {
            matcher: matcher.into(),
            times: Some(1),
            action,
        }
    }

    /// Answer `code`, `reason`, `message` without forwarding.
    pub fn status(matcher: impl Into<Matcher>, code: u16, reason: &str, message: &str) -> Self {
        Self::new(
            matcher,
            FaultAction::Status {
                code,
                reason: reason.to_owned(),
                message: message.to_owned(),
                retry_after: None,
            },
        )
    }

    /// 429 TooManyRequests with `Retry-After: retry_after`, as API Priority and Fairness
    /// answers (kube-apiserver exempts `system:masters` from it, so a real server gives this
    /// only to other identities).
    pub fn too_many_requests(matcher: impl Into<Matcher>, retry_after: u64) -> Self {
        Self::status(
            matcher,
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
        .retry_after(retry_after)
    }

    /// 500 InternalError.
    pub fn internal_error(matcher: impl Into<Matcher>) -> Self {
        Self::status(
            matcher,
            500,
            "InternalError",
            "Internal error occurred: injected by tier-faultproxy",
        )
    }

    /// 503 ServiceUnavailable, as an overloaded or restarting kube-apiserver answers.
    pub fn unavailable(matcher: impl Into<Matcher>) -> Self {
        Self::status(
            matcher,
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        )
    }

    /// 504 Timeout, as kube-apiserver answers a request that outlived its deadline (a write
    /// may or may not have been applied).
    pub fn timeout(matcher: impl Into<Matcher>) -> Self {
        Self::status(matcher, 504, "Timeout", TIMEOUT_MESSAGE)
    }

    /// HTTP 410 Gone with an `Expired` Status on the request itself (a list whose `continue`
    /// token expired). A compacted *watch* is answered differently by kube-apiserver: see
    /// [`expire_watch`](Self::expire_watch).
    pub fn expired(matcher: impl Into<Matcher>) -> Self {
        Self::status(
            matcher,
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. \
             You can start a new list without the continue parameter.",
        )
    }

    /// Hold the request until [`release`](crate::FaultProxy::release)d, then forward it.
    pub fn hang(matcher: impl Into<Matcher>) -> Self {
        Self::new(
            matcher,
            FaultAction::Hang {
                release_after: None,
            },
        )
    }

    /// Hold the request for `delay` (or until released), then forward it.
    pub fn delay(matcher: impl Into<Matcher>, delay: Duration) -> Self {
        Self::new(
            matcher,
            FaultAction::Hang {
                release_after: Some(delay),
            },
        )
    }

    /// Reset the connection without forwarding.
    pub fn reset(matcher: impl Into<Matcher>) -> Self {
        Self::new(matcher, FaultAction::Reset)
    }

    /// Forward, let the upstream apply it, then reset the connection instead of answering.
    pub fn lose_response(matcher: impl Into<Matcher>) -> Self {
        Self::new(matcher, FaultAction::LoseResponse)
    }

    /// End the next watch (any resource; narrow with [`on`](Self::on)) cleanly after `events`
    /// events.
    pub fn end_watch_after_events(events: u64) -> Self {
        Self::new(
            crate::Verb::Watch,
            FaultAction::EndWatch {
                after_events: Some(events),
                after: None,
                end: WatchEnd::Clean,
            },
        )
    }

    /// End the next watch cleanly after `after`.
    pub fn end_watch_after(after: Duration) -> Self {
        Self::new(
            crate::Verb::Watch,
            FaultAction::EndWatch {
                after_events: None,
                after: Some(after),
                end: WatchEnd::Clean,
            },
        )
    }

    /// Answer the next watch with a `410 Expired` ERROR event, as for a compacted
    /// resourceVersion; kube-runtime's watcher then lists again.
    pub fn expire_watch() -> Self {
        Self::new(crate::Verb::Watch, FaultAction::ExpireWatch)
    }

    /// Only requests for `resource` (see [`Matcher::on`]).
    #[must_use]
    pub fn on(mut self, resource: impl Into<Resource>) -> Self {
        self.matcher = self.matcher.on(resource);
        self
    }

    /// Only requests for the object `name` (see [`Matcher::named`]).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.matcher = self.matcher.named(name);
        self
    }

    /// Only requests in `namespace`.
    #[must_use]
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.matcher = self.matcher.in_namespace(namespace);
        self
    }

    /// Only requests for exactly `path` (a webhook's `/validate/tier`).
    #[must_use]
    pub fn at_path(mut self, path: impl Into<String>) -> Self {
        self.matcher = self.matcher.at_path(path);
        self
    }

    /// Fire for the next `n` matching requests.
    #[must_use]
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }

    /// Fire for every matching request until removed.
    #[must_use]
    pub fn forever(mut self) -> Self {
        self.times = None;
        self
    }

    /// Add `Retry-After` (seconds); only meaningful for [`FaultAction::Status`].
    #[must_use]
    pub fn retry_after(mut self, seconds: u64) -> Self {
        if let FaultAction::Status { retry_after, .. } = &mut self.action {
            *retry_after = Some(seconds);
        }
        self
    }

    /// Reset the connection instead of ending cleanly; only meaningful for
    /// [`FaultAction::EndWatch`].
    #[must_use]
    pub fn abruptly(mut self) -> Self {
        if let FaultAction::EndWatch { end, .. } = &mut self.action {
            *end = WatchEnd::Reset;
        }
        self
    }
}

/// Identifies an injected fault, for [`remove_fault`](crate::FaultProxy::remove_fault) and
/// [`release`](crate::FaultProxy::release).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultId(pub(crate) u64);

/// The active faults, at most `capacity`.
#[derive(Debug)]
pub(crate) struct Faults {
    inner: Mutex<FaultsInner>,
    capacity: usize,
}

#[derive(Debug, Default)]
struct FaultsInner {
    next_id: u64,
    active: Vec<(FaultId, Fault)>,
}

impl Faults {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::default(),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultsInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn inject(&self, fault: Fault) -> Result<FaultId, Error> {
        let mut inner = self.lock();
        if inner.active.len() >= self.capacity {
            return Err(Error::TooManyFaults {
                limit: self.capacity,
            });
        }
        inner.next_id = inner.next_id.saturating_add(1);
        let id = FaultId(inner.next_id);
        if fault.times != Some(0) {
            inner.active.push((id, fault));
        }
        Ok(id)
    }

    pub(crate) fn remove(&self, id: FaultId) -> bool {
        let mut inner = self.lock();
        let before = inner.active.len();
        inner.active.retain(|(i, _)| *i != id);
        inner.active.len() != before
    }

    pub(crate) fn clear(&self) {
        self.lock().active.clear();
    }

    pub(crate) fn active(&self) -> usize {
        self.lock().active.len()
    }

    /// Spends one firing of the first fault matching the request and returns it.
    pub(crate) fn take(&self, path: &str, info: &RequestInfo) -> Option<(FaultId, FaultAction)> {
        let mut inner = self.lock();
        let index = inner
            .active
            .iter()
            .position(|(_, f)| f.matcher.matches(path, info))?;
        let (id, fault) = inner.active.get_mut(index)?;
        let fired = (*id, fault.action.clone());
        if let Some(times) = &mut fault.times {
            *times = times.saturating_sub(1);
            if *times == 0 {
                inner.active.remove(index);
            }
        }
        Some(fired)
    }
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;
    use crate::Verb;

    const TIERS: &str = "/apis/crd.antrea.io/v1beta1/tiers";

    fn create(name: &str) -> RequestInfo {
        let mut info = RequestInfo::classify(&Method::POST, TIERS, "");
        info.name = Some(name.to_owned());
        info
    }

    #[test]
    fn faults_fire_the_given_number_of_times_then_disappear() {
        let faults = Faults::new(8);
        faults
            .inject(Fault::unavailable(Verb::Create).named("baseline").times(2))
            .unwrap();
        assert_eq!(faults.take(TIERS, &create("other")), None);
        assert!(faults.take(TIERS, &create("baseline")).is_some());
        assert!(faults.take(TIERS, &create("baseline")).is_some());
        assert_eq!(faults.take(TIERS, &create("baseline")), None);
        assert_eq!(faults.active(), 0);
    }

    #[test]
    fn forever_faults_stay_until_removed_and_the_first_match_wins() {
        let faults = Faults::new(8);
        let hang = faults.inject(Fault::hang(Verb::Create).forever()).unwrap();
        let reset = faults.inject(Fault::reset(Verb::Create)).unwrap();
        for _ in 0..3 {
            assert_eq!(
                faults.take(TIERS, &create("a")).map(|(id, _)| id),
                Some(hang)
            );
        }
        assert!(faults.remove(hang));
        assert!(!faults.remove(hang));
        assert_eq!(
            faults.take(TIERS, &create("a")),
            Some((reset, FaultAction::Reset))
        );
        assert_eq!(faults.take(TIERS, &create("a")), None);
    }

    #[test]
    fn the_number_of_active_faults_is_bounded() {
        let faults = Faults::new(2);
        faults.inject(Fault::reset(Verb::Get)).unwrap();
        faults.inject(Fault::reset(Verb::Get)).unwrap();
        assert!(matches!(
            faults.inject(Fault::reset(Verb::Get)),
            Err(Error::TooManyFaults { limit: 2 })
        ));
        faults.clear();
        assert!(faults.inject(Fault::reset(Verb::Get)).is_ok());
    }

    #[test]
    fn builders_only_touch_their_own_action() {
        assert_eq!(
            Fault::hang(Verb::Get).retry_after(3).action,
            FaultAction::Hang {
                release_after: None
            }
        );
        assert!(matches!(
            Fault::too_many_requests(Verb::Get, 3).action,
            FaultAction::Status {
                code: 429,
                retry_after: Some(3),
                ..
            }
        ));
        assert!(matches!(
            Fault::end_watch_after_events(2).abruptly().action,
            FaultAction::EndWatch {
                after_events: Some(2),
                end: WatchEnd::Reset,
                ..
            }
        ));
        assert_eq!(
            Fault::reset(Verb::Get).abruptly().action,
            FaultAction::Reset
        );
    }
}
