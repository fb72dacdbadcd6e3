//! Classifies Kubernetes API failures into the core's [`WriteError`] classes.
//!
//! The `reason` of a `Status` decides first, the HTTP code second (409 is both `AlreadyExists`
//! and `Conflict`; an admission webhook denial is 400 with an empty reason):
//!
//! | reason | code (when the reason is empty or unknown) | class |
//! |---|---|---|
//! | `AlreadyExists`, `Conflict`, `NotFound`, `Gone`, `Expired` | 404, 409, 410 | [`Stale`](ErrorClass::Stale) |
//! | `Forbidden`, `Unauthorized` | 401, 403 | [`Forbidden`](ErrorClass::Forbidden), with the permission read from the message |
//! | `Invalid`, `BadRequest`, `MethodNotAllowed`, `NotAcceptable`, `RequestEntityTooLarge`, `UnsupportedMediaType` | 400 (admission denial), 422, any other 4xx | [`Denied`](ErrorClass::Denied) |
//! | `TooManyRequests`, `InternalError`, `ServiceUnavailable`, `ServerTimeout`, `Timeout`, `StorageReadError` | 408, 429, 5xx | [`Transient`](ErrorClass::Transient) |
//! | anything else | anything else (0, 1xx, 2xx, 3xx, >= 600) | [`Transient`](ErrorClass::Transient) (the default) |
//!
//! These functions do not know the verb; the [`KubeWriter`](crate::writer::KubeWriter) turns a 404
//! on create (the CRD is missing) into [`NotInstalled`](ErrorClass::NotInstalled).
//!
//! Errors that never reached the server are transient (connection refused or reset, TLS
//! handshake, body read), except for local configuration problems a person must fix
//! (credentials, TLS or proxy settings, a request that cannot be built), which are
//! [`Forbidden`](ErrorClass::Forbidden): no Tier change fixes them.
//!
//! The default for anything unexpected is transient: retrying with backoff is always safe,
//! because the core observes again before every retry.
//!
//! # Retry-After
//!
//! `kube::Error::Api` carries the parsed `Status` only: kube 5 drops the response headers. The
//! [`KubeWriter`](crate::writer::KubeWriter) therefore sends its requests with `Client::send` (same
//! request builder, same middleware stack) and reads the `Retry-After` header itself, via
//! `classify_response`. When the header is absent, `details.retryAfterSeconds` of the
//! `Status` is used (kube-apiserver sets both for its own 429 and 504 answers). Only the
//! delay-seconds form is understood; kube-apiserver never sends the HTTP-date form.
//!
//! ```
//! use kube::core::Status;
//! use tier_core::ErrorClass;
//! use tier_kube::classify;
//!
//! let denied = Status::failure(
//!     "admission webhook \"tiervalidator.antrea.io\" denied the request: tier baseline priority 253 overlaps with existing Tier",
//!     "",
//! )
//! .with_code(400);
//! let error = classify::classify(&kube::Error::Api(denied.boxed()));
//! assert_eq!(error.class, ErrorClass::Denied);
//! assert!(error.message.ends_with("overlaps with existing Tier"));
//!
//! let forbidden = Status::failure(
//!     "tiers.crd.antrea.io is forbidden: User \"system:serviceaccount:kube-system:tierd\" cannot create resource \"tiers\" in API group \"crd.antrea.io\" at the cluster scope",
//!     "Forbidden",
//! )
//! .with_code(403);
//! let error = classify::classify(&kube::Error::Api(forbidden.boxed()));
//! assert_eq!(error.class, ErrorClass::Forbidden);
//! assert_eq!(
//!     error.permission.as_deref(),
//!     Some("create resource \"tiers\" in API group \"crd.antrea.io\" at the cluster scope")
//! );
//! ```

use std::error::Error as StdError;
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use kube::core::Status;
use tier_core::{ErrorClass, WriteError};

