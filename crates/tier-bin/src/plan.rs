//! The plan: for every desired Tier, what is observed, what tierd would do and whether the API
//! server would let it. Read-only.
//!
//! # Output
//!
//! `tierd plan` prints a table (the default) or, with `-o json` / `-o yaml`, a list of
//! [`Record`]s, one per desired Tier in the order of the desired set. The record is a stable
//! interface for scripts; fields are only ever added:
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `name` | string | the Tier's name |
//! | `desired` | `{priority, description}` | the fields tierd ensures |
//! | `observed` | `{priority, description}` or `null` | the Tier in the cluster; `null` when absent |
//! | `action` | `none`, `create` or `update` | what `tierd ensure` would do (`unknown` only for a snapshot taken before the cache synced, which `tierd plan` never prints) |
//! | `reason` | string | why, in words (which fields differ, or who would refuse the write) |
//! | `blocked` | `{by, message}` or `null` | set when the write would be refused: by whom, with the API server's message |
//!
//! ```json
//! [{"name":"networkops","desired":{"priority":150,"description":"..."},"observed":null,
//!   "action":"create","reason":"would be refused by ...",
//!   "blocked":{"by":"...","message":"tier networkops priority 150 overlaps with existing Tier"}}]
//! ```
//!
//! # Truth about refusals
//!
//! A create is reviewed with [`tier_core::admission::review`], the rules Antrea's
//! `tiervalidator.antrea.io` webhook (and tierd's own) applies, against every observed Tier, so
//! plan says when `ensure` would meet a denial instead of promising a create that cannot happen.
//! Updates are not predicted: whether a priority change is allowed depends on the user `ensure`
//! runs as, which plan cannot know.
//!
//! # One source for the fields that differ
//!
//! Which fields an update changes comes from the core's decision ([`tier_core::decide`], the
//! controller's [`Controller::drift`]): the same list the daemon's `Corrected` Event names.
//! A controller's [`Planned`] impl only puts each field in words.

use std::fmt;
use std::fmt::Write as _;

use serde::Serialize;
use tier_core::admission::{AdmissionPolicy, Request, review};
use tier_core::calico::{self, Calico, DefaultAction};
use tier_core::{
    Antrea, Controller, Decision, DesiredSet, DesiredTier, Drift, Observed, ObservedTier, Snapshot,
    TierSpec, decide,
};

/// Who refuses a Tier write that breaks Antrea's admission rules.
pub const ADMISSION: &str = "the Tier admission webhook (tiervalidator.antrea.io rules)";

/// A Tier's fields, desired or observed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fields {
    /// The priority.
    pub priority: i64,
    /// The description; empty means none.
    pub description: String,
}

/// What tierd would do to one Tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Nothing: the Tier is in sync.
    None,
    /// Create the missing Tier.
    Create,
    /// Update the Tier's fields.
    Update,
    /// Not known: the snapshot was taken before the cache synced (`tierd plan` waits for the
    /// sync, so it never prints this).
    Unknown,
}

impl Action {
    /// The action's name, as in the JSON record.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::Create => "create",
            Action::Update => "update",
            Action::Unknown => "unknown",
        }
    }
}

/// A write the API server would refuse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Blocked {
    /// Who would refuse it.
    pub by: String,
    /// The message it would give.
    pub message: String,
}

/// One line of the plan: the stable record of `-o json` and `-o yaml`, with the fields of the
/// controller's Tier (`F`: Antrea's [`Fields`], Calico's [`CalicoFields`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record<F = Fields> {
    /// The Tier's name.
    pub name: String,
    /// The desired fields.
    pub desired: F,
    /// The observed fields; `None` (`null`) when the Tier is absent.
    pub observed: Option<F>,
    /// What tierd would do.
    pub action: Action,
    /// Why, in words.
    pub reason: String,
    /// Set when the write would be refused.
    pub blocked: Option<Blocked>,
    /// The fields an update changes, from the core's decision (empty unless the action is an
    /// update); not part of the record's JSON (`reason` says it in words).
    #[serde(skip)]
    pub drift: Drift,
}

