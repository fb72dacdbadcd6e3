//! POST /validate/tier.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Value, json};
use tier_core::FixedLister;
use tier_core::Snapshot;
use tier_core::admission::AdmissionPolicy;
use tier_server::readiness::{self, CacheSynced, CheckState, TIER_CACHE_SYNCED};
use tier_server::webhook::{NOT_SYNCED, PATH};
use tier_server::{Readiness, Routes, Webhook};

use crate::common::{Running, observed, post, system_tiers};

const CONTROLLER: &str = "system:serviceaccount:kube-system:tierd";

struct Fixture {
    lister: Arc<FixedLister>,
    server: Running,
}

/// A webhook whose `tier-cache-synced` check follows the fake lister.
async fn fixture(snapshot: Snapshot) -> Fixture {
    let lister = Arc::new(FixedLister::new(snapshot));
    let readiness = Readiness::new();
    readiness.register(TIER_CACHE_SYNCED, CacheSynced::new(lister.clone()));
    let webhook = Webhook::new(
        lister.clone(),
        AdmissionPolicy::antrea(CONTROLLER),
        &readiness,
    );
    let server = Running::plain(Routes::new(readiness).webhook(webhook).into_router()).await;
    Fixture { lister, server }
}

fn tier(name: &str, priority: i64, description: &str) -> Value {
    json!({
        "apiVersion": "crd.antrea.io/v1beta1",
        "kind": "Tier",
        "metadata": {"name": name, "resourceVersion": "7"},
        "spec": {"priority": priority, "description": description},
    })
}

fn review(uid: &str, operation: &str, name: &str, user: &str, object: Value, old: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "resource": {"group": "crd.antrea.io", "version": "v1beta1", "resource": "tiers"},
            "requestKind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "name": name,
            "operation": operation,
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    })
}

fn create(uid: &str, name: &str, priority: i64) -> Value {
    review(
        uid,
        "CREATE",
        name,
        "alice",
        tier(name, priority, ""),
        Value::Null,
    )
}

fn update(uid: &str, name: &str, user: &str, old: (i64, &str), new: (i64, &str)) -> Value {
    review(
        uid,
        "UPDATE",
        name,
        user,
        tier(name, new.0, new.1),
        tier(name, old.0, old.1),
    )
}

fn delete(uid: &str, name: &str) -> Value {
    review(uid, "DELETE", name, "alice", Value::Null, tier(name, 1, ""))
}

/// Posts `body` and returns the response part of the review (checking the envelope and uid).
async fn send(server: &Running, body: &Value) -> Value {
    let reply = post(server.addr, PATH, body.to_string()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.headers["content-type"], "application/json");
    let review = reply.json();
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    assert_eq!(review["response"]["uid"], body["request"]["uid"]);
    review["response"].clone()
}

async fn allowed(server: &Running, body: &Value) {
    let response = send(server, body).await;
    assert_eq!(response["allowed"], true, "{response}");
}

/// Asserts a rule denial: Antrea's message, no code (kube-apiserver answers 400).
async fn denied(server: &Running, body: &Value, message: &str) {
    let response = send(server, body).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["message"], message);
    assert_eq!(response["status"]["status"], "Failure");
    assert_eq!(response["status"].get("code"), None);
}

