//! `POST /validate/tier` as the assembly serves it: tier-server's [`Webhook`], with the
//! controller identity as a dependency of UPDATE reviews alone.
//!
//! The webhook's policy names the one user who may change a priority, and that user may still
//! be unknown (the API server has not answered the SelfSubjectReview yet). Until it is, CREATE
//! and DELETE are reviewed as usual (gated on their caches by the webhook itself), so are
//! UPDATEs that keep the priority (labels, descriptions: no identity needed), and every Tier
//! UPDATE that changes it gets a well-formed refusal with code 503, reason
//! `ServiceUnavailable` and `retryAfterSeconds: 1`, as the webhook's own not-synced refusals:
//! clients retry it. Once the
//! user is known, one webhook with the full policy is built (once) and serves every review.
//! Both webhooks share one reservation table and the policy caches, so nothing is lost between
//! them.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::core::admission::{AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, Status as ApiStatus, response::StatusDetails};
use tier_kube::ControllerIdentity;
use tier_server::Webhook;
use tier_server::webhook::{PATH, ReviewError};

/// The refusal of a Tier UPDATE changing a priority while the controller identity is unknown.
pub const IDENTITY_PENDING: &str = "tierd does not know its own identity yet (SelfSubjectReview \
                                    pending), so who may change a priority is unknown; retry \
                                    shortly";

/// A user name no request carries: the webhook built before the identity is known never
/// reviews an UPDATE (they are refused first), and this makes sure it could not admit one.
const NOBODY: &str = "\u{0}tierd:identity-unknown";

/// Builds the webhook for a controller user (shares the table, the caches, the gates).
pub(crate) type MakeWebhook = Arc<dyn Fn(&str) -> Webhook + Send + Sync>;

/// The webhook route's state; cheap to clone.
#[derive(Clone)]
pub(crate) struct IdentityGated {
    identity: ControllerIdentity,
    pending: Webhook,
    known: Arc<OnceLock<Webhook>>,
    make: MakeWebhook,
}

impl IdentityGated {
    pub(crate) fn new(identity: ControllerIdentity, make: MakeWebhook) -> Self {
        Self {
            identity,
            pending: make(NOBODY),
            known: Arc::new(OnceLock::new()),
            make,
        }
    }

    /// The webhook with the full policy, once the identity is known.
    fn known(&self) -> Option<&Webhook> {
        if let Some(webhook) = self.known.get() {
            return Some(webhook);
        }
        let user = self.identity.user()?;
        Some(self.known.get_or_init(|| (self.make)(&user)))
    }

    pub(crate) fn routes(self) -> Router {
        Router::new().route(PATH, post(handle)).with_state(self)
    }

    /// Reviews one AdmissionReview body.
    pub(crate) fn review_json(
        &self,
        body: &[u8],
    ) -> Result<AdmissionReview<DynamicObject>, ReviewError> {
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_slice(body).map_err(ReviewError::Malformed)?;
        if let Some(webhook) = self.known() {
            return webhook.review(review);
        }
        let is_tier_update = review.request.as_ref().is_some_and(|request| {
            matches!(request.operation, Operation::Update)
                && request.kind.group == "crd.antrea.io"
                && request.kind.kind == "Tier"
                && changes_priority(request)
        });
        match review.request.as_ref() {
            Some(request)
                if is_tier_update
                    && review.types.api_version == kube::core::admission::META_API_VERSION_V1
                    && review.types.kind == kube::core::admission::META_KIND =>
            {
                tracing::info!(uid = %request.uid, name = %request.name, "Tier UPDATE refused: the controller identity is not known yet");
                let mut response = AdmissionResponse::from(request).deny(IDENTITY_PENDING);
                response.result = retryable(IDENTITY_PENDING);
                Ok(response.into_review())
            }
            _ => self.pending.review(review),
        }
    }
}

/// Whether an UPDATE moves the Tier: both priorities readable and different. One that cannot
/// be read is left to the webhook, which refuses it as a bad request whoever the user is.
fn changes_priority(request: &kube::core::admission::AdmissionRequest<DynamicObject>) -> bool {
    let priority =
        |object: Option<&DynamicObject>| object?.data.get("spec")?.get("priority")?.as_i64();
    match (
        priority(request.old_object.as_ref()),
        priority(request.object.as_ref()),
    ) {
        (Some(old), Some(new)) => old != new,
        _ => false,
    }
}

/// A transient refusal: 503, retry after a second (the webhook's not-synced form).
fn retryable(message: &str) -> ApiStatus {
    let mut status = ApiStatus::failure(message, "ServiceUnavailable").with_code(503);
    status.details = Some(StatusDetails {
        name: String::new(),
        group: String::new(),
        kind: String::new(),
        uid: String::new(),
        causes: Vec::new(),
        retry_after_seconds: 1,
    });
    status
}

async fn handle(State(webhook): State<IdentityGated>, body: Bytes) -> Response {
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

#[cfg(test)]
mod tests;
