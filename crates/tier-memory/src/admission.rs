//! Antrea's Tier validating webhook (`tiervalidator.antrea.io`) in front of the memory store;
//! the rules themselves are [`tier_core::admission`]'s.
//!
//! Only CREATE is checked: updates come from the controller's own service account, which may
//! change priorities, and other actors' writes bypass admission on purpose. The rules run in
//! Antrea's order: the number of distinct priorities, then reserved priorities, then overlap.
//!
//! ```
//! use std::collections::BTreeMap;
//! use tier_core::TierSpec;
//! use tier_memory::Admission;
//!
//! let err = Admission::antrea()
//!     .review_create(&BTreeMap::new(), &TierSpec::new("x", 254, ""))
//!     .unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     r#"admission webhook "tiervalidator.antrea.io" denied the request: tier x priority 254 is reserved"#
//! );
//! ```

use std::collections::{BTreeMap, BTreeSet};

use tier_core::admission::{AdmissionPolicy, Denial, Request, review};
use tier_core::{ObservedTier, TierSpec, ValidationRules};

use crate::error::ApiError;

/// Which view of the Tiers the webhook checks a create against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdmissionView {
    /// The store itself: overlap checks are exact (the default).
    #[default]
    Store,
    /// The cluster's default cache (Antrea's webhook reads its informer), so a lagging cache
    /// lets two creates at one priority both pass, as in the real server. An unsynced cache
    /// reads as empty.
    Cache,
}

/// The webhook's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Reserved priorities and the most distinct priorities allowed (Antrea's by default).
    pub rules: ValidationRules,
    /// What the webhook reads.
    pub view: AdmissionView,
}

impl Default for Admission {
    fn default() -> Self {
        Self::antrea()
    }
}

impl Admission {
    /// Antrea's webhook: reserved 251, 252, 254, 255; at most 20 distinct priorities; reads the
    /// store.
    pub fn antrea() -> Self {
        Self {
            rules: ValidationRules::default(),
            view: AdmissionView::Store,
        }
    }

    /// The same webhook reading `view`.
    pub fn reading(mut self, view: AdmissionView) -> Self {
        self.view = view;
        self
    }

    /// Reviews the creation of `tier` given the `existing` Tiers.
    ///
    /// # Errors
    ///
    /// [`ApiError::Denied`] with Antrea's message when a rule is broken.
    pub fn review_create(
        &self,
        existing: &BTreeMap<String, ObservedTier>,
        tier: &TierSpec,
    ) -> Result<(), ApiError> {
        let policy = AdmissionPolicy {
            rules: self.rules.clone(),
            protected_names: BTreeSet::new(),
            controller_user: String::new(),
            desired_priorities: BTreeMap::new(),
        };
        let request = Request::Create {
            name: &tier.name,
            priority: tier.priority,
        };
        let existing = existing.values().map(|t| (t.name.as_str(), t.priority));
        review(&policy, &request, existing).map_err(|Denial(message)| ApiError::Denied { message })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn existing(priorities: impl IntoIterator<Item = i64>) -> BTreeMap<String, ObservedTier> {
        priorities
            .into_iter()
            .map(|p| {
                let name = format!("t{p}");
                let tier = ObservedTier {
                    name: name.clone(),
                    priority: p,
                    description: String::new(),
                    resource_version: "1".into(),
                    last_writer: None,
                };
                (name, tier)
            })
            .collect()
    }

    fn denial(result: Result<(), ApiError>) -> String {
        match result {
            Err(ApiError::Denied { message }) => message,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn reserved_priorities_are_denied() {
        let admission = Admission::antrea();
        for p in [251, 252, 254, 255] {
            let msg = denial(admission.review_create(&existing([]), &TierSpec::new("x", p, "")));
            assert_eq!(msg, format!("tier x priority {p} is reserved"));
        }
        assert_eq!(
            admission.review_create(&existing([]), &TierSpec::new("baseline", 253, "")),
            Ok(())
        );
    }

    #[test]
    fn overlap_is_denied() {
        let msg = denial(
            Admission::antrea()
                .review_create(&existing([150]), &TierSpec::new("networkops", 150, "")),
        );
        assert_eq!(
            msg,
            "tier networkops priority 150 overlaps with existing Tier"
        );
    }

    #[test]
    fn twenty_distinct_priorities_is_the_limit() {
        let admission = Admission::antrea();
        let nineteen = existing(0..19);
        assert_eq!(
            admission.review_create(&nineteen, &TierSpec::new("x", 100, "")),
            Ok(())
        );
        // The limit is checked first, even before an overlap.
        let msg = denial(admission.review_create(&existing(0..20), &TierSpec::new("x", 5, "")));
        assert_eq!(msg, "maximum number of Tiers supported: 20");
    }

    #[test]
    fn reserved_is_checked_before_overlap() {
        let mut rules = ValidationRules::default();
        rules.reserved_priorities.insert(7);
        let admission = Admission {
            rules,
            view: AdmissionView::Store,
        };
        let msg = denial(admission.review_create(&existing([7]), &TierSpec::new("x", 7, "")));
        assert_eq!(msg, "tier x priority 7 is reserved");
    }
}
