#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tier_core::admission::AdmissionPolicy;
use tier_core::{FixedLister, ObservedTier, Snapshot};
use tier_kube::identity::ControllerIdentity;
use tier_server::readiness::CheckState;
use tier_server::readiness::Readiness;
use tier_server::readiness::{
    ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, CacheSynced, TIER_CACHE_SYNCED, from_fn,
};
use tier_server::webhook::PolicyReferences;

use tier_server::webhook::IDENTITY_PENDING;

use super::*;

const TIERD: &str = "system:serviceaccount:kube-system:tierd";

fn review(operation: &str, old: Option<i64>, new: i64, user: &str) -> Vec<u8> {
    let tier = |p: i64| json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier", "metadata": {"name": "platform"}, "spec": {"priority": p}});
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "kind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "resource": {"group": "crd.antrea.io", "version": "v1beta1", "resource": "tiers"},
            "name": "platform",
            "operation": operation,
            "userInfo": {"username": user},
            "object": tier(new),
            "oldObject": old.map_or(Value::Null, tier),
        }
    })
    .to_string()
    .into_bytes()
}

/// The webhook over a synced cache holding `platform` at 200.
fn gated(identity: ControllerIdentity) -> IdentityGated {
    let tiers = BTreeMap::from([(
        "platform".to_owned(),
        ObservedTier {
            name: "platform".into(),
            priority: 200,
            description: String::new(),
            resource_version: "1".into(),
            last_writer: None,
        },
    )]);
    let lister: Arc<dyn tier_core::TierLister> = Arc::new(FixedLister::new(Snapshot {
        generation: 1,
        tiers: Some(Arc::new(tiers)),
        ..Snapshot::default()
    }));
    let readiness = Readiness::new();
    readiness.register(TIER_CACHE_SYNCED, CacheSynced::new(lister.clone()));
    for policies in [ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED] {
        readiness.register(policies, from_fn(|| CheckState::Ok));
    }
    let references = PolicyReferences::new(
        Arc::new(tier_kube::policies::PolicyCache::<
            tier_kube::policies::ClusterNetworkPolicies,
        >::from_policies([])),
        Arc::new(tier_kube::policies::PolicyCache::<
            tier_kube::policies::NetworkPolicies,
        >::from_policies([])),
    );
    IdentityGated::new(
        identity,
        Arc::new(move |user: &str| {
            Webhook::new(lister.clone(), AdmissionPolicy::antrea(user), &readiness)
                .policy_references(references.clone())
        }),
    )
}

async fn answer(webhook: &IdentityGated, body: &[u8]) -> (bool, i32, String) {
    let review = webhook.review_json(body).await.unwrap();
    let response = review.response.unwrap();
    (
        response.allowed,
        response.result.code as i32,
        response.result.message,
    )
}

/// A client for an address nobody listens on: the identity stays pending.
async fn unreachable() -> kube::Client {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
    tier_kube::client::client_from_config(config).unwrap()
}

#[tokio::test]
async fn updates_wait_for_the_identity_and_nothing_else_does() {
    let identity =
        ControllerIdentity::discover(unreachable().await, std::time::Duration::from_secs(1))
            .unwrap();
    let webhook = gated(identity);
    // An UPDATE moving a Tier is refused retryably while the identity is unknown, even by
    // tierd's own user.
    let (allowed, code, message) = answer(&webhook, &review("UPDATE", Some(200), 150, TIERD)).await;
    assert!(!allowed);
    assert_eq!(code, 503);
    assert_eq!(message, IDENTITY_PENDING);
    // One keeping the priority (a label, a description) needs no identity.
    let (allowed, _, message) = answer(&webhook, &review("UPDATE", Some(200), 200, "alice")).await;
    assert!(allowed, "{message}");
    // CREATE and DELETE are reviewed by their rules meanwhile.
    let (allowed, _, message) = answer(&webhook, &review("CREATE", None, 7, "alice")).await;
    assert!(allowed, "{message}");
    let (allowed, _, message) = answer(&webhook, &review("DELETE", None, 200, "alice")).await;
    assert!(!allowed);
    assert_eq!(message, "cannot delete reserved tier platform");
}

#[tokio::test]
async fn once_the_identity_is_known_only_it_may_change_a_priority() {
    let webhook = gated(ControllerIdentity::known(TIERD));
    let (allowed, _, message) = answer(&webhook, &review("UPDATE", Some(200), 150, TIERD)).await;
    assert!(allowed, "{message}");
    let (allowed, code, message) =
        answer(&webhook, &review("UPDATE", Some(200), 150, "alice")).await;
    assert!(!allowed, "{message}");
    assert_ne!(code, 503, "a rule, not a wait: {message}");
}

#[tokio::test]
async fn malformed_reviews_are_refused_before_any_gate() {
    let webhook = gated(ControllerIdentity::known(TIERD));
    assert!(matches!(
        webhook.review_json(b"{").await,
        Err(ReviewError::Malformed(_))
    ));
}
