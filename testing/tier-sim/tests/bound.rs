//! The convergence bound is needed in full: a contested Tier sitting on another Tier's priority
//! delays that Tier's creation by the contest hold-off, a lagging webhook cache then costs
//! denied retries, and tierd still converges within the bound.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use tier_memory::AdmissionView;
use tier_sim::scenario::{AdversaryAction, AdversaryEvent};
use tier_sim::{Scenario, SimConfig, run_scenario};

fn at(secs: f64, action: AdversaryAction) -> AdversaryEvent {
    AdversaryEvent {
        at: Duration::from_secs_f64(secs),
        action,
    }
}

#[test]
fn a_held_correction_delays_the_tier_it_blocks_within_the_bound() {
    let mut s = Scenario::issue_6694();
    s.initializers[0].sync_after = Duration::ZERO;
    s.initializers[0].lag = Duration::from_millis(200);
    s.webhook.view = AdmissionView::Cache;
    s.webhook.lag = Duration::from_secs(3);
    // A hot fight over emergency, an edit every second, contests it until every correction
    // is held off for up to 60 s...
    for k in 0..649 {
        s.adversary.push(at(
            10.0 + f64::from(k),
            AdversaryAction::EditDescription {
                name: "emergency".into(),
                description: "mine".into(),
            },
        ));
    }
    // ...and the last edit moves it onto application's priority, just after application was
    // deleted: application cannot be created until emergency's held correction lands.
    s.adversary.push(at(
        659.5,
        AdversaryAction::DeleteSystem {
            name: "application".into(),
        },
    ));
    s.adversary.push(at(
        660.0,
        AdversaryAction::EditPriority {
            name: "emergency".into(),
            priority: 250,
        },
    ));
    s.quiet_at = Duration::from_secs_f64(660.5);

    let report = run_scenario(&s, &SimConfig::default()).unwrap();
    assert!(report.passed(), "{:#?}", report.violations);
    let after = report.converged_after_quiet.unwrap();
    eprintln!("converged {after:?} after the adversary stopped");
    // application waited for emergency's held-off correction: well beyond the lags alone.
    assert!(
        after > 3 * s.max_lag() + Duration::from_secs(5),
        "{after:?}"
    );
    assert!(after <= report.bound, "{after:?} > {:?}", report.bound);
}
