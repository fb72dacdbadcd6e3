//! Antrea's Tier admission rules, as a pure function: what the `tiervalidator.antrea.io` webhook
//! allows. This is the one home of the rules: tierd's webhook and the in-memory backend call it;
//! the test API server keeps a deliberately independent oracle (`tier-testserver`'s `antrea`
//! module) and a property test checks that the two agree.
//!
//! - [`review`]: one request against the cached Tiers (and, for a DELETE, how many policies
//!   reference the Tier: [`References`], read from a [`ReferenceIndex`]).
//! - [`Reservations`]: priorities admitted but not yet visible in the cache. Reviewing through
//!   [`Reservations::review`] closes the window in which two creates at one priority both pass
//!   a webhook that reads a lagging cache.
//!
//! ```
//! use tier_core::admission::{AdmissionPolicy, References, Request, review};
//!
//! let policy = AdmissionPolicy::antrea("system:serviceaccount:kube-system:antrea-controller");
//! let existing = [("baseline", 253)];
//! let denied = review(&policy, &Request::Create { name: "mine", priority: 253 }, existing);
//! assert_eq!(
//!     denied.unwrap_err().to_string(),
//!     "tier mine priority 253 overlaps with existing Tier"
//! );
//! let used = References { cluster_network_policies: 2, network_policies: 0 };
//! let denied = review(&policy, &Request::Delete { name: "mine", references: used }, []);
//! assert_eq!(
//!     denied.unwrap_err().to_string(),
//!     "tier mine is referenced by 2 Antrea ClusterNetworkPolicies"
//! );
//! ```

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::spec::{DesiredSet, ValidationRules};

/// Who may do what to Tiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionPolicy {
    /// Reserved priorities, the limit of distinct priorities and the `ClusterNetworkPolicy` gate.
    pub rules: ValidationRules,
    /// Names that can never be deleted (the system Tiers).
    pub protected_names: BTreeSet<String>,
    /// The user allowed to change a Tier's priority (the controller's service account).
    pub controller_user: String,
}

impl AdmissionPolicy {
    /// Antrea's policy: default rules, the six system Tiers protected, `controller_user` exempt
    /// from the priority-update rule.
    pub fn antrea(controller_user: impl Into<String>) -> Self {
        Self {
            rules: ValidationRules::default(),
            protected_names: antrea_reserved_names(),
            controller_user: controller_user.into(),
        }
    }

    /// Also protects `names` from deletion. Antrea's six stay protected whatever is added: a
    /// custom desired set adds to them, it never replaces them.
    pub fn protect<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.protected_names
            .extend(names.into_iter().map(Into::into));
        self
    }

    /// The same policy with `rules` (for example with the `ClusterNetworkPolicy` gate on).
    pub fn with_rules(mut self, rules: ValidationRules) -> Self {
        self.rules = rules;
        self
    }
}

/// Antrea's `reservedTierNames`: the six system Tiers, which Antrea never lets anyone delete.
pub fn antrea_reserved_names() -> BTreeSet<String> {
    DesiredSet::antrea()
        .tiers()
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

/// How many Antrea policies name a Tier in their raw `spec.tier`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct References {
    /// Antrea ClusterNetworkPolicies (`clusternetworkpolicies.crd.antrea.io`).
    pub cluster_network_policies: usize,
    /// Antrea NetworkPolicies (`networkpolicies.crd.antrea.io`), in every namespace.
    pub network_policies: usize,
}

impl References {
    /// No policy references the Tier.
    pub const NONE: Self = Self {
        cluster_network_policies: 0,
        network_policies: 0,
    };
}

/// A cache of policies indexed by their raw `spec.tier`: the port a DELETE review reads.
pub trait ReferenceIndex: Send + Sync {
    /// How many cached policies have `spec.tier == tier`, or `None` while the cache has not
    /// completed its first list (then nobody knows, and a DELETE must not be allowed).
    fn references(&self, tier: &str) -> Option<usize>;
}

/// A synced index holding fixed counts (for tests, benchmarks, and embedders that know no policy
/// can exist); a Tier not in the map has no references.
impl ReferenceIndex for std::collections::BTreeMap<String, usize> {
    fn references(&self, tier: &str) -> Option<usize> {
        Some(self.get(tier).copied().unwrap_or(0))
    }
}

/// A Tier write to review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// Create a Tier.
    Create {
        /// Its name.
        name: &'a str,
        /// Its priority.
        priority: i64,
    },
    /// Update a Tier.
    Update {
        /// Its name.
        name: &'a str,
        /// The stored priority.
        old_priority: i64,
        /// The requested priority.
        new_priority: i64,
        /// The requesting user.
        user: &'a str,
    },
    /// Delete a Tier.
    Delete {
        /// Its name.
        name: &'a str,
        /// The policies that still name it in `spec.tier`.
        references: References,
    },
}

