//! The beside-Antrea install shape (`deploy/overlays/beside-antrea`): tierd, with the overlay's
//! own Tiers file, runs as its own service account next to Antrea's admission, which lets only
//! antrea-controller change a Tier's priority. tierd creates the organisation's missing Tiers,
//! leaves Antrea's six alone, and reports a priority correction Antrea denies as denied (the cache shows no
//! reason, so the core cannot call it blocked by a Tier), with Antrea's message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use tier_tests::{Cluster, antrea};
use tier_testserver::{AdmissionMode, ServerConfig, Verb};

const ANTREA_CONTROLLER: &str = "system:serviceaccount:kube-system:antrea-controller";

fn overlay_tiers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/overlays/beside-antrea/tiers.yaml")
}

#[tokio::test]
async fn a_priority_correction_denied_by_antrea_is_reported_with_antreas_message() {
    let cluster = Cluster::start(
        ServerConfig::default().admission(AdmissionMode::BuiltinAntrea {
            controller_user: ANTREA_CONTROLLER.to_owned(),
        }),
    )
    .await;
    // Antrea created its six; someone moved the security team's Tier from 90 to 95.
    for (name, priority, description) in antrea() {
        cluster.seed(name, priority, Some(description));
    }
    cluster.seed(
        "org-security",
        95,
        Some("Security team's organisation-wide rules"),
    );

    let tiers = overlay_tiers().display().to_string();
    let done = cluster
        .tierd(&["ensure", "--timeout", "3s", "--tiers", &tiers])
        .await;

    assert_eq!(done.code(), 1, "{}", done.stderr);
    let line = done
        .stderr
        .lines()
        .find(|l| l.trim_start().starts_with("- org-security"))
        .unwrap_or_else(|| panic!("org-security not reported: {}", done.stderr));
    assert!(line.contains("denied"), "{line}");
    assert!(
        line.contains("update to Tier priority is not allowed"),
        "Antrea's message: {line}"
    );
    // The other organisation Tiers were created; Antrea's six were not touched.
    assert_eq!(cluster.stored("org-incident").map(|t| t.0), Some(20));
    assert_eq!(cluster.stored("org-tenants").map(|t| t.0), Some(230));
    assert_eq!(cluster.stored("org-security").map(|t| t.0), Some(95));
    let log = cluster.server.requests();
    for (name, _, _) in antrea() {
        assert_eq!(log.count(Verb::Update, Some(name)), 0, "{name} untouched");
        assert_eq!(log.count(Verb::Create, Some(name)), 0, "{name} untouched");
    }
    assert!(log.count_code(Verb::Update, Some("org-security"), 400) >= 1);
}
