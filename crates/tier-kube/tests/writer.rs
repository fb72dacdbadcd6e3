//! The writer through real HTTP: creates, updates, and every error class as the kube client
//! sees it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{Harness, USER, spec, start, until};
use tier_core::{ErrorClass, TierWriter, WriteError};
use tier_kube::client::ClientOptions;
use tier_kube::writer::{KubeWriter, WriterConfig};
use tier_testserver::{Fault, ServerConfig, Verb};

async fn plain() -> Harness {
    start(ServerConfig::default()).await
}

fn assert_class(result: Result<(), WriteError>, class: ErrorClass) -> WriteError {
    let error = result.expect_err("the write should fail");
    assert_eq!(error.class, class, "{error:?}");
    error
}

#[tokio::test]
async fn create_posts_the_tier_with_the_field_manager() {
    let h = plain().await;
    let desired = spec(
        "platform",
        200,
        "[READ-ONLY]: System generated Platform Tier",
    );
    h.writer().create(&desired).await.unwrap();
    assert_eq!(
        h.stored("platform"),
        Some((
            200,
            Some("[READ-ONLY]: System generated Platform Tier".into())
        ))
    );
    let log = h.server.requests();
    let creates = log.matching(Verb::Create, Some("platform"));
    assert_eq!(creates.len(), 1);
    assert_eq!(creates[0].code, Some(201));
    assert!(
        creates[0].query.contains("fieldManager=tierd"),
        "{:?}",
        creates[0]
    );
    assert_eq!(creates[0].user.as_deref(), Some(USER));
}

#[tokio::test]
async fn create_leaves_an_empty_description_out() {
    let h = plain().await;
    h.writer().create(&spec("bare", 3, "")).await.unwrap();
    assert_eq!(h.stored("bare"), Some((3, None)));
}

#[tokio::test]
async fn a_custom_field_manager_is_used() {
    let h = plain().await;
    let config = WriterConfig {
        field_manager: "antrea-controller".into(),
        ..common::writer_config()
    };
    let (store, _) = kube::runtime::reflector::store();
    let writer = KubeWriter::new(h.writer_client.clone(), store, config);
    writer.create(&spec("a", 1, "")).await.unwrap();
    let log = h.server.requests();
    assert!(
        log.matching(Verb::Create, Some("a"))[0]
            .query
            .contains("fieldManager=antrea-controller")
    );
}

#[tokio::test]
async fn update_replaces_the_cached_object_keeping_its_other_fields() {
    let h = plain().await;
    h.seed("platform", 7, Some("drifted"));
    h.server
        .store()
        .modify("platform", |obj| {
            obj["metadata"]["labels"] = serde_json::json!({"team": "net"});
            obj["metadata"]["annotations"] = serde_json::json!({"note": "keep me"});
        })
        .unwrap();
    let lister = h.lister();
    let snapshot = until(&lister, |s| {
        s.observe("platform").resource_version() == Some(h.rv("platform").as_str())
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

    let stored = h.server.store().get("platform").unwrap();
    assert_eq!(stored["spec"], serde_json::json!({"priority": 200}));
    assert_eq!(stored["metadata"]["labels"]["team"], "net");
    assert_eq!(stored["metadata"]["annotations"]["note"], "keep me");
    let log = h.server.requests();
    let updates = log.matching(Verb::Update, Some("platform"));
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].method, "PUT");
    assert_eq!(updates[0].code, Some(200));
    assert!(updates[0].query.contains("fieldManager=tierd"));

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
    let h = plain().await;
    h.seed("platform", 7, Some("drifted"));
    h.server
        .store()
        .modify("platform", |obj| {
            obj["metadata"]["labels"] = serde_json::json!({"team": "net"});
        })
        .unwrap();
    let rv = h.rv("platform");
    let error = assert_class(
        h.writer().update(&spec("platform", 200, "d"), &rv).await,
        ErrorClass::Stale,
    );
    assert!(
        error.message.contains("no longer in the Tier cache"),
        "{error:?}"
    );
    assert_eq!(h.server.requests().count(Verb::Update, None), 0);
    let stored = h.server.store().get("platform").unwrap();
    assert_eq!(stored["metadata"]["labels"]["team"], "net");
    assert_eq!(h.stored("platform"), Some((7, Some("drifted".into()))));
}

// ---- Stale ----

