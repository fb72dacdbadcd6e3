//! The sans-I/O core of tierd.
//!
//! This crate is deterministic: it does no networking, reads no clock and knows no Kubernetes
//! type. Time comes in as [`std::time::Instant`] values, randomness from a seed.
//!
//! - [`spec`]: the desired set of Tiers and its validation rules ([`DesiredSet::antrea`] is the
//!   default).
//! - [`observe`]: what a cache observed, and [`decide`], the pure decision for one Tier.
//! - [`machine`]: [`TierMachine`], the per-Tier state machine (inputs, outputs, events, status).
//! - [`fleet`]: [`Fleet`], every machine and all cross-Tier logic (snapshot fan-out, blocker
//!   prediction, the initialized latch, seeds, events), synchronous and steppable in tests.
//! - [`ports`]: the async traits a backend implements: [`TierLister`], [`TierWriter`], [`Clock`].
//! - [`driver`]: [`Driver`], the thin async loop that runs a fleet against the ports.
//! - [`status`]: the published [`Status`] and the "system Tiers initialized" signal.
//! - [`admission`]: Antrea's Tier admission rules as a pure function, shared by every backend
//!   that emulates the API server and by tierd's own webhook.

pub mod admission;
pub mod backoff;
mod budget;
pub mod driver;
pub mod error;
pub mod fleet;
pub mod machine;
pub mod observe;
pub mod ports;
pub mod spec;
pub mod status;

pub use backoff::Backoff;
pub use driver::{Driver, DriverConfig, EventReceiver, Mode, Stopped, entropy_seed};
pub use error::{ErrorClass, WriteError};
pub use fleet::{Fleet, FleetConfig, HoldCause, TierId, predict};
pub use machine::{
    Action, Blocker, ConfigError, ContestPolicy, MachineConfig, OutcomeCounts, TierEvent,
    TierMachine, TierState, TierStatus, WriteHold, WriteKind,
};
pub use observe::{
    Decision, FieldWriter, Generation, Observed, ObservedTier, Snapshot, decide, in_sync,
};
pub use ports::{Clock, FixedLister, TierLister, TierWriter};
#[cfg(any(test, feature = "mock"))]
pub use ports::{MockTierLister, MockTierWriter};
pub use spec::{
    DesiredSet, ErrorType, Rule, TierSpec, ValidationError, ValidationRules, Violation,
};
pub use status::{DriverStopped, Status, StatusHandle};
