//! Protecting a router the way controller-runtime protects its metrics endpoint: the caller's
//! bearer token is authenticated with a TokenReview and the request authorized with a
//! SubjectAccessReview of its non-resource path and verb (`get /metrics`), both by the API
//! server.
//!
//! tier-server knows no Kubernetes client: an [`Authorizer`] does the two reviews (tier-bin's
//! uses kube's client). [`protect`] wraps a router in it:
//!
//! | request | answer |
//! |---|---|
//! | no `Authorization: Bearer` header, or a token the API server does not authenticate | `401` |
//! | a user the API server does not authorize for the verb and path | `403` |
//! | the reviews fail (API server unreachable) | `503` |
//! | more than [`MAX_IN_FLIGHT`] reviews at once | `429` (a flood of bad tokens cannot flood the API server) |
//!
//! The scraper needs a ClusterRole granting `nonResourceURLs: ["/metrics"]`, `verbs: ["get"]`;
//! the server needs `create` on `tokenreviews` and `subjectaccessreviews`.
//!
//! ```
//! use std::sync::Arc;
//!
//! use tier_server::auth::{self, AuthError, Authorizer, Decision};
//!
//! #[derive(Debug)]
//! struct OnlyAlice;
//!
//! #[async_trait::async_trait]
//! impl Authorizer for OnlyAlice {
//!     async fn authorize(&self, token: &str, _verb: &str, _path: &str) -> Result<Decision, AuthError> {
//!         Ok(match token {
//!             "alice-token" => Decision::Allowed { user: "alice".into() },
//!             _ => Decision::Unauthenticated,
//!         })
//!     }
//! }
//!
//! let router = auth::protect(axum::Router::new(), Arc::new(OnlyAlice));
//! # let _ = router;
//! ```

use std::fmt;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

/// The most reviews in flight at once; further requests get `429`.
pub const MAX_IN_FLIGHT: usize = 8;

/// What the API server said about a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The token is valid and its user may make the request.
    Allowed {
        /// The authenticated user.
        user: String,
    },
    /// The token is not valid (TokenReview `authenticated: false`).
    Unauthenticated,
    /// The token is valid but its user may not make the request.
    Forbidden {
        /// The authenticated user.
        user: String,
        /// The SubjectAccessReview's reason, if any.
        reason: String,
    },
}

/// The reviews could not be made. Retryable: the next request tries again.
#[derive(Debug, thiserror::Error)]
#[error("cannot review the caller's token: {0}")]
pub struct AuthError(pub String);

/// Authenticates a bearer token and authorizes a non-resource request; see the
/// [module docs](self).
#[async_trait::async_trait]
pub trait Authorizer: fmt::Debug + Send + Sync + 'static {
    /// Whether the user of `token` may `verb` (lowercase HTTP method, e.g. `get`) the
    /// non-resource `path`.
    async fn authorize(&self, token: &str, verb: &str, path: &str) -> Result<Decision, AuthError>;
}

#[derive(Clone, Debug)]
struct Guard {
    authorizer: Arc<dyn Authorizer>,
    in_flight: Arc<Semaphore>,
}

/// `router`, answering only requests whose bearer token `authorizer` allows.
pub fn protect(router: Router, authorizer: Arc<dyn Authorizer>) -> Router {
    let guard = Guard {
        authorizer,
        in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
    };
    router.layer(middleware::from_fn_with_state(guard, check))
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

async fn check(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let Some(token) = bearer(&request) else {
        return refuse(StatusCode::UNAUTHORIZED, "Unauthorized\n".to_owned());
    };
    let Ok(_permit) = guard.in_flight.try_acquire() else {
        return refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "too many requests being authorized; retry shortly\n".to_owned(),
        );
    };
    let verb = request.method().as_str().to_ascii_lowercase();
    let path = request.uri().path().to_owned();
    match guard.authorizer.authorize(token, &verb, &path).await {
        Ok(Decision::Allowed { .. }) => next.run(request).await,
        Ok(Decision::Unauthenticated) => {
            refuse(StatusCode::UNAUTHORIZED, "Unauthorized\n".to_owned())
        }
        Ok(Decision::Forbidden { user, reason }) => {
            tracing::debug!(%user, %verb, %path, %reason, "request forbidden");
            refuse(
                StatusCode::FORBIDDEN,
                format!("Authorization denied for user {user:?} to {verb} {path}\n"),
            )
        }
        Err(error) => {
            tracing::warn!(%error, %path, "request not authorized: the reviews failed");
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "cannot authorize the request right now; retry shortly\n".to_owned(),
            )
        }
    }
}

fn refuse(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
