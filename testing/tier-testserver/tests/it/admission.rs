//! Admission: Antrea's rules in process, a real HTTPS webhook, failure policies and the
//! readiness gate, and kube-apiserver's order of validation, admission and storage.

use std::time::Duration;

use serde_json::{Value, json};
use tier_testserver::antrea::SYSTEM_TIERS;
use tier_testserver::tier::tier;
use tier_testserver::{
    AdmissionMode, FailurePolicy, ServerConfig, TestWebhook, WebhookBehaviour, WebhookConfig,
};

use crate::common::{ADMIN, CONTROLLER, CONTROLLER_TOKEN, Http, Reply, TIERS, server};

const PREFIX: &str = "admission webhook \"tiervalidator.antrea.io\" denied the request: ";

fn builtin() -> AdmissionMode {
    AdmissionMode::BuiltinAntrea {
        controller_user: CONTROLLER.into(),
    }
}

fn assert_denied(reply: &Reply, message: &str) {
    assert_eq!(reply.code, 400, "{:?}", reply.body);
    assert_eq!(reply.body["kind"], "Status");
    assert_eq!(reply.body["status"], "Failure");
    assert!(reply.body.get("reason").is_none(), "{:?}", reply.body);
    assert_eq!(reply.body["message"], format!("{PREFIX}{message}"));
}

async fn create_system_tiers(http: &Http) {
    for t in SYSTEM_TIERS {
        assert_eq!(http.post(TIERS, &t.object()).await.code, 201);
    }
}

#[tokio::test]
async fn builtin_antrea_rules() {
    let server = server(ServerConfig::default().admission(builtin())).await;
    let admin = Http::admin(&server);
    let controller = Http::new(&server, Some(CONTROLLER_TOKEN));
    create_system_tiers(&admin).await;

    // Create: overlap (even for an existing name), reserved priorities.
    assert_denied(
        &admin.post(TIERS, &tier("baseline", 253, None)).await,
        "tier baseline priority 253 overlaps with existing Tier",
    );
    assert_denied(
        &admin.post(TIERS, &tier("mine", 254, None)).await,
        "tier mine priority 254 is reserved",
    );

    // Update: priority changes only for the controller; descriptions for anyone.
    let baseline = admin.get(&format!("{TIERS}/baseline")).await.body;
    let mut moved = baseline.clone();
    moved["spec"]["priority"] = json!(5);
    assert_denied(
        &admin.put(&format!("{TIERS}/baseline"), &moved).await,
        "update to Tier priority is not allowed",
    );
    assert_denied(
        &admin
            .merge_patch(
                &format!("{TIERS}/baseline"),
                &json!({"spec": {"priority": 5}}),
            )
            .await,
        "update to Tier priority is not allowed",
    );
    assert_eq!(
        admin
            .merge_patch(
                &format!("{TIERS}/baseline"),
                &json!({"spec": {"description": "x"}})
            )
            .await
            .code,
        200
    );
    assert_eq!(
        controller
            .merge_patch(
                &format!("{TIERS}/baseline"),
                &json!({"spec": {"priority": 5}})
            )
            .await
            .code,
        200
    );

    // Delete: the six system names are protected.
    assert_denied(
        &admin.delete(&format!("{TIERS}/emergency"), None).await,
        "cannot delete reserved tier emergency",
    );
    assert_eq!(admin.post(TIERS, &tier("mine", 10, None)).await.code, 201);
    assert_eq!(admin.delete(&format!("{TIERS}/mine"), None).await.code, 200);

    // At most 20 distinct priorities.
    for i in 0..14 {
        assert_eq!(
            admin
                .post(TIERS, &tier(&format!("u{i}"), 10 + i, None))
                .await
                .code,
            201
        );
    }
    assert_denied(
        &admin.post(TIERS, &tier("one-too-many", 40, None)).await,
        "maximum number of Tiers supported: 20",
    );
}