/// The class of a failure answered by the server with `reason` and HTTP `code`.
pub(crate) fn class_of(reason: &str, code: u16) -> ErrorClass {
    match reason {
        "AlreadyExists" | "Conflict" | "NotFound" | "Gone" | "Expired" => ErrorClass::Stale,
        "Forbidden" | "Unauthorized" => ErrorClass::Forbidden,
        "Invalid"
        | "BadRequest"
        | "MethodNotAllowed"
        | "NotAcceptable"
        | "RequestEntityTooLarge"
        | "UnsupportedMediaType" => ErrorClass::Denied,
        "TooManyRequests" | "InternalError" | "ServiceUnavailable" | "ServerTimeout"
        | "Timeout" | "StorageReadError" => ErrorClass::Transient,
        _ => match code {
            404 | 409 | 410 => ErrorClass::Stale,
            408 | 429 | 500..=599 => ErrorClass::Transient,
            401 | 403 => ErrorClass::Forbidden,
            400..=499 => ErrorClass::Denied,
            _ => ErrorClass::Transient,
        },
    }
}

/// Classifies an API `Status`, keeping the server's message and a `Retry-After`: the given one
/// (from the header) or else `details.retryAfterSeconds`.
pub(crate) fn classify_status(status: &Status, retry_after: Option<Duration>) -> WriteError {
    let class = class_of(&status.reason, status.code);
    let message = if status.message.is_empty() {
        match status.reason.as_str() {
            "" => format!("the API server answered HTTP {}", status.code),
            reason => format!("the API server answered HTTP {} ({reason})", status.code),
        }
    } else {
        status.message.clone()
    };
    let from_details = status
        .details
        .as_ref()
        .map(|d| d.retry_after_seconds)
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(u64::from(s)));
    let permission = (class == ErrorClass::Forbidden)
        .then(|| permission(&message))
        .flatten();
    let error = WriteError {
        permission,
        ..WriteError::new(class, message)
    };
    match retry_after.or(from_details) {
        Some(delay) => error.with_retry_after(delay),
        None => error,
    }
}

/// Classifies any error of the kube client (see the module docs for the table).
pub fn classify(error: &kube::Error) -> WriteError {
    use kube::Error as E;
    match error {
        E::Api(status) => classify_status(status, None),
        E::Auth(_)
        | E::BuildRequest(_)
        | E::HttpError(_)
        | E::InferConfig(_)
        | E::InferKubeconfig(_)
        | E::ProxyProtocolDisabled { .. }
        | E::ProxyProtocolUnsupported { .. }
        | E::RustlsTls(_)
        | E::TlsRequired => WriteError::forbidden(chain(error), None),
        _ => WriteError::transient(chain(error)),
    }
}

/// Classifies a complete HTTP answer: `None` for a success (2xx), the classified error otherwise.
///
/// The body is parsed as a `Status`; a body that is not one (a proxy's HTML page, a plain-text
/// 429 from API Priority and Fairness) becomes the message, with an empty reason, so the HTTP
/// code decides. A `Status` without a code gets the HTTP code.
pub(crate) fn classify_response(
    code: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<WriteError> {
    if code.is_success() {
        return None;
    }
    let status = match serde_json::from_slice::<Status>(body) {
        Ok(mut status) => {
            if status.code == 0 {
                status.code = code.as_u16();
            }
            status
        }
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            Status::failure(text.trim(), "").with_code(code.as_u16())
        }
    };
    Some(classify_status(&status, retry_after(headers)))
}

/// The permission a Forbidden message says is missing: what follows `cannot ` in
/// kube-apiserver's RBAC message (`User "u" cannot create resource "tiers" in API group ...`).
pub fn permission(message: &str) -> Option<String> {
    let (_, missing) = message.split_once(" cannot ")?;
    let missing = missing.trim().trim_end_matches('.');
    (!missing.is_empty()).then(|| missing.to_owned())
}

