//! Antrea's Tier admission rules, as a pure function: what the `tiervalidator.antrea.io` webhook
//! allows. This is the one home of the rules: tierd's webhook and the in-memory backend call it;
//! the test API server keeps a deliberately independent oracle (`tier-testserver`'s `antrea`
//! module) and a property test checks that the two agree.
//!
//! - [`review`]: one request against the cached Tiers (and, for a DELETE, how many policies
//!   reference the Tier: [`References`], read from a [`ReferenceIndex`]).
//! - [`Reservations`]: priorities admitted but not yet visible in the cache. Reviewing through
//!   [`Reservations::review`] closes the window in which two creates at one priority both pass
//!   a webhook that reads a lagging cache. Only a CREATE review adds to the table, and only below
//!   the priority limit; nothing a review says removes or replaces a reservation, so a caller
//!   that forges reviews (anyone who can reach an unauthenticated webhook) can delay other
//!   users' creates by at most the TTL after it stops, and never a desired Tier's own create.
//! - [`ClaimSet`]: the same window across webhook replicas, each with its own table: the rule of
//!   the priority claims every replica makes in the store they share (the API server), through
//!   the [`PriorityClaims`](crate::PriorityClaims) port.
//! - A desired (system) Tier's priority belongs to it ([`AdmissionPolicy::desire`]): while the
//!   cache does not show that Tier there, a create of another Tier at that priority is denied.
//! - [`Truncated`]: the one way attacker-controlled text (names, users, messages) is shown in a
//!   message or a log line: cut to a bound, with the original length.
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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use crate::spec::{DesiredSet, ValidationRules, check_dns1123_subdomain};

mod claims;

pub use claims::{Claim, ClaimChange, ClaimSet};

/// Who may do what to Tiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionPolicy {
    /// Reserved priorities, the limit of distinct priorities and the `ClusterNetworkPolicy` gate.
    pub rules: ValidationRules,
    /// Names that can never be deleted (the system Tiers).
    pub protected_names: BTreeSet<String>,
    /// The user allowed to change a Tier's priority (the controller's service account).
    pub controller_user: String,
    /// Priorities that belong to a desired Tier (priority -> its name): while the cache does not
    /// show that Tier at that priority, no other Tier may be created there. Empty in Antrea's
    /// policy; [`desire`](Self::desire) fills it.
    pub desired_priorities: BTreeMap<i64, String>,
}

impl AdmissionPolicy {
    /// Antrea's policy: default rules, the six system Tiers protected, `controller_user` exempt
    /// from the priority-update rule.
    pub fn antrea(controller_user: impl Into<String>) -> Self {
        Self {
            rules: ValidationRules::default(),
            protected_names: antrea_reserved_names(),
            controller_user: controller_user.into(),
            desired_priorities: BTreeMap::new(),
        }
    }

    /// The policy of a controller that ensures `desired`: each desired Tier's name is protected
    /// from deletion (as [`protect`](Self::protect)) and its priority belongs to it (see
    /// [`desired_priorities`](Self::desired_priorities)). The one place a webhook learns the
    /// desired set.
    pub fn desire(mut self, desired: &DesiredSet) -> Self {
        for tier in desired.tiers() {
            self.protected_names.insert(tier.name.clone());
            self.desired_priorities
                .insert(tier.priority, tier.name.clone());
        }
        self
    }