/// A denied request; the message is Antrea's, word for word.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denial(pub String);

/// Reviews `request` against `existing` Tiers (name, priority), as Antrea's webhook does.
///
/// CREATE checks, in Antrea's order: the 20 distinct priorities, the reserved priorities, 220
/// with the `ClusterNetworkPolicy` gate on, overlap. UPDATE: only the controller user changes a
/// priority. DELETE: reserved names, then ClusterNetworkPolicies, then NetworkPolicies.
///
/// # Errors
///
/// A [`Denial`] carrying the message the webhook would return.
pub fn review<'a>(
    policy: &AdmissionPolicy,
    request: &Request<'_>,
    existing: impl IntoIterator<Item = (&'a str, i64)>,
) -> Result<(), Denial> {
    match *request {
        Request::Create { name, priority } => {
            let mut priorities = BTreeSet::new();
            let mut overlaps = false;
            for (_, p) in existing {
                priorities.insert(p);
                overlaps |= p == priority;
            }
            let max = policy.rules.max_distinct_priorities;
            if priorities.len() >= max {
                return Err(Denial(format!("maximum number of Tiers supported: {max}")));
            }
            if policy.rules.reserved_priorities.contains(&priority) {
                return Err(Denial(format!(
                    "tier {name} priority {priority} is reserved"
                )));
            }
            if policy.rules.reserved_for_cluster_network_policy(priority) {
                return Err(Denial(format!(
                    "tier {name} priority {priority} is reserved for upstream \
                     ClusterNetworkPolicy when the ClusterNetworkPolicy feature gate is enabled; \
                     choose a different priority"
                )));
            }
            if overlaps {
                return Err(Denial(format!(
                    "tier {name} priority {priority} overlaps with existing Tier"
                )));
            }
            Ok(())
        }
        Request::Update {
            old_priority,
            new_priority,
            user,
            ..
        } => {
            if old_priority != new_priority && user != policy.controller_user {
                return Err(Denial("update to Tier priority is not allowed".to_owned()));
            }
            Ok(())
        }
        Request::Delete { name, references } => {
            if policy.protected_names.contains(name) {
                return Err(Denial(format!("cannot delete reserved tier {name}")));
            }
            if references.cluster_network_policies > 0 {
                return Err(Denial(format!(
                    "tier {name} is referenced by {} Antrea ClusterNetworkPolicies",
                    references.cluster_network_policies
                )));
            }
            if references.network_policies > 0 {
                return Err(Denial(format!(
                    "tier {name} is referenced by {} Antrea NetworkPolicies",
                    references.network_policies
                )));
            }
            Ok(())
        }
    }
}

/// One admitted priority the cache may not show yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// The Tier that was admitted (or written) at `priority`.
    pub name: String,
    /// The priority it takes.
    pub priority: i64,
    /// When the reservation lapses if the cache never shows the Tier there.
    pub expires: Instant,
}

/// Priorities admitted (or written by tierd itself) that the Tier cache may not show yet.
///
/// Antrea's webhook checks overlap against its informer cache, so two creates at one priority
/// reviewed before either reaches the cache both pass. Reviewing through [`review`](Self::review)
/// counts every reservation held by *another* Tier name as an existing Tier at that priority, and
/// reserves what it admits: a CREATE's priority, or the new priority of an UPDATE that moves a
/// Tier. A reservation ends when the cache shows its Tier at its priority (from then on the
/// cache itself says the priority is taken) or after the TTL (the write failed or was denied
/// further on, so the priority is free again). A reservation never blocks its own name, so a
/// retried create of the same Tier still passes (storage answers `AlreadyExists` if it landed).
///
/// Pure: time comes in as values. Share one table, behind a lock, between every reviewer of one
/// process and the process's own writer.
#[derive(Clone, Debug)]
pub struct Reservations {
    ttl: Duration,
    held: Vec<Reservation>,
}

impl Reservations {
    /// The default time a reservation lasts without the cache showing its Tier: long enough for
    /// kube-apiserver to store an admitted write and for the watch to deliver it.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

