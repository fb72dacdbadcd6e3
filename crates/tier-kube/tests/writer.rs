//! The writer through real HTTP against a real kube-apiserver (tier-testcluster) with a fault
//! proxy in front (tier-faultproxy): creates, updates, and every error class as the kube client
//! sees it, with the server's own messages.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::real;
use common::{spec, until};
use tier_core::{ErrorClass, TierWriter, WriteError};
use tier_faultproxy::{Fault, Matcher, Outage, Verb};
use tier_kube::client::ClientOptions;
use tier_kube::writer::{KubeWriter, WriterConfig};
use tier_testserver::{Fault as FakeFault, Verb as FakeVerb};

const TIERS: &str = "tiers.crd.antrea.io";

fn assert_class(result: Result<(), WriteError>, class: ErrorClass) -> WriteError {
    let error = result.expect_err("the write should fail");
    assert_eq!(error.class, class, "{error:?}");
    error
}

fn on(verb: Verb) -> Matcher {
    Matcher::verb(verb).on(TIERS)
}

/// The managers recorded in the stored object's managedFields.
fn managers(obj: &serde_json::Value) -> Vec<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["manager"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn create_posts_the_tier_with_the_field_manager() {
    let h = real::start().await;
    let desired = spec(
        "platform",
        200,
        "[READ-ONLY]: System generated Platform Tier",
    );
    h.writer().create(&desired).await.unwrap();
    assert_eq!(
        h.stored("platform").await,
        Some((
            200,
            Some("[READ-ONLY]: System generated Platform Tier".into())
        ))
    );
    let log = h.proxy.requests();
    let creates = log.matching(on(Verb::Create).named("platform"));
    assert_eq!(creates.len(), 1);
    assert_eq!(creates[0].code, Some(201));
    assert!(
        creates[0].query.contains("fieldManager=tierd"),
        "{:?}",
        creates[0]
    );
    // The real server records the manager (and so who wrote the fields) in managedFields.
    let stored = h.get("platform").await.unwrap();
    assert_eq!(managers(&stored), vec!["tierd".to_owned()], "{stored}");
}

#[tokio::test]
async fn create_leaves_an_empty_description_out() {
    let h = real::start().await;
    h.writer().create(&spec("bare", 3, "")).await.unwrap();
    assert_eq!(h.stored("bare").await, Some((3, None)));
    let stored = h.get("bare").await.unwrap();
    assert_eq!(stored["spec"], serde_json::json!({"priority": 3}));
}

#[tokio::test]
async fn a_custom_field_manager_is_used() {
    let h = real::start().await;
    let config = WriterConfig {
        field_manager: "antrea-controller".into(),
        ..common::writer_config()
    };
    let (store, _) = kube::runtime::reflector::store();
    let writer = KubeWriter::new(h.writer_client.clone(), store, config);
    writer.create(&spec("a", 1, "")).await.unwrap();
    let log = h.proxy.requests();
    assert!(
        log.matching(on(Verb::Create).named("a"))[0]
            .query
            .contains("fieldManager=antrea-controller")
    );
    let stored = h.get("a").await.unwrap();
    assert_eq!(managers(&stored), vec!["antrea-controller".to_owned()]);
}

#[tokio::test]
async fn update_replaces_the_cached_object_keeping_its_other_fields() {
    let h = real::start().await;
    h.seed("platform", 7, Some("drifted")).await;
    h.modify("platform", |t| {
        t.metadata.labels = Some([("team".to_owned(), "net".to_owned())].into());
        t.metadata.annotations = Some([("note".to_owned(), "keep me".to_owned())].into());
    })
    .await;
    let rv = h.rv("platform").await;
    let lister = h.lister();
    let snapshot = until(&lister, |s| {
        s.observe("platform").resource_version() == Some(rv.as_str())
    })
    .await;
    let rv = snapshot
        .observe("platform")
        .resource_version()
        .unwrap()
        .to_owned();

    let writer = lister.writer(h.writer_client.clone(), common::writer_config());
    let desired = spec("platform", 200, "");
    writer.update(&desired, &rv).await.unwrap();

    let stored = h.get("platform").await.unwrap();
    assert_eq!(stored["spec"], serde_json::json!({"priority": 200}));
    assert_eq!(stored["metadata"]["labels"]["team"], "net");
    assert_eq!(stored["metadata"]["annotations"]["note"], "keep me");
    let log = h.proxy.requests();
    let updates = log.matching(on(Verb::Update).named("platform"));
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].method, "PUT");
    assert_eq!(updates[0].code, Some(200));
    assert!(updates[0].query.contains("fieldManager=tierd"));
    // The real server gives tierd the fields it changed in managedFields.
    assert!(managers(&stored).contains(&"tierd".to_owned()), "{stored}");

    // The cache then shows the write: the core's echo.
    until(&lister, |s| match s.observe("platform") {
        tier_core::Observed::Present(t) => tier_core::in_sync(&desired, &t),
        _ => false,
    })
    .await;
}

