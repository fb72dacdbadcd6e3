//! The driver: runs one [`TierMachine`] per desired Tier against the ports.
//!
//! One task multiplexes every machine: it waits for the cache to sync, feeds each machine every
//! new observation, performs the actions they emit concurrently (so one stuck Tier never delays
//! another), hands outcomes back, re-observes after every outcome and sleeps until the earliest
//! machine timeout. It publishes a [`Status`] after every step.
//!
//! ```no_run
//! # async fn example(
//! #     lister: impl tier_core::TierLister,
//! #     writer: impl tier_core::TierWriter,
//! #     clock: impl tier_core::Clock,
//! # ) {
//! use tier_core::{DesiredSet, Driver, DriverConfig, Mode, Stopped};
//!
//! let driver = Driver::new(lister, writer, clock, DesiredSet::antrea(), DriverConfig::default());
//! let mut status = driver.status();
//! let run = driver.run(Mode::Continuous, std::future::pending());
//! # let _ = run;
//! // elsewhere: status.initialized().await
//! # let _ = status.initialized();
//! # }
//! ```

use std::future::Future;
use std::pin::pin;
use std::time::{Duration, Instant};

use futures::future::{Either, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tracing::Instrument;

use crate::error::WriteError;
use crate::machine::{Action, MachineConfig, TierMachine, TierState, TierStatus};
use crate::observe::Generation;
use crate::ports::{Clock, TierLister, TierWriter};
use crate::spec::DesiredSet;
use crate::status::{Status, StatusHandle};

/// Whether [`Driver::run`] returns once everything converged or keeps correcting drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Return as soon as every desired Tier is converged and no call is in flight.
    Once,
    /// Keep correcting drift until cancelled.
    Continuous,
}

/// Why [`Driver::run`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every desired Tier converged (only in [`Mode::Once`]).
    Converged,
    /// The shutdown signal fired. No write was started after it.
    Cancelled,
}

/// Configuration of a [`Driver`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverConfig {
    /// Timing of every per-Tier machine.
    pub machine: MachineConfig,
    /// The longest a single write may take before it counts as a transient failure (default
    /// 30 s). Adapters should also bound their calls; this is the backstop.
    pub call_timeout: Duration,
    /// Seed of the jitter; each Tier's machine derives its own from it.
    pub seed: u64,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            machine: MachineConfig::default(),
            call_timeout: Duration::from_secs(30),
            seed: 0x7469_6572_6421,
        }
    }
}

/// Drives the machines of a desired set against a lister, a writer and a clock.
#[derive(Debug)]
pub struct Driver<L, W, C> {
    lister: L,
    writer: W,
    clock: C,
    desired: DesiredSet,
    config: DriverConfig,
    status: watch::Sender<Status>,
}

impl<L: TierLister, W: TierWriter, C: Clock> Driver<L, W, C> {
    /// A driver for `desired`. Nothing happens until [`run`](Self::run).
    pub fn new(lister: L, writer: W, clock: C, desired: DesiredSet, config: DriverConfig) -> Self {
        let tiers = machines(&desired, &config)
            .iter()
            .map(TierMachine::status)
            .collect();
        let (status, _) = watch::channel(Status {
            tiers,
            ..Status::default()
        });
        Self {
            lister,
            writer,
            clock,
            desired,
            config,
            status,
        }
    }

    /// A subscription to the driver's status; take it before [`run`](Self::run).
    pub fn status(&self) -> StatusHandle {
        StatusHandle::from(self.status.subscribe())
    }

    /// Runs until every Tier converged ([`Mode::Once`]) or until `shutdown` resolves.
    ///
    /// # Guarantees
    ///
    /// - No write before the cache is synced, none to a name outside the desired set, at most
    ///   one in flight per Tier.
    /// - Once `shutdown` resolves, no further write starts and the call returns at its next
    ///   poll; calls in flight are dropped.
    pub async fn run(self, mode: Mode, shutdown: impl Future<Output = ()>) -> Stopped {
        let Self {
            lister,
            writer,
            clock,
            desired,
            config,
            status,
        } = self;
        let mut shutdown = pin!(shutdown.fuse());
        let mut machines = machines(&desired, &config);
        let mut published = Published::new(&status, clock.now());
        published.publish(&machines, false, 0, clock.now());

        futures::select_biased! {
            () = shutdown => return published.stop(Stopped::Cancelled),
            () = lister.wait_synced().fuse() => {}
        }
        let mut generation = observe(&lister, &mut machines, clock.now());
        let mut inflight = FuturesUnordered::new();
        loop {
            let now = clock.now();
            for (index, machine) in machines.iter_mut().enumerate() {
                machine.handle_timeout(now);
                if let Some(action) = machine.poll_action(now) {
                    inflight.push(perform(&writer, &clock, config.call_timeout, index, action));
                }
            }
            published.publish(&machines, true, generation, now);
            if mode == Mode::Once
                && inflight.is_empty()
                && machines.iter().all(|m| m.is_converged())
            {
                return published.stop(Stopped::Converged);
            }
            let wake = match machines.iter().filter_map(TierMachine::poll_timeout).min() {
                Some(deadline) => Either::Left(clock.sleep_until(deadline)),
                None => Either::Right(std::future::pending()),
            };
            futures::select_biased! {
                () = shutdown => return published.stop(Stopped::Cancelled),
                (index, outcome) = inflight.select_next_some() => {
                    if let Some(machine) = machines.get_mut(index) {
                        machine.handle_outcome(outcome, clock.now());
                    }
                    generation = observe(&lister, &mut machines, clock.now());
                }
                () = lister.changed(generation).fuse() => {
                    generation = observe(&lister, &mut machines, clock.now());
                }
                () = wake.fuse() => {}
            }
        }
    }
}

