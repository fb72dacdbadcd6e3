//! The desired set of Tiers, its field errors, and Antrea's desired Tier and rules.
//!
//! A [`DesiredSet`] can only be built through [`DesiredSet::new`], which checks every rule of
//! the controller's (for Antrea, [`ValidationRules`]) and reports every violation at once.
//! [`DesiredSet::antrea`] is Antrea's six system Tiers.
//!
//! Violations speak Kubernetes' field-error language (`k8s.io/apimachinery`'s `field.Error`):
//! the Tier's position and name, the field path, the kind of error, the offending value and the
//! rule, one line each:
//!
//! ```
//! use tier_core::{DesiredSet, TierSpec, ValidationRules};
//!
//! let err = DesiredSet::new(
//!     vec![TierSpec::new("Bad_Name", 300, ""), TierSpec::new("dup", 251, "")],
//!     &ValidationRules::default(),
//! )
//! .unwrap_err();
//! let lines: Vec<String> = err.violations().iter().map(ToString::to_string).collect();
//! assert_eq!(
//!     lines,
//!     [
//!         "tiers[0] (Bad_Name): metadata.name: Invalid value: \"Bad_Name\": must be a lowercase \
//!          RFC 1123 subdomain: each label must start and end with a lowercase letter or a digit",
//!         "tiers[0] (Bad_Name): spec.priority: Invalid value: 300: must be less than or equal to 255",
//!         "tiers[1] (dup): spec.priority: Invalid value: 251: is reserved; choose another priority",
//!     ]
//! );
//! assert!(<DesiredSet>::new(vec![], &ValidationRules::default()).is_err());
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::antrea::Antrea;
use crate::controller::{Controller, DesiredTier};

/// The highest priority a Tier may have (the CRD's schema maximum).
pub const MAX_PRIORITY: i64 = 255;

/// Antrea's `cnpAdminTierPriority`: the priority reserved for new Tiers while Antrea's
/// `ClusterNetworkPolicy` feature gate is on (see [`ValidationRules::cluster_network_policy`]).
pub const CNP_ADMIN_TIER_PRIORITY: i64 = 220;

/// The longest name a DNS-1123 subdomain may have.
const MAX_NAME_LEN: usize = 253;

/// The longest name a DNS-1123 label may have.
const MAX_LABEL_LEN: usize = 63;

/// One Tier as it should exist in the cluster.
///
/// An empty description means "no description": the API treats an absent description and an
/// empty one alike, and so does every comparison in this crate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSpec {
    /// The Tier's object name (a DNS-1123 subdomain).
    pub name: String,
    /// Evaluation order: lower is evaluated first. Valid values are 0..=255.
    pub priority: i64,
    /// Human-readable description; empty means none.
    #[serde(default)]
    pub description: String,
}

impl TierSpec {
    /// A Tier with the given name, priority and description.
    pub fn new(name: impl Into<String>, priority: i64, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            priority,
            description: description.into(),
        }
    }
}

/// The rules a desired set must satisfy, with Antrea's values as the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationRules {
    /// Priorities no Tier may use (Antrea reserves 251, 252, 254 and 255).
    pub reserved_priorities: BTreeSet<i64>,
    /// The most distinct priorities a cluster supports (Antrea: 20).
    pub max_distinct_priorities: usize,
    /// Antrea's `ClusterNetworkPolicy` feature gate (off by default, as in Antrea): when on, no
    /// new Tier may take [`CNP_ADMIN_TIER_PRIORITY`]. A Tier already there may stay.
    pub cluster_network_policy: bool,
}

impl ValidationRules {
    /// Whether a new Tier at `priority` is refused because the `ClusterNetworkPolicy` gate
    /// reserves it.
    pub fn reserved_for_cluster_network_policy(&self, priority: i64) -> bool {
        self.cluster_network_policy && priority == CNP_ADMIN_TIER_PRIORITY
    }
}

impl Default for ValidationRules {
    fn default() -> Self {
        Self {
            reserved_priorities: [251, 252, 254, 255].into_iter().collect(),
            max_distinct_priorities: 20,
            cluster_network_policy: false,
        }
    }
}

