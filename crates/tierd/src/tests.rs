#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tier_core::TierSpec;
use tier_core::admission::{References, Request, review};

use super::*;
use crate::antrea::admission_policy;

#[test]
fn a_custom_set_adds_to_antreas_reserved_names() {
    let custom = DesiredSet::new(
        vec![
            TierSpec::new("baseline", 253, ""),
            TierSpec::new("mine", 7, ""),
        ],
        &ValidationRules::default(),
    )
    .unwrap();
    let policy = admission_policy(&custom, "tierd", ValidationRules::default());
    for name in [
        "baseline",
        "application",
        "platform",
        "networkops",
        "securityops",
        "emergency",
        "mine",
    ] {
        let delete = Request::Delete {
            name,
            references: References::NONE,
        };
        assert_eq!(
            review(&policy, &delete, []).unwrap_err().0,
            format!("cannot delete reserved tier {name}")
        );
    }
}
