//! Reports that stay true (issue 24), on the real binary against the test API server: a
//! correction Antrea denies is `denied`, never `contested`; one hand edit of a description is
//! one update whose Event names the description only; a Tier deleted right after tierd created
//! it is created again at once, not after the echo timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use tier_tests::{Cluster, TempFile, Tierd, antrea};
use tier_testserver::{AdmissionMode, ServerConfig, Verb};

const ANTREA_CONTROLLER: &str = "system:serviceaccount:kube-system:antrea-controller";

fn overlay_tiers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/overlays/beside-antrea/tiers.yaml")
}

fn events(cluster: &Cluster, reason: &str) -> Vec<Value> {
    cluster
        .server
        .events()
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

fn note(event: &Value) -> String {
    event["note"].as_str().unwrap_or_default().to_owned()
}

/// Whether `metrics` holds the sample `name{labels} value`.
fn sample(metrics: &str, name: &str, labels: &str, value: &str) -> bool {
    let line = format!("{name}{{{labels}}} {value}");
    metrics.lines().any(|l| l == line)
}

/// Beside Antrea, someone privileged moves org-security from 90 to 95 once. Antrea's webhook
/// denies every correction of tierd's (only antrea-controller changes priorities). For 15 s the
/// Tier is `denied`, never `contested`; the Denied Event names Antrea's rule and the fix; no
/// Contested Event.
#[tokio::test]
async fn a_correction_antrea_denies_is_denied_for_15_s_and_never_contested() {
    let cluster = Cluster::start(
        ServerConfig::default().admission(AdmissionMode::BuiltinAntrea {
            controller_user: ANTREA_CONTROLLER.to_owned(),
        }),
    )
    .await;
    for (name, priority, description) in antrea() {
        cluster.seed(name, priority, Some(description));
    }
    for (name, priority, description) in [
        (
            "org-incident",
            20,
            "Incident response: evaluated before Antrea's emergency Tier",
        ),
        (
            "org-security",
            90,
            "Security team's organisation-wide rules",
        ),
        (
            "org-tenants",
            230,
            "Tenant isolation, after platform and before application",
        ),
    ] {
        cluster.seed(name, priority, Some(description));
    }
    let tiers = overlay_tiers().display().to_string();
    let tierd = Tierd::run_with(&cluster, None, &["--tiers", &tiers], None).await;
    let converged = |metrics: &str| {
        sample(
            metrics,
            "tierd_tier_state",
            "tier=\"org-security\",state=\"converged\"",
            "1",
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !converged(&tierd.get("/metrics").await.1) {
        assert!(Instant::now() < deadline, "{:?}", tierd.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    cluster
        .server
        .store()
        .modify("org-security", |tier| tier["spec"]["priority"] = 95.into())
        .unwrap();

    // Denied as soon as the first correction is answered...
    let denied = |metrics: &str| {
        sample(
            metrics,
            "tierd_tier_state",
            "tier=\"org-security\",state=\"denied\"",
            "1",
        )
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !denied(&tierd.get("/metrics").await.1) {
        assert!(Instant::now() < deadline, "{:?}", tierd.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...and for 15 s: never contested, whatever the denied retries spend of the budget.
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(15) {
        let (_, metrics) = tierd.get("/metrics").await;
        assert!(
            denied(&metrics),
            "at {:?}: not denied: {:?}",
            since.elapsed(),
            metrics
                .lines()
                .filter(|l| l.contains("org-security"))
                .collect::<Vec<_>>()
        );
        assert!(
            sample(
                &metrics,
                "tierd_tier_contested",
                "tier=\"org-security\"",
                "0"
            ),
            "at {:?}: contested",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    assert_eq!(
        events(&cluster, "Contested").len(),
        0,
        "{:?}",
        cluster.server.events()
    );
    let denied_events = events(&cluster, "Denied");
    assert_eq!(denied_events.len(), 1, "{denied_events:?}");
    let words = note(&denied_events[0]);
    assert!(
        words.contains("update to Tier priority is not allowed"),
        "{words}"
    );
    assert!(words.contains("only antrea-controller"), "{words}");
    assert!(
        words.contains("kubectl delete tier org-security"),
        "{words}"
    );
    let log = tierd.logs().join("\n");
    assert!(!log.contains("may lag"), "the log blames lag: {log}");
    let requests = cluster.server.requests();
    let updates = requests.count(Verb::Update, Some("org-security"));
    assert!(
        requests.count_code(Verb::Update, Some("org-security"), 400) >= 1,
        "{updates} updates"
    );
    // The write budget bounds the denied retries: 3 at once, then hold-offs 1, 2, 4, 8 s.
    assert!(updates <= 8, "{updates} updates in about 16 s");
    assert_eq!(cluster.stored("org-security").map(|t| t.0), Some(95));
}

/// One hand edit of platform's description: one update, one Corrected Event and one log line,
/// each naming the description only.
#[tokio::test]
async fn one_description_edit_is_one_update_and_an_event_naming_the_description() {
    let cluster = Cluster::antrea().await;
    for (name, priority, description) in antrea() {
        cluster.seed(name, priority, Some(description));
    }
    let tierd = Tierd::run(&cluster, None, &[]).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !tierd
        .get("/metrics")
        .await
        .1
        .contains("tierd_system_tiers_initialized 1")
    {
        assert!(Instant::now() < deadline, "{:?}", tierd.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster
        .server
        .store()
        .modify("platform", |tier| {
            tier["spec"]["description"] = "hand edited".into();
        })
        .unwrap();
    assert!(cluster.eventually(Cluster::has_antrea_tiers).await);
    assert!(
        cluster
            .eventually(|c| !events(c, "Corrected").is_empty())
            .await
    );
    // Nothing more follows.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = cluster.server.requests();
    assert_eq!(requests.count(Verb::Update, Some("platform")), 1);
    assert_eq!(requests.count(Verb::Update, None), 1);
    assert_eq!(requests.count(Verb::Create, None), 0);
    let notes: Vec<String> = events(&cluster, "Corrected").iter().map(note).collect();
    assert_eq!(notes, ["corrected the description of Tier platform"]);
    let logs = tierd.logs();
    let corrected: Vec<&String> = logs
        .iter()
        .filter(|l| l.contains("corrected the"))
        .collect();
    assert_eq!(corrected.len(), 1, "{corrected:?}");
    assert!(
        corrected[0].contains("corrected the description of Tier platform"),
        "{corrected:?}"
    );
}

/// Waits (polling every millisecond, at most `limit`) until `cond` holds; when it did.
async fn until(limit: Duration, what: &str, cond: impl Fn() -> bool) -> Instant {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// 20 trials, one Tier each (its write budget untouched by the others): someone deletes the Tier,
/// tierd creates it, and someone deletes it again 0-10 ms after that create, so the create's
/// watch event and the deletion reach tierd together. Each time tierd creates it again within
/// 100 ms, not after the 3 s echo timeout.
#[tokio::test]
async fn a_delete_right_after_tierds_create_is_answered_within_100_ms_in_20_trials() {
    let cluster = Cluster::antrea().await;
    let names: Vec<String> = (1..=20).map(|i| format!("trial-{i:02}")).collect();
    let mut file = String::from("tiers:\n");
    for (i, name) in names.iter().enumerate() {
        file.push_str(&format!(
            "  - name: {name}\n    priority: {}\n    description: \"trial\"\n",
            10 * (i + 1)
        ));
    }
    let tiers = TempFile::with("trials", "yaml", &file);
    let path = tiers.0.display().to_string();
    let tierd = Tierd::run(&cluster, None, &["--tiers", &path]).await;
    let store = cluster.server.store();
    let present = |name: &str| store.get(name).is_some();
    until(Duration::from_secs(30), "the 20 Tiers", || {
        names.iter().all(|n| present(n))
    })
    .await;
    let mut delays = Vec::new();
    for (trial, name) in names.iter().enumerate() {
        let d = Duration::from_millis(u64::try_from(trial % 11).unwrap());
        store.delete(name).unwrap();
        // The deleter watches the store from a thread of its own, as closely as a controller
        // reacting to the create could, and deletes the Tier `d` after tierd created it.
        let deleter = std::thread::spawn({
            let (store, name) = (store.clone(), name.clone());
            move || {
                let give_up = Instant::now() + Duration::from_secs(10);
                while store.get(&name).is_none() {
                    assert!(Instant::now() < give_up, "tierd never created {name}");
                    std::thread::yield_now();
                }
                std::thread::sleep(d);
                store.delete(&name).unwrap();
                Instant::now()
            }
        });
        let deleted = tokio::task::spawn_blocking(move || deleter.join().unwrap())
            .await
            .unwrap();
        let recreated = until(Duration::from_secs(10), "tierd's re-create", || {
            present(name)
        })
        .await;
        delays.push(recreated - deleted);
    }
    eprintln!("measured: re-created {delays:?} after the deletion");
    let slow: Vec<_> = delays
        .iter()
        .filter(|d| **d >= Duration::from_millis(100))
        .collect();
    assert!(
        slow.is_empty(),
        "{} of 20 re-created after 100 ms or more: {delays:?}\n{:?}",
        slow.len(),
        tierd.logs()
    );
}
