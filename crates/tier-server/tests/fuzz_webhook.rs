//! Property tests of the Tier webhook's AdmissionReview handling ([`Webhook::review_json`]): it
//! never panics; a body that is not a reviewable AdmissionReview gets a [`ReviewError`] (HTTP
//! 400); every accepted review is answered with a response review that echoes the uid; and a
//! well-formed review of a Tier gets exactly Antrea's verdict. Inputs come from the one
//! AdmissionReview model in `testing/tier-fuzz-model`, which the cargo-fuzz targets in `fuzz/` (at
//! the top of the repository) use too.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use kube_core::DynamicObject;
use kube_core::admission::AdmissionReview;
use proptest::prelude::*;
use tier_core::admission::AdmissionPolicy;
use tier_core::{FixedLister, ObservedTier, Snapshot, TierLister};
use tier_fuzz_model::arbitrary::{Arbitrary, Unstructured};
use tier_fuzz_model::{
    CONTROLLER, Expected, Field, Json, Kind, Mutation, Name, Object, Operation, Priority, Review,
    SYSTEM, Spec, User,
};
use tier_server::readiness::Readiness;
use tier_server::readiness::{
    ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, CacheSynced, CheckState, TIER_CACHE_SYNCED, from_fn,
};
use tier_server::webhook::ReviewError;
use tier_server::webhook::{PolicyReferences, Webhook};

