//! The worlds of issue 8, one each, run through the whole simulation with every invariant
//! checked (including "no Blocked status for a Tier its cache shows" and "contested clears").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use tier_core::TierSpec;
use tier_memory::AdmissionView;
use tier_sim::scenario::{AdversaryAction, AdversaryEvent, InitializerPlan};
use tier_sim::{Scenario, SeedReport, SimConfig, Strategy, run_scenario};

fn at(secs: f64, action: AdversaryAction) -> AdversaryEvent {
    AdversaryEvent {
        at: Duration::from_secs_f64(secs),
        action,
    }
}

/// A world where tierd's cache is current and syncs at once.
fn base() -> Scenario {
    let mut s = Scenario::issue_6694();
    s.start.clear();
    s.initializers[0].sync_after = Duration::ZERO;
    s
}

fn run(s: &Scenario) -> SeedReport {
    let report = run_scenario(s, &SimConfig::default()).unwrap();
    assert!(report.passed(), "{:#?}", report.violations);
    report
}

#[test]
fn a_squatter_while_the_set_churns_gets_no_doomed_create() {
    let mut s = base();
    s.start.push(TierSpec::new("team-a", 150, ""));
    for k in 0..40 {
        s.adversary.push(at(
            0.1 * f64::from(k),
            AdversaryAction::Squat {
                name: format!("unrelated-{}", k % 2),
                priority: 7 + i64::from(k % 2),
            },
        ));
    }
    s.quiet_at = Duration::from_secs(20);
    let report = run(&s);
    assert_eq!(report.denied_writes, 0);
    assert_eq!(report.doomed_writes, 0);
    assert_eq!(report.writes, 6);
}

#[test]
fn a_webhook_lagging_one_second_costs_about_a_second() {
    // networkops sits at platform's priority and platform is missing.
    let mut s = base();
    s.start.push(TierSpec::new("networkops", 200, ""));
    s.webhook.view = AdmissionView::Cache;
    s.webhook.lag = Duration::from_secs(1);
    let report = run(&s);
    assert_eq!(report.doomed_writes, 0, "our cache never showed a reason");
    let settled = report.settled_at.unwrap();
    assert!(settled < Duration::from_secs(2), "{settled:?}");
}

#[test]
fn a_lost_create_with_a_lagging_cache_is_never_reported_blocked() {
    let mut s = base();
    s.initializers[0].lag = Duration::from_secs(1);
    s.faults.lose_response = 0.5;
    s.quiet_at = Duration::from_secs(20);
    for seed in 0..20 {
        s.seed = seed;
        s.initializers[0].seed = seed;
        // The false-blocked invariant is checked on every status.
        run(&s);
    }
}

#[test]
fn a_delete_fight_is_contested_rate_limited_and_clears() {
    let mut s = base();
    for k in 0..600 {
        s.adversary.push(at(
            5.0 + 0.1 * f64::from(k),
            AdversaryAction::DeleteSystem {
                name: "emergency".into(),
            },
        ));
    }
    s.quiet_at = Duration::from_secs(66);
    // The contest-not-cleared invariant is checked a quiet period after the fight.
    let report = run(&s);
    // 60 s of deletions every 100 ms: three free re-creates, then hold-offs 1, 2, 4 ... 32 s.
    assert!(report.writes <= 6 + 10, "{} writes", report.writes);
    assert!(report.corrections >= 4, "{}", report.corrections);
}

#[test]
fn a_slow_editor_is_corrected_every_time_and_never_contested() {
    let mut s = base();
    s.start = tier_core::DesiredSet::antrea().tiers().to_vec();
    for k in 1..=5 {
        s.adversary.push(at(
            200.0 * f64::from(k),
            AdversaryAction::EditPriority {
                name: "platform".into(),
                priority: 201,
            },
        ));
    }
    s.quiet_at = Duration::from_secs(1001);
    let report = run(&s);
    assert_eq!(report.corrections, 5);
    assert_eq!(report.writes, 5);
}

#[test]
fn replicas_against_a_failing_server_do_not_retry_in_lockstep() {
    // Three replicas with different seeds (as OS entropy gives them) against 503s without
    // Retry-After: their calls spread out instead of arriving together.
    let mut s = base();
    s.faults.fail = 1.0;
    s.quiet_at = Duration::from_secs(30);
    s.initializers = (0..3)
        .map(|i| InitializerPlan {
            name: format!("tierd-{i}"),
            start_at: Duration::ZERO,
            sync_after: Duration::ZERO,
            lag: Duration::ZERO,
            seed: 1000 + i,
        })
        .collect();
    let report = run(&s);
    assert!(report.converged);
    assert_eq!(report.strategy, Strategy::Tierd);
}
