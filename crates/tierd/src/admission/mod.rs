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
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
#[cfg(test)]
use kube::core::DynamicObject;
#[cfg(test)]
use kube::core::admission::AdmissionReview;
use tier_kube::identity::ControllerIdentity;
#[cfg(test)]
use tier_server::webhook::ReviewError;
use tier_server::webhook::Webhook;
use tier_server::webhook::{PATH, read_review};

/// A user name no request carries: the webhook built before the identity is known refuses
/// every priority change first ([`Webhook::identity_pending`]), and this makes sure it could
/// not admit one.
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
            pending: make(NOBODY).identity_pending(),
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

    /// The route `POST /validate/tier`, reading at most
    /// [`MAX_REVIEW_BYTES`](tier_server::webhook::MAX_REVIEW_BYTES) of body ([`read_review`]).
    pub(crate) fn routes(self) -> Router {
        Router::new()
            .route(PATH, post(handle))
            .with_state(Arc::new(self))
    }

    /// Reviews one AdmissionReview body: with the full policy once the identity is known,
    /// before that with the webhook that refuses priority changes as pending.
    #[cfg(test)]
    pub(crate) async fn review_json(
        &self,
        body: &[u8],
    ) -> Result<AdmissionReview<DynamicObject>, ReviewError> {
        self.webhook().review_json(body).await
    }

    /// The webhook reviewing now: the full one once the identity is known, else the pending one.
    fn webhook(&self) -> &Webhook {
        self.known().unwrap_or(&self.pending)
    }
}

async fn handle(State(gated): State<Arc<IdentityGated>>, body: Body) -> Response {
    match read_review(body).await {
        Ok(body) => gated.webhook().respond(&body).await,
        Err(refused) => refused,
    }
}

#[cfg(test)]
mod tests;
