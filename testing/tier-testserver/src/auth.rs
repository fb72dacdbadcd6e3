//! TokenReview (`authentication.k8s.io/v1`) and SubjectAccessReview
//! (`authorization.k8s.io/v1`): enough for a server that protects an endpoint as
//! controller-runtime protects `/metrics`.
//!
//! - `POST /apis/authentication.k8s.io/v1/tokenreviews`: `status.authenticated` is true when
//!   `spec.token` is a known user's token; `status.user` holds its name and the group
//!   `system:authenticated`. Unknown tokens get `authenticated: false` and an `error`, as
//!   kube-apiserver answers (201 either way).
//! - `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: `status.allowed` is true when
//!   a grant ([`TestApiServer::grant_non_resource`](crate::TestApiServer::grant_non_resource))
//!   matches the spec's user and its `nonResourceAttributes` (path and verb; `*` matches any
//!   verb). Resource attributes are never allowed: nothing grants them here.
//!
//! Both need an authenticated caller (the reviewing server), like every non-public path.

use http::Response;
use serde_json::{Value, json};

use crate::context::Shared;
use crate::reply::{self, ResponseBody};
use crate::status::{Cause, StatusError};

fn decode(body: &[u8], kind: &str) -> Result<Value, StatusError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| StatusError::bad_request(format!("couldn't decode the {kind}: {e}")))?;
    if value["kind"] != kind {
        return Err(StatusError::bad_request(format!(
            "expected kind {kind}, got {}",
            value["kind"]
        )));
    }
    Ok(value)
}

/// Answers a TokenReview.
pub(crate) fn token_review(shared: &Shared, body: &[u8]) -> Response<ResponseBody> {
    let review = match decode(body, "TokenReview") {
        Ok(review) => review,
        Err(error) => return reply::status(&error),
    };
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let status = match shared.user_for(token) {
        Some(user) => json!({
            "authenticated": true,
            "user": {"username": user, "groups": ["system:authenticated"]},
        }),
        None => json!({
            "authenticated": false,
            "error": "invalid bearer token",
        }),
    };
    reply::json(
        201,
        &json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "metadata": {"creationTimestamp": null},
            "spec": review["spec"],
            "status": status,
        }),
    )
}

/// Answers a SubjectAccessReview.
pub(crate) fn subject_access_review(shared: &Shared, body: &[u8]) -> Response<ResponseBody> {
    let review = match decode(body, "SubjectAccessReview") {
        Ok(review) => review,
        Err(error) => return reply::status(&error),
    };
    let spec = &review["spec"];
    let user = spec["user"].as_str().unwrap_or_default();
    let attributes = &spec["nonResourceAttributes"];
    let (path, verb) = (
        attributes["path"].as_str().unwrap_or_default(),
        attributes["verb"].as_str().unwrap_or_default(),
    );
    if user.is_empty() {
        return reply::status(&StatusError::invalid(
            "authorization.k8s.io",
            "SubjectAccessReview",
            "",
            &[Cause::new(
                "FieldValueRequired",
                "at least one of user or group must be specified",
                "spec.user",
            )],
        ));
    }
    let allowed = attributes.is_object()
        && shared
            .grants()
            .iter()
            .any(|g| g.user == user && g.path == path && (g.verb == verb || g.verb == "*"));
    let mut status = json!({"allowed": allowed});
    if allowed {
        status["reason"] = json!(format!("granted {verb} {path} to {user}"));
    }
    reply::json(
        201,
        &json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": status,
        }),
    )
}
