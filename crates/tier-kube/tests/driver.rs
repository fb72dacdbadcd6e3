//! The whole core driver through this adapter and real HTTP: converging Antrea's six system
//! Tiers from an empty cluster, from drifted Tiers, around a squatter, and through faults.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{Harness, PATIENCE, antrea_admission, start};
use tier_core::{Backoff, DesiredSet, DriverConfig, MachineConfig, Mode, Stopped, TierState};
use tier_kube::lister::KubeLister;
use tier_kube::writer::WriterConfig;
use tier_runtime::Ensurer;
use tier_testserver::{Fault, Verb};

fn fast() -> DriverConfig {
    DriverConfig {
        machine: MachineConfig {
            backoff: Backoff {
                initial: Duration::from_millis(20),
                cap: Duration::from_millis(200),
            },
            echo_timeout: Duration::from_millis(500),
            ..MachineConfig::default()
        },
        call_timeout: Duration::from_secs(5),
        ..DriverConfig::default()
    }
}

fn ensure(h: &Harness, mode: Mode) -> Ensurer {
    ensure_with_events(h, mode).0
}

fn ensure_with_events(h: &Harness, mode: Mode) -> (Ensurer, tier_core::EventReceiver) {
    let lister = KubeLister::start(h.client.clone()).unwrap();
    let config = WriterConfig {
        call_timeout: Duration::from_secs(1),
        ..WriterConfig::default()
    };
    let writer = lister.writer(h.writer_client.clone(), config);
    tier_runtime::spawn_with_events(lister, writer, DesiredSet::antrea(), fast(), mode).unwrap()
}

async fn converge_once(h: &Harness) {
    let stopped = tokio::time::timeout(PATIENCE, ensure(h, Mode::Once).join())
        .await
        .expect("the driver did not converge in time");
    assert_eq!(stopped, Stopped::Converged);
}

fn assert_antrea_tiers(h: &Harness) {
    for tier in DesiredSet::antrea().tiers() {
        assert_eq!(
            h.stored(&tier.name),
            Some((tier.priority, Some(tier.description.clone()))),
            "{}",
            tier.name
        );
    }
}

#[tokio::test]
async fn converges_from_an_empty_cluster() {
    let h = start(antrea_admission()).await;
    converge_once(&h).await;
    assert_antrea_tiers(&h);
    let log = h.server.requests();
    assert_eq!(log.count_code(Verb::Create, None, 201), 6);
    assert_eq!(log.count(Verb::Create, None), 6, "one create per Tier");
    assert_eq!(log.count(Verb::Update, None), 0);
}

#[tokio::test]
async fn corrects_drifted_tiers() {
    let h = start(antrea_admission()).await;
    // Wrong priority (held by another system Tier's slot), wrong description, no description.
    h.seed(
        "baseline",
        240,
        Some("[READ-ONLY]: System generated Baseline Tier"),
    );
    h.seed("application", 250, Some("an old description"));
    h.seed("platform", 150, None); // holds networkops' priority: networkops waits for it
    h.seed(
        "emergency",
        50,
        Some("[READ-ONLY]: System generated Emergency Tier"),
    );
    h.server
        .store()
        .modify("platform", |obj| {
            obj["metadata"]["labels"] = serde_json::json!({"keep": "me"})
        })
        .unwrap();
    converge_once(&h).await;
    assert_antrea_tiers(&h);
    let platform = h.server.store().get("platform").unwrap();
    assert_eq!(
        platform["metadata"]["labels"]["keep"], "me",
        "the update kept other fields"
    );
    let log = h.server.requests();
    assert_eq!(
        log.count_code(Verb::Update, Some("emergency"), 200),
        0,
        "in sync: untouched"
    );
    assert!(log.count_code(Verb::Update, Some("baseline"), 200) == 1);
    assert!(log.count_code(Verb::Update, Some("application"), 200) == 1);
    assert!(log.count_code(Verb::Update, Some("platform"), 200) == 1);
    assert!(log.count_code(Verb::Create, Some("networkops"), 201) == 1);
}

#[tokio::test]
async fn a_squatter_blocks_only_its_tier_until_it_goes() {
    let h = start(antrea_admission()).await;
    h.seed(
        "squatter",
        100,
        Some("a user Tier at securityops' priority"),
    );
    let ensurer = ensure(&h, Mode::Continuous);
    let mut status = ensurer.status();
    tokio::time::timeout(
        PATIENCE,
        status.wait_for(|s| {
            s.tiers.iter().all(|t| {
                if t.name == "securityops" {
                    matches!(&t.state, TierState::Blocked { reason, .. } if reason == "priority 100 is held by Tier squatter")
                } else {
                    t.state == TierState::Converged
                }
            })
        }),
    )
    .await
    .expect("five Tiers should converge and securityops be blocked")
    .unwrap();
    assert!(!status.current().initialized);
    assert_eq!(h.stored("securityops"), None);
    let log = h.server.requests();
    assert_eq!(
        log.count(Verb::Create, Some("securityops")),
        0,
        "no create the cache shows will be denied"
    );

    h.server.store().delete("squatter").unwrap();
    tokio::time::timeout(PATIENCE, status.initialized())
        .await
        .expect("securityops should converge once the squatter is gone")
        .unwrap();
    assert_antrea_tiers(&h);
    assert_eq!(ensurer.shutdown().await, Stopped::Cancelled);
}

