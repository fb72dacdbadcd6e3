//! Calico as a [`Controller`]: its Tier (`spec.order`, a nullable float, and
//! `spec.defaultAction`), its three built-in Tiers, the validation of a desired set and the
//! rules its API applies to Tier writes.
//!
//! Facts from Calico's `v3` API (`api/pkg/apis/projectcalico/v3/tier.go`): lower orders are
//! evaluated first, an absent order means "last", equal orders are allowed (no overlap rule);
//! the CRD's validation rules pin the order and default action of the built-in names on every
//! write, and a ValidatingAdmissionPolicy (`protect-builtin-tiers.projectcalico.org`) refuses
//! to delete them. Orders are compared exactly (`==` on `Option<f64>`): tierd writes the value
//! it was given, and reads back the same float.
//!
//! ```
//! use tier_core::calico::{Calico, DefaultAction, TierSpec, Rules};
//! use tier_core::DesiredSet;
//!
//! let set = DesiredSet::<Calico>::calico();
//! assert_eq!(set.len(), 3);
//! let err = DesiredSet::<Calico>::new(
//!     vec![TierSpec::new("default", Some(5.0), DefaultAction::Deny)],
//!     &Rules::default(),
//! )
//! .unwrap_err();
//! assert_eq!(
//!     err.violations()[0].to_string(),
//!     "tiers[0] (default): spec.order: Invalid value: 5: must be 1000000 for this built-in Tier"
//! );
//! ```

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::admission::Denial;
use crate::controller::{CachedTier, Controller, DesiredTier};
use crate::machine::Blocker;
use crate::observe::{Drift, FieldWriter, Snapshot};
use crate::spec::{Checker, DesiredSet, Rule, Violation, check_dns1123_label};

/// Calico's Tiers (`projectcalico.org/v3`, kind `Tier`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Calico;

/// The built-in Tier evaluated first, for upstream `ClusterNetworkPolicy` of tier `Admin`.
pub const KUBE_ADMIN: &str = "kube-admin";
/// The order of [`KUBE_ADMIN`] (Calico's `KubeAdminTierOrder`).
pub const KUBE_ADMIN_ORDER: f64 = 1_000.0;
/// The built-in Tier of policies that name none.
pub const DEFAULT: &str = "default";
/// The order of [`DEFAULT`] (Calico's `DefaultTierOrder`).
pub const DEFAULT_ORDER: f64 = 1_000_000.0;
/// The built-in Tier evaluated last, for upstream `ClusterNetworkPolicy` of tier `Baseline`.
pub const KUBE_BASELINE: &str = "kube-baseline";
/// The order of [`KUBE_BASELINE`] (Calico's `KubeBaselineTierOrder`).
pub const KUBE_BASELINE_ORDER: f64 = 10_000_000.0;

/// What happens at the end of a Tier when no policy in it matched (`spec.defaultAction`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DefaultAction {
    /// Drop the traffic (Calico's default).
    #[default]
    Deny,
    /// Hand the traffic to the next Tier.
    Pass,
}

impl DefaultAction {
    /// `Deny` or `Pass`, as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            DefaultAction::Deny => "Deny",
            DefaultAction::Pass => "Pass",
        }
    }
}

impl fmt::Display for DefaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One Calico Tier as it should exist, in Calico's field names (`name`, `order`,
/// `defaultAction`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TierSpec {
    /// The Tier's object name (a DNS-1123 label: Calico's names of policies embed it).
    pub name: String,
    /// Evaluation order, lower first; `None` means last. Must be finite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<f64>,
    /// What happens when no policy of the Tier matched (default `Deny`, as Calico's).
    #[serde(default)]
    pub default_action: DefaultAction,
}

impl TierSpec {
    /// A Tier with the given name, order and default action.
    pub fn new(name: impl Into<String>, order: Option<f64>, default_action: DefaultAction) -> Self {
        Self {
            name: name.into(),
            order,
            default_action,
        }
    }
}

impl DesiredTier for TierSpec {
    type Controller = Calico;

    fn name(&self) -> &str {
        &self.name
    }
}

/// One Calico Tier as the cache holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedTier {
    /// Object name.
    pub name: String,
    /// Observed order; `None` when absent ("last").
    pub order: Option<f64>,
    /// Observed default action (absent is observed as `Deny`, the API's default).
    pub default_action: DefaultAction,
    /// The object's resourceVersion, an opaque token used as a write precondition.
    pub resource_version: String,
    /// Who last set the order or default action, where `managedFields` says.
    pub last_writer: Option<FieldWriter>,
}

