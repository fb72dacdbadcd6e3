//! Leader election on a `coordination.k8s.io/v1` Lease, by client-go's rules, with fencing.
//!
//! Replicas of tierd elect one writer: only the holder of the Lease writes Tiers, every replica
//! keeps its caches and serves. The rules are client-go's (`tools/leaderelection`):
//!
//! - **Acquire** by creating the Lease, or by updating it on the resourceVersion just read once
//!   it has expired: its holder is empty, or its spec has not changed for
//!   `leaseDurationSeconds` *as observed on the local clock* since this replica last saw it
//!   change (the writer's `renewTime` is never compared with the local clock, so clock skew
//!   between nodes does not matter; only their rates must agree within
//!   `lease_duration / renew_deadline`). Of two replicas updating one resourceVersion the API
//!   server lets one win.
//! - **Renew** every retry period: the holder updates the Lease it last wrote, on its
//!   resourceVersion; on a conflict or error it reads again and decides as a candidate would.
//! - **Bounded calls:** every call is cut after `renew_deadline / 2` (kube-scheduler's lock
//!   timeout), so a hung request cannot hold the loop past the renew deadline.
//! - **Fencing**, which client-go does not do: the leader may write only until its last
//!   *confirmed* write (create, takeover or renewal) is `renew_deadline` old, counted from when
//!   that write was *sent*. Another replica can take over no earlier than `lease_duration` after
//!   it saw that write, which is after it was sent; since `renew_deadline < lease_duration`, a
//!   leader whose renewals fail or hang stops permitting writes at least
//!   `lease_duration - renew_deadline` (5 s by default) before anyone else can start. Calls
//!   already in flight are the caller's to bound (tierd's writes: `--call-timeout`; see
//!   docs/RELIABILITY.md for the worst case).
//! - **Release** on shutdown: the holder clears `holderIdentity` (and sets a 1 s duration), so a
//!   standby takes over at its next attempt, within one retry period.
//!
//! The decisions are the sans-I/O [`Election`] (time passed in, tested on virtual time); the
//! loop around it is [`Elector::spawn`], on any [`LeaseApi`] ([`KubeLeases`]: kube's
//! `Api<Lease>`). It publishes the write permission on a `watch` channel
//! ([`Elector::may_write`], the input of [`tier_core::Driver::leadership`]), what it knows
//! ([`Elector::status`], a [`LeaderStatus`]) and each change of leadership as a
//! [`LeaderEvent`] ([`Elector::events`], bounded, for Kubernetes Events about the Lease:
//! [`publish_events`]).
//!
//! Steady state, per replica: one call per retry period (the leader's update, a standby's
//! read), 30 a minute with the defaults.
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), tier_kube::lease::ElectionError> {
//! use tier_kube::lease::{ElectionConfig, Elector, KubeLeases};
//!
//! let config = ElectionConfig::new("kube-system", "tierd", "tierd-0_1a2b3c4d");
//! let elector = Elector::spawn(KubeLeases::new(client, &config), config)?;
//! let may_write = elector.may_write(); // hand it to the driver
//! # let _ = may_write;
//! // on SIGTERM, once the driver stopped:
//! elector.release().await;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// kube-scheduler's `--leader-elect-lease-duration`: how long a standby waits after the last
/// change it saw before it takes the Lease.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// kube-scheduler's `--leader-elect-renew-deadline`: how long the leader tries to renew before
/// it stops writing.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// kube-scheduler's `--leader-elect-retry-period`: the time between attempts.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// client-go's `JitterFactor`: the renew deadline must exceed this many retry periods.
const JITTER_FACTOR: f64 = 1.2;
/// The field manager of tierd's Lease writes.
pub const FIELD_MANAGER: &str = "tierd-leader-election";
/// How many leadership changes [`Elector::events`] holds unread before it drops the newest.
pub const EVENT_QUEUE: usize = 16;
/// The longest a Kubernetes Event about the Lease may take to publish before it is dropped.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest retry period accepted (no hot loop against the API server).
const MIN_RETRY_PERIOD: Duration = Duration::from_millis(10);
/// The longest any of the three durations may be.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// Where and as whom to elect, and the timing (kube-scheduler's flags and defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionConfig {
    /// The Lease's namespace (`--leader-elect-resource-namespace`).
    pub namespace: String,
    /// The Lease's name (`--leader-elect-resource-name`).
    pub name: String,
    /// This replica's identity, unique per process (tierd: the pod name and a random suffix).
    pub identity: String,
    /// How long a standby waits after the last change it saw before it takes over; written
    /// to the Lease rounded up to whole seconds (default 15 s).
    pub lease_duration: Duration,
    /// How long the leader may go without a confirmed renewal before it stops writing
    /// (default 10 s); shorter than `lease_duration`.
    pub renew_deadline: Duration,
    /// The time between attempts to acquire or renew (default 2 s); the renew deadline must
    /// exceed 1.2 of it, as client-go requires.
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// kube-scheduler's defaults (15 s, 10 s, 2 s) for the Lease `namespace`/`name`, as
    /// `identity`.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// The bound of every call: half the renew deadline (kube-scheduler's lock timeout), so a
    /// read and a write together fit in one renew deadline.
    pub fn call_timeout(&self) -> Duration {
        self.renew_deadline / 2
    }

    /// Checks that the timing can fence (renew deadline < lease duration, 1.2 × retry period <
    /// renew deadline), that each duration is in range, and the names.
    ///
    /// # Errors
    ///
    /// The first problem found, in words that say what to change.
    pub fn validate(&self) -> Result<(), ElectionError> {
        for (field, value, min) in [
            (
                "lease duration",
                self.lease_duration,
                Duration::from_secs(1),
            ),
            ("renew deadline", self.renew_deadline, MIN_RETRY_PERIOD),
            ("retry period", self.retry_period, MIN_RETRY_PERIOD),
        ] {
            if value < min || value > MAX_DURATION {
                return Err(ElectionError::OutOfRange {
                    field,
                    value,
                    min,
                    max: MAX_DURATION,
                });
            }
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(ElectionError::CannotFence {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            });
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(ElectionError::RetryTooSlow {
                retry_period: self.retry_period,
                renew_deadline: self.renew_deadline,
            });
        }
        if self.identity.trim().is_empty() {
            return Err(ElectionError::NoIdentity);
        }
        if let Err(problem) = tier_core::check_dns1123_subdomain(&self.name) {
            return Err(ElectionError::Name {
                what: "name",
                value: self.name.clone(),
                problem,
            });
        }
        if let Err(problem) = tier_core::check_dns1123_label(&self.namespace) {
            return Err(ElectionError::Name {
                what: "namespace",
                value: self.namespace.clone(),
                problem,
            });
        }
        Ok(())
    }

    /// `namespace/name`, for people.
    pub fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The lease duration as the Lease stores it: whole seconds, rounded up (so that others
    /// wait at least as long as configured).
    fn lease_seconds(&self) -> i32 {
        let whole = self
            .lease_duration
            .as_secs()
            .saturating_add(u64::from(self.lease_duration.subsec_nanos() > 0));
        i32::try_from(whole).unwrap_or(i32::MAX)
    }
}

/// A leader election configuration that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElectionError {
    /// The renew deadline is not shorter than the lease duration: the leader could still be
    /// writing when another replica takes over.
    #[error(
        "the renew deadline ({renew_deadline:?}) must be shorter than the lease duration \
         ({lease_duration:?}): a leader that cannot renew must stop writing before its Lease can \
         expire for the other replicas"
    )]
    CannotFence {
        /// The renew deadline given.
        renew_deadline: Duration,
        /// The lease duration given.
        lease_duration: Duration,
    },
    /// The retry period leaves no second attempt within the renew deadline.
    #[error(
        "the renew deadline ({renew_deadline:?}) must be longer than 1.2 times the retry period \
         ({retry_period:?}), as client-go requires: the leader needs more than one attempt to \
         renew before it gives up"
    )]
    RetryTooSlow {
        /// The retry period given.
        retry_period: Duration,
        /// The renew deadline given.
        renew_deadline: Duration,
    },
    /// A duration out of its range.
    #[error("the {field} ({value:?}) must be between {min:?} and {max:?}")]
    OutOfRange {
        /// Which duration.
        field: &'static str,
        /// The value given.
        value: Duration,
        /// The shortest accepted.
        min: Duration,
        /// The longest accepted.
        max: Duration,
    },
    /// No identity.
    #[error("the leader election identity is empty; give the pod's name (--pod-name, POD_NAME)")]
    NoIdentity,
    /// The Lease's name or namespace is not a valid Kubernetes name.
    #[error("the Lease {what} {value:?} is not a valid Kubernetes name: {problem}")]
    Name {
        /// `name` or `namespace`.
        what: &'static str,
        /// The value given.
        value: String,
        /// Why not.
        problem: String,
    },
    /// [`Elector::spawn`] was called outside a tokio runtime (a bug in the caller).
    #[error("the leader elector must be started from within a tokio runtime")]
    NoRuntime,
}