#[tokio::test]
async fn create_rules() {
    let f = fixture(system_tiers()).await;
    let s = &f.server;
    allowed(s, &create("u1", "mine", 10)).await;
    denied(
        s,
        &create("u2", "mine", 254),
        "tier mine priority 254 is reserved",
    )
    .await;
    denied(
        s,
        &create("u3", "mine", 253),
        "tier mine priority 253 overlaps with existing Tier",
    )
    .await;
    // Re-creating an existing system Tier is an overlap, as in Antrea.
    denied(
        s,
        &create("u4", "baseline", 253),
        "tier baseline priority 253 overlaps with existing Tier",
    )
    .await;

    let many: Vec<_> = (0..20).map(|i| observed(&format!("t{i}"), i)).collect();
    f.lister.set(Snapshot::synced(2, many));
    denied(
        s,
        &create("u5", "mine", 100),
        "maximum number of Tiers supported: 20",
    )
    .await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn update_rules() {
    let f = fixture(system_tiers()).await;
    let s = &f.server;
    allowed(
        s,
        &update("u1", "baseline", CONTROLLER, (1, "d"), (253, "d")),
    )
    .await;
    denied(
        s,
        &update("u2", "baseline", "alice", (253, "d"), (1, "d")),
        "update to Tier priority is not allowed",
    )
    .await;
    allowed(
        s,
        &update("u3", "baseline", "alice", (253, "d"), (253, "new")),
    )
    .await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn delete_rules() {
    let f = fixture(system_tiers()).await;
    let s = &f.server;
    denied(
        s,
        &delete("u1", "emergency"),
        "cannot delete reserved tier emergency",
    )
    .await;
    allowed(s, &delete("u2", "mine")).await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn before_the_cache_syncs_every_review_is_a_retryable_denial() {
    let f = fixture(Snapshot::default()).await;
    for body in [
        create("u1", "mine", 10),
        update("u2", "baseline", CONTROLLER, (1, ""), (253, "")),
        delete("u3", "mine"),
    ] {
        let response = send(&f.server, &body).await;
        assert_eq!(response["allowed"], false);
        assert_eq!(
            response["status"],
            json!({
                "status": "Failure",
                "code": 503,
                "reason": "ServiceUnavailable",
                "message": NOT_SYNCED,
                "details": {"retryAfterSeconds": 1},
            })
        );
    }
    f.lister.set(system_tiers());
    allowed(&f.server, &create("u4", "mine", 10)).await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn the_cache_is_not_read_while_its_check_fails() {
    // The lister is synced, but the declared check still fails: the webhook must not answer
    // from the cache.
    let lister = Arc::new(FixedLister::new(system_tiers()));
    let readiness = Readiness::new();
    let (tx, rx) = tokio::sync::watch::channel(CheckState::failed("not yet"));
    readiness.register(TIER_CACHE_SYNCED, rx);
    let webhook = Webhook::new(
        lister.clone(),
        AdmissionPolicy::antrea(CONTROLLER),
        &readiness,
    );
    let server = Running::plain(webhook.routes()).await;
    let response = send(&server, &create("u1", "mine", 10)).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["message"], NOT_SYNCED);
    tx.send_replace(CheckState::Ok);
    allowed(&server, &create("u2", "mine", 10)).await;
    readiness.register("unrelated", readiness::from_fn(|| CheckState::failed("x")));
    allowed(&server, &create("u3", "mine", 10)).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn malformed_bodies_get_400() {
    let f = fixture(system_tiers()).await;
    let cases = [
        ("not json".to_owned(), "malformed AdmissionReview: "),
        ("{}".to_owned(), "malformed AdmissionReview: "),
        (
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).to_string(),
            "the AdmissionReview has no request",
        ),
        (
            {
                let mut body = create("u1", "mine", 10);
                body["apiVersion"] = json!("admission.k8s.io/v1beta1");
                body.to_string()
            },
            "unsupported AdmissionReview admission.k8s.io/v1beta1; configure the webhook with \
             admissionReviewVersions: [v1]",
        ),
        (
            {
                let mut body = create("u1", "mine", 10);
                body["request"]["uid"] = json!(42);
                body.to_string()
            },
            "malformed AdmissionReview: ",
        ),
    ];
    for (body, reason) in cases {
        let reply = post(f.server.addr, PATH, body.clone()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
        assert!(reply.body.starts_with(reason), "{body}: {}", reply.body);
    }
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn a_tier_without_priority_is_denied_with_the_reason() {
    let f = fixture(system_tiers()).await;
    let mut body = create("u1", "mine", 10);
    body["request"]["object"]["spec"] = json!({"description": "no priority"});
    let response = send(&f.server, &body).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"]["message"],
        "cannot review Tier mine: object.spec.priority is missing or not an integer"
    );
    assert_eq!(response["status"]["code"], 400);

    let mut body = update("u2", "baseline", "alice", (253, ""), (253, ""));
    body["request"]["oldObject"] = Value::Null;
    let response = send(&f.server, &body).await;
    assert_eq!(
        response["status"]["message"],
        "cannot review Tier baseline: the request has no oldObject"
    );
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn other_kinds_are_allowed() {
    let f = fixture(system_tiers()).await;
    let mut body = create("u1", "mine", 254);
    body["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    allowed(&f.server, &body).await;
    f.server.stop().await.unwrap();
}