    /// The desired Tier `priority` belongs to, if any.
    pub fn owner_of(&self, priority: i64) -> Option<&str> {
        self.desired_priorities.get(&priority).map(String::as_str)
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

impl<'a> Request<'a> {
    /// The name of the Tier the request is about.
    pub fn name(&self) -> &'a str {
        match *self {
            Request::Create { name, .. }
            | Request::Update { name, .. }
            | Request::Delete { name, .. } => name,
        }
    }
}

/// Antrea's answer to a priority change by anyone but its controller, word for word (the rule
/// [`Controller::explain_denial`](crate::Controller::explain_denial) recognises for Antrea).
pub const PRIORITY_UPDATE_DENIED: &str = "update to Tier priority is not allowed";

/// A denied request; the message is Antrea's, word for word, for Antrea's rules.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denial(pub String);

/// Reviews `request` against `existing` Tiers (name, priority), as Antrea's webhook does.
///
/// CREATE checks, in Antrea's order: the 20 distinct priorities, the reserved priorities, 220
/// with the `ClusterNetworkPolicy` gate on, overlap; then (beyond Antrea, only with
/// [`AdmissionPolicy::desire`]) a priority that belongs to a desired Tier the cache does not show
/// there. UPDATE: only the controller user changes a priority. DELETE: reserved names, then
/// ClusterNetworkPolicies, then NetworkPolicies.
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
            let owner = policy.owner_of(priority).filter(|owner| *owner != name);
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
            // The cache does not show the owner there (that would be an overlap): keep its place.
            if let Some(owner) = owner {
                return Err(Denial(format!(
                    "tier {name} priority {priority} is reserved for the system Tier {owner}"
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
                return Err(Denial(PRIORITY_UPDATE_DENIED.to_owned()));
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

/// Who made a [`Reservation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A CREATE review this table admitted (a caller of the webhook; possibly a forger).
    Review,
    /// The process's own writer, after the API server stored the write.
    Writer,
}

/// One admitted priority the cache may not show yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// The Tier that was admitted (or written) at `priority`.
    pub name: String,
    /// The priority it takes.
    pub priority: i64,
    /// Who reserved it.
    pub holder: Holder,
    /// When it was reserved; it lapses a TTL later if the cache never shows the Tier there.
    pub at: Instant,
}

/// A [`Reservations`] configuration that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReservationConfigError {
    /// The TTL is zero or longer than [`Reservations::MAX_TTL`].
    #[error(
        "reservation TTL {ttl:?} is out of range: use more than 0 s and at most {max:?} \
         (default {default:?}); a zero TTL brings back the overlap race, a long one lets a \
         forged review hold a priority that long",
        max = Reservations::MAX_TTL,
        default = Reservations::DEFAULT_TTL
    )]
    TtlOutOfRange {
        /// The TTL given.
        ttl: Duration,
    },
}