    /// An empty table whose reservations last `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            held: Vec::new(),
        }
    }

    /// How long a reservation lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Reserves `priority` for `name` until `now + ttl` (or until the cache shows it). Replaces
    /// an earlier reservation of the same name.
    pub fn reserve(&mut self, name: &str, priority: i64, now: Instant) {
        self.held.retain(|r| r.name != name);
        self.held.push(Reservation {
            name: name.to_owned(),
            priority,
            expires: now + self.ttl,
        });
    }

    /// Drops the reservations that lapsed at `now` and those the cache (`existing`) shows.
    pub fn prune<'a>(&mut self, now: Instant, existing: impl IntoIterator<Item = (&'a str, i64)>) {
        let existing: Vec<(&str, i64)> = existing.into_iter().collect();
        self.held.retain(|r| {
            r.expires > now
                && !existing
                    .iter()
                    .any(|(name, p)| *name == r.name && *p == r.priority)
        });
    }

    /// The reservations held, oldest first.
    pub fn held(&self) -> &[Reservation] {
        &self.held
    }

    /// Reviews `request` against `existing` plus the reservations of other Tiers (after
    /// pruning at `now`), and reserves what it admits.
    ///
    /// # Errors
    ///
    /// The [`Denial`] of [`review`](fn@review).
    pub fn review<'a>(
        &mut self,
        policy: &AdmissionPolicy,
        request: &Request<'_>,
        existing: impl IntoIterator<Item = (&'a str, i64)>,
        now: Instant,
    ) -> Result<(), Denial> {
        let existing: Vec<(&str, i64)> = existing.into_iter().collect();
        self.prune(now, existing.iter().copied());
        let name = match *request {
            Request::Create { name, .. }
            | Request::Update { name, .. }
            | Request::Delete { name, .. } => name,
        };
        let others = self
            .held
            .iter()
            .filter(|r| r.name != name)
            .map(|r| (r.name.as_str(), r.priority));
        review(policy, request, existing.iter().copied().chain(others))?;
        match *request {
            Request::Create { name, priority } => self.reserve(name, priority, now),
            Request::Update {
                name,
                old_priority,
                new_priority,
                ..
            } if old_priority != new_priority => self.reserve(name, new_priority, now),
            Request::Delete { name, .. } => self.held.retain(|r| r.name != name),
            Request::Update { .. } => {}
        }
        Ok(())
    }
}

impl Default for Reservations {
    fn default() -> Self {
        Self::new(Self::DEFAULT_TTL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROLLER: &str = "system:serviceaccount:kube-system:tierd";

    fn policy() -> AdmissionPolicy {
        AdmissionPolicy::antrea(CONTROLLER)
    }

    fn create(name: &str, priority: i64) -> Request<'_> {
        Request::Create { name, priority }
    }

    #[test]
    fn create_rules_in_order() {
        let p = policy();
        assert_eq!(review(&p, &create("a", 10), []), Ok(()));
        assert_eq!(
            review(&p, &create("a", 254), []).unwrap_err().0,
            "tier a priority 254 is reserved"
        );
        assert_eq!(
            review(&p, &create("a", 10), [("b", 10)]).unwrap_err().0,
            "tier a priority 10 overlaps with existing Tier"
        );
        // Re-creating an existing Tier is an overlap, as in the real webhook.
        assert_eq!(
            review(&p, &create("a", 10), [("a", 10)]).unwrap_err().0,
            "tier a priority 10 overlaps with existing Tier"
        );
        let twenty: Vec<(String, i64)> = (0..20).map(|i| (format!("t{i}"), i)).collect();
        let existing = twenty.iter().map(|(n, p)| (n.as_str(), *p));
        assert_eq!(
            review(&p, &create("a", 100), existing).unwrap_err().0,
            "maximum number of Tiers supported: 20"
        );
    }

    #[test]
    fn only_the_controller_changes_priorities() {
        let p = policy();
        let update = |user| Request::Update {
            name: "baseline",
            old_priority: 1,
            new_priority: 253,
            user,
        };
        assert_eq!(review(&p, &update(CONTROLLER), []), Ok(()));
        assert_eq!(
            review(&p, &update("alice"), []).unwrap_err().0,
            "update to Tier priority is not allowed"
        );
        let description_only = Request::Update {
            name: "baseline",
            old_priority: 1,
            new_priority: 1,
            user: "alice",
        };
        assert_eq!(review(&p, &description_only, []), Ok(()));
    }

    #[test]
    fn system_tiers_cannot_be_deleted() {
        let p = policy();
        assert_eq!(
            review(&p, &delete("emergency", References::NONE), [])
                .unwrap_err()
                .0,
            "cannot delete reserved tier emergency"
        );
        assert_eq!(review(&p, &delete("mine", References::NONE), []), Ok(()));
    }

    fn delete(name: &str, references: References) -> Request<'_> {
        Request::Delete { name, references }
    }

