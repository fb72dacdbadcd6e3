//! Property tests of the Tier webhook's AdmissionReview handling ([`Webhook::review_json`]): it
//! never panics; a body that is not a reviewable AdmissionReview gets a [`ReviewError`] (HTTP
//! 400); every accepted review is answered with a response review that echoes the uid; and a
//! well-formed review of a Tier gets exactly Antrea's verdict. The cargo-fuzz versions live in
//! `fuzz/` at the top of the repository.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use kube_core::DynamicObject;
use kube_core::admission::AdmissionReview;
use proptest::prelude::*;
use tier_core::admission::AdmissionPolicy;
use tier_core::{FixedLister, ObservedTier, Snapshot, TierLister};
use tier_server::readiness::{
    ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, CacheSynced, CheckState, TIER_CACHE_SYNCED, from_fn,
};
use tier_server::webhook::ReviewError;
use tier_server::{PolicyReferences, Readiness, Webhook};

const CONTROLLER: &str = "system:serviceaccount:kube-system:tierd";

/// Antrea's system Tiers, the webhook's cache.
const SYSTEM: [(&str, i64); 6] = [
    ("baseline", 253),
    ("application", 250),
    ("platform", 200),
    ("networkops", 150),
    ("securityops", 100),
    ("emergency", 50),
];

const RESERVED: [i64; 4] = [251, 252, 254, 255];

/// The webhook over the system Tiers, its `tier-cache-synced` check passing.
fn webhook() -> Webhook {
    let tiers = SYSTEM.map(|(name, priority)| ObservedTier {
        name: name.into(),
        priority,
        description: String::new(),
        resource_version: "1".into(),
    });
    let lister: Arc<dyn TierLister> = Arc::new(FixedLister::new(Snapshot::synced(1, tiers)));
    let readiness = Readiness::new();
    readiness
        .register(TIER_CACHE_SYNCED, CacheSynced::new(lister.clone()))
        .register(ACNP_CACHE_SYNCED, from_fn(|| CheckState::Ok))
        .register(ANNP_CACHE_SYNCED, from_fn(|| CheckState::Ok));
    // No policy references any Tier.
    let none = Arc::new(BTreeMap::<String, usize>::new());
    Webhook::new(lister, AdmissionPolicy::antrea(CONTROLLER), &readiness)
        .policy_references(PolicyReferences::new(none.clone(), none))
}

/// Reviews `body`; a refusal must be the HTTP 400 path with a message, returned here.
fn review(webhook: &Webhook, body: &[u8]) -> Result<AdmissionReview<DynamicObject>, String> {
    webhook.review_json(body).map_err(|error: ReviewError| {
        let message = error.to_string();
        assert!(!message.is_empty());
        assert_eq!(
            error.into_response().status(),
            StatusCode::BAD_REQUEST,
            "{message}"
        );
        message
    })
}

/// Checks an accepted review's answer: a v1 response review echoing `uid` that encodes.
fn check_answer(answer: &AdmissionReview<DynamicObject>, uid: &str) {
    assert_eq!(answer.types.api_version, "admission.k8s.io/v1");
    assert_eq!(answer.types.kind, "AdmissionReview");
    assert!(answer.request.is_none());
    let response = answer.response.as_ref().expect("a response");
    assert_eq!(response.uid, uid);
    if !response.allowed {
        assert!(!response.result.message.is_empty(), "a denial says why");
    }
    let encoded = serde_json::to_vec(answer).expect("the answer encodes");
    let decoded: serde_json::Value = serde_json::from_slice(&encoded).unwrap();
    assert_eq!(decoded["response"]["uid"], uid);
}

// ---------------------------------------------------------------------------------------------
// JSON values, numbers beyond any machine type included.

/// A JSON value; `Number` holds number text as sent, so it can exceed `i64`, `u64` and `f64`.
#[derive(Clone, Debug)]
enum Json {
    Null,
    Bool(bool),
    Number(String),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn str(s: &str) -> Self {
        Json::Str(s.to_owned())
    }

    fn int(i: i64) -> Self {
        Json::Number(i.to_string())
    }