/// Priorities admitted (or written by tierd itself) that the Tier cache may not show yet.
///
/// Antrea's webhook checks overlap against its informer cache, so two creates at one priority
/// reviewed before either reaches the cache both pass. Reviewing through [`review`](Self::review)
/// first applies the rules to the cache alone (so a denial for what the cache shows carries
/// Antrea's message), then treats every reservation held by *another* Tier name as taken, with a
/// message that says it is a reservation.
///
/// What may change the table, given that anyone who reaches an unauthenticated webhook can
/// forge a review:
///
/// - A CREATE review that passes reserves its priority, and only while the priorities of the
///   cache and the table together stay under the limit of distinct priorities, so reviews hold
///   at most that many entries. Names must be DNS-1123 subdomains (at most 253 bytes), or the
///   review is denied and changes nothing.
/// - UPDATE and DELETE reviews change nothing: tierd's own priority updates enter through its
///   writer ([`reserve`](Self::reserve)), and a DELETE never removes a reservation (a forged one
///   would erase a legitimate one).
/// - A reservation never replaces another: one entry per priority; a second name at a held
///   priority is denied. The one exception is a desired Tier's own create at its priority
///   ([`AdmissionPolicy::desire`]), which no reservation blocks and which takes the priority over.
/// - A reservation ends when the cache shows its Tier at its priority (from then on the cache
///   itself says the priority is taken) or a TTL after it was made (the write failed or was
///   denied further on). Expiry is computed as elapsed time, so no TTL overflows.
///
/// A reservation never blocks its own name, so a retried create of the same Tier still passes
/// (storage answers `AlreadyExists` if it landed).
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

    /// The longest TTL accepted: twice kube-apiserver's longest webhook timeout (30 s). It bounds
    /// how long a forged CREATE review keeps its priority after the forger stops.
    pub const MAX_TTL: Duration = Duration::from_secs(60);

    /// An empty table whose reservations last `ttl`.
    ///
    /// # Errors
    ///
    /// [`ReservationConfigError::TtlOutOfRange`] unless `0 < ttl <= MAX_TTL`.
    pub fn new(ttl: Duration) -> Result<Self, ReservationConfigError> {
        if ttl.is_zero() || ttl > Self::MAX_TTL {
            return Err(ReservationConfigError::TtlOutOfRange { ttl });
        }
        Ok(Self {
            ttl,
            held: Vec::new(),
        })
    }

    /// How long a reservation lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Records that this process's writer stored `name` at `priority` (the API server accepted
    /// the write), until the cache shows it or the TTL passes. Takes the priority over from any
    /// other holder: storage has the final word.
    ///
    /// Only the process's own writer may call this: it adds entries beyond the limit a review
    /// obeys (at most one per priority, so at most as many as the writer has priorities to write).
    pub fn reserve(&mut self, name: &str, priority: i64, now: Instant) {
        self.hold(name, priority, Holder::Writer, now);
    }

    fn hold(&mut self, name: &str, priority: i64, holder: Holder, now: Instant) {
        let reservation = Reservation {
            name: name.to_owned(),
            priority,
            holder,
            at: now,
        };
        match self.held.iter_mut().find(|r| r.priority == priority) {
            Some(held) => *held = reservation,
            None => self.held.push(reservation),
        }
    }

    /// Drops the reservation a CREATE review of `name` made at `priority`, if it still holds
    /// it: the review was denied after all (another replica's claim, or the claim could not be
    /// made), so the priority must not stay held here for a create that was refused. Never
    /// drops a reservation of tierd's own writer, nor one of another name.
    pub fn release(&mut self, name: &str, priority: i64) {
        self.held
            .retain(|r| !(r.holder == Holder::Review && r.name == name && r.priority == priority));
    }

    /// Drops the reservations that lapsed at `now` and those the cache (`existing`) shows.
    pub fn prune<'a>(&mut self, now: Instant, existing: impl IntoIterator<Item = (&'a str, i64)>) {
        let existing: Vec<(&str, i64)> = existing.into_iter().collect();
        self.settle(now, |name| {
            existing
                .iter()
                .find(|(cached, _)| *cached == name)
                .map(|(_, p)| *p)
        });
    }

    /// [`prune`](Self::prune) with the cache as a lookup (`shown(name)` is the priority the
    /// cache shows for `name`): no copy of the cache. Dropping what the cache shows is safe
    /// whoever asks, since the cache itself then holds the priority; an UPDATE or DELETE review
    /// settles so, because the cache may stop showing a Tier before the next CREATE review.
    pub fn settle(&mut self, now: Instant, shown: impl Fn(&str) -> Option<i64>) {
        let ttl = self.ttl;
        self.held.retain(|r| {
            now.saturating_duration_since(r.at) < ttl && shown(&r.name) != Some(r.priority)
        });
    }

    /// The reservations held, oldest first.
    pub fn held(&self) -> &[Reservation] {
        &self.held
    }

    /// Reviews `request` against `existing` (the cache) and then the reservations of other
    /// Tiers (after pruning at `now`); a CREATE that passes reserves its priority.
    ///
    /// # Errors
    ///
    /// A [`Denial`]: an invalid name; the [`review`](fn@review) of the cache; a priority another
    /// Tier's reservation holds ("priority 42 is reserved by a create of Tier x admitted 120 ms
    /// ago, not yet visible"); or the limit of distinct priorities counting reservations.
    pub fn review<'a>(
        &mut self,
        policy: &AdmissionPolicy,
        request: &Request<'_>,
        existing: impl IntoIterator<Item = (&'a str, i64)>,
        now: Instant,
    ) -> Result<(), Denial> {
        let name = request.name();
        if let Err(why) = check_dns1123_subdomain(name) {
            return Err(invalid_name(name, &why));
        }
        let existing: Vec<(&str, i64)> = existing.into_iter().collect();
        self.prune(now, existing.iter().copied());
        // The cache first: for what it shows, Antrea's own message.
        review(policy, request, existing.iter().copied())?;
        let Request::Create { name, priority } = *request else {
            // UPDATE and DELETE change nothing here, whoever claims to send them.
            return Ok(());
        };
        if policy.owner_of(priority) == Some(name) {
            // A desired Tier's own create: no reservation blocks it.
            self.hold(name, priority, Holder::Review, now);
            return Ok(());
        }
        let others = || self.held.iter().filter(|r| r.name != name);
        if let Some(held) = others().find(|r| r.priority == priority) {
            let ago = now.saturating_duration_since(held.at).as_millis();
            let (by, done) = match held.holder {
                Holder::Review => ("a create of", "admitted"),
                Holder::Writer => ("tierd's own write of", "stored"),
            };
            return Err(Denial(format!(
                "tier {name} priority {priority} is reserved by {by} Tier {} {done} {ago} ms ago, \
                 not yet visible",
                held.name
            )));
        }
        let cached: BTreeSet<i64> = existing.iter().map(|(_, p)| *p).collect();
        let mut priorities = cached.clone();
        priorities.extend(others().map(|r| r.priority));
        let max = policy.rules.max_distinct_priorities;
        if priorities.len() >= max {
            let pending = priorities.len().saturating_sub(cached.len());
            return Err(Denial(format!(
                "maximum number of Tiers supported: {max} ({pending} of them admitted but not \
                 yet visible)"
            )));
        }
        self.hold(name, priority, Holder::Review, now);
        Ok(())
    }
}

