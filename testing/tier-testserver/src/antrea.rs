//! Antrea's view of Tiers: the six system Tiers and the rules of Antrea's Tier validating
//! webhook (`tiervalidator.antrea.io`), shared by the built-in admission mode and
//! [`TestWebhook`](crate::TestWebhook).
//!
//! This is deliberately an **independent oracle**, not a call into `tier_core`: the test API
//! server stands for Antrea, so it must not share tierd's reading of Antrea's rules. Its facts
//! (system Tiers, reserved priorities, messages) are transcribed from Antrea's `validate.go`;
//! `tests/oracle.rs` is a property test that this module and `tier_core::admission` give the
//! same verdict and message on arbitrary requests.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::tier::{self, priority};
use crate::util::object_name;

/// Name of Antrea's Tier validating webhook.
pub const WEBHOOK_NAME: &str = "tiervalidator.antrea.io";
/// Most distinct priorities the webhook lets exist.
pub const MAX_TIERS: usize = 20;
/// Priorities no Tier may be created with.
pub const RESERVED_PRIORITIES: [i64; 4] = [251, 252, 254, 255];

/// One of Antrea's system Tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemTier {
    /// `metadata.name`.
    pub name: &'static str,
    /// `spec.priority`.
    pub priority: i64,
    /// `spec.description`.
    pub description: &'static str,
}

impl SystemTier {
    /// The Tier object a client would create for this system Tier.
    pub fn object(&self) -> Value {
        tier::tier(self.name, self.priority, Some(self.description))
    }
}

/// The six system Tiers, in the order Antrea creates them.
pub const SYSTEM_TIERS: [SystemTier; 6] = [
    SystemTier {
        name: "baseline",
        priority: 253,
        description: "[READ-ONLY]: System generated Baseline Tier",
    },
    SystemTier {
        name: "application",
        priority: 250,
        description: "[READ-ONLY]: System generated default Application Tier",
    },
    SystemTier {
        name: "platform",
        priority: 200,
        description: "[READ-ONLY]: System generated Platform Tier",
    },
    SystemTier {
        name: "networkops",
        priority: 150,
        description: "[READ-ONLY]: System generated NetworkOps Tier",
    },
    SystemTier {
        name: "securityops",
        priority: 100,
        description: "[READ-ONLY]: System generated SecurityOps Tier",
    },
    SystemTier {
        name: "emergency",
        priority: 50,
        description: "[READ-ONLY]: System generated Emergency Tier",
    },
];

/// The admission operation under review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A create.
    Create,
    /// An update (PUT or PATCH).
    Update,
    /// A delete.
    Delete,
}

impl Operation {
    /// The `AdmissionRequest.operation` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
        }
    }

    /// Parses an `AdmissionRequest.operation` string.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "CREATE" => Some(Self::Create),
            "UPDATE" => Some(Self::Update),
            "DELETE" => Some(Self::Delete),
            _ => None,
        }
    }
}

/// Antrea's `cnpAdminTierPriority`: reserved for new Tiers while the `ClusterNetworkPolicy`
/// feature gate is on.
pub const CNP_ADMIN_TIER_PRIORITY: i64 = 220;

/// One write under review, with what Antrea's webhook reads besides the Tier cache.
#[derive(Debug, Clone, Copy)]
pub struct Review<'a> {
    /// The operation.
    pub operation: Operation,
    /// The new Tier (create, update).
    pub object: Option<&'a Value>,
    /// The stored Tier (update, delete).
    pub old_object: Option<&'a Value>,
    /// The requesting user.
    pub username: &'a str,
    /// The user allowed to change priorities (Antrea's controller service account).
    pub controller_user: &'a str,
    /// Antrea's `ClusterNetworkPolicy` feature gate.
    pub cluster_network_policy: bool,
    /// How many [ClusterNetworkPolicies, NetworkPolicies] name the Tier in `spec.tier`.
    pub references: [usize; 2],
}