/// What to do with the Lease as just read ([`Election::observe`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// The Lease does not exist: create it with this spec.
    Create(LeaseSpec),
    /// Replace the Lease's spec with this one, on the resourceVersion just read (a takeover,
    /// or a renewal of this replica's own hold).
    Update(LeaseSpec),
    /// Another replica holds the Lease and it has not expired as seen here: wait.
    Held {
        /// The holder.
        holder: String,
    },
}

/// The spec last read or written, and when this replica first saw it in that form.
#[derive(Clone, Debug, PartialEq)]
struct Observed {
    spec: LeaseSpec,
    at: Instant,
}

/// client-go's leader election decisions, sans-I/O: what one replica knows of the Lease and
/// what it should write, with `now` (the local monotonic clock) and `wall` (the timestamp
/// written as `renewTime`, informational only) passed in. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct Election {
    config: ElectionConfig,
    observed: Option<Observed>,
    /// When the last write of ours that the server confirmed, holding the Lease, was sent.
    renewed_at: Option<Instant>,
}

/// The holder of `spec`, if any (an empty string is none).
fn holder_of(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

impl Election {
    /// An election for `config`, knowing nothing yet.
    ///
    /// # Errors
    ///
    /// [`ElectionError`] when `config` cannot fence or is out of range.
    pub fn new(config: ElectionConfig) -> Result<Self, ElectionError> {
        config.validate()?;
        Ok(Self {
            config,
            observed: None,
            renewed_at: None,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ElectionConfig {
        &self.config
    }

    fn is_ours(&self, spec: &LeaseSpec) -> bool {
        holder_of(spec) == Some(self.config.identity.as_str())
    }

    /// Input: the Lease's spec as just read at `now` (`None`: there is no Lease). Output: what
    /// to write, if anything.
    pub fn observe(
        &mut self,
        lease: Option<&LeaseSpec>,
        now: Instant,
        wall: Timestamp,
    ) -> Decision {
        let Some(current) = lease else {
            self.observed = None;
            self.renewed_at = None;
            return Decision::Create(self.claim(None, wall));
        };
        if self.observed.as_ref().is_none_or(|o| o.spec != *current) {
            self.observed = Some(Observed {
                spec: current.clone(),
                at: now,
            });
        }
        if !self.is_ours(current) {
            self.renewed_at = None;
        }
        if let Some(holder) = holder_of(current).filter(|_| !self.is_ours(current))
            && self.expires_at().is_none_or(|at| now < at)
        {
            return Decision::Held {
                holder: holder.to_owned(),
            };
        }
        Decision::Update(self.claim(Some(current), wall))
    }

    /// When the Lease as last observed expires for this replica: its last change as seen here
    /// plus its `leaseDurationSeconds` (this replica's own duration when the Lease has none).
    pub fn expires_at(&self) -> Option<Instant> {
        let observed = self.observed.as_ref()?;
        let duration = observed
            .spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0)
            .map_or(self.config.lease_duration, Duration::from_secs);
        Some(observed.at.checked_add(duration).unwrap_or(observed.at))
    }

    /// The spec that makes this replica the holder, from `current` (client-go's record: the
    /// acquire time and transitions kept when it already holds it).
    fn claim(&self, current: Option<&LeaseSpec>, wall: Timestamp) -> LeaseSpec {
        let base = current.cloned().unwrap_or_default();
        let ours = current.is_some_and(|c| self.is_ours(c));
        let transitions = base.lease_transitions.unwrap_or(0);
        let transitions = match current {
            Some(_) if !ours => transitions.saturating_add(1),
            _ => transitions,
        };
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_seconds()),
            acquire_time: match (ours, base.acquire_time) {
                (true, Some(at)) => Some(at),
                _ => Some(MicroTime(wall)),
            },
            renew_time: Some(MicroTime(wall)),
            lease_transitions: Some(transitions),
            ..base
        }
    }

    /// The renewal of this replica's own hold (the Lease it last wrote, renewed at `wall`), if
    /// it holds the Lease as last observed.
    pub fn renewal(&self, wall: Timestamp) -> Option<LeaseSpec> {
        let observed = self.observed.as_ref()?;
        self.is_ours(&observed.spec)
            .then(|| self.claim(Some(&observed.spec), wall))
    }

    /// Input: the server confirmed a write of `written` that was sent at `sent`; `now` is when
    /// the answer came. A write that holds the Lease permits writes until `sent` plus the
    /// renew deadline.
    pub fn confirmed(&mut self, written: &LeaseSpec, sent: Instant, now: Instant) {
        self.renewed_at = self.is_ours(written).then_some(sent);
        self.observed = Some(Observed {
            spec: written.clone(),
            at: now,
        });
    }

    /// Input: the Lease was deleted or this replica's view is void (a conflict): it holds
    /// nothing until it reads again.
    pub fn forget(&mut self) {
        self.renewed_at = None;
        self.observed = None;
    }

    /// Whether this replica may write at `now`: it holds the Lease, and its last confirmed
    /// write was sent less than the renew deadline ago.
    pub fn may_write(&self, now: Instant) -> bool {
        self.fence_at().is_some_and(|at| now < at)
    }

    /// When [`may_write`](Self::may_write) turns false unless a renewal is confirmed first;
    /// `None` when this replica does not hold the Lease.
    pub fn fence_at(&self) -> Option<Instant> {
        let sent = self.renewed_at?;
        let observed = self.observed.as_ref()?;
        self.is_ours(&observed.spec)
            .then(|| sent.checked_add(self.config.renew_deadline).unwrap_or(sent))
    }

    /// Whether another replica holds the Lease as last observed.
    pub fn held(&self) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|o| holder_of(&o.spec).is_some() && !self.is_ours(&o.spec))
    }

    /// The holder as last observed, if any.
    pub fn holder(&self) -> Option<&str> {
        self.observed.as_ref().and_then(|o| holder_of(&o.spec))
    }

    /// The spec that releases the Lease (holder cleared, duration 1 s, transitions kept), if
    /// this replica holds it; writes are no longer permitted from this call on.
    pub fn release(&mut self, wall: Timestamp) -> Option<LeaseSpec> {
        self.renewed_at = None;
        let observed = self.observed.as_ref()?;
        if !self.is_ours(&observed.spec) {
            return None;
        }
        Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(MicroTime(wall)),
            renew_time: Some(MicroTime(wall)),
            ..observed.spec.clone()
        })
    }
}

