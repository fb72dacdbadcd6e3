//! A deterministic simulation of tierd, and of Antrea's Tier initializers before and after their
//! fix, against the in-memory cluster of `tier-memory`.
//!
//! Each seed draws a [`Scenario`] (starting store, one to three initializers with lagging caches,
//! faults, an adversary) and runs it on a current-thread tokio runtime with paused time, so a
//! seed replays exactly. Invariants are checked on every port call and status change; once faults
//! stop and blockers are removed, tierd must converge within [`Scenario::convergence_bound`].
//! On every seed, each Tier the world allows to be written must be in sync within
//! [`Scenario::liveness_bound`] whatever the other Tiers do, and each Tier's writes stay within
//! the write bound ([`bounds`]).
//!
//! - [`scenario`]: [`Scenario`], drawn from a seed, and the convergence and liveness bounds.
//! - [`worlds`]: the families of worlds ([`World`]): the random one, and the adversarial worlds
//!   of issue 15 (a failing or hanging Tier, a fast editor, a coalesced deleter, RBAC per verb,
//!   a slowing fighter, a lag spike).
//! - [`bounds`]: the bounds of the per-Tier liveness and write-bound invariants, in one place,
//!   and [`bounds::is_visible`], the one question they ask tierd's status.
//! - [`check`]: the checking decorators ([`CheckingWriter`], [`CheckingLister`]), the
//!   [`Invariant`]s and the [`Journal`] of violations.
//! - [`sim`]: [`run_seed`] / [`run_scenario`] / [`run_seeds`] and the [`SeedReport`]; the
//!   world of a run (cluster, adversary, end of the fault phase) is in the private `world`.
//! - [`baseline`]: Antrea's old and new strategies over the core's ports.
//! - [`calico`]: Calico's worlds, run by tierd's fleet and by Calico's own `EnsureInitialized`
//!   (`--controller calico`), on the same draws of faults and initializers.
//! - [`leader`]: leadership changes and Lease expiry as faults: replicas gated by real
//!   electors on one simulated Lease, checked for one writer at a time.
//! - [`sabotage`]: deliberately broken initializers, proving the checks can fail.
//! - [`report`]: summaries and the comparison table.
//! - [`cli`]: the `tier-sim` command line.
//!
//! ```
//! use tier_sim::{SimConfig, run_seed};
//!
//! let report = run_seed(42, &SimConfig::default()).unwrap();
//! assert!(report.passed(), "{:?}", report.violations);
//! ```
//!
//! # Architecture invariants
//!
//! - Virtual time only: nothing sleeps on the wall clock; a run's outcome depends on its seed
//!   alone (no unbiased `select!`, no hash-map iteration order).
//! - The core and the memory backend are used through their public APIs only.

pub mod baseline;
pub mod bounds;
pub mod calico;
pub mod check;
pub mod cli;
pub mod leader;
mod liveness;
pub mod report;
pub mod sabotage;
pub mod scenario;
pub mod sim;
mod world;
pub mod worlds;

pub use check::{CheckingLister, CheckingWriter, Checks, Invariant, Journal, Violation};
pub use sabotage::{Sabotage, Saboteur};
pub use scenario::Scenario;
pub use sim::{SeedReport, SimConfig, SimError, Strategy, run_scenario, run_seed, run_seeds};
pub use worlds::World;