#[tokio::test]
async fn converges_through_faults() {
    let h = start(antrea_admission()).await;
    h.server.inject(Fault::unavailable(Verb::Create).times(3));
    h.server
        .inject(Fault::lose_response(Verb::Create).named("baseline"));
    h.server
        .inject(Fault::lose_response_drop(Verb::Create).named("platform"));
    h.server
        .inject(Fault::hang(Verb::Create).named("emergency"));
    h.server.inject(Fault::too_many_requests(Verb::List, 0));
    converge_once(&h).await;
    assert_antrea_tiers(&h);
    assert_eq!(h.server.active_faults(), 0, "every fault fired");
}

#[tokio::test]
async fn keeps_correcting_drift_in_continuous_mode() {
    let h = start(antrea_admission()).await;
    let ensurer = ensure(&h, Mode::Continuous);
    let mut status = ensurer.status();
    tokio::time::timeout(PATIENCE, status.initialized())
        .await
        .unwrap()
        .unwrap();
    h.server
        .store()
        .modify("application", |obj| {
            obj["spec"]["description"] = "edited by hand".into()
        })
        .unwrap();
    tokio::time::timeout(PATIENCE, async {
        loop {
            let described = h.stored("application").and_then(|(_, d)| d);
            if described.as_deref()
                == Some("[READ-ONLY]: System generated default Application Tier")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the drift should be corrected");
    ensurer.shutdown().await;
}

#[tokio::test]
async fn events_are_published_once_per_episode() {
    let h = start(antrea_admission()).await;
    h.seed("squat", 150, None);
    h.seed("application", 250, Some("an old description"));
    let (ensurer, stream) = ensure_with_events(&h, Mode::Continuous);
    let mut status = ensurer.status();
    let events = tokio::spawn(tier_kube::events::publish(
        h.client.clone(),
        tier_kube::events::reporter(Some("tierd-0".into())),
        stream,
    ));
    // networkops is blocked by the squatter, and stays so while other Tiers change...
    tokio::time::timeout(
        PATIENCE,
        status.wait_for(|s| {
            s.tiers.iter().all(|t| {
                (t.name == "networkops") == matches!(t.state, TierState::Blocked { .. })
                    && (t.name == "networkops" || t.state == TierState::Converged)
            })
        }),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        h.server.requests().count(Verb::Create, Some("networkops")),
        0
    );
    h.server.store().delete("squat").unwrap();
    tokio::time::timeout(PATIENCE, status.initialized())
        .await
        .unwrap()
        .unwrap();
    ensurer.shutdown().await;
    let published = tokio::time::timeout(PATIENCE, events)
        .await
        .unwrap()
        .unwrap();
    let recorded = h.server.events();
    let reasons: Vec<(String, String)> = recorded
        .iter()
        .map(|e| {
            let name = e["regarding"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (e["reason"].as_str().unwrap_or_default().to_owned(), name)
        })
        .collect();
    // ...with one Blocked Event: events follow episodes, not observations.
    let count = |reason: &str, name: &str| {
        reasons
            .iter()
            .filter(|(r, n)| r == reason && n == name)
            .count()
    };
    assert_eq!(count("Blocked", "networkops"), 1, "{reasons:?}");
    assert_eq!(count("Created", "networkops"), 1, "{reasons:?}");
    assert_eq!(count("Corrected", "application"), 1, "{reasons:?}");
    for name in ["baseline", "platform", "securityops", "emergency"] {
        assert_eq!(count("Created", name), 1, "{name}: {reasons:?}");
    }
    assert_eq!(published, 7, "{reasons:?}");
    assert_eq!(recorded.len(), 7, "{reasons:?}");
}

/// The events task may be scheduled after the driver has already converged (a loaded node, a
/// fast API server): it must still publish what happened since the driver started. (A status
/// diff taking the status it first saw as its baseline published nothing here; the driver's
/// event stream keeps every event until it is read.)
#[tokio::test]
async fn events_published_late_still_cover_the_drivers_start() {
    let h = start(antrea_admission()).await;
    let (ensurer, stream) = ensure_with_events(&h, Mode::Continuous);
    let mut status = ensurer.status();
    tokio::time::timeout(PATIENCE, status.initialized())
        .await
        .unwrap()
        .unwrap();
    // Only now does the events task run.
    let events = tokio::spawn(tier_kube::events::publish(
        h.client.clone(),
        tier_kube::events::reporter(Some("tierd-0".into())),
        stream,
    ));
    ensurer.shutdown().await;
    let published = tokio::time::timeout(PATIENCE, events)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(published, 6);
    let created = h
        .server
        .events()
        .iter()
        .filter(|e| e["reason"] == "Created")
        .count();
    assert_eq!(created, 6);
}