/// The kind of a field error, as Kubernetes' `field.ErrorType` names it
/// (`k8s.io/apimachinery/pkg/util/validation/field`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorType {
    /// `Invalid value`: the value is malformed or out of range.
    Invalid,
    /// `Duplicate value`: the value must be unique and is not.
    Duplicate,
    /// `Required value`: the field is missing or empty.
    Required,
    /// `Unsupported value`: the value is not one of the supported ones.
    Unsupported,
    /// `Too many`: a list holds more than it may.
    TooMany,
    /// `Forbidden`: the field may not be set (for example an unknown field).
    Forbidden,
}

impl ErrorType {
    /// The words Kubernetes prints for this kind, e.g. `Invalid value`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Invalid => "Invalid value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Required => "Required value",
            ErrorType::Unsupported => "Unsupported value",
            ErrorType::TooMany => "Too many",
            ErrorType::Forbidden => "Forbidden",
        }
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which rule a desired Tier (or the set) breaks. Its `Display` is the rule's detail, the text
/// after the offending value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The set holds no Tier.
    Empty,
    /// The name is empty.
    NameRequired,
    /// The name is not a DNS-1123 subdomain; says why.
    InvalidName(String),
    /// The name is not a DNS-1123 label (Calico's Tier names); says why.
    InvalidLabel(String),
    /// A number that must be finite is not (NaN or infinite).
    NotFinite,
    /// The field of a built-in Tier must have the controller's value.
    Pinned {
        /// The value the controller pins, as Kubernetes prints it.
        expected: String,
    },
    /// The priority is above [`MAX_PRIORITY`].
    PriorityTooHigh,
    /// The priority is below 0.
    PriorityNegative,
    /// The priority is in the reserved set.
    ReservedPriority,
    /// The priority is [`CNP_ADMIN_TIER_PRIORITY`] and the `ClusterNetworkPolicy` gate is on.
    ReservedForClusterNetworkPolicy,
    /// An earlier desired Tier has the same name.
    DuplicateName {
        /// The position of the earlier Tier.
        first: usize,
    },
    /// An earlier desired Tier has the same priority.
    DuplicatePriority {
        /// The name of the Tier that already holds the priority.
        holder: String,
        /// Its position.
        first: usize,
    },
    /// The set uses more distinct priorities than the cluster supports.
    TooManyPriorities {
        /// How many distinct priorities the set uses.
        count: usize,
        /// The limit.
        max: usize,
    },
}

impl Rule {
    /// The Kubernetes kind of error this rule reports.
    pub fn error_type(&self) -> ErrorType {
        match self {
            Rule::Empty | Rule::NameRequired => ErrorType::Required,
            Rule::InvalidName(_)
            | Rule::InvalidLabel(_)
            | Rule::NotFinite
            | Rule::Pinned { .. }
            | Rule::PriorityTooHigh
            | Rule::PriorityNegative
            | Rule::ReservedPriority
            | Rule::ReservedForClusterNetworkPolicy => ErrorType::Invalid,
            Rule::DuplicateName { .. } | Rule::DuplicatePriority { .. } => ErrorType::Duplicate,
            Rule::TooManyPriorities { .. } => ErrorType::TooMany,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Empty => write!(f, "at least one Tier is required"),
            Rule::NameRequired => write!(f, "name is required"),
            Rule::InvalidName(why) => write!(f, "must be a lowercase RFC 1123 subdomain: {why}"),
            Rule::InvalidLabel(why) => write!(f, "must be a lowercase RFC 1123 label: {why}"),
            Rule::NotFinite => write!(f, "must be a finite number"),
            Rule::Pinned { expected } => {
                write!(f, "must be {expected} for this built-in Tier")
            }
            Rule::PriorityTooHigh => write!(f, "must be less than or equal to {MAX_PRIORITY}"),
            Rule::PriorityNegative => write!(f, "must be greater than or equal to 0"),
            Rule::ReservedPriority => write!(f, "is reserved; choose another priority"),
            Rule::ReservedForClusterNetworkPolicy => write!(
                f,
                "is reserved for upstream ClusterNetworkPolicy while the ClusterNetworkPolicy \
                 feature gate is on; choose another priority"
            ),
            Rule::DuplicateName { first } => write!(f, "already used by tiers[{first}]"),
            Rule::DuplicatePriority { holder, first } => {
                write!(f, "already used by tiers[{first}] ({holder})")
            }
            Rule::TooManyPriorities { max, .. } => {
                write!(f, "must have at most {max} distinct priorities")
            }
        }
    }
}

