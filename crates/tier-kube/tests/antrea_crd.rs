//! tierd's Tier CRD is schema-equivalent to Antrea's newest one, field by field, so applying
//! `deploy/crd.yaml` (or `tierd crd`) over an Antrea installation changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;

/// A verbatim copy of Antrea's `build/charts/antrea/crds/tier.yaml`; provenance in its header.
const ANTREA: &str = include_str!("fixtures/antrea-tier-crd.yaml");

/// Every leaf where `ours` and `theirs` differ, as `path: ours != theirs`; numbers compare by
/// value (`255` and `255.0` are the same bound to the API server).
fn differences(path: &str, ours: &Value, theirs: &Value, out: &mut Vec<String>) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let null = Value::Null;
                differences(
                    &format!("{path}.{key}"),
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                differences(
                    &format!("{path}[{i}]"),
                    a.get(i).unwrap_or(&Value::Null),
                    b.get(i).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path}: tierd has {a}, Antrea has {b}")),
    }
}

fn antrea() -> Value {
    serde_yaml::from_str(ANTREA).unwrap()
}

#[test]
fn the_crd_equals_antreas_field_by_field() {
    let ours = tier_kube::crd::crd_value().unwrap();
    let mut out = Vec::new();
    differences("", &ours, &antrea(), &mut out);
    assert!(out.is_empty(), "differences:\n{}", out.join("\n"));
}

#[test]
fn the_rendered_yaml_parses_back_to_the_same_crd() {
    let yaml: Value = serde_yaml::from_str(&tier_kube::crd::crd_yaml().unwrap()).unwrap();
    let mut out = Vec::new();
    differences("", &yaml, &antrea(), &mut out);
    assert!(out.is_empty(), "differences:\n{}", out.join("\n"));
    let bounds = &yaml["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["priority"];
    assert!(bounds["maximum"].is_u64(), "integer bound: {bounds}");
}

#[test]
fn the_comparison_sees_a_difference() {
    // The comparison itself can fail: a top-level `required: [spec]` (tierd's old CRD) shows.
    let mut ours = tier_kube::crd::crd_value().unwrap();
    ours["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["required"] =
        serde_json::json!(["spec"]);
    let mut out = Vec::new();
    differences("", &ours, &antrea(), &mut out);
    assert_eq!(
        out,
        [
            ".spec.versions[0].schema.openAPIV3Schema.required: tierd has [\"spec\"], Antrea has null"
        ]
    );
}
