//! An in-memory Tier "cluster" with Kubernetes-like semantics, for tests, simulations and
//! `tierd demo`.
//!
//! [`MemoryCluster`] implements the core's ports [`TierLister`](tier_core::TierLister) and
//! [`TierWriter`](tier_core::TierWriter) the way kube-apiserver and an informer would: a global
//! resourceVersion, `AlreadyExists`/`Conflict`/`NotFound`, the controller's schema and policy
//! (Antrea's Tier webhook, or Calico's pinned and undeletable built-ins; see [`Backend`])
//! running before the store, a cache that can sync late and lag behind, scriptable and seeded random faults, and
//! a call log. Everything runs on tokio's clock, so tests run on virtual time.
//!
//! - [`cluster`]: [`MemoryCluster`] (the API server and its handle) and [`ClusterBuilder`].
//! - [`backend`]: [`Backend`], what differs per controller (schema, objects, the write path's
//!   policy): Antrea's and Calico's. Every other module is generic over it, Antrea by default.
//! - `store`: what etcd holds: Tiers by name and the resourceVersion counter (internal).
//! - [`admission`]: Antrea's `tiervalidator.antrea.io` rules ([`Admission`]).
//! - [`cache`]: [`MemoryLister`], the informer-like cache ([`SyncMode`], lag).
//! - [`writer`]: [`MemoryWriter`], one API client.
//! - [`faults`]: [`Faults`], scripted and [random](RandomFaults) failures, lost responses,
//!   delays and hangs.
//! - [`calls`]: [`CallLog`], what was called, how it ended, and how many calls overlapped.
//! - [`error`]: [`ApiError`], the server's refusals, worded like kube-apiserver's.
//!
//! # Architecture invariants
//!
//! - No background task: caches apply changes lazily when read, and waiters sleep until the next
//!   change is due. Nothing runs unless a test or driver polls it.
//! - Nothing panics on a poisoned lock; no lock is held across an `.await`.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use tier_core::{DesiredSet, DriverConfig, Mode, Stopped};
//! use tier_memory::{MemoryCluster, Verb};
//!
//! let cluster = MemoryCluster::new();
//! let ensurer = tier_runtime::spawn(
//!     cluster.clone(),
//!     cluster.clone(),
//!     DesiredSet::antrea(),
//!     DriverConfig::default(),
//!     Mode::Once,
//! )
//! .expect("the default configuration is valid");
//! assert_eq!(ensurer.join().await, Stopped::Converged);
//! assert_eq!(cluster.calls().count(Verb::Create), 6);
//! assert_eq!(cluster.tiers().len(), 6);
//! # }
//! ```

pub mod admission;
pub mod backend;
pub mod cache;
pub mod calls;
pub mod cluster;
pub mod error;
pub mod faults;
pub(crate) mod store;
pub mod writer;

use std::sync::{Mutex, MutexGuard, PoisonError};

pub use admission::{Admission, AdmissionView};
pub use backend::{ANTREA_TIERS, Backend, CALICO_TIERS, Resource};
pub use cache::{CacheConfig, MemoryLister, SyncMode};
pub use calls::{CallLog, CallOutcome, CallRecord, Verb};
pub use cluster::{ClusterBuilder, DEFAULT_CLIENT, MemoryCluster};
pub use error::{ApiError, WEBHOOK};
pub use faults::{FaultBuilder, Faults, RandomFaults};
pub use writer::MemoryWriter;

/// Locks `mutex`, recovering the data if a holder panicked: every critical section here leaves
/// the data consistent, so a poisoned lock is safe to reuse.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
