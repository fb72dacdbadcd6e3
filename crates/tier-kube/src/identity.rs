//! Who a client authenticates as, asked of the API server itself.
//!
//! The webhook lets exactly one user change a Tier's priority: the controller that corrects
//! them. Rather than a string every deployment must keep in step with its service account,
//! tierd asks Kubernetes whom its own client is (`authentication.k8s.io/v1`
//! `SelfSubjectReview`, GA since Kubernetes 1.28: a `POST` answered with the request's own
//! user) and lets that user through. An explicit setting (`--controller-user`, or
//! [`AdmissionPolicy::antrea`](tier_core::admission::AdmissionPolicy::antrea) in a library)
//! overrides it.
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), tier_kube::IdentityError> {
//! let user = tier_kube::identity::whoami(&client).await?;
//! println!("tierd's writes are made as {user}");
//! # Ok(())
//! # }
//! ```

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::Api;
use kube::api::PostParams;

/// Asking the API server who the client is failed.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The server does not serve `selfsubjectreviews` (Kubernetes before 1.28, or the API
    /// disabled).
    #[error(
        "the API server does not support SelfSubjectReview (authentication.k8s.io/v1, \
         Kubernetes 1.28+); set the controller user explicitly (--controller-user)"
    )]
    Unsupported,
    /// The request failed (unreachable server, credentials refused).
    #[error(
        "cannot ask the API server who this client is: {0}; set the controller user explicitly (--controller-user) or check the connection"
    )]
    Request(#[source] kube::Error),
    /// The server answered without a user name.
    #[error(
        "the API server's SelfSubjectReview named no user; set the controller user explicitly \
         (--controller-user)"
    )]
    NoUser,
}

/// The user name the API server sees for `client`'s requests.
///
/// # Errors
///
/// [`IdentityError::Unsupported`] when the server does not serve the API (404), else the
/// request's error; either way the caller should fall back to an explicit user.
pub async fn whoami(client: &kube::Client) -> Result<String, IdentityError> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = match api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(review) => review,
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 405 => {
            return Err(IdentityError::Unsupported);
        }
        Err(error) => return Err(IdentityError::Request(error)),
    };
    review
        .status
        .and_then(|status| status.user_info)
        .and_then(|user| user.username)
        .filter(|name| !name.is_empty())
        .ok_or(IdentityError::NoUser)
}