/// A Lease call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseCallError {
    /// Someone else wrote first (409: AlreadyExists on create, Conflict on update).
    #[error("{0}")]
    Conflict(String),
    /// Any other failure, in words.
    #[error("{0}")]
    Failed(String),
}

/// The Lease calls the elector makes, on one Lease: kube's `Api<Lease>` ([`KubeLeases`]), or
/// a fake in tests.
#[async_trait]
pub trait LeaseApi: Send + Sync + 'static {
    /// Reads the Lease; `None` when it does not exist.
    async fn get(&self) -> Result<Option<Lease>, LeaseCallError>;
    /// Creates `lease`; answers the stored object.
    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseCallError>;
    /// Replaces the Lease with `lease`, on its `metadata.resourceVersion`; answers the stored
    /// object.
    async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseCallError>;
}

/// [`LeaseApi`] on kube's `Api<Lease>`, for one Lease.
#[derive(Clone)]
pub struct KubeLeases {
    api: Api<Lease>,
    name: String,
    namespace: String,
}

impl fmt::Debug for KubeLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeLeases")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl KubeLeases {
    /// The Lease of `config` through `client` (best one without kube's retries: every call is
    /// bounded by the elector, and a failure is retried at the next attempt).
    pub fn new(client: kube::Client, config: &ElectionConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            name: config.name.clone(),
            namespace: config.namespace.clone(),
        }
    }

    fn words(&self, error: &kube::Error) -> LeaseCallError {
        if let kube::Error::Api(status) = error {
            let words = format!(
                "{} {}: {}",
                status.code,
                if status.reason.is_empty() {
                    "Failure"
                } else {
                    &status.reason
                },
                status.message
            );
            return match status.code {
                409 => LeaseCallError::Conflict(words),
                401 | 403 => LeaseCallError::Failed(format!(
                    "{words}; grant tierd's user get, create and update on \
                     leases.coordination.k8s.io in {} (see deploy/base/leader-election.yaml)",
                    self.namespace
                )),
                _ => LeaseCallError::Failed(words),
            };
        }
        LeaseCallError::Failed(crate::explain::client_error(error))
    }

    fn params() -> PostParams {
        PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        }
    }
}

