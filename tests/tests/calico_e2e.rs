//! The real `tierd run --controller calico` against the test API server serving Calico's Tier
//! (`projectcalico.org/v3`, its CRD schema, CEL rules and built-in protection): the worlds
//! Calico's own `EnsureInitialized` gets wrong (a wrong built-in is never corrected; no
//! `create` permission or no CRD crash-loops it), each converging with tierd. Every wait is
//! bounded by [`PATIENCE`] (the harness's deadline), never a fixed sleep.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use serde_json::Value;
use tier_tests::{Cluster, PATIENCE, TempFile, Tierd, USER};
use tier_testserver::calico::tier;
use tier_testserver::{CalicoApi, Endpoint, Fault, ServerConfig, Verb};

/// Calico's built-in Tiers: name, order, default action.
const BUILT_INS: [(&str, f64, &str); 3] = [
    ("kube-admin", 1_000.0, "Pass"),
    ("default", 1_000_000.0, "Deny"),
    ("kube-baseline", 10_000_000.0, "Pass"),
];

/// A cluster serving Calico's Tier at `projectcalico.org/v3`, no Tier yet.
async fn calico() -> Cluster {
    Cluster::start(ServerConfig::default().calico(CalicoApi::V3)).await
}

/// The stored order and default action of Calico's Tier `name`.
fn stored(cluster: &Cluster, name: &str) -> Option<(Option<f64>, Option<String>)> {
    let tier = cluster.server.store().calico().get(name)?;
    let spec = &tier["spec"];
    Some((
        spec["order"].as_f64(),
        spec["defaultAction"].as_str().map(str::to_owned),
    ))
}

/// Whether Calico's three built-in Tiers exist with Calico's values.
fn has_built_ins(cluster: &Cluster) -> bool {
    BUILT_INS.iter().all(|(name, order, action)| {
        stored(cluster, name) == Some((Some(*order), Some((*action).to_owned())))
    })
}

