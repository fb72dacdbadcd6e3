//! `POST /validate/tier`: the Tier validating webhook (`tiervalidator.antrea.io`).
//!
//! It answers `admission.k8s.io/v1` AdmissionReviews for Tier CREATE, UPDATE and DELETE with
//! [`tier_core::admission::review`] (Antrea's rules, one shared copy) against the Tier cache, a
//! [`TierLister`]'s snapshot. Denials carry Antrea's messages word for word; kube-apiserver turns
//! them into `400 admission webhook "tiervalidator.antrea.io" denied the request: <message>`.
//!
//! | request | answer |
//! |---|---|
//! | CREATE | `review(Create { name, priority })` against every cached Tier (overlap, reserved, limit) |
//! | UPDATE | `review(Update { old, new, user })`: only the controller user may change a priority |
//! | DELETE | `review(Delete { name })`: the system Tiers cannot be deleted |
//! | other operations, other kinds | allowed (the webhook is registered for Tiers only) |
//! | before the cache is synced | denied: `tier cache not synced yet; retry shortly`, code 503, `ServiceUnavailable`, retry after 1 s |
//! | not an AdmissionReview v1 | HTTP 400 with the reason, no review |
//!
//! The webhook declares [`Webhook::REQUIRES`] (`tier-cache-synced`) and checks it in-band: the
//! answer must still be an AdmissionReview echoing the request's uid. The not-synced denial uses
//! code 503 so that clients (tierd's own writer included) treat it as transient and retry, while
//! a rule denial (code unset, 400 at the client) is final.
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
use std::sync::Arc;

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
use tier_core::TierLister;
use tier_core::admission::{AdmissionPolicy, Denial, Request, review};

use crate::readiness::{Gate, Readiness, TIER_CACHE_SYNCED};

/// The path of the webhook.
pub const PATH: &str = "/validate/tier";

/// The message of the denial sent before the Tier cache has synced.
pub const NOT_SYNCED: &str = "tier cache not synced yet; retry shortly";

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

/// The Tier validating webhook: the Tier cache, Antrea's policy and the readiness gate.
#[derive(Clone)]
pub struct Webhook {
    lister: Arc<dyn TierLister>,
    policy: Arc<AdmissionPolicy>,
    gate: Gate,
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("policy", &self.policy)
            .field("gate", &self.gate)
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

    /// The cache is not synced: transient, retry after a second.
    fn not_synced() -> Self {
        Self {
            message: NOT_SYNCED.to_owned(),
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
    /// The readiness checks the webhook depends on.
    pub const REQUIRES: &'static [&'static str] = &[TIER_CACHE_SYNCED];

    /// A webhook reviewing against `lister`'s snapshot with `policy`, gated on
    /// [`REQUIRES`](Self::REQUIRES) in `readiness`.
    pub fn new(
        lister: Arc<dyn TierLister>,
        policy: AdmissionPolicy,
        readiness: &Readiness,
    ) -> Self {
        Self {
            lister,
            policy: Arc::new(policy),
            gate: readiness.gate(Self::REQUIRES),
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
        if let Err(not_ready) = self.gate.check() {
            tracing::debug!(uid = %request.uid, %not_ready, "review before the Tier cache synced");
            return Verdict::Deny(Refusal::not_synced());
        }
        // Never read a cache that has not synced, whatever the check says.
        let Some(tiers) = self.lister.snapshot().tiers else {
            return Verdict::Deny(Refusal::not_synced());
        };
        let existing = tiers.values().map(|t| (t.name.as_str(), t.priority));
        let user = request.user_info.username.as_deref().unwrap_or_default();
        let name = tier_name(request);
        let outcome = match request.operation {
            Operation::Create => {
                let priority = match priority_of(request.object.as_ref(), "object", &name) {
                    Ok(p) => p,
                    Err(refusal) => return Verdict::Deny(refusal),
                };
                review(
                    &self.policy,
                    &Request::Create {
                        name: &name,
                        priority,
                    },
                    existing,
                )
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
                review(&self.policy, &update, existing)
            }
            Operation::Delete => review(&self.policy, &Request::Delete { name: &name }, existing),
            Operation::Connect => Ok(()),
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
