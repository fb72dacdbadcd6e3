//! `POST /validate/tier`: the Tier validating webhook (`tiervalidator.antrea.io`).
//!
//! It answers `admission.k8s.io/v1` AdmissionReviews for Tier CREATE, UPDATE and DELETE with
//! [`tier_core::admission::review`] (Antrea's rules, one shared copy) against the Tier cache, a
//! [`TierLister`]'s snapshot, and for DELETE against two policy caches ([`PolicyReferences`]).
//! Denials of Antrea's rules carry Antrea's messages word for word; kube-apiserver turns them
//! into `400 admission webhook "tiervalidator.antrea.io" denied the request: <message>`.
//!
//! | request | needs | answer |
//! |---|---|---|
//! | CREATE | [`Webhook::REQUIRES`]: `tier-cache-synced` | the 20-priority limit, reserved priorities, 220 with the `ClusterNetworkPolicy` gate, overlap with cached Tiers; then a desired Tier's priority while the cache lacks that Tier, and **reservations** |
//! | UPDATE | [`Webhook::REQUIRES`] | only the controller user may change a priority |
//! | DELETE | [`Webhook::DELETE_REQUIRES`]: also `acnp-cache-synced`, `annp-cache-synced` | reserved names, then Tiers referenced by ClusterNetworkPolicies, then by NetworkPolicies |
//! | a Tier name that is not a DNS-1123 subdomain | nothing | denied, code 400 (kube-apiserver never sends one) |
//! | other operations, other kinds | nothing | allowed (the webhook is registered for Tiers only) |
//! | before its caches are synced | | denied: [`NOT_SYNCED`] or [`POLICIES_NOT_SYNCED`], code 503, `ServiceUnavailable`, retry after 1 s |
//! | not an AdmissionReview v1, or a uid over [`MAX_UID_BYTES`] | | HTTP 400 with the reason, no review |
//! | a body over [`MAX_REVIEW_BYTES`] | | HTTP 413 with the reason |
//!
//! # Per-operation dependencies
//!
//! Each operation waits only for the caches it reads (Antrea's first dependency loop, applied to
//! this webhook): a Tier create never waits for the policy caches, so tierd's own system Tiers
//! are created while, say, the policy CRDs are missing or their RBAC is broken. The checks are
//! in-band, so the answer is always an AdmissionReview echoing the request's uid. The not-synced
//! denials use code 503 so that clients (tierd's own writer included) treat them as transient
//! and retry, while a rule denial (code unset, 400 at the client) is final.
//!
//! # Reservations
//!
//! Antrea checks overlap against its cache, so two creates at one priority reviewed before
//! either reaches the cache both pass. This webhook reviews through a shared
//! [`ReservationTable`]: a CREATE it admits holds its priority until the cache shows the Tier
//! there or the TTL passes, and CREATE reviews are serialized on the table, so two creates at
//! one priority through one tierd cannot both pass. UPDATE and DELETE reviews add nothing to the
//! table and read none of it; they only drop what the cache shows (a Tier created, then deleted
//! or moved, releases its priority at once rather than at the TTL). tierd's own successful writes (creates and
//! priority updates) go into the same table at once ([`ReservingWriter`]). With several webhook
//! replicas, each has its own table, and two creates reviewed by *different* replicas within one
//! cache-propagation delay (typically milliseconds to a second) would both pass, as with Antrea.
//!
//! # Claims across replicas
//!
//! With [`Webhook::claims`], a CREATE that this replica's table admits then claims its priority
//! through a [`PriorityClaims`] port, the store every replica shares (tierd's: a Lease on the API
//! server, `tier_kube::claims`). Another Tier's live claim denies it (a rule denial: `tier b
//! priority 10 is claimed by a create of Tier a admitted 120 ms ago by a tierd replica, not yet
//! visible`); a claim that cannot be made (the store failed, or did not answer within the port's
//! deadline) denies it **retryably** (code 503, `ServiceUnavailable`, retry after 1 s): the
//! webhook fails closed rather than fall back to its own table, since the table cannot see the
//! other replicas. Either way the review's own reservation is released. Only CREATE reviews
//! claim, and not dry runs (one is reviewed against this replica's cache and table only). With
//! [`ReservingWriter::claiming`], tierd's own writes claim the same way before they are sent.
//!
//! # Callers that forge reviews
//!
//! Without client authentication anyone who reaches the port can send a review, claiming any
//! user. So a review changes nothing a forger could use against anyone else (see
//! [`Reservations`]): UPDATE and DELETE reviews add or replace nothing (they drop only what the
//! cache shows); a CREATE reserves only below the
//! priority limit and never takes a desired Tier's priority ([`AdmissionPolicy::desire`]); names
//! must be valid. Every cost is bounded: the body ([`MAX_REVIEW_BYTES`]), the decoded review (a
//! typed struct of the fields the rules read, strings borrowed from the body), the response
//! (only the uid is echoed, at most [`MAX_UID_BYTES`]), every caller-controlled field in a
//! message or log line ([`Truncated`]), and the number of log lines: denials, refusals and
//! reviews of unexpected kinds share a budget of [`LOG_BURST`] lines, then one per
//! [`LOG_REFILL`]; the next line logged says how many were suppressed.
//!
//! ```
//! use std::sync::Arc;
//!
//! use tier_core::admission::AdmissionPolicy;
//! use tier_server::readiness::Readiness;
//! use tier_server::webhook::Webhook;
//!
//! # fn example(lister: Arc<dyn tier_core::TierLister>) {
//! let readiness = Readiness::new();
//! let policy = AdmissionPolicy::antrea("system:serviceaccount:kube-system:tierd");
//! let router: axum::Router = Webhook::new(lister, policy, &readiness).routes();
//! # let _ = router;
//! # }
//! ```

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use kube_core::admission::{
    AdmissionResponse, AdmissionReview, META_API_VERSION_V1, META_KIND, Operation,
};
use kube_core::{DynamicObject, Status as ApiStatus, response::StatusDetails};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use tier_core::admission::{
    self, AdmissionPolicy, Denial, ReferenceIndex, References, Request, Reservation,
    ReservationConfigError, Reservations, Truncated,
};
use tier_core::check_dns1123_subdomain;
use tier_core::{ClaimError, PriorityClaims, TierLister, TierSpec, TierWriter, WriteError};

