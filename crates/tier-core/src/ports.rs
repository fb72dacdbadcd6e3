//! The ports: what the core needs from the outside world, as async traits named by capability.
//!
//! A backend implements [`TierLister`] (a cache of observed Tiers) and [`TierWriter`] (the API
//! calls); a runtime implements [`Clock`]. The core never does I/O or reads a clock itself.

use std::time::Instant;

use async_trait::async_trait;

use crate::error::WriteError;
use crate::observe::{Generation, Snapshot};
use crate::spec::TierSpec;

/// A cache of the observed Tier set.
///
/// # Guarantees an implementation must give
///
/// - [`snapshot`](TierLister::snapshot) returns `tiers: None` until the first complete list and
///   a complete view afterwards.
/// - The generation grows whenever the observed set changes, and a snapshot never holds data
///   older than its generation says (read the generation first, then the data).
/// - [`changed`](TierLister::changed) is cancel-safe: dropping it loses nothing, because the
///   caller asks again with the generation it has seen.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait TierLister: Send + Sync {
    /// Resolves once the cache has completed its first list.
    async fn wait_synced(&self);

    /// The current view of every observed Tier.
    fn snapshot(&self) -> Snapshot;

    /// Resolves once the generation is greater than `seen`.
    async fn changed(&self, seen: Generation);
}

/// Writes Tiers. Errors are classified by the adapter (see [`ErrorClass`](crate::ErrorClass)).
///
/// A call may be dropped before it completes (cancellation); an implementation must not rely
/// on being polled to completion.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait TierWriter: Send + Sync {
    /// Creates the Tier `tier`.
    async fn create(&self, tier: &TierSpec) -> Result<(), WriteError>;

    /// Replaces the priority and description of the existing Tier `tier.name`, only if its
    /// resourceVersion is still `resource_version`.
    async fn update(&self, tier: &TierSpec, resource_version: &str) -> Result<(), WriteError>;
}

/// Time, as a port: real in production, virtual in tests and simulations.
#[async_trait]
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;

    /// Resolves at or after `deadline`.
    async fn sleep_until(&self, deadline: Instant);
}
