//! List paging: the opaque `continue` tokens of a chunked list (the list's resourceVersion and
//! the last key returned), encoded as kube-apiserver's are in spirit (a versioned JSON
//! document), hex instead of base64.

use serde_json::{Value, json};

use crate::status::StatusError;
use crate::util::{hex_decode, hex_encode};

/// A continue token: the list's resourceVersion and the last name returned.
pub(crate) fn encode_continue(rv: u64, last: &str) -> String {
    hex_encode(
        json!({"v": "meta.k8s.io/v1", "rv": rv, "start": last})
            .to_string()
            .as_bytes(),
    )
}

/// Reads a token of [`encode_continue`]; 400 BadRequest when it is not one.
pub(crate) fn decode_continue(token: &str) -> Result<(u64, String), StatusError> {
    let invalid = || {
        StatusError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let bytes = hex_decode(token).ok_or_else(invalid)?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    let rv = value
        .get("rv")
        .and_then(Value::as_u64)
        .ok_or_else(invalid)?;
    let start = value
        .get("start")
        .and_then(Value::as_str)
        .ok_or_else(invalid)?;
    Ok((rv, start.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let token = encode_continue(42, "baseline");
        assert_eq!(
            decode_continue(&token).unwrap(),
            (42, "baseline".to_owned())
        );
        assert_eq!(decode_continue("zz").unwrap_err().code, 400);
        assert_eq!(decode_continue(&hex_encode(b"{}")).unwrap_err().code, 400);
    }
}
