//! The desired set of Tiers and the rules it must satisfy.
//!
//! A [`DesiredSet`] can only be built through [`DesiredSet::new`], which checks every rule of
//! [`ValidationRules`] and reports every violation at once. [`DesiredSet::antrea`] is Antrea's six
//! system Tiers.
//!
//! ```
//! use tier_core::{DesiredSet, TierSpec, ValidationRules};
//!
//! let err = DesiredSet::new(
//!     vec![TierSpec::new("Bad_Name", 300, ""), TierSpec::new("dup", 251, "")],
//!     &ValidationRules::default(),
//! )
//! .unwrap_err();
//! assert_eq!(err.violations().len(), 3);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// The highest priority a Tier may have (the CRD's schema maximum).
pub const MAX_PRIORITY: i64 = 255;

/// Antrea's `cnpAdminTierPriority`: the priority reserved for new Tiers while Antrea's
/// `ClusterNetworkPolicy` feature gate is on (see [`ValidationRules::cluster_network_policy`]).
pub const CNP_ADMIN_TIER_PRIORITY: i64 = 220;

/// The longest name a DNS-1123 subdomain may have.
const MAX_NAME_LEN: usize = 253;

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

/// Which rule a desired Tier breaks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The name is not a DNS-1123 subdomain.
    InvalidName(String),
    /// The priority is outside 0..=255.
    PriorityOutOfRange,
    /// The priority is in the reserved set.
    ReservedPriority,
    /// The priority is [`CNP_ADMIN_TIER_PRIORITY`] and the `ClusterNetworkPolicy` gate is on.
    ReservedForClusterNetworkPolicy,
    /// Another desired Tier has the same name.
    DuplicateName,
    /// Another desired Tier has the same priority.
    DuplicatePriority {
        /// The name of the Tier that already holds the priority.
        holder: String,
    },
    /// The set uses more distinct priorities than the cluster supports.
    TooManyPriorities {
        /// How many distinct priorities the set uses.
        count: usize,
        /// The limit.
        max: usize,
    },
}

/// One broken rule: which Tier (by name, or by position when the name is empty), which field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Violation {
    /// The Tier's name, or `#<index>` when it has none.
    pub tier: String,
    /// The offending field: `name`, `priority` or `tiers` for set-wide rules.
    pub field: &'static str,
    /// The rule that is broken.
    pub rule: Rule,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::InvalidName(why) => write!(f, "not a DNS-1123 subdomain: {why}"),
            Rule::PriorityOutOfRange => write!(f, "must be between 0 and {MAX_PRIORITY}"),
            Rule::ReservedPriority => write!(f, "is reserved; choose another priority"),
            Rule::ReservedForClusterNetworkPolicy => write!(
                f,
                "is reserved for upstream ClusterNetworkPolicy while the ClusterNetworkPolicy \
                 feature gate is on; choose another priority"
            ),
            Rule::DuplicateName => write!(f, "name appears more than once"),
            Rule::DuplicatePriority { holder } => {
                write!(f, "priority is already used by tier {holder:?}")
            }
            Rule::TooManyPriorities { count, max } => {
                write!(
                    f,
                    "{count} distinct priorities, at most {max} are supported"
                )
            }
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tier {:?}: {}: {}", self.tier, self.field, self.rule)
    }
}

/// A desired set that breaks one or more rules; lists every violation.
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

/// A validated, non-empty set of desired Tiers, ordered as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredSet {
    tiers: Vec<TierSpec>,
}

impl DesiredSet {
    /// Validates `tiers` against `rules`; on failure reports every violation.
    pub fn new(tiers: Vec<TierSpec>, rules: &ValidationRules) -> Result<Self, ValidationError> {
        let violations = violations(&tiers, rules);
        if violations.is_empty() {
            Ok(Self { tiers })
        } else {
            Err(ValidationError { violations })
        }
    }

    /// Antrea's six system Tiers, in the order Antrea creates them.
    pub fn antrea() -> Self {
        Self {
            tiers: ANTREA_TIERS
                .iter()
                .map(|(name, priority, description)| TierSpec::new(*name, *priority, *description))
                .collect(),
        }
    }

    /// The desired Tiers, in input order.
    pub fn tiers(&self) -> &[TierSpec] {
        &self.tiers
    }

    /// The desired Tier called `name`, if any.
    pub fn get(&self, name: &str) -> Option<&TierSpec> {
        self.tiers.iter().find(|t| t.name == name)
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

fn violations(tiers: &[TierSpec], rules: &ValidationRules) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut names: BTreeSet<&str> = BTreeSet::new();
    let mut priorities: BTreeMap<i64, &str> = BTreeMap::new();
    for (index, tier) in tiers.iter().enumerate() {
        let label = if tier.name.is_empty() {
            format!("#{index}")
        } else {
            tier.name.clone()
        };
        let mut push = |field, rule| {
            out.push(Violation {
                tier: label.clone(),
                field,
                rule,
            })
        };
        if let Err(why) = check_dns1123_subdomain(&tier.name) {
            push("name", Rule::InvalidName(why));
        }
        if !names.insert(&tier.name) && !tier.name.is_empty() {
            push("name", Rule::DuplicateName);
        }
        if !(0..=MAX_PRIORITY).contains(&tier.priority) {
            push("priority", Rule::PriorityOutOfRange);
        } else if rules.reserved_priorities.contains(&tier.priority) {
            push("priority", Rule::ReservedPriority);
        } else if rules.reserved_for_cluster_network_policy(tier.priority) {
            push("priority", Rule::ReservedForClusterNetworkPolicy);
        }
        match priorities.get(&tier.priority) {
            Some(holder) => push(
                "priority",
                Rule::DuplicatePriority {
                    holder: (*holder).to_owned(),
                },
            ),
            None => {
                priorities.insert(tier.priority, &tier.name);
            }
        }
    }
    if priorities.len() > rules.max_distinct_priorities {
        out.push(Violation {
            tier: "*".to_owned(),
            field: "tiers",
            rule: Rule::TooManyPriorities {
                count: priorities.len(),
                max: rules.max_distinct_priorities,
            },
        });
    }
    out
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

    #[test]
    fn reports_every_violation_with_tier_and_rule() {
        let err = set(vec![
            TierSpec::new("ok", 10, ""),
            TierSpec::new("Upper", 11, ""),
            TierSpec::new("ok", 12, ""),
            TierSpec::new("big", 256, ""),
            TierSpec::new("reserved", 254, ""),
            TierSpec::new("twin", 10, ""),
            TierSpec::new("", 13, ""),
        ])
        .unwrap_err();
        let got: Vec<(&str, &str, &Rule)> = err
            .violations()
            .iter()
            .map(|v| (v.tier.as_str(), v.field, &v.rule))
            .collect();
        assert_eq!(got.len(), 6, "{err}");
        assert!(matches!(got[0], ("Upper", "name", Rule::InvalidName(_))));
        assert_eq!(got[1], ("ok", "name", &Rule::DuplicateName));
        assert_eq!(got[2], ("big", "priority", &Rule::PriorityOutOfRange));
        assert_eq!(got[3], ("reserved", "priority", &Rule::ReservedPriority));
        assert_eq!(
            got[4],
            (
                "twin",
                "priority",
                &Rule::DuplicatePriority {
                    holder: "ok".into()
                }
            )
        );
        assert!(matches!(got[5], ("#6", "name", Rule::InvalidName(_))));
        let text = err.to_string();
        assert!(text.contains("6 problem(s)"), "{text}");
        assert!(
            text.contains("tier \"reserved\": priority: is reserved"),
            "{text}"
        );
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