/// What the plan knows of one controller's Tier: its fields as a record shows them, and who
/// would refuse a create. One implementation per controller.
pub trait Planned: Controller {
    /// The fields tierd ensures, as a record shows them.
    type Fields: Serialize + Clone + fmt::Debug + PartialEq;
    /// The fields of a desired Tier.
    fn desired_fields(spec: &Self::Spec) -> Self::Fields;
    /// The fields of an observed Tier.
    fn observed_fields(observed: &Self::Observed) -> Self::Fields;
    /// The field `field` (one the core's [`Controller::drift`] names) in words: what it is and
    /// should be.
    fn difference(field: &str, desired: &Self::Fields, observed: &Self::Fields) -> String;
    /// The table's DESIRED and OBSERVED cell.
    fn cell(fields: &Self::Fields) -> String;
    /// Why the controller's admission would refuse creating `spec` in `snapshot` (the reason
    /// in words, and the refusal), if it would.
    fn refusal(
        admission: &Self::Admission,
        spec: &Self::Spec,
        snapshot: &Snapshot<Self>,
    ) -> Option<(String, Blocked)>;
}

impl Planned for Antrea {
    type Fields = Fields;

    fn desired_fields(spec: &TierSpec) -> Fields {
        Fields {
            priority: spec.priority,
            description: spec.description.clone(),
        }
    }

    fn observed_fields(observed: &ObservedTier) -> Fields {
        Fields {
            priority: observed.priority,
            description: observed.description.clone(),
        }
    }

    fn difference(field: &str, desired: &Fields, observed: &Fields) -> String {
        match field {
            "priority" => format!(
                "priority is {}, want {}",
                observed.priority, desired.priority
            ),
            "description" => format!(
                "description is {:?}, want {:?}",
                observed.description, desired.description
            ),
            other => format!("{other} differs"),
        }
    }

    fn cell(fields: &Fields) -> String {
        fields.priority.to_string()
    }

    fn refusal(
        policy: &AdmissionPolicy,
        tier: &TierSpec,
        snapshot: &Snapshot,
    ) -> Option<(String, Blocked)> {
        let existing: Vec<(&str, i64)> = snapshot
            .tiers
            .as_deref()
            .map(|tiers| {
                tiers
                    .values()
                    .map(|t| (t.name.as_str(), t.priority))
                    .collect()
            })
            .unwrap_or_default();
        let request = Request::Create {
            name: &tier.name,
            priority: tier.priority,
        };
        let denial = review(policy, &request, existing.iter().copied()).err()?;
        let holders: Vec<&str> = existing
            .iter()
            .filter(|(_, p)| *p == tier.priority)
            .map(|(n, _)| *n)
            .collect();
        let mut reason = format!("would be refused by {ADMISSION}: {denial}");
        if !holders.is_empty() {
            let _ = write!(
                reason,
                " ({holders} holds priority {p}: move {holders} to another priority, or give {name} \
                 another one)",
                holders = holders.join(", "),
                p = tier.priority,
                name = tier.name
            );
        }
        let blocked = Blocked {
            by: ADMISSION.to_owned(),
            message: denial.to_string(),
        };
        Some((reason, blocked))
    }
}

/// Who refuses a Calico Tier write that breaks its API's rules.
pub const CALICO_ADMISSION: &str = "Calico's Tier API (projectcalico.org validation)";

/// A Calico Tier's fields, desired or observed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CalicoFields {
    /// The order; `null` means last.
    pub order: Option<f64>,
    /// `Deny` or `Pass`.
    pub default_action: DefaultAction,
}

impl Planned for Calico {
    type Fields = CalicoFields;

    fn desired_fields(spec: &calico::TierSpec) -> CalicoFields {
        CalicoFields {
            order: spec.order,
            default_action: spec.default_action,
        }
    }

    fn observed_fields(observed: &calico::ObservedTier) -> CalicoFields {
        CalicoFields {
            order: observed.order,
            default_action: observed.default_action,
        }
    }

    fn difference(field: &str, desired: &CalicoFields, observed: &CalicoFields) -> String {
        match field {
            "order" => format!(
                "order is {}, want {}",
                order_cell(observed.order),
                order_cell(desired.order)
            ),
            "defaultAction" => format!(
                "defaultAction is {}, want {}",
                observed.default_action, desired.default_action
            ),
            other => format!("{other} differs"),
        }
    }

    fn cell(fields: &CalicoFields) -> String {
        format!("{}/{}", order_cell(fields.order), fields.default_action)
    }

    fn refusal(
        admission: &calico::Admission,
        spec: &calico::TierSpec,
        snapshot: &Snapshot<Calico>,
    ) -> Option<(String, Blocked)> {
        let blocker = Calico::predict(admission, spec, snapshot)?;
        let reason = format!("would be refused by {CALICO_ADMISSION}: {}", blocker.reason);
        Some((
            reason,
            Blocked {
                by: CALICO_ADMISSION.to_owned(),
                message: blocker.reason,
            },
        ))
    }
}

/// An order as the table shows it: the number, or `last` when absent.
fn order_cell(order: Option<f64>) -> String {
    order.map_or_else(|| "last".to_owned(), |o| o.to_string())
}