impl CachedTier for ObservedTier {
    type Controller = Calico;

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

/// Calico's three built-in Tiers, in the order Calico's `EnsureInitialized` creates them.
pub fn built_ins() -> [TierSpec; 3] {
    [
        TierSpec::new(DEFAULT, Some(DEFAULT_ORDER), DefaultAction::Deny),
        TierSpec::new(KUBE_ADMIN, Some(KUBE_ADMIN_ORDER), DefaultAction::Pass),
        TierSpec::new(
            KUBE_BASELINE,
            Some(KUBE_BASELINE_ORDER),
            DefaultAction::Pass,
        ),
    ]
}

impl DesiredSet<Calico> {
    /// Calico's three built-in Tiers: `default` (1000000, Deny), `kube-admin` (1000, Pass),
    /// `kube-baseline` (10000000, Pass).
    pub fn calico() -> Self {
        Self::trusted(built_ins().to_vec())
    }
}

/// Whether `observed` carries exactly the order and default action of `desired`. Orders compare
/// exactly; an absent order equals only an absent one.
pub fn in_sync(desired: &TierSpec, observed: &ObservedTier) -> bool {
    Calico::drift(desired, observed).is_empty()
}

/// An order as Kubernetes prints a number (`1000`, `0.5`), or `null` when absent.
fn order_words(order: Option<f64>) -> String {
    order.map_or_else(|| "null".to_owned(), |o| o.to_string())
}

/// The rules of a desired set of Calico Tiers.
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    /// Tiers whose order and default action Calico's API pins (default: [`built_ins`]).
    pub pinned: Vec<TierSpec>,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            pinned: built_ins().to_vec(),
        }
    }
}

impl Rules {
    /// The pinned values of the Tier called `name`, if it is a built-in.
    pub fn pinned(&self, name: &str) -> Option<&TierSpec> {
        self.pinned.iter().find(|p| p.name == name)
    }
}

/// What Calico's API server allows in Tier writes: the built-in names pinned to their order and
/// default action on create and update (the CRD's validation rules), and never deleted (the
/// `protect-builtin-tiers` admission policy). Messages are Calico's.
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    /// The pinned Tiers.
    pub rules: Rules,
    /// Names that can never be deleted.
    pub protected_names: BTreeSet<String>,
}

impl Admission {
    /// Calico's admission: the three built-ins pinned and protected.
    pub fn calico() -> Self {
        let rules = Rules::default();
        let protected_names = rules.pinned.iter().map(|t| t.name.clone()).collect();
        Self {
            rules,
            protected_names,
        }
    }

    /// Reviews a create or an update writing `tier`.
    ///
    /// # Errors
    ///
    /// A [`Denial`] with Calico's message when `tier` is a built-in with other values, or its
    /// order is not finite.
    pub fn review_write(&self, tier: &TierSpec) -> Result<(), Denial> {
        if tier.order.is_some_and(|o| !o.is_finite()) {
            return Err(Denial(format!(
                "spec.order of tier {} must be a finite number",
                tier.name
            )));
        }
        let Some(pinned) = self.rules.pinned(&tier.name) else {
            return Ok(());
        };
        if tier.default_action != pinned.default_action {
            return Err(Denial(format!(
                "The '{}' tier must have default action '{}'",
                tier.name, pinned.default_action
            )));
        }
        if tier.order != pinned.order {
            return Err(Denial(format!(
                "{} tier order must be {}",
                tier.name,
                order_words(pinned.order)
            )));
        }
        Ok(())
    }

    /// Reviews the deletion of the Tier called `name`.
    ///
    /// # Errors
    ///
    /// A [`Denial`] with Calico's message when `name` is protected.
    pub fn review_delete(&self, name: &str) -> Result<(), Denial> {
        if self.protected_names.contains(name) {
            return Err(Denial(format!(
                "The built-in tier {name} cannot be deleted"
            )));
        }
        Ok(())
    }
}

fn check_label_rule(name: &str) -> Result<(), Rule> {
    check_dns1123_label(name).map_err(Rule::InvalidLabel)
}

fn violations(tiers: &[TierSpec], rules: &Rules) -> Vec<Violation> {
    let mut check = Checker::default();
    for (index, tier) in tiers.iter().enumerate() {
        check.name(index, &tier.name, check_label_rule);
        let order = Some(order_words(tier.order));
        if tier.order.is_some_and(|o| !o.is_finite()) {
            check.push(index, &tier.name, "spec.order", order, Rule::NotFinite);
        } else if let Some(pinned) = rules.pinned(&tier.name)
            && pinned.order != tier.order
        {
            let expected = order_words(pinned.order);
            let rule = Rule::Pinned { expected };
            check.push(index, &tier.name, "spec.order", order, rule);
        }
        if let Some(pinned) = rules.pinned(&tier.name)
            && pinned.default_action != tier.default_action
        {
            let value = Some(format!("{:?}", tier.default_action.as_str()));
            let expected = format!("{:?}", pinned.default_action.as_str());
            let rule = Rule::Pinned { expected };
            check.push(index, &tier.name, "spec.defaultAction", value, rule);
        }
    }
    check.finish()
}