#[tokio::test]
async fn create_of_an_existing_tier_is_stale_already_exists() {
    let h = plain().await;
    h.seed("baseline", 253, None);
    let error = assert_class(
        h.writer().create(&spec("baseline", 253, "")).await,
        ErrorClass::Stale,
    );
    assert!(error.message.contains("already exists"), "{error:?}");
    assert_eq!(
        h.server
            .requests()
            .count_code(Verb::Create, Some("baseline"), 409),
        1
    );
}

#[tokio::test]
async fn update_on_a_stale_resource_version_is_stale_conflict() {
    let h = plain().await;
    h.seed("baseline", 1, None);
    let old = h.rv("baseline");
    h.server
        .store()
        .modify("baseline", |obj| obj["spec"]["priority"] = 2.into())
        .unwrap();
    let (_lister, writer) = h.cached_writer().await;
    let error = assert_class(
        writer.update(&spec("baseline", 253, ""), &old).await,
        ErrorClass::Stale,
    );
    assert!(error.message.contains("modified"), "{error:?}");
    assert_eq!(
        h.server
            .requests()
            .count_code(Verb::Update, Some("baseline"), 409),
        1
    );
    assert_eq!(h.stored("baseline"), Some((2, None)));
}

#[tokio::test]
async fn update_of_a_missing_tier_is_stale_not_found() {
    let h = plain().await;
    h.seed("ghost", 5, None);
    let rv = h.rv("ghost");
    // The cache still shows the Tier (its watch stopped) when the server no longer has it.
    let (lister, writer) = h.cached_writer().await;
    drop(lister);
    h.server.store().delete("ghost").unwrap();
    let error = assert_class(
        writer.update(&spec("ghost", 6, ""), &rv).await,
        ErrorClass::Stale,
    );
    assert!(error.message.contains("not found"), "{error:?}");
    assert_eq!(
        h.server
            .requests()
            .count_code(Verb::Update, Some("ghost"), 404),
        1
    );
}

// ---- Blocked ----

#[tokio::test]
async fn create_answered_404_is_blocked_on_a_missing_crd() {
    let h = plain().await;
    h.server.inject(Fault::status(
        Verb::Create,
        404,
        "NotFound",
        "the server could not find the requested resource",
    ));
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
}

#[tokio::test]
async fn an_admission_denial_is_denied_with_the_webhook_message() {
    let h = start(common::antrea_admission()).await;
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
            .count_code(Verb::Create, Some("baseline"), 400),
        1
    );
}

#[tokio::test]
async fn an_invalid_tier_is_denied() {
    let h = plain().await;
    let error = assert_class(
        h.writer().create(&spec("toohigh", 300, "")).await,
        ErrorClass::Denied,
    );
    assert!(error.message.contains("spec.priority"), "{error:?}");
    assert_eq!(
        h.server
            .requests()
            .count_code(Verb::Create, Some("toohigh"), 422),
        1
    );
}

#[tokio::test]
async fn forbidden_is_blocked() {
    let h = plain().await;
    let message = "tiers.crd.antrea.io is forbidden: User \"x\" cannot create resource \"tiers\"";
    h.server
        .inject(Fault::status(Verb::Create, 403, "Forbidden", message));
    let error = assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Forbidden,
    );
    assert_eq!(error.message, message);
}

#[tokio::test]
async fn unauthorized_is_blocked() {
    let h = plain().await;
    let kubeconfig = common::TempFile::new("bad-token");
    let yaml = h
        .server
        .kubeconfig_yaml(USER, "bad")
        .unwrap()
        .replace(common::TOKEN, "not-a-known-token");
    std::fs::write(&kubeconfig.0, yaml).unwrap();
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
    let log = h.server.requests();
    assert_eq!(
        log.count_where(|r| r.method == "POST" && r.code == Some(401)),
        2
    );
    assert_eq!(h.stored("a"), None);
}

// ---- Transient ----

#[tokio::test]
async fn too_many_requests_is_transient_with_retry_after_and_not_retried_by_the_client() {
    let h = plain().await;
    h.server.inject(Fault::too_many_requests(Verb::Create, 7));
    let error = assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert_eq!(error.retry_after, Some(Duration::from_secs(7)));
    assert_eq!(
        h.server.requests().count(Verb::Create, None),
        1,
        "kube's retry layer is off"
    );
    assert_eq!(h.stored("a"), None);
}