/// Computes the plan of `desired` against `snapshot` (synced, or every action is
/// [`Action::Unknown`]), predicting refusals of creates with `admission` (none without).
pub fn records<C: Planned>(
    desired: &DesiredSet<C>,
    snapshot: &Snapshot<C>,
    admission: Option<&C::Admission>,
) -> Vec<Record<C::Fields>> {
    desired
        .tiers()
        .iter()
        .map(|tier| {
            let observed = snapshot.observe(tier.name());
            let fields = match &observed {
                Observed::Present(o) => Some(C::observed_fields(o)),
                _ => None,
            };
            let desired_fields = C::desired_fields(tier);
            let decision = decide(tier, &observed);
            let drift = match &decision {
                Decision::Update { drift, .. } => drift.clone(),
                _ => Drift::default(),
            };
            let (action, reason, blocked) = match (decision, &fields) {
                (Decision::InSync, _) => (Action::None, "in sync".to_owned(), None),
                (Decision::Update { drift, .. }, Some(o)) => {
                    let what: Vec<String> = drift
                        .fields()
                        .iter()
                        .map(|field| C::difference(field, &desired_fields, o))
                        .collect();
                    (Action::Update, what.join("; "), None)
                }
                (Decision::WaitForSync, _) => (
                    Action::Unknown,
                    "the Tier cache has not synced".to_owned(),
                    None,
                ),
                // Absent: a create, unless the admission rules would refuse it.
                (Decision::Create | Decision::Update { .. }, _) => {
                    match admission.and_then(|a| C::refusal(a, tier, snapshot)) {
                        None => (Action::Create, "missing".to_owned(), None),
                        Some((reason, blocked)) => (Action::Create, reason, Some(blocked)),
                    }
                }
            };
            Record {
                name: tier.name().to_owned(),
                desired: desired_fields,
                observed: fields,
                action,
                reason,
                blocked,
                drift,
            }
        })
        .collect()
}

/// The table of `desired` against `snapshot`, refusals predicted with the controller's default
/// admission (Antrea's rules for any user: plan predicts creates only).
pub fn render<C: Planned>(desired: &DesiredSet<C>, snapshot: &Snapshot<C>) -> String {
    let admission = C::default_admission();
    table::<C>(&records(desired, snapshot, admission.as_ref()))
}

/// Whether every record is in sync.
pub fn in_sync<F>(records: &[Record<F>]) -> bool {
    records.iter().all(|r| r.action == Action::None)
}

/// Renders records as an aligned text table.
pub fn table<C: Planned>(records: &[Record<C::Fields>]) -> String {
    let mut out = String::new();
    let width = records
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let cells: Vec<(String, String)> = records
        .iter()
        .map(|r| {
            (
                C::cell(&r.desired),
                r.observed.as_ref().map_or_else(|| "-".to_owned(), C::cell),
            )
        })
        .collect();
    let desired_width = cells.iter().map(|c| c.0.len()).max().unwrap_or(0).max(7);
    let observed_width = cells.iter().map(|c| c.1.len()).max().unwrap_or(0).max(8);
    let _ = writeln!(
        out,
        "{:<width$}  {:>desired_width$}  {:>observed_width$}  ACTION",
        "NAME", "DESIRED", "OBSERVED"
    );
    for (record, (desired, observed)) in records.iter().zip(cells) {
        let action = match (record.action, &record.observed, &record.blocked) {
            (Action::None, _, _) => "none (in sync)".to_owned(),
            (Action::Create, _, None) => "create".to_owned(),
            (action, _, Some(_)) => format!("{} {}", action.as_str(), record.reason),
            (Action::Update, _, None) if !record.drift.is_empty() => {
                format!("update {}", record.drift)
            }
            (Action::Update, _, None) => "update".to_owned(),
            (Action::Unknown, _, None) => "unknown (cache not synced)".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<width$}  {desired:>desired_width$}  {observed:>observed_width$}  {action}",
            record.name
        );
    }
    out
}

/// Renders records as a JSON list, one record per Tier.
///
/// # Errors
///
/// Never in practice: the records hold only strings and integers.
pub fn json<F: Serialize>(records: &[Record<F>]) -> Result<String, serde_json::Error> {
    let mut text = serde_json::to_string_pretty(records)?;
    text.push('\n');
    Ok(text)
}

