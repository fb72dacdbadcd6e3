//! The request log: one record per request the proxy received, the last
//! [`Limits::max_log_records`](crate::Limits::max_log_records) kept, with queries by
//! [`Matcher`] and waits for requests to arrive.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::faults::FaultKind;
use crate::request::{Matcher, RequestInfo, Resource, Verb};

/// One request, recorded when its response head was sent or when it ended without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Position in arrival order, from 0 (not reset by [`clear_log`](crate::FaultProxy::clear_log)).
    pub seq: u64,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Raw query string (without `?`).
    pub query: String,
    /// The verb, for a resource request.
    pub verb: Option<Verb>,
    /// The resource, for a resource request.
    pub resource: Option<Resource>,
    /// The namespace, for a namespaced request.
    pub namespace: Option<String>,
    /// The object name (see [`RequestInfo::name`]).
    pub name: Option<String>,
    /// HTTP status the caller got; `None` when it got none (reset, lost, hung, refused).
    pub code: Option<u16>,
    /// HTTP status the upstream answered; `None` when the request was not forwarded or no
    /// answer came. For a [`LoseResponse`](crate::FaultAction::LoseResponse) it is set while
    /// `code` is not: the write was applied, the caller never learnt it.
    pub upstream_code: Option<u16>,
    /// The fault applied, if any.
    pub fault: Option<FaultKind>,
    /// When the request arrived (tokio's clock, so virtual under a paused clock).
    pub received: Instant,
    /// From arrival to the response head, or to the end when none was sent.
    pub elapsed: Duration,
    /// Why forwarding failed (upstream unreachable, TLS refused, ...), if it did.
    pub error: Option<String>,
}

impl RequestRecord {
    /// What the request addressed.
    pub fn info(&self) -> RequestInfo {
        RequestInfo {
            verb: self.verb,
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// Whether `matcher` matches this request.
    pub fn is(&self, matcher: &Matcher) -> bool {
        matcher.matches(&self.path, &self.info())
    }
}

/// A snapshot of the request log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestLog {
    records: Vec<RequestRecord>,
}

impl RequestLog {
    /// All records, in the order they were completed.
    pub fn records(&self) -> &[RequestRecord] {
        &self.records
    }

    /// Records `matcher` (a [`Verb`] or a [`Matcher`]) matches.
    pub fn matching(&self, matcher: impl Into<Matcher>) -> Vec<&RequestRecord> {
        let matcher = matcher.into();
        self.records.iter().filter(|r| r.is(&matcher)).collect()
    }

    /// Number of records `matcher` matches.
    pub fn count(&self, matcher: impl Into<Matcher>) -> usize {
        let matcher = matcher.into();
        self.count_where(|r| r.is(&matcher))
    }

    /// Number of records `matcher` matches that were answered with `code`.
    pub fn count_code(&self, matcher: impl Into<Matcher>, code: u16) -> usize {
        let matcher = matcher.into();
        self.count_where(|r| r.code == Some(code) && r.is(&matcher))
    }

    /// Number of records satisfying `predicate`.
    pub fn count_where(&self, predicate: impl Fn(&RequestRecord) -> bool) -> usize {
        self.records.iter().filter(|r| predicate(r)).count()
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// The live log shared by the connection tasks: the last `capacity` records.
#[derive(Debug)]
pub(crate) struct LogBook {
    inner: Mutex<LogInner>,
    changed: Notify,
    capacity: usize,
}

#[derive(Debug, Default)]
struct LogInner {
    records: VecDeque<RequestRecord>,
}

impl LogBook {
    /// An empty log keeping the last `capacity` records (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::default(),
            changed: Notify::new(),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a record (dropping the oldest beyond the capacity) and wakes waiters.
    pub(crate) fn push(&self, record: RequestRecord) {
        {
            let mut inner = self.lock();
            while inner.records.len() >= self.capacity {
                inner.records.pop_front();
            }
            inner.records.push_back(record);
        }
        self.changed.notify_waiters();
    }

    pub(crate) fn snapshot(&self) -> RequestLog {
        RequestLog {
            records: self.lock().records.iter().cloned().collect(),
        }
    }

    pub(crate) fn clear(&self) {
        self.lock().records.clear();
        self.changed.notify_waiters();
    }

    /// Waits until `predicate` holds for the log, or `timeout` passes; returns whether it held.
    pub(crate) async fn wait_for(
        &self,
        predicate: impl Fn(&RequestLog) -> bool,
        timeout: Duration,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if predicate(&self.snapshot()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return predicate(&self.snapshot());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    fn record(seq: u64, method: Method, path: &str, code: Option<u16>) -> RequestRecord {
        let info = RequestInfo::classify(&method, path, "");
        RequestRecord {
            seq,
            method: method.to_string(),
            path: path.to_owned(),
            query: String::new(),
            verb: info.verb,
            resource: info.resource,
            namespace: info.namespace,
            name: info.name,
            code,
            upstream_code: code,
            fault: None,
            received: Instant::now(),
            elapsed: Duration::ZERO,
            error: None,
        }
    }

    #[test]
    fn the_log_keeps_the_last_records_and_counts_by_matcher() {
        let log = LogBook::new(3);
        let get = "/apis/crd.antrea.io/v1beta1/tiers/baseline";
        log.push(record(0, Method::GET, get, Some(200)));
        log.push(record(1, Method::GET, get, Some(503)));
        log.push(record(
            2,
            Method::GET,
            "/api/v1/namespaces/a/secrets/s",
            Some(200),
        ));
        log.push(record(3, Method::PUT, get, None));
        let snapshot = log.snapshot();
        assert_eq!(
            snapshot.records().iter().map(|r| r.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let tier_gets = Matcher::verb(Verb::Get).on("tiers.crd.antrea.io");
        assert_eq!(snapshot.count(tier_gets.clone()), 1);
        assert_eq!(snapshot.count_code(tier_gets.clone(), 503), 1);
        assert_eq!(snapshot.count_code(tier_gets, 200), 0);
        assert_eq!(snapshot.count(Verb::Get), 2);
        assert_eq!(snapshot.count(Matcher::any().named("baseline")), 2);
        assert_eq!(snapshot.count(Matcher::any().in_namespace("a")), 1);
        log.clear();
        assert!(log.snapshot().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn waits_end_when_the_predicate_holds_or_time_is_up() {
        let log = std::sync::Arc::new(LogBook::new(10));
        let started = Instant::now();
        assert!(
            !log.wait_for(|l| !l.is_empty(), Duration::from_secs(5))
                .await
        );
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        let writer = std::sync::Arc::clone(&log);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            writer.push(record(0, Method::GET, "/version", Some(200)));
        });
        let started = Instant::now();
        assert!(
            log.wait_for(|l| l.len() == 1, Duration::from_secs(60))
                .await
        );
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }
}