    fn object<const N: usize>(fields: [(&str, Json); N]) -> Self {
        Json::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            Json::Number(n) => out.push_str(n),
            Json::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(key).unwrap());
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }

    /// Whether serde_json reads every number (it refuses those beyond `f64`).
    fn numbers_fit(&self) -> bool {
        match self {
            Json::Number(n) => serde_json::from_str::<serde_json::Value>(n).is_ok(),
            Json::Array(items) => items.iter().all(Json::numbers_fit),
            Json::Object(fields) => fields.iter().all(|(_, v)| v.numbers_fit()),
            _ => true,
        }
    }

    /// What `serde_json::Value::as_i64` makes of this value (serde_json is the oracle).
    fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Number(n) => serde_json::from_str::<serde_json::Value>(n)
                .ok()
                .and_then(|v| v.as_i64()),
            _ => None,
        }
    }

    /// The value of `key` in an object, as serde_json keeps it (the last one).
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(fields) => fields.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn depth(&self) -> usize {
        match self {
            Json::Array(items) => 1 + items.iter().map(Json::depth).max().unwrap_or(0),
            Json::Object(fields) => 1 + fields.iter().map(|(_, v)| v.depth()).max().unwrap_or(0),
            _ => 0,
        }
    }
}

/// Number text: machine integers and floats, and numbers beyond them.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        any::<u64>().prop_map(|u| u.to_string()),
        (0i64..=300).prop_map(|i| i.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
        "-?[1-9][0-9]{19,80}",
        "-?[0-9]\\.[0-9]{1,5}[eE][+-]?[0-9]{1,4}",
        Just("-0".to_owned()),
        Just("10.0".to_owned()),
        Just("1e400".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("-9223372036854775809".to_owned()),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9.-]{0,12}",
        any::<String>(),
        Just(String::new()),
        Just("\u{0}\u{feff}\u{10ffff}\u{2028}".to_owned()),
    ]
}

fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        number().prop_map(Json::Number),
        text().prop_map(Json::Str),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
            prop::collection::vec((text(), inner), 0..6).prop_map(Json::Object),
        ]
    })
}

// ---------------------------------------------------------------------------------------------
// Structurally valid AdmissionReviews.

/// A Tier object: its name and spec.
#[derive(Clone, Debug)]
struct Tier {
    name: Option<String>,
    spec: Spec,
    /// Extra keys on the object, `x-` prefixed so that they are not the object's.
    extra: Vec<(String, Json)>,
}

#[derive(Clone, Debug)]
enum Spec {
    Absent,
    /// `spec` is not an object.
    NotObject(Json),
    Fields {
        priority: Option<Json>,
        description: Option<Json>,
        /// Extra spec keys, `x-` prefixed.
        extra: Vec<(String, Json)>,
    },
}

impl Tier {
    fn json(&self) -> Json {
        let mut metadata = vec![("resourceVersion".to_owned(), Json::str("7"))];
        if let Some(name) = &self.name {
            metadata.push(("name".to_owned(), Json::str(name)));
        }
        let mut fields = vec![
            ("apiVersion".to_owned(), Json::str("crd.antrea.io/v1beta1")),
            ("kind".to_owned(), Json::str("Tier")),
            ("metadata".to_owned(), Json::Object(metadata)),
        ];
        match &self.spec {
            Spec::Absent => {}
            Spec::NotObject(j) => fields.push(("spec".to_owned(), j.clone())),
            Spec::Fields {
                priority,
                description,
                extra,
            } => {
                let mut spec = Vec::new();
                if let Some(p) = priority {
                    spec.push(("priority".to_owned(), p.clone()));
                }
                if let Some(d) = description {
                    spec.push(("description".to_owned(), d.clone()));
                }
                spec.extend(extra.iter().map(|(k, v)| (format!("x-{k}"), v.clone())));
                fields.push(("spec".to_owned(), Json::Object(spec)));
            }
        }
        fields.extend(
            self.extra
                .iter()
                .map(|(k, v)| (format!("x-{k}"), v.clone())),
        );
        Json::Object(fields)
    }

    /// `spec.priority` as the webhook reads it.
    fn priority(&self) -> Option<i64> {
        match &self.spec {
            Spec::Absent => None,
            Spec::NotObject(spec) => spec.get("priority").and_then(Json::as_i64),
            Spec::Fields { priority, .. } => priority.as_ref().and_then(Json::as_i64),
        }
    }
}

