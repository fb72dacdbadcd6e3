//! The answers the proxy makes up: Kubernetes `Status` objects, as kube-apiserver encodes
//! them, and the `410 Expired` ERROR event of a compacted watch.

use bytes::Bytes;
use serde_json::{Value, json};

/// A `Status` failure, as kube-apiserver's `responsewriters` write it.
pub(crate) fn status(code: u16, reason: &str, message: &str, retry_after: Option<u64>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let (Some(seconds), Some(object)) = (retry_after, status.as_object_mut()) {
        object.insert(
            "details".to_owned(),
            json!({ "retryAfterSeconds": seconds }),
        );
    }
    status
}

/// The body of [`status`].
pub(crate) fn status_body(
    code: u16,
    reason: &str,
    message: &str,
    retry_after: Option<u64>,
) -> Bytes {
    Bytes::from(status(code, reason, message, retry_after).to_string())
}

/// The one line kube-apiserver's watch cache streams for a watch from a compacted
/// `resourceVersion`: an `ERROR` event with a `410 Expired` Status (`too old resource
/// version: <asked> (<oldest kept>)`).
pub(crate) fn expired_watch_event(resource_version: Option<&str>) -> Bytes {
    let message = match resource_version.and_then(|rv| rv.parse::<u64>().ok()) {
        Some(rv) => format!("too old resource version: {rv} ({})", rv.saturating_add(1)),
        None => "too old resource version".to_owned(),
    };
    let event = json!({
        "type": "ERROR",
        "object": status(410, "Expired", &message, None),
    });
    let mut line = event.to_string();
    line.push('\n');
    Bytes::from(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_the_retry_delay_in_their_details() {
        let busy = status(429, "TooManyRequests", "slow down", Some(3));
        assert_eq!(busy["details"]["retryAfterSeconds"], 3);
        assert_eq!(busy["code"], 429);
        assert_eq!(busy["status"], "Failure");
        assert!(
            status(503, "ServiceUnavailable", "", None)
                .get("details")
                .is_none()
        );
    }

    #[test]
    fn the_expired_event_is_one_line_naming_the_version() {
        let line = expired_watch_event(Some("41"));
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        let event: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(event["type"], "ERROR");
        assert_eq!(event["object"]["code"], 410);
        assert_eq!(event["object"]["reason"], "Expired");
        assert_eq!(
            event["object"]["message"],
            "too old resource version: 41 (42)"
        );
    }
}