/// The trap issue 10 found: an update built without the cache PUT a minimal object and the
/// Tier's labels became null. A writer cannot exist without a store now, and a Tier that is not
/// in it is stale: nothing is sent, nothing is dropped.
#[tokio::test]
async fn an_update_never_drops_labels_of_an_uncached_tier() {
    let h = real::start().await;
    h.seed("platform", 7, Some("drifted")).await;
    h.modify("platform", |t| {
        t.metadata.labels = Some([("team".to_owned(), "net".to_owned())].into());
    })
    .await;
    let rv = h.rv("platform").await;
    let error = assert_class(
        h.writer().update(&spec("platform", 200, "d"), &rv).await,
        ErrorClass::Stale,
    );
    assert!(
        error.message.contains("no longer in the Tier cache"),
        "{error:?}"
    );
    assert_eq!(h.proxy.requests().count(on(Verb::Update)), 0);
    let stored = h.get("platform").await.unwrap();
    assert_eq!(stored["metadata"]["labels"]["team"], "net");
    assert_eq!(
        h.stored("platform").await,
        Some((7, Some("drifted".into())))
    );
}

// ---- Stale ----

#[tokio::test]
async fn create_of_an_existing_tier_is_stale_already_exists() {
    let h = real::start().await;
    h.seed("baseline", 253, None).await;
    let error = assert_class(
        h.writer().create(&spec("baseline", 253, "")).await,
        ErrorClass::Stale,
    );
    assert_eq!(
        error.message, "tiers.crd.antrea.io \"baseline\" already exists",
        "{error:?}"
    );
    assert_eq!(
        h.proxy
            .requests()
            .count_code(on(Verb::Create).named("baseline"), 409),
        1
    );
}

#[tokio::test]
async fn update_on_a_stale_resource_version_is_stale_conflict() {
    let h = real::start().await;
    h.seed("baseline", 1, None).await;
    let old = h.rv("baseline").await;
    let (lister, writer) = h.cached_writer().await;
    let changed = h.modify("baseline", |t| t.spec.priority = 2).await;
    let new_rv = changed.metadata.resource_version.unwrap();
    until(&lister, |s| {
        s.observe("baseline").resource_version() == Some(new_rv.as_str())
    })
    .await;
    let error = assert_class(
        writer.update(&spec("baseline", 253, ""), &old).await,
        ErrorClass::Stale,
    );
    assert!(
        error.message.contains("the object has been modified"),
        "{error:?}"
    );
    assert_eq!(
        h.proxy
            .requests()
            .count_code(on(Verb::Update).named("baseline"), 409),
        1
    );
    assert_eq!(h.stored("baseline").await, Some((2, None)));
}

#[tokio::test]
async fn update_of_a_missing_tier_is_stale_not_found() {
    let h = real::start().await;
    h.seed("ghost", 5, None).await;
    let rv = h.rv("ghost").await;
    // The cache still shows the Tier (its watch stopped) when the server no longer has it.
    let (lister, writer) = h.cached_writer().await;
    drop(lister);
    h.delete("ghost").await;
    let error = assert_class(
        writer.update(&spec("ghost", 6, ""), &rv).await,
        ErrorClass::Stale,
    );
    assert!(error.message.contains("not found"), "{error:?}");
    assert_eq!(
        h.proxy
            .requests()
            .count_code(on(Verb::Update).named("ghost"), 404),
        1
    );
    assert_eq!(
        h.stored("ghost").await,
        None,
        "a PUT does not create a custom resource"
    );
}

// ---- Blocked ----

