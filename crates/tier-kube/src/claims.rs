//! [`LeaseClaims`]: the [`PriorityClaims`] port on one `coordination.k8s.io/v1` Lease, so that
//! every replica of tierd's webhook admits at most one Tier per priority.
//!
//! All replicas share one Lease (default `tierd-priority-claims`, in tierd's namespace). Its
//! annotation [`ANNOTATION`] holds the claims as JSON, one per priority
//! (`[{"tier":"a","priority":10,"at":"2026-12-01T10:00:00.123456Z"}]`); its spec says which
//! replica wrote last (`holderIdentity`), when (`renewTime`) and the claims' TTL
//! (`leaseDurationSeconds`), for people reading it with `kubectl get lease`. A claim:
//!
//! 1. takes this replica's last copy of the Lease (or GETs it; a 404 leads to a POST of a new
//!    one, and `AlreadyExists` to a GET);
//! 2. applies [`ClaimSet::take`] at the wall clock's `now`: a live claim of another Tier denies,
//!    a fresh claim of the same Tier is already enough, anything else is written back;
//! 3. PUTs the Lease on the resourceVersion it read. A 409 `Conflict` means another replica
//!    wrote first: GET and decide again (the write that won is then in the set).
//!
//! So of two replicas claiming one priority at once, exactly one write succeeds, and the other
//! re-reads and denies. Every claim is cut at the deadline ([`ClaimsConfig::deadline`], 2 s by
//! default, under the webhook's `timeoutSeconds` of 5) and makes at most [`MAX_ATTEMPTS`]
//! requests; claims of one replica run one at a time, so its own reviews never conflict with
//! each other. Whatever fails (an error, a timeout, too many conflicts) is
//! [`ClaimError::Unavailable`] with the error's class: the webhook then refuses the create
//! retryably (it fails closed).
//!
//! **Bounds and clean-up.** One object, never deleted, holding one claim per priority: lapsed
//! claims are dropped on every write, and [`ClaimSet::MAX_CLAIMS`] bounds the live ones. The
//! annotation is read only up to [`MAX_ANNOTATION_BYTES`]; one that is longer or unreadable
//! (written by someone else) is read as no claims and replaced at the next write. The one copy
//! of the Lease kept in memory is the last one read or written.
//!
//! **Access.** `get`, `update` on the one Lease by name, `create` on Leases in its namespace (RBAC
//! cannot limit `create` by name): `deploy/components/priority-claims/rbac.yaml`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use serde::{Deserialize, Serialize};
use tier_core::admission::{Claim, ClaimChange, ClaimSet, Reservations};
use tier_core::{ClaimError, PriorityClaims, WriteError};

use crate::classify;

/// The Lease's default name.
pub const DEFAULT_LEASE: &str = "tierd-priority-claims";

/// The annotation of the Lease that holds the claims.
pub const ANNOTATION: &str = "tierd.io/priority-claims";

/// The default deadline of one claim, every request included.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);

/// The most requests one claim sends (reads and writes); past them it gives up as contended.
pub const MAX_ATTEMPTS: usize = 6;

/// The longest claims annotation read: enough for [`ClaimSet::MAX_CLAIMS`] claims of Tiers with
/// 253-character names (about 80 KiB); a longer one is read as no claims.
pub const MAX_ANNOTATION_BYTES: usize = 128 * 1024;

/// Where the claims live and how long they last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimsConfig {
    /// The Lease's namespace: tierd's own.
    pub namespace: String,
    /// The Lease's name (default [`DEFAULT_LEASE`]).
    pub lease: String,
    /// This replica, written as the Lease's `holderIdentity` (the pod's name).
    pub holder: String,
    /// How long a claim lasts (default [`Reservations::DEFAULT_TTL`], 10 s; at most
    /// [`Reservations::MAX_TTL`]).
    pub ttl: Duration,
    /// The longest one claim may take, every request included (default
    /// [`DEFAULT_DEADLINE`]); keep it well under the webhook's `timeoutSeconds`.
    pub deadline: Duration,
}

impl ClaimsConfig {
    /// The defaults for the Lease in `namespace`, written by `holder`.
    pub fn new(namespace: impl Into<String>, holder: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            lease: DEFAULT_LEASE.to_owned(),
            holder: holder.into(),
            ttl: Reservations::DEFAULT_TTL,
            deadline: DEFAULT_DEADLINE,
        }
    }
}

/// A [`ClaimsConfig`] that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimsConfigError {
    /// The TTL is out of range.
    #[error(transparent)]
    Ttl(#[from] tier_core::admission::ReservationConfigError),
    /// The deadline is zero or not shorter than the TTL.
    #[error(
        "priority claim deadline {deadline:?} must be above zero and shorter than the claims' \
         TTL ({ttl:?}), and should be well under the webhook's timeoutSeconds"
    )]
    Deadline {
        /// The deadline given.
        deadline: Duration,
        /// The TTL given.
        ttl: Duration,
    },
}