/// A priority of any JSON type, mostly numbers.
fn priority() -> impl Strategy<Value = Json> {
    prop_oneof![
        4 => (0i64..=260).prop_map(Json::int),
        2 => Just(()).prop_flat_map(|()| prop::sample::select(SYSTEM.map(|(_, p)| p).to_vec()))
            .prop_map(Json::int),
        1 => prop::sample::select(RESERVED.to_vec()).prop_map(Json::int),
        4 => number().prop_map(Json::Number),
        1 => json(),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(SYSTEM.map(|(n, _)| n.to_owned()).to_vec()),
        "[a-z][a-z0-9-]{0,10}",
        text(),
    ]
}

fn extra() -> impl Strategy<Value = Vec<(String, Json)>> {
    prop::collection::vec(("[a-z]{1,6}", json()), 0..3)
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        8 => (
            prop::option::weighted(0.9, priority()),
            prop::option::of(prop_oneof![text().prop_map(Json::Str), json()]),
            extra(),
        )
            .prop_map(|(priority, description, extra)| Spec::Fields {
                priority,
                description,
                extra,
            }),
        1 => Just(Spec::Absent),
        1 => json().prop_map(Spec::NotObject),
    ]
}

fn tier() -> impl Strategy<Value = Tier> {
    (prop::option::weighted(0.8, name()), spec(), extra()).prop_map(|(name, spec, extra)| Tier {
        name,
        spec,
        extra,
    })
}

/// A review kube-apiserver could send, with random fields.
#[derive(Clone, Debug)]
struct Case {
    uid: String,
    operation: &'static str,
    /// A Tier, or another kind (group, kind).
    kind: Option<(String, String)>,
    name: String,
    user: Option<String>,
    object: Option<Tier>,
    old_object: Option<Tier>,
    /// `None` objects are sent as `null` (else left out).
    nulls: bool,
    /// Extra keys on the request, `x-` prefixed.
    extra: Vec<(String, Json)>,
}

/// What the webhook must answer.
#[derive(Debug, PartialEq)]
enum Expected {
    Allowed,
    /// A rule denial: Antrea's message, no code.
    Rule(String),
    /// The request lacks a priority: code 400, message naming the field.
    BadRequest(&'static str),
}

impl Case {
    fn json(&self) -> Json {
        let (group, kind) = self
            .kind
            .clone()
            .unwrap_or_else(|| ("crd.antrea.io".to_owned(), "Tier".to_owned()));
        let gvk = Json::object([
            ("group", Json::Str(group)),
            ("version", Json::str("v1beta1")),
            ("kind", Json::Str(kind)),
        ]);
        let mut user = vec![("groups".to_owned(), Json::Array(vec![]))];
        if let Some(u) = &self.user {
            user.push(("username".to_owned(), Json::str(u)));
        }
        let mut request = vec![
            ("uid".to_owned(), Json::str(&self.uid)),
            ("kind".to_owned(), gvk.clone()),
            (
                "resource".to_owned(),
                Json::object([
                    ("group", Json::str("crd.antrea.io")),
                    ("version", Json::str("v1beta1")),
                    ("resource", Json::str("tiers")),
                ]),
            ),
            ("requestKind".to_owned(), gvk),
            ("name".to_owned(), Json::str(&self.name)),
            ("operation".to_owned(), Json::str(self.operation)),
            ("userInfo".to_owned(), Json::Object(user)),
            ("dryRun".to_owned(), Json::Bool(false)),
        ];
        for (key, object) in [("object", &self.object), ("oldObject", &self.old_object)] {
            match object {
                Some(tier) => request.push((key.to_owned(), tier.json())),
                None if self.nulls => request.push((key.to_owned(), Json::Null)),
                None => {}
            }
        }
        request.extend(
            self.extra
                .iter()
                .map(|(k, v)| (format!("x-{k}"), v.clone())),
        );
        Json::object([
            ("apiVersion", Json::str("admission.k8s.io/v1")),
            ("kind", Json::str("AdmissionReview")),
            ("request", Json::Object(request)),
        ])
    }

    /// Whether the webhook must accept it: serde_json reads every number and the nesting.
    fn is_readable(&self) -> bool {
        let json = self.json();
        json.numbers_fit() && json.depth() < 100
    }