#[tokio::test]
async fn create_without_the_crd_is_blocked_on_a_missing_crd() {
    // No CRD installed: the real server's own 404 for an unknown resource.
    let h = real::start_with(&[real::TIER_RBAC]).await;
    let error = assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::NotInstalled,
    );
    assert!(
        error
            .message
            .contains("is the Tier CRD (tiers.crd.antrea.io) installed?"),
        "{error:?}"
    );
    assert_eq!(h.proxy.requests().count_code(on(Verb::Create), 404), 1);
}

/// kube-apiserver authorizes before it routes: without RBAC for Tiers, a missing CRD answers
/// 403, not 404 (tier-testserver answered 404 to anyone). tierd then says Forbidden, naming
/// the permission, which is the first thing to fix.
#[tokio::test]
async fn without_rbac_a_missing_crd_is_forbidden_not_not_installed() {
    let h = real::start_with(&[]).await;
    let error = assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Forbidden,
    );
    assert!(
        error
            .message
            .contains("cannot create resource \"tiers\" in API group \"crd.antrea.io\""),
        "{error:?}"
    );
    assert_eq!(h.proxy.requests().count_code(on(Verb::Create), 403), 1);
}

#[tokio::test]
async fn an_invalid_tier_is_denied_by_the_crd_schema() {
    let h = real::start().await;
    let error = assert_class(
        h.writer().create(&spec("toohigh", 300, "")).await,
        ErrorClass::Denied,
    );
    assert!(error.message.contains("spec.priority"), "{error:?}");
    assert!(error.message.contains("255"), "{error:?}");
    assert_eq!(
        h.proxy
            .requests()
            .count_code(on(Verb::Create).named("toohigh"), 422),
        1
    );
    assert_eq!(h.stored("toohigh").await, None);
}

#[tokio::test]
async fn forbidden_by_rbac_is_blocked_with_the_authorizers_message() {
    // The CRD but no RBAC for tierd's ServiceAccount: the real authorizer refuses.
    let h = real::start_with(&[real::ANTREA_TIER_CRD]).await;
    let error = assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Forbidden,
    );
    assert!(
        error.message.contains(
            "User \"system:serviceaccount:kube-system:antrea-controller\" cannot create resource \"tiers\" in API group \"crd.antrea.io\" at the cluster scope"
        ),
        "{error:?}"
    );
    assert_eq!(h.proxy.requests().count_code(on(Verb::Create), 403), 1);
}

#[tokio::test]
async fn an_update_forbidden_by_rbac_is_blocked() {
    // May create and read, not update: a ClusterRole narrower than the install's.
    let rbac = real::TIER_RBAC.replace(
        "verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\"]",
        "verbs: [\"get\", \"list\", \"watch\", \"create\"]",
    );
    let h = real::start_with(&[real::ANTREA_TIER_CRD, &rbac]).await;
    h.seed("a", 1, None).await;
    let rv = h.rv("a").await;
    let (_lister, writer) = h.cached_writer().await;
    let error = assert_class(
        writer.update(&spec("a", 2, ""), &rv).await,
        ErrorClass::Forbidden,
    );
    assert!(
        error.message.contains("cannot update resource \"tiers\""),
        "{error:?}"
    );
    assert_eq!(h.stored("a").await, Some((1, None)));
}

#[tokio::test]
async fn unauthorized_is_blocked() {
    let h = real::start().await;
    let kubeconfig = common::TempFile::new("bad-token");
    std::fs::write(
        &kubeconfig.0,
        h.proxy.kubeconfig_yaml("tierd", Some("not-a-known-token")),
    )
    .unwrap();
    let client = tier_kube::client::client(&ClientOptions {
        kubeconfig: Some(kubeconfig.0.clone()),
        ..ClientOptions::default()
    })
    .await
    .unwrap();
    let (store, _) = kube::runtime::reflector::store();
    let writer = KubeWriter::new(client, store, common::writer_config());
    assert_class(
        writer.create(&spec("a", 1, "")).await,
        ErrorClass::Forbidden,
    );
    let error = assert_class(
        writer.create(&spec("a", 1, "")).await,
        ErrorClass::Forbidden,
    );
    assert_eq!(error.message, "Unauthorized");
    let log = h.proxy.requests();
    assert_eq!(
        log.count_where(|r| r.method == "POST" && r.code == Some(401)),
        2
    );
    assert_eq!(h.stored("a").await, None);
}