#[tokio::test]
async fn create_runs_validation_then_admission_then_storage() {
    let server = server(ServerConfig::default().admission(builtin())).await;
    let http = Http::admin(&server);
    create_system_tiers(&http).await;
    // Schema validation comes first: 422, not an admission denial.
    assert_eq!(
        http.post(TIERS, &tier("baseline", 300, None)).await.code,
        422
    );
    // Admission before storage: the overlap denial hides AlreadyExists.
    assert_eq!(
        http.post(TIERS, &tier("baseline", 253, None)).await.code,
        400
    );
    // Without admission, storage answers AlreadyExists.
    server.set_admission(AdmissionMode::None).unwrap();
    assert_eq!(server.admission(), AdmissionMode::None);
    let reply = http.post(TIERS, &tier("baseline", 253, None)).await;
    assert_eq!(reply.code, 409);
    assert_eq!(reply.body["reason"], "AlreadyExists");
}

#[tokio::test]
async fn update_checks_the_resource_version_before_admission() {
    let server = server(ServerConfig::default().admission(builtin())).await;
    let http = Http::admin(&server);
    let created = http.post(TIERS, &tier("t", 1, None)).await.body;
    http.merge_patch(
        &format!("{TIERS}/t"),
        &json!({"spec": {"description": "d"}}),
    )
    .await;
    let mut stale = created;
    stale["spec"]["priority"] = json!(2);
    let reply = http.put(&format!("{TIERS}/t"), &stale).await;
    assert_eq!(reply.code, 409);
    assert_eq!(reply.body["reason"], "Conflict");
}

async fn webhook_server(
    behaviour: WebhookBehaviour,
) -> (tier_testserver::TestApiServer, TestWebhook) {
    let server = server(ServerConfig::default()).await;
    let webhook = TestWebhook::start(server.store(), behaviour).await.unwrap();
    server
        .set_admission(AdmissionMode::Webhook(webhook.config()))
        .unwrap();
    (server, webhook)
}

#[tokio::test]
async fn webhook_mode_sends_admission_reviews_and_honours_verdicts() {
    let (server, webhook) = webhook_server(WebhookBehaviour::Antrea {
        controller_user: CONTROLLER.into(),
    })
    .await;
    let http = Http::admin(&server);
    create_system_tiers(&http).await;
    assert_denied(
        &http.post(TIERS, &tier("baseline", 253, None)).await,
        "tier baseline priority 253 overlaps with existing Tier",
    );
    assert_denied(
        &http.delete(&format!("{TIERS}/baseline"), None).await,
        "cannot delete reserved tier baseline",
    );
    assert_eq!(
        http.merge_patch(
            &format!("{TIERS}/baseline"),
            &json!({"spec": {"description": "d"}})
        )
        .await
        .code,
        200
    );
    let reviews = webhook.reviews();
    assert_eq!(reviews.len(), 9);
    let create = &reviews[0];
    assert_eq!(create["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(create["kind"], "AdmissionReview");
    let request = &create["request"];
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(request["name"], "baseline");
    assert_eq!(request["userInfo"]["username"], ADMIN);
    assert_eq!(request["kind"]["kind"], "Tier");
    assert_eq!(request["resource"]["resource"], "tiers");
    assert_eq!(request["object"]["spec"]["priority"], 253);
    assert_eq!(request["oldObject"], Value::Null);
    assert!(!request["uid"].as_str().unwrap().is_empty());
    let delete = &reviews[7]["request"];
    assert_eq!(delete["operation"], "DELETE");
    assert_eq!(delete["object"], Value::Null);
    assert_eq!(delete["oldObject"]["metadata"]["name"], "baseline");
    let update = &reviews[8]["request"];
    assert_eq!(update["operation"], "UPDATE");
    assert_eq!(
        update["oldObject"]["spec"]["description"],
        SYSTEM_TIERS[0].description
    );
    assert_eq!(update["object"]["spec"]["description"], "d");

    webhook.set_behaviour(WebhookBehaviour::DenyAll {
        message: "closed for maintenance".into(),
    });
    assert_denied(
        &http.post(TIERS, &tier("x", 1, None)).await,
        "closed for maintenance",
    );
}

fn assert_call_failed(reply: &Reply, detail: &str) {
    assert_eq!(reply.code, 500, "{:?}", reply.body);
    assert_eq!(reply.body["reason"], "InternalError");
    let message = reply.body["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Internal error occurred: failed calling webhook \"tiervalidator.antrea.io\": "
        ),
        "{message}"
    );
    assert!(message.contains(detail), "{message}");
}

#[tokio::test]
async fn unreachable_webhook_fails_closed_or_open_by_policy() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/validate/tier", closed.local_addr().unwrap());
    drop(closed);
    server
        .set_admission(AdmissionMode::Webhook(
            WebhookConfig::new(url.clone()).insecure(),
        ))
        .unwrap();
    assert_call_failed(
        &http.post(TIERS, &tier("a", 1, None)).await,
        &format!("failed to call webhook: Post \"{url}?timeout=5s\""),
    );
    assert!(server.store().get("a").is_none());
    server
        .set_admission(AdmissionMode::Webhook(
            WebhookConfig::new(url)
                .insecure()
                .failure_policy(FailurePolicy::Ignore),
        ))
        .unwrap();
    assert_eq!(http.post(TIERS, &tier("a", 1, None)).await.code, 201);
}

