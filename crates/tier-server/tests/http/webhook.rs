//! POST /validate/tier.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::Duration;

use tier_core::admission::{AdmissionPolicy, ReferenceIndex};
use tier_core::{DesiredSet, FixedLister, Snapshot, TierSpec, TierWriter, WriteError};
use tier_server::readiness::Readiness;
use tier_server::readiness::{
    self, ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, CacheSynced, CheckState, TIER_CACHE_SYNCED,
};
use tier_server::server::Routes;
use tier_server::webhook::{NOT_SYNCED, PATH, POLICIES_NOT_SYNCED};
use tier_server::webhook::{PolicyReferences, ReservationTable, ReservingWriter, Webhook};

use crate::common::{Running, now, observed, post, system_tiers};

const CONTROLLER: &str = "system:serviceaccount:kube-system:tierd";

struct Fixture {
    lister: Arc<FixedLister>,
    acnps: Arc<FakeIndex>,
    annps: Arc<FakeIndex>,
    reservations: ReservationTable,
    clock: Arc<std::sync::Mutex<std::time::Instant>>,
    /// A clone of the served webhook (one table, one log budget), to call directly.
    webhook: Webhook,
    server: Running,
}

impl Fixture {
    /// Moves the reservations' injected clock forward.
    fn advance(&self, by: Duration) {
        *self.clock.lock().unwrap() += by;
    }
}

/// A policy cache by hand: `None` until synced, then counts by Tier.
#[derive(Default)]
struct FakeIndex(RwLock<Option<BTreeMap<String, usize>>>);

impl FakeIndex {
    fn synced(counts: &[(&str, usize)]) -> Arc<Self> {
        let index = Self::default();
        index.set(Some(counts));
        Arc::new(index)
    }

    fn set(&self, counts: Option<&[(&str, usize)]>) {
        *self.0.write().unwrap() =
            counts.map(|c| c.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect());
    }

    fn check(self: &Arc<Self>) -> impl readiness::Check {
        let index = Arc::clone(self);
        readiness::from_fn(move || match index.references("") {
            Some(_) => CheckState::Ok,
            None => CheckState::failed("not listed yet"),
        })
    }
}

impl ReferenceIndex for FakeIndex {
    fn references(&self, tier: &str) -> Option<usize> {
        self.0
            .read()
            .unwrap()
            .as_ref()
            .map(|m| m.get(tier).copied().unwrap_or(0))
    }
}

/// A webhook whose checks follow the fake lister and the fake policy caches (synced, empty).
async fn fixture(snapshot: Snapshot) -> Fixture {
    fixture_with(snapshot, AdmissionPolicy::antrea(CONTROLLER)).await
}

