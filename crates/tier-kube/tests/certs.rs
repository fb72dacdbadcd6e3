//! `--self-signed-cert` against the test API server: filling the Secret the install ships
//! empty across replicas (never creating one), renewal before expiry, every kind of bad content
//! found and replaced with a Warning Event, the webhook configuration's caBundle, and errors
//! that name the object.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, SystemTime};

use serde_json::json;
use tier_kube::certs::{self, CertBundle, CertError, Health, SecretAction, SelfSignedConfig};
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

/// The Secret as deploy/components/self-signed-cert ships it (empty).
fn install_empty_secret(store: &tier_testserver::Store) {
    tier_testserver::install_shipped_secret(store).unwrap();
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
async fn replicas_racing_to_fill_the_shipped_secret_end_with_one_bundle_they_all_use() {
    let harness = common::start(ServerConfig::default()).await;
    install_empty_secret(&harness.server.store());
    let now = SystemTime::now();
    let config = config();
    let (a, b, c) = tokio::join!(
        certs::ensure_secret(&harness.client, &config, now),
        certs::ensure_secret(&harness.client, &config, now),
        certs::ensure_secret(&harness.client, &config, now),
    );
    let results = [a.unwrap(), b.unwrap(), c.unwrap()];
    let filled = results
        .iter()
        .filter(|(_, action)| *action == SecretAction::Filled)
        .count();
    assert_eq!(filled, 1, "exactly one replica fills the Secret");
    assert!(results.iter().all(|(bundle, _)| *bundle == results[0].0));
    let secrets = harness.server.store().objects(ObjectKind::Secret);
    assert_eq!(secrets.len(), 1);
    assert_eq!(secrets[0]["type"], "Opaque");
    assert_eq!(
        decoded(&secrets[0]["data"]["tls.crt"]),
        results[0].0.tls_crt
    );
    let posts = harness
        .server
        .requests()
        .records()
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("/secrets"))
        .count();
    assert_eq!(posts, 0, "tierd never creates a Secret");
    // Filling the shipped Secret is expected: no Warning Event.
    assert!(bad_certificate_events(&harness).is_empty());
}

#[tokio::test]
async fn a_missing_secret_is_an_error_saying_to_apply_the_install_and_nothing_is_created() {
    let harness = common::start(ServerConfig::default()).await;
    let error = certs::ensure_secret(&harness.client, &config(), SystemTime::now())
        .await
        .unwrap_err();
    assert!(matches!(error, CertError::SecretMissing(_)), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("Secret kube-system/tierd-self-signed-cert does not exist"),
        "{message}"
    );
    assert!(message.contains("apply the install"), "{message}");
    assert!(
        harness
            .server
            .store()
            .objects(ObjectKind::Secret)
            .is_empty()
    );
}

#[tokio::test]
async fn the_serving_certificate_is_renewed_before_expiry_with_the_same_ca() {
    let harness = common::start(ServerConfig::default()).await;
    install_webhook_configuration(&harness.server.store());
    install_empty_secret(&harness.server.store());
    let files = files();
    let now = SystemTime::now();
    let first = certs::reconcile(&harness.client, &config(), &files.cert.0, &files.key.0, now)
        .await
        .unwrap();
    assert_eq!(first.secret, SecretAction::Filled);
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
    install_empty_secret(&store);
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
    let events = bad_certificate_events(&harness);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0].contains("ca.crt holds 0 PEM blocks"),
        "{events:?}"
    );

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