#[async_trait]
impl LeaseApi for KubeLeases {
    async fn get(&self) -> Result<Option<Lease>, LeaseCallError> {
        self.api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.words(&e))
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseCallError> {
        self.api
            .create(&Self::params(), lease)
            .await
            .map_err(|e| self.words(&e))
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseCallError> {
        self.api
            .replace(&self.name, &Self::params(), lease)
            .await
            .map_err(|e| self.words(&e))
    }
}

/// What the elector knows, for readiness and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderStatus {
    /// The Lease, `namespace/name`.
    pub lease: String,
    /// This replica's identity.
    pub identity: String,
    /// Whether this replica may write now (it leads).
    pub leading: bool,
    /// The holder as last read, if any.
    pub holder: Option<String>,
    /// The last failed call since the last success, in words.
    pub last_error: Option<String>,
}

impl fmt::Display for LeaderStatus {
    /// `leading: holds Lease kube-system/tierd as tierd-0_1a2b`, or why not.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            lease,
            identity,
            holder,
            ..
        } = self;
        match (self.leading, holder) {
            (true, _) => write!(f, "leading: holds Lease {lease} as {identity}")?,
            (false, Some(holder)) if holder == identity => write!(
                f,
                "standby: Lease {lease} names this replica ({identity}) but its renewal is not \
                 confirmed; no Tier write starts until it is"
            )?,
            (false, Some(holder)) => write!(
                f,
                "standby: Lease {lease} is held by {holder}; this replica ({identity}) writes no \
                 Tier"
            )?,
            (false, None) => write!(
                f,
                "standby: Lease {lease} is not held yet; this replica ({identity}) tries to \
                 acquire it"
            )?,
        }
        if let Some(error) = &self.last_error {
            write!(f, "; last error: {error}")?;
        }
        Ok(())
    }
}

