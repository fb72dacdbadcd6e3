//! The whole core driver through this adapter against a real kube-apiserver (tier-testcluster)
//! with a fault proxy in front (tier-faultproxy): converging Antrea's six system Tiers from an
//! empty cluster, from drifted Tiers, around a squatter, and through faults; its Events as the
//! real server stores them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::PATIENCE;
use common::real::{self, Real as Harness};
use k8s_openapi::api::events::v1::Event;
use tier_core::{Backoff, DesiredSet, DriverConfig, MachineConfig, Mode, Stopped, TierState};
use tier_faultproxy::{Fault, FaultKind, Matcher, Verb};
use tier_kube::lister::KubeLister;
use tier_kube::writer::WriterConfig;
use tier_runtime::Ensurer;

const TIERS: &str = "tiers.crd.antrea.io";

fn on(verb: Verb) -> Matcher {
    Matcher::verb(verb).on(TIERS)
}

/// What tierd may do with Events (the `default` namespace, where Events about cluster-scoped
/// objects go), as the install grants it.
const EVENTS_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: tierd-events
  namespace: default
rules:
  - apiGroups: ["events.k8s.io"]
    resources: ["events"]
    verbs: ["create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: tierd-events
  namespace: default
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: tierd-events
subjects:
  - kind: ServiceAccount
    namespace: kube-system
    name: antrea-controller
"#;

async fn start() -> Harness {
    real::start_with(&[real::ANTREA_TIER_CRD, real::TIER_RBAC, EVENTS_RBAC]).await
}

/// The Events the real server stored in `default`.
async fn stored_events(h: &Harness) -> Vec<serde_json::Value> {
    let api: kube::Api<Event> = kube::Api::namespaced(h.admin.clone(), "default");
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

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

async fn assert_antrea_tiers(h: &Harness) {
    for tier in DesiredSet::antrea().tiers() {
        assert_eq!(
            h.stored(&tier.name).await,
            Some((tier.priority, Some(tier.description.clone()))),
            "{}",
            tier.name
        );
    }
}

#[tokio::test]
async fn converges_from_an_empty_cluster() {
    let h = start().await;
    converge_once(&h).await;
    assert_antrea_tiers(&h).await;
    let log = h.proxy.requests();
    let all: Vec<_> = log
        .records()
        .iter()
        .map(|r| (r.method.clone(), r.path.clone(), r.name.clone(), r.code))
        .collect();
    assert_eq!(log.count_code(on(Verb::Create), 201), 6, "{all:#?}");
    let codes: Vec<_> = log
        .matching(on(Verb::Create))
        .iter()
        .map(|r| (r.name.clone(), r.code, r.elapsed))
        .collect();
    assert_eq!(
        log.count(on(Verb::Create)),
        6,
        "one create per Tier: {codes:?}"
    );
    assert_eq!(log.count(on(Verb::Update)), 0);
}

#[tokio::test]
async fn corrects_drifted_tiers() {
    let h = start().await;
    // Wrong priority (held by another system Tier's slot), wrong description, no description.
    h.seed(
        "baseline",
        240,
        Some("[READ-ONLY]: System generated Baseline Tier"),
    )
    .await;
    h.seed("application", 250, Some("an old description")).await;
    h.seed("platform", 150, None).await; // holds networkops' priority: networkops waits for it
    h.seed(
        "emergency",
        50,
        Some("[READ-ONLY]: System generated Emergency Tier"),
    )
    .await;
    h.modify("platform", |t| {
        t.metadata.labels = Some([("keep".to_owned(), "me".to_owned())].into());
    })
    .await;
    converge_once(&h).await;
    assert_antrea_tiers(&h).await;
    let platform = h.get("platform").await.unwrap();
    assert_eq!(
        platform["metadata"]["labels"]["keep"], "me",
        "the update kept other fields"
    );
    let log = h.proxy.requests();
    assert_eq!(
        log.count_code(on(Verb::Update).named("emergency"), 200),
        0,
        "in sync: untouched"
    );
    assert!(log.count_code(on(Verb::Update).named("baseline"), 200) == 1);
    assert!(log.count_code(on(Verb::Update).named("application"), 200) == 1);
    assert!(log.count_code(on(Verb::Update).named("platform"), 200) == 1);
    assert!(log.count_code(on(Verb::Create).named("networkops"), 201) == 1);
}

#[tokio::test]
async fn a_squatter_blocks_only_its_tier_until_it_goes() {
    let h = start().await;
    h.seed(
        "squatter",
        100,
        Some("a user Tier at securityops' priority"),
    )
    .await;
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
    assert_eq!(h.stored("securityops").await, None);
    let log = h.proxy.requests();
    assert_eq!(
        log.count(on(Verb::Create).named("securityops")),
        0,
        "no create the cache shows will be denied"
    );

    h.delete("squatter").await;
    tokio::time::timeout(PATIENCE, status.initialized())
        .await
        .expect("securityops should converge once the squatter is gone")
        .unwrap();
    assert_antrea_tiers(&h).await;
    assert_eq!(ensurer.shutdown().await, Stopped::Cancelled);
}

#[tokio::test]
async fn converges_through_faults() {
    let h = start().await;
    let p = &h.proxy;
    p.inject(Fault::unavailable(on(Verb::Create)).times(3))
        .unwrap();
    p.inject(Fault::lose_response(on(Verb::Create).named("baseline")))
        .unwrap();
    p.inject(Fault::reset(on(Verb::Create).named("platform")))
        .unwrap();
    p.inject(Fault::hang(on(Verb::Create).named("emergency")))
        .unwrap();
    p.inject(Fault::too_many_requests(on(Verb::List), 0))
        .unwrap();
    converge_once(&h).await;
    assert_antrea_tiers(&h).await;
    assert_eq!(p.active_faults(), 0, "every fault fired");
    let log = p.requests();
    assert_eq!(
        log.count_where(|r| r.name.as_deref() == Some("baseline")
            && r.fault == Some(FaultKind::LoseResponse)
            && r.upstream_code == Some(201)),
        1,
        "the lost create was applied"
    );
}

#[tokio::test]
async fn keeps_correcting_drift_in_continuous_mode() {
    let h = start().await;
    let ensurer = ensure(&h, Mode::Continuous);
    let mut status = ensurer.status();
    tokio::time::timeout(PATIENCE, status.initialized())
        .await
        .unwrap()
        .unwrap();
    h.modify("application", |t| {
        t.spec.description = Some("edited by hand".into());
    })
    .await;
    tokio::time::timeout(PATIENCE, async {
        loop {
            let described = h.stored("application").await.and_then(|(_, d)| d);
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
    let h = start().await;
    h.seed("squat", 150, None).await;
    h.seed("application", 250, Some("an old description")).await;
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
        h.proxy
            .requests()
            .count(on(Verb::Create).named("networkops")),
        0
    );
    h.delete("squat").await;
    tokio::time::timeout(PATIENCE, status.initialized())
        .await
        .unwrap()
        .unwrap();
    ensurer.shutdown().await;
    let published = tokio::time::timeout(PATIENCE, events)
        .await
        .unwrap()
        .unwrap();
    let recorded = stored_events(&h).await;
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
    let h = start().await;
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
    let log: Vec<_> = h
        .proxy
        .requests()
        .records()
        .iter()
        .filter(|r| r.path.contains("events"))
        .map(|r| (r.method.clone(), r.path.clone(), r.code))
        .collect();
    assert_eq!(published, 6, "{log:?}");
    let created = stored_events(&h)
        .await
        .iter()
        .filter(|e| e["reason"] == "Created")
        .count();
    assert_eq!(created, 6);
}
