//! `POST /validate/tier`: the Tier validating webhook (`tiervalidator.antrea.io`).
//!
//! It answers `admission.k8s.io/v1` AdmissionReviews for Tier CREATE, UPDATE and DELETE with
//! [`tier_core::admission::review`] (Antrea's rules, one shared copy) against the Tier cache, a
//! [`TierLister`]'s snapshot, and for DELETE against two policy caches ([`PolicyReferences`]).
//! Denials carry Antrea's messages word for word; kube-apiserver turns them into
//! `400 admission webhook "tiervalidator.antrea.io" denied the request: <message>`.
//!
//! | request | needs | answer |
//! |---|---|---|
//! | CREATE | [`Webhook::REQUIRES`]: `tier-cache-synced` | the 20-priority limit, reserved priorities, 220 with the `ClusterNetworkPolicy` gate, overlap with cached Tiers **and reservations** |
//! | UPDATE | [`Webhook::REQUIRES`] | only the controller user may change a priority |
//! | DELETE | [`Webhook::DELETE_REQUIRES`]: also `acnp-cache-synced`, `annp-cache-synced` | reserved names, then Tiers referenced by ClusterNetworkPolicies, then by NetworkPolicies |
//! | other operations, other kinds | nothing | allowed (the webhook is registered for Tiers only) |
//! | before its caches are synced | | denied: [`NOT_SYNCED`] or [`POLICIES_NOT_SYNCED`], code 503, `ServiceUnavailable`, retry after 1 s |
//! | not an AdmissionReview v1 | | HTTP 400 with the reason, no review |
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
//! [`ReservationTable`]: a CREATE it admits (or an UPDATE moving a Tier) holds its priority until
//! the cache shows the Tier there or the TTL passes, and reviews are serialized on the table, so
//! two creates at one priority through one tierd cannot both pass. tierd's own successful writes
//! go into the same table at once ([`ReservingWriter`]). The window that remains: with several
//! webhook replicas, each has its own table, and two creates reviewed by *different* replicas
//! within one cache-propagation delay (typically milliseconds to a second) can still both pass,
//! as with Antrea.
//!
//! ```
//! use std::sync::Arc;
//!
//! use tier_core::admission::AdmissionPolicy;
//! use tier_server::{Readiness, Webhook};
//!
//! # fn example(lister: Arc<dyn tier_core::TierLister>) {
//! let readiness = Readiness::new();
//! let policy = AdmissionPolicy::antrea("system:serviceaccount:kube-system:tierd");
//! let router: axum::Router = Webhook::new(lister, policy, &readiness).routes();
//! # let _ = router;
//! # }
//! ```

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube_core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, META_API_VERSION_V1, META_KIND, Operation,
};
use kube_core::{DynamicObject, Status as ApiStatus, response::StatusDetails};
use tier_core::admission::{
    AdmissionPolicy, Denial, ReferenceIndex, References, Request, Reservation, Reservations,
};
use tier_core::{TierLister, TierSpec, TierWriter, WriteError};

use crate::readiness::{ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, Gate, Readiness, TIER_CACHE_SYNCED};

/// The path of the webhook.
pub const PATH: &str = "/validate/tier";

/// The message of the denial sent before the Tier cache has synced.
pub const NOT_SYNCED: &str = "tier cache not synced yet; retry shortly";

/// The message of the DELETE denial sent before both policy caches have synced.
pub const POLICIES_NOT_SYNCED: &str = "Antrea policy caches not synced yet, so whether a policy \
                                       still references this Tier is unknown; retry shortly";

/// A body that is not a reviewable AdmissionReview: answered with HTTP 400 and no review, since
/// there is no uid to echo. Not retryable: the caller must send a valid review.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not JSON of an AdmissionReview.
    #[error("malformed AdmissionReview: {0}; send an admission.k8s.io/v1 AdmissionReview")]
    Malformed(#[source] serde_json::Error),
    /// Another apiVersion or kind than `admission.k8s.io/v1` `AdmissionReview`.
    #[error(
        "unsupported {kind} {api_version}; configure the webhook with admissionReviewVersions: [v1]"
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
}

impl IntoResponse for ReviewError {
    fn into_response(self) -> Response {
        tracing::warn!(error = %self, "refused a malformed admission review");
        (StatusCode::BAD_REQUEST, format!("{self}\n")).into_response()
    }
}

/// The two policy caches a DELETE reads: Antrea ClusterNetworkPolicies and Antrea
/// NetworkPolicies, each indexed by raw `spec.tier` (in tierd: `tier_kube::PolicyCache`).
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
/// one table.
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
    fn default() -> Self {
        Self::new(Reservations::DEFAULT_TTL)
    }
}

