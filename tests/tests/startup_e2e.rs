//! Nothing from the network is fatal at start: the real `tierd run` with its API server
//! unreachable for the first ten seconds (connections refused; the test API server starts on
//! that port later) stays up, answers its probes (`/livez` 200, `/readyz` 503 naming what it
//! waits for and why), refuses reviews in-band and retryably, and converges soon after the
//! server appears: the Tiers exist, `/readyz` 200, UPDATE reviews served once the identity is
//! known (asked by SelfSubjectReview, no `--controller-user`).
//!
//! The loops poll a real process over loopback with deadlines; the ten seconds are the outage
//! the test imposes, not a wait for something to happen.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tier_tests::{Cluster, PATIENCE, Tierd, USER};
use tier_testserver::{AdmissionMode, ServerConfig};

/// How long the API server is away.
const OUTAGE: Duration = Duration::from_secs(10);

/// How soon after the API server appears tierd must have converged (two backoff caps and
/// some slack; measured: see docs/RELIABILITY.md).
const CONVERGE_WITHIN: Duration = Duration::from_secs(5);

/// An AdmissionReview for a Tier `operation` by `user`.
fn review(
    operation: &str,
    name: &str,
    priority: i64,
    old_priority: Option<i64>,
    user: &str,
) -> Value {
    let tier = |p: i64| {
        json!({
            "apiVersion": "crd.antrea.io/v1beta1",
            "kind": "Tier",
            "metadata": {"name": name},
            "spec": {"priority": p},
        })
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("{operation}-{name}"),
            "kind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "resource": {"group": "crd.antrea.io", "version": "v1beta1", "resource": "tiers"},
            "name": name,
            "operation": operation,
            "userInfo": {"username": user},
            "object": if operation == "DELETE" { Value::Null } else { tier(priority) },
            "oldObject": old_priority.map_or(Value::Null, tier),
            "dryRun": false,
        }
    })
}

/// Posts `review` to tierd's webhook: the response's `allowed`, code and message.
async fn ask(tierd: &Tierd, review: &Value) -> (bool, i64, String) {
    let (code, body) =
        tier_tests::post_json(&format!("{}/validate/tier", tierd.url()), "", review).await;
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let response = &answer["response"];
    assert_eq!(response["uid"], review["request"]["uid"], "{body}");
    (
        response["allowed"].as_bool().unwrap(),
        response["status"]["code"].as_i64().unwrap_or_default(),
        response["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_unreachable_at_start_is_waited_for_not_fatal() {
    let absent = Cluster::absent();
    let mut tierd = Tierd::run_on(&absent.kubeconfig.0, None, &[], None).await;

    // The outage: tierd stays up, live, not ready, and says why.
    let outage_ends = tierd.started + OUTAGE;
    let mut polls = 0;
    while Instant::now() < outage_ends {
        assert_eq!(tierd.exited(), None, "tierd exited: {:?}", tierd.logs());
        let (code, body) = tierd.get("/livez").await;
        assert_eq!(code, 200, "{body}");
        let (code, body) = tierd.get("/readyz?verbose").await;
        assert_eq!(code, 503, "{body}");
        assert!(
            body.contains("[-]tier-cache-synced failed"),
            "readyz names what it waits for: {body}"
        );
        if polls > 0 {
            // After the first failed list the reason says why, in words.
            assert!(
                body.contains("refused") || body.contains("onnect"),
                "{body}"
            );
        }
        polls += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (_, body) = tierd.get("/readyz?verbose").await;
    assert!(
        body.contains("[-]controller-identity failed (informational)")
            && body.contains("SelfSubjectReview"),
        "{body}"
    );
    // Reviews are answered in-band with a retryable refusal, never a broken connection.
    let (allowed, code, message) =
        ask(&tierd, &review("CREATE", "team-a", 10, None, "alice")).await;
    assert!(!allowed && code == 503, "{message}");
    let (allowed, code, message) =
        ask(&tierd, &review("UPDATE", "team-a", 11, Some(10), USER)).await;
    assert!(!allowed && code == 503, "{message}");
    // Refused for whichever dependency it meets first: the Tier cache, or the identity (the
    // identity alone is covered by the `tierd` crate's admission tests).
    assert!(
        message.contains("identity") || message.contains("not synced"),
        "{message}"
    );
    assert_eq!(tierd.exited(), None, "tierd exited: {:?}", tierd.logs());

    // The API server appears on the port tierd was given.
    let cluster = absent
        .start(
            ServerConfig::default().admission(AdmissionMode::BuiltinAntrea {
                controller_user: USER.to_owned(),
            }),
        )
        .await;
    let appeared = Instant::now();
    let converge_deadline = appeared + PATIENCE;
    loop {
        let ready = tierd.get("/readyz").await.0 == 200;
        let identity = tierd.get("/readyz/controller-identity").await.0 == 200;
        if ready && identity && cluster.has_antrea_tiers() {
            break;
        }
        assert!(
            Instant::now() < converge_deadline,
            "never converged: {:?} {:?}",
            tierd.get("/readyz?verbose").await,
            cluster.server.store().list()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let converged = appeared.elapsed();
    println!("converged {converged:?} after the API server appeared");
    assert!(
        converged < CONVERGE_WITHIN,
        "converged only {converged:?} after the API server appeared"
    );

    // Every review is served now: UPDATE by tierd itself allowed, by another user refused.
    let (allowed, _, message) =
        ask(&tierd, &review("UPDATE", "platform", 150, Some(200), USER)).await;
    assert!(allowed, "{message}");
    let (allowed, code, message) = ask(
        &tierd,
        &review("UPDATE", "platform", 150, Some(200), "alice"),
    )
    .await;
    assert!(!allowed && code != 503, "{message}");
    let (allowed, _, message) = ask(&tierd, &review("CREATE", "team-a", 10, None, "alice")).await;
    assert!(allowed, "{message}");

    tierd.terminate().await;
    let status = tierd.wait(Duration::from_secs(5)).await.unwrap();
    assert!(status.success(), "{status}");
}

/// Only invalid input exits, with code 2 and before any request: here a kubeconfig that does
/// not exist.
#[tokio::test]
async fn a_missing_kubeconfig_is_invalid_input_and_exits_2() {
    let missing = std::env::temp_dir().join("tier-e2e-no-such-kubeconfig.yaml");
    let output = tokio::process::Command::new(tier_tests::tierd_binary())
        .args(["run", "--webhook-listen", "127.0.0.1:0"])
        .args([
            "--probe-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--kubeconfig")
        .arg(&missing)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PATIENCE, output)
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("kubeconfig"), "{stderr}");
}
