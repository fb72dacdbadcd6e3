//! Antrea's Tier admission rules, as a pure function: what the `tiervalidator.antrea.io` webhook
//! allows. Backends that emulate the API server and tierd's own webhook share this one copy.
//!
//! ```
//! use tier_core::admission::{AdmissionPolicy, Request, review};
//!
//! let policy = AdmissionPolicy::antrea("system:serviceaccount:kube-system:antrea-controller");
//! let existing = [("baseline", 253)];
//! let denied = review(&policy, &Request::Create { name: "mine", priority: 253 }, existing);
//! assert_eq!(
//!     denied.unwrap_err().to_string(),
//!     "tier mine priority 253 overlaps with existing Tier"
//! );
//! ```

use std::collections::BTreeSet;

use crate::spec::{DesiredSet, ValidationRules};

/// Who may do what to Tiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionPolicy {
    /// Reserved priorities and the limit of distinct priorities.
    pub rules: ValidationRules,
    /// Names that can never be deleted (the system Tiers).
    pub protected_names: BTreeSet<String>,
    /// The user allowed to change a Tier's priority (the controller's service account).
    pub controller_user: String,
}

impl AdmissionPolicy {
    /// Antrea's policy: default rules, the six system Tiers protected, `controller_user` exempt
    /// from the priority-update rule.
    pub fn antrea(controller_user: impl Into<String>) -> Self {
        Self {
            rules: ValidationRules::default(),
            protected_names: DesiredSet::antrea()
                .tiers()
                .iter()
                .map(|t| t.name.clone())
                .collect(),
            controller_user: controller_user.into(),
        }
    }
}

/// A Tier write to review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// Create a Tier.
    Create {
        /// Its name.
        name: &'a str,
        /// Its priority.
        priority: i64,
    },
    /// Update a Tier.
    Update {
        /// Its name.
        name: &'a str,
        /// The stored priority.
        old_priority: i64,
        /// The requested priority.
        new_priority: i64,
        /// The requesting user.
        user: &'a str,
    },
    /// Delete a Tier.
    Delete {
        /// Its name.
        name: &'a str,
    },
}

/// A denied request; the message is Antrea's, word for word.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denial(pub String);

/// Reviews `request` against `existing` Tiers (name, priority), as Antrea's webhook does.
///
/// # Errors
///
/// A [`Denial`] carrying the message the webhook would return.
pub fn review<'a>(
    policy: &AdmissionPolicy,
    request: &Request<'_>,
    existing: impl IntoIterator<Item = (&'a str, i64)>,
) -> Result<(), Denial> {
    match *request {
        Request::Create { name, priority } => {
            let mut priorities = BTreeSet::new();
            let mut overlaps = false;
            for (_, p) in existing {
                priorities.insert(p);
                overlaps |= p == priority;
            }
            let max = policy.rules.max_distinct_priorities;
            if priorities.len() >= max {
                return Err(Denial(format!("maximum number of Tiers supported: {max}")));
            }
            if policy.rules.reserved_priorities.contains(&priority) {
                return Err(Denial(format!(
                    "tier {name} priority {priority} is reserved"
                )));
            }
            if overlaps {
                return Err(Denial(format!(
                    "tier {name} priority {priority} overlaps with existing Tier"
                )));
            }
            Ok(())
        }
        Request::Update {
            old_priority,
            new_priority,
            user,
            ..
        } => {
            if old_priority != new_priority && user != policy.controller_user {
                return Err(Denial("update to Tier priority is not allowed".to_owned()));
            }
            Ok(())
        }
        Request::Delete { name } => {
            if policy.protected_names.contains(name) {
                return Err(Denial(format!("cannot delete reserved tier {name}")));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROLLER: &str = "system:serviceaccount:kube-system:tierd";

    fn policy() -> AdmissionPolicy {
        AdmissionPolicy::antrea(CONTROLLER)
    }

    fn create(name: &str, priority: i64) -> Request<'_> {
        Request::Create { name, priority }
    }

    #[test]
    fn create_rules_in_order() {
        let p = policy();
        assert_eq!(review(&p, &create("a", 10), []), Ok(()));
        assert_eq!(
            review(&p, &create("a", 254), []).unwrap_err().0,
            "tier a priority 254 is reserved"
        );
        assert_eq!(
            review(&p, &create("a", 10), [("b", 10)]).unwrap_err().0,
            "tier a priority 10 overlaps with existing Tier"
        );
        // Re-creating an existing Tier is an overlap, as in the real webhook.
        assert_eq!(
            review(&p, &create("a", 10), [("a", 10)]).unwrap_err().0,
            "tier a priority 10 overlaps with existing Tier"
        );
        let twenty: Vec<(String, i64)> = (0..20).map(|i| (format!("t{i}"), i)).collect();
        let existing = twenty.iter().map(|(n, p)| (n.as_str(), *p));
        assert_eq!(
            review(&p, &create("a", 100), existing).unwrap_err().0,
            "maximum number of Tiers supported: 20"
        );
    }

    #[test]
    fn only_the_controller_changes_priorities() {
        let p = policy();
        let update = |user| Request::Update {
            name: "baseline",
            old_priority: 1,
            new_priority: 253,
            user,
        };
        assert_eq!(review(&p, &update(CONTROLLER), []), Ok(()));
        assert_eq!(
            review(&p, &update("alice"), []).unwrap_err().0,
            "update to Tier priority is not allowed"
        );
        let description_only = Request::Update {
            name: "baseline",
            old_priority: 1,
            new_priority: 1,
            user: "alice",
        };
        assert_eq!(review(&p, &description_only, []), Ok(()));
    }

    #[test]
    fn system_tiers_cannot_be_deleted() {
        let p = policy();
        assert_eq!(
            review(&p, &Request::Delete { name: "emergency" }, [])
                .unwrap_err()
                .0,
            "cannot delete reserved tier emergency"
        );
        assert_eq!(review(&p, &Request::Delete { name: "mine" }, []), Ok(()));
    }
}
