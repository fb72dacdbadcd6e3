//! The worlds of issue 15 (`tier_sim::worlds`) and its two per-Tier invariants.
//!
//! On today's core (before v3) these worlds break exactly the issue-15 invariants (liveness,
//! the write bound, one create probe for the fleet) and nothing else: the tests that need every
//! seed to pass are ignored until core v3 lands (`cargo test -p tier-sim --test issue15 --
//! --ignored`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tier_sim::{Invariant, SeedReport, SimConfig, Strategy, World, run_seeds};

const ISSUE_15: [Invariant; 3] = [
    Invariant::Liveness,
    Invariant::WriteBound,
    Invariant::FleetProbe,
];

fn run(world: World, seeds: std::ops::Range<u64>) -> Vec<SeedReport> {
    let config = SimConfig {
        world,
        ..SimConfig::default()
    };
    let seeds: Vec<u64> = seeds.collect();
    run_seeds(&seeds, &[Strategy::Tierd], &config, 2).unwrap()
}

fn failures(reports: &[SeedReport]) -> Vec<String> {
    reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| format!("seed {}: {:?}", r.seed, r.violations.first()))
        .collect()
}

#[test]
fn every_world_converges_and_keeps_the_older_invariants() {
    for world in World::ISSUE_15 {
        for r in run(world, 0..3) {
            assert!(r.converged, "{world:?} seed {}: {:?}", r.seed, r.violations);
            let older: Vec<_> = r
                .violations
                .iter()
                .filter(|v| !ISSUE_15.contains(&v.invariant))
                .collect();
            assert!(older.is_empty(), "{world:?} seed {}: {older:?}", r.seed);
            assert_eq!(r.world, world);
        }
    }
}

#[test]
fn a_world_replays_exactly() {
    for world in [World::FailingTier, World::CoalescedDeleter] {
        let config = SimConfig {
            world,
            verbose: true,
            ..SimConfig::default()
        };
        let first = tier_sim::run_seed(5, &config).unwrap();
        assert_eq!(first, tier_sim::run_seed(5, &config).unwrap(), "{world:?}");
    }
}

fn assert_all_pass(world: World) {
    let reports = run(world, 0..20);
    let failed = failures(&reports);
    assert!(failed.is_empty(), "{world:?}: {failed:#?}");
}

#[test]
fn a_failing_tier_does_not_starve_the_others() {
    assert_all_pass(World::FailingTier);
}

#[test]
fn a_hanging_tier_does_not_starve_the_others() {
    assert_all_pass(World::HangingTier);
}

#[test]
fn an_editor_faster_than_the_cache_is_bounded_and_contested() {
    assert_all_pass(World::FastEditor);
}

#[test]
fn a_deletion_coalesced_with_the_create_is_a_correction() {
    assert_all_pass(World::CoalescedDeleter);
}

#[test]
fn forbidden_updates_do_not_delay_creates() {
    assert_all_pass(World::UpdateForbidden);
}

#[test]
fn forbidden_creates_are_one_probe_for_the_fleet() {
    assert_all_pass(World::CreateForbidden);
}

#[test]
fn a_fighter_that_slows_down_is_corrected_at_once_again() {
    assert_all_pass(World::SlowingFighter);
}

#[test]
fn a_lag_spike_that_recovers_passes() {
    // Passes on today's core too: the learned echo wait that never decays costs nothing the
    // invariants see here (see docs/RELIABILITY.md).
    assert_all_pass(World::LagSpike);
}

#[test]
fn the_random_worlds_pass_the_per_tier_invariants() {
    let config = SimConfig {
        issue_15_checks: true,
        ..SimConfig::default()
    };
    let seeds: Vec<u64> = (0..500).collect();
    let reports = run_seeds(&seeds, &[Strategy::Tierd], &config, 2).unwrap();
    let failed = failures(&reports);
    assert!(failed.is_empty(), "{failed:#?}");
}
