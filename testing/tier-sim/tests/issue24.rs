//! Issue 24 in the simulated world: a deletion that reaches tierd's cache together with the
//! create it follows is answered within the cache's lag, not after the echo timeout; and the
//! `false-contest` check (a Tier contested only after a write the store accepted was undone by
//! another writer) can fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use tier_sim::{Invariant, Sabotage, Scenario, SimConfig, World, run_scenario};

/// The times (from the start) of the trace's lines `tierd-0 create NAME (`.
fn creates(trace: &[String], name: &str) -> Vec<Duration> {
    let needle = format!("tierd-0 create {name} (");
    trace
        .iter()
        .filter(|line| line.contains(&needle))
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|at| at.strip_suffix('s')?.parse::<f64>().ok())
        .map(Duration::from_secs_f64)
        .collect()
}

#[test]
fn a_deletion_seen_with_its_create_is_answered_within_the_lag() {
    // A prune controller deletes the Tier the instant the store shows it: tierd's cache, 500 ms
    // behind, shows the create and the deletion together.
    let mut s = Scenario::generate_in(World::CoalescedDeleter, 3);
    let lag = Duration::from_millis(500);
    s.initializers[0].lag = lag;
    s.initializers[0].sync_after = Duration::ZERO;
    s.faults.max_latency = Duration::from_millis(10);
    let pruned = s.pruned.clone().unwrap();
    let config = SimConfig {
        verbose: true,
        ..SimConfig::default()
    };
    let report = run_scenario(&s, &config).unwrap();
    assert!(report.passed(), "{:#?}", report.violations);
    let at = creates(&report.trace, &pruned);
    assert!(at.len() >= 4, "{at:?}");
    // The first three creates spend the budget's three tokens: each follows the last by the
    // cache's lag (the deletion shows with the create), never by the 3 s echo timeout.
    for pair in at[..3].windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap < lag + Duration::from_millis(100),
            "re-created {gap:?} after the create before: {at:?}"
        );
    }
}

#[test]
fn the_false_contest_check_can_fail() {
    // An editor changes a Tier every 100 ms; the saboteur answers tierd's writes with success
    // without sending them, so tierd takes the editor's changes for undone writes of its own:
    // contested, though the store never accepted a write from it.
    let s = Scenario::generate_in(World::FastEditor, 1);
    let config = SimConfig {
        sabotage: Some(Sabotage::SwallowWrites),
        ..SimConfig::default()
    };
    let report = run_scenario(&s, &config).unwrap();
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.invariant == Invariant::FalseContest),
        "{:#?}",
        report.violations
    );
}