/// A change of leadership, for Kubernetes Events about the Lease ([`leader_election`](crate::events::leader_election)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderEvent {
    /// This replica acquired the Lease (or renewed it after having lost the permission).
    Acquired {
        /// This replica's identity.
        identity: String,
    },
    /// This replica could not renew within the renew deadline, or saw another holder: it
    /// stopped writing.
    Lost {
        /// This replica's identity.
        identity: String,
        /// Why, in words.
        reason: String,
    },
    /// This replica released the Lease on shutdown.
    Released {
        /// This replica's identity.
        identity: String,
    },
}

impl fmt::Display for LeaderEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaderEvent::Acquired { identity } => write!(f, "{identity} became leader"),
            LeaderEvent::Lost { identity, reason } => {
                write!(f, "{identity} stopped leading: {reason}")
            }
            LeaderEvent::Released { identity } => {
                write!(
                    f,
                    "{identity} stopped leading: released the Lease on shutdown"
                )
            }
        }
    }
}

/// A reference to the Lease of `config`, the object of the leadership Events.
pub fn reference(config: &ElectionConfig) -> ObjectReference {
    ObjectReference {
        api_version: Some("coordination.k8s.io/v1".to_owned()),
        kind: Some("Lease".to_owned()),
        name: Some(config.name.clone()),
        namespace: Some(config.namespace.clone()),
        ..ObjectReference::default()
    }
}

