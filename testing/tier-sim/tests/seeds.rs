//! tierd passes every invariant on a few hundred random seeds, and runs are deterministic.
//! (`just sim` runs 10,000 seeds in release mode.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tier_sim::{SimConfig, Strategy, run_seed, run_seeds};

#[test]
fn tierd_passes_five_hundred_seeds() {
    let seeds: Vec<u64> = (0..500).collect();
    let reports = run_seeds(&seeds, &[Strategy::Tierd], &SimConfig::default(), 2).unwrap();
    assert_eq!(reports.len(), seeds.len());
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| format!("seed {}: {:?}", r.seed, r.violations.first()))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    for r in &reports {
        let after = r.converged_after_quiet.unwrap();
        assert!(
            after <= r.bound,
            "seed {}: {after:?} > {:?}",
            r.seed,
            r.bound
        );
    }
    // The scenarios are not trivial: faults cost failed writes.
    assert!(reports.iter().map(|r| r.failed_writes).sum::<usize>() > 1000);
}

#[test]
fn a_seed_replays_exactly() {
    for strategy in Strategy::ALL {
        let config = SimConfig {
            verbose: true,
            ..SimConfig::default()
        }
        .with_strategy(strategy);
        let first = run_seed(77, &config).unwrap();
        let second = run_seed(77, &config).unwrap();
        assert!(first.trace.len() > 5, "{strategy:?}");
        assert_eq!(first, second, "{strategy:?}");
    }
}