impl ReservationTable {
    /// A table whose reservations last `ttl`, on tokio's clock (virtual under a paused clock).
    pub fn new(ttl: Duration) -> Self {
        Self::with_clock(ttl, || tokio::time::Instant::now().into_std())
    }

    /// A table whose reservations last `ttl`, reading time from `now`.
    pub fn with_clock(ttl: Duration, now: impl Fn() -> Instant + Send + Sync + 'static) -> Self {
        Self {
            table: Arc::new(Mutex::new(Reservations::new(ttl))),
            now: Arc::new(now),
        }
    }

    /// Marks `priority` as taken by `name` at once (a write known to have succeeded).
    pub fn reserve(&self, name: &str, priority: i64) {
        let now = (self.now)();
        self.lock().reserve(name, priority, now);
    }

    /// The reservations held (including lapsed ones not yet pruned by a review).
    pub fn held(&self) -> Vec<Reservation> {
        self.lock().held().to_vec()
    }

    /// Reviews `request` against `existing` and the reservations, reserving what it admits
    /// unless `dry_run`. Serialized: two reviews never interleave.
    fn review<'a>(
        &self,
        policy: &AdmissionPolicy,
        request: &Request<'_>,
        existing: impl IntoIterator<Item = (&'a str, i64)>,
        dry_run: bool,
    ) -> Result<(), Denial> {
        let now = (self.now)();
        let mut table = self.lock();
        if dry_run {
            return table.clone().review(policy, request, existing, now);
        }
        table.review(policy, request, existing, now)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Reservations> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A [`TierWriter`] decorator that records every successful create or update in a
/// [`ReservationTable`], so this process's webhook treats the priority as taken before its
/// cache shows the write.
#[derive(Clone, Debug)]
pub struct ReservingWriter<W> {
    inner: W,
    table: ReservationTable,
}

impl<W> ReservingWriter<W> {
    /// Wraps `inner`, recording into `table`.
    pub fn new(inner: W, table: ReservationTable) -> Self {
        Self { inner, table }
    }
}

#[async_trait]
impl<W: TierWriter> TierWriter for ReservingWriter<W> {
    async fn create(&self, tier: &TierSpec) -> Result<(), WriteError> {
        self.inner.create(tier).await?;
        self.table.reserve(&tier.name, tier.priority);
        Ok(())
    }

    async fn update(&self, tier: &TierSpec, resource_version: &str) -> Result<(), WriteError> {
        self.inner.update(tier, resource_version).await?;
        self.table.reserve(&tier.name, tier.priority);
        Ok(())
    }
}

/// The Tier validating webhook: the Tier cache, the policy caches, Antrea's policy, the
/// reservations and the readiness gates.
#[derive(Clone)]
pub struct Webhook {
    lister: Arc<dyn TierLister>,
    references: Option<PolicyReferences>,
    policy: Arc<AdmissionPolicy>,
    reservations: ReservationTable,
    gate: Gate,
    delete_gate: Gate,
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("policy", &self.policy)
            .field("gate", &self.gate)
            .field("delete_gate", &self.delete_gate)
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
    /// One of Antrea's rules: message only, as Antrea sends it (400 at the client).
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
        Self {
            message: message.to_owned(),
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
            gate: readiness.gate(Self::REQUIRES),
            delete_gate: readiness.gate(Self::DELETE_REQUIRES),
        }
    }

    /// The policy caches a DELETE reads.
    pub fn policy_references(mut self, references: PolicyReferences) -> Self {
        self.references = Some(references);
        self
    }

    /// Reviews through `table` (share it with a [`ReservingWriter`] around this process's
    /// writer).
    pub fn reservations(mut self, table: ReservationTable) -> Self {
        self.reservations = table;
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

    /// The route `POST /validate/tier`.
    pub fn routes(self) -> Router {
        Router::new().route(PATH, post(handle)).with_state(self)
    }

    /// Reviews the JSON `body` of an AdmissionReview request and returns the response review.
    ///
    /// # Errors
    ///
    /// [`ReviewError`] when the body is not an `admission.k8s.io/v1` AdmissionReview with a
    /// request.
    pub fn review_json(&self, body: &[u8]) -> Result<AdmissionReview<DynamicObject>, ReviewError> {
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_slice(body).map_err(ReviewError::Malformed)?;
        self.review(review)
    }

    /// Reviews an AdmissionReview request and returns the response review (echoing the uid).
    ///
    /// # Errors
    ///
    /// [`ReviewError`] when it is not an `admission.k8s.io/v1` AdmissionReview with a request.
    pub fn review(
        &self,
        review: AdmissionReview<DynamicObject>,
    ) -> Result<AdmissionReview<DynamicObject>, ReviewError> {
        if review.types.api_version != META_API_VERSION_V1 || review.types.kind != META_KIND {
            return Err(ReviewError::Unsupported {
                api_version: review.types.api_version,
                kind: review.types.kind,
            });
        }
        let request: AdmissionRequest<DynamicObject> =
            review.try_into().map_err(|_| ReviewError::NoRequest)?;
        let user = request.user_info.username.as_deref().unwrap_or_default();
        let response = AdmissionResponse::from(&request);
        let response = match self.verdict(&request) {
            Verdict::Allow => {
                tracing::debug!(uid = %request.uid, operation = ?request.operation, name = %request.name, user, "allowed");
                response
            }
            Verdict::Deny(refusal) => {
                tracing::info!(uid = %request.uid, operation = ?request.operation, name = %request.name, user, message = %refusal.message, "denied");
                let mut response = response.deny(&refusal.message);
                response.result = refusal.into_status();
                response
            }
        };
        Ok(response.into_review())
    }

    fn verdict(&self, request: &AdmissionRequest<DynamicObject>) -> Verdict {
        if request.kind.group != "crd.antrea.io" || request.kind.kind != "Tier" {
            tracing::warn!(kind = ?request.kind, "the webhook received another kind than Tier; allowing it, check the ValidatingWebhookConfiguration rules");
            return Verdict::Allow;
        }
        if matches!(request.operation, Operation::Connect) {
            return Verdict::Allow;
        }
        let gate = match request.operation {
            Operation::Delete => &self.delete_gate,
            _ => &self.gate,
        };
        if let Err(not_ready) = gate.check() {
            tracing::debug!(uid = %request.uid, %not_ready, "review before its caches synced");
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
        let user = request.user_info.username.as_deref().unwrap_or_default();
        let name = tier_name(request);
        let dry_run = request.dry_run;
        let outcome = match request.operation {
            Operation::Create => {
                let priority = match priority_of(request.object.as_ref(), "object", &name) {
                    Ok(p) => p,
                    Err(refusal) => return Verdict::Deny(refusal),
                };
                let create = Request::Create {
                    name: &name,
                    priority,
                };
                self.reservations
                    .review(&self.policy, &create, existing, dry_run)
            }
            Operation::Update => {
                let old_priority =
                    match priority_of(request.old_object.as_ref(), "oldObject", &name) {
                        Ok(p) => p,
                        Err(refusal) => return Verdict::Deny(refusal),
                    };
                let new_priority = match priority_of(request.object.as_ref(), "object", &name) {
                    Ok(p) => p,
                    Err(refusal) => return Verdict::Deny(refusal),
                };
                let update = Request::Update {
                    name: &name,
                    old_priority,
                    new_priority,
                    user,
                };
                self.reservations
                    .review(&self.policy, &update, existing, dry_run)
            }
            Operation::Delete | Operation::Connect => {
                let Some(references) = self.references.as_ref().and_then(|r| r.references(&name))
                else {
                    return Verdict::Deny(Refusal::not_synced(POLICIES_NOT_SYNCED));
                };
                let delete = Request::Delete {
                    name: &name,
                    references,
                };
                self.reservations
                    .review(&self.policy, &delete, existing, dry_run)
            }
        };
        match outcome {
            Ok(()) => Verdict::Allow,
            Err(denial) => Verdict::Deny(Refusal::rule(denial)),
        }
    }
}

/// The Tier's name: the request's, else the object's (CREATE with generateName has neither).
fn tier_name(request: &AdmissionRequest<DynamicObject>) -> String {
    if !request.name.is_empty() {
        return request.name.clone();
    }
    request
        .object
        .as_ref()
        .or(request.old_object.as_ref())
        .and_then(|o| o.metadata.name.clone())
        .unwrap_or_default()
}

/// `spec.priority` of `object`, or a denial saying what is missing.
fn priority_of(object: Option<&DynamicObject>, field: &str, name: &str) -> Result<i64, Refusal> {
    let Some(object) = object else {
        return Err(Refusal::bad_request(format!(
            "cannot review Tier {name}: the request has no {field}"
        )));
    };
    object
        .data
        .get("spec")
        .and_then(|spec| spec.get("priority"))
        .and_then(serde_json::Value::as_i64)
        .ok_or_else(|| {
            Refusal::bad_request(format!(
                "cannot review Tier {name}: {field}.spec.priority is missing or not an integer"
            ))
        })
}

async fn handle(State(webhook): State<Webhook>, body: Bytes) -> Response {
    let review = match webhook.review_json(&body) {
        Ok(review) => review,
        Err(error) => return error.into_response(),
    };
    match serde_json::to_vec(&review) {
        Ok(json) => {
            let mut response = json.into_response();
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
