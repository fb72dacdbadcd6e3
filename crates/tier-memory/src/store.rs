//! The store: what etcd holds. Synchronous and clock-free; the cluster wraps it in a lock.
//!
//! Every write that changes an object bumps one global resourceVersion and yields a [`Change`]
//! for the caches. Like kube-apiserver, a write that leaves the object unchanged is a no-op: it
//! succeeds without bumping the resourceVersion and yields no change.

use std::collections::BTreeMap;
use std::sync::Arc;

use tier_core::{CachedTier, Controller, DesiredTier};

use crate::backend::Backend;
use crate::error::ApiError;

/// One change, as a watch would report it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Change<C: Controller> {
    /// The Tier was added or modified.
    Put(C::Observed),
    /// The Tier called this was deleted.
    Delete(String),
}

/// The result of a successful write: the object as stored (or as deleted) and the change to
/// broadcast, `None` for a no-op.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Written<C: Controller> {
    pub(crate) tier: C::Observed,
    pub(crate) change: Option<Change<C>>,
}

/// Tiers by name, with a global resourceVersion counter.
#[derive(Clone, Debug)]
pub(crate) struct Store<C: Controller> {
    tiers: Arc<BTreeMap<String, C::Observed>>,
    revision: u64,
}

impl<C: Controller> Default for Store<C> {
    fn default() -> Self {
        Self {
            tiers: Arc::default(),
            revision: 0,
        }
    }
}

impl<C: Backend> Store<C> {
    /// Every stored Tier by name (cheap to clone).
    pub(crate) fn tiers(&self) -> &Arc<BTreeMap<String, C::Observed>> {
        &self.tiers
    }

    /// The last resourceVersion handed out (0 before any write).
    pub(crate) fn revision(&self) -> u64 {
        self.revision
    }

    /// Creates `spec`, or fails with `AlreadyExists`. No validation: see [`Backend::check_schema`].
    pub(crate) fn create(&mut self, spec: &C::Spec) -> Result<Written<C>, ApiError> {
        if self.tiers.contains_key(spec.name()) {
            return Err(ApiError::AlreadyExists {
                resource: C::RESOURCE,
                name: spec.name().to_owned(),
            });
        }
        Ok(self.put(spec))
    }

    /// Checks an update's preconditions, in kube-apiserver's order: the object exists, the
    /// request carries a resourceVersion, and it is the current one.
    pub(crate) fn precondition(&self, name: &str, resource_version: &str) -> Result<(), ApiError> {
        let resource = C::RESOURCE;
        let current = self.tiers.get(name).ok_or_else(|| ApiError::NotFound {
            resource,
            name: name.to_owned(),
        })?;
        if resource_version.is_empty() {
            return Err(ApiError::Invalid {
                resource,
                name: name.to_owned(),
                field: "metadata.resourceVersion",
                value: "0x0".to_owned(),
                detail: "must be specified for an update".to_owned(),
            });
        }
        if current.resource_version() != resource_version {
            return Err(ApiError::Conflict {
                resource,
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    /// Creates or replaces `spec` unconditionally. A replacement with identical fields is a
    /// no-op.
    pub(crate) fn put(&mut self, spec: &C::Spec) -> Written<C> {
        if let Some(current) = self.tiers.get(spec.name())
            && C::in_sync(spec, current)
        {
            return Written {
                tier: current.clone(),
                change: None,
            };
        }
        self.revision += 1;
        let tier = C::stored(spec, self.revision.to_string());
        Arc::make_mut(&mut self.tiers).insert(spec.name().to_owned(), tier.clone());
        Written {
            change: Some(Change::Put(tier.clone())),
            tier,
        }
    }

    /// Deletes the Tier called `name`, or fails with `NotFound`.
    pub(crate) fn delete(&mut self, name: &str) -> Result<Written<C>, ApiError> {
        let tier =
            Arc::make_mut(&mut self.tiers)
                .remove(name)
                .ok_or_else(|| ApiError::NotFound {
                    resource: C::RESOURCE,
                    name: name.to_owned(),
                })?;
        self.revision += 1;
        Ok(Written {
            tier,
            change: Some(Change::Delete(name.to_owned())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ANTREA_TIERS;
    use tier_core::{Antrea, TierSpec};

    type Store = super::Store<Antrea>;

    fn validate(spec: &TierSpec) -> Result<(), ApiError> {
        Antrea::check_schema(spec)
    }

    fn spec(name: &str, priority: i64) -> TierSpec {
        TierSpec::new(name, priority, "d")
    }

    #[test]
    fn every_change_bumps_the_global_revision() {
        let mut store = Store::default();
        let a = store.create(&spec("a", 1)).unwrap();
        assert_eq!(a.tier.resource_version, "1");
        let b = store.create(&spec("b", 2)).unwrap();
        assert_eq!(b.tier.resource_version, "2");
        let a2 = store.put(&spec("a", 3));
        assert_eq!(a2.tier.resource_version, "3");
        assert!(matches!(a2.change, Some(Change::Put(_))));
        store.delete("b").unwrap();
        assert_eq!(store.revision(), 4);
        assert_eq!(store.tiers().len(), 1);
    }

    #[test]
    fn an_unchanged_put_is_a_no_op() {
        let mut store = Store::default();
        store.create(&spec("a", 1)).unwrap();
        let same = store.put(&spec("a", 1));
        assert_eq!(same.change, None);
        assert_eq!(same.tier.resource_version, "1");
        assert_eq!(store.revision(), 1);
    }

    #[test]
    fn preconditions_in_api_server_order() {
        let mut store = Store::default();
        assert_eq!(
            store.precondition("a", ""),
            Err(ApiError::NotFound {
                resource: ANTREA_TIERS,
                name: "a".into()
            })
        );
        store.create(&spec("a", 1)).unwrap();
        assert!(matches!(
            store.precondition("a", ""),
            Err(ApiError::Invalid {
                field: "metadata.resourceVersion",
                ..
            })
        ));
        assert_eq!(
            store.precondition("a", "7"),
            Err(ApiError::Conflict {
                resource: ANTREA_TIERS,
                name: "a".into()
            })
        );
        assert_eq!(store.precondition("a", "1"), Ok(()));
        assert_eq!(
            store.create(&spec("a", 5)),
            Err(ApiError::AlreadyExists {
                resource: ANTREA_TIERS,
                name: "a".into()
            })
        );
        assert_eq!(
            store.delete("zz"),
            Err(ApiError::NotFound {
                resource: ANTREA_TIERS,
                name: "zz".into()
            })
        );
    }

    #[test]
    fn schema_validation() {
        assert_eq!(validate(&spec("ok", 0)), Ok(()));
        assert_eq!(validate(&spec("ok", 255)), Ok(()));
        let high = validate(&spec("x", 256)).unwrap_err();
        assert_eq!(
            high.to_string(),
            "Tier.crd.antrea.io \"x\" is invalid: spec.priority: Invalid value: 256: \
             spec.priority in body should be less than or equal to 255"
        );
        assert!(validate(&spec("x", -1)).is_err());
        assert!(matches!(
            validate(&spec("Bad_Name", 1)),
            Err(ApiError::Invalid {
                field: "metadata.name",
                ..
            })
        ));
    }
}
