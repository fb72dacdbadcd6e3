//! `--self-signed-cert` against the test API server: create-if-absent across replicas, renewal
//! before expiry, the webhook configuration's caBundle, and errors that name the object.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, SystemTime};

use serde_json::json;
use tier_kube::certs::{self, CertError, SecretAction, SelfSignedConfig};
use tier_testserver::{ObjectKind, ServerConfig};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn config() -> SelfSignedConfig {
    SelfSignedConfig::new("kube-system", "tierd-self-signed-cert", "tierd")
        .webhook_configuration("tierd")
}

fn webhook_configuration() -> serde_json::Value {
    let hook = |name: &str| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "tierd", "namespace": "kube-system", "path": "/validate/tier"}},
        })
    };
    json!({"metadata": {"name": "tierd"}, "webhooks": [hook("a.tierd.io"), hook("b.tierd.io")]})
}

/// Stores [`webhook_configuration`] in the test API server.
fn install_webhook_configuration(store: &tier_testserver::Store) {
    store
        .put_object(
            ObjectKind::ValidatingWebhookConfiguration,
            "",
            webhook_configuration(),
        )
        .unwrap();
}

fn decoded(value: &serde_json::Value) -> String {
    let bytes: k8s_openapi::ByteString = serde_json::from_value(value.clone()).unwrap();
    String::from_utf8(bytes.0).unwrap()
}

struct Files {
    cert: common::TempFile,
    key: common::TempFile,
}

fn files() -> Files {
    Files {
        cert: common::TempFile::new("tls-crt"),
        key: common::TempFile::new("tls-key"),
    }
}

#[tokio::test]
async fn replicas_racing_to_create_end_with_one_secret_they_all_use() {
    let harness = common::start(ServerConfig::default()).await;
    let now = SystemTime::now();
    let config = config();
    let (a, b, c) = tokio::join!(
        certs::ensure_secret(&harness.client, &config, now),
        certs::ensure_secret(&harness.client, &config, now),
        certs::ensure_secret(&harness.client, &config, now),
    );
    let results = [a.unwrap(), b.unwrap(), c.unwrap()];
    let created = results
        .iter()
        .filter(|(_, action)| *action == SecretAction::Created)
        .count();
    assert_eq!(created, 1, "exactly one replica creates the Secret");
    assert!(results.iter().all(|(bundle, _)| *bundle == results[0].0));
    let secrets = harness.server.store().objects(ObjectKind::Secret);
    assert_eq!(secrets.len(), 1);
    assert_eq!(secrets[0]["type"], "kubernetes.io/tls");
    assert_eq!(
        decoded(&secrets[0]["data"]["tls.crt"]),
        results[0].0.tls_crt
    );
    let creates = harness.server.requests().count_created("/secrets");
    assert_eq!(creates, 1, "one create succeeded");
}

#[tokio::test]
async fn the_serving_certificate_is_renewed_before_expiry_with_the_same_ca() {
    let harness = common::start(ServerConfig::default()).await;
    install_webhook_configuration(&harness.server.store());
    let files = files();
    let now = SystemTime::now();
    let first = certs::reconcile(&harness.client, &config(), &files.cert.0, &files.key.0, now)
        .await
        .unwrap();
    assert_eq!(first.secret, SecretAction::Created);
    assert!(first.files_written && first.ca_bundle_updated);

    // A day later nothing is due: no write at all.
    let calm = certs::reconcile(
        &harness.client,
        &config(),
        &files.cert.0,
        &files.key.0,
        now + DAY,
    )
    .await
    .unwrap();
    assert_eq!(calm.secret, SecretAction::Unchanged);
    assert!(!calm.files_written && !calm.ca_bundle_updated);

    // Inside the renewal window: a new serving certificate from the same CA.
    let due = now + config().validity - config().renew_before + DAY;
    let renewed = certs::reconcile(&harness.client, &config(), &files.cert.0, &files.key.0, due)
        .await
        .unwrap();
    assert_eq!(renewed.secret, SecretAction::Renewed);
    assert_eq!(renewed.bundle.ca_crt, first.bundle.ca_crt);
    assert_ne!(renewed.bundle.tls_crt, first.bundle.tls_crt);
    assert!(renewed.files_written);
    assert!(!renewed.ca_bundle_updated, "same CA: the caBundle stays");
    assert_eq!(
        std::fs::read_to_string(&files.cert.0).unwrap(),
        renewed.bundle.tls_crt
    );
    assert_eq!(
        std::fs::read_to_string(&files.key.0).unwrap(),
        renewed.bundle.tls_key
    );
    let stored = harness
        .server
        .store()
        .object(ObjectKind::Secret, "kube-system", "tierd-self-signed-cert")
        .unwrap();
    assert_eq!(decoded(&stored["data"]["tls.crt"]), renewed.bundle.tls_crt);
}

