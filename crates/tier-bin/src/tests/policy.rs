//! The ValidatingAdmissionPolicy of `deploy/components/self-signed-cert`, evaluated: its CEL is
//! run by an independent CEL implementation (the `cel` crate, optional syntax on, as
//! Kubernetes enables it) against updates of the shipped webhook configuration. Every field
//! but `caBundle` that tierd's service account changes is denied; `caBundle` alone is allowed;
//! other users are not matched. kustomize.rs checks the policy's shape, this its meaning.
//!
//! What this cannot show: kube-apiserver's type checking against the OpenAPI schema, and its
//! cost limits. The expressions are evaluated over the objects as JSON, which is what the
//! policy sees of fields that are set.

use std::collections::HashMap;

use cel::Value as Cel;
use cel::parser::Parser;
use serde_json::{Value, json};

/// The first document of `deploy/<path>`, as JSON.
fn deploy(path: &str) -> Value {
    let text = std::fs::read_to_string(super::kustomize::deploy().join(path)).unwrap();
    let first = super::kustomize::documents(&text)
        .into_iter()
        .next()
        .unwrap();
    serde_json::to_value(first).unwrap()
}

fn policy() -> Value {
    let policy = deploy("components/self-signed-cert/validatingadmissionpolicy.yaml");
    assert_eq!(policy["kind"], "ValidatingAdmissionPolicy");
    policy
}

/// The shipped webhook configuration with the `caBundle` tierd had put in.
fn configuration() -> Value {
    let mut configuration = deploy("webhook.yaml");
    assert_eq!(configuration["kind"], "ValidatingWebhookConfiguration");
    configuration["webhooks"][0]["clientConfig"]["caBundle"] = json!("T0xEIENB");
    configuration
}

fn evaluate(expression: &str, context: &cel::Context<'_>) -> Cel {
    let parsed = Parser::default()
        .enable_optional_syntax(true)
        .parse(expression)
        .unwrap_or_else(|e| panic!("{expression}: {e:?}"));
    Cel::resolve(&parsed, context).unwrap_or_else(|e| panic!("{expression}: {e:?}"))
}

/// What the policy decides about `user` updating `old` to `new`: `None` when it does not
/// match, else the messages of the validations that failed (empty: allowed).
fn decide(user: &str, old: &Value, new: &Value) -> Option<Vec<String>> {
    let policy = policy();
    let spec = &policy["spec"];
    let mut context = cel::Context::default();
    context
        .add_variable(
            "request",
            json!({"userInfo": {"username": user}, "operation": "UPDATE"}),
        )
        .unwrap();
    context.add_variable("object", new).unwrap();
    context.add_variable("oldObject", old).unwrap();
    for condition in spec["matchConditions"].as_array().unwrap() {
        let expression = condition["expression"].as_str().unwrap();
        match evaluate(expression, &context) {
            Cel::Bool(true) => {}
            Cel::Bool(false) => return None,
            other => panic!("{expression} gave {other:?}, not a bool"),
        }
    }
    // Variables in order, each seeing the ones before it, as Kubernetes composes them.
    let mut variables: HashMap<String, Cel> = HashMap::new();
    for variable in spec["variables"].as_array().unwrap() {
        let name = variable["name"].as_str().unwrap().to_owned();
        context.add_variable_from_value("variables", variables.clone());
        let value = evaluate(variable["expression"].as_str().unwrap(), &context);
        variables.insert(name, value);
    }
    context.add_variable_from_value("variables", variables);
    let mut failed = Vec::new();
    for validation in spec["validations"].as_array().unwrap() {
        let expression = validation["expression"].as_str().unwrap();
        match evaluate(expression, &context) {
            Cel::Bool(true) => {}
            Cel::Bool(false) => failed.push(validation["message"].as_str().unwrap().to_owned()),
            other => panic!("{expression} gave {other:?}, not a bool"),
        }
    }
    Some(failed)
}

const TIERD: &str = "system:serviceaccount:kube-system:tierd";

#[test]
fn tierd_may_change_the_ca_bundle_and_nothing_else() {
    let old = configuration();
    let mut new = old.clone();
    new["webhooks"][0]["clientConfig"]["caBundle"] = json!("TkVXIENB");
    assert_eq!(decide(TIERD, &old, &new), Some(vec![]), "a new caBundle");
    // From the shipped empty one, in another namespace (kustomize's `namespace:`).
    let mut empty = old.clone();
    empty["webhooks"][0]["clientConfig"]["caBundle"] = json!("");
    assert_eq!(
        decide("system:serviceaccount:tier-system:tierd", &empty, &new),
        Some(vec![])
    );
    let mut unset = old.clone();
    let client = unset["webhooks"][0]["clientConfig"]
        .as_object_mut()
        .unwrap();
    client.remove("caBundle");
    assert_eq!(decide(TIERD, &unset, &new), Some(vec![]), "caBundle set");
    assert_eq!(decide(TIERD, &old, &old), Some(vec![]), "no change");
}