/// Applies the webhook's rules; `Err` carries the denial message (without the
/// `admission webhook ... denied the request: ` prefix that kube-apiserver adds).
///
/// `existing` is the webhook's view of all Tiers (its informer cache).
///
/// # An independent oracle, on purpose
///
/// tierd's own copy of these rules is `tier_core::admission`; this one is written separately,
/// on `serde_json::Value`s, from Antrea's `validate.go`, so that the test API server judges
/// tierd by Antrea's rules rather than by tierd's reading of them. `tests/oracle.rs` checks,
/// on arbitrary inputs, that the two agree word for word.
pub fn review(review: &Review<'_>, existing: &[Value]) -> Result<(), String> {
    match review.operation {
        Operation::Create => {
            let Some(obj) = review.object else {
                return Ok(());
            };
            let distinct: BTreeSet<i64> = existing.iter().filter_map(priority).collect();
            if distinct.len() >= MAX_TIERS {
                return Err(format!("maximum number of Tiers supported: {MAX_TIERS}"));
            }
            let name = object_name(obj).unwrap_or_default();
            let p = priority(obj).unwrap_or_default();
            if RESERVED_PRIORITIES.contains(&p) {
                return Err(format!("tier {name} priority {p} is reserved"));
            }
            if review.cluster_network_policy && p == CNP_ADMIN_TIER_PRIORITY {
                return Err(format!(
                    "tier {name} priority {p} is reserved for upstream ClusterNetworkPolicy when \
                     the ClusterNetworkPolicy feature gate is enabled; choose a different priority"
                ));
            }
            if distinct.contains(&p) {
                return Err(format!(
                    "tier {name} priority {p} overlaps with existing Tier"
                ));
            }
            Ok(())
        }
        Operation::Update => {
            if review.username == review.controller_user {
                return Ok(());
            }
            let new = review.object.and_then(priority);
            let old = review.old_object.and_then(priority);
            if new != old {
                return Err("update to Tier priority is not allowed".to_owned());
            }
            Ok(())
        }
        Operation::Delete => {
            let name = review.old_object.and_then(object_name).unwrap_or_default();
            if SYSTEM_TIERS.iter().any(|t| t.name == name) {
                return Err(format!("cannot delete reserved tier {name}"));
            }
            let [acnps, annps] = review.references;
            if acnps > 0 {
                return Err(format!(
                    "tier {name} is referenced by {acnps} Antrea ClusterNetworkPolicies"
                ));
            }
            if annps > 0 {
                return Err(format!(
                    "tier {name} is referenced by {annps} Antrea NetworkPolicies"
                ));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::tier;

    const CTRL: &str = "system:serviceaccount:kube-system:antrea-controller";

    fn system() -> Vec<Value> {
        SYSTEM_TIERS.iter().map(SystemTier::object).collect()
    }

    /// The old positional form, for the cases below.
    fn review(
        operation: Operation,
        object: Option<&Value>,
        old_object: Option<&Value>,
        username: &str,
        controller_user: &str,
        existing: &[Value],
    ) -> Result<(), String> {
        super::review(
            &Review {
                operation,
                object,
                old_object,
                username,
                controller_user,
                cluster_network_policy: false,
                references: [0, 0],
            },
            existing,
        )
    }

    #[test]
    fn delete_references_and_the_gate() {
        let old = tier("mine", 7, None);
        let delete = |references| {
            super::review(
                &Review {
                    operation: Operation::Delete,
                    object: None,
                    old_object: Some(&old),
                    username: "u",
                    controller_user: CTRL,
                    cluster_network_policy: false,
                    references,
                },
                &[],
            )
        };
        assert_eq!(
            delete([2, 1]),
            Err("tier mine is referenced by 2 Antrea ClusterNetworkPolicies".into())
        );
        assert_eq!(
            delete([0, 1]),
            Err("tier mine is referenced by 1 Antrea NetworkPolicies".into())
        );
        assert_eq!(delete([0, 0]), Ok(()));
        let at_220 = tier("mine", 220, None);
        let create = |gate| {
            super::review(
                &Review {
                    operation: Operation::Create,
                    object: Some(&at_220),
                    old_object: None,
                    username: "u",
                    controller_user: CTRL,
                    cluster_network_policy: gate,
                    references: [0, 0],
                },
                &[],
            )
        };
        assert!(create(true).unwrap_err().contains("reserved for upstream"));
        assert_eq!(create(false), Ok(()));
    }

    #[test]
    fn create_rules() {
        let existing = system();
        let create = |obj: Value| review(Operation::Create, Some(&obj), None, "u", CTRL, &existing);
        assert_eq!(create(tier("mine", 10, None)), Ok(()));
        assert_eq!(
            create(tier("baseline", 253, None)),
            Err("tier baseline priority 253 overlaps with existing Tier".into())
        );
        assert_eq!(
            create(tier("mine", 254, None)),
            Err("tier mine priority 254 is reserved".into())
        );
        let many: Vec<Value> = (0..20).map(|i| tier(&format!("t{i}"), i, None)).collect();
        assert_eq!(
            review(
                Operation::Create,
                Some(&tier("x", 100, None)),
                None,
                "u",
                CTRL,
                &many
            ),
            Err("maximum number of Tiers supported: 20".into())
        );
    }

    #[test]
    fn update_and_delete_rules() {
        let old = tier("baseline", 253, Some("a"));
        let moved = tier("baseline", 10, Some("a"));
        let described = tier("baseline", 253, Some("b"));
        assert_eq!(
            review(Operation::Update, Some(&moved), Some(&old), "u", CTRL, &[]),
            Err("update to Tier priority is not allowed".into())
        );
        assert_eq!(
            review(Operation::Update, Some(&moved), Some(&old), CTRL, CTRL, &[]),
            Ok(())
        );
        assert_eq!(
            review(
                Operation::Update,
                Some(&described),
                Some(&old),
                "u",
                CTRL,
                &[]
            ),
            Ok(())
        );
        assert_eq!(
            review(Operation::Delete, None, Some(&old), CTRL, CTRL, &[]),
            Err("cannot delete reserved tier baseline".into())
        );
        assert_eq!(
            review(
                Operation::Delete,
                None,
                Some(&tier("mine", 1, None)),
                "u",
                CTRL,
                &[]
            ),
            Ok(())
        );
    }
}
