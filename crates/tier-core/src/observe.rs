//! What the cache says about Tiers, and the pure decision for one (desired, observed) pair.

use std::collections::BTreeMap;
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

/// A consistent view of the observed Tier set at one generation.
///
/// `tiers` is `None` until the cache has completed its first list. Cloning is cheap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot<C: Controller = Antrea> {
    /// The generation this view was taken at.
    pub generation: Generation,
    /// Every observed Tier by name, or `None` before the first complete list.
    pub tiers: Option<Arc<BTreeMap<String, C::Observed>>>,
}

impl<C: Controller> Default for Snapshot<C> {
    /// Unsynced, at generation 0.
    fn default() -> Self {
        Self {
            generation: 0,
            tiers: None,
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
        }
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
    },
    /// The Tier exists exactly as desired.
    InSync,
}

/// Decides what `desired` needs given `observed`. Pure: the ensured fields are compared as the
/// controller says ([`Controller::in_sync`]).
pub fn decide<S: DesiredTier>(desired: &S, observed: &Observed<S::Controller>) -> Decision {
    match observed {
        Observed::Unknown => Decision::WaitForSync,
        Observed::Absent => Decision::Create,
        Observed::Present(tier) if S::Controller::in_sync(desired, tier) => Decision::InSync,
        Observed::Present(tier) => Decision::Update {
            resource_version: tier.resource_version().to_owned(),
        },
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
        let update = Decision::Update {
            resource_version: "7".into(),
        };
        assert_eq!(decide(&want, &present(11, "d")), update);
        assert_eq!(decide(&want, &present(10, "other")), update);
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
    }
}
