//! Calico's worlds: tierd converges on every seed; Calico's own initializer leaves a wrong
//! built-in wrong, and does not recover from a missing permission or CRD.
#![allow(clippy::unwrap_used)]

use tier_sim::SimConfig;
use tier_sim::calico::{
    CalicoReport, CalicoScenario, CalicoStrategy, CalicoWorld, calico_outcome_line,
    run_calico_seed, run_calico_seeds,
};

const SEEDS: u64 = 60;

fn runs(strategy: CalicoStrategy) -> Vec<CalicoReport> {
    let seeds: Vec<u64> = (0..SEEDS).collect();
    run_calico_seeds(&seeds, &[strategy], &SimConfig::default(), 2).unwrap()
}

/// A seed of `world` (the first one drawn).
fn seed_of(world: CalicoWorld) -> u64 {
    (0..)
        .find(|s| CalicoScenario::generate(*s).world == world)
        .unwrap()
}

#[test]
fn tierd_converges_on_every_calico_seed_and_every_world_is_drawn() {
    let reports = runs(CalicoStrategy::Tierd);
    for r in &reports {
        assert!(r.passed(), "{}", calico_outcome_line(r));
    }
    for world in CalicoWorld::ALL {
        assert!(
            reports.iter().any(|r| r.world == world),
            "{world:?} never drawn"
        );
    }
}

#[test]
fn calicos_initializer_leaves_a_wrong_order_wrong() {
    let seed = (0..)
        .find(|s| {
            let scenario = CalicoScenario::generate(*s);
            scenario.world == CalicoWorld::WrongBuiltIn
                && scenario.start.iter().any(|t| {
                    tier_core::calico::built_ins()
                        .iter()
                        .any(|b| b.name == t.name && b.order != t.order)
                })
        })
        .unwrap();
    let calico = run_calico_seed(seed, CalicoStrategy::Calico, &SimConfig::default()).unwrap();
    // Whether it finished (AlreadyExists counts as success) or went fatal (calls hung past its
    // 60 s), the wrong built-in stays wrong: it never updates.
    assert!(!calico.converged, "{}", calico_outcome_line(&calico));
    assert!(calico.wrong_fields >= 1);
    let tierd = run_calico_seed(seed, CalicoStrategy::Tierd, &SimConfig::default()).unwrap();
    assert!(tierd.passed(), "{}", calico_outcome_line(&tierd));
    assert_eq!(tierd.wrong_fields, 0);
}

#[test]
fn calicos_initializer_counts_a_refused_create_as_done_and_a_missing_crd_as_fatal() {
    let config = SimConfig::default();
    let forbidden = run_calico_seed(
        seed_of(CalicoWorld::CreateForbidden),
        CalicoStrategy::Calico,
        &config,
    )
    .unwrap();
    assert!(!forbidden.stuck, "Unauthorized counts as success");
    let missing = CalicoScenario::generate(seed_of(CalicoWorld::CrdMissing));
    let crd = run_calico_seed(missing.base.seed, CalicoStrategy::Calico, &config).unwrap();
    assert_eq!(
        crd.stuck,
        missing.crd_at.unwrap() > tier_sim::calico::CALICO_DEADLINE,
        "{}",
        calico_outcome_line(&crd)
    );
    assert!(!crd.converged || !crd.stuck);
    let tierd = run_calico_seed(missing.base.seed, CalicoStrategy::Tierd, &config).unwrap();
    assert!(tierd.passed(), "{}", calico_outcome_line(&tierd));
}