#[test]
fn every_other_change_by_tierd_is_denied() {
    let old = configuration();
    let webhook = |change: fn(&mut serde_json::Map<String, Value>)| {
        let mut new = old.clone();
        change(new["webhooks"][0].as_object_mut().unwrap());
        new
    };
    let changes: Vec<(&str, Value)> = vec![
        (
            "failurePolicy Ignore",
            webhook(|w| {
                w.insert("failurePolicy".into(), json!("Ignore"));
            }),
        ),
        (
            "failurePolicy removed (defaults to Fail, but not compared as such)",
            webhook(|w| {
                w.remove("failurePolicy");
            }),
        ),
        (
            "rules without DELETE",
            webhook(|w| {
                w["rules"][0]["operations"] = json!(["CREATE", "UPDATE"]);
            }),
        ),
        (
            "rules for another resource",
            webhook(|w| {
                w["rules"][0]["resources"] = json!(["networkpolicies"]);
            }),
        ),
        (
            "a namespaceSelector",
            webhook(|w| {
                w.insert(
                    "namespaceSelector".into(),
                    json!({"matchLabels": {"x": "y"}}),
                );
            }),
        ),
        (
            "an objectSelector",
            webhook(|w| {
                w.insert("objectSelector".into(), json!({"matchLabels": {"x": "y"}}));
            }),
        ),
        (
            "a matchCondition",
            webhook(|w| {
                w.insert(
                    "matchConditions".into(),
                    json!([{"name": "never", "expression": "false"}]),
                );
            }),
        ),
        (
            "matchPolicy Exact",
            webhook(|w| {
                w.insert("matchPolicy".into(), json!("Exact"));
            }),
        ),
        (
            "sideEffects Some",
            webhook(|w| {
                w.insert("sideEffects".into(), json!("Some"));
            }),
        ),
        (
            "timeoutSeconds 30",
            webhook(|w| {
                w.insert("timeoutSeconds".into(), json!(30));
            }),
        ),
        (
            "admissionReviewVersions v1beta1",
            webhook(|w| {
                w.insert("admissionReviewVersions".into(), json!(["v1beta1"]));
            }),
        ),
        (
            "another service",
            webhook(|w| {
                w["clientConfig"]["service"]["name"] = json!("evil");
            }),
        ),
        (
            "another path",
            webhook(|w| {
                w["clientConfig"]["service"]["path"] = json!("/allow-all");
            }),
        ),
        (
            "a URL instead of the service",
            webhook(|w| {
                let client = w["clientConfig"].as_object_mut().unwrap();
                client.remove("service");
                client.insert("url".into(), json!("https://evil.example/validate"));
            }),
        ),
        (
            "the webhook renamed",
            webhook(|w| {
                w.insert("name".into(), json!("other.tierd.io"));
            }),
        ),
    ];
    for (what, new) in changes {
        let failed = decide(TIERD, &old, &new).unwrap_or_else(|| panic!("{what}: not matched"));
        assert_eq!(
            failed,
            ["tierd may change only the caBundle of its webhooks"],
            "{what}"
        );
    }
    // A configuration that calls a URL (a copy edited by hand) keeps it.
    let mut by_url = old.clone();
    let client = by_url["webhooks"][0]["clientConfig"]
        .as_object_mut()
        .unwrap();
    client.remove("service");
    client.insert("url".into(), json!("https://tierd.example/validate/tier"));
    let mut elsewhere = by_url.clone();
    elsewhere["webhooks"][0]["clientConfig"]["url"] = json!("https://evil.example/validate");
    assert_eq!(
        decide(TIERD, &by_url, &elsewhere),
        Some(vec![
            "tierd may change only the caBundle of its webhooks".to_owned()
        ]),
        "another URL"
    );
    let mut added = old.clone();
    let copy = added["webhooks"][0].clone();
    added["webhooks"].as_array_mut().unwrap().push(copy);
    added["webhooks"][1]["name"] = json!("second.tierd.io");
    let mut removed = old.clone();
    removed["webhooks"] = json!([]);
    let mut none = old.clone();
    none.as_object_mut().unwrap().remove("webhooks");
    for (what, new) in [
        ("a webhook added", added),
        ("the webhook removed", removed),
        ("webhooks unset", none),
    ] {
        assert_eq!(
            decide(TIERD, &old, &new),
            Some(vec![
                "tierd may change only the caBundle of its webhooks".to_owned()
            ]),
            "{what}"
        );
    }
    let metadata = |field: &str, value: Value| {
        let mut new = old.clone();
        new["metadata"][field] = value;
        new
    };
    for (what, new) in [
        ("a label", metadata("labels", json!({"a": "b"}))),
        (
            "an annotation",
            metadata(
                "annotations",
                json!({"cert-manager.io/inject-ca-from": "x/y"}),
            ),
        ),
        ("a finalizer", metadata("finalizers", json!(["x/keep"]))),
        (
            "an owner",
            metadata(
                "ownerReferences",
                json!([{"apiVersion": "v1", "kind": "Namespace", "name": "x", "uid": "u"}]),
            ),
        ),
    ] {
        assert_eq!(
            decide(TIERD, &old, &new),
            Some(vec![
                "tierd may not change the labels, annotations, finalizers or owners of its webhook configuration"
                    .to_owned()
            ]),
            "{what}"
        );
    }
}

#[test]
fn only_tierds_service_account_is_held_to_it() {
    let old = configuration();
    let mut new = old.clone();
    new["webhooks"][0]["failurePolicy"] = json!("Ignore");
    for user in [
        "alice",
        "system:admin",
        "system:serviceaccount:kube-system:nottierd",
        "system:serviceaccount:kube-system:tierd-helper",
        "system:serviceaccount:tierd:controller",
        "tierd",
    ] {
        assert_eq!(decide(user, &old, &new), None, "{user}");
    }
    assert!(decide(TIERD, &old, &new).is_some_and(|failed| !failed.is_empty()));
}
