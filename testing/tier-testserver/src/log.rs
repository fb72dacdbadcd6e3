//! The request log: one record per request the server received, with helpers to count and
//! to wait for requests.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::faults::{FaultKind, Verb};

/// Which family of endpoints a request addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `/apis/crd.antrea.io/v1beta1/tiers[/{name}]`.
    Tiers,
    /// Calico's `/apis/projectcalico.org/v3/tiers[/{name}]` (or `crd.projectcalico.org/v1`).
    CalicoTiers,
    /// Antrea's ClusterNetworkPolicy and NetworkPolicy endpoints.
    Policies,
    /// The core or `events.k8s.io` Events endpoints.
    Events,
    /// Secrets and ValidatingWebhookConfigurations.
    Objects,
    /// Discovery, `/version` and health endpoints.
    Discovery,
    /// `authentication.k8s.io/v1` `selfsubjectreviews`: who the request's credentials are.
    Identity,
    /// Anything else (answered 404).
    Unknown,
}

/// One received request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Position in arrival order, from 0 (not reset by [`clear`](crate::TestApiServer::clear_log)).
    pub seq: u64,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Raw query string (without `?`).
    pub query: String,
    /// Endpoint family.
    pub endpoint: Endpoint,
    /// Verb, for Tier, policy, object and Event requests.
    pub verb: Option<Verb>,
    /// Object name: from the path, or for a create from the body.
    pub name: Option<String>,
    /// Authenticated user, if any.
    pub user: Option<String>,
    /// HTTP status sent; `None` when no response was sent (dropped or hung).
    pub code: Option<u16>,
    /// The fault applied to this request, if any.
    pub fault: Option<FaultKind>,
}

impl RequestRecord {
    /// Whether this is an Antrea Tier request with `verb` and (when given) object `name`.
    pub fn is(&self, verb: Verb, name: Option<&str>) -> bool {
        self.is_at(Endpoint::Tiers, verb, name)
    }

    /// Whether this is a request to `endpoint` with `verb` and (when given) object `name`.
    pub fn is_at(&self, endpoint: Endpoint, verb: Verb, name: Option<&str>) -> bool {
        self.endpoint == endpoint
            && self.verb == Some(verb)
            && name.is_none_or(|n| self.name.as_deref() == Some(n))
    }
}

/// A snapshot of the request log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestLog {
    records: Vec<RequestRecord>,
}

impl RequestLog {
    /// All records, in arrival order.
    pub fn records(&self) -> &[RequestRecord] {
        &self.records
    }

    /// Number of Antrea Tier requests with `verb` and (when `Some`) object `name`.
    pub fn count(&self, verb: Verb, name: Option<&str>) -> usize {
        self.count_at(Endpoint::Tiers, verb, name)
    }

    /// Number of requests to `endpoint` (e.g. [`Endpoint::CalicoTiers`]) with `verb` and (when
    /// `Some`) object `name`.
    pub fn count_at(&self, endpoint: Endpoint, verb: Verb, name: Option<&str>) -> usize {
        self.count_where(|r| r.is_at(endpoint, verb, name))
    }

    /// Number of Tier requests with `verb`/`name` that were answered with `code`.
    pub fn count_code(&self, verb: Verb, name: Option<&str>, code: u16) -> usize {
        self.records
            .iter()
            .filter(|r| r.is(verb, name) && r.code == Some(code))
            .count()
    }

    /// Number of POSTs to a collection whose path ends in `collection` (e.g. `/secrets`) that
    /// were answered 201 Created, i.e. the objects created there.
    pub fn count_created(&self, collection: &str) -> usize {
        self.count_where(|r| {
            r.method == "POST" && r.path.ends_with(collection) && r.code == Some(201)
        })
    }

    /// Number of records satisfying `predicate`.
    pub fn count_where(&self, predicate: impl Fn(&RequestRecord) -> bool) -> usize {
        self.records.iter().filter(|r| predicate(r)).count()
    }

    /// Tier requests with `verb` and (when `Some`) object `name`.
    pub fn matching(&self, verb: Verb, name: Option<&str>) -> Vec<&RequestRecord> {
        self.records.iter().filter(|r| r.is(verb, name)).collect()
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
    next_seq: u64,
    records: VecDeque<RequestRecord>,
}

impl LogBook {
    /// An empty log keeping the last `capacity` records.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::default(),
            changed: Notify::new(),
            capacity: capacity.max(1),
        }
    }

    /// Appends a record (its `seq` is assigned here) and wakes waiters.
    pub(crate) fn push(&self, mut record: RequestRecord) {
        {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            record.seq = inner.next_seq;
            inner.next_seq = inner.next_seq.saturating_add(1);
            while inner.records.len() >= self.capacity {
                inner.records.pop_front();
            }
            inner.records.push_back(record);
        }
        self.changed.notify_waiters();
    }

    pub(crate) fn snapshot(&self) -> RequestLog {
        RequestLog {
            records: self
                .inner
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .records
                .iter()
                .cloned()
                .collect(),
        }
    }

    pub(crate) fn clear(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .records
            .clear();
        self.changed.notify_waiters();
    }

    /// Waits until `predicate` holds for the log, or `timeout` passes; returns whether it held.
    pub(crate) async fn wait_for(
        &self,
        predicate: impl Fn(&RequestLog) -> bool,
        timeout: Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
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