impl Controller for Calico {
    type Spec = TierSpec;
    type Observed = ObservedTier;
    type Admission = Admission;
    type Rules = Rules;

    const NAME: &'static str = "Calico";

    /// `order` (compared exactly; an absent order equals only an absent one) and
    /// `defaultAction`, as the API names them.
    fn drift(desired: &TierSpec, observed: &ObservedTier) -> Drift {
        Drift::of([
            ("order", desired.order != observed.order),
            (
                "defaultAction",
                desired.default_action != observed.default_action,
            ),
        ])
    }

    fn expected(desired: &TierSpec) -> ObservedTier {
        ObservedTier {
            name: desired.name.clone(),
            order: desired.order,
            default_action: desired.default_action,
            resource_version: String::new(),
            last_writer: None,
        }
    }

    fn validate(tiers: &[TierSpec], rules: &Rules) -> Vec<Violation> {
        violations(tiers, rules)
    }

    /// Calico has no overlap rule: a create is denied only for values its API refuses (which
    /// a validated set never holds), and no other Tier is ever in the way.
    fn predict(
        admission: &Admission,
        desired: &TierSpec,
        snapshot: &Snapshot<Calico>,
    ) -> Option<Blocker> {
        snapshot.tiers.as_ref()?;
        let denial = admission.review_write(desired).err()?;
        Some(Blocker {
            tiers: Vec::new(),
            reason: denial.to_string(),
        })
    }

    fn default_admission() -> Option<Admission> {
        Some(Admission::calico())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Decision, ErrorType, Observed, decide};

    fn lines(tiers: Vec<TierSpec>) -> Vec<String> {
        DesiredSet::<Calico>::new(tiers, &Rules::default())
            .unwrap_err()
            .violations()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn observed(order: Option<f64>, default_action: DefaultAction) -> Observed<Calico> {
        Observed::Present(ObservedTier {
            name: "t".into(),
            order,
            default_action,
            resource_version: "7".into(),
            last_writer: None,
        })
    }

    #[test]
    fn the_built_ins_are_calicos() {
        let set = DesiredSet::<Calico>::calico();
        let got: Vec<(&str, Option<f64>, DefaultAction)> = set
            .tiers()
            .iter()
            .map(|t| (t.name.as_str(), t.order, t.default_action))
            .collect();
        assert_eq!(
            got,
            [
                ("default", Some(1_000_000.0), DefaultAction::Deny),
                ("kube-admin", Some(1_000.0), DefaultAction::Pass),
                ("kube-baseline", Some(10_000_000.0), DefaultAction::Pass),
            ]
        );
        // The set passes its own validation.
        assert!(DesiredSet::<Calico>::new(set.tiers().to_vec(), &Rules::default()).is_ok());
    }

    #[test]
    fn built_ins_are_pinned_with_field_errors() {
        assert_eq!(
            lines(vec![
                TierSpec::new(KUBE_ADMIN, Some(999.0), DefaultAction::Deny),
                TierSpec::new(KUBE_BASELINE, None, DefaultAction::Pass),
            ]),
            [
                "tiers[0] (kube-admin): spec.order: Invalid value: 999: must be 1000 for this \
                 built-in Tier",
                "tiers[0] (kube-admin): spec.defaultAction: Invalid value: \"Deny\": must be \
                 \"Pass\" for this built-in Tier",
                "tiers[1] (kube-baseline): spec.order: Invalid value: null: must be 10000000 for \
                 this built-in Tier",
            ]
        );
    }

    #[test]
    fn orders_must_be_finite_names_labels_and_unique() {
        let err = DesiredSet::<Calico>::new(
            vec![
                TierSpec::new("a", Some(f64::NAN), DefaultAction::Deny),
                TierSpec::new("b", Some(f64::INFINITY), DefaultAction::Pass),
                TierSpec::new("a", Some(1.0), DefaultAction::Deny),
                TierSpec::new("has.dot", None, DefaultAction::Deny),
                TierSpec::new("", None, DefaultAction::Deny),
            ],
            &Rules::default(),
        )
        .unwrap_err();
        let got: Vec<(Option<usize>, &str, ErrorType, Option<&str>)> = err
            .violations()
            .iter()
            .map(|v| (v.index, v.field, v.error_type(), v.value.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (Some(0), "spec.order", ErrorType::Invalid, Some("NaN")),
                (Some(1), "spec.order", ErrorType::Invalid, Some("inf")),
                (
                    Some(2),
                    "metadata.name",
                    ErrorType::Duplicate,
                    Some("\"a\"")
                ),
                (
                    Some(3),
                    "metadata.name",
                    ErrorType::Invalid,
                    Some("\"has.dot\"")
                ),
                (Some(4), "metadata.name", ErrorType::Required, None),
            ]
        );
        assert_eq!(err.violations()[0].rule, Rule::NotFinite);
        assert!(DesiredSet::<Calico>::new(vec![], &Rules::default()).is_err());
        let long = "a".repeat(64);
        assert_eq!(
            lines(vec![TierSpec::new(long, None, DefaultAction::Deny)]).len(),
            1
        );
    }

    #[test]
    fn equal_orders_and_absent_orders_are_allowed() {
        let set = DesiredSet::<Calico>::new(
            vec![
                TierSpec::new("a", Some(10.0), DefaultAction::Deny),
                TierSpec::new("b", Some(10.0), DefaultAction::Pass),
                TierSpec::new("c", None, DefaultAction::Deny),
            ],
            &Rules::default(),
        );
        assert!(set.is_ok(), "{set:?}");
    }

    #[test]
    fn orders_compare_exactly_and_none_only_equals_none() {
        let at = |order| TierSpec::new("t", order, DefaultAction::Deny);
        let deny = DefaultAction::Deny;
        assert_eq!(decide(&at(None), &observed(None, deny)), Decision::InSync);
        let update = |field: &'static str| Decision::Update {
            resource_version: "7".into(),
            drift: Drift::of([(field, true)]),
        };
        let order = update("order");
        assert_eq!(decide(&at(None), &observed(Some(0.0), deny)), order);
        assert_eq!(decide(&at(Some(0.0)), &observed(None, deny)), order);
        assert_eq!(
            decide(&at(Some(1.5)), &observed(Some(1.5), deny)),
            Decision::InSync
        );
        let next = f64::from_bits(1.5f64.to_bits() + 1);
        assert_eq!(decide(&at(Some(1.5)), &observed(Some(next), deny)), order);
        assert_eq!(
            decide(&at(Some(1.5)), &observed(Some(1.5), DefaultAction::Pass)),
            update("defaultAction")
        );
    }