/// Publishes a Kubernetes Event about the Lease for every [`LeaderEvent`] of `events` until
/// the elector drops its end; a failed publish is logged and dropped. Returns how many were
/// published.
pub async fn publish_events(
    client: kube::Client,
    reporter: Reporter,
    config: &ElectionConfig,
    mut events: mpsc::Receiver<LeaderEvent>,
) -> u64 {
    let recorder = Recorder::new(client, reporter);
    let reference = reference(config);
    let mut published = 0;
    while let Some(event) = events.recv().await {
        let kube_event = crate::events::leader_election(&event);
        let send = recorder.publish(&kube_event, &reference);
        match tokio::time::timeout(PUBLISH_TIMEOUT, send).await {
            Ok(Ok(())) => published += 1,
            Ok(Err(error)) => {
                let error = crate::explain::client_error(&error);
                tracing::warn!(%error, "cannot publish a leader election Event")
            }
            Err(_) => tracing::warn!(
                "publishing a leader election Event took over {PUBLISH_TIMEOUT:?}; dropped"
            ),
        }
    }
    published
}

/// The leader election loop running as a task; see the [module docs](self). Dropping it stops
/// the loop without releasing (the Lease then expires), and closes [`may_write`](Self::may_write).
#[derive(Debug)]
pub struct Elector {
    may_write: watch::Receiver<bool>,
    status: watch::Receiver<LeaderStatus>,
    events: Option<mpsc::Receiver<LeaderEvent>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Elector {
    /// Starts electing on `api` with `config`, on the current tokio runtime. Writes are not
    /// permitted until the Lease is acquired.
    ///
    /// # Errors
    ///
    /// [`ElectionError`] when `config` cannot fence or is out of range, or outside a tokio
    /// runtime; nothing is started.
    pub fn spawn(api: impl LeaseApi, config: ElectionConfig) -> Result<Self, ElectionError> {
        let election = Election::new(config)?;
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| ElectionError::NoRuntime)?;
        let config = election.config().clone();
        let (may_write_tx, may_write) = watch::channel(false);
        let (status_tx, status) = watch::channel(LeaderStatus {
            lease: config.lease(),
            identity: config.identity.clone(),
            leading: false,
            holder: None,
            last_error: None,
        });
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        let (stop, stopped) = oneshot::channel();
        let task = runtime.spawn(
            Loop {
                api,
                election,
                last: None,
                may_write: may_write_tx,
                status: status_tx,
                events: events_tx,
                leading: false,
            }
            .run(stopped),
        );
        Ok(Self {
            may_write,
            status,
            events: Some(events),
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Whether this replica may write now: `true` from a confirmed acquisition until the
    /// renew deadline passes without a confirmed renewal, or until [`release`](Self::release).
    /// Closed (a receiver whose sender is gone) once the loop ends.
    pub fn may_write(&self) -> watch::Receiver<bool> {
        self.may_write.clone()
    }

    /// What the elector knows (for `/readyz?verbose`).
    pub fn status(&self) -> watch::Receiver<LeaderStatus> {
        self.status.clone()
    }

    /// The stream of leadership changes (at most [`EVENT_QUEUE`] unread; the newest are dropped
    /// beyond, with a log line). Taken once; `None` after.
    pub fn events(&mut self) -> Option<mpsc::Receiver<LeaderEvent>> {
        self.events.take()
    }

    /// Stops the loop and releases the Lease if this replica holds it: writes are no longer
    /// permitted from the start of this call, then one update (bounded by the call timeout)
    /// clears the holder, so a standby takes over within one retry period. Call it once the
    /// guarded writes have stopped. Returns once the loop has ended.
    pub async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The loop's state: the decisions, the Lease last written (renewed on its resourceVersion)
/// and the channels it publishes on.
struct Loop<A> {
    api: A,
    election: Election,
    /// The server's answer to this replica's last confirmed write.
    last: Option<Lease>,
    may_write: watch::Sender<bool>,
    status: watch::Sender<LeaderStatus>,
    events: mpsc::Sender<LeaderEvent>,
    /// Whether the last published permission was `true`.
    leading: bool,
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// `call` cut after `timeout`.
async fn bounded<T>(
    timeout: Duration,
    what: &str,
    call: impl Future<Output = Result<T, LeaseCallError>>,
) -> Result<T, LeaseCallError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(LeaseCallError::Failed(format!(
            "{what} the Lease did not complete within {timeout:?}"
        ))),
    }
}

impl<A: LeaseApi> Loop<A> {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let retry = self.election.config().retry_period;
        let renew_deadline = self.election.config().renew_deadline;
        let lease = self.election.config().lease();
        let identity = self.election.config().identity.clone();
        loop {
            let started = tokio::time::Instant::now();
            let fence = self.election.fence_at();
            let mut fenced = false;
            let stopping = {
                let attempt = attempt(&self.api, &mut self.election, &mut self.last);
                let mut attempt = std::pin::pin!(attempt);
                loop {
                    tokio::select! {
                        outcome = &mut attempt => break Some(outcome),
                        () = sleep_until(fence), if !fenced => {
                            // The renew deadline passed while the call is under way: stop
                            // permitting writes now, not when the call ends.
                            fenced = true;
                            self.may_write.send_replace(false);
                            self.status.send_modify(|status| status.leading = false);
                            if std::mem::take(&mut self.leading) {
                                let reason = format!(
                                    "the Lease was not renewed within {:?}",
                                    renew_deadline
                                );
                                tracing::warn!(%lease, %reason, "stopped leading; no Tier write starts");
                                let lost = LeaderEvent::Lost {
                                    identity: identity.clone(),
                                    reason,
                                };
                                if self.events.try_send(lost).is_err() {
                                    tracing::debug!("leader election Event dropped");
                                }
                            }
                        }
                        _ = &mut stop => break None,
                    }
                }
            };
            let Some(outcome) = stopping else {
                self.release().await;
                return;
            };
            self.publish(outcome.err());
            // The next attempt: one retry period after this one started, or as soon as another
            // holder's Lease expires as seen here, if that is sooner (so a standby takes over
            // within the lease duration plus one retry period of the last renewal).
            let mut next = started + retry;
            if let Some(expiry) = self.election.expires_at().filter(|_| self.election.held()) {
                let expiry = tokio::time::Instant::from_std(expiry);
                if expiry > tokio::time::Instant::now() && expiry < next {
                    next = expiry;
                }
            }
            loop {
                let fence = self.election.fence_at();
                tokio::select! {
                    () = tokio::time::sleep_until(next) => break,
                    () = sleep_until(fence), if self.leading => self.publish_lost_permission(),
                    _ = &mut stop => {
                        self.release().await;
                        return;
                    }
                }
            }
        }
    }

    /// Publishes the permission and the status after an attempt (`error`: why it failed).
    fn publish(&mut self, error: Option<LeaseCallError>) {
        let now = now();
        let leading = self.election.may_write(now);
        let config = self.election.config().clone();
        let holder = self.election.holder().map(str::to_owned);
        if leading != self.leading {
            self.leading = leading;
            let event = if leading {
                tracing::info!(lease = %config.lease(), identity = %config.identity, "became leader");
                LeaderEvent::Acquired {
                    identity: config.identity.clone(),
                }
            } else {
                let reason = match &holder {
                    Some(holder) if *holder != config.identity => {
                        format!("the Lease is held by {holder}")
                    }
                    _ => format!(
                        "the Lease was not renewed within {:?}",
                        config.renew_deadline
                    ),
                };
                tracing::warn!(lease = %config.lease(), %reason, "stopped leading; no Tier write starts");
                LeaderEvent::Lost {
                    identity: config.identity.clone(),
                    reason,
                }
            };
            self.send_event(event);
        }
        if let Some(error) = &error {
            let first = self.status.borrow().last_error.is_none();
            if first {
                tracing::warn!(lease = %config.lease(), %error, "a leader election call failed; retrying every retry period");
            }
        }
        self.may_write.send_if_modified(|current| {
            let changed = *current != leading;
            *current = leading;
            changed
        });
        let status = LeaderStatus {
            lease: config.lease(),
            identity: config.identity,
            leading,
            holder,
            last_error: error.map(|e| e.to_string()),
        };
        self.status.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        });
    }

