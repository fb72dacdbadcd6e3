//! Antrea's own test cases for its Tier validator, run against tierd's webhook.
//!
//! Transcribed (the cases, not the code) from `TestValidateTier` and `TestValidateTierCNPPriority`
//! in antrea-io/antrea `pkg/controller/networkpolicy/validate_test.go`. Each case sets up what
//! Antrea's test puts in its informer stores (Tiers `tier-priority-<i>` at priority `i` for `i` in
//! `1..=existTierNum`, at most one ClusterNetworkPolicy and one NetworkPolicy), sends the
//! AdmissionReview kube-apiserver would send, and expects Antrea's exact reason (empty = allowed).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use futures::FutureExt;

use serde_json::{Value, json};
use tier_core::admission::AdmissionPolicy;
use tier_core::{FixedLister, ObservedTier, Snapshot, TierLister, ValidationRules};
use tier_kube::policies::{ClusterNetworkPolicies, NetworkPolicies, PolicyCache, PolicyRef};
use tier_server::readiness::Readiness;
use tier_server::readiness::{
    ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, CacheSynced, CheckState, TIER_CACHE_SYNCED, from_fn,
};
use tier_server::webhook::{PolicyReferences, Webhook};

/// Antrea's controller service account, the user exempt from the priority-update rule.
const ANTREA_CONTROLLER: &str = "system:serviceaccount:kube-system:antrea-controller";

/// Antrea's `maxSupportedTiers`.
const MAX_SUPPORTED_TIERS: i64 = 20;

/// Antrea's `cnpAdminTierPriority`.
const CNP_ADMIN_TIER_PRIORITY: i64 = 220;

#[derive(Clone, Copy)]
enum Op {
    Create,
    Update,
    Delete,
}

/// One row of Antrea's table.
struct Case {
    name: &'static str,
    cur_tier: Option<(&'static str, i64)>,
    old_tier: Option<(&'static str, i64)>,
    exist_tier_num: i64,
    /// (name, spec.tier) of an existing ClusterNetworkPolicy.
    exist_acnp: Option<(&'static str, &'static str)>,
    /// (namespace, name, spec.tier) of an existing NetworkPolicy.
    exist_annp: Option<(&'static str, &'static str, &'static str)>,
    operation: Op,
    user: &'static str,
    cnp_feature_enabled: bool,
    expected_reason: String,
}

impl Default for Case {
    fn default() -> Self {
        Self {
            name: "",
            cur_tier: None,
            old_tier: None,
            exist_tier_num: 0,
            exist_acnp: None,
            exist_annp: None,
            operation: Op::Create,
            user: "",
            cnp_feature_enabled: false,
            expected_reason: String::new(),
        }
    }
}

fn tier((name, priority): (&str, i64)) -> Value {
    json!({
        "apiVersion": "crd.antrea.io/v1beta1",
        "kind": "Tier",
        "metadata": {"name": name},
        "spec": {"priority": priority},
    })
}

/// The webhook over the case's stores.
fn webhook(case: &Case) -> Webhook {
    let tiers = (1..=case.exist_tier_num).map(|i| ObservedTier {
        name: format!("tier-priority-{i}"),
        priority: i,
        description: String::new(),
        resource_version: "1".into(),
        last_writer: None,
    });
    let lister: Arc<dyn TierLister> = Arc::new(FixedLister::new(Snapshot::synced(1, tiers)));
    let acnps = PolicyCache::<ClusterNetworkPolicies>::from_policies(
        case.exist_acnp
            .map(|(name, tier)| PolicyRef::new(None, name, Some(tier))),
    );
    let annps = PolicyCache::<NetworkPolicies>::from_policies(
        case.exist_annp
            .map(|(ns, name, tier)| PolicyRef::new(Some(ns), name, Some(tier))),
    );
    let readiness = Readiness::new();
    readiness
        .register(TIER_CACHE_SYNCED, CacheSynced::new(lister.clone()))
        .register(ACNP_CACHE_SYNCED, from_fn(|| CheckState::Ok))
        .register(ANNP_CACHE_SYNCED, from_fn(|| CheckState::Ok));
    let policy = AdmissionPolicy::antrea(ANTREA_CONTROLLER).with_rules(ValidationRules {
        cluster_network_policy: case.cnp_feature_enabled,
        ..ValidationRules::default()
    });
    Webhook::new(lister, policy, &readiness)
        .policy_references(PolicyReferences::new(Arc::new(acnps), Arc::new(annps)))
}

/// The reason tierd's webhook gives for the case ("" when allowed).
fn actual_reason(case: &Case) -> String {
    let (operation, name) = match case.operation {
        Op::Create => ("CREATE", case.cur_tier.map(|t| t.0)),
        Op::Update => ("UPDATE", case.cur_tier.map(|t| t.0)),
        Op::Delete => ("DELETE", case.old_tier.map(|t| t.0)),
    };
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": case.name,
            "kind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "resource": {"group": "crd.antrea.io", "version": "v1beta1", "resource": "tiers"},
            "name": name.unwrap_or_default(),
            "operation": operation,
            "userInfo": {"username": case.user},
            "object": case.cur_tier.map(tier),
            "oldObject": case.old_tier.map(tier),
        }
    });
    let review = webhook(case)
        .review_json(body.to_string().as_bytes())
        .now_or_never()
        .expect("a webhook without claims answers at once")
        .unwrap_or_else(|e| panic!("{}: refused: {e}", case.name));
    let response = review.response.expect("a response");
    assert_eq!(response.uid, case.name);
    if response.allowed {
        String::new()
    } else {
        assert_eq!(
            response.result.code, 0,
            "{}: a rule denial carries no code",
            case.name
        );
        response.result.message
    }
}

