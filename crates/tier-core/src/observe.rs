//! What the cache says about Tiers ([`Snapshot`], [`Observed`], [`Deletions`]), and the pure
//! decision for one (desired, observed) pair ([`decide`], naming the fields that differ in a
//! [`Drift`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::antrea::Antrea;
use crate::controller::{CachedTier, Controller, DesiredTier};

/// A counter of changes to the whole observed Tier set: it grows with every change a lister sees
/// (including the first complete list), so "has anything changed since I looked?" is a comparison.
pub type Generation = u64;

/// A writer of an object's fields, as its `managedFields` record it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldWriter {
    /// The field manager (`kubectl-edit`, `kube-controller-manager`, ...).
    pub manager: String,
    /// When it last wrote them, as the server recorded it (RFC 3339), if it did.
    pub time: Option<String>,
}

impl std::fmt::Display for FieldWriter {
    /// `kubectl-edit (at 2026-12-01T09:00:00Z)`, or the manager alone.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.time {
            Some(time) => write!(f, "{} (at {time})", self.manager),
            None => f.write_str(&self.manager),
        }
    }
}

/// What is known about one Tier name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Observed<C: Controller = Antrea> {
    /// The cache has not completed its first list: nothing can be concluded.
    Unknown,
    /// The cache is synced and holds no Tier of that name.
    Absent,
    /// The cache holds this Tier.
    Present(C::Observed),
}

impl<C: Controller> Observed<C> {
    /// The resourceVersion of a present Tier, `None` when absent or unknown.
    pub fn resource_version(&self) -> Option<&str> {
        match self {
            Observed::Present(t) => Some(t.resource_version()),
            _ => None,
        }
    }
}

/// The ensured fields of one Tier that differ from the desired ones, named as the API names
/// them (Antrea's `priority` and `description`, Calico's `order` and `defaultAction`), in the
/// controller's order. Computed once, by [`Controller::drift`]: what [`decide`] calls an
/// update for, what a `Corrected` event names and what `tierd plan` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Drift(Vec<&'static str>);

impl Drift {
    /// The fields of `checks` whose flag is set (`true`: that field differs), in order.
    pub fn of(checks: impl IntoIterator<Item = (&'static str, bool)>) -> Self {
        Self(
            checks
                .into_iter()
                .filter_map(|(field, differs)| differs.then_some(field))
                .collect(),
        )
    }

    /// The fields that differ, in the controller's order.
    pub fn fields(&self) -> &[&'static str] {
        &self.0
    }

    /// Whether no ensured field differs (the Tier is in sync).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `field` differs.
    pub fn contains(&self, field: &str) -> bool {
        self.0.contains(&field)
    }
}

impl fmt::Display for Drift {
    /// `description`, `priority and description`, `a, b and c`; `no field` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [] => f.write_str("no field"),
            [one] => f.write_str(one),
            [init @ .., last] => write!(f, "{} and {last}", init.join(", ")),
        }
    }
}

/// Per Tier name, the generation at which a lister last saw that Tier deleted: a watch's
/// delete event, or a relist without it. A lister records every deletion it sees, even one
/// whose create it never published on its own (a create and its deletion seen together), so
/// a machine learns that a Tier it wrote was deleted although the observed set looks the same.
///
/// # Bound
///
/// At most [`Deletions::MAX`] names; a new one beyond that evicts the oldest deletion. The
/// lister that records them owns the table; cloning is a reference count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deletions(Arc<BTreeMap<String, Generation>>);

impl Deletions {
    /// The most names a table keeps. A name evicted early only costs the machine that waited
    /// for it the echo wait, as if the deletion had not been seen.
    pub const MAX: usize = 1024;

    /// Records that the Tier `name` was deleted, seen at `generation` (kept if later than the
    /// one recorded).
    pub fn record(&mut self, name: &str, generation: Generation) {
        let map = Arc::make_mut(&mut self.0);
        match map.get_mut(name) {
            Some(at) => *at = (*at).max(generation),
            None => {
                if map.len() >= Self::MAX
                    && let Some(oldest) = map
                        .iter()
                        .min_by_key(|(_, at)| **at)
                        .map(|(name, _)| name.clone())
                {
                    map.remove(&oldest);
                }
                map.insert(name.to_owned(), generation);
            }
        }
    }

    /// The generation at which the Tier `name` was last seen deleted, if it was.
    pub fn get(&self, name: &str) -> Option<Generation> {
        self.0.get(name).copied()
    }

    /// How many names the table holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no deletion was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A consistent view of the observed Tier set at one generation.
///
/// `tiers` is `None` until the cache has completed its first list. Cloning is cheap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot<C: Controller = Antrea> {
    /// The generation this view was taken at.
    pub generation: Generation,
    /// Every observed Tier by name, or `None` before the first complete list.
    pub tiers: Option<Arc<BTreeMap<String, C::Observed>>>,
    /// The deletions the lister saw up to this generation (empty for a lister that does not
    /// record them: then a deletion seen together with its create waits for the echo wait).
    pub deleted: Deletions,
}

impl<C: Controller> Default for Snapshot<C> {
    /// Unsynced, at generation 0.
    fn default() -> Self {
        Self {
            generation: 0,
            tiers: None,
            deleted: Deletions::default(),
        }
    }
}

