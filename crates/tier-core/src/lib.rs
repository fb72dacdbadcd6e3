//! The sans-I/O core of tierd.
//!
//! This crate is deterministic: it does no networking, reads no clock and knows no Kubernetes
//! type. Time comes in as [`std::time::Instant`] values, randomness from a seed.
//!
//! Every item has one path, at the crate root (`tier_core::DesiredSet`), except Antrea's
//! admission rules, which keep their namespace, [`admission`]: the one copy that every backend
//! emulating the API server and tierd's own webhook share; and Calico's Tiers, in [`calico`].
//! Where to start:
//!
//! - [`Controller`]: the seam. The decision code is generic over it; [`Antrea`] (the default
//!   of every generic type) and [`calico::Calico`] implement it.
//! - [`DesiredSet`] and [`TierSpec`]: the desired Tiers and their validation
//!   ([`DesiredSet::antrea`] is the default).
//! - [`Snapshot`], [`Observed`] and [`decide`]: what a cache observed, and the pure decision for
//!   one Tier.
//! - [`TierMachine`]: the per-Tier state machine, its protocol, causes and write budget.
//! - [`Fleet`]: every machine and all cross-Tier logic (snapshot fan-out, blocker prediction,
//!   fleet-wide holds and their liveness bound, the initialized latch, seeds, events),
//!   synchronous and steppable in tests.
//! - [`TierLister`], [`TierWriter`], [`Clock`]: the async ports a backend implements;
//!   [`PriorityClaims`], the port of a webhook with several replicas.
//! - [`Driver`]: the thin async loop that runs a fleet against the ports.
//! - [`Status`] and [`StatusHandle`]: what is published, and "system Tiers initialized".

pub mod admission;
mod antrea;
mod backoff;
mod budget;
pub mod calico;
mod controller;
mod driver;
mod error;
mod fleet;
mod machine;
mod observe;
mod ports;
mod spec;
mod status;

pub use antrea::{Antrea, ObservedTier, in_sync, predict};
pub use backoff::Backoff;
pub use controller::{CachedTier, Controller, DesiredTier};
pub use driver::{Driver, DriverConfig, EventReceiver, Mode, Stopped, entropy_seed};
pub use error::{ClaimError, ErrorClass, WriteError};
pub use fleet::{
    Fleet, FleetConfig, HoldCause, LONE_FAILURES, OUTAGE_RELEASE, PROBE_RELEASE, TierId,
};
pub use machine::{
    Action, Blocker, ConfigError, ContestPolicy, MAX_COUNT, MAX_DURATION, MachineConfig,
    OutcomeCounts, TierEvent, TierMachine, TierState, TierStatus, WriteHold, WriteKind,
};
pub use observe::{
    Decision, Deletions, Drift, FieldWriter, Generation, Observed, Snapshot, decide,
};
pub use ports::{Clock, FixedLister, PriorityClaims, TierLister, TierWriter};
#[cfg(any(test, feature = "mock"))]
pub use ports::{MockTierLister, MockTierWriter};
pub use spec::{
    CNP_ADMIN_TIER_PRIORITY, DesiredSet, ErrorType, MAX_PRIORITY, Rule, TierSpec, ValidationError,
    ValidationRules, Violation, check_dns1123_label, check_dns1123_subdomain,
};
pub use status::{DriverStopped, Status, StatusHandle};
