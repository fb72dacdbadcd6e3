//! The Tier custom resource (`tiers.crd.antrea.io/v1beta1`): names, an object builder, and the
//! CRD's structural-schema checks (pruning, types, bounds, object name) that kube-apiserver
//! applies before admission.

use serde_json::{Map, Value, json};

use crate::crd::{self, type_cause};
use crate::status::{Cause, ResourceName, StatusError};
use crate::util::object_name;

pub use crate::crd::is_dns1123_subdomain;

/// API group of the Tier CRD.
pub const GROUP: &str = "crd.antrea.io";
/// Served version of the Tier CRD.
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of Tier objects.
pub const API_VERSION: &str = "crd.antrea.io/v1beta1";
/// `kind` of Tier objects.
pub const KIND: &str = "Tier";
/// `kind` of Tier lists.
pub const LIST_KIND: &str = "TierList";
/// Plural resource name.
pub const PLURAL: &str = "tiers";
/// Tiers as named in Status messages.
pub const TIERS: ResourceName = ResourceName {
    group: GROUP,
    plural: PLURAL,
    kind: KIND,
};
/// Antrea's Tier CRD as a [`crd::Schema`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Schema;

impl crd::Schema for Schema {
    fn resource(&self) -> ResourceName {
        TIERS
    }

    fn api_version(&self) -> &'static str {
        API_VERSION
    }

    fn list_kind(&self) -> &'static str {
        LIST_KIND
    }

    fn check_type(&self, obj: &Value) -> Result<(), StatusError> {
        check_type(obj)
    }

    fn prepare(&self, obj: &mut Value, _old: Option<&Value>) -> Result<(), StatusError> {
        prune(obj);
        validate(obj)
    }
}

/// Largest valid `spec.priority`.
pub const MAX_PRIORITY: i64 = 255;

/// A Tier object as a client would send it for a create: `apiVersion`, `kind`,
/// `metadata.name`, `spec.priority` and, when given, `spec.description`.
pub fn tier(name: &str, priority: i64, description: Option<&str>) -> Value {
    let mut spec = json!({ "priority": priority });
    if let (Some(d), Some(map)) = (description, spec.as_object_mut()) {
        map.insert("description".into(), json!(d));
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": { "name": name },
        "spec": spec,
    })
}

/// `spec.priority` of a stored Tier, when it is an integer.
pub fn priority(obj: &Value) -> Option<i64> {
    obj.pointer("/spec/priority").and_then(Value::as_i64)
}

/// Checks `apiVersion` and `kind` of a request body (400 BadRequest when wrong, as the
/// decoder of kube-apiserver answers).
pub(crate) fn check_type(obj: &Value) -> Result<(), StatusError> {
    crd::check_type(obj, API_VERSION, KIND)
}

/// Drops fields the structural schema does not know (kube-apiserver prunes them silently).
pub(crate) fn prune(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    map.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "spec"));
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        crd::prune_metadata(meta);
    }
    if let Some(Value::Object(spec)) = map.get_mut("spec") {
        spec.retain(|k, _| matches!(k.as_str(), "priority" | "description"));
        // A JSON float with no fraction (`5.0`) is an integer to the schema.
        if let Some(p) = spec.get("priority").and_then(Value::as_f64)
            && !spec
                .get("priority")
                .is_some_and(|v| v.is_i64() || v.is_u64())
            && p.fract() == 0.0
            && p.abs() < 9.0e15
        {
            spec.insert("priority".into(), json!(p as i64));
        }
    }
}

/// Validates a (pruned) Tier against the CRD schema and object-name rules; every problem
/// becomes one cause of a 422 Invalid.
pub(crate) fn validate(obj: &Value) -> Result<(), StatusError> {
    let name = object_name(obj).unwrap_or_default();
    let mut causes = crd::name_causes(obj);
    match obj.get("spec") {
        None => causes.push(Cause::new("FieldValueRequired", "Required value", "spec")),
        Some(Value::Object(spec)) => validate_spec(spec, &mut causes),
        Some(other) => causes.push(type_cause("spec", other, "object")),
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(StatusError::invalid(GROUP, KIND, name, &causes))
    }
}

