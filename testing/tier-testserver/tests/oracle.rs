//! The test API server's Antrea rules (`tier_testserver::antrea`, an independent oracle written
//! from Antrea's `validate.go`) and tierd's (`tier_core::admission`) agree, verdict and message,
//! on arbitrary requests: existing Tiers, operations, priorities, users, policy references and
//! the `ClusterNetworkPolicy` gate.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use serde_json::Value;
use tier_core::ValidationRules;
use tier_core::admission::{AdmissionPolicy, References, Request, review};
use tier_testserver::antrea::{self, Operation, Review};
use tier_testserver::tier::tier;

const CONTROLLER: &str = "system:serviceaccount:kube-system:antrea-controller";

#[derive(Debug, Clone)]
struct Case {
    existing: Vec<(String, i64)>,
    operation: Operation,
    name: String,
    old_priority: i64,
    new_priority: i64,
    user: &'static str,
    gate: bool,
    references: [usize; 2],
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "baseline",
            "application",
            "platform",
            "networkops",
            "securityops",
            "emergency"
        ])
        .prop_map(str::to_owned),
        "[a-z]{1,6}",
    ]
}

fn priority() -> impl Strategy<Value = i64> {
    prop_oneof![
        prop::sample::select(vec![50, 100, 150, 200, 220, 250, 251, 252, 253, 254, 255]),
        0i64..=255,
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((name(), priority()), 0..24),
        prop::sample::select(vec![
            Operation::Create,
            Operation::Update,
            Operation::Delete,
        ]),
        name(),
        priority(),
        priority(),
        prop::sample::select(vec![CONTROLLER, "alice"]),
        any::<bool>(),
        prop::array::uniform2(prop_oneof![Just(0usize), 1usize..4]),
    )
        .prop_map(
            |(existing, operation, name, old_priority, new_priority, user, gate, references)| {
                Case {
                    existing,
                    operation,
                    name,
                    old_priority,
                    new_priority,
                    user,
                    gate,
                    references,
                }
            },
        )
}

fn oracle(case: &Case) -> Result<(), String> {
    let existing: Vec<Value> = case
        .existing
        .iter()
        .map(|(n, p)| tier(n, *p, None))
        .collect();
    let object = tier(&case.name, case.new_priority, None);
    let old = tier(&case.name, case.old_priority, None);
    let (object, old_object) = match case.operation {
        Operation::Create => (Some(&object), None),
        Operation::Update => (Some(&object), Some(&old)),
        Operation::Delete => (None, Some(&old)),
    };
    antrea::review(
        &Review {
            operation: case.operation,
            object,
            old_object,
            username: case.user,
            controller_user: CONTROLLER,
            cluster_network_policy: case.gate,
            references: case.references,
        },
        &existing,
    )
}

fn core(case: &Case) -> Result<(), String> {
    let policy = AdmissionPolicy::antrea(CONTROLLER).with_rules(ValidationRules {
        cluster_network_policy: case.gate,
        ..ValidationRules::default()
    });
    let name = case.name.as_str();
    let request = match case.operation {
        Operation::Create => Request::Create {
            name,
            priority: case.new_priority,
        },
        Operation::Update => Request::Update {
            name,
            old_priority: case.old_priority,
            new_priority: case.new_priority,
            user: case.user,
        },
        Operation::Delete => Request::Delete {
            name,
            references: References {
                cluster_network_policies: case.references[0],
                network_policies: case.references[1],
            },
        },
    };
    let existing = case.existing.iter().map(|(n, p)| (n.as_str(), *p));
    review(&policy, &request, existing).map_err(|denial| denial.0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_oracle_and_the_core_agree(case in case()) {
        prop_assert_eq!(oracle(&case), core(&case), "{:?}", case);
    }
}

#[test]
fn the_facts_agree() {
    let core: Vec<(String, i64, String)> = tier_core::DesiredSet::antrea()
        .tiers()
        .iter()
        .map(|t| (t.name.clone(), t.priority, t.description.clone()))
        .collect();
    let oracle: Vec<(String, i64, String)> = antrea::SYSTEM_TIERS
        .iter()
        .map(|t| (t.name.to_owned(), t.priority, t.description.to_owned()))
        .collect();
    assert_eq!(core, oracle);
    let rules = ValidationRules::default();
    assert_eq!(
        rules
            .reserved_priorities
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        antrea::RESERVED_PRIORITIES
    );
    assert_eq!(rules.max_distinct_priorities, antrea::MAX_TIERS);
    assert_eq!(
        tier_core::CNP_ADMIN_TIER_PRIORITY,
        antrea::CNP_ADMIN_TIER_PRIORITY
    );
}