/// One broken rule, in Kubernetes' field-error form: which Tier (position and name), which
/// field (a path in the Tier object, e.g. `spec.priority`), the offending value and the rule.
///
/// Displays as `tiers[1] (networkops): spec.priority: Invalid value: 300: must be less than or
/// equal to 255`; a rule over the whole set as `tiers: Too many: 21: must have at most 20
/// distinct priorities`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Violation {
    /// The Tier's position in the input; `None` for a rule over the whole set.
    pub index: Option<usize>,
    /// The Tier's name (empty when it has none, or for a rule over the whole set).
    pub tier: String,
    /// The offending field: `metadata.name`, `spec.priority`, or `tiers` for the whole set.
    pub field: &'static str,
    /// The offending value as Kubernetes prints it (strings quoted, numbers bare), if any.
    pub value: Option<String>,
    /// The rule that is broken.
    pub rule: Rule,
}

impl Violation {
    /// The Kubernetes kind of this error.
    pub fn error_type(&self) -> ErrorType {
        self.rule.error_type()
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(index) = self.index {
            write!(f, "tiers[{index}]")?;
            if !self.tier.is_empty() {
                write!(f, " ({})", self.tier)?;
            }
            f.write_str(": ")?;
        }
        write!(f, "{}: {}", self.field, self.error_type())?;
        if let Some(value) = &self.value {
            write!(f, ": {value}")?;
        }
        write!(f, ": {}", self.rule)
    }
}

/// A desired set that breaks one or more rules; lists every violation, one per line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid desired Tier set ({} problem(s)):{}", .violations.len(), list(.violations))]
pub struct ValidationError {
    violations: Vec<Violation>,
}

fn list(violations: &[Violation]) -> String {
    violations.iter().map(|v| format!("\n  - {v}")).collect()
}

impl ValidationError {
    /// Every violation found, in the order of the input.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }
}

/// A validated, non-empty set of desired Tiers of controller `C`, ordered as given.
///
/// Validation ([`DesiredSet::new`]) refuses an empty list ([`Rule::Empty`]) and whatever
/// [`Controller::validate`] refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredSet<C: Controller = Antrea> {
    tiers: Vec<C::Spec>,
}

impl<C: Controller> DesiredSet<C> {
    /// Validates `tiers` against `rules`; on failure reports every violation.
    pub fn new<S>(tiers: Vec<S>, rules: &C::Rules) -> Result<Self, ValidationError>
    where
        S: DesiredTier<Controller = C>,
        C: Controller<Spec = S>,
    {
        let mut violations = Vec::new();
        if tiers.is_empty() {
            violations.push(Violation {
                index: None,
                tier: String::new(),
                field: "tiers",
                value: None,
                rule: Rule::Empty,
            });
        }
        violations.extend(C::validate(&tiers, rules));
        if violations.is_empty() {
            Ok(Self { tiers })
        } else {
            Err(ValidationError { violations })
        }
    }

    /// A set the crate knows to be valid (a controller's built-in Tiers).
    pub(crate) fn trusted(tiers: Vec<C::Spec>) -> Self {
        Self { tiers }
    }

    /// The desired Tiers, in input order.
    pub fn tiers(&self) -> &[C::Spec] {
        &self.tiers
    }

    /// The desired Tier called `name`, if any.
    pub fn get(&self, name: &str) -> Option<&C::Spec> {
        self.tiers.iter().find(|t| t.name() == name)
    }

    /// How many Tiers the set holds.
    pub fn len(&self) -> usize {
        self.tiers.len()
    }