// ---- Transient ----

#[tokio::test]
async fn too_many_requests_is_transient_with_retry_after_and_not_retried_by_the_client() {
    let h = real::start().await;
    h.proxy
        .inject(Fault::too_many_requests(on(Verb::Create), 7))
        .unwrap();
    let error = assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert_eq!(error.retry_after, Some(Duration::from_secs(7)));
    assert_eq!(
        h.proxy.requests().count(on(Verb::Create)),
        1,
        "kube's retry layer is off"
    );
    assert_eq!(h.stored("a").await, None);
}

#[tokio::test]
async fn internal_error_is_transient() {
    let h = real::start().await;
    h.proxy
        .inject(Fault::status(
            on(Verb::Create),
            500,
            "InternalError",
            "Internal error occurred: failed calling webhook \"tiervalidator.antrea.io\": no endpoints available",
        ))
        .unwrap();
    let error = assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert!(
        error.message.contains("failed calling webhook"),
        "{error:?}"
    );
}

/// A ValidatingWebhookConfiguration (URL-based, failurePolicy Fail) whose webhook is not
/// listening: the real server's own "failed calling webhook" 500.
const UNREACHABLE_WEBHOOK: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: tiervalidator
webhooks:
  - name: tiervalidator.antrea.io
    clientConfig:
      url: https://127.0.0.1:1/validate/tier
    rules:
      - apiGroups: ["crd.antrea.io"]
        apiVersions: ["v1beta1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["tiers"]
        scope: Cluster
    failurePolicy: Fail
    sideEffects: None
    admissionReviewVersions: ["v1"]
    timeoutSeconds: 1
"#;

#[tokio::test]
async fn an_unreachable_webhook_is_transient() {
    let h = real::start_with(&[real::ANTREA_TIER_CRD, real::TIER_RBAC, UNREACHABLE_WEBHOOK]).await;
    let error = assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert!(
        error
            .message
            .contains("failed calling webhook \"tiervalidator.antrea.io\""),
        "{error:?}"
    );
    assert_eq!(h.proxy.requests().count_code(on(Verb::Create), 500), 1);
    assert_eq!(h.stored("a").await, None);
}

#[tokio::test]
async fn service_unavailable_is_transient_and_not_retried_by_the_client() {
    let h = real::start().await;
    h.seed("a", 1, None).await;
    let rv = h.rv("a").await;
    h.proxy
        .inject(Fault::unavailable(on(Verb::Update)).retry_after(2))
        .unwrap();
    let (_lister, writer) = h.cached_writer().await;
    let error = assert_class(
        writer.update(&spec("a", 2, ""), &rv).await,
        ErrorClass::Transient,
    );
    assert_eq!(error.retry_after, Some(Duration::from_secs(2)));
    assert_eq!(
        h.proxy.requests().count(on(Verb::Update)),
        1,
        "kube's retry layer is off"
    );
    assert_eq!(h.stored("a").await, Some((1, None)));
}

#[tokio::test]
async fn gateway_timeout_is_transient_and_not_retried_by_the_client() {
    let h = real::start().await;
    h.proxy
        .inject(Fault::status(
            on(Verb::Create),
            504,
            "Timeout",
            "Timeout: request did not complete within requested timeout",
        ))
        .unwrap();
    assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert_eq!(
        h.proxy.requests().count(on(Verb::Create)),
        1,
        "kube's retry layer is off"
    );
}

#[tokio::test]
async fn a_dropped_connection_is_transient() {
    let h = real::start().await;
    h.proxy.inject(Fault::reset(on(Verb::Create))).unwrap();
    assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert_eq!(h.stored("a").await, None);
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let h = real::start().await;
    let writer = h.writer();
    h.proxy.outage(Outage::Refuse).await;
    let error = assert_class(
        writer.create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert!(!error.message.is_empty());
    h.proxy.resume().await.unwrap();
    writer.create(&spec("a", 1, "")).await.unwrap();
}

#[tokio::test]
async fn a_hanging_write_is_cut_by_the_call_timeout() {
    let h = real::start().await;
    h.proxy.inject(Fault::hang(on(Verb::Create))).unwrap();
    let writer = KubeWriter::new(
        h.writer_client.clone(),
        kube::runtime::reflector::store().0,
        WriterConfig {
            // Not shorter: a real create through a new TLS connection to the proxy and from it
            // to kube-apiserver took over 300 ms on a loaded 2-core machine.
            call_timeout: Duration::from_secs(2),
            ..WriterConfig::default()
        },
    );
    let started = Instant::now();
    let error = assert_class(
        writer.create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "{took:?}"
    );
    assert!(
        error.message.contains("did not complete within 2s"),
        "{error:?}"
    );
    // The writer is usable right after, while the cut request is still held.
    assert_eq!(h.proxy.held(), 1);
    writer.create(&spec("b", 2, "")).await.unwrap();
    assert_eq!(
        h.stored("a").await,
        None,
        "the cut create was never forwarded"
    );
}

// ---- Lost responses ----

#[tokio::test]
async fn a_lost_create_response_then_already_exists() {
    let h = real::start().await;
    h.proxy
        .inject(Fault::lose_response(on(Verb::Create)))
        .unwrap();
    let writer = h.writer();
    let desired = spec("baseline", 253, "");
    assert_class(writer.create(&desired).await, ErrorClass::Transient);
    assert_eq!(
        h.stored("baseline").await,
        Some((253, None)),
        "the create was applied"
    );
    let log = h.proxy.requests();
    assert_eq!(log.matching(on(Verb::Create))[0].upstream_code, Some(201));
    let error = assert_class(writer.create(&desired).await, ErrorClass::Stale);
    assert!(error.message.contains("already exists"), "{error:?}");
}

#[tokio::test]
async fn a_lost_update_response_then_conflict() {
    let h = real::start().await;
    h.seed("platform", 7, None).await;
    let rv = h.rv("platform").await;
    h.proxy
        .inject(Fault::lose_response(on(Verb::Update)))
        .unwrap();
    let (_lister, writer) = h.cached_writer().await;
    let desired = spec("platform", 200, "");
    assert_class(writer.update(&desired, &rv).await, ErrorClass::Transient);
    assert_eq!(
        h.stored("platform").await,
        Some((200, None)),
        "the update was applied"
    );
    assert_class(writer.update(&desired, &rv).await, ErrorClass::Stale);
}

#[tokio::test]
async fn a_lister_sees_a_write_whose_response_was_lost() {
    let h = real::start().await;
    let lister = h.lister();
    common::synced(&lister).await;
    h.proxy
        .inject(Fault::lose_response(on(Verb::Create)))
        .unwrap();
    assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    until(&lister, |s| s.observe("a").resource_version().is_some()).await;
}

// ---- On the in-process test server ----

#[tokio::test]
// tier-testserver: Antrea's tiervalidator webhook (overlap check) is not part of a bare kube-apiserver.
async fn an_admission_denial_is_denied_with_the_webhook_message() {
    let h = common::start(common::antrea_admission()).await;
    h.seed("squatter", 253, None);
    let error = assert_class(
        h.writer().create(&spec("baseline", 253, "")).await,
        ErrorClass::Denied,
    );
    assert!(
        error
            .message
            .starts_with("admission webhook \"tiervalidator.antrea.io\" denied the request: "),
        "{error:?}"
    );
    assert!(
        error.message.contains("overlaps with existing Tier"),
        "{error:?}"
    );
    assert_eq!(
        h.server
            .requests()
            .count_code(FakeVerb::Create, Some("baseline"), 400),
        1
    );
}

#[tokio::test]
// tier-testserver: Antrea's tiervalidator webhook (overlap check) is not part of a bare kube-apiserver.
async fn a_lost_create_response_then_an_overlap_denial() {
    let h = common::start(common::antrea_admission()).await;
    h.server
        .inject(FakeFault::lose_response_drop(FakeVerb::Create));
    let writer = h.writer();
    let desired = spec("baseline", 253, "");
    assert_class(writer.create(&desired).await, ErrorClass::Transient);
    assert_eq!(
        h.stored("baseline"),
        Some((253, None)),
        "the create was applied"
    );
    // Admission runs before storage: the webhook denies the retry before AlreadyExists.
    let error = assert_class(writer.create(&desired).await, ErrorClass::Denied);
    assert!(
        error.message.contains("overlaps with existing Tier"),
        "{error:?}"
    );
}