impl<C: Controller> Snapshot<C> {
    /// A synced snapshot holding `tiers`.
    pub fn synced<T>(generation: Generation, tiers: impl IntoIterator<Item = T>) -> Self
    where
        T: CachedTier<Controller = C>,
        C: Controller<Observed = T>,
    {
        let map = tiers
            .into_iter()
            .map(|t| (t.name().to_owned(), t))
            .collect();
        Self {
            generation,
            tiers: Some(Arc::new(map)),
            deleted: Deletions::default(),
        }
    }

    /// The same view with the deletions `deleted`.
    pub fn with_deleted(mut self, deleted: Deletions) -> Self {
        self.deleted = deleted;
        self
    }

    /// The generation at which the lister last saw the Tier `name` deleted, if it did.
    pub fn deleted_at(&self, name: &str) -> Option<Generation> {
        self.deleted.get(name)
    }

    /// Whether the cache behind this snapshot had completed its first list.
    pub fn is_synced(&self) -> bool {
        self.tiers.is_some()
    }

    /// What this snapshot says about the Tier called `name`.
    pub fn observe(&self, name: &str) -> Observed<C> {
        match &self.tiers {
            None => Observed::Unknown,
            Some(tiers) => tiers
                .get(name)
                .cloned()
                .map_or(Observed::Absent, Observed::Present),
        }
    }
}

/// What one desired Tier needs, given what is observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing is known yet: wait for the cache to sync.
    WaitForSync,
    /// The Tier is missing: create it.
    Create,
    /// The Tier exists with other fields: replace them, on the observed resourceVersion.
    Update {
        /// The precondition for the update.
        resource_version: String,
        /// The fields that differ.
        drift: Drift,
    },
    /// The Tier exists exactly as desired.
    InSync,
}

/// Decides what `desired` needs given `observed`. Pure: the ensured fields are compared as the
/// controller says ([`Controller::drift`]).
pub fn decide<S: DesiredTier>(desired: &S, observed: &Observed<S::Controller>) -> Decision {
    match observed {
        Observed::Unknown => Decision::WaitForSync,
        Observed::Absent => Decision::Create,
        Observed::Present(tier) => {
            let drift = S::Controller::drift(desired, tier);
            if drift.is_empty() {
                Decision::InSync
            } else {
                Decision::Update {
                    resource_version: tier.resource_version().to_owned(),
                    drift,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ObservedTier, TierSpec};

    fn present(priority: i64, description: &str) -> Observed {
        Observed::Present(ObservedTier {
            name: "t".into(),
            priority,
            description: description.into(),
            resource_version: "7".into(),
            last_writer: None,
        })
    }

    #[test]
    fn decisions() {
        let want = TierSpec::new("t", 10, "d");
        assert_eq!(decide(&want, &Observed::Unknown), Decision::WaitForSync);
        assert_eq!(decide(&want, &Observed::Absent), Decision::Create);
        assert_eq!(decide(&want, &present(10, "d")), Decision::InSync);
        let update = |fields: &[&'static str]| Decision::Update {
            resource_version: "7".into(),
            drift: Drift::of(fields.iter().map(|f| (*f, true))),
        };
        assert_eq!(decide(&want, &present(11, "d")), update(&["priority"]));
        assert_eq!(
            decide(&want, &present(10, "other")),
            update(&["description"])
        );
        assert_eq!(
            decide(&want, &present(11, "other")),
            update(&["priority", "description"])
        );
        let no_description = TierSpec::new("t", 10, "");
        assert_eq!(decide(&no_description, &present(10, "")), Decision::InSync);
    }

    #[test]
    fn snapshot_observes() {
        assert_eq!(
            Snapshot::<Antrea>::default().observe("t"),
            Observed::Unknown
        );
        let snap = Snapshot::synced(
            3,
            [ObservedTier {
                name: "t".into(),
                priority: 1,
                description: String::new(),
                resource_version: "1".into(),
                last_writer: None,
            }],
        );
        assert!(snap.is_synced());
        assert_eq!(snap.observe("u"), Observed::Absent);
        assert_eq!(snap.observe("t").resource_version(), Some("1"));
        assert_eq!(snap.deleted_at("t"), None);
    }

    #[test]
    fn drift_reads_as_a_list_of_fields() {
        assert_eq!(Drift::default().to_string(), "no field");
        assert_eq!(Drift::of([("a", true), ("b", false)]).to_string(), "a");
        assert_eq!(Drift::of([("a", true), ("b", true)]).to_string(), "a and b");
        let three = Drift::of([("a", true), ("b", true), ("c", true)]);
        assert_eq!(three.to_string(), "a, b and c");
        assert!(three.contains("b") && !three.contains("d"));
    }

    #[test]
    fn deletions_keep_the_latest_generation_and_a_bounded_table() {
        let mut deleted = Deletions::default();
        deleted.record("t", 5);
        deleted.record("t", 3);
        assert_eq!(deleted.get("t"), Some(5));
        let shared = deleted.clone();
        deleted.record("t", 9);
        assert_eq!((shared.get("t"), deleted.get("t")), (Some(5), Some(9)));
        for i in 0..Deletions::MAX as u64 {
            deleted.record(&format!("n{i}"), 10 + i);
        }
        assert_eq!(deleted.len(), Deletions::MAX);
        assert_eq!(deleted.get("t"), None, "the oldest deletion is evicted");
        assert_eq!(deleted.get("n0"), Some(10));
    }
}