/// Renders records as a YAML list, one record per Tier.
///
/// # Errors
///
/// Never in practice: the records hold only strings and integers.
pub fn yaml<F: Serialize>(records: &[Record<F>]) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = "system:serviceaccount:kube-system:tierd";

    fn observed(name: &str, priority: i64, description: &str) -> ObservedTier {
        ObservedTier {
            name: name.into(),
            priority,
            description: description.into(),
            resource_version: "1".into(),
            last_writer: None,
        }
    }

    fn drifted() -> Vec<Record> {
        let desired = DesiredSet::antrea();
        let mut tiers: Vec<ObservedTier> = desired
            .tiers()
            .iter()
            .map(|t| observed(&t.name, t.priority, &t.description))
            .collect();
        tiers[1].priority = 240;
        tiers[2].description = "x".into();
        tiers.remove(5);
        tiers.remove(3);
        tiers.push(observed("team-a", 150, "a user's Tier"));
        records(
            &desired,
            &Snapshot::synced(1, tiers),
            Some(&AdmissionPolicy::antrea(USER)),
        )
    }

    #[test]
    fn plans_and_renders_a_table() {
        let records = drifted();
        assert!(!in_sync(&records));
        let table = table::<Antrea>(&records);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines,
            [
                "NAME         DESIRED  OBSERVED  ACTION",
                "baseline         253       253  none (in sync)",
                "application      250       240  update priority",
                "platform         200       200  update description",
                "networkops       150         -  create would be refused by the Tier admission webhook \
                 (tiervalidator.antrea.io rules): tier networkops priority 150 overlaps with \
                 existing Tier (team-a holds priority 150: move team-a to another priority, or \
                 give networkops another one)",
                "securityops      100       100  none (in sync)",
                "emergency         50         -  create",
            ]
        );
    }

    #[test]
    fn records_say_what_and_why() {
        let records = drifted();
        assert_eq!(records[1].action, Action::Update);
        assert_eq!(records[1].reason, "priority is 240, want 250");
        assert_eq!(
            records[2].reason,
            "description is \"x\", want \"[READ-ONLY]: System generated Platform Tier\""
        );
        assert_eq!(
            records[3].blocked,
            Some(Blocked {
                by: ADMISSION.into(),
                message: "tier networkops priority 150 overlaps with existing Tier".into()
            })
        );
        assert_eq!(records[5].reason, "missing");
        assert_eq!(records[5].blocked, None);
        assert_eq!(records[0].observed.as_ref().map(|o| o.priority), Some(253));
        // The fields come from the core's decision, as the daemon's Corrected Event names them.
        assert_eq!(records[1].drift.fields(), ["priority"]);
        assert_eq!(records[2].drift.fields(), ["description"]);
        assert!(records[0].drift.is_empty());
    }

    #[test]
    fn json_and_yaml_records_are_stable() {
        let records = drifted();
        let json: serde_json::Value = serde_json::from_str(&json(&records).unwrap()).unwrap();
        let emergency = &json[5];
        assert_eq!(
            emergency,
            &serde_json::json!({
                "name": "emergency",
                "desired": {"priority": 50, "description": "[READ-ONLY]: System generated Emergency Tier"},
                "observed": null,
                "action": "create",
                "reason": "missing",
                "blocked": null,
            })
        );
        assert_eq!(json[0]["action"], "none");
        assert_eq!(json[0]["observed"]["priority"], 253);
        let yaml: serde_yaml::Value = serde_yaml::from_str(&yaml(&records).unwrap()).unwrap();
        assert_eq!(yaml[3]["name"].as_str(), Some("networkops"));
        assert_eq!(yaml[3]["action"].as_str(), Some("create"));
        assert!(yaml[3]["blocked"]["message"].as_str().is_some());
    }

    #[test]
    fn an_unsynced_snapshot_promises_nothing() {
        let records = records(
            &DesiredSet::antrea(),
            &Snapshot::default(),
            Some(&AdmissionPolicy::antrea(USER)),
        );
        assert!(records.iter().all(|r| r.action == Action::Unknown));
        assert!(!in_sync(&records));
        assert!(table::<Antrea>(&records).contains("unknown (cache not synced)"));
    }

    #[test]
    fn a_full_cluster_refuses_every_create() {
        let desired = DesiredSet::new(
            vec![tier_core::TierSpec::new("late", 40, "")],
            &Default::default(),
        )
        .unwrap();
        let full: Vec<ObservedTier> = (0..20).map(|i| observed(&format!("t{i}"), i, "")).collect();
        let records = records(
            &desired,
            &Snapshot::synced(1, full),
            Some(&AdmissionPolicy::antrea(USER)),
        );
        assert_eq!(
            records[0].blocked.as_ref().map(|b| b.message.as_str()),
            Some("maximum number of Tiers supported: 20")
        );
    }
}