    /// The renew deadline passed between attempts: stop permitting writes now.
    fn publish_lost_permission(&mut self) {
        let error = self.status.borrow().last_error.clone();
        self.publish(error.map(LeaseCallError::Failed));
    }

    fn send_event(&self, event: LeaderEvent) {
        if self.events.try_send(event).is_err() {
            tracing::debug!("leader election Event dropped: nobody reads, or the queue is full");
        }
    }

    /// Stops permitting writes, then clears the holder if this replica holds the Lease.
    async fn release(mut self) {
        self.may_write.send_replace(false);
        let Some(spec) = self.election.release(Timestamp::now()) else {
            return;
        };
        let Some(mut lease) = self.last.take() else {
            return;
        };
        lease.spec = Some(spec);
        let timeout = self.election.config().call_timeout();
        let config = self.election.config().clone();
        match bounded(timeout, "releasing", self.api.replace(&lease)).await {
            Ok(_) => {
                tracing::info!(lease = %config.lease(), "released the Lease");
                if self.leading {
                    self.send_event(LeaderEvent::Released {
                        identity: config.identity.clone(),
                    });
                }
            }
            Err(error) => tracing::warn!(
                lease = %config.lease(),
                %error,
                "could not release the Lease; the standby takes over once it expires"
            ),
        }
        self.leading = false;
        self.status.send_modify(|status| status.leading = false);
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// One attempt, client-go's `tryAcquireOrRenew`: renew the Lease last written on its
/// resourceVersion if this replica holds it; else (or on failure) read it and act on the
/// [`Decision`].
async fn attempt<A: LeaseApi>(
    api: &A,
    election: &mut Election,
    last: &mut Option<Lease>,
) -> Result<(), LeaseCallError> {
    let timeout = election.config().call_timeout();
    if let (Some(spec), Some(previous)) = (election.renewal(Timestamp::now()), last.as_ref()) {
        let mut lease = previous.clone();
        lease.spec = Some(spec);
        let sent = now();
        match bounded(timeout, "renewing", api.replace(&lease)).await {
            Ok(stored) => {
                confirm(election, last, stored, sent);
                return Ok(());
            }
            // Someone else wrote it: read it again, as a candidate.
            Err(LeaseCallError::Conflict(_)) => *last = None,
            // Not known to be applied: read it again (a renewal within the deadline still
            // permits writes).
            Err(_) => {}
        }
    }
    let read = bounded(timeout, "reading", api.get()).await?;
    // A Lease without a spec reads as an empty one (no holder: free).
    let spec = read.as_ref().map(|l| l.spec.clone().unwrap_or_default());
    let decision = election.observe(spec.as_ref(), now(), Timestamp::now());
    let config = election.config().clone();
    let sent = now();
    let written = match decision {
        Decision::Held { .. } => return Ok(()),
        Decision::Create(spec) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    namespace: Some(config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            bounded(timeout, "creating", api.create(&lease)).await
        }
        Decision::Update(spec) => {
            let Some(mut lease) = read else {
                return Ok(());
            };
            lease.spec = Some(spec);
            bounded(timeout, "updating", api.replace(&lease)).await
        }
    };
    match written {
        Ok(stored) => {
            confirm(election, last, stored, sent);
            Ok(())
        }
        Err(error) => {
            if matches!(error, LeaseCallError::Conflict(_)) {
                // Another replica won the race: read again at the next attempt.
                election.forget();
                *last = None;
            }
            Err(error)
        }
    }
}

fn confirm(election: &mut Election, last: &mut Option<Lease>, stored: Lease, sent: Instant) {
    let spec = stored.spec.clone().unwrap_or_default();
    election.confirmed(&spec, sent, now());
    *last = Some(stored);
}

#[cfg(test)]
mod tests;
