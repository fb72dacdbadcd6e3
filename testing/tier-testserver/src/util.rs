//! Small helpers without a better home: clock formatting, uids, query strings, JSON access.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use serde_json::{Map, Value};

use crate::status::StatusError;

/// Resolves once the shutdown flag is set (or its sender is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // The guard returned on success is dropped at once, keeping callers `Send`.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Parses a resourceVersion string.
pub(crate) fn parse_rv(text: &str) -> Option<u64> {
    text.parse().ok()
}

/// 413 RequestEntityTooLarge when `obj`, serialized, is larger than `limit` bytes.
pub(crate) fn check_size(obj: &Value, limit: usize) -> Result<(), StatusError> {
    let size = obj.to_string().len();
    if size > limit {
        Err(StatusError::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: the object would be {size} bytes, limit is {limit}"),
        ))
    } else {
        Ok(())
    }
}

/// The current time as an RFC 3339 UTC timestamp with second precision (`metav1.Time`).
pub(crate) fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// A random version-4 UUID in its canonical text form, as kube-apiserver assigns to `metadata.uid`.
pub(crate) fn new_uid() -> String {
    let mut bytes = [0u8; 16];
    for b in &mut bytes {
        *b = fastrand::u8(..);
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex_encode(&bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A random lowercase alphanumeric suffix, as used for `metadata.generateName`.
pub(crate) fn random_suffix(len: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..len)
        .map(|_| char::from(ALPHABET[fastrand::usize(..ALPHABET.len())]))
        .collect()
}

/// Lowercase hexadecimal encoding.
pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// Decodes lowercase or uppercase hexadecimal; `None` on odd length or a bad digit.
pub(crate) fn hex_decode(text: &str) -> Option<Vec<u8>> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks(2)
        .map(|pair| Some((digit(pair[0])? << 4) | digit(pair[1])?))
        .collect()
}

/// Parses an `application/x-www-form-urlencoded` query string into ordered pairs.
///
/// Empty segments (kube-rs sends `?&watch=true`) are skipped; invalid escapes are kept verbatim.
pub(crate) fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|segment| !segment.is_empty())
        .map(|segment| match segment.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(segment), String::new()),
        })
        .collect()
}

/// Decodes `%XX` escapes and `+` (space) in one query component.
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'+' {
            out.push(b' ');
            i += 1;
            continue;
        }
        if b == b'%'
            && let Some(decoded) = text
                .get(i + 1..i + 3)
                .and_then(hex_decode)
                .and_then(|v| v.first().copied())
        {
            out.push(decoded);
            i += 3;
            continue;
        }
        out.push(b);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `metadata.name` of an object, if it is a non-empty string.
pub(crate) fn object_name(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `metadata.resourceVersion` of an object, if it is a non-empty string.
pub(crate) fn object_rv(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `metadata.uid` of an object, if it is a non-empty string.
pub(crate) fn object_uid(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The `metadata` map of an object (created, replacing a non-map, when needed);
/// `None` when `obj` itself is not a JSON object.
pub(crate) fn metadata_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let map = obj.as_object_mut()?;
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn uid_has_canonical_shape() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(uid.as_bytes()[14], b'4');
        assert_eq!(uid.matches('-').count(), 4);
    }

    #[test]
    fn parses_queries() {
        let q =
            parse_query("&watch=true&fieldSelector=metadata.name%3Dbaseline&x=a+b&bad=%zz&flag");
        assert_eq!(
            q,
            vec![
                ("watch".into(), "true".into()),
                ("fieldSelector".into(), "metadata.name=baseline".into()),
                ("x".into(), "a b".into()),
                ("bad".into(), "%zz".into()),
                ("flag".into(), String::new()),
            ]
        );
    }

    #[test]
    fn hex_round_trips() {
        let data = b"\x00\xffhello";
        assert_eq!(hex_decode(&hex_encode(data)).as_deref(), Some(&data[..]));
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode("zz"), None);
    }
}