use crate::readiness::{ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, Gate, Readiness, TIER_CACHE_SYNCED};

/// The path of the webhook.
pub const PATH: &str = "/validate/tier";

/// The largest AdmissionReview body the webhook reads: 1 MiB, answered `413` beyond.
///
/// A review of a Tier is a few KiB (about 1.5 KiB for a CREATE, twice that for an UPDATE, which
/// carries `object` and `oldObject`; each `managedFields` entry adds a few hundred bytes). The
/// API server caps an object's annotations at 256 KiB in all, so an UPDATE of two maximally
/// annotated copies is 512 KiB; 1 MiB leaves as much again for `managedFields`, a long
/// description and the envelope. kube-apiserver's own cap (3 MiB for any request body) would let
/// one connection hold three times as much for nothing a Tier needs.
pub const MAX_REVIEW_BYTES: usize = 1 << 20;

/// The longest `request.uid` accepted (kube-apiserver sends a 36-byte UUID); a longer one is
/// refused with HTTP 400, so a response never echoes more than this.
pub const MAX_UID_BYTES: usize = 128;

/// Log lines for denials, refusals and unexpected kinds allowed at once.
pub const LOG_BURST: u64 = 20;

/// After [`LOG_BURST`], one more log line per this period; the rest are counted.
pub const LOG_REFILL: Duration = Duration::from_secs(1);

/// The longest caller-controlled message (a decoding error quoting the body) shown in full.
const MAX_DETAIL_BYTES: usize = 512;

/// The message of the denial sent before the Tier cache has synced.
pub const NOT_SYNCED: &str = "tier cache not synced yet; retry shortly";

/// The refusal of a Tier UPDATE changing a priority while the controller identity is unknown
/// ([`Webhook::identity_pending`]).
pub const IDENTITY_PENDING: &str = "tierd does not know its own identity yet (SelfSubjectReview \
                                    pending), so who may change a priority is unknown; retry \
                                    shortly";

/// The message of the DELETE denial sent before both policy caches have synced.
pub const POLICIES_NOT_SYNCED: &str = "Antrea policy caches not synced yet, so whether a policy \
                                       still references this Tier is unknown; retry shortly";

/// A body that is not a reviewable AdmissionReview: answered with HTTP 400 and no review, since
/// there is no uid to echo. Not retryable: the caller must send a valid review. Every part the
/// caller wrote is shown [`Truncated`].
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not JSON of an AdmissionReview.
    #[error(
        "malformed AdmissionReview: {}; send an admission.k8s.io/v1 AdmissionReview",
        truncated_error(.0)
    )]
    Malformed(#[source] serde_json::Error),
    /// Another apiVersion or kind than `admission.k8s.io/v1` `AdmissionReview`.
    #[error(
        "unsupported {} {}; configure the webhook with admissionReviewVersions: [v1]",
        Truncated::new(kind),
        Truncated::new(api_version)
    )]
    Unsupported {
        /// The apiVersion sent.
        api_version: String,
        /// The kind sent.
        kind: String,
    },
    /// The review has no `request`.
    #[error("the AdmissionReview has no request; send one with request.uid and request.operation")]
    NoRequest,
    /// `request.uid` is longer than [`MAX_UID_BYTES`].
    #[error(
        "request.uid is {len} bytes long, over the {MAX_UID_BYTES} a response may echo; \
         kube-apiserver sends a UUID"
    )]
    UidTooLong {
        /// Its length in bytes.
        len: usize,
    },
}

fn truncated_error(error: &serde_json::Error) -> String {
    Truncated::with_max(&error.to_string(), MAX_DETAIL_BYTES).to_string()
}

impl IntoResponse for ReviewError {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, format!("{self}\n")).into_response()
    }
}

/// The two policy caches a DELETE reads: Antrea ClusterNetworkPolicies and Antrea
/// NetworkPolicies, each indexed by raw `spec.tier` (in tierd: `tier_kube::policies::PolicyCache`).
#[derive(Clone)]
pub struct PolicyReferences {
    /// `clusternetworkpolicies.crd.antrea.io`.
    pub cluster_network_policies: Arc<dyn ReferenceIndex>,
    /// `networkpolicies.crd.antrea.io`, every namespace.
    pub network_policies: Arc<dyn ReferenceIndex>,
}

impl fmt::Debug for PolicyReferences {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyReferences").finish_non_exhaustive()
    }
}

impl PolicyReferences {
    /// Both caches.
    pub fn new(
        cluster_network_policies: Arc<dyn ReferenceIndex>,
        network_policies: Arc<dyn ReferenceIndex>,
    ) -> Self {
        Self {
            cluster_network_policies,
            network_policies,
        }
    }

    /// How many policies of each kind name `tier`; `None` while either cache is unsynced.
    pub fn references(&self, tier: &str) -> Option<References> {
        Some(References {
            cluster_network_policies: self.cluster_network_policies.references(tier)?,
            network_policies: self.network_policies.references(tier)?,
        })
    }
}

type Now = Arc<dyn Fn() -> Instant + Send + Sync>;