#[tokio::test]
async fn internal_error_is_transient() {
    let h = plain().await;
    h.server.inject(Fault::status(
        Verb::Create,
        500,
        "InternalError",
        "Internal error occurred: failed calling webhook \"tiervalidator.antrea.io\": no endpoints available",
    ));
    let error = assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert!(
        error.message.contains("failed calling webhook"),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_unreachable_webhook_is_transient() {
    let webhook = tier_testserver::WebhookConfig::new("https://127.0.0.1:1/validate/tier")
        .insecure()
        .timeout(Duration::from_secs(1));
    let h =
        start(ServerConfig::default().admission(tier_testserver::AdmissionMode::Webhook(webhook)))
            .await;
    let error = assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert!(
        error.message.contains("failed calling webhook"),
        "{error:?}"
    );
    assert_eq!(h.server.requests().count_code(Verb::Create, None, 500), 1);
}

#[tokio::test]
async fn service_unavailable_is_transient_and_not_retried_by_the_client() {
    let h = plain().await;
    h.seed("a", 1, None);
    let rv = h.rv("a");
    h.server
        .inject(Fault::unavailable(Verb::Update).retry_after(2));
    let (_lister, writer) = h.cached_writer().await;
    let error = assert_class(
        writer.update(&spec("a", 2, ""), &rv).await,
        ErrorClass::Transient,
    );
    assert_eq!(error.retry_after, Some(Duration::from_secs(2)));
    assert_eq!(
        h.server.requests().count(Verb::Update, None),
        1,
        "kube's retry layer is off"
    );
}

#[tokio::test]
async fn gateway_timeout_is_transient_and_not_retried_by_the_client() {
    let h = plain().await;
    h.server.inject(Fault::status(
        Verb::Create,
        504,
        "Timeout",
        "Timeout: request did not complete within requested timeout",
    ));
    assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert_eq!(
        h.server.requests().count(Verb::Create, None),
        1,
        "kube's retry layer is off"
    );
}

#[tokio::test]
async fn a_dropped_connection_is_transient() {
    let h = plain().await;
    h.server.inject(Fault::drop_connection(Verb::Create));
    assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert_eq!(h.stored("a"), None);
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let h = plain().await;
    let writer = h.writer();
    h.server.shutdown().await;
    let error = assert_class(
        writer.create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    assert!(!error.message.is_empty());
}

#[tokio::test]
async fn a_hanging_write_is_cut_by_the_call_timeout() {
    let h = plain().await;
    h.server.inject(Fault::hang(Verb::Create));
    let writer = KubeWriter::new(
        h.writer_client.clone(),
        kube::runtime::reflector::store().0,
        WriterConfig {
            call_timeout: Duration::from_millis(300),
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
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(
        error.message.contains("did not complete within 300ms"),
        "{error:?}"
    );
    // The writer is usable right after.
    writer.create(&spec("b", 2, "")).await.unwrap();
}

// ---- Lost responses ----

#[tokio::test]
async fn a_lost_create_response_then_already_exists() {
    let h = plain().await;
    h.server.inject(Fault::lose_response(Verb::Create));
    let writer = h.writer();
    let desired = spec("baseline", 253, "");
    assert_class(writer.create(&desired).await, ErrorClass::Transient);
    assert_eq!(
        h.stored("baseline"),
        Some((253, None)),
        "the create was applied"
    );
    let error = assert_class(writer.create(&desired).await, ErrorClass::Stale);
    assert!(error.message.contains("already exists"), "{error:?}");
}

#[tokio::test]
async fn a_lost_create_response_then_an_overlap_denial() {
    let h = start(common::antrea_admission()).await;
    h.server.inject(Fault::lose_response_drop(Verb::Create));
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

#[tokio::test]
async fn a_lost_update_response_then_conflict() {
    let h = plain().await;
    h.seed("platform", 7, None);
    let rv = h.rv("platform");
    h.server.inject(Fault::lose_response(Verb::Update));
    let (_lister, writer) = h.cached_writer().await;
    let desired = spec("platform", 200, "");
    assert_class(writer.update(&desired, &rv).await, ErrorClass::Transient);
    assert_eq!(
        h.stored("platform"),
        Some((200, None)),
        "the update was applied"
    );
    assert_class(writer.update(&desired, &rv).await, ErrorClass::Stale);
}

#[tokio::test]
async fn a_lister_sees_a_write_whose_response_was_lost() {
    let h = plain().await;
    let lister = h.lister();
    common::synced(&lister).await;
    h.server.inject(Fault::lose_response_drop(Verb::Create));
    assert_class(
        h.writer().create(&spec("a", 1, "")).await,
        ErrorClass::Transient,
    );
    until(&lister, |s| s.observe("a").resource_version().is_some()).await;
}