    /// Antrea's verdict, computed independently of the webhook.
    fn expected(&self) -> Expected {
        if self.kind.is_some() {
            return Expected::Allowed;
        }
        let name = if self.name.is_empty() {
            self.object
                .as_ref()
                .or(self.old_object.as_ref())
                .and_then(|t| t.name.clone())
                .unwrap_or_default()
        } else {
            self.name.clone()
        };
        let user = self.user.as_deref().unwrap_or_default();
        let priority = |tier: &Option<Tier>, field| match tier {
            None => Err(Expected::BadRequest(field)),
            Some(t) => t.priority().ok_or(Expected::BadRequest(field)),
        };
        let outcome = match self.operation {
            "CREATE" => priority(&self.object, "object").map(|p| {
                if RESERVED.contains(&p) {
                    Expected::Rule(format!("tier {name} priority {p} is reserved"))
                } else if SYSTEM.iter().any(|(_, s)| *s == p) {
                    Expected::Rule(format!(
                        "tier {name} priority {p} overlaps with existing Tier"
                    ))
                } else {
                    Expected::Allowed
                }
            }),
            "UPDATE" => priority(&self.old_object, "oldObject").and_then(|old| {
                let new = priority(&self.object, "object")?;
                Ok(if old != new && user != CONTROLLER {
                    Expected::Rule("update to Tier priority is not allowed".to_owned())
                } else {
                    Expected::Allowed
                })
            }),
            "DELETE" if SYSTEM.iter().any(|(s, _)| *s == name) => Ok(Expected::Rule(format!(
                "cannot delete reserved tier {name}"
            ))),
            _ => Ok(Expected::Allowed),
        };
        outcome.unwrap_or_else(|bad| bad)
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            text(),
            prop::sample::select(vec!["CREATE", "UPDATE", "DELETE", "CONNECT"]),
            prop::option::weighted(0.1, (text(), text())),
            prop_oneof![Just(String::new()), name()],
            prop::option::weighted(
                0.95,
                prop_oneof![Just(CONTROLLER.to_owned()), "[a-z]{1,8}", text()],
            ),
        ),
        (
            prop::option::weighted(0.9, tier()),
            prop::option::weighted(0.9, tier()),
            any::<bool>(),
            extra(),
        ),
    )
        .prop_map(
            |((uid, operation, kind, name, user), (object, old_object, nulls, extra))| Case {
                uid,
                operation,
                kind,
                name,
                user,
                object,
                old_object,
                nulls,
                extra,
            },
        )
}

// ---------------------------------------------------------------------------------------------
// Mutations of valid reviews.

#[derive(Clone, Debug)]
enum Mutation {
    Replace(Json),
    Remove,
    Insert(String, Json),
}

/// Applies `mutation` at the node `path` leads to (indices taken modulo the children).
fn mutate(node: &mut Json, path: &[usize], mutation: &Mutation) {
    if let Some((&i, rest)) = path.split_first() {
        let child = match node {
            Json::Array(items) if !items.is_empty() => {
                let n = items.len();
                if rest.is_empty() && matches!(mutation, Mutation::Remove) {
                    items.remove(i % n);
                    return;
                }
                &mut items[i % n]
            }
            Json::Object(fields) if !fields.is_empty() => {
                let n = fields.len();
                if rest.is_empty() && matches!(mutation, Mutation::Remove) {
                    fields.remove(i % n);
                    return;
                }
                &mut fields[i % n].1
            }
            _ => return apply(node, mutation),
        };
        return mutate(child, rest, mutation);
    }
    apply(node, mutation);
}

fn apply(node: &mut Json, mutation: &Mutation) {
    match (mutation, node) {
        (Mutation::Insert(key, value), Json::Object(fields)) => {
            fields.push((key.clone(), value.clone()));
        }
        (Mutation::Insert(_, value), Json::Array(items)) => items.push(value.clone()),
        (Mutation::Replace(value) | Mutation::Insert(_, value), node) => *node = value.clone(),
        (Mutation::Remove, node) => *node = Json::Null,
    }
}

fn mutation() -> impl Strategy<Value = (Vec<usize>, Mutation)> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "apiVersion",
            "kind",
            "request",
            "uid",
            "operation",
            "object",
            "oldObject",
            "spec",
            "priority",
            "metadata",
            "name",
            "userInfo",
        ])
        .prop_map(str::to_owned),
        text(),
    ];
    (
        prop::collection::vec(any::<usize>(), 0..6),
        prop_oneof![
            json().prop_map(Mutation::Replace),
            Just(Mutation::Remove),
            (key, json()).prop_map(|(k, v)| Mutation::Insert(k, v)),
        ],
    )
}

