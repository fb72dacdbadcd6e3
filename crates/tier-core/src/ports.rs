//! The ports: what the core needs from the outside world, as async traits named by capability.
//!
//! A backend implements [`TierLister`] (a cache of observed Tiers) and [`TierWriter`] (the API
//! calls); a runtime implements [`Clock`]. A webhook with several replicas claims priorities
//! through [`PriorityClaims`] (the store every replica shares). The core never does I/O or reads
//! a clock itself.
//! [`FixedLister`] is a lister whose view is set by hand, for tests and fixed reviews; with the
//! `mock` feature, mockall generates `MockTierLister` and `MockTierWriter`.

use std::time::Instant;

use async_trait::async_trait;

use crate::antrea::Antrea;
use crate::controller::Controller;
use crate::error::{ClaimError, WriteError};
use crate::observe::{Generation, Snapshot};

/// A cache of the observed Tier set.
///
/// # Guarantees an implementation must give
///
/// - [`snapshot`](TierLister::snapshot) returns `tiers: None` until the first complete list and
///   a complete view afterwards.
/// - The generation grows whenever the observed set changes, and a snapshot never holds data
///   older than its generation says (read the generation first, then the data).
/// - A lister that records deletions ([`Snapshot::deleted`]) records every one it sees, at the
///   generation that shows it, even when the create it follows never showed on its own; one
///   that records none leaves a create and its deletion seen together to the echo wait.
/// - [`changed`](TierLister::changed) is cancel-safe: dropping it loses nothing, because the
///   caller asks again with the generation it has seen.
#[async_trait]
pub trait TierLister<C: Controller = Antrea>: Send + Sync {
    /// Resolves once the cache has completed its first list.
    async fn wait_synced(&self);

    /// The current view of every observed Tier.
    fn snapshot(&self) -> Snapshot<C>;

    /// Resolves once the generation is greater than `seen`.
    async fn changed(&self, seen: Generation);
}

/// Writes Tiers. Errors are classified by the adapter (see [`ErrorClass`](crate::ErrorClass)).
///
/// A call may be dropped before it completes (cancellation); an implementation must not rely
/// on being polled to completion.
#[async_trait]
pub trait TierWriter<C: Controller = Antrea>: Send + Sync {
    /// Creates the Tier `tier`.
    async fn create(&self, tier: &C::Spec) -> Result<(), WriteError>;

    /// Replaces the ensured fields (those [`Controller::drift`] compares) of the existing Tier
    /// of `tier`'s name, only if its resourceVersion is still `resource_version`.
    async fn update(&self, tier: &C::Spec, resource_version: &str) -> Result<(), WriteError>;
}

#[cfg(any(test, feature = "mock"))]
mockall::mock! {
    /// A mockall mock of an Antrea [`TierLister`].
    pub TierLister {}

    #[async_trait]
    impl TierLister<Antrea> for TierLister {
        async fn wait_synced(&self);
        fn snapshot(&self) -> Snapshot<Antrea>;
        async fn changed(&self, seen: Generation);
    }
}

#[cfg(any(test, feature = "mock"))]
mockall::mock! {
    /// A mockall mock of an Antrea [`TierWriter`].
    pub TierWriter {}

    #[async_trait]
    impl TierWriter<Antrea> for TierWriter {
        async fn create(&self, tier: &crate::TierSpec) -> Result<(), WriteError>;
        async fn update(&self, tier: &crate::TierSpec, resource_version: &str) -> Result<(), WriteError>;
    }
}

/// Claims Tier priorities in a store that every webhook replica shares (tierd's: a Lease on the
/// API server), so that replicas reviewing Tier creates behind one Service admit at most one
/// Tier per priority within the caches' lag. The rule is
/// [`ClaimSet::take`](crate::admission::ClaimSet::take); an implementation reads the set,
/// applies it, and writes it back only if nobody wrote since it read (a resourceVersion
/// precondition), re-reading when someone did.
///
/// # Guarantees an implementation must give
///
/// - `Ok` only once the claim is stored (or a fresh claim of the same Tier was read there): no
///   other Tier's claim at the priority can be taken until it lapses.
/// - An answer within a deadline of its own, shorter than the webhook's `timeoutSeconds`; a
///   claim it could not make in time is [`ClaimError::Unavailable`], never `Ok`.
#[async_trait]
pub trait PriorityClaims: Send + Sync {
    /// Claims `priority` for the Tier `tier` for the claims' TTL.
    ///
    /// # Errors
    ///
    /// [`ClaimError::Taken`] when another Tier holds a live claim there (deny the create);
    /// [`ClaimError::Unavailable`] when the store could not be read or written in time.
    async fn claim(&self, tier: &str, priority: i64) -> Result<(), ClaimError>;
}

/// Time, as a port: real in production, virtual in tests and simulations.
#[async_trait]
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;

    /// Resolves at or after `deadline`.
    async fn sleep_until(&self, deadline: Instant);
}

/// A [`TierLister`] whose view is set by hand: for tests (an embedder's included) and for code
/// that reviews against a fixed set of Tiers. [`set`](Self::set) publishes a new snapshot and
/// wakes every [`changed`](TierLister::changed) waiting on an older generation.
#[derive(Debug)]
pub struct FixedLister<C: Controller = Antrea> {
    snapshot: tokio::sync::watch::Sender<Snapshot<C>>,
}

impl<C: Controller> Default for FixedLister<C> {
    fn default() -> Self {
        Self::new(Snapshot::default())
    }
}

impl<C: Controller> FixedLister<C> {
    /// A lister showing `snapshot` (unsynced for [`Snapshot::default`]).
    pub fn new(snapshot: Snapshot<C>) -> Self {
        Self {
            snapshot: tokio::sync::watch::Sender::new(snapshot),
        }
    }

    /// Shows `snapshot` from now on.
    pub fn set(&self, snapshot: Snapshot<C>) {
        self.snapshot.send_replace(snapshot);
    }
}

#[async_trait]
impl<C: Controller> TierLister<C> for FixedLister<C> {
    async fn wait_synced(&self) {
        // The sender lives in `self`, so waiting cannot fail.
        let _ = self
            .snapshot
            .subscribe()
            .wait_for(Snapshot::is_synced)
            .await;
    }

    fn snapshot(&self) -> Snapshot<C> {
        self.snapshot.borrow().clone()
    }

    async fn changed(&self, seen: Generation) {
        let _ = self
            .snapshot
            .subscribe()
            .wait_for(|s| s.generation > seen)
            .await;
    }
}