/// The notes of the BadCertificate Warning Events about the Secret.
fn bad_certificate_events(harness: &common::Harness) -> Vec<String> {
    harness
        .server
        .store()
        .events()
        .iter()
        .filter(|e| {
            e["reason"] == "BadCertificate"
                && e["type"] == "Warning"
                && e["regarding"]["kind"] == "Secret"
                && e["regarding"]["name"] == "tierd-self-signed-cert"
        })
        .map(|e| e["note"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Writes `bundle` into the Secret as someone else would.
fn store_bundle(store: &tier_testserver::Store, bundle: &CertBundle) {
    let b64 = |text: &str| {
        serde_json::to_value(k8s_openapi::ByteString(text.as_bytes().to_vec())).unwrap()
    };
    store
        .put_object(
            ObjectKind::Secret,
            "kube-system",
            json!({
                "metadata": {"name": "tierd-self-signed-cert", "namespace": "kube-system"},
                "type": "kubernetes.io/tls",
                "data": {
                    "ca.crt": b64(&bundle.ca_crt),
                    "ca.key": b64(&bundle.ca_key),
                    "tls.crt": b64(&bundle.tls_crt),
                    "tls.key": b64(&bundle.tls_key),
                },
            }),
        )
        .unwrap();
}

/// A good bundle tierd filled, then `tamper`ed content written over it: tierd takes `action`
/// (a new serving certificate from the same CA, or a new CA), the result is good, and one
/// Warning Event names `why`.
async fn tampered(tamper: impl FnOnce(CertBundle) -> CertBundle, action: SecretAction, why: &str) {
    let harness = common::start(ServerConfig::default()).await;
    let store = harness.server.store();
    install_empty_secret(&store);
    let now = SystemTime::now();
    let (good, filled) = certs::ensure_secret(&harness.client, &config(), now)
        .await
        .unwrap();
    assert_eq!(filled, SecretAction::Filled);
    let bad = tamper(good.clone());
    assert_ne!(certs::check(&config(), &bad, now), Health::Good);
    store_bundle(&store, &bad);
    let (fixed, done) = certs::ensure_secret(&harness.client, &config(), now)
        .await
        .unwrap();
    assert_eq!(done, action, "for {why}");
    assert_eq!(certs::check(&config(), &fixed, now), Health::Good);
    assert_ne!(fixed.tls_crt, bad.tls_crt);
    match action {
        SecretAction::Renewed => assert_eq!(fixed.ca_crt, bad.ca_crt, "the CA is kept"),
        _ => assert_ne!(fixed.ca_crt, bad.ca_crt, "a new CA"),
    }
    let stored = store
        .object(ObjectKind::Secret, "kube-system", "tierd-self-signed-cert")
        .unwrap();
    assert_eq!(decoded(&stored["data"]["tls.crt"]), fixed.tls_crt);
    let events = bad_certificate_events(&harness);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].contains(why), "{why:?} not in {events:?}");
    assert!(
        events[0].contains("Secret kube-system/tierd-self-signed-cert"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_leaf_not_signed_by_the_ca_is_renewed_and_warned() {
    let foreign = certs::generate(&config(), SystemTime::now()).unwrap();
    tampered(
        |good| CertBundle {
            tls_crt: foreign.tls_crt,
            tls_key: foreign.tls_key,
            ..good
        },
        SecretAction::Renewed,
        "tls.crt does not verify with ca.crt",
    )
    .await;
}

/// A "CA" without basicConstraints CA:TRUE (but with keyCertSign) and a leaf it signed.
fn not_a_ca() -> CertBundle {
    use rcgen::{CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = params.self_signed(&key).unwrap();
    let issuer = Issuer::new(params, key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(config().dns_names())
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    CertBundle {
        ca_crt: ca.pem(),
        ca_key: issuer.key().serialize_pem(),
        tls_crt: leaf.pem(),
        tls_key: leaf_key.serialize_pem(),
    }
}

#[tokio::test]
async fn a_ca_without_ca_true_is_replaced_and_warned() {
    tampered(
        |_| not_a_ca(),
        SecretAction::Replaced,
        "ca.crt is not a CA certificate (no basicConstraints CA:TRUE)",
    )
    .await;
}

#[tokio::test]
async fn a_900_kb_chain_is_renewed_and_warned() {
    tampered(
        |good| {
            let mut chain = String::new();
            while chain.len() < 900_000 {
                chain.push_str(&good.tls_crt);
            }
            CertBundle {
                tls_crt: chain,
                ..good
            }
        },
        SecretAction::Renewed,
        "more than the 16384 allowed",
    )
    .await;
}

#[tokio::test]
async fn two_certificates_in_a_field_are_renewed_and_warned() {
    tampered(
        |good| CertBundle {
            tls_crt: format!("{}{}", good.tls_crt, good.ca_crt),
            ..good
        },
        SecretAction::Renewed,
        "tls.crt holds 2 PEM blocks; exactly one is allowed",
    )
    .await;
}

#[tokio::test]
async fn an_rsa_8192_key_is_renewed_and_warned() {
    // openssl req -x509 -newkey rsa:8192 ... for the Service's four names (tests/fixtures).
    let cert = include_str!("fixtures/rsa8192.crt");
    let key = include_str!("fixtures/rsa8192.key");
    tampered(
        |good| CertBundle {
            tls_crt: cert.to_owned(),
            tls_key: key.to_owned(),
            ..good
        },
        SecretAction::Renewed,
        "tls.crt has an RSA key of 8192 bits",
    )
    .await;
}

#[tokio::test]
async fn a_key_not_matching_its_certificate_is_renewed_and_warned() {
    let other = certs::generate(&config(), SystemTime::now()).unwrap();
    tampered(
        |good| CertBundle {
            tls_key: other.tls_key,
            ..good
        },
        SecretAction::Renewed,
        "tls.key does not match tls.crt",
    )
    .await;
}

#[tokio::test]
async fn a_ca_key_not_matching_the_ca_is_replaced_and_warned() {
    let other = certs::generate(&config(), SystemTime::now()).unwrap();
    tampered(
        |good| CertBundle {
            ca_key: other.ca_key,
            ..good
        },
        SecretAction::Replaced,
        "ca.key does not match ca.crt",
    )
    .await;
}

#[tokio::test]
async fn a_good_secret_is_left_untouched() {
    let harness = common::start(ServerConfig::default()).await;
    install_webhook_configuration(&harness.server.store());
    install_empty_secret(&harness.server.store());
    let files = files();
    let now = SystemTime::now();
    let first = certs::reconcile(&harness.client, &config(), &files.cert.0, &files.key.0, now)
        .await
        .unwrap();
    assert_eq!(first.secret, SecretAction::Filled);
    harness.server.clear_log();
    for later in [now, now + DAY, now + 200 * DAY] {
        let again = certs::reconcile(
            &harness.client,
            &config(),
            &files.cert.0,
            &files.key.0,
            later,
        )
        .await
        .unwrap();
        assert_eq!(again.secret, SecretAction::Unchanged);
        assert_eq!(again.bundle, first.bundle);
        assert!(!again.files_written && !again.ca_bundle_updated);
    }
    let writes = harness
        .server
        .requests()
        .records()
        .iter()
        .filter(|r| r.method != "GET")
        .count();
    assert_eq!(writes, 0, "a good Secret causes no write");
    assert!(bad_certificate_events(&harness).is_empty());
}
