//! What kube-apiserver does for every custom resource, whatever its schema: the type-meta
//! check of the decoder, the ObjectMeta fields that survive pruning, object-name rules, and
//! the wording of schema type errors.

use serde_json::{Map, Value};

use crate::status::{Cause, ResourceName, StatusError};

/// A custom resource the server serves, as its CRD defines it: its names, and what
/// kube-apiserver does to an object of it between decoding and admission. One implementation
/// per resource: Antrea's Tier ([`tier::Schema`](crate::tier::Schema)) and Calico's
/// ([`CalicoApi`](crate::calico::CalicoApi)).
pub(crate) trait Schema: Send + Sync + 'static {
    /// The resource as named in Status messages (group, plural, kind).
    fn resource(&self) -> ResourceName;
    /// `apiVersion` of its objects.
    fn api_version(&self) -> &'static str;
    /// `kind` of its lists.
    fn list_kind(&self) -> &'static str;
    /// The decoder's check of `apiVersion`, `kind` and metadata maps (400 BadRequest).
    fn check_type(&self, obj: &Value) -> Result<(), StatusError>;
    /// Prunes, defaults and validates a decoded object (422 Invalid with every cause); `old`
    /// is the stored object of an update.
    fn prepare(&self, obj: &mut Value, old: Option<&Value>) -> Result<(), StatusError>;
}

/// ObjectMeta fields that survive decoding; anything else under `metadata` is dropped.
pub(crate) const META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Drops the `metadata` fields ObjectMeta does not know (kube-apiserver prunes them silently).
pub(crate) fn prune_metadata(meta: &mut Map<String, Value>) {
    meta.retain(|k, _| META_FIELDS.contains(&k.as_str()));
}

/// Checks `apiVersion` and `kind` of a request body against `api_version` and `kind`, and that
/// labels and annotations are maps of strings (400 BadRequest when wrong, as the decoder of
/// kube-apiserver answers).
pub(crate) fn check_type(obj: &Value, api_version: &str, kind: &str) -> Result<(), StatusError> {
    if !obj.is_object() {
        return Err(StatusError::bad_request(format!(
            "the object provided is not a JSON object and cannot be handled as a {kind}"
        )));
    }
    let body_kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let body_api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if body_kind.is_empty() {
        return Err(StatusError::bad_request(
            "Object 'Kind' is missing in the request body",
        ));
    }
    if body_api_version != api_version {
        return Err(StatusError::bad_request(format!(
            "the API version in the data ({body_api_version}) does not match the expected API version ({api_version})"
        )));
    }
    if body_kind != kind {
        return Err(StatusError::bad_request(format!(
            "the kind in the data ({body_kind}) does not match the expected kind ({kind})"
        )));
    }
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    for field in ["labels", "annotations"] {
        if let Some(value) = obj.pointer(&format!("/metadata/{field}"))
            && !value.is_null()
            && !value
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string))
        {
            return Err(StatusError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: metadata.{field} must be a map of strings"
            )));
        }
    }
    Ok(())
}

/// A `FieldValueTypeInvalid` cause: `field` holds `value` where the schema wants `expected`.
pub(crate) fn type_cause(field: &str, value: &Value, expected: &str) -> Cause {
    let actual = json_type(value);
    Cause::new(
        "FieldValueTypeInvalid",
        format!(
            "Invalid value: \"{actual}\": {field} in body must be of type {expected}: \"{actual}\""
        ),
        field,
    )
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Object-name causes of `obj`: `metadata.name` required, then [`validate_name`].
pub(crate) fn name_causes(obj: &Value) -> Vec<Cause> {
    match obj.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) => validate_name(name),
        None => vec![Cause::new(
            "FieldValueRequired",
            "Required value: name or generateName is required",
            "metadata.name",
        )],
    }
}

/// Object-name causes for `metadata.name` (DNS-1123 subdomain, at most 253 characters).
pub(crate) fn validate_name(name: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if name.len() > 253 {
        causes.push(Cause::new(
            "FieldValueInvalid",
            format!("Invalid value: {name:?}: must be no more than 253 characters"),
            "metadata.name",
        ));
    }
    if !is_dns1123_subdomain(name) {
        causes.push(Cause::new(
            "FieldValueInvalid",
            format!("Invalid value: {name:?}: {DNS1123_SUBDOMAIN_MSG}"),
            "metadata.name",
        ));
    }
    causes
}

/// Whether `name` matches `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    is_alnum(*first)
                        && is_alnum(*last)
                        && bytes.iter().all(|b| is_alnum(*b) || *b == b'-')
                }
                _ => false,
            }
        })
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}
