//! Antrea's view of Tiers: the six system Tiers and the rules of Antrea's Tier validating
//! webhook (`tiervalidator.antrea.io`), shared by the built-in admission mode and
//! [`TestWebhook`](crate::TestWebhook).

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

/// Applies the webhook's rules; `Err` carries the denial message (without the
/// `admission webhook ... denied the request: ` prefix that kube-apiserver adds).
///
/// `existing` is the webhook's view of all Tiers (its informer cache). `object` is the new
/// Tier (create, update), `old_object` the stored one (update, delete). Priority updates are
/// allowed only for `controller_user`.
pub fn review(
    operation: Operation,
    object: Option<&Value>,
    old_object: Option<&Value>,
    username: &str,
    controller_user: &str,
    existing: &[Value],
) -> Result<(), String> {
    match operation {
        Operation::Create => {
            let Some(obj) = object else {
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
            if distinct.contains(&p) {
                return Err(format!(
                    "tier {name} priority {p} overlaps with existing Tier"
                ));
            }
            Ok(())
        }
        Operation::Update => {
            if username == controller_user {
                return Ok(());
            }
            let new = object.and_then(priority);
            let old = old_object.and_then(priority);
            if new != old {
                return Err("update to Tier priority is not allowed".to_owned());
            }
            Ok(())
        }
        Operation::Delete => {
            let name = old_object.and_then(object_name).unwrap_or_default();
            if SYSTEM_TIERS.iter().any(|t| t.name == name) {
                return Err(format!("cannot delete reserved tier {name}"));
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
