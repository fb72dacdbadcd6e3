//! Shared pieces of tierd's fuzz targets: a webhook over a fixed, synced Tier cache and the
//! properties every answer must have. The `Arbitrary` model of AdmissionReviews is
//! `tier-fuzz-model` (`testing/tier-fuzz-model`), shared with the CI proptests.
//!
//! Every `check_*` function panics when a property fails, which libFuzzer reports as a crash;
//! a panic inside the code under test is reported the same way.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::Value;
use tier_core::admission::AdmissionPolicy;
use tier_core::{FixedLister, ObservedTier, Snapshot, TierLister};
use tier_server::readiness::{
    ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, CacheSynced, CheckState, TIER_CACHE_SYNCED, from_fn,
};
use tier_server::webhook::{PolicyReferences, Webhook};
use tier_server::readiness::Readiness;

pub use tier_fuzz_model::CONTROLLER;
use tier_fuzz_model::SYSTEM;

fn observed(name: &str, priority: i64) -> ObservedTier {
    ObservedTier {
        name: name.into(),
        priority,
        description: String::new(),
        resource_version: "1".into(),
    }
}

/// The webhook under test: Antrea's policy over Antrea's six system Tiers, cache synced.
pub fn webhook() -> &'static Webhook {
    static WEBHOOK: OnceLock<Webhook> = OnceLock::new();
    WEBHOOK.get_or_init(|| {
        let lister: Arc<dyn TierLister> = Arc::new(FixedLister::new(Snapshot::synced(
            1,
            SYSTEM.map(|(name, priority)| observed(name, priority)),
        )));
        let readiness = Readiness::new();
        readiness
            .register(TIER_CACHE_SYNCED, CacheSynced::new(lister.clone()))
            .register(ACNP_CACHE_SYNCED, from_fn(|| CheckState::Ok))
            .register(ANNP_CACHE_SYNCED, from_fn(|| CheckState::Ok));
        // No policy references any Tier.
        let none = Arc::new(BTreeMap::<String, usize>::new());
        Webhook::new(lister, AdmissionPolicy::antrea(CONTROLLER), &readiness)
            .policy_references(PolicyReferences::new(none.clone(), none))
    })
}

#[derive(Deserialize)]
struct Sent {
    request: SentRequest,
}

#[derive(Deserialize)]
struct SentRequest {
    uid: String,
}

/// The answer of the fixture's webhook (it has no claims port, so it is ready at the first
/// poll).
pub fn now<T>(answer: impl std::future::Future<Output = T>) -> T {
    let mut answer = std::pin::pin!(answer);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match answer.as_mut().poll(&mut context) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => panic!("a webhook without claims answers at once"),
    }
}

/// Reviews `body` and checks the answer: an error (the HTTP 400 path) with a message, or a v1
/// response review that echoes the request's uid, says why when it denies, and encodes.
pub fn check_review(body: &[u8]) {
    let answer = match now(webhook().review_json(body)) {
        Ok(answer) => answer,
        Err(error) => {
            assert!(!error.to_string().is_empty(), "empty ReviewError message");
            return;
        }
    };
    // Not `serde_json::Value`: like the webhook, read only `request.uid`, since serde_json does
    // not validate the strings of ignored fields (invalid UTF-8, lone surrogates).
    let sent: Sent = serde_json::from_slice(body).expect("an accepted body has request.uid");
    let uid = sent.request.uid.as_str();
    assert_eq!(answer.types.api_version, "admission.k8s.io/v1");
    assert_eq!(answer.types.kind, "AdmissionReview");
    assert!(answer.request.is_none(), "the answer carries a request");
    let response = answer.response.as_ref().expect("the answer has a response");
    assert_eq!(response.uid, uid, "the response does not echo the uid");
    if !response.allowed {
        assert!(
            !response.result.message.is_empty(),
            "a denial without a message"
        );
    }
    // What the HTTP handler does next; a failure here would be an HTTP 500.
    let encoded = serde_json::to_vec(&answer).expect("the answer encodes");
    let decoded: Value = serde_json::from_slice(&encoded).expect("the answer is JSON");
    assert_eq!(decoded["response"]["uid"], uid);
}

/// Parses `text` as a Tiers file and checks the outcome: a valid non-empty set, or at least one
/// problem, each naming an entry, a field or a rule.
pub fn check_tiers_file(text: &str) {
    match tierd::tiers_file::parse(text) {
        Ok(set) => assert!(!set.is_empty(), "an accepted Tiers file with no Tier"),
        Err(problems) => {
            assert!(
                !problems.is_empty(),
                "a rejected Tiers file with no problem"
            );
            for p in &problems {
                assert!(
                    (p.index.is_some() || !p.field.is_empty() || !p.detail.is_empty())
                        && !p.to_string().is_empty(),
                    "a problem naming neither an entry, a field nor a rule: {p:?}"
                );
            }
        }
    }
}