/// The string at `request.uid`, if both keys occur exactly once.
fn sent_uid(review: &Json) -> Option<&str> {
    fn only<'a>(node: &'a Json, key: &str) -> Option<&'a Json> {
        let Json::Object(fields) = node else {
            return None;
        };
        let mut found = fields.iter().filter(|(k, _)| k == key).map(|(_, v)| v);
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }
    match only(only(review, "request")?, "uid")? {
        Json::Str(uid) => Some(uid),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// The properties.

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let webhook = webhook();
        if let Ok(answer) = review(&webhook, &body) {
            let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
            check_answer(&answer, sent["request"]["uid"].as_str().unwrap());
        }
    }

    #[test]
    fn arbitrary_json_is_refused(value in json()) {
        // No top-level value of this generator has `request` with all required fields.
        let body = value.render();
        prop_assert!(review(&webhook(), body.as_bytes()).is_err(), "{}", body);
    }

    #[test]
    fn a_readable_review_gets_antreas_verdict(case in case()) {
        let body = case.json().render();
        let answer = review(&webhook(), body.as_bytes());
        if !case.is_readable() {
            // Numbers beyond f64 or nesting beyond serde_json's limit: refused, or answered.
            if let Ok(answer) = answer {
                check_answer(&answer, &case.uid);
            }
            return Ok(());
        }
        let answer = answer.unwrap_or_else(|_| panic!("refused: {body}"));
        check_answer(&answer, &case.uid);
        let response = answer.response.unwrap();
        match case.expected() {
            Expected::Allowed => prop_assert!(response.allowed, "{:?}", response.result),
            Expected::Rule(message) => {
                prop_assert!(!response.allowed);
                prop_assert_eq!(response.result.message, message);
                prop_assert_eq!(response.result.code, 0);
            }
            Expected::BadRequest(field) => {
                prop_assert!(!response.allowed);
                prop_assert_eq!(response.result.code, 400);
                prop_assert!(
                    response.result.message.contains(&format!("{field}.spec.priority is missing"))
                        || response.result.message.contains(&format!("has no {field}")),
                    "{}",
                    response.result.message
                );
            }
        }
    }

    #[test]
    fn a_mutated_review_is_answered_or_refused(
        case in case(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut json = case.json();
        for (path, m) in &mutations {
            mutate(&mut json, path, m);
        }
        let body = json.render();
        if let Ok(answer) = review(&webhook(), body.as_bytes()) {
            let uid = sent_uid(&json).unwrap_or_else(|| panic!("accepted without one uid: {body}"));
            check_answer(&answer, uid);
        }
    }

    #[test]
    fn a_truncated_review_is_refused(case in case(), cut in any::<prop::sample::Index>()) {
        let body = case.json().render();
        let cut = cut.index(body.len());
        // Every strict prefix of a JSON object is incomplete.
        prop_assert!(review(&webhook(), &body.as_bytes()[..cut]).is_err());
    }
}

#[test]
fn deep_nesting_is_refused_quickly() {
    let webhook = webhook();
    for body in [
        "[".repeat(1 << 20),
        "{\"a\":".repeat(1 << 18),
        format!(
            "{{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{}",
            "[".repeat(1 << 20)
        ),
    ] {
        let start = Instant::now();
        assert!(review(&webhook, body.as_bytes()).is_err());
        let elapsed = start.elapsed();
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    }
}

#[test]
fn huge_reviews_are_reviewed_quickly() {
    // A valid review carrying ~2 MiB of unknown fields and a 1 MiB description.
    let filler: Vec<(String, Json)> = (0..20_000)
        .map(|i| {
            let value = Json::Array(vec![
                Json::int(i),
                Json::Number("2.5".to_owned()),
                Json::str("s"),
                Json::Null,
                Json::Object(vec![]),
            ]);
            (i.to_string(), value)
        })
        .collect();
    let case = Case {
        uid: "u".to_owned(),
        operation: "CREATE",
        kind: None,
        name: "mine".to_owned(),
        user: Some("alice".to_owned()),
        object: Some(Tier {
            name: Some("mine".to_owned()),
            spec: Spec::Fields {
                priority: Some(Json::int(10)),
                description: Some(Json::Str("d".repeat(1 << 20))),
                extra: vec![],
            },
            extra: filler.clone(),
        }),
        old_object: None,
        nulls: false,
        extra: filler,
    };
    let body = case.json().render();
    let start = Instant::now();
    let answer = review(&webhook(), body.as_bytes()).unwrap();
    let elapsed = start.elapsed();
    check_answer(&answer, "u");
    assert!(answer.response.unwrap().allowed);
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}