async fn fixture_with(snapshot: Snapshot, policy: AdmissionPolicy) -> Fixture {
    let lister = Arc::new(FixedLister::default());
    lister.set(snapshot);
    let (acnps, annps) = (FakeIndex::synced(&[]), FakeIndex::synced(&[]));
    let readiness = Readiness::new();
    readiness
        .register(TIER_CACHE_SYNCED, CacheSynced::new(lister.clone()))
        .register(ACNP_CACHE_SYNCED, acnps.check())
        .register(ANNP_CACHE_SYNCED, annps.check());
    let clock = Arc::new(std::sync::Mutex::new(std::time::Instant::now()));
    let now = clock.clone();
    let reservations =
        ReservationTable::with_clock(Duration::from_secs(10), move || *now.lock().unwrap())
            .unwrap();
    let webhook = Webhook::new(lister.clone(), policy, &readiness)
        .policy_references(PolicyReferences::new(acnps.clone(), annps.clone()))
        .reservations(reservations.clone());
    let server = Running::plain(
        Routes::new(readiness)
            .webhook(webhook.clone())
            .into_router(),
    )
    .await;
    Fixture {
        lister,
        acnps,
        annps,
        reservations,
        clock,
        webhook,
        server,
    }
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

/// Asserts a retryable not-synced refusal with `message`, in a well-formed review.
async fn not_synced(server: &Running, body: &Value, message: &str) {
    let response = send(server, body).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"],
        json!({
            "status": "Failure",
            "code": 503,
            "reason": "ServiceUnavailable",
            "message": message,
            "details": {"retryAfterSeconds": 1},
        })
    );
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
async fn a_tier_that_policies_reference_cannot_be_deleted() {
    let f = fixture(system_tiers()).await;
    let s = &f.server;
    f.acnps.set(Some(&[("mine", 2), ("platform", 1)]));
    f.annps.set(Some(&[("mine", 3), ("theirs", 1)]));
    // Antrea's order: reserved name, then ClusterNetworkPolicies, then NetworkPolicies.
    denied(
        s,
        &delete("u1", "platform"),
        "cannot delete reserved tier platform",
    )
    .await;
    denied(
        s,
        &delete("u2", "mine"),
        "tier mine is referenced by 2 Antrea ClusterNetworkPolicies",
    )
    .await;
    denied(
        s,
        &delete("u3", "theirs"),
        "tier theirs is referenced by 1 Antrea NetworkPolicies",
    )
    .await;
    f.acnps.set(Some(&[]));
    denied(
        s,
        &delete("u4", "mine"),
        "tier mine is referenced by 3 Antrea NetworkPolicies",
    )
    .await;
    f.annps.set(Some(&[]));
    allowed(s, &delete("u5", "mine")).await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn only_delete_waits_for_the_policy_caches() {
    let f = fixture(system_tiers()).await;
    f.annps.set(None);
    // Creates and updates need the Tier cache only.
    allowed(&f.server, &create("u1", "mine", 10)).await;
    allowed(
        &f.server,
        &update("u2", "baseline", CONTROLLER, (1, ""), (253, "")),
    )
    .await;
    // A delete is refused, retryably, in a well-formed review.
    not_synced(&f.server, &delete("u3", "mine"), POLICIES_NOT_SYNCED).await;
    f.annps.set(Some(&[]));
    allowed(&f.server, &delete("u4", "mine")).await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn without_policy_caches_a_delete_is_never_allowed() {
    let lister = Arc::new(FixedLister::default());
    lister.set(system_tiers());
    let readiness = Readiness::new();
    readiness.register(TIER_CACHE_SYNCED, CacheSynced::new(lister.clone()));
    let webhook = Webhook::new(lister, AdmissionPolicy::antrea(CONTROLLER), &readiness);
    let server = Running::plain(webhook.routes()).await;
    let response = send(&server, &delete("u1", "mine")).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 503);
    allowed(&server, &create("u2", "mine", 10)).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn the_gate_reserves_220_for_new_tiers_only() {
    let policy = AdmissionPolicy::antrea(CONTROLLER).with_rules(tier_core::ValidationRules {
        cluster_network_policy: true,
        ..tier_core::ValidationRules::default()
    });
    let f = fixture_with(system_tiers(), policy).await;
    denied(
        &f.server,
        &create("u1", "mine", 220),
        "tier mine priority 220 is reserved for upstream ClusterNetworkPolicy when the \
         ClusterNetworkPolicy feature gate is enabled; choose a different priority",
    )
    .await;
    allowed(
        &f.server,
        &update("u2", "old", "alice", (220, "a"), (220, "b")),
    )
    .await;
    allowed(&f.server, &delete("u3", "old")).await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn an_admitted_priority_stays_taken_until_the_cache_shows_it_or_the_ttl_passes() {
    let f = fixture(system_tiers()).await;
    let s = &f.server;
    allowed(s, &create("u1", "first", 10)).await;
    // The cache has not seen `first` yet; Antrea would allow this one too. The denial says it
    // is a reservation, not a Tier in the cache.
    f.advance(Duration::from_millis(120));
    denied(
        s,
        &create("u2", "second", 10),
        "tier second priority 10 is reserved by a create of Tier first admitted 120 ms ago, not \
         yet visible",
    )
    .await;
    // A retry of the admitted create itself still passes.
    allowed(s, &create("u3", "first", 10)).await;
    // The write never landed: after the TTL the priority is free again.
    f.advance(Duration::from_secs(9));
    denied(
        s,
        &create("u3b", "second", 10),
        "tier second priority 10 is reserved by a create of Tier first admitted 9000 ms ago, \
         not yet visible",
    )
    .await;
    f.advance(Duration::from_secs(1));
    allowed(s, &create("u4", "second", 10)).await;
    // This time it lands: the cache takes over (with Antrea's message) and the reservation goes.
    let mut tiers: Vec<_> = system_tiers().tiers.unwrap().values().cloned().collect();
    tiers.push(observed("second", 10));
    f.lister.set(Snapshot::synced(2, tiers));
    denied(
        s,
        &create("u5", "third", 10),
        "tier third priority 10 overlaps with existing Tier",
    )
    .await;
    assert!(
        f.reservations.held().is_empty(),
        "{:?}",
        f.reservations.held()
    );
    // An update moving a Tier reserves nothing (tierd's own updates enter through its writer);
    // a dry run reserves nothing either.
    allowed(s, &update("u6", "baseline", CONTROLLER, (1, ""), (30, ""))).await;
    allowed(s, &create("u7", "x", 30)).await;
    let mut dry = create("u8", "y", 31);
    dry["request"]["dryRun"] = json!(true);
    allowed(s, &dry).await;
    allowed(s, &create("u9", "z", 31)).await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn concurrent_creates_at_one_priority_admit_exactly_one() {
    for trial in 0..30 {
        // A fresh webhook each trial: admitted priorities would soon reach the 20-priority limit.
        let f = fixture(system_tiers()).await;
        let priority = 10 + trial;
        let requests = (0..8).map(|i| {
            let body = create(&format!("u{trial}-{i}"), &format!("t{trial}-{i}"), priority);
            let addr = f.server.addr;
            tokio::spawn(async move { post(addr, PATH, body.to_string()).await.json() })
        });
        let mut admitted = 0;
        for request in requests {
            let review = request.await.unwrap();
            admitted += usize::from(review["response"]["allowed"] == true);
        }
        assert_eq!(admitted, 1, "trial {trial}");
        f.server.stop().await.unwrap();
    }
}

/// A writer that always succeeds.
struct Accepting;

#[async_trait::async_trait]
impl TierWriter for Accepting {
    async fn create(&self, _tier: &TierSpec) -> Result<(), WriteError> {
        Ok(())
    }

    async fn update(&self, _tier: &TierSpec, _rv: &str) -> Result<(), WriteError> {
        Ok(())
    }
}

#[tokio::test]
async fn tierds_own_writes_take_their_priority_at_once() {
    let f = fixture(Snapshot::synced(1, [])).await;
    let writer = ReservingWriter::new(Accepting, f.reservations.clone());
    writer
        .create(&TierSpec::new("baseline", 253, ""))
        .await
        .unwrap();
    denied(
        &f.server,
        &create("u1", "squatter", 253),
        "tier squatter priority 253 is reserved by tierd's own write of Tier baseline stored 0 ms \
         ago, not yet visible",
    )
    .await;
    writer
        .update(&TierSpec::new("application", 250, ""), "3")
        .await
        .unwrap();
    denied(
        &f.server,
        &create("u2", "squatter", 250),
        "tier squatter priority 250 is reserved by tierd's own write of Tier application \
         stored 0 ms ago, not yet visible",
    )
    .await;
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
        not_synced(&f.server, &body, NOT_SYNCED).await;
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

// ---------------------------------------------------------------------------------------------
// Forged reviews (issue 17): anyone who reaches the port can send a review claiming any user.

/// tierd's policy: Antrea's, with Antrea's six as the desired set.
fn tierd_policy() -> AdmissionPolicy {
    AdmissionPolicy::antrea(CONTROLLER).desire(&DesiredSet::antrea())
}

/// Antrea's system Tiers without `absent` (deleted, or not created yet).
fn system_without(absent: &str) -> Snapshot {
    let tiers = system_tiers().tiers.unwrap();
    Snapshot::synced(3, tiers.values().filter(|t| t.name != absent).cloned())
}

#[tokio::test]
async fn a_forged_update_claiming_tierds_user_reserves_nothing() {
    let f = fixture_with(system_tiers(), tierd_policy()).await;
    // Admitted, as Antrea admits its controller's updates: but it must change nothing.
    allowed(
        &f.server,
        &update("f1", "forged", CONTROLLER, (1, ""), (150, "")),
    )
    .await;
    assert!(
        f.reservations.held().is_empty(),
        "{:?}",
        f.reservations.held()
    );
    // networkops is deleted; tierd re-creates it at once.
    f.lister.set(system_without("networkops"));
    allowed(&f.server, &create("u1", "networkops", 150)).await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn fifteen_forged_updates_do_not_fill_the_priority_limit() {
    let f = fixture_with(system_without("emergency"), tierd_policy()).await;
    for i in 0..15 {
        let forged = update(
            &format!("f{i}"),
            &format!("forged-{i}"),
            CONTROLLER,
            (1, ""),
            (10 + i, ""),
        );
        allowed(&f.server, &forged).await;
    }
    // Five system Tiers in the cache, nothing reserved: emergency and a user Tier pass.
    allowed(&f.server, &create("u1", "emergency", 50)).await;
    allowed(&f.server, &create("u2", "mine", 42)).await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn a_create_only_forger_cannot_take_a_deleted_system_tiers_priority() {
    for trial in 0..5 {
        let f = fixture_with(system_without("networkops"), tierd_policy()).await;
        // The forger in a tight loop, racing tierd's create of networkops.
        let addr = f.server.addr;
        let forger = tokio::spawn(async move {
            let mut admitted = 0;
            for i in 0..50 {
                let body = create(&format!("f{i}"), &format!("squatter-{i}"), 150);
                let review = post(addr, PATH, body.to_string()).await.json();
                if review["response"]["allowed"] == true {
                    admitted += 1;
                } else {
                    assert_eq!(
                        review["response"]["status"]["message"],
                        format!(
                            "tier squatter-{i} priority 150 is reserved for the system Tier networkops"
                        )
                    );
                }
            }
            admitted
        });
        tokio::task::yield_now().await;
        allowed(&f.server, &create(&format!("t{trial}"), "networkops", 150)).await;
        assert_eq!(forger.await.unwrap(), 0, "trial {trial}");
        f.server.stop().await.unwrap();
    }
}

#[tokio::test]
async fn forged_deletes_and_updates_do_not_erase_a_legitimate_reservation() {
    let f = fixture(system_tiers()).await;
    allowed(&f.server, &create("u1", "mine", 42)).await;
    // The forger erases "mine"'s reservation, as it would be if it were deleted or moved.
    allowed(&f.server, &delete("f1", "mine")).await;
    allowed(
        &f.server,
        &update("f2", "mine", CONTROLLER, (42, ""), (43, "")),
    )
    .await;
    // The cache still lags: a second Tier at 42 must not pass.
    f.advance(Duration::from_millis(5));
    denied(
        &f.server,
        &create("u2", "other", 42),
        "tier other priority 42 is reserved by a create of Tier mine admitted 5 ms ago, not yet \
         visible",
    )
    .await;
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn a_tier_created_then_deleted_releases_its_priority_at_once() {
    let f = fixture(system_tiers()).await;
    allowed(&f.server, &create("u1", "mine", 42)).await;
    // The cache shows "mine" at 42; then it is deleted, and the cache stops showing it.
    let mut with_mine: Vec<_> = system_tiers().tiers.unwrap().values().cloned().collect();
    with_mine.push(tier_core::ObservedTier {
        name: "mine".into(),
        priority: 42,
        description: String::new(),
        resource_version: "9".into(),
        last_writer: None,
    });
    f.lister.set(Snapshot::synced(4, with_mine));
    allowed(&f.server, &delete("d1", "mine")).await;
    f.lister.set(Snapshot::synced(
        5,
        system_tiers().tiers.unwrap().values().cloned(),
    ));
    // Long before the TTL, 42 is free again: the reservation was settled while shown.
    f.advance(Duration::from_millis(5));
    allowed(&f.server, &create("u2", "other", 42)).await;
    assert!(
        f.reservations.held().iter().all(|r| r.name != "mine"),
        "{:?}",
        f.reservations.held()
    );
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn the_table_stays_bounded_under_100k_distinct_forged_names() {
    let f = fixture(Snapshot::synced(1, [])).await;
    let long = "x".repeat(300);
    // Bodies from two templates (building each with json! would dominate the run time).
    let creates = create("UID", "NAME", 12345).to_string();
    let updates = update("UID", "NAME", CONTROLLER, (12345, ""), (54321, "")).to_string();
    for i in 0..100_000_i64 {
        let name = match i % 3 {
            0 => format!("forged-{i}"),
            1 => format!("{long}-{i}"),
            _ => format!("Forged_{i}"),
        };
        let priority = i % 256;
        let template = if i % 2 == 0 { &creates } else { &updates };
        let body = template
            .replace("UID", &i.to_string())
            .replace("NAME", &name)
            .replace("12345", &priority.to_string())
            .replace("54321", &(priority + 1).to_string());
        let _ = now(f.webhook.review_json(body.as_bytes())).unwrap();
        if i % 1000 == 0 {
            let held = f.reservations.held().len();
            assert!(held <= 20, "{held} reservations after {i} forged reviews");
        }
    }
    assert_eq!(f.reservations.held().len(), 20);
    f.server.stop().await.unwrap();
}

/// Everything logged at INFO and above by this thread while `run` runs
/// ([`crate::common::capture_logs`]).
fn logs_of<T>(run: impl FnOnce() -> T) -> (T, String) {
    crate::common::capture_logs();
    let out = run();
    (out, crate::common::captured_logs())
}

#[tokio::test]
async fn a_huge_name_costs_a_bounded_log_line_and_response() {
    let f = fixture(system_tiers()).await;
    let huge = "a".repeat(2_000_000);
    // Over HTTP, 1.5 MB of name is over the body limit: a short 413.
    let body = create("u1", &huge[..1_500_000], 254).to_string();
    let reply = post(f.server.addr, PATH, body).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        reply.body.contains("larger than 1048576 bytes"),
        "{}",
        reply.body
    );
    assert!(reply.body.len() < 256, "{}", reply.body.len());
    // Reviewed directly (no body limit), 2 MB in each field a caller controls.
    let mut cases = Vec::new();
    cases.push(create("u2", &huge, 254));
    let mut body = create("u3", "mine", 254);
    body["request"]["userInfo"]["username"] = json!(huge);
    cases.push(body);
    let mut body = update("u4", "mine", &huge, (1, ""), (2, ""));
    body["request"]["userInfo"]["username"] = json!(huge);
    cases.push(body);
    let mut body = create("u5", "mine", 10);
    body["request"]["kind"]["group"] = json!(huge);
    cases.push(body);
    let mut body = create("u6", "mine", 10);
    body["apiVersion"] = json!(huge);
    cases.push(body);
    let mut body = create("u7", "mine", 10);
    body["request"]["operation"] = json!(huge);
    cases.push(body);
    let mut body = create("u8", "mine", 10);
    body["request"]["uid"] = json!(huge);
    cases.push(body);
    for body in cases {
        let text = body.to_string();
        let (answer, logged) = logs_of(|| now(f.webhook.review_json(text.as_bytes())));
        let response = match answer {
            Ok(review) => serde_json::to_string(&review).unwrap(),
            Err(error) => error.to_string(),
        };
        assert!(
            response.len() < 2048,
            "{} bytes: {}",
            response.len(),
            &response[..200]
        );
        assert!(!logged.is_empty(), "nothing logged for {}", &text[..200]);
        println!(
            "{} bytes of review: {} bytes of answer, {} bytes of log",
            text.len(),
            response.len(),
            logged.len()
        );
        assert!(logged.len() < 4096, "{} bytes of log", logged.len());
    }
    f.server.stop().await.unwrap();
}

#[tokio::test]
async fn denials_are_logged_at_a_bounded_rate_with_a_count_of_the_rest() {
    let f = fixture(system_tiers()).await;
    let deny = |i: usize| create(&format!("u{i}"), "mine", 254).to_string();
    let (_, logged) = logs_of(|| {
        for i in 0..1000 {
            now(f.webhook.review_json(deny(i).as_bytes())).unwrap();
        }
    });
    assert_eq!(logged.matches(" denied").count(), 20, "{logged}");
    assert!(!logged.contains("not logged"), "{logged}");
    // A second later (virtual time): one more line, saying how many were left out.
    f.advance(Duration::from_secs(1));
    let (_, logged) = logs_of(|| now(f.webhook.review_json(deny(1000).as_bytes())).unwrap());
    assert_eq!(logged.matches(" denied").count(), 1, "{logged}");
    assert!(
        logged.contains("980 more admission denials and refusals were not logged"),
        "{logged}"
    );
    f.server.stop().await.unwrap();
}

#[test]
fn every_reservation_ttl_is_checked_and_none_overflows() {
    for ttl in [Duration::ZERO, Duration::from_secs(61), Duration::MAX] {
        let error = ReservationTable::new(ttl).unwrap_err();
        assert!(error.to_string().contains("out of range"), "{error}");
    }
    let table =
        ReservationTable::with_clock(Duration::from_secs(60), std::time::Instant::now).unwrap();
    table.reserve("a", 1);
    assert_eq!(table.held().len(), 1);
}