    /// Whether the set holds no Tier.
    pub fn is_empty(&self) -> bool {
        self.tiers.is_empty()
    }
}

impl DesiredSet<Antrea> {
    /// Antrea's six system Tiers, in the order Antrea creates them.
    pub fn antrea() -> Self {
        Self::trusted(
            ANTREA_TIERS
                .iter()
                .map(|(name, priority, description)| TierSpec::new(*name, *priority, *description))
                .collect(),
        )
    }
}

/// Antrea's system Tiers: name, priority, description.
const ANTREA_TIERS: [(&str, i64, &str); 6] = [
    (
        "baseline",
        253,
        "[READ-ONLY]: System generated Baseline Tier",
    ),
    (
        "application",
        250,
        "[READ-ONLY]: System generated default Application Tier",
    ),
    (
        "platform",
        200,
        "[READ-ONLY]: System generated Platform Tier",
    ),
    (
        "networkops",
        150,
        "[READ-ONLY]: System generated NetworkOps Tier",
    ),
    (
        "securityops",
        100,
        "[READ-ONLY]: System generated SecurityOps Tier",
    ),
    (
        "emergency",
        50,
        "[READ-ONLY]: System generated Emergency Tier",
    ),
];

/// Antrea's rules over `tiers` (see [`ValidationRules`]); the emptiness of the set is checked by
/// [`DesiredSet::new`].
pub(crate) fn violations(tiers: &[TierSpec], rules: &ValidationRules) -> Vec<Violation> {
    let mut check = Checker::default();
    let mut priorities: BTreeMap<i64, (usize, &str)> = BTreeMap::new();
    for (index, tier) in tiers.iter().enumerate() {
        check.name(index, &tier.name, check_dns1123_subdomain_rule);
        let mut push = |value: Option<String>, rule| {
            check.push(index, &tier.name, "spec.priority", value, rule);
        };
        let priority = Some(tier.priority.to_string());
        if tier.priority > MAX_PRIORITY {
            push(priority.clone(), Rule::PriorityTooHigh);
        } else if tier.priority < 0 {
            push(priority.clone(), Rule::PriorityNegative);
        } else if rules.reserved_priorities.contains(&tier.priority) {
            push(priority.clone(), Rule::ReservedPriority);
        } else if rules.reserved_for_cluster_network_policy(tier.priority) {
            push(priority.clone(), Rule::ReservedForClusterNetworkPolicy);
        }
        match priorities.get(&tier.priority) {
            Some(&(first, holder)) => push(
                priority,
                Rule::DuplicatePriority {
                    holder: holder.to_owned(),
                    first,
                },
            ),
            None => {
                priorities.insert(tier.priority, (index, &tier.name));
            }
        }
    }
    let mut out = check.finish();
    if priorities.len() > rules.max_distinct_priorities {
        out.push(Violation {
            index: None,
            tier: String::new(),
            field: "tiers",
            value: Some(priorities.len().to_string()),
            rule: Rule::TooManyPriorities {
                count: priorities.len(),
                max: rules.max_distinct_priorities,
            },
        });
    }
    out
}

/// Collects field errors, and checks the rules of names every controller shares: required,
/// well formed, unique in the set.
#[derive(Default)]
pub(crate) struct Checker<'a> {
    out: Vec<Violation>,
    names: BTreeMap<&'a str, usize>,
}

impl<'a> Checker<'a> {
    /// Records that the Tier at `index` breaks `rule` in `field`.
    pub(crate) fn push(
        &mut self,
        index: usize,
        tier: &str,
        field: &'static str,
        value: Option<String>,
        rule: Rule,
    ) {
        self.out.push(Violation {
            index: Some(index),
            tier: tier.to_owned(),
            field,
            value,
            rule,
        });
    }

    /// Checks the name of the Tier at `index`: present, `well_formed`, not used before.
    pub(crate) fn name(
        &mut self,
        index: usize,
        name: &'a str,
        well_formed: fn(&str) -> Result<(), Rule>,
    ) {
        let quoted = || Some(format!("{name:?}"));
        if name.is_empty() {
            self.push(index, name, "metadata.name", None, Rule::NameRequired);
        } else if let Err(rule) = well_formed(name) {
            self.push(index, name, "metadata.name", quoted(), rule);
        }
        match self.names.get(name) {
            Some(&first) if !name.is_empty() => {
                let rule = Rule::DuplicateName { first };
                self.push(index, name, "metadata.name", quoted(), rule);
            }
            Some(_) => {}
            None => {
                self.names.insert(name, index);
            }
        }
    }

