//! Antrea as a [`Controller`]: its observed Tier, the comparison of priority and description,
//! and the prediction of its admission webhook. Its desired Tier and validation live in
//! `spec.rs` ([`TierSpec`], [`ValidationRules`]), its admission rules in [`admission`].

use crate::admission::{self, AdmissionPolicy, Request};
use crate::controller::{CachedTier, Controller, DesiredTier};
use crate::machine::Blocker;
use crate::observe::{Drift, FieldWriter, Snapshot};
use crate::spec::{TierSpec, ValidationRules, Violation};

/// Antrea's Tiers (`crd.antrea.io`): an integer priority 0..=255, unique, and a description.
/// The default controller of every generic type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Antrea;

/// One Antrea Tier as the cache holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObservedTier {
    /// Object name.
    pub name: String,
    /// Observed priority.
    pub priority: i64,
    /// Observed description; an absent description is observed as empty.
    pub description: String,
    /// The object's resourceVersion, an opaque token used as a write precondition.
    pub resource_version: String,
    /// Who last set the fields tierd manages (priority, description), where the object says
    /// (its `managedFields`); `None` when it does not, or the adapter does not read it. Named
    /// when tierd reports the Tier contested.
    pub last_writer: Option<FieldWriter>,
}

impl DesiredTier for TierSpec {
    type Controller = Antrea;

    fn name(&self) -> &str {
        &self.name
    }
}

impl CachedTier for ObservedTier {
    type Controller = Antrea;

    fn name(&self) -> &str {
        &self.name
    }

    fn resource_version(&self) -> &str {
        &self.resource_version
    }

    fn last_writer(&self) -> Option<&FieldWriter> {
        self.last_writer.as_ref()
    }
}

/// Whether `observed` carries exactly the priority and description of `desired` (an absent
/// description is observed as empty).
pub fn in_sync(desired: &TierSpec, observed: &ObservedTier) -> bool {
    Antrea::drift(desired, observed).is_empty()
}

/// Antrea's priority rule in words, with the fix, for a denial of `desired`'s correction
/// (`observed` as the cache shows it).
fn priority_rule(desired: &TierSpec, observed: Option<&ObservedTier>) -> String {
    let name = &desired.name;
    let want = desired.priority;
    let (from, keep) = match observed {
        Some(tier) if tier.priority != want => (
            format!(" from priority {} to {want}", tier.priority),
            format!("set priority {} for it", tier.priority),
        ),
        _ => (String::new(), "give it the priority it has".to_owned()),
    };
    format!(
        "Antrea lets only antrea-controller change a Tier's priority, so tierd cannot move Tier \
         {name}{from}: delete the Tier (`kubectl delete tier {name}`, once no policy uses it) \
         and tierd re-creates it at priority {want}, or {keep} in the Tiers file"
    )
}

/// What `policy` says about creating `spec` given `snapshot`: `None` if the create would pass,
/// else the Tiers whose removal would let it through and why, in words.
pub fn predict(policy: &AdmissionPolicy, spec: &TierSpec, snapshot: &Snapshot) -> Option<Blocker> {
    let tiers = snapshot.tiers.as_ref()?;
    let request = Request::Create {
        name: &spec.name,
        priority: spec.priority,
    };
    let others = || tiers.values().filter(|t| t.name != spec.name);
    let denial = admission::review(
        policy,
        &request,
        others().map(|t| (t.name.as_str(), t.priority)),
    )
    .err()?;
    let blockers: Vec<&ObservedTier> = others()
        .filter(|b| {
            let without = others()
                .filter(|t| t.name != b.name)
                .map(|t| (t.name.as_str(), t.priority));
            admission::review(policy, &request, without).is_ok()
        })
        .collect();
    // Only Tiers holding the very priority are to blame; when any of many would do (the
    // limit of distinct priorities), none is named (see `Blocker::tiers`).
    if !blockers.is_empty() && blockers.iter().all(|t| t.priority == spec.priority) {
        let names: Vec<String> = blockers.iter().map(|t| t.name.clone()).collect();
        let holder = if names.len() == 1 { "Tier" } else { "Tiers" };
        let reason = format!(
            "priority {} is held by {holder} {}",
            spec.priority,
            names.join(", ")
        );
        return Some(Blocker {
            tiers: names,
            reason,
        });
    }
    Some(Blocker {
        tiers: Vec::new(),
        reason: denial.to_string(),
    })
}