impl Default for Reservations {
    fn default() -> Self {
        Self {
            ttl: Self::DEFAULT_TTL,
            held: Vec::new(),
        }
    }
}

/// The denial of a request whose Tier name is not a DNS-1123 subdomain (kube-apiserver never
/// sends one: it validates names before admission).
fn invalid_name(name: &str, why: &str) -> Denial {
    Denial(format!(
        "tier name {} is not a valid DNS-1123 subdomain: {why}",
        Truncated::new(name)
    ))
}

/// Text from a caller, shown in a message or log line at most [`max`](Self::with_max) bytes
/// long (default [`DEFAULT_MAX`](Self::DEFAULT_MAX)), control characters escaped, and when cut,
/// followed by a marker with the original length: `aaaa…[truncated, 2097152 bytes]`.
///
/// ```
/// use tier_core::admission::Truncated;
///
/// assert_eq!(Truncated::new("mine").to_string(), "mine");
/// let long = "a".repeat(300);
/// assert_eq!(
///     Truncated::with_max(&long, 4).to_string(),
///     "aaaa…[truncated, 300 bytes]"
/// );
/// assert_eq!(Truncated::new("a\nb").to_string(), "a\\nb");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Truncated<'a> {
    text: &'a str,
    max: usize,
}

impl<'a> Truncated<'a> {
    /// The default bound: 256 bytes, enough for any valid object name (253).
    pub const DEFAULT_MAX: usize = 256;

    /// `text`, cut at [`DEFAULT_MAX`](Self::DEFAULT_MAX) bytes.
    pub fn new(text: &'a str) -> Self {
        Self::with_max(text, Self::DEFAULT_MAX)
    }

    /// `text`, cut at `max` bytes (at a character boundary at or below it).
    pub fn with_max(text: &'a str, max: usize) -> Self {
        Self { text, max }
    }

    /// Whether the text is longer than the bound.
    pub fn is_cut(&self) -> bool {
        self.text.len() > self.max
    }
}