/// The webhook over Antrea's system Tiers, its `tier-cache-synced` check passing.
fn webhook() -> Webhook {
    let tiers = SYSTEM.map(|(name, priority)| ObservedTier {
        name: name.into(),
        priority,
        description: String::new(),
        resource_version: "1".into(),
        last_writer: None,
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
    now(webhook.review_json(body)).map_err(|error: ReviewError| {
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
// The inputs: the one AdmissionReview model of `tier-fuzz-model` (the cargo-fuzz targets' too),
// built from proptest's bytes as libFuzzer builds it from its own.

/// A `T` of the shared model, built from up to `max_len` arbitrary bytes (shrinking shrinks them).
fn model<T>(max_len: usize) -> impl Strategy<Value = T>
where
    T: for<'a> Arbitrary<'a> + std::fmt::Debug,
{
    prop::collection::vec(any::<u8>(), 0..max_len)
        .prop_filter_map("bytes the model cannot use", |bytes| {
            T::arbitrary_take_rest(Unstructured::new(&bytes)).ok()
        })
}

fn review_model() -> impl Strategy<Value = Review> {
    model(2048)
}

// ---------------------------------------------------------------------------------------------
// The properties.

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let webhook = webhook();
        if let Ok(answer) = review(&webhook, &body) {
            // Like the webhook, read only `request.uid` (ignored fields' strings are not
            // validated).
            #[derive(serde::Deserialize)]
            struct Sent { request: SentRequest }
            #[derive(serde::Deserialize)]
            struct SentRequest { uid: String }
            let sent: Sent = serde_json::from_slice(&body).unwrap();
            check_answer(&answer, &sent.request.uid);
        }
    }

    #[test]
    fn arbitrary_json_is_refused(value in model::<Json>(1024)) {
        // No top-level value of this generator has `request` with all required fields.
        let body = value.render();
        prop_assert!(review(&webhook(), body.as_bytes()).is_err(), "{}", body);
    }

    #[test]
    fn a_mutated_review_is_answered_or_refused(
        case in review_model(),
        mutations in prop::collection::vec(
            (prop::collection::vec(any::<usize>(), 0..6), model::<Mutation>(256)),
            1..4,
        ),
    ) {
        let mut json = case.json();
        for (path, m) in &mutations {
            m.apply(&mut json, path);
        }
        let body = json.render();
        if let Ok(answer) = review(&webhook(), body.as_bytes()) {
            let uid = json.sent_uid().unwrap_or_else(|| panic!("accepted without one uid: {body}"));
            check_answer(&answer, uid);
        }
    }

    #[test]
    fn a_truncated_review_is_refused(case in review_model(), cut in any::<prop::sample::Index>()) {
        let body = case.json().render();
        let cut = cut.index(body.len());
        // Every strict prefix of a JSON object is incomplete.
        prop_assert!(review(&webhook(), &body.as_bytes()[..cut]).is_err());
    }
}

proptest! {
    // About one review in six of the model is well-formed: more cases, so that some 170 get a
    // verdict checked each run.
    #![proptest_config(ProptestConfig::with_cases(1024))]
    #[test]
    fn a_readable_review_gets_antreas_verdict(case in review_model()) {
        let json = case.json();
        let body = json.render();
        let answer = review(&webhook(), body.as_bytes());
        if !case.is_well_formed() {
            // A part replaced, numbers beyond f64 or nesting beyond serde_json's limit: refused,
            // or answered with the uid sent.
            if let Ok(answer) = answer {
                let uid = json.sent_uid().unwrap_or_else(|| panic!("accepted without one uid: {body}"));
                check_answer(&answer, uid);
            }
            return Ok(());
        }
        let answer = answer.unwrap_or_else(|_| panic!("refused: {body}"));
        let uid = case.uid.value().expect("a well-formed review has a uid");
        check_answer(&answer, uid);
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
            Expected::InvalidName => {
                prop_assert!(!response.allowed);
                prop_assert_eq!(response.result.code, 400);
                prop_assert!(
                    response.result.message.contains("is not a valid DNS-1123 subdomain"),
                    "{}",
                    response.result.message
                );
                // The name is echoed at most truncated.
                prop_assert!(response.result.message.len() < 2048);
            }
        }
    }
}

/// `Webhook::respond` (the route's handler, which writes the response from borrowed fields)
/// answers `body` exactly as kube-core encodes `review_json`'s answer: the same status and the
/// same bytes. Each side gets a fresh webhook, so reservations made by one do not decide the
/// other.
fn assert_same_answer(body: &[u8]) {
    let expected = match now(webhook().review_json(body)) {
        Ok(review) => (StatusCode::OK, serde_json::to_vec(&review).unwrap()),
        Err(error) => {
            let response = error.into_response();
            (response.status(), body_of(response))
        }
    };
    let response = now(webhook().respond(body));
    let status = response.status();
    if status == StatusCode::OK {
        assert_eq!(
            response.headers().get("content-type").unwrap(),
            "application/json"
        );
    }
    let actual = (status, body_of(response));
    assert_eq!(
        (actual.0, String::from_utf8_lossy(&actual.1)),
        (expected.0, String::from_utf8_lossy(&expected.1)),
        "for {}",
        String::from_utf8_lossy(body)
    );
}

/// The answer of a webhook without claims, which never waits.
fn now<T>(answer: impl std::future::Future<Output = T>) -> T {
    futures::FutureExt::now_or_never(answer).expect("a webhook without claims answers at once")
}

fn body_of(response: axum::response::Response) -> Vec<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime
        .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
        .unwrap()
        .to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn the_handler_answers_with_kube_cores_bytes(
        case in review_model(),
        mutations in prop::collection::vec(
            (prop::collection::vec(any::<usize>(), 0..6), model::<Mutation>(256)),
            0..3,
        ),
    ) {
        let mut json = case.json();
        for (path, m) in &mutations {
            m.apply(&mut json, path);
        }
        assert_same_answer(json.render().as_bytes());
    }
}

#[test]
fn the_handler_answers_every_kind_of_verdict_with_kube_cores_bytes() {
    let review = |operation: &str, name: &str, priority: &str, user: &str, extra: &str| {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u-\"1\"","kind":{{"group":"crd.antrea.io","version":"v1beta1","kind":"Tier"}},"name":"{name}","operation":"{operation}","userInfo":{{"username":"{user}"}},"object":{{"metadata":{{"name":"{name}"}},"spec":{{"priority":{priority}}}}},"oldObject":{{"metadata":{{"name":"{name}"}},"spec":{{"priority":10}}}}{extra}}}}}"#
        )
    };
    for body in [
        review("CREATE", "mine", "120", "alice", ""), // allowed
        review("CREATE", "mine", "120", "alice", r#","dryRun":true"#),
        review("CREATE", "mine", "250", "alice", ""), // overlaps baseline: a rule denial
        review("CREATE", "Not_Valid", "120", "alice", ""), // 400, BadRequest
        review("CREATE", "mine", "\"x\"", "alice", ""), // no integer priority
        review("UPDATE", "mine", "11", "alice", ""),  // priority change by a user
        review("UPDATE", "mine", "10", "alice", ""),  // no change: allowed
        review("DELETE", "application", "10", "alice", ""), // reserved name
        review("CONNECT", "mine", "10", "alice", ""),
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","userInfo":{}}}"#.to_owned(),
        r#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#.to_owned(),
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_owned(),
        "{".to_owned(),
    ] {
        assert_same_answer(body.as_bytes());
    }
    // Not synced: code 503, reason and retryAfterSeconds in details.
    let lister: Arc<dyn TierLister> = Arc::new(FixedLister::new(Snapshot::default()));
    let readiness = Readiness::new();
    readiness.register(TIER_CACHE_SYNCED, CacheSynced::new(lister.clone()));
    let unsynced = Webhook::new(lister, AdmissionPolicy::antrea(CONTROLLER), &readiness);
    let body = review("CREATE", "mine", "120", "alice", "");
    let expected =
        serde_json::to_vec(&now(unsynced.review_json(body.as_bytes())).unwrap()).unwrap();
    let actual = body_of(now(unsynced.respond(body.as_bytes())));
    assert_eq!(
        String::from_utf8_lossy(&actual),
        String::from_utf8_lossy(&expected)
    );
    assert!(String::from_utf8_lossy(&actual).contains(r#""details":{"retryAfterSeconds":1}"#));
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
                Json::Int(i),
                Json::Float(2.5),
                Json::str("s"),
                Json::Null,
                Json::Object(vec![]),
            ]);
            (i.to_string(), value)
        })
        .collect();
    let tier = Object {
        name: Field::Value(Name::Any("mine".to_owned())),
        priority: Field::Value(Priority::Int(10)),
        description: Field::Value("d".repeat(1 << 20)),
        creation_timestamp: None,
        metadata_extra: vec![],
        spec_extra: vec![],
        top_extra: filler.clone(),
        spec: Spec::Fields,
    };
    let case = Review {
        envelope: tier_fuzz_model::Envelope::V1,
        uid: Field::Value("u".to_owned()),
        kind: Field::Value(Kind::Tier),
        name: Field::Value(Name::Any("mine".to_owned())),
        operation: Field::Value(Operation::Create),
        user: Field::Value(User {
            controller: false,
            name: Some("alice".to_owned()),
            groups: vec![],
        }),
        object: Field::Value(tier),
        old_object: Field::Absent,
        dry_run: Field::Value(false),
        request_extra: filler,
        request_garbage: None,
    };
    assert!(case.is_well_formed());
    assert_eq!(case.expected(), Expected::Allowed);
    let body = case.json().render();
    let start = Instant::now();
    let answer = review(&webhook(), body.as_bytes()).unwrap();
    let elapsed = start.elapsed();
    check_answer(&answer, "u");
    assert!(answer.response.unwrap().allowed);
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}