impl Controller for Antrea {
    type Spec = TierSpec;
    type Observed = ObservedTier;
    type Admission = AdmissionPolicy;
    type Rules = ValidationRules;

    const NAME: &'static str = "Antrea";

    fn drift(desired: &TierSpec, observed: &ObservedTier) -> Drift {
        Drift::of([
            ("priority", desired.priority != observed.priority),
            ("description", desired.description != observed.description),
        ])
    }

    /// Antrea's webhook lets only antrea-controller change a priority
    /// ([`admission::PRIORITY_UPDATE_DENIED`]): waiting does not help, deleting the Tier (or
    /// changing the desired priority) does.
    fn explain_denial(
        desired: &TierSpec,
        observed: Option<&ObservedTier>,
        message: &str,
    ) -> Option<String> {
        message
            .contains(admission::PRIORITY_UPDATE_DENIED)
            .then(|| priority_rule(desired, observed))
    }

    fn expected(desired: &TierSpec) -> ObservedTier {
        ObservedTier {
            name: desired.name.clone(),
            priority: desired.priority,
            description: desired.description.clone(),
            resource_version: String::new(),
            last_writer: None,
        }
    }

    fn validate(tiers: &[TierSpec], rules: &ValidationRules) -> Vec<Violation> {
        crate::spec::violations(tiers, rules)
    }

    fn predict(
        admission: &AdmissionPolicy,
        desired: &TierSpec,
        snapshot: &Snapshot,
    ) -> Option<Blocker> {
        predict(admission, desired, snapshot)
    }

    fn default_admission() -> Option<AdmissionPolicy> {
        Some(AdmissionPolicy::antrea(String::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(priority: i64, description: &str) -> ObservedTier {
        ObservedTier {
            name: "org-security".into(),
            priority,
            description: description.into(),
            resource_version: "1".into(),
            last_writer: None,
        }
    }

    #[test]
    fn drift_names_the_fields_that_differ() {
        let want = TierSpec::new("org-security", 90, "d");
        assert!(Antrea::drift(&want, &observed(90, "d")).is_empty());
        assert!(in_sync(&want, &observed(90, "d")));
        assert_eq!(
            Antrea::drift(&want, &observed(90, "x")).fields(),
            ["description"]
        );
        assert_eq!(
            Antrea::drift(&want, &observed(95, "d")).fields(),
            ["priority"]
        );
        assert_eq!(
            Antrea::drift(&want, &observed(95, "x")).fields(),
            ["priority", "description"]
        );
    }

    #[test]
    fn the_priority_rule_is_explained_with_the_fix() {
        let want = TierSpec::new("org-security", 90, "d");
        let message = "admission webhook \"tiervalidator.antrea.io\" denied the request: update \
                       to Tier priority is not allowed";
        let words = Antrea::explain_denial(&want, Some(&observed(95, "d")), message).unwrap();
        assert_eq!(
            words,
            "Antrea lets only antrea-controller change a Tier's priority, so tierd cannot move \
             Tier org-security from priority 95 to 90: delete the Tier (`kubectl delete tier \
             org-security`, once no policy uses it) and tierd re-creates it at priority 90, or \
             set priority 95 for it in the Tiers file"
        );
        assert_eq!(
            Antrea::explain_denial(
                &want,
                None,
                "tier x priority 90 overlaps with existing Tier"
            ),
            None
        );
    }
}
