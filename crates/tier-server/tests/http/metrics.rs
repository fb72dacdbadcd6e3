//! GET /metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use prometheus_client::registry::Registry;
use tier_core::{ErrorClass, OutcomeCounts, Status, TierState};
use tier_server::metrics;
use tier_server::readiness::Readiness;
use tier_server::server::Routes;
use tokio::sync::watch;

use crate::common::{Running, get, get_with, samples, tier_status};

fn status(start: Instant) -> Status {
    let mut baseline = tier_status(
        "baseline",
        TierState::Blocked {
            since: start,
            blockers: vec!["mine".into()],
            reason: "priority 253 is held by Tier mine".into(),
        },
    );
    baseline.outcomes = OutcomeCounts {
        ok: 0,
        stale: 1,
        transient: 3,
        denied: 2,
        ..OutcomeCounts::default()
    };
    let mut application = tier_status("application", TierState::Converged);
    application.outcomes.ok = 1;
    application.corrections = 4;
    application.contested = true;
    application.converged_at = Some(start + Duration::from_millis(1500));
    let platform = tier_status(
        "platform",
        TierState::Retrying {
            attempt: 1,
            class: ErrorClass::Transient,
            error: "timeout".into(),
        },
    );
    Status {
        synced: true,
        tiers: vec![baseline, application, platform],
        ..Status::default()
    }
}

async fn serve(rx: watch::Receiver<Status>) -> Running {
    let mut registry = Registry::default();
    metrics::register(&mut registry, rx);
    let router = Routes::new(Readiness::new())
        .metrics(Arc::new(registry))
        .into_router();
    Running::plain(router).await
}

#[tokio::test]
async fn scrape_reads_the_latest_status() {
    let start = Instant::now();
    let (tx, rx) = watch::channel(Status::default());
    let server = serve(rx).await;

    let reply = get(server.addr, "/metrics").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let s = samples(&reply.body);
    assert_eq!(s["tierd_cache_synced"], "0");
    assert_eq!(s["tierd_tiers_blocked"], "0");
    assert_eq!(s["tierd_system_tiers_initialized"], "0");
    assert!(!reply.body.contains("tierd_converged_seconds"));
    assert!(
        reply
            .body
            .contains("# TYPE tierd_tier_writes_total counter\n")
    );

    // No background updater: the next scrape sees the new status.
    tx.send_replace(status(start));
    let reply = get(server.addr, "/metrics").await;
    let s = samples(&reply.body);
    let state = |tier: &str, state: &str| {
        s[&format!("tierd_tier_state{{tier=\"{tier}\",state=\"{state}\"}}")].clone()
    };
    assert_eq!(state("baseline", "blocked"), "1");
    for other in TierState::LABELS.iter().filter(|l| **l != "blocked") {
        assert_eq!(state("baseline", other), "0", "{other}");
    }
    assert_eq!(state("application", "converged"), "1");
    assert_eq!(state("platform", "retrying"), "1");
    assert_eq!(
        s.keys()
            .filter(|k| k.starts_with("tierd_tier_state{"))
            .count(),
        3 * TierState::LABELS.len()
    );
    let writes = |tier: &str, outcome: &str| {
        s[&format!("tierd_tier_writes_total{{tier=\"{tier}\",outcome=\"{outcome}\"}}")].clone()
    };
    assert_eq!(writes("baseline", "ok"), "0");
    assert_eq!(writes("baseline", "stale"), "1");
    assert_eq!(writes("baseline", "transient"), "3");
    assert_eq!(writes("baseline", "denied"), "2");
    assert_eq!(writes("application", "ok"), "1");
    assert_eq!(s["tierd_tier_corrections_total{tier=\"application\"}"], "4");
    assert_eq!(s["tierd_tier_corrections_total{tier=\"baseline\"}"], "0");
    assert_eq!(s["tierd_tier_contested{tier=\"application\"}"], "1");
    assert_eq!(s["tierd_tier_contested{tier=\"platform\"}"], "0");
    assert_eq!(s["tierd_tiers_blocked"], "1");
    assert_eq!(s["tierd_cache_synced"], "1");
    assert!(!s.contains_key("tierd_converged_seconds"));

    // Initialized: every Tier converged; the latest first convergence is 2.5 s after start.
    let mut done = status(start);
    for (i, tier) in done.tiers.iter_mut().enumerate() {
        tier.state = TierState::Converged;
        tier.converged_at = Some(start + Duration::from_millis(1500 + 500 * i as u64));
    }
    done.initialized = true;
    done.started_at = Some(start);
    done.initialized_at = Some(start + Duration::from_millis(2500));
    tx.send_replace(done);
    let s = samples(&get(server.addr, "/metrics").await.body);
    assert_eq!(s["tierd_converged_seconds"], "2.5");
    assert_eq!(s["tierd_system_tiers_initialized"], "1");
    assert_eq!(s["tierd_tiers_blocked"], "0");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn openmetrics_on_request() {
    let (_tx, rx) = watch::channel(status(Instant::now()));
    let server = serve(rx).await;
    let reply = get_with(
        server.addr,
        "/metrics",
        &[(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        )],
    )
    .await;
    assert_eq!(
        reply.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(reply.body.ends_with("# EOF\n"), "{}", reply.body);
    assert!(reply.body.contains("# TYPE tierd_tier_writes counter\n"));
    assert!(
        reply
            .body
            .contains("tierd_tier_writes_total{tier=\"baseline\",outcome=\"transient\"} 3\n")
    );
    server.stop().await.unwrap();
}