    #[test]
    fn referenced_tiers_cannot_be_deleted_in_antreas_order() {
        let p = policy();
        let both = References {
            cluster_network_policies: 2,
            network_policies: 3,
        };
        // Reserved name first, then ClusterNetworkPolicies, then NetworkPolicies.
        assert_eq!(
            review(&p, &delete("baseline", both), []).unwrap_err().0,
            "cannot delete reserved tier baseline"
        );
        assert_eq!(
            review(&p, &delete("mine", both), []).unwrap_err().0,
            "tier mine is referenced by 2 Antrea ClusterNetworkPolicies"
        );
        let namespaced = References {
            network_policies: 1,
            ..References::NONE
        };
        assert_eq!(
            review(&p, &delete("mine", namespaced), []).unwrap_err().0,
            "tier mine is referenced by 1 Antrea NetworkPolicies"
        );
    }

    #[test]
    fn custom_names_add_to_antreas_six() {
        let p = policy().protect(["mine"]);
        for name in ["mine", "application", "emergency"] {
            assert!(
                review(&p, &delete(name, References::NONE), []).is_err(),
                "{name}"
            );
        }
    }

    #[test]
    fn the_gate_reserves_220_for_creates_only_after_the_reserved_set() {
        let gated = policy().with_rules(ValidationRules {
            cluster_network_policy: true,
            ..ValidationRules::default()
        });
        assert_eq!(
            review(&gated, &create("t", 220), [("other", 220)])
                .unwrap_err()
                .0,
            "tier t priority 220 is reserved for upstream ClusterNetworkPolicy when the \
             ClusterNetworkPolicy feature gate is enabled; choose a different priority"
        );
        assert_eq!(review(&policy(), &create("t", 220), []), Ok(()));
        // A Tier already at 220 may stay and keep its description changes.
        let keep = Request::Update {
            name: "t",
            old_priority: 220,
            new_priority: 220,
            user: "alice",
        };
        assert_eq!(review(&gated, &keep, []), Ok(()));
        assert_eq!(review(&gated, &delete("t", References::NONE), []), Ok(()));
    }

    #[test]
    fn reservations_close_the_overlap_window() {
        let p = policy();
        let t0 = Instant::now();
        let mut table = Reservations::new(Duration::from_secs(10));
        assert_eq!(table.review(&p, &create("a", 10), [], t0), Ok(()));
        // The cache does not show `a` yet: a second create at 10 is still denied.
        assert_eq!(
            table.review(&p, &create("b", 10), [], t0).unwrap_err().0,
            "tier b priority 10 overlaps with existing Tier"
        );
        // The same name is not blocked by its own reservation (a retried create).
        assert_eq!(table.review(&p, &create("a", 10), [], t0), Ok(()));
        // Once the cache shows `a` at 10, the reservation is gone and the cache decides.
        table.prune(t0, [("a", 10)]);
        assert!(table.held().is_empty());
        // A reservation that never shows lapses after the TTL.
        table.reserve("c", 11, t0);
        let later = t0 + Duration::from_secs(10);
        assert_eq!(
            table
                .review(&p, &create("d", 11), [], later - Duration::from_millis(1))
                .unwrap_err()
                .0,
            "tier d priority 11 overlaps with existing Tier"
        );
        assert_eq!(table.review(&p, &create("e", 11), [], later), Ok(()));
    }

    #[test]
    fn reservations_count_toward_the_limit_and_updates_reserve() {
        let p = policy();
        let t0 = Instant::now();
        let mut table = Reservations::default();
        let nineteen: Vec<(String, i64)> = (0..19).map(|i| (format!("t{i}"), i)).collect();
        let existing = || nineteen.iter().map(|(n, p)| (n.as_str(), *p));
        assert_eq!(table.review(&p, &create("x", 100), existing(), t0), Ok(()));
        assert_eq!(
            table
                .review(&p, &create("y", 101), existing(), t0)
                .unwrap_err()
                .0,
            "maximum number of Tiers supported: 20"
        );
        let mut table = Reservations::default();
        let moved = Request::Update {
            name: "baseline",
            old_priority: 1,
            new_priority: 253,
            user: CONTROLLER,
        };
        assert_eq!(table.review(&p, &moved, [("baseline", 1)], t0), Ok(()));
        assert_eq!(
            table
                .review(&p, &create("x", 253), [("baseline", 1)], t0)
                .unwrap_err()
                .0,
            "tier x priority 253 overlaps with existing Tier"
        );
        // A denied request reserves nothing.
        let mut table = Reservations::default();
        assert!(table.review(&p, &create("x", 254), [], t0).is_err());
        assert!(table.held().is_empty());
    }
}
