//! Antrea's strategies in the same harness: the old one livelocks on issue 6694, the new one
//! converges but only fixes priorities, and blocks on a Tier it cannot create.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use tier_sim::{Invariant, Scenario, SimConfig, Strategy, run_scenario};

fn run(scenario: &Scenario, strategy: Strategy) -> tier_sim::SeedReport {
    run_scenario(scenario, &SimConfig::default().with_strategy(strategy)).unwrap()
}

#[test]
fn issue_6694_livelocks_the_old_strategy_only() {
    let scenario = Scenario::issue_6694();
    let old = run(&scenario, Strategy::AntreaOld);
    assert_eq!(old.unfinished, 1, "still retrying at the end");
    // 1 + 2 + 4 s, then every 8 s for the 15 s fault phase plus the 300 s limit.
    assert_eq!(old.writes, 42);
    assert_eq!(
        old.failed_writes, old.writes,
        "every create is an overlap denial"
    );
    assert!(
        old.violations
            .iter()
            .all(|v| v.invariant == Invariant::WriteBeforeSync)
    );

    for strategy in [Strategy::AntreaNew, Strategy::Tierd] {
        let report = run(&scenario, strategy);
        assert!(report.passed(), "{strategy:?}: {:?}", report.violations);
        assert_eq!(report.writes, 0, "{strategy:?}");
        assert_eq!(report.unfinished, 0);
    }
}

#[test]
fn the_new_strategy_ignores_descriptions_and_tierd_does_not() {
    let mut scenario = Scenario::issue_6694();
    scenario.start[3].description = "edited by hand".to_owned();
    let new = run(&scenario, Strategy::AntreaNew);
    assert_eq!(new.writes, 0);
    assert!(!new.converged);
    assert_eq!(new.priorities_settled_at, Some(Duration::ZERO));

    let tierd = run(&scenario, Strategy::Tierd);
    assert!(tierd.passed(), "{:?}", tierd.violations);
    assert_eq!(tierd.writes, 1);
}

#[test]
fn the_new_strategy_blocks_behind_a_tier_it_cannot_create() {
    // application is missing and emergency holds its priority: the sequential strategy retries
    // the denied create forever and never reaches emergency, which would free the priority.
    let mut scenario = Scenario::issue_6694();
    scenario.start.retain(|t| t.name != "application");
    if let Some(emergency) = scenario.start.iter_mut().find(|t| t.name == "emergency") {
        emergency.priority = 250;
    }
    let new = run(&scenario, Strategy::AntreaNew);
    assert_eq!(new.unfinished, 1);
    assert!(!new.converged);

    let tierd = run(&scenario, Strategy::Tierd);
    assert!(tierd.passed(), "{:?}", tierd.violations);
}

#[test]
fn with_faults_the_new_strategy_converges_more_slowly_than_tierd() {
    // An empty store, and the webhook unreachable for the first 10 s (the controller is not
    // Ready yet): the sequential 1-2-4-8 s backoff costs the new strategy several seconds.
    let mut scenario = Scenario::issue_6694();
    scenario.start.clear();
    scenario.webhook.unreachable_until = Duration::from_secs(10);
    let new = run(&scenario, Strategy::AntreaNew);
    let tierd = run(&scenario, Strategy::Tierd);
    assert!(new.converged && tierd.passed());
    let (new_at, tierd_at) = (new.settled_at.unwrap(), tierd.settled_at.unwrap());
    assert!(new_at > tierd_at, "{new_at:?} vs {tierd_at:?}");
}