/// One machine per desired Tier, each with its own seed derived from the driver's.
fn machines(desired: &DesiredSet, config: &DriverConfig) -> Vec<TierMachine> {
    desired
        .tiers()
        .iter()
        .zip(0u64..)
        .map(|(spec, i)| {
            let seed = config.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            TierMachine::new(spec.clone(), config.machine.clone(), seed)
        })
        .collect()
}

/// Hands every machine the current snapshot; returns its generation.
fn observe<L: TierLister>(lister: &L, machines: &mut [TierMachine], now: Instant) -> Generation {
    let snapshot = lister.snapshot();
    for machine in machines {
        let observed = snapshot.observe(&machine.spec().name);
        machine.handle_observation(observed, snapshot.generation, now);
    }
    snapshot.generation
}

/// Performs one action, bounded by `timeout` on `clock`, inside a span naming the Tier.
async fn perform<W: TierWriter, C: Clock>(
    writer: &W,
    clock: &C,
    timeout: Duration,
    index: usize,
    action: Action,
) -> (usize, Result<(), WriteError>) {
    let span = tracing::info_span!("tier", name = %action.tier().name, verb = action.verb());
    let deadline = clock.now() + timeout;
    let call = async {
        match &action {
            Action::Create(tier) => writer.create(tier).await,
            Action::Update {
                tier,
                resource_version,
            } => writer.update(tier, resource_version).await,
        }
    }
    .instrument(span.clone());
    let outcome = futures::select_biased! {
        outcome = call.fuse() => outcome,
        () = clock.sleep_until(deadline).fuse() => Err(WriteError::transient(format!(
            "{} did not complete within {timeout:?}", action.verb()
        ))),
    };
    match &outcome {
        Ok(()) => tracing::debug!(parent: &span, "write succeeded"),
        Err(error) => tracing::debug!(parent: &span, class = %error.class, %error, "write failed"),
    }
    (index, outcome)
}

/// Publishes statuses and logs one line per state change (not per retry).
struct Published<'a> {
    tx: &'a watch::Sender<Status>,
    started_at: Instant,
    initialized_at: Option<Instant>,
    last: Vec<TierStatus>,
}

impl<'a> Published<'a> {
    fn new(tx: &'a watch::Sender<Status>, started_at: Instant) -> Self {
        Self {
            tx,
            started_at,
            initialized_at: None,
            last: Vec::new(),
        }
    }

    fn publish(
        &mut self,
        machines: &[TierMachine],
        synced: bool,
        generation: Generation,
        now: Instant,
    ) {
        let tiers: Vec<TierStatus> = machines.iter().map(TierMachine::status).collect();
        for (i, tier) in tiers.iter().enumerate() {
            let before = self.last.get(i).map(|s| s.state.as_str());
            if before != Some(tier.state.as_str()) {
                log_state_change(tier);
            }
        }
        let mut status = Status {
            synced,
            initialized: self.initialized_at.is_some(),
            generation,
            tiers,
            stopped: false,
            started_at: Some(self.started_at),
            initialized_at: self.initialized_at,
        };
        if self.initialized_at.is_none() && status.all_converged() {
            self.initialized_at = Some(now);
            status.initialized = true;
            status.initialized_at = Some(now);
            tracing::info!(
                tiers = status.tiers.len(),
                seconds = now.saturating_duration_since(self.started_at).as_secs_f64(),
                "system Tiers initialized"
            );
        }
        self.last.clone_from(&status.tiers);
        self.tx.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        });
    }

    fn stop(mut self, why: Stopped) -> Stopped {
        let current = self.tx.borrow().clone();
        self.tx.send_replace(Status {
            stopped: true,
            ..current
        });
        self.last.clear();
        why
    }
}

fn log_state_change(status: &TierStatus) {
    let name = status.name.as_str();
    match &status.state {
        TierState::Pending => tracing::debug!(tier = name, "pending"),
        TierState::Converged => {
            tracing::info!(tier = name, outcomes = status.outcomes.total(), "converged")
        }
        TierState::Retrying {
            attempt,
            class,
            error,
        } => {
            tracing::warn!(tier = name, attempt, %class, %error, "write failed, retrying")
        }
        TierState::Blocked { message, .. } => {
            tracing::warn!(tier = name, %message, "blocked: the server refuses the write")
        }
        TierState::Contested { corrections, .. } => tracing::warn!(
            tier = name,
            corrections,
            "contested: another writer keeps changing this Tier; holding off corrections"
        ),
    }
}
