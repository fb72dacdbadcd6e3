//! Who is calling, and may they: a bearer token reviewed by the API server (`TokenReview`),
//! then a non-resource request authorized for its user (`SubjectAccessReview`), as
//! controller-runtime's `filters.WithAuthenticationAndAuthorization` does for `/metrics`.
//!
//! [`review`] knows no HTTP server: tier-server's `Authorizer` port is implemented on it where
//! the two meet (the `tierd` assembly crate).
//!
//! RBAC: the client needs `create` on `tokenreviews.authentication.k8s.io` and
//! `subjectaccessreviews.authorization.k8s.io` (deploy/base/rbac.yaml); a caller needs the
//! verb on the non-resource URL (e.g. `get` on `/metrics`).
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), tier_kube::auth::ReviewError> {
//! use tier_kube::auth::{Access, review};
//!
//! match review(&client, "a-bearer-token", "get", "/metrics").await? {
//!     Access::Allowed { user } => println!("{user} may scrape"),
//!     Access::Unauthenticated => println!("no such token"),
//!     Access::Forbidden { user, reason } => println!("{user} may not: {reason}"),
//! }
//! # Ok(())
//! # }
//! ```

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

/// What the API server said about a token and a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
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

/// A review could not be made. Retryable: nothing was decided, ask again.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReviewError(String);

/// A kube error in words, without its Debug dump.
fn words(what: &str, error: &kube::Error) -> ReviewError {
    ReviewError(match error {
        kube::Error::Api(status) => format!(
            "the API server refused the {what} ({} {}): {}; check that tierd may create \
             {what}s (deploy/base/rbac.yaml)",
            status.code, status.reason, status.message
        ),
        other => format!("the {what} failed: {other}"),
    })
}

/// Whether the user of `token` may `verb` (lowercase, e.g. `get`) the non-resource `path`,
/// asked of the API server `client` talks to.
///
/// # Errors
///
/// [`ReviewError`] when either review cannot be made (unreachable server, RBAC).
pub async fn review(
    client: &kube::Client,
    token: &str,
    verb: &str,
    path: &str,
) -> Result<Access, ReviewError> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let reviewed = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| words("TokenReview", &e))?;
    let status = reviewed.status.unwrap_or_default();
    let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
        return Ok(Access::Unauthenticated);
    };
    let name = user.username.clone().unwrap_or_default();
    let access = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username,
            groups: user.groups,
            uid: user.uid,
            extra: user.extra,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_owned()),
                verb: Some(verb.to_owned()),
            }),
            resource_attributes: None,
        },
        ..SubjectAccessReview::default()
    };
    let decided = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &access)
        .await
        .map_err(|e| words("SubjectAccessReview", &e))?;
    let status = decided.status.unwrap_or_default();
    if status.allowed {
        Ok(Access::Allowed { user: name })
    } else {
        Ok(Access::Forbidden {
            user: name,
            reason: status.reason.unwrap_or_default(),
        })
    }
}