#[tokio::test]
async fn webhook_timeout_bad_uid_and_server_errors_are_call_failures() {
    let (server, webhook) = webhook_server(WebhookBehaviour::Hang).await;
    server
        .set_admission(AdmissionMode::Webhook(
            webhook.config().timeout(Duration::from_millis(200)),
        ))
        .unwrap();
    let http = Http::admin(&server);
    assert_call_failed(
        &http.post(TIERS, &tier("a", 1, None)).await,
        "context deadline exceeded",
    );
    webhook.set_behaviour(WebhookBehaviour::WrongUid);
    assert_call_failed(
        &http.post(TIERS, &tier("a", 1, None)).await,
        "expected response.uid=",
    );
    webhook.set_behaviour(WebhookBehaviour::ServerError);
    assert_call_failed(&http.post(TIERS, &tier("a", 1, None)).await, "boom");
    webhook.set_behaviour(WebhookBehaviour::AllowAll);
    assert_eq!(http.post(TIERS, &tier("a", 1, None)).await.code, 201);
}

#[tokio::test]
async fn ready_url_gates_webhook_calls_like_service_endpoints() {
    let (server, webhook) = webhook_server(WebhookBehaviour::AllowAll).await;
    let http = Http::admin(&server);
    webhook.set_ready(false);
    assert_call_failed(
        &http.post(TIERS, &tier("a", 1, None)).await,
        "no endpoints available for service \"antrea\"",
    );
    assert!(webhook.reviews().is_empty());
    webhook.set_ready(true);
    assert_eq!(http.post(TIERS, &tier("a", 1, None)).await.code, 201);
    assert_eq!(webhook.reviews().len(), 1);
}

#[tokio::test]
async fn webhook_tls_is_verified_unless_insecure() {
    let (server, webhook) = webhook_server(WebhookBehaviour::AllowAll).await;
    let http = Http::admin(&server);
    server
        .set_admission(AdmissionMode::Webhook(WebhookConfig::new(webhook.url())))
        .unwrap();
    assert_call_failed(
        &http.post(TIERS, &tier("a", 1, None)).await,
        "failed to call webhook",
    );
    server
        .set_admission(AdmissionMode::Webhook(
            WebhookConfig::new(webhook.url()).insecure(),
        ))
        .unwrap();
    assert_eq!(http.post(TIERS, &tier("a", 1, None)).await.code, 201);
    assert!(
        server
            .set_admission(AdmissionMode::Webhook(
                WebhookConfig::new(webhook.url()).ca_pem("garbage")
            ))
            .is_err()
    );
}
