//! Kubernetes `Status` failures: the error bodies every endpoint answers with, built the way
//! kube-apiserver builds them (`k8s.io/apimachinery/pkg/api/errors`).

use serde_json::{Map, Value, json};

/// A resource as named in Status messages and `details` (`tiers.crd.antrea.io`, `events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceName {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// Plural resource name, e.g. `tiers`.
    pub plural: &'static str,
    /// Kind, e.g. `Tier`.
    pub kind: &'static str,
}

impl ResourceName {
    /// `plural.group`, or just `plural` for the core group (kube-apiserver's `GroupResource`).
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Kind.group`, or just `Kind` for the core group (kube-apiserver's `GroupKind`).
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_owned()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// One entry of `details.causes[]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Machine-readable cause, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// Human-readable description without the field path.
    pub message: String,
    /// JSON path of the offending field, e.g. `spec.priority`.
    pub field: String,
}

impl Cause {
    /// A cause with the given reason, message and field.
    pub fn new(reason: &str, message: impl Into<String>, field: &str) -> Self {
        Self {
            reason: reason.to_owned(),
            message: message.into(),
            field: field.to_owned(),
        }
    }

    fn to_json(&self) -> Value {
        json!({"reason": self.reason, "message": self.message, "field": self.field})
    }
}

/// A failed API call: the HTTP code and the `Status` object kube-apiserver would send.
///
/// Every request path of the server reports its failures as one of these; the store's
/// "other actor" methods return them too.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct StatusError {
    /// HTTP status code (also `Status.code`).
    pub code: u16,
    /// `Status.reason`; empty for admission webhook denials.
    pub reason: String,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, when the failure has any.
    pub details: Option<Value>,
    /// `Retry-After` header value in seconds (also `details.retryAfterSeconds`).
    pub retry_after: Option<u64>,
}

impl StatusError {
    /// A failure with the given code, reason and message and no details.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// Sets `details`.
    #[must_use]
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Sets a `Retry-After` (seconds), sent as a header and as `details.retryAfterSeconds`.
    #[must_use]
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The `Status` object (`kind: Status, apiVersion: v1, status: Failure, ...`).
    pub fn to_status(&self) -> Value {
        let mut status = Map::new();
        status.insert("kind".into(), json!("Status"));
        status.insert("apiVersion".into(), json!("v1"));
        status.insert("metadata".into(), json!({}));
        status.insert("status".into(), json!("Failure"));
        status.insert("message".into(), json!(self.message));
        if !self.reason.is_empty() {
            status.insert("reason".into(), json!(self.reason));
        }
        let mut details = self.details.clone();
        if let Some(seconds) = self.retry_after {
            let entry = details.get_or_insert_with(|| json!({}));
            if let Some(map) = entry.as_object_mut() {
                map.insert("retryAfterSeconds".into(), json!(seconds));
            }
        }
        if let Some(details) = details {
            status.insert("details".into(), details);
        }
        status.insert("code".into(), json!(self.code));
        Value::Object(status)
    }