    #[test]
    fn admission_pins_built_ins_and_protects_them() {
        let admission = Admission::calico();
        let wrong = TierSpec::new(DEFAULT, Some(5.0), DefaultAction::Deny);
        assert_eq!(
            admission.review_write(&wrong).unwrap_err().to_string(),
            "default tier order must be 1000000"
        );
        let wrong = TierSpec::new(KUBE_ADMIN, Some(KUBE_ADMIN_ORDER), DefaultAction::Deny);
        assert_eq!(
            admission.review_write(&wrong).unwrap_err().to_string(),
            "The 'kube-admin' tier must have default action 'Pass'"
        );
        for tier in built_ins() {
            assert_eq!(admission.review_write(&tier), Ok(()));
            assert_eq!(
                admission.review_delete(&tier.name).unwrap_err().to_string(),
                format!("The built-in tier {} cannot be deleted", tier.name)
            );
        }
        assert_eq!(
            admission.review_write(&TierSpec::new("mine", None, DefaultAction::Pass)),
            Ok(())
        );
        assert_eq!(admission.review_delete("mine"), Ok(()));
    }

    #[test]
    fn nothing_is_in_the_way_of_a_create() {
        let taken = ObservedTier {
            name: "squatter".into(),
            order: Some(DEFAULT_ORDER),
            default_action: DefaultAction::Pass,
            resource_version: "1".into(),
            last_writer: None,
        };
        let snapshot = Snapshot::<Calico>::synced(1, [taken]);
        let admission = Admission::calico();
        for tier in built_ins() {
            assert_eq!(Calico::predict(&admission, &tier, &snapshot), None);
        }
        assert_eq!(
            Calico::predict(&admission, &built_ins()[0], &Snapshot::default()),
            None
        );
    }

    #[test]
    fn yaml_in_calicos_fields() {
        let parsed: Vec<TierSpec> =
            serde_yaml::from_str("- name: a\n  order: 10.5\n  defaultAction: Pass\n- name: b\n")
                .unwrap();
        assert_eq!(
            parsed[0],
            TierSpec::new("a", Some(10.5), DefaultAction::Pass)
        );
        assert_eq!(parsed[1], TierSpec::new("b", None, DefaultAction::Deny));
        assert!(serde_yaml::from_str::<Vec<TierSpec>>("- name: a\n  priority: 3\n").is_err());
        assert!(
            serde_yaml::from_str::<Vec<TierSpec>>("- name: a\n  defaultAction: Allow\n").is_err()
        );
    }
}