fn check(cases: Vec<Case>) {
    for case in &cases {
        assert_eq!(actual_reason(case), case.expected_reason, "{}", case.name);
    }
}

#[test]
fn test_validate_tier() {
    check(vec![
        Case {
            name: "create-tier-pass",
            cur_tier: Some(("tier-priority-3", 3)),
            operation: Op::Create,
            user: "default",
            ..Case::default()
        },
        Case {
            name: "create-tier-failed-with-reserved-priority",
            cur_tier: Some(("tier-priority-251", 251)),
            operation: Op::Create,
            user: "default",
            expected_reason: "tier tier-priority-251 priority 251 is reserved".into(),
            ..Case::default()
        },
        Case {
            name: "over-max-tier",
            cur_tier: Some(("tier-priority", MAX_SUPPORTED_TIERS + 1)),
            exist_tier_num: MAX_SUPPORTED_TIERS,
            operation: Op::Create,
            expected_reason: format!("maximum number of Tiers supported: {MAX_SUPPORTED_TIERS}"),
            ..Case::default()
        },
        Case {
            name: "overlap-tier",
            cur_tier: Some(("tier-priority-1", 1)),
            exist_tier_num: 1,
            operation: Op::Create,
            expected_reason: "tier tier-priority-1 priority 1 overlaps with existing Tier".into(),
            ..Case::default()
        },
        Case {
            name: "update-tier-not-allowed",
            old_tier: Some(("tier-priority-3", 3)),
            cur_tier: Some(("tier-priority-3", 5)),
            operation: Op::Update,
            user: "default",
            expected_reason: "update to Tier priority is not allowed".into(),
            ..Case::default()
        },
        Case {
            name: "update-tier-allowed",
            old_tier: Some(("tier-priority-3", 3)),
            cur_tier: Some(("tier-priority-3", 5)),
            operation: Op::Update,
            user: ANTREA_CONTROLLER,
            ..Case::default()
        },
        Case {
            name: "delete-tier-pass",
            old_tier: Some(("tier-priority-3", 3)),
            operation: Op::Delete,
            user: "default",
            ..Case::default()
        },
        Case {
            name: "delete-reserved-tier",
            old_tier: Some(("baseline", 3)),
            operation: Op::Delete,
            user: "default",
            expected_reason: "cannot delete reserved tier baseline".into(),
            ..Case::default()
        },
        Case {
            name: "delete-annp-ref-tier",
            old_tier: Some(("tier-annp-ref", 0)),
            exist_annp: Some(("nsA", "npA", "tier-annp-ref")),
            operation: Op::Delete,
            expected_reason: "tier tier-annp-ref is referenced by 1 Antrea NetworkPolicies".into(),
            ..Case::default()
        },
        Case {
            name: "delete-acnp-ref-tier",
            old_tier: Some(("tier-acnp-ref", 0)),
            exist_acnp: Some(("npA", "tier-acnp-ref")),
            operation: Op::Delete,
            expected_reason: "tier tier-acnp-ref is referenced by 1 Antrea ClusterNetworkPolicies"
                .into(),
            ..Case::default()
        },
    ]);
}

#[test]
fn test_validate_tier_cnp_priority() {
    check(vec![
        Case {
            name: "create-tier-at-cnp-priority-blocked-when-cnp-enabled",
            cnp_feature_enabled: true,
            cur_tier: Some(("tier-priority-220", CNP_ADMIN_TIER_PRIORITY)),
            operation: Op::Create,
            user: "default",
            expected_reason: format!(
                "tier tier-priority-220 priority {CNP_ADMIN_TIER_PRIORITY} is reserved for \
                 upstream ClusterNetworkPolicy when the ClusterNetworkPolicy feature gate is \
                 enabled; choose a different priority"
            ),
            ..Case::default()
        },
        Case {
            name: "create-tier-at-cnp-priority-allowed-when-cnp-feature-disabled",
            cnp_feature_enabled: false,
            cur_tier: Some(("tier-priority-220", CNP_ADMIN_TIER_PRIORITY)),
            operation: Op::Create,
            user: "default",
            ..Case::default()
        },
    ]);
}
