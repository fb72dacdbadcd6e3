//! tier-server's [`Authorizer`] port on tier-kube's TokenReview and SubjectAccessReview
//! ([`tier_kube::auth::review`]), for `/metrics` with metrics authentication on.

use async_trait::async_trait;
use tier_kube::auth::Access;
use tier_server::auth::{AuthError, Authorizer, Decision};

/// Reviews tokens and requests with the API server `client` talks to.
#[derive(Clone)]
pub(crate) struct KubeAuthorizer {
    client: kube::Client,
}

impl std::fmt::Debug for KubeAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeAuthorizer").finish_non_exhaustive()
    }
}

impl KubeAuthorizer {
    pub(crate) fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl Authorizer for KubeAuthorizer {
    async fn authorize(&self, token: &str, verb: &str, path: &str) -> Result<Decision, AuthError> {
        match tier_kube::auth::review(&self.client, token, verb, path).await {
            Ok(Access::Allowed { user }) => Ok(Decision::Allowed { user }),
            Ok(Access::Unauthenticated) => Ok(Decision::Unauthenticated),
            Ok(Access::Forbidden { user, reason }) => Ok(Decision::Forbidden { user, reason }),
            Err(error) => Err(AuthError(error.to_string())),
        }
    }
}