    /// Every violation recorded, in order.
    pub(crate) fn finish(self) -> Vec<Violation> {
        self.out
    }
}

fn check_dns1123_subdomain_rule(name: &str) -> Result<(), Rule> {
    check_dns1123_subdomain(name).map_err(Rule::InvalidName)
}

/// Checks Kubernetes' DNS-1123 label rule: at most 63 lowercase letters, digits and `-`,
/// starting and ending with a letter or digit (no dot).
pub fn check_dns1123_label(name: &str) -> Result<(), String> {
    if name.len() > MAX_LABEL_LEN {
        return Err(format!("must be at most {MAX_LABEL_LEN} characters"));
    }
    if name.contains('.') {
        return Err("must not contain `.`".to_owned());
    }
    check_dns1123_subdomain(name)
}

/// Checks Kubernetes' DNS-1123 subdomain rule: at most 253 characters of lowercase letters,
/// digits, `-` and `.`, where every dot-separated label starts and ends with a letter or digit.
pub fn check_dns1123_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("must be at most {MAX_NAME_LEN} characters"));
    }
    for label in name.split('.') {
        let bytes = label.as_bytes();
        let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
            return Err(
                "must not contain empty labels (`..`, or a leading or trailing `.`)".into(),
            );
        };
        if !alnum(first) || !alnum(last) {
            return Err(
                "each label must start and end with a lowercase letter or a digit".to_owned(),
            );
        }
        if !bytes.iter().all(|b| alnum(b) || *b == b'-') {
            return Err("only lowercase letters, digits, `-` and `.` are allowed".to_owned());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(tiers: Vec<TierSpec>) -> Result<DesiredSet, ValidationError> {
        DesiredSet::new(tiers, &ValidationRules::default())
    }

    #[test]
    fn antrea_set_is_valid_and_exact() {
        let antrea = DesiredSet::antrea();
        assert_eq!(set(antrea.tiers().to_vec()), Ok(antrea.clone()));
        let summary: Vec<(&str, i64)> = antrea
            .tiers()
            .iter()
            .map(|t| (t.name.as_str(), t.priority))
            .collect();
        assert_eq!(
            summary,
            [
                ("baseline", 253),
                ("application", 250),
                ("platform", 200),
                ("networkops", 150),
                ("securityops", 100),
                ("emergency", 50)
            ]
        );
        assert_eq!(
            antrea.get("application").map(|t| t.description.as_str()),
            Some("[READ-ONLY]: System generated default Application Tier")
        );
    }

    fn lines(err: &ValidationError) -> Vec<String> {
        err.violations().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn reports_every_violation_as_a_kubernetes_field_error() {
        let err = set(vec![
            TierSpec::new("ok", 10, ""),
            TierSpec::new("Upper", 11, ""),
            TierSpec::new("ok", 12, ""),
            TierSpec::new("big", 256, ""),
            TierSpec::new("reserved", 254, ""),
            TierSpec::new("twin", 10, ""),
            TierSpec::new("", 13, ""),
            TierSpec::new("neg", -1, ""),
        ])
        .unwrap_err();
        assert_eq!(
            lines(&err),
            [
                "tiers[1] (Upper): metadata.name: Invalid value: \"Upper\": must be a lowercase \
                 RFC 1123 subdomain: each label must start and end with a lowercase letter or a digit",
                "tiers[2] (ok): metadata.name: Duplicate value: \"ok\": already used by tiers[0]",
                "tiers[3] (big): spec.priority: Invalid value: 256: must be less than or equal to 255",
                "tiers[4] (reserved): spec.priority: Invalid value: 254: is reserved; choose another \
                 priority",
                "tiers[5] (twin): spec.priority: Duplicate value: 10: already used by tiers[0] (ok)",
                "tiers[6]: metadata.name: Required value: name is required",
                "tiers[7] (neg): spec.priority: Invalid value: -1: must be greater than or equal to 0",
            ]
        );
        // The list stays structured for embedders.
        let v = &err.violations()[4];
        assert_eq!(
            (v.index, v.tier.as_str(), v.field, v.value.as_deref()),
            (Some(5), "twin", "spec.priority", Some("10"))
        );
        assert_eq!(v.error_type(), ErrorType::Duplicate);
        assert_eq!(
            v.rule,
            Rule::DuplicatePriority {
                holder: "ok".into(),
                first: 0
            }
        );
        let text = err.to_string();
        assert!(text.starts_with("invalid desired Tier set (7 problem(s)):\n  - tiers[1] (Upper)"));
    }

    #[test]
    fn an_empty_set_is_refused() {
        let err = set(vec![]).unwrap_err();
        assert_eq!(
            lines(&err),
            ["tiers: Required value: at least one Tier is required"]
        );
        assert_eq!(err.violations()[0].rule, Rule::Empty);
    }

    #[test]
    fn at_most_twenty_distinct_priorities() {
        let tiers = |n: i64| {
            (0..n)
                .map(|i| TierSpec::new(format!("t{i}"), i, ""))
                .collect()
        };
        assert!(set(tiers(20)).is_ok());
        let err = set(tiers(21)).unwrap_err();
        assert_eq!(
            err.violations()[0].rule,
            Rule::TooManyPriorities { count: 21, max: 20 }
        );
        assert_eq!(
            lines(&err),
            ["tiers: Too many: 21: must have at most 20 distinct priorities"]
        );
    }

    #[test]
    fn custom_rules_apply() {
        let rules = ValidationRules {
            reserved_priorities: BTreeSet::from([7]),
            max_distinct_priorities: 1,
            ..ValidationRules::default()
        };
        let err = DesiredSet::new(
            vec![TierSpec::new("a", 7, ""), TierSpec::new("b", 254, "")],
            &rules,
        )
        .unwrap_err();
        assert_eq!(err.violations().len(), 2);
        assert_eq!(err.violations()[0].rule, Rule::ReservedPriority);
        assert!(matches!(
            err.violations()[1].rule,
            Rule::TooManyPriorities { count: 2, max: 1 }
        ));
    }

    #[test]
    fn the_cluster_network_policy_gate_reserves_220() {
        let at_220 = || vec![TierSpec::new("mine", CNP_ADMIN_TIER_PRIORITY, "")];
        assert!(set(at_220()).is_ok(), "the gate is off by default");
        let gated = ValidationRules {
            cluster_network_policy: true,
            ..ValidationRules::default()
        };
        let err = DesiredSet::new(at_220(), &gated).unwrap_err();
        assert_eq!(
            err.violations()[0].rule,
            Rule::ReservedForClusterNetworkPolicy
        );
        assert!(err.to_string().contains("feature gate"), "{err}");
        assert!(DesiredSet::new(DesiredSet::antrea().tiers().to_vec(), &gated).is_ok());
    }

    #[test]
    fn dns1123_subdomains() {
        for ok in ["a", "a-b", "a.b", "0", "x1.y-2.z", &"a".repeat(253)] {
            assert_eq!(check_dns1123_subdomain(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a.",
            "A",
            "a_b",
            "a b",
            "é",
            &"a".repeat(254),
        ] {
            assert!(check_dns1123_subdomain(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn yaml_round_trip_and_unknown_fields_rejected() {
        let parsed: Vec<TierSpec> = serde_yaml::from_str(
            "- name: a\n  priority: 3\n- name: b\n  priority: 4\n  description: x\n",
        )
        .unwrap();
        assert_eq!(parsed[0], TierSpec::new("a", 3, ""));
        assert_eq!(parsed[1], TierSpec::new("b", 4, "x"));
        assert!(
            serde_yaml::from_str::<Vec<TierSpec>>("- name: a\n  priority: 3\n  prio: 4\n").is_err()
        );
    }
}