#[tokio::test]
async fn every_webhook_gets_the_ca_and_a_changed_bundle_is_put_back() {
    let harness = common::start(ServerConfig::default()).await;
    let store = harness.server.store();
    install_webhook_configuration(&store);
    let files = files();
    let now = SystemTime::now();
    let done = certs::reconcile(&harness.client, &config(), &files.cert.0, &files.key.0, now)
        .await
        .unwrap();
    let stored = store
        .object(ObjectKind::ValidatingWebhookConfiguration, "", "tierd")
        .unwrap();
    for hook in stored["webhooks"].as_array().unwrap() {
        assert_eq!(
            decoded(&hook["clientConfig"]["caBundle"]),
            done.bundle.ca_crt
        );
    }
    // Someone blanks it (a re-apply of webhook.yaml): the next round restores it.
    install_webhook_configuration(&store);
    let again = certs::reconcile(&harness.client, &config(), &files.cert.0, &files.key.0, now)
        .await
        .unwrap();
    assert!(again.ca_bundle_updated);
    let stored = store
        .object(ObjectKind::ValidatingWebhookConfiguration, "", "tierd")
        .unwrap();
    assert_eq!(
        decoded(&stored["webhooks"][1]["clientConfig"]["caBundle"]),
        done.bundle.ca_crt
    );
}

#[tokio::test]
async fn a_corrupt_secret_is_replaced_and_a_missing_configuration_is_named() {
    let harness = common::start(ServerConfig::default()).await;
    let store = harness.server.store();
    store
        .put_object(
            ObjectKind::Secret,
            "kube-system",
            json!({"metadata": {"name": "tierd-self-signed-cert"}, "data": {"ca.crt": "Z2FyYmFnZQ=="}}),
        )
        .unwrap();
    let (bundle, action) = certs::ensure_secret(&harness.client, &config(), SystemTime::now())
        .await
        .unwrap();
    assert_eq!(action, SecretAction::Replaced);
    assert!(bundle.ca_crt.starts_with("-----BEGIN CERTIFICATE-----"));

    let files = files();
    let error = certs::reconcile(
        &harness.client,
        &config(),
        &files.cert.0,
        &files.key.0,
        SystemTime::now(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, CertError::Api { verb: "get", .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("ValidatingWebhookConfiguration tierd"),
        "{message}"
    );
    assert!(message.contains("RBAC"), "{message}");
}

#[tokio::test]
async fn replicas_setting_the_ca_bundle_at_once_both_succeed() {
    let harness = common::start(ServerConfig::default()).await;
    install_webhook_configuration(&harness.server.store());
    let ca = certs::generate(&config(), SystemTime::now())
        .unwrap()
        .ca_crt;
    let (a, b) = tokio::join!(
        certs::ensure_ca_bundle(&harness.client, "tierd", &ca),
        certs::ensure_ca_bundle(&harness.client, "tierd", &ca),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a ^ b, "exactly one of them wrote: {a} {b}");
    let conflicts = harness
        .server
        .requests()
        .records()
        .iter()
        .filter(|r| r.method == "PUT" && r.code == Some(409))
        .count();
    assert_eq!(conflicts, 1, "the loser met a Conflict and read again");
}
