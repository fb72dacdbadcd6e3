//! [`KubeAuthorizer`]: tier-server's [`Authorizer`] on the API server's TokenReview and
//! SubjectAccessReview, as controller-runtime's `filters.WithAuthenticationAndAuthorization`.
//!
//! RBAC: tierd needs `create` on `tokenreviews.authentication.k8s.io` and
//! `subjectaccessreviews.authorization.k8s.io` (deploy/base/rbac.yaml); a scraper needs
//! `get` on the non-resource URL `/metrics`.

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use tier_server::auth::{AuthError, Authorizer, Decision};

/// Reviews tokens and requests with the API server `client` talks to.
#[derive(Clone)]
pub struct KubeAuthorizer {
    client: kube::Client,
}

impl std::fmt::Debug for KubeAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeAuthorizer").finish_non_exhaustive()
    }
}

impl KubeAuthorizer {
    /// An authorizer using `client`'s credentials for the reviews.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

/// A kube error in words, without its Debug dump.
fn words(what: &str, error: &kube::Error) -> AuthError {
    AuthError(match error {
        kube::Error::Api(status) => format!(
            "the API server refused the {what} ({} {}): {}",
            status.code, status.reason, status.message
        ),
        other => format!("the {what} failed: {other}"),
    })
}

#[async_trait]
impl Authorizer for KubeAuthorizer {
    async fn authorize(&self, token: &str, verb: &str, path: &str) -> Result<Decision, AuthError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| words("TokenReview", &e))?;
        let status = reviewed.status.unwrap_or_default();
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
            return Ok(Decision::Unauthenticated);
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
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(|e| words("SubjectAccessReview", &e))?;
        let status = decided.status.unwrap_or_default();
        if status.allowed {
            Ok(Decision::Allowed { user: name })
        } else {
            Ok(Decision::Forbidden {
                user: name,
                reason: status.reason.unwrap_or_default(),
            })
        }
    }
}