/// The `Retry-After` header in its delay-seconds form, if present and valid.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// An error and its sources, joined with `: ` (kube's transport errors say little on top).
fn chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use kube::core::response::StatusDetails;

    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
    }

    fn class(code: u16, reason: &str) -> ErrorClass {
        classify(&api(code, reason, "m")).class
    }

    #[test]
    fn stale_by_reason() {
        assert_eq!(class(409, "AlreadyExists"), ErrorClass::Stale);
        assert_eq!(class(409, "Conflict"), ErrorClass::Stale);
        assert_eq!(class(404, "NotFound"), ErrorClass::Stale);
        assert_eq!(class(410, "Gone"), ErrorClass::Stale);
        assert_eq!(class(410, "Expired"), ErrorClass::Stale);
    }

    #[test]
    fn forbidden_by_reason_names_the_permission() {
        for (code, reason) in [(403, "Forbidden"), (401, "Unauthorized")] {
            let error = classify(&api(code, reason, "the server said no"));
            assert_eq!(error.class, ErrorClass::Forbidden, "{code} {reason}");
            assert_eq!(error.permission, None);
        }
        let error = classify(&api(
            403,
            "Forbidden",
            "tiers.crd.antrea.io \"x\" is forbidden: User \"bob\" cannot update resource \"tiers\" in API group \"crd.antrea.io\" at the cluster scope",
        ));
        assert_eq!(
            error.permission.as_deref(),
            Some("update resource \"tiers\" in API group \"crd.antrea.io\" at the cluster scope")
        );
    }

    #[test]
    fn denied_by_reason_keeps_the_message() {
        for (code, reason) in [
            (422, "Invalid"),
            (400, "BadRequest"),
            (405, "MethodNotAllowed"),
            (413, "RequestEntityTooLarge"),
        ] {
            let error = classify(&api(code, reason, "the server said no"));
            assert_eq!(error.class, ErrorClass::Denied, "{code} {reason}");
            assert_eq!(error.message, "the server said no");
            assert_eq!(error.retry_after, None);
        }
    }

    #[test]
    fn admission_denial_is_denied() {
        let message = "admission webhook \"tiervalidator.antrea.io\" denied the request: \
                       tier baseline priority 253 overlaps with existing Tier";
        let error = classify(&api(400, "", message));
        assert_eq!(error.class, ErrorClass::Denied);
        assert_eq!(error.message, message);
    }

    #[test]
    fn transient_by_reason() {
        assert_eq!(class(429, "TooManyRequests"), ErrorClass::Transient);
        assert_eq!(class(500, "InternalError"), ErrorClass::Transient);
        assert_eq!(class(503, "ServiceUnavailable"), ErrorClass::Transient);
        assert_eq!(class(504, "Timeout"), ErrorClass::Transient);
        assert_eq!(class(500, "ServerTimeout"), ErrorClass::Transient);
        assert_eq!(class(500, "StorageReadError"), ErrorClass::Transient);
    }

    #[test]
    fn reason_wins_over_code() {
        // A webhook may answer with its own code and reason; the reason decides.
        assert_eq!(class(500, "Conflict"), ErrorClass::Stale);
        assert_eq!(class(409, "InternalError"), ErrorClass::Transient);
        assert_eq!(class(503, "Forbidden"), ErrorClass::Forbidden);
    }

    #[test]
    fn code_decides_when_the_reason_is_empty_or_unknown() {
        for (code, want) in [
            (400, ErrorClass::Denied),
            (401, ErrorClass::Forbidden),
            (403, ErrorClass::Forbidden),
            (422, ErrorClass::Denied),
            (418, ErrorClass::Denied),
            (404, ErrorClass::Stale),
            (409, ErrorClass::Stale),
            (410, ErrorClass::Stale),
            (408, ErrorClass::Transient),
            (429, ErrorClass::Transient),
            (500, ErrorClass::Transient),
            (502, ErrorClass::Transient),
            (503, ErrorClass::Transient),
            (504, ErrorClass::Transient),
            (0, ErrorClass::Transient),
            (302, ErrorClass::Transient),
            (200, ErrorClass::Transient),
            (999, ErrorClass::Transient),
        ] {
            assert_eq!(class(code, ""), want, "code {code}, empty reason");
            assert_eq!(
                class(code, "SomethingNew"),
                want,
                "code {code}, unknown reason"
            );
        }
    }

    #[test]
    fn retry_after_from_status_details() {
        let status = Status::failure("slow down", "TooManyRequests")
            .with_code(429)
            .with_details(StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: 3,
            });
        let error = classify(&kube::Error::Api(status.clone().boxed()));
        assert_eq!(error.class, ErrorClass::Transient);
        assert_eq!(error.retry_after, Some(Duration::from_secs(3)));
        // The header, when known, wins.
        let error = classify_status(&status, Some(Duration::from_secs(7)));
        assert_eq!(error.retry_after, Some(Duration::from_secs(7)));
    }

    #[test]
    fn empty_message_names_the_code_and_reason() {
        assert_eq!(
            classify(&api(503, "", "")).message,
            "the API server answered HTTP 503"
        );
        assert_eq!(
            classify(&api(409, "Conflict", "")).message,
            "the API server answered HTTP 409 (Conflict)"
        );
    }

    #[test]
    fn transport_errors_are_transient_with_their_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let error = classify(&kube::Error::Service(Box::new(io)));
        assert_eq!(error.class, ErrorClass::Transient);
        assert!(
            error.message.contains("connection refused"),
            "{}",
            error.message
        );

        let read = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        assert_eq!(
            classify(&kube::Error::ReadEvents(read)).class,
            ErrorClass::Transient
        );
        let serde = serde_json::from_str::<u8>("x").unwrap_err();
        assert_eq!(
            classify(&kube::Error::SerdeError(serde)).class,
            ErrorClass::Transient
        );
        assert_eq!(
            classify(&kube::Error::LinesCodecMaxLineLengthExceeded).class,
            ErrorClass::Transient
        );
    }

    #[test]
    fn local_configuration_errors_are_forbidden() {
        assert_eq!(
            classify(&kube::Error::TlsRequired).class,
            ErrorClass::Forbidden
        );
        let build = kube::core::Request::new("/apis/crd.antrea.io/v1beta1/tiers")
            .replace("", &Default::default(), Vec::new())
            .unwrap_err();
        assert_eq!(
            classify(&kube::Error::BuildRequest(build)).class,
            ErrorClass::Forbidden
        );
    }

    fn headers(retry_after: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = retry_after {
            headers.insert(http::header::RETRY_AFTER, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn responses_success_and_status_bodies() {
        assert_eq!(
            classify_response(StatusCode::CREATED, &headers(None), b"{}"),
            None
        );
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"tiers.crd.antrea.io \"baseline\" already exists","reason":"AlreadyExists","code":409}"#;
        let error = classify_response(StatusCode::CONFLICT, &headers(None), body).unwrap();
        assert_eq!(error.class, ErrorClass::Stale);
        assert_eq!(
            error.message,
            "tiers.crd.antrea.io \"baseline\" already exists"
        );
    }

    #[test]
    fn responses_keep_the_retry_after_header() {
        let body = br#"{"kind":"Status","status":"Failure","message":"too many requests","reason":"TooManyRequests","code":429}"#;
        let error =
            classify_response(StatusCode::TOO_MANY_REQUESTS, &headers(Some("4")), body).unwrap();
        assert_eq!(error.class, ErrorClass::Transient);
        assert_eq!(error.retry_after, Some(Duration::from_secs(4)));
    }

    #[test]
    fn responses_with_a_plain_body_use_the_http_code() {
        let error = classify_response(
            StatusCode::TOO_MANY_REQUESTS,
            &headers(Some(" 2 ")),
            b"Too many requests, please try again later.\n",
        )
        .unwrap();
        assert_eq!(error.class, ErrorClass::Transient);
        assert_eq!(error.message, "Too many requests, please try again later.");
        assert_eq!(error.retry_after, Some(Duration::from_secs(2)));

        let error = classify_response(StatusCode::BAD_GATEWAY, &headers(None), b"").unwrap();
        assert_eq!(error.class, ErrorClass::Transient);
        let error = classify_response(StatusCode::FORBIDDEN, &headers(None), b"<html/>").unwrap();
        assert_eq!(error.class, ErrorClass::Forbidden);
    }

    #[test]
    fn a_status_without_code_gets_the_http_code() {
        let error = classify_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &headers(None),
            br#"{"message":"x"}"#,
        )
        .unwrap();
        assert_eq!(error.class, ErrorClass::Transient);
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(retry_after(&headers(None)), None);
        assert_eq!(retry_after(&headers(Some("0"))), Some(Duration::ZERO));
        assert_eq!(
            retry_after(&headers(Some("120"))),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            retry_after(&headers(Some("Wed, 21 Oct 2015 07:28:00 GMT"))),
            None
        );
        assert_eq!(retry_after(&headers(Some("-1"))), None);
    }
}