/// A [`Reservations`] table shared by every review of one process and by its own writer
/// ([`ReservingWriter`]); see the [module docs](self#reservations). Cheap to clone; clones share
/// one table and one clock (the webhook's log budget reads it too).
#[derive(Clone)]
pub struct ReservationTable {
    table: Arc<Mutex<Reservations>>,
    now: Now,
}

impl fmt::Debug for ReservationTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReservationTable")
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}

impl Default for ReservationTable {
    /// A table with [`Reservations::DEFAULT_TTL`], on tokio's clock.
    fn default() -> Self {
        Self::from_table(Reservations::default(), tokio_now)
    }
}

fn tokio_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl ReservationTable {
    /// A table whose reservations last `ttl`, on tokio's clock (virtual under a paused clock).
    ///
    /// # Errors
    ///
    /// [`ReservationConfigError`] when `ttl` is zero or over [`Reservations::MAX_TTL`].
    pub fn new(ttl: Duration) -> Result<Self, ReservationConfigError> {
        Self::with_clock(ttl, tokio_now)
    }

    /// A table whose reservations last `ttl`, reading time from `now`.
    ///
    /// # Errors
    ///
    /// [`ReservationConfigError`] when `ttl` is zero or over [`Reservations::MAX_TTL`].
    pub fn with_clock(
        ttl: Duration,
        now: impl Fn() -> Instant + Send + Sync + 'static,
    ) -> Result<Self, ReservationConfigError> {
        Ok(Self::from_table(Reservations::new(ttl)?, now))
    }

    fn from_table(table: Reservations, now: impl Fn() -> Instant + Send + Sync + 'static) -> Self {
        Self {
            table: Arc::new(Mutex::new(table)),
            now: Arc::new(now),
        }
    }

    /// Marks `priority` as taken by `name` at once (a write of this process known to have
    /// succeeded).
    pub fn reserve(&self, name: &str, priority: i64) {
        let now = self.now();
        self.lock().reserve(name, priority, now);
    }

    /// The reservations held (including lapsed ones not yet pruned by a review).
    pub fn held(&self) -> Vec<Reservation> {
        self.lock().held().to_vec()
    }

    fn now(&self) -> Instant {
        (self.now)()
    }

    /// Reviews `request` (a CREATE: UPDATE and DELETE reviews do not need the table) against
    /// `existing` and the reservations, reserving what it admits unless `dry_run`. Serialized:
    /// two reviews never interleave.
    fn review<'a>(
        &self,
        policy: &AdmissionPolicy,
        request: &Request<'_>,
        existing: impl IntoIterator<Item = (&'a str, i64)>,
        dry_run: bool,
    ) -> Result<(), Denial> {
        let now = self.now();
        // Read the cache before taking the lock, so that reviews hold it as briefly as they can.
        let existing: Vec<(&str, i64)> = existing.into_iter().collect();
        let mut table = self.lock();
        if dry_run {
            // At most one entry per priority: a cheap copy.
            return table.clone().review(policy, request, existing, now);
        }
        table.review(policy, request, existing, now)
    }

    /// Drops the reservation an admitted CREATE review of `name` made at `priority` (its claim
    /// failed after all).
    fn release(&self, name: &str, priority: i64) {
        self.lock().release(name, priority);
    }

    /// Drops the reservations that lapsed and those `tiers` (the cache) shows, without copying
    /// the cache (see [`Reservations::settle`]). UPDATE and DELETE reviews call it: a Tier
    /// created and then deleted or moved must not keep its priority reserved until the TTL.
    fn settle(&self, tiers: &std::collections::BTreeMap<String, tier_core::ObservedTier>) {
        let now = self.now();
        let mut table = self.lock();
        if !table.held().is_empty() {
            table.settle(now, |name| tiers.get(name).map(|t| t.priority));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Reservations> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A token bucket for log lines: [`LOG_BURST`] at once, then one per [`LOG_REFILL`], counting
/// what it turns away. Pure: time comes in as values.
#[derive(Debug)]
pub(crate) struct LogBudget {
    tokens: u64,
    refilled: Option<Instant>,
    suppressed: u64,
}

impl LogBudget {
    pub(crate) const fn new() -> Self {
        Self {
            tokens: LOG_BURST,
            refilled: None,
            suppressed: 0,
        }
    }

    /// `Some(n)` when a line may be logged at `now` (`n` lines were suppressed since the last
    /// one), `None` when it must not (it is counted).
    pub(crate) fn take(&mut self, now: Instant) -> Option<u64> {
        let last = *self.refilled.get_or_insert(now);
        let periods = now.saturating_duration_since(last).as_nanos() / LOG_REFILL.as_nanos();
        if periods > 0 {
            let periods = u64::try_from(periods).unwrap_or(u64::MAX);
            self.tokens = self.tokens.saturating_add(periods).min(LOG_BURST);
            let advance = u32::try_from(periods)
                .ok()
                .and_then(|p| LOG_REFILL.checked_mul(p))
                .and_then(|d| last.checked_add(d));
            self.refilled = Some(advance.unwrap_or(now));
        }
        if self.tokens == 0 {
            self.suppressed = self.suppressed.saturating_add(1);
            return None;
        }
        self.tokens -= 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// A [`TierWriter`] decorator that records every successful create or update in a
/// [`ReservationTable`], so this process's webhook treats the priority as taken before its
/// cache shows the write; with [`claiming`](Self::claiming), each write first claims its
/// priority across replicas, as the webhook's CREATE reviews do.
#[derive(Clone)]
pub struct ReservingWriter<W> {
    inner: W,
    table: ReservationTable,
    claims: Option<Arc<dyn PriorityClaims>>,
}

impl<W: fmt::Debug> fmt::Debug for ReservingWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReservingWriter")
            .field("inner", &self.inner)
            .field("table", &self.table)
            .field("claiming", &self.claims.is_some())
            .finish()
    }
}

impl<W> ReservingWriter<W> {
    /// Wraps `inner`, recording into `table`.
    pub fn new(inner: W, table: ReservationTable) -> Self {
        Self {
            inner,
            table,
            claims: None,
        }
    }

    /// Claims each write's priority through `claims` before sending it (share the port with
    /// the webhook's [`Webhook::claims`]). Another Tier's claim fails the write as
    /// [`Denied`](tier_core::ErrorClass::Denied) without sending it (the core retries after a
    /// backoff, and the claim lapses within its TTL); a claim that could not be made fails it
    /// with the store's error class (transient, forbidden, ...).
    pub fn claiming(mut self, claims: Arc<dyn PriorityClaims>) -> Self {
        self.claims = Some(claims);
        self
    }

    async fn claim(&self, tier: &TierSpec) -> Result<(), WriteError> {
        let Some(claims) = &self.claims else {
            return Ok(());
        };
        claims
            .claim(&tier.name, tier.priority)
            .await
            .map_err(|error| match error {
                ClaimError::Taken(Denial(message)) => WriteError::denied(message),
                ClaimError::Unavailable(error) => error,
            })
    }
}

#[async_trait]
impl<W: TierWriter> TierWriter for ReservingWriter<W> {
    async fn create(&self, tier: &TierSpec) -> Result<(), WriteError> {
        self.claim(tier).await?;
        self.inner.create(tier).await?;
        self.table.reserve(&tier.name, tier.priority);
        Ok(())
    }

    async fn update(&self, tier: &TierSpec, resource_version: &str) -> Result<(), WriteError> {
        self.claim(tier).await?;
        self.inner.update(tier, resource_version).await?;
        self.table.reserve(&tier.name, tier.priority);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The review as read: exactly the fields the rules use, strings borrowed from the body where
// they have no escapes; every other field is skipped without being built.

/// A string borrowed from the body when it can be.
#[derive(Deserialize)]
#[serde(transparent)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

#[derive(Deserialize)]
struct ReviewIn<'a> {
    #[serde(rename = "apiVersion", borrow)]
    api_version: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    request: Option<RequestIn<'a>>,
}

#[derive(Deserialize)]
struct RequestIn<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
    #[serde(borrow)]
    kind: KindIn<'a>,
    #[serde(default, borrow)]
    name: Cow<'a, str>,
    operation: OperationIn,
    #[serde(rename = "userInfo", borrow)]
    user_info: UserIn<'a>,
    #[serde(default, borrow)]
    object: Option<TierIn<'a>>,
    #[serde(rename = "oldObject", default, borrow)]
    old_object: Option<TierIn<'a>>,
    #[serde(rename = "dryRun", default)]
    dry_run: Option<bool>,
}

#[derive(Deserialize)]
struct KindIn<'a> {
    #[serde(borrow)]
    group: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
enum OperationIn {
    Create,
    Update,
    Delete,
    Connect,
}

#[derive(Deserialize)]
struct UserIn<'a> {
    #[serde(default, borrow)]
    username: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct TierIn<'a> {
    #[serde(default, borrow)]
    metadata: Option<MetaIn<'a>>,
    #[serde(default)]
    spec: Option<SpecIn>,
}

#[derive(Deserialize)]
struct MetaIn<'a> {
    #[serde(default, borrow)]
    name: Option<Text<'a>>,
}

/// `spec` of any JSON type: `priority` is what `serde_json::Value::as_i64` makes of the last
/// `priority` key of an object (an integer that fits an `i64`), else none.
#[derive(Default)]
struct SpecIn {
    priority: Option<i64>,
}

impl<'de> Deserialize<'de> for SpecIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SpecVisitor;
        impl<'de> Visitor<'de> for SpecVisitor {
            type Value = SpecIn;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Tier spec")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SpecIn, A::Error> {
                let mut priority = None;
                while let Some(IsPriority(is_priority)) = map.next_key()? {
                    if is_priority {
                        priority = map.next_value::<AnyInt>()?.0;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(SpecIn { priority })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<SpecIn, A::Error> {
                IgnoredAny.visit_seq(seq)?;
                Ok(SpecIn::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<SpecIn, E> {
                Ok(SpecIn::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<SpecIn, E> {
                Ok(SpecIn::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<SpecIn, E> {
                Ok(SpecIn::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<SpecIn, E> {
                Ok(SpecIn::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<SpecIn, E> {
                Ok(SpecIn::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<SpecIn, E> {
                Ok(SpecIn::default())
            }
        }
        deserializer.deserialize_any(SpecVisitor)
    }
}

/// A map key: whether it is `priority`.
struct IsPriority(bool);

impl<'de> Deserialize<'de> for IsPriority {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = IsPriority;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<IsPriority, E> {
                Ok(IsPriority(key == "priority"))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Any JSON value; `Some` only for an integer that fits an `i64` (as `Value::as_i64`).
struct AnyInt(Option<i64>);

impl<'de> Deserialize<'de> for AnyInt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IntVisitor;
        impl<'de> Visitor<'de> for IntVisitor {
            type Value = AnyInt;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<AnyInt, E> {
                Ok(AnyInt(Some(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<AnyInt, E> {
                Ok(AnyInt(i64::try_from(v).ok()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<AnyInt, E> {
                Ok(AnyInt(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<AnyInt, E> {
                Ok(AnyInt(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<AnyInt, E> {
                Ok(AnyInt(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<AnyInt, E> {
                Ok(AnyInt(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<AnyInt, A::Error> {
                IgnoredAny.visit_seq(seq)?;
                Ok(AnyInt(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<AnyInt, A::Error> {
                IgnoredAny.visit_map(map)?;
                Ok(AnyInt(None))
            }
        }
        deserializer.deserialize_any(IntVisitor)
    }
}

impl RequestIn<'_> {
    fn user(&self) -> &str {
        self.user_info.username.as_ref().map_or("", |u| &u.0)
    }

    /// The Tier's name: the request's, else the object's (on a CREATE with `generateName`
    /// kube-apiserver sends the generated name in the object only).
    fn tier_name(&self) -> &str {
        if !self.name.is_empty() {
            return &self.name;
        }
        self.object
            .as_ref()
            .or(self.old_object.as_ref())
            .and_then(|o| o.metadata.as_ref())
            .and_then(|m| m.name.as_ref())
            .map_or("", |n| &n.0)
    }
}

// ---------------------------------------------------------------------------------------------
// The response as written: kube-core's `AdmissionReview` fields and omissions, borrowed.

/// The length of an allowed response without its uid, to size the buffer once.
const ALLOWED_LEN: usize =
    r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"","allowed":true,"status":{}}}"#
        .len();

#[derive(Serialize)]
struct ReviewOut<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    status: StatusOut<'a>,
}

/// kube-core's `Status` as it serializes: `status`, `code`, `message`, `reason`, `details`,
/// each omitted when empty or zero.
#[derive(Clone, Copy, Default, Serialize)]
struct StatusOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
    #[serde(skip_serializing_if = "is_zero")]
    code: u16,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<DetailsOut>,
}

#[derive(Clone, Copy, Serialize)]
struct DetailsOut {
    #[serde(rename = "retryAfterSeconds")]
    retry_after_seconds: u32,
}

/// The JSON of the response review echoing `uid` with `verdict`.
fn encode(uid: &str, verdict: &Verdict) -> Result<Vec<u8>, serde_json::Error> {
    let status = match verdict {
        // The answer to nearly every review: written directly, only the uid through serde_json
        // (escaped as it escapes it), the rest as `ReviewOut` writes it.
        Verdict::Allow => return encode_allowed(uid),
        Verdict::Deny(refusal) => refusal.status_out(),
    };
    let review = ReviewOut {
        api_version: META_API_VERSION_V1,
        kind: META_KIND,
        response: ResponseOut {
            uid,
            allowed: false,
            status,
        },
    };
    let mut json = Vec::with_capacity(ALLOWED_LEN + uid.len() + status.message.len() + 64);
    serde_json::to_writer(&mut json, &review)?;
    Ok(json)
}

/// [`encode`] of an allowed review: the bytes of `ReviewOut` with `allowed: true` and an empty
/// status (the property test in `tests/fuzz_webhook.rs` holds both to kube-core's bytes).
fn encode_allowed(uid: &str) -> Result<Vec<u8>, serde_json::Error> {
    let mut json = Vec::with_capacity(ALLOWED_LEN + uid.len() + 8);
    json.extend_from_slice(br#"{"apiVersion":""#);
    json.extend_from_slice(META_API_VERSION_V1.as_bytes());
    json.extend_from_slice(br#"","kind":""#);
    json.extend_from_slice(META_KIND.as_bytes());
    json.extend_from_slice(br#"","response":{"uid":"#);
    serde_json::to_writer(&mut json, uid)?;
    json.extend_from_slice(br#","allowed":true,"status":{}}}"#);
    Ok(json)
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_zero(code: &u16) -> bool {
    *code == 0
}

/// The Tier validating webhook: the Tier cache, the policy caches, the admission policy (which
/// knows the desired set, [`AdmissionPolicy::desire`]), the reservations, the log budget and
/// the readiness gates.
#[derive(Clone)]
pub struct Webhook {
    lister: Arc<dyn TierLister>,
    references: Option<PolicyReferences>,
    policy: Arc<AdmissionPolicy>,
    reservations: ReservationTable,
    log: Arc<Mutex<LogBudget>>,
    gate: Gate,
    delete_gate: Gate,
    identity_pending: bool,
    claims: Option<Arc<dyn PriorityClaims>>,
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("policy", &self.policy)
            .field("gate", &self.gate)
            .field("delete_gate", &self.delete_gate)
            .field("claiming", &self.claims.is_some())
            .finish_non_exhaustive()
    }
}

/// What the webhook concluded about one request.
enum Verdict {
    Allow,
    Deny(Refusal),
}

/// A denial, before it becomes the response's `status`.
struct Refusal {
    message: String,
    reason: &'static str,
    code: u16,
    retry_after_seconds: u32,
}

impl Refusal {
    /// One of the rules: message only, as Antrea sends it (400 at the client).
    fn rule(Denial(message): Denial) -> Self {
        Self {
            message,
            reason: "",
            code: 0,
            retry_after_seconds: 0,
        }
    }

    /// A cache is not synced: transient, retry after a second.
    fn not_synced(message: &str) -> Self {
        Self::unavailable(message.to_owned())
    }

    /// Something the review needs is unavailable (a cache, a claim): retry after a second.
    fn unavailable(message: String) -> Self {
        Self {
            message,
            reason: "ServiceUnavailable",
            code: 503,
            retry_after_seconds: 1,
        }
    }

    /// The request lacks what a review needs.
    fn bad_request(message: String) -> Self {
        Self {
            message,
            reason: "BadRequest",
            code: 400,
            retry_after_seconds: 0,
        }
    }

    /// The `status` of the response, borrowed (the fields and omissions of kube-core's
    /// [`ApiStatus`] as [`into_status`](Self::into_status) builds it).
    fn status_out(&self) -> StatusOut<'_> {
        StatusOut {
            status: Some("Failure"),
            code: self.code,
            message: &self.message,
            reason: self.reason,
            details: (self.retry_after_seconds > 0).then_some(DetailsOut {
                retry_after_seconds: self.retry_after_seconds,
            }),
        }
    }

    fn into_status(self) -> ApiStatus {
        let mut status = ApiStatus::failure(&self.message, self.reason).with_code(self.code);
        if self.retry_after_seconds > 0 {
            status.details = Some(StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: self.retry_after_seconds,
            });
        }
        status
    }
}

impl Webhook {
    /// The readiness checks CREATE and UPDATE depend on: the Tier cache only.
    pub const REQUIRES: &'static [&'static str] = &[TIER_CACHE_SYNCED];

    /// The readiness checks DELETE depends on: the Tier cache and both policy caches.
    pub const DELETE_REQUIRES: &'static [&'static str] =
        &[TIER_CACHE_SYNCED, ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED];

    /// A webhook reviewing against `lister`'s snapshot with `policy`, each operation gated on
    /// its checks in `readiness` ([`REQUIRES`](Self::REQUIRES),
    /// [`DELETE_REQUIRES`](Self::DELETE_REQUIRES)), with its own [`ReservationTable`].
    ///
    /// Until [`policy_references`](Self::policy_references) gives it the policy caches, every
    /// DELETE is refused as not synced (it cannot know whether a policy uses the Tier).
    pub fn new(
        lister: Arc<dyn TierLister>,
        policy: AdmissionPolicy,
        readiness: &Readiness,
    ) -> Self {
        Self {
            lister,
            references: None,
            policy: Arc::new(policy),
            reservations: ReservationTable::default(),
            log: Arc::new(Mutex::new(LogBudget::new())),
            gate: readiness.gate(Self::REQUIRES),
            delete_gate: readiness.gate(Self::DELETE_REQUIRES),
            identity_pending: false,
            claims: None,
        }
    }

    /// Marks the policy's controller user as not known yet: every Tier UPDATE that changes a
    /// priority gets a retryable refusal ([`IDENTITY_PENDING`], code 503, retry after 1 s)
    /// instead of a verdict on a user nobody knows. Other reviews are unaffected.
    pub fn identity_pending(mut self) -> Self {
        self.identity_pending = true;
        self
    }

    /// The policy caches a DELETE reads.
    pub fn policy_references(mut self, references: PolicyReferences) -> Self {
        self.references = Some(references);
        self
    }

    /// Reviews through `table` (share it with a [`ReservingWriter`] around this process's
    /// writer); the log budget reads its clock too.
    pub fn reservations(mut self, table: ReservationTable) -> Self {
        self.reservations = table;
        self
    }

    /// Claims the priority of every CREATE this replica admits through `claims`, the store all
    /// replicas share, before allowing it (see the [module docs](self#claims-across-replicas)).
    /// Give tierd's own writer the same port ([`ReservingWriter::claiming`]).
    pub fn claims(mut self, claims: Arc<dyn PriorityClaims>) -> Self {
        self.claims = Some(claims);
        self
    }

    /// The checks `operation` depends on.
    pub fn requires(operation: &Operation) -> &'static [&'static str] {
        match operation {
            Operation::Delete => Self::DELETE_REQUIRES,
            Operation::Create | Operation::Update => Self::REQUIRES,
            Operation::Connect => &[],
        }
    }

    /// The route `POST /validate/tier`, reading at most [`MAX_REVIEW_BYTES`] of body (`413`
    /// beyond).
    pub fn routes(self) -> Router {
        Router::new()
            // The handler bounds the body itself (`read_review`): no body-limit layer, whose
            // extra service and request extension every review would pay for.
            .route(PATH, post(handle))
            // One reference count per request, not one per shared part.
            .with_state(Arc::new(self))
    }

    /// Reviews the JSON `body` of an AdmissionReview request and returns the response review,
    /// which echoes only the request's uid.
    ///
    /// # Errors
    ///
    /// [`ReviewError`] when the body is not an `admission.k8s.io/v1` AdmissionReview with a
    /// request whose uid is at most [`MAX_UID_BYTES`].
    pub async fn review_json(
        &self,
        body: &[u8],
    ) -> Result<AdmissionReview<DynamicObject>, ReviewError> {
        let (uid, verdict) = self.decide(body).await?;
        let mut response = AdmissionResponse::invalid("");
        response.uid = uid.into_owned();
        match verdict {
            Verdict::Allow => {
                response.allowed = true;
                response.result = ApiStatus::default();
            }
            Verdict::Deny(refusal) => {
                response.allowed = false;
                response.result = refusal.into_status();
            }
        }
        Ok(response.into_review())
    }

    /// The HTTP answer to an AdmissionReview `body`: `200` with the JSON of the response
    /// review (the review [`review_json`](Self::review_json) returns, encoded as kube-core
    /// encodes it, but written straight from borrowed fields), or `400` with the
    /// [`ReviewError`]. This is the route's handler.
    pub async fn respond(&self, body: &[u8]) -> Response {
        let (uid, verdict) = match self.decide(body).await {
            Ok(decided) => decided,
            Err(error) => return error.into_response(),
        };
        match encode(&uid, &verdict) {
            Ok(json) => {
                let mut response = Response::new(Body::from(json));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
            Err(error) => {
                tracing::error!(%error, "encoding the admission response failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "encoding the admission response failed; see tierd's log\n",
                )
                    .into_response()
            }
        }
    }

    /// Decodes and reviews `body`: the request's uid (borrowed from the body when it can be)
    /// and the verdict, logged as the budget allows. A body that is no reviewable review is
    /// logged (within the budget) and returned as the error.
    async fn decide<'b>(&self, body: &'b [u8]) -> Result<(Cow<'b, str>, Verdict), ReviewError> {
        let result = self.decode_and_review(body).await;
        if let Err(error) = &result {
            self.limited(|| tracing::warn!(error = %error, "refused a malformed admission review"));
        }
        result
    }

    async fn decode_and_review<'b>(
        &self,
        body: &'b [u8],
    ) -> Result<(Cow<'b, str>, Verdict), ReviewError> {
        // One UTF-8 check of the whole body instead of one per string: serde_json then reads
        // strings without checking them again (most of the decoding's cost is its many short
        // strings). A body that is not UTF-8 is read as bytes, for serde_json's own error (or
        // its verdict on invalid bytes inside a skipped value).
        let review: Result<ReviewIn<'b>, _> = match std::str::from_utf8(body) {
            Ok(text) => serde_json::from_str(text),
            Err(_) => serde_json::from_slice(body),
        };
        let review = review.map_err(ReviewError::Malformed)?;
        if review.api_version != META_API_VERSION_V1 || review.kind != META_KIND {
            return Err(ReviewError::Unsupported {
                api_version: Truncated::new(&review.api_version).to_string(),
                kind: Truncated::new(&review.kind).to_string(),
            });
        }
        let request = review.request.ok_or(ReviewError::NoRequest)?;
        if request.uid.len() > MAX_UID_BYTES {
            return Err(ReviewError::UidTooLong {
                len: request.uid.len(),
            });
        }
        let mut verdict = self.verdict(&request);
        if let (Verdict::Allow, Some((claims, priority))) = (&verdict, self.claim_of(&request)) {
            verdict = self.claim(claims, request.tier_name(), priority).await;
        }
        match &verdict {
            Verdict::Allow => {
                tracing::debug!(
                    uid = %Truncated::new(&request.uid),
                    operation = ?request.operation,
                    name = %Truncated::new(request.tier_name()),
                    user = %Truncated::new(request.user()),
                    "allowed"
                );
            }
            Verdict::Deny(refusal) => {
                self.limited(|| {
                    tracing::info!(
                        uid = %Truncated::new(&request.uid),
                        operation = ?request.operation,
                        name = %Truncated::new(request.tier_name()),
                        user = %Truncated::new(request.user()),
                        message = %Truncated::with_max(&refusal.message, MAX_DETAIL_BYTES),
                        "denied"
                    );
                });
            }
        }
        Ok((request.uid, verdict))
    }

    /// Runs `log` if the log budget allows a line now, first saying how many were suppressed.
    fn limited(&self, log: impl FnOnce()) {
        let now = self.reservations.now();
        let allowed = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(now);
        match allowed {
            None => {}
            Some(0) => log(),
            Some(suppressed) => {
                tracing::info!(
                    suppressed,
                    "{suppressed} more admission denials and refusals were not logged (at most \
                     {LOG_BURST} at once, then one per {LOG_REFILL:?})"
                );
                log();
            }
        }
    }

    /// The claims port and the priority, when `request` is a Tier CREATE that must claim once
    /// this replica admits it (not a dry run).
    fn claim_of(&self, request: &RequestIn<'_>) -> Option<(&Arc<dyn PriorityClaims>, i64)> {
        let claims = self.claims.as_ref()?;
        let claimed = request.operation == OperationIn::Create
            && !request.dry_run.unwrap_or(false)
            && request.kind.group == "crd.antrea.io"
            && request.kind.kind == "Tier";
        let priority = priority_of(request.object.as_ref(), "object", "").ok()?;
        claimed.then_some((claims, priority))
    }

    /// Claims `priority` for `name` (a CREATE this replica admitted): allowed once claimed;
    /// denied when another Tier holds it, retryably when the claim could not be made. A denied
    /// review releases the reservation it made here.
    async fn claim(&self, claims: &Arc<dyn PriorityClaims>, name: &str, priority: i64) -> Verdict {
        let refusal = match claims.claim(name, priority).await {
            Ok(()) => return Verdict::Allow,
            Err(ClaimError::Taken(denial)) => Refusal::rule(denial),
            Err(ClaimError::Unavailable(error)) => {
                tracing::warn!(
                    name = %Truncated::new(name),
                    priority,
                    %error,
                    "could not claim a Tier's priority across replicas; the create is refused \
                     (retryably) until the claim can be made"
                );
                Refusal::unavailable(format!(
                    "tier {name} priority {priority} could not be claimed across tierd \
                     replicas, so whether another replica admitted a Tier there is unknown; \
                     retry shortly ({})",
                    Truncated::with_max(&error.message, MAX_DETAIL_BYTES)
                ))
            }
        };
        self.reservations.release(name, priority);
        Verdict::Deny(refusal)
    }

    fn verdict(&self, request: &RequestIn<'_>) -> Verdict {
        if request.kind.group != "crd.antrea.io" || request.kind.kind != "Tier" {
            self.limited(|| {
                tracing::warn!(
                    group = %Truncated::new(&request.kind.group),
                    kind = %Truncated::new(&request.kind.kind),
                    "the webhook received another kind than Tier; allowing it, check the \
                     ValidatingWebhookConfiguration rules"
                );
            });
            return Verdict::Allow;
        }
        if request.operation == OperationIn::Connect {
            return Verdict::Allow;
        }
        let name = request.tier_name();
        if let Err(why) = check_dns1123_subdomain(name) {
            return Verdict::Deny(Refusal::bad_request(format!(
                "cannot review Tier {}: the name is not a valid DNS-1123 subdomain: {why}",
                Truncated::new(name)
            )));
        }
        let gate = match request.operation {
            OperationIn::Delete => &self.delete_gate,
            _ => &self.gate,
        };
        if let Err(not_ready) = gate.check() {
            tracing::debug!(uid = %Truncated::new(&request.uid), %not_ready, "review before its caches synced");
            let tier_cache = not_ready.failed.iter().any(|r| r.name == TIER_CACHE_SYNCED);
            return Verdict::Deny(Refusal::not_synced(if tier_cache {
                NOT_SYNCED
            } else {
                POLICIES_NOT_SYNCED
            }));
        }
        // Never read a cache that has not synced, whatever the check says.
        let Some(tiers) = self.lister.snapshot().tiers else {
            return Verdict::Deny(Refusal::not_synced(NOT_SYNCED));
        };
        let existing = tiers.values().map(|t| (t.name.as_str(), t.priority));
        let outcome = match request.operation {
            OperationIn::Create => {
                let dry_run = request.dry_run.unwrap_or(false);
                let priority = match priority_of(request.object.as_ref(), "object", name) {
                    Ok(p) => p,
                    Err(refusal) => return Verdict::Deny(refusal),
                };
                let create = Request::Create { name, priority };
                self.reservations
                    .review(&self.policy, &create, existing, dry_run)
            }
            OperationIn::Update => {
                let old_priority = match priority_of(request.old_object.as_ref(), "oldObject", name)
                {
                    Ok(p) => p,
                    Err(refusal) => return Verdict::Deny(refusal),
                };
                let new_priority = match priority_of(request.object.as_ref(), "object", name) {
                    Ok(p) => p,
                    Err(refusal) => return Verdict::Deny(refusal),
                };
                if self.identity_pending && old_priority != new_priority {
                    return Verdict::Deny(Refusal::not_synced(IDENTITY_PENDING));
                }
                let update = Request::Update {
                    name,
                    old_priority,
                    new_priority,
                    user: request.user(),
                };
                // UPDATE and DELETE reviews add nothing to the reservations and read none (see
                // `Reservations`); they only settle what the cache shows, before it may go.
                self.reservations.settle(&tiers);
                admission::review(&self.policy, &update, existing)
            }
            OperationIn::Delete | OperationIn::Connect => {
                let Some(references) = self.references.as_ref().and_then(|r| r.references(name))
                else {
                    return Verdict::Deny(Refusal::not_synced(POLICIES_NOT_SYNCED));
                };
                let delete = Request::Delete { name, references };
                self.reservations.settle(&tiers);
                admission::review(&self.policy, &delete, existing)
            }
        };
        match outcome {
            Ok(()) => Verdict::Allow,
            Err(denial) => Verdict::Deny(Refusal::rule(denial)),
        }
    }
}

/// `spec.priority` of `object`, or a denial saying what is missing.
fn priority_of(object: Option<&TierIn<'_>>, field: &str, name: &str) -> Result<i64, Refusal> {
    let Some(object) = object else {
        return Err(Refusal::bad_request(format!(
            "cannot review Tier {name}: the request has no {field}"
        )));
    };
    object
        .spec
        .as_ref()
        .and_then(|spec| spec.priority)
        .ok_or_else(|| {
            Refusal::bad_request(format!(
                "cannot review Tier {name}: {field}.spec.priority is missing or not an integer"
            ))
        })
}

async fn handle(State(webhook): State<Arc<Webhook>>, body: Body) -> Response {
    match read_review(body).await {
        Ok(body) => webhook.respond(&body).await,
        Err(refused) => refused,
    }
}

/// The body of an AdmissionReview request, at most [`MAX_REVIEW_BYTES`] of it: the answer is
/// `413` as soon as more arrives, `400` when the body cannot be read. A body of one chunk (a
/// review of a few KiB usually is) is not copied. For a route of one's own around
/// [`Webhook::respond`].
///
/// # Errors
///
/// The `413` or `400` response to send instead of a review.
pub async fn read_review(body: Body) -> Result<Bytes, Response> {
    let mut chunks = body.into_data_stream();
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    let mut len = 0_usize;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|error| {
            (
                StatusCode::BAD_REQUEST,
                format!("reading the AdmissionReview failed: {error}\n"),
            )
                .into_response()
        })?;
        len = len.saturating_add(chunk.len());
        if len > MAX_REVIEW_BYTES {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the AdmissionReview is larger than {MAX_REVIEW_BYTES} bytes, the limit for \
                     a review of a Tier; kube-apiserver sends a few KiB\n"
                ),
            )
                .into_response());
        }
        match first.take() {
            None if joined.is_empty() => first = Some(chunk),
            None => joined.extend_from_slice(&chunk),
            Some(held) => {
                joined.reserve(held.len() + chunk.len());
                joined.extend_from_slice(&held);
                joined.extend_from_slice(&chunk);
            }
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(joined)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_budget_allows_a_burst_then_one_per_period_and_counts_the_rest() {
        let mut budget = LogBudget::new();
        let t0 = Instant::now();
        for _ in 0..LOG_BURST {
            assert_eq!(budget.take(t0), Some(0));
        }
        for _ in 0..1000 {
            assert_eq!(budget.take(t0 + Duration::from_millis(999)), None);
        }
        // One period later: one line, which says 1000 were suppressed.
        assert_eq!(budget.take(t0 + LOG_REFILL), Some(1000));
        assert_eq!(budget.take(t0 + LOG_REFILL), None);
        // A long quiet time refills the burst, no more.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..LOG_BURST {
            assert!(budget.take(later).is_some());
        }
        assert_eq!(budget.take(later), None);
        // A clock that goes backwards or jumps far ahead does not panic.
        assert_eq!(budget.take(t0), None);
        assert!(budget.take(t0 + Duration::from_secs(1 << 50)).is_some());
    }
}