/// Polls `/readyz?verbose` until its body contains `words` (within [`PATIENCE`]).
async fn readyz_says(tierd: &Tierd, words: &str) -> (u16, String) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (code, body) = tierd.get("/readyz?verbose").await;
        if body.contains(words) || Instant::now() > deadline {
            return (code, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Events of `reason`.
fn events(cluster: &Cluster, reason: &str) -> Vec<Value> {
    cluster
        .server
        .events()
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

#[tokio::test]
async fn an_empty_cluster_gets_calicos_three_tiers_and_no_webhook() {
    let cluster = calico().await;
    let tierd = Tierd::run_calico(&cluster, &[]).await;
    assert!(
        cluster.eventually(has_built_ins).await,
        "{:?}\n{:?}",
        cluster.server.store().calico().list(),
        tierd.logs()
    );
    assert_eq!(
        cluster
            .server
            .requests()
            .count_at(Endpoint::CalicoTiers, Verb::Create, None),
        3
    );
    tierd.until_ok("/readyz").await;
    let (_, verbose) = readyz_says(&tierd, "system-tiers ok").await;
    assert!(verbose.contains("system-tiers ok"), "{verbose}");
    // Calico's part of the assembly has no webhook, policy caches or identity.
    for check in [
        "acnp-cache-synced",
        "controller-identity",
        "serving-certificate",
    ] {
        assert!(!verbose.contains(check), "{verbose}");
    }
    assert!(
        !tierd
            .logs()
            .iter()
            .any(|l| l.contains("\"server\":\"webhook\"")),
        "{:?}",
        tierd.logs()
    );
    assert!(
        cluster.server.store().get("baseline").is_none(),
        "no Antrea Tier"
    );
    // Events about Calico's Tier, metrics as for Antrea.
    assert!(
        cluster
            .eventually(|c| events(c, "Created").len() == 3)
            .await,
        "{:?}",
        cluster.server.events()
    );
    let created = events(&cluster, "Created");
    assert!(
        created
            .iter()
            .all(|e| e["regarding"]["apiVersion"] == "projectcalico.org/v3"),
        "{created:?}"
    );
    let (_, metrics) = tierd.get("/metrics").await;
    assert!(
        metrics.contains("tierd_tier_state{tier=\"kube-admin\",state=\"converged\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn wrong_built_ins_are_corrected_which_calico_never_does() {
    let cluster = calico().await;
    let calico = cluster.server.store().calico();
    calico.create_builtins().unwrap();
    // As an older Calico (or a hand edit before the CEL rules) could have left them.
    calico
        .put_raw(tier(CalicoApi::V3, "default", Some(5.0), Some("Deny")))
        .unwrap();
    calico
        .put_raw(tier(
            CalicoApi::V3,
            "kube-admin",
            Some(1_000.0),
            Some("Deny"),
        ))
        .unwrap();
    assert!(!has_built_ins(&cluster));
    let tierd = Tierd::run_calico(&cluster, &[]).await;
    assert!(
        cluster.eventually(has_built_ins).await,
        "{:?}\n{:?}",
        calico.list(),
        tierd.logs()
    );
    let requests = cluster.server.requests();
    assert_eq!(
        requests.count_at(Endpoint::CalicoTiers, Verb::Create, None),
        0
    );
    assert_eq!(
        requests.count_at(Endpoint::CalicoTiers, Verb::Update, None),
        2
    );
    assert!(
        cluster
            .eventually(|c| events(c, "Corrected").len() == 2)
            .await,
        "{:?}",
        cluster.server.events()
    );
    let mut notes: Vec<String> = events(&cluster, "Corrected")
        .iter()
        .map(|e| e["note"].as_str().unwrap_or_default().to_owned())
        .collect();
    notes.sort();
    // Each Event names the one field that was wrong.
    assert_eq!(
        notes,
        [
            "corrected the defaultAction of Tier kube-admin",
            "corrected the order of Tier default",
        ],
    );
}

#[tokio::test]
async fn without_create_permission_tierd_keeps_running_says_so_and_converges_once_granted() {
    let cluster = calico().await;
    cluster
        .server
        .inject(Fault::forbidden_on(CalicoApi::V3.resource(), Verb::Create, USER).forever());
    let mut tierd = Tierd::run_calico(&cluster, &[]).await;
    let wanted = "tierd may not create resource \"tiers\" in API group \"projectcalico.org\"";
    let (code, verbose) = readyz_says(&tierd, wanted).await;
    assert!(verbose.contains(wanted), "{verbose}");
    // system-tiers is informational: the pod stays Ready, the reason is readable.
    assert_eq!(code, 200, "{verbose}");
    assert!(
        tierd.logs().iter().any(|l| l.contains("may not create")),
        "{:?}",
        tierd.logs()
    );
    assert!(
        cluster
            .eventually(|c| !events(c, "Forbidden").is_empty())
            .await,
        "{:?}",
        cluster.server.events()
    );
    assert!(
        tierd.wait(Duration::from_millis(100)).await.is_none(),
        "tierd exited"
    );
    assert_eq!(tierd.get("/livez").await.0, 200);
    assert!(cluster.server.store().calico().list().is_empty());

    // RBAC fixed: the next probe creates everything.
    cluster.server.clear_faults();
    assert!(
        cluster.eventually(has_built_ins).await,
        "{:?}",
        tierd.logs()
    );
}

#[tokio::test]
async fn without_the_crd_tierd_reports_not_installed_and_converges_when_it_appears() {
    let cluster = Cluster::start(ServerConfig::default().calico_not_installed(CalicoApi::V3)).await;
    let mut tierd = Tierd::run_calico(&cluster, &[]).await;
    let wanted = "tiers.projectcalico.org";
    let (code, verbose) = readyz_says(&tierd, "not installed").await;
    assert_eq!(
        code, 503,
        "the Tier cache cannot sync without its CRD: {verbose}"
    );
    assert!(
        verbose.contains("not installed") && verbose.contains(wanted),
        "{verbose}"
    );
    assert!(
        tierd.wait(Duration::from_millis(100)).await.is_none(),
        "tierd exited"
    );

    cluster.server.store().calico().install();
    assert!(
        cluster.eventually(has_built_ins).await,
        "{:?}",
        tierd.logs()
    );
    tierd.until_ok("/readyz").await;
}

#[tokio::test]
async fn plan_ensure_and_a_tiers_file_in_calicos_fields() {
    let cluster = calico().await;
    let file = TempFile::with(
        "calico-tiers",
        "yaml",
        "tiers:\n  - {name: default, order: 1000000, defaultAction: Deny}\n  - {name: security, order: 100.5, defaultAction: Pass}\n",
    );
    let tiers = file.0.to_str().unwrap();
    let plan = cluster
        .tierd(&[
            "plan",
            "--controller",
            "calico",
            "--tiers",
            tiers,
            "-o",
            "json",
        ])
        .await;
    assert_eq!(plan.code(), 1, "changes pending: {plan:?}");
    let records: Value = serde_json::from_str(&plan.stdout).unwrap();
    assert_eq!(records[1]["name"], "security");
    assert_eq!(records[1]["desired"]["order"], 100.5);
    assert_eq!(records[1]["desired"]["defaultAction"], "Pass");
    assert_eq!(records[1]["action"], "create");

    let ensure = cluster
        .tierd(&[
            "ensure",
            "--controller",
            "calico",
            "--tiers",
            tiers,
            "--timeout",
            "20s",
        ])
        .await;
    assert_eq!(ensure.code(), 0, "{ensure:?}");
    assert_eq!(
        stored(&cluster, "security"),
        Some((Some(100.5), Some("Pass".to_owned())))
    );
    let plan = cluster
        .tierd(&["plan", "--controller", "calico", "--tiers", tiers])
        .await;
    assert_eq!(plan.code(), 0, "in sync: {plan:?}");

    // A built-in with other values than Calico pins is invalid input: exit 2, no request.
    let before = cluster.server.requests().len();
    let wrong = TempFile::with(
        "calico-wrong",
        "yaml",
        "tiers: [{name: kube-admin, order: 7}]\n",
    );
    let refused = cluster
        .tierd(&[
            "ensure",
            "--controller",
            "calico",
            "--tiers",
            wrong.0.to_str().unwrap(),
        ])
        .await;
    assert_eq!(refused.code(), 2, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("tiers[0] (kube-admin): spec.order: Invalid value: 7"),
        "{}",
        refused.stderr
    );
    assert_eq!(cluster.server.requests().len(), before);
}

#[tokio::test]
async fn antreas_webhook_flags_are_refused_in_calico_mode() {
    let cluster = calico().await;
    let run = cluster
        .tierd(&[
            "run",
            "--controller",
            "calico",
            "--webhook-listen",
            "127.0.0.1:0",
        ])
        .await;
    assert_eq!(run.code(), 2, "{run:?}");
    assert!(
        run.stderr.contains("has no Tier webhook") && run.stderr.contains("--webhook-listen"),
        "{}",
        run.stderr
    );
    assert!(cluster.server.requests().is_empty());
}