type Now = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The [`PriorityClaims`] port on one Lease (see the [module docs](self)). Cheap to clone;
/// clones share the copy of the Lease and the queue of claims.
#[derive(Clone)]
pub struct LeaseClaims {
    api: Api<Lease>,
    config: Arc<ClaimsConfig>,
    now: Now,
    /// The Lease as last read or written; `None` before the first request or after a conflict.
    last: Arc<Mutex<Option<Lease>>>,
    /// One claim at a time per replica.
    queue: Arc<tokio::sync::Mutex<()>>,
}

impl fmt::Debug for LeaseClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseClaims")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// One claim as stored in the annotation.
#[derive(Debug, Deserialize, Serialize)]
struct Stored {
    tier: String,
    priority: i64,
    at: Timestamp,
}

/// What one write came to.
enum Step {
    /// The claim is stored.
    Done,
    /// Read the Lease again and decide again: another replica wrote it first (a conflict), or
    /// it was created or deleted meanwhile.
    Reread,
}

impl LeaseClaims {
    /// Claims in the Lease `config.lease` of `config.namespace`, on `client`, reading the wall
    /// clock. Sends no request.
    ///
    /// # Errors
    ///
    /// [`ClaimsConfigError`] when the TTL or the deadline is out of range.
    pub fn new(client: kube::Client, config: ClaimsConfig) -> Result<Self, ClaimsConfigError> {
        Self::with_clock(client, config, SystemTime::now)
    }

