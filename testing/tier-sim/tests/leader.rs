//! Leadership changes and Lease expiry as faults ([`tier_sim::leader`]): on 300 seeds no two
//! replicas are permitted at once, every write starts while its replica is permitted, and one
//! replica leads with the desired Tiers soon after the faults stop; a replica that ignores the
//! Lease is caught.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tier_sim::leader::{LeaderSabotage, run_seed};

#[test]
fn three_hundred_seeds_keep_one_writer_and_recover() {
    let mut acquisitions = 0;
    let mut slowest = std::time::Duration::ZERO;
    for seed in 0..300 {
        let report = run_seed(seed, LeaderSabotage::None).unwrap();
        assert!(
            report.passed(),
            "{}: {:#?}",
            report.scenario,
            report.violations
        );
        acquisitions += report.acquisitions;
        slowest = slowest.max(report.recovered_after.unwrap());
    }
    eprintln!("300 seeds: {acquisitions} acquisitions; slowest recovery after quiet {slowest:?}");
    assert!(
        acquisitions > 400,
        "the faults move the lead ({acquisitions})"
    );
}

#[test]
fn a_replica_that_ignores_the_lease_is_caught() {
    let caught = (0..50)
        .filter(|seed| {
            let report = run_seed(*seed, LeaderSabotage::IgnoreLease).unwrap();
            report
                .violations
                .iter()
                .any(|v| v.contains("while not permitted"))
        })
        .count();
    assert!(caught >= 30, "caught on {caught} of 50 seeds");
}