impl fmt::Display for Truncated<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cut = (0..=self.max.min(self.text.len()))
            .rev()
            .find(|&i| self.text.is_char_boundary(i))
            .unwrap_or(0);
        let kept = self.text.get(..cut).unwrap_or_default();
        for c in kept.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                fmt::Write::write_char(f, c)?;
            }
        }
        if self.is_cut() {
            write!(f, "…[truncated, {} bytes]", self.text.len())?;
        }
        Ok(())
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

    fn ten_seconds() -> Reservations {
        Reservations::new(Duration::from_secs(10)).unwrap()
    }

    fn update<'a>(name: &'a str, old: i64, new: i64, user: &'a str) -> Request<'a> {
        Request::Update {
            name,
            old_priority: old,
            new_priority: new,
            user,
        }
    }

    /// Antrea's six, `absent` left out.
    fn system_without(absent: &str) -> Vec<(&'static str, i64)> {
        [
            ("baseline", 253),
            ("application", 250),
            ("platform", 200),
            ("networkops", 150),
            ("securityops", 100),
            ("emergency", 50),
        ]
        .into_iter()
        .filter(|(n, _)| *n != absent)
        .collect()
    }

    fn tierd() -> AdmissionPolicy {
        policy().desire(&DesiredSet::antrea())
    }

    #[test]
    fn a_release_drops_only_the_reviews_own_reservation() {
        let p = policy();
        let t0 = Instant::now();
        let mut table = ten_seconds();
        assert_eq!(table.review(&p, &create("a", 10), [], t0), Ok(()));
        table.reserve("w", 11, t0);
        // Neither another name nor another priority, nor the writer's entry, goes.
        table.release("b", 10);
        table.release("a", 12);
        table.release("w", 11);
        assert_eq!(table.held().len(), 2);
        table.release("a", 10);
        assert_eq!(table.held().len(), 1);
        assert_eq!(table.held()[0].name, "w");
        // The priority is free again for another name at once.
        assert_eq!(table.review(&p, &create("b", 10), [], t0), Ok(()));
    }

    #[test]
    fn reservations_close_the_overlap_window() {
        let p = policy();
        let t0 = Instant::now();
        let mut table = ten_seconds();
        assert_eq!(table.review(&p, &create("a", 10), [], t0), Ok(()));
        // The cache does not show `a` yet: a second create at 10 is denied, and says why.
        let ms = Duration::from_millis(120);
        assert_eq!(
            table
                .review(&p, &create("b", 10), [], t0 + ms)
                .unwrap_err()
                .0,
            "tier b priority 10 is reserved by a create of Tier a admitted 120 ms ago, not yet \
             visible"
        );
        // The same name is not blocked by its own reservation (a retried create).
        assert_eq!(table.review(&p, &create("a", 10), [], t0), Ok(()));
        // Once the cache shows `a` at 10, the reservation is gone and the cache decides, with
        // Antrea's message.
        table.prune(t0, [("a", 10)]);
        assert!(table.held().is_empty());
        assert_eq!(
            table
                .review(&p, &create("b", 10), [("a", 10)], t0)
                .unwrap_err()
                .0,
            "tier b priority 10 overlaps with existing Tier"
        );
        // A reservation that never shows lapses after the TTL.
        table.reserve("c", 11, t0);
        let later = t0 + Duration::from_secs(10);
        assert_eq!(
            table
                .review(&p, &create("d", 11), [], later - Duration::from_millis(1))
                .unwrap_err()
                .0,
            "tier d priority 11 is reserved by tierd's own write of Tier c stored 9999 ms ago, \
             not yet visible"
        );
        assert_eq!(table.review(&p, &create("e", 11), [], later), Ok(()));
    }

    #[test]
    fn reservations_count_toward_the_limit_and_say_so() {
        let p = policy();
        let t0 = Instant::now();
        let mut table = ten_seconds();
        let nineteen: Vec<(String, i64)> = (0..19).map(|i| (format!("t{i}"), i)).collect();
        let existing = || nineteen.iter().map(|(n, p)| (n.as_str(), *p));
        assert_eq!(table.review(&p, &create("x", 100), existing(), t0), Ok(()));
        assert_eq!(
            table
                .review(&p, &create("y", 101), existing(), t0)
                .unwrap_err()
                .0,
            "maximum number of Tiers supported: 20 (1 of them admitted but not yet visible)"
        );
        // A denied request reserves nothing.
        let mut table = ten_seconds();
        assert!(table.review(&p, &create("x", 254), [], t0).is_err());
        assert!(table.held().is_empty());
    }

    #[test]
    fn a_forged_update_reserves_nothing() {
        // Issue 17: an UPDATE claiming the controller's user "moves" a Tier to 150.
        let p = tierd();
        let t0 = Instant::now();
        let mut table = ten_seconds();
        let system = system_without("");
        let forged = update("evil", 1, 150, CONTROLLER);
        assert_eq!(
            table.review(&p, &forged, system.iter().copied(), t0),
            Ok(())
        );
        assert!(table.held().is_empty(), "{:?}", table.held());
        // networkops is deleted: its create passes, nobody else's does.
        let without = system_without("networkops");
        assert_eq!(
            table.review(&p, &create("networkops", 150), without.iter().copied(), t0),
            Ok(())
        );
        // Fifteen forged UPDATEs do not fill the 20-priority limit.
        let mut table = Reservations::default();
        let without = system_without("emergency");
        for i in 0..15 {
            let name = format!("forged-{i}");
            let forged = update(&name, 1, 100 + i, CONTROLLER);
            assert_eq!(
                table.review(&p, &forged, without.iter().copied(), t0),
                Ok(())
            );
        }
        assert!(table.held().is_empty());
        assert_eq!(
            table.review(&p, &create("emergency", 50), without.iter().copied(), t0),
            Ok(())
        );
        assert_eq!(
            table.review(&p, &create("mine", 42), without.iter().copied(), t0),
            Ok(())
        );
    }

    #[test]
    fn deletes_and_updates_never_remove_a_reservation() {
        let p = policy();
        let t0 = Instant::now();
        let mut table = ten_seconds();
        assert_eq!(table.review(&p, &create("mine", 42), [], t0), Ok(()));
        table.reserve("baseline", 253, t0);
        let held = table.held().to_vec();
        let forged = [
            Request::Delete {
                name: "mine",
                references: References::NONE,
            },
            Request::Delete {
                name: "baseline",
                references: References::NONE,
            },
            update("mine", 42, 43, CONTROLLER),
            update("baseline", 253, 1, CONTROLLER),
            update("mine", 42, 42, "alice"),
        ];
        for request in &forged {
            let _ = table.review(&p, request, [], t0);
            assert_eq!(table.held(), held, "{request:?}");
        }
        // A create of the same name at another priority does not replace it either.
        assert_eq!(table.review(&p, &create("mine", 43), [], t0), Ok(()));
        assert!(table.review(&p, &create("other", 42), [], t0).is_err());
        assert!(table.review(&p, &create("other", 253), [], t0).is_err());
    }

    #[test]
    fn a_desired_priority_belongs_to_its_tier() {
        let p = tierd();
        let t0 = Instant::now();
        let mut table = ten_seconds();
        let without = system_without("networkops");
        let existing = || without.iter().copied();
        // A CREATE-only forger in a loop never takes 150 while networkops is missing.
        for i in 0..100 {
            let name = format!("squatter-{i}");
            assert_eq!(
                table
                    .review(&p, &create(&name, 150), existing(), t0)
                    .unwrap_err()
                    .0,
                format!("tier {name} priority 150 is reserved for the system Tier networkops")
            );
        }
        assert!(table.held().is_empty());
        // Forged creates filling every other free priority do not block networkops' own.
        for i in 0..20 {
            let name = format!("filler-{i}");
            let _ = table.review(&p, &create(&name, i), existing(), t0);
        }
        assert_eq!(table.held().len(), 20 - 5, "{:?}", table.held());
        assert_eq!(
            table.review(&p, &create("networkops", 150), existing(), t0),
            Ok(())
        );
        // Once the cache shows networkops, a create at 150 is Antrea's overlap again.
        let system = system_without("");
        assert_eq!(
            table
                .review(&p, &create("x", 150), system.iter().copied(), t0)
                .unwrap_err()
                .0,
            "tier x priority 150 overlaps with existing Tier"
        );
        // Not in Antrea's own policy (no desired set): 150 is free there.
        assert_eq!(review(&policy(), &create("x", 150), existing()), Ok(()));
    }

    #[test]
    fn the_table_stays_bounded_under_many_forged_names() {
        let p = policy();
        let t0 = Instant::now();
        let mut table = ten_seconds();
        let mut admitted = 0;
        for i in 0..100_000_i64 {
            let name = format!("forged-{i}");
            admitted += usize::from(table.review(&p, &create(&name, i), [], t0).is_ok());
        }
        assert_eq!(admitted, 20);
        assert_eq!(table.held().len(), 20);
        // Names that are not DNS-1123 subdomains are refused and change nothing.
        let mut table = Reservations::default();
        let long = "a".repeat(2 << 20);
        for name in ["", "UPPER", "a..b", "-a", long.as_str()] {
            let denial = table.review(&p, &create(name, 7), [], t0).unwrap_err().0;
            assert!(
                denial.contains("is not a valid DNS-1123 subdomain"),
                "{denial}"
            );
            assert!(denial.len() < 400, "{}", denial.len());
        }
        assert!(table.held().is_empty());
        let long = format!("tier name {}", Truncated::new(&"a".repeat(2 << 20)));
        assert!(long.ends_with("…[truncated, 2097152 bytes]"), "{long}");
    }

    #[test]
    fn every_ttl_is_validated_and_none_overflows() {
        for ttl in [
            Duration::ZERO,
            Reservations::MAX_TTL + Duration::from_nanos(1),
            Duration::MAX,
        ] {
            let error = Reservations::new(ttl).unwrap_err();
            assert_eq!(error, ReservationConfigError::TtlOutOfRange { ttl });
            assert!(error.to_string().contains("at most 60s"), "{error}");
        }
        let seven = Duration::from_secs(7);
        assert_eq!(Reservations::new(seven).unwrap().ttl(), seven);
        let mut table = Reservations::new(Reservations::MAX_TTL).unwrap();
        assert_eq!(table.ttl(), Reservations::MAX_TTL);
        let t0 = Instant::now();
        table.reserve("a", 1, t0);
        // A clock that went backwards, or far forwards: no panic.
        table.prune(t0 - Duration::from_secs(1), []);
        assert_eq!(table.held().len(), 1);
        table.prune(t0 + Duration::from_secs(1 << 40), []);
        assert!(table.held().is_empty());
    }

    #[test]
    fn a_fixed_reference_index_is_synced_and_counts_what_it_was_given() {
        let index =
            std::collections::BTreeMap::from([("app".to_owned(), 3), ("none".to_owned(), 0)]);
        assert_eq!(index.references("app"), Some(3));
        assert_eq!(index.references("none"), Some(0));
        // Not in the map: synced, and nothing references it (a DELETE may go ahead).
        assert_eq!(index.references("other"), Some(0));
        let p = policy();
        let counted = References {
            cluster_network_policies: index.references("app").unwrap_or(0),
            network_policies: 0,
        };
        assert!(review(&p, &delete("app", counted), []).is_err());
    }

    #[test]
    fn truncated_text_is_bounded_and_says_how_long_it_was() {
        assert_eq!(Truncated::new("networkops").to_string(), "networkops");
        // Exactly at the bound is whole; one byte over is cut.
        let at = "a".repeat(Truncated::DEFAULT_MAX);
        assert!(!Truncated::new(&at).is_cut());
        assert_eq!(Truncated::new(&at).to_string(), at);
        let over = "a".repeat(Truncated::DEFAULT_MAX + 1);
        assert!(Truncated::new(&over).is_cut());
        assert_eq!(
            Truncated::new(&over).to_string(),
            format!("{at}…[truncated, 257 bytes]")
        );
        let name = "é".repeat(200);
        let shown = Truncated::new(&name).to_string();
        assert!(shown.starts_with(&"é".repeat(128)), "{shown}");
        assert!(shown.ends_with("…[truncated, 400 bytes]"), "{shown}");
        assert_eq!(
            Truncated::with_max("ab\u{1b}[2J", 8).to_string(),
            "ab\\u{1b}[2J"
        );
        assert!(!Truncated::new("x").is_cut());
    }
}