fn validate_spec(spec: &Map<String, Value>, causes: &mut Vec<Cause>) {
    match spec.get("priority") {
        None => causes.push(Cause::new(
            "FieldValueRequired",
            "Required value",
            "spec.priority",
        )),
        Some(v) if v.is_i64() || v.is_u64() => {
            let p = v.as_i64().unwrap_or(i64::MAX);
            if p > MAX_PRIORITY {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {v}: spec.priority in body should be less than or equal to {MAX_PRIORITY}"
                    ),
                    "spec.priority",
                ));
            } else if p < 0 {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {p}: spec.priority in body should be greater than or equal to 0"
                    ),
                    "spec.priority",
                ));
            }
        }
        Some(other) => causes.push(type_cause("spec.priority", other, "integer")),
    }
    if let Some(d) = spec.get("description")
        && !d.is_string()
    {
        causes.push(type_cause("spec.description", d, "string"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(obj: &Value) -> Vec<(String, String, String)> {
        match validate(obj) {
            Ok(()) => Vec::new(),
            Err(e) => e.details.as_ref().unwrap()["causes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["reason"].as_str().unwrap().to_owned(),
                        c["field"].as_str().unwrap().to_owned(),
                        c["message"].as_str().unwrap().to_owned(),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn accepts_a_valid_tier() {
        assert!(validate(&tier("baseline", 253, Some("x"))).is_ok());
        assert!(validate(&tier("a.b-c", 0, None)).is_ok());
    }

    #[test]
    fn reports_bounds_and_types() {
        assert_eq!(
            causes(&tier("t", 256, None)),
            vec![(
                "FieldValueInvalid".into(),
                "spec.priority".into(),
                "Invalid value: 256: spec.priority in body should be less than or equal to 255"
                    .into()
            )]
        );
        assert_eq!(causes(&tier("t", -1, None))[0].1, "spec.priority");
        let mut obj = tier("t", 1, None);
        obj["spec"]["priority"] = json!("high");
        obj["spec"]["description"] = json!(5);
        let c = causes(&obj);
        assert_eq!(c.len(), 2);
        assert_eq!(
            c[0].2,
            "Invalid value: \"string\": spec.priority in body must be of type integer: \"string\""
        );
        assert_eq!(c[1].1, "spec.description");
    }

    #[test]
    fn requires_spec_priority_and_name() {
        let mut obj = tier("t", 1, None);
        obj.as_object_mut().unwrap().remove("spec");
        obj["metadata"]["name"] = json!("Bad_Name");
        let c = causes(&obj);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].1, "metadata.name");
        assert_eq!(
            c[1],
            (
                "FieldValueRequired".into(),
                "spec".into(),
                "Required value".into()
            )
        );
        let mut obj = tier("t", 1, None);
        obj["spec"] = json!({});
        assert_eq!(causes(&obj)[0].1, "spec.priority");
    }

    #[test]
    fn prunes_unknown_fields() {
        let mut obj = tier("t", 1, None);
        obj["status"] = json!({"x": 1});
        obj["spec"]["extra"] = json!(true);
        obj["spec"]["priority"] = json!(7.0);
        obj["metadata"]["bogus"] = json!(1);
        prune(&mut obj);
        assert_eq!(obj, tier("t", 7, None));
    }

    #[test]
    fn checks_dns1123_subdomains() {
        assert!(is_dns1123_subdomain("a"));
        assert!(is_dns1123_subdomain("a-b.c9"));
        for bad in ["", "-a", "a-", "A", "a..b", "a_b", ".a"] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
        assert_eq!(crate::crd::validate_name(&"a".repeat(254)).len(), 1);
    }

    #[test]
    fn checks_type_meta() {
        assert!(check_type(&tier("t", 1, None)).is_ok());
        let mut obj = tier("t", 1, None);
        obj["apiVersion"] = json!("crd.antrea.io/v1alpha1");
        assert_eq!(check_type(&obj).unwrap_err().code, 400);
        obj["apiVersion"] = json!(API_VERSION);
        obj["kind"] = json!("Pod");
        assert_eq!(check_type(&obj).unwrap_err().code, 400);
        assert_eq!(check_type(&json!([1])).unwrap_err().code, 400);
        let mut obj = tier("t", 1, None);
        obj["metadata"]["labels"] = json!({"a": 1});
        assert_eq!(check_type(&obj).unwrap_err().code, 400);
    }
}
