//! The checks can fail: deliberately broken initializers are caught, each by its invariant.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use tier_core::DesiredSet;
use tier_sim::{Invariant, Sabotage, Scenario, SeedReport, SimConfig, run_scenario, run_seeds};

/// One initializer whose cache syncs 2 s late, an empty store, latency but no failures, no
/// adversary.
fn empty_store() -> Scenario {
    let mut s = Scenario::issue_6694();
    s.start.clear();
    s.faults.max_latency = Duration::from_millis(500);
    s
}

fn sabotaged(scenario: &Scenario, sabotage: Sabotage) -> SeedReport {
    let config = SimConfig {
        sabotage: Some(sabotage),
        ..SimConfig::default()
    };
    run_scenario(scenario, &config).unwrap()
}

fn kinds(report: &SeedReport) -> Vec<Invariant> {
    let mut kinds: Vec<Invariant> = report.violations.iter().map(|v| v.invariant).collect();
    kinds.dedup();
    kinds
}

#[test]
fn the_honest_initializer_passes_these_scenarios() {
    for scenario in [empty_store(), Scenario::issue_6694()] {
        let report = run_scenario(&scenario, &SimConfig::default()).unwrap();
        assert!(report.passed(), "{:?}", report.violations);
    }
}

#[test]
fn writing_before_the_cache_synced_is_caught() {
    let report = sabotaged(&empty_store(), Sabotage::EarlySync);
    assert!(!report.passed());
    assert!(
        kinds(&report).contains(&Invariant::WriteBeforeSync),
        "{report:#?}"
    );
    // The status claimed a sync the cache had not done.
    assert!(
        kinds(&report).contains(&Invariant::StatusMismatch),
        "{report:#?}"
    );
}

#[test]
fn writing_outside_the_desired_set_is_caught() {
    let report = sabotaged(&empty_store(), Sabotage::ForeignName);
    assert!(
        kinds(&report).contains(&Invariant::OutsideDesiredSet),
        "{report:#?}"
    );
    assert!(
        kinds(&report).contains(&Invariant::NoConvergence),
        "{report:#?}"
    );
}

#[test]
fn two_calls_in_flight_for_one_tier_are_caught() {
    let report = sabotaged(&empty_store(), Sabotage::DuplicateCalls);
    assert_eq!(
        kinds(&report).first(),
        Some(&Invariant::OverlappingCalls),
        "{report:#?}"
    );
}

#[test]
fn a_status_claiming_convergence_the_cache_does_not_show_is_caught() {
    let report = sabotaged(&empty_store(), Sabotage::LyingCache);
    assert!(
        kinds(&report).contains(&Invariant::StatusMismatch),
        "{report:#?}"
    );
    assert_eq!(report.writes, 0);
}

#[test]
fn a_status_claiming_convergence_the_store_does_not_show_is_caught() {
    // Drift one Tier: the lying cache hides it, the honest cache behind it shows it.
    let mut scenario = Scenario::issue_6694();
    scenario.start[2].priority = 201;
    let report = sabotaged(&scenario, Sabotage::LyingCache);
    let mismatch = report
        .violations
        .iter()
        .find(|v| v.invariant == Invariant::StatusMismatch)
        .unwrap();
    assert!(mismatch.detail.contains("platform"), "{mismatch}");
}

#[test]
fn never_converging_is_caught_within_the_bound() {
    let report = sabotaged(&empty_store(), Sabotage::SwallowWrites);
    // Swallowed writes also make tierd report contests nobody caused (its accepted writes
    // vanish): the false-contest check catches those; the rest is the one NoConvergence.
    assert!(
        report.violations.iter().all(|v| matches!(
            v.invariant,
            Invariant::NoConvergence | Invariant::FalseContest
        )),
        "{:?}",
        report.violations
    );
    let v: Vec<_> = report
        .violations
        .iter()
        .filter(|v| v.invariant == Invariant::NoConvergence)
        .collect();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].invariant, Invariant::NoConvergence);
    assert_eq!(v[0].at, report.quiet_at + report.bound);
    for tier in DesiredSet::antrea().tiers() {
        assert!(v[0].detail.contains(&tier.name), "{}", v[0]);
    }
}

#[test]
fn every_sabotage_is_caught_on_random_seeds() {
    let seeds: Vec<u64> = (0..40).collect();
    for sabotage in [
        Sabotage::EarlySync,
        Sabotage::ForeignName,
        Sabotage::DuplicateCalls,
        Sabotage::LyingCache,
        Sabotage::SwallowWrites,
    ] {
        let config = SimConfig {
            sabotage: Some(sabotage),
            ..SimConfig::default()
        };
        let reports = run_seeds(&seeds, &[tier_sim::Strategy::Tierd], &config, 2).unwrap();
        let caught = reports.iter().filter(|r| !r.passed()).count();
        // Some seeds give a saboteur nothing to break (e.g. a store already in sync).
        assert!(
            caught >= seeds.len() / 2,
            "{sabotage:?}: caught on {caught} seeds"
        );
    }
}

/// The write bound on virtual time, without any core: `writes` creates of baseline, `every`
/// apart, through the checking writer of an initializer without a status (nothing visible).
fn write_bound_violations(writes: u32, every: Duration) -> Vec<tier_sim::Violation> {
    use tier_core::TierWriter;
    use tier_memory::MemoryCluster;
    use tier_sim::{CheckingWriter, Checks, Journal};

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let cluster = MemoryCluster::new();
        let journal = Journal::new(false);
        let checks = Checks::new(
            "tierd-0",
            DesiredSet::antrea(),
            cluster.lister(),
            cluster.clone(),
            journal.clone(),
        );
        checks.enforce_write_bound(true);
        let writer = CheckingWriter::new(cluster.writer("tierd-0"), checks);
        let baseline = DesiredSet::antrea().tiers()[0].clone();
        for _ in 0..writes {
            let _ = writer.create(&baseline).await;
            tokio::time::sleep(every).await;
        }
        journal
            .violations()
            .into_iter()
            .filter(|v| v.invariant == Invariant::WriteBound)
            .collect()
    })
}

#[test]
fn a_write_loop_nobody_reports_is_caught_by_the_soft_bound() {
    // Ten writes in 120 s are what the write budget allows unheld; the eleventh with nothing
    // visible is not.
    assert_eq!(
        write_bound_violations(10, Duration::from_secs(10)),
        Vec::new()
    );
    let found = write_bound_violations(11, Duration::from_secs(10));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .detail
            .starts_with("11 writes of baseline within 120.000s"),
        "{}",
        found[0]
    );
    // One every 20 s is below the soft rate, however long it lasts.
    assert_eq!(
        write_bound_violations(20, Duration::from_secs(20)),
        Vec::new()
    );
}

#[test]
fn a_hot_loop_is_caught_by_the_hard_bound_once() {
    // 10 + 10 s / 5 s = 12 writes within 10 s at most.
    let found = write_bound_violations(100, Duration::from_millis(100));
    let hard: Vec<_> = found
        .iter()
        .filter(|v| v.detail.contains("more than the bound"))
        .collect();
    assert_eq!(hard.len(), 1, "{found:?}");
    assert!(
        hard[0]
            .detail
            .starts_with("13 writes of baseline within 10.000s"),
        "{}",
        hard[0]
    );
}