    /// 404 NotFound: `tiers.crd.antrea.io "x" not found`.
    pub fn not_found(resource: ResourceName, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", resource.qualified_resource()),
        )
        .with_details(name_details(resource, name))
    }

    /// 409 AlreadyExists: `tiers.crd.antrea.io "x" already exists`.
    pub fn already_exists(resource: ResourceName, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!(
                "{} \"{name}\" already exists",
                resource.qualified_resource()
            ),
        )
        .with_details(name_details(resource, name))
    }

    /// 409 Conflict: `Operation cannot be fulfilled on tiers.crd.antrea.io "x": <why>`.
    pub fn conflict(resource: ResourceName, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                resource.qualified_resource()
            ),
        )
        .with_details(name_details(resource, name))
    }

    /// 409 Conflict for a stale `metadata.resourceVersion` (the optimistic-lock message).
    pub fn stale(resource: ResourceName, name: &str) -> Self {
        Self::conflict(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid: `Tier.crd.antrea.io "x" is invalid: <causes>` with `details.causes[]`.
    ///
    /// `kind` is the qualified kind (or, for the resourceVersion check, the qualified resource,
    /// as kube-apiserver does).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: &[Cause]) -> Self {
        let qualified = if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        };
        let rendered: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let list = match rendered.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {list}"),
        )
        .with_details(json!({
            "name": name,
            "group": group,
            "kind": kind,
            "causes": causes.iter().map(Cause::to_json).collect::<Vec<_>>(),
        }))
    }

    /// 400 BadRequest with the given message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 404 NotFound for a path the server does not serve.
    pub fn path_not_found() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource")
            .with_details(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]}))
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415 UnsupportedMediaType listing the accepted media types.
    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {} (got {content_type:?})",
                accepted.join(", ")
            ),
        )
    }

    /// 500 InternalError: `Internal error occurred: <message>` with one cause.
    pub fn internal(message: &str) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({"causes": [{"message": message}]}))
    }

    /// 500 InternalError for a create beyond the server's bound of `limit` objects of
    /// `resource` (what a full etcd makes kube-apiserver answer, with the bound named).
    pub fn full(resource: ResourceName, limit: usize) -> Self {
        Self::internal(&format!(
            "tier-testserver holds at most {limit} {}: delete some first",
            resource.qualified_resource()
        ))
    }

    /// 410 Expired (a resourceVersion or continue token older than the retained history).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// An admission webhook denial, built like kube-apiserver's `ToStatusErr`: code 400
    /// unless the webhook gave a code >= 400, reason as given (usually empty), message
    /// `admission webhook "<name>" denied the request: <message>`.
    pub fn admission_denied(webhook: &str, code: u16, reason: &str, message: &str) -> Self {
        let denied_by = format!("admission webhook \"{webhook}\" denied the request");
        let text = if !message.is_empty() {
            format!("{denied_by}: {message}")
        } else if !reason.is_empty() {
            format!("{denied_by}: {reason}")
        } else {
            format!("{denied_by} without explanation")
        };
        Self::new(code.max(400), reason, text)
    }

    /// The `Retry-After` header value, when one is set.
    pub(crate) fn retry_after_header(&self) -> Option<String> {
        self.retry_after.map(|s| s.to_string())
    }
}

fn name_details(resource: ResourceName, name: &str) -> Value {
    json!({"name": name, "group": resource.group, "kind": resource.plural})
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIERS: ResourceName = ResourceName {
        group: "crd.antrea.io",
        plural: "tiers",
        kind: "Tier",
    };

    #[test]
    fn renders_not_found_like_kube_apiserver() {
        let status = StatusError::not_found(TIERS, "baseline").to_status();
        assert_eq!(
            status,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "tiers.crd.antrea.io \"baseline\" not found", "reason": "NotFound",
                "details": {"name": "baseline", "group": "crd.antrea.io", "kind": "tiers"},
                "code": 404
            })
        );
    }

    #[test]
    fn denial_has_no_reason_field() {
        let err = StatusError::admission_denied("tiervalidator.antrea.io", 0, "", "nope");
        assert_eq!(err.code, 400);
        let status = err.to_status();
        assert!(status.get("reason").is_none());
        assert_eq!(
            status["message"],
            "admission webhook \"tiervalidator.antrea.io\" denied the request: nope"
        );
        let bare = StatusError::admission_denied("w", 403, "", "");
        assert_eq!(bare.code, 403);
        assert_eq!(
            bare.message,
            "admission webhook \"w\" denied the request without explanation"
        );
    }

    #[test]
    fn invalid_lists_several_causes_in_brackets() {
        let causes = [
            Cause::new("FieldValueRequired", "Required value", "spec"),
            Cause::new(
                "FieldValueInvalid",
                "Invalid value: \"A\": bad",
                "metadata.name",
            ),
        ];
        let err = StatusError::invalid("crd.antrea.io", "Tier", "A", &causes);
        assert_eq!(
            err.message,
            "Tier.crd.antrea.io \"A\" is invalid: [spec: Required value, metadata.name: Invalid value: \"A\": bad]"
        );
        assert_eq!(
            err.to_status()["details"]["causes"][1]["field"],
            "metadata.name"
        );
    }

    #[test]
    fn retry_after_goes_into_details() {
        let status = StatusError::new(429, "TooManyRequests", "slow down")
            .with_retry_after(2)
            .to_status();
        assert_eq!(status["details"]["retryAfterSeconds"], 2);
    }
}