    /// [`new`](Self::new), reading the time from `now` (a test's virtual clock).
    ///
    /// # Errors
    ///
    /// [`ClaimsConfigError`] when the TTL or the deadline is out of range.
    pub fn with_clock(
        client: kube::Client,
        config: ClaimsConfig,
        now: impl Fn() -> SystemTime + Send + Sync + 'static,
    ) -> Result<Self, ClaimsConfigError> {
        ClaimSet::new(config.ttl, [])?;
        if config.deadline.is_zero() || config.deadline >= config.ttl {
            return Err(ClaimsConfigError::Deadline {
                deadline: config.deadline,
                ttl: config.ttl,
            });
        }
        Ok(Self {
            api: Api::namespaced(client, &config.namespace),
            config: Arc::new(config),
            now: Arc::new(now),
            last: Arc::new(Mutex::new(None)),
            queue: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ClaimsConfig {
        &self.config
    }

    fn remember(&self, lease: Option<Lease>) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = lease;
    }

    fn remembered(&self) -> Option<Lease> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The claim without its deadline: at most [`MAX_ATTEMPTS`] requests.
    async fn claim_unbounded(&self, tier: &str, priority: i64) -> Result<(), ClaimError> {
        let _turn = self.queue.lock().await;
        let mut lease = self.remembered();
        let mut requests = 0_usize;
        loop {
            let current = match lease.take() {
                Some(current) => current,
                None => {
                    self.spend(&mut requests)?;
                    match self.api.get_opt(&self.config.lease).await {
                        Ok(Some(read)) => read,
                        Ok(None) => {
                            self.spend(&mut requests)?;
                            match self.create(tier, priority).await? {
                                Step::Done => return Ok(()),
                                Step::Reread => continue,
                            }
                        }
                        Err(error) => return Err(self.unavailable("read", &error)),
                    }
                }
            };
            self.remember(Some(current.clone()));
            let now = (self.now)();
            let mut set = self.decode(&current)?;
            match set.take(tier, priority, now)? {
                ClaimChange::Unchanged => return Ok(()),
                ClaimChange::Changed => {}
            }
            self.spend(&mut requests)?;
            match self.replace(current, &set, now).await? {
                Step::Done => return Ok(()),
                Step::Reread => lease = None,
            }
        }
    }

    /// Counts one more request, or gives up once [`MAX_ATTEMPTS`] were sent.
    fn spend(&self, requests: &mut usize) -> Result<(), ClaimError> {
        if *requests >= MAX_ATTEMPTS {
            return Err(ClaimError::Unavailable(WriteError::transient(format!(
                "the Lease {}/{} changed under every one of {MAX_ATTEMPTS} requests (other \
                 replicas claiming at the same time)",
                self.config.namespace, self.config.lease
            ))));
        }
        *requests += 1;
        Ok(())
    }

    /// POSTs a new Lease holding only this claim.
    async fn create(&self, tier: &str, priority: i64) -> Result<Step, ClaimError> {
        let now = (self.now)();
        let mut set = self.decode(&Lease::default())?;
        // An empty set always takes the claim.
        set.take(tier, priority, now)?;
        let lease = self.lease(Lease::default(), &set, now)?;
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(created) => {
                self.remember(Some(created));
                Ok(Step::Done)
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(Step::Reread),
            Err(error) => {
                self.remember(None);
                Err(self.unavailable("create", &error))
            }
        }
    }

    /// PUTs `current` with `set`, on its resourceVersion.
    async fn replace(
        &self,
        current: Lease,
        set: &ClaimSet,
        now: SystemTime,
    ) -> Result<Step, ClaimError> {
        let lease = self.lease(current, set, now)?;
        match self
            .api
            .replace(&self.config.lease, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.remember(Some(written));
                Ok(Step::Done)
            }
            Err(kube::Error::Api(status)) if status.is_conflict() || status.is_not_found() => {
                self.remember(None);
                Ok(Step::Reread)
            }
            Err(error) => {
                self.remember(None);
                Err(self.unavailable("update", &error))
            }
        }
    }

    fn unavailable(&self, verb: &str, error: &kube::Error) -> ClaimError {
        let mut classified = classify::classify(error);
        classified.message = format!(
            "{verb} of the Lease {}/{} failed: {}",
            self.config.namespace, self.config.lease, classified.message
        );
        ClaimError::Unavailable(classified)
    }

    /// The claims of `lease`; none if its annotation is missing, too long or unreadable.
    fn decode(&self, lease: &Lease) -> Result<ClaimSet, ClaimError> {
        let text = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION));
        let stored: Vec<Stored> = match text {
            None => Vec::new(),
            Some(text) if text.len() > MAX_ANNOTATION_BYTES => {
                tracing::warn!(
                    bytes = text.len(),
                    "the priority claims annotation is longer than {MAX_ANNOTATION_BYTES} bytes; \
                     reading it as no claims and replacing it"
                );
                Vec::new()
            }
            Some(text) => serde_json::from_str(text).unwrap_or_else(|error| {
                tracing::warn!(
                    %error,
                    "the priority claims annotation is not tierd's; reading it as no claims and \
                     replacing it"
                );
                Vec::new()
            }),
        };
        let claims = stored.into_iter().map(|s| Claim {
            tier: s.tier,
            priority: s.priority,
            at: SystemTime::from(s.at),
        });
        ClaimSet::new(self.config.ttl, claims)
            .map_err(|error| ClaimError::Unavailable(WriteError::transient(error.to_string())))
    }

    /// `base` with `set` in its annotation and this replica's write in its spec.
    fn lease(&self, mut base: Lease, set: &ClaimSet, now: SystemTime) -> Result<Lease, ClaimError> {
        let invalid = |what: String| ClaimError::Unavailable(WriteError::transient(what));
        let stored: Vec<Stored> = set
            .claims()
            .iter()
            .map(|c| {
                Ok(Stored {
                    tier: c.tier.clone(),
                    priority: c.priority,
                    at: Timestamp::try_from(c.at)
                        .map_err(|e| invalid(format!("a claim's time is out of range: {e}")))?,
                })
            })
            .collect::<Result<_, ClaimError>>()?;
        let json = serde_json::to_string(&stored)
            .map_err(|e| invalid(format!("encoding the claims failed: {e}")))?;
        let renewed = Timestamp::try_from(now)
            .map_err(|e| invalid(format!("the clock is out of range: {e}")))?;
        let meta: &mut ObjectMeta = &mut base.metadata;
        meta.name = Some(self.config.lease.clone());
        meta.namespace = Some(self.config.namespace.clone());
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(ANNOTATION.to_owned(), json);
        let seconds = i32::try_from(self.config.ttl.as_secs().max(1)).unwrap_or(i32::MAX);
        let spec = base.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.config.holder.clone());
        spec.lease_duration_seconds = Some(seconds);
        spec.renew_time = Some(MicroTime(renewed));
        Ok(base)
    }
}

#[async_trait]
impl PriorityClaims for LeaseClaims {
    async fn claim(&self, tier: &str, priority: i64) -> Result<(), ClaimError> {
        let deadline = self.config.deadline;
        match tokio::time::timeout(deadline, self.claim_unbounded(tier, priority)).await {
            Ok(answer) => answer,
            Err(_) => {
                // What was sent may have landed: read the Lease afresh next time.
                self.remember(None);
                Err(ClaimError::Unavailable(WriteError::transient(format!(
                    "no answer from the API server about the Lease {}/{} within {deadline:?}",
                    self.config.namespace, self.config.lease
                ))))
            }
        }
    }
}
