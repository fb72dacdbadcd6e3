//! The plan: for every desired Tier, what is observed and what tierd would do. Read-only.

use std::fmt::Write as _;

use tier_core::{Decision, DesiredSet, Observed, Snapshot, decide};

/// One line of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The Tier's name.
    pub name: String,
    /// The desired priority.
    pub desired_priority: i64,
    /// The observed priority, if the Tier exists.
    pub observed_priority: Option<i64>,
    /// Whether the observed description differs from the desired one.
    pub description_differs: bool,
    /// What tierd would do.
    pub decision: Decision,
}

/// Computes the plan of `desired` against a synced `snapshot`.
pub fn rows(desired: &DesiredSet, snapshot: &Snapshot) -> Vec<Row> {
    desired
        .tiers()
        .iter()
        .map(|tier| {
            let observed = snapshot.observe(&tier.name);
            let (observed_priority, description_differs) = match &observed {
                Observed::Present(o) => (Some(o.priority), o.description != tier.description),
                _ => (None, false),
            };
            Row {
                name: tier.name.clone(),
                desired_priority: tier.priority,
                observed_priority,
                description_differs,
                decision: decide(tier, &observed),
            }
        })
        .collect()
}

/// Whether every row is in sync.
pub fn in_sync(rows: &[Row]) -> bool {
    rows.iter().all(|r| r.decision == Decision::InSync)
}

/// Renders rows as an aligned text table.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        out,
        "{:<width$}  {:>7}  {:>8}  ACTION",
        "NAME", "DESIRED", "OBSERVED"
    );
    for row in rows {
        let observed = row
            .observed_priority
            .map_or_else(|| "-".to_owned(), |p| p.to_string());
        let action = match (&row.decision, row.observed_priority) {
            (Decision::InSync, _) => "none (in sync)".to_owned(),
            (Decision::Create, _) => "create".to_owned(),
            (Decision::WaitForSync, _) => "unknown (cache not synced)".to_owned(),
            (Decision::Update { .. }, Some(p)) => {
                let mut what = Vec::new();
                if p != row.desired_priority {
                    what.push("priority");
                }
                if row.description_differs {
                    what.push("description");
                }
                format!("update {}", what.join(" and "))
            }
            (Decision::Update { .. }, None) => "update".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<width$}  {:>7}  {:>8}  {action}",
            row.name, row.desired_priority, observed
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use tier_core::ObservedTier;

    use super::*;

    #[test]
    fn plans_and_renders() {
        let desired = DesiredSet::antrea();
        let mut observed: Vec<ObservedTier> = desired
            .tiers()
            .iter()
            .map(|t| ObservedTier {
                name: t.name.clone(),
                priority: t.priority,
                description: t.description.clone(),
                resource_version: "1".into(),
            })
            .collect();
        observed[1].priority = 240;
        observed[2].description = "x".into();
        observed.remove(5);
        let rows = rows(&desired, &Snapshot::synced(1, observed));
        assert!(!in_sync(&rows));
        let table = render(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "NAME         DESIRED  OBSERVED  ACTION");
        assert_eq!(lines[1], "baseline         253       253  none (in sync)");
        assert_eq!(lines[2], "application      250       240  update priority");
        assert_eq!(
            lines[3],
            "platform         200       200  update description"
        );
        assert_eq!(lines[6], "emergency         50         -  create");
    }
}
