//! The driver: runs one [`TierMachine`](crate::TierMachine) per desired Tier against the ports.
//!
//! A thin async loop around a [`Fleet`], which holds every decision: it waits for the cache to
//! sync, hands the fleet every new snapshot, performs the actions it emits concurrently (so one
//! stuck Tier never delays another), hands outcomes back, re-observes after every outcome and
//! sleeps until the fleet's next timeout. It publishes a [`Status`] after every step and
//! forwards every [`TierEvent`] to the [`events`](Driver::events) channel, losslessly, logging
//! each one.
//!
//! ```no_run
//! # async fn example(
//! #     lister: impl tier_core::TierLister,
//! #     writer: impl tier_core::TierWriter,
//! #     clock: impl tier_core::Clock,
//! # ) {
//! use tier_core::{DesiredSet, Driver, DriverConfig, Mode, Stopped};
//!
//! let driver = Driver::new(lister, writer, clock, DesiredSet::antrea(), DriverConfig::default())
//!     .expect("the default configuration is valid");
//! let mut status = driver.status();
//! let run = driver.run(Mode::Continuous, std::future::pending());
//! # let _ = run;
//! // elsewhere: status.initialized().await
//! # let _ = status.initialized();
//! # }
//! ```

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use futures::future::{Either, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tracing::Instrument;

use tokio::sync::mpsc;

use crate::antrea::Antrea;
use crate::controller::{Controller, DesiredTier};
use crate::error::WriteError;
use crate::fleet::{Fleet, FleetConfig, TierId};
use crate::machine::{Action, ConfigError, MachineConfig, TierEvent, TierState, TierStatus};
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
pub struct DriverConfig<C: Controller = Antrea> {
    /// Timing of every per-Tier machine.
    pub machine: MachineConfig,
    /// The longest a single write may take before it counts as a transient failure (default
    /// 30 s). Adapters should also bound their calls; this is the backstop.
    pub call_timeout: Duration,
    /// Seed of the jitter; each Tier's machine derives its own from it. `None` (the default)
    /// draws one from the operating system's entropy when the driver is built, so replicas do
    /// not retry in lockstep; set it only for reproducible tests and simulations.
    pub seed: Option<u64>,
    /// The admission rules used to predict denials from the observed set (see
    /// [`FleetConfig::admission`]); the controller's by default.
    pub admission: Option<C::Admission>,
}

impl<C: Controller> DriverConfig<C> {
    /// Checks every field: the machine's (see [`MachineConfig::validate`]) and `call_timeout`
    /// between 1 ms and [`MAX_DURATION`](crate::machine::MAX_DURATION).
    ///
    /// # Errors
    ///
    /// The first field out of range, with the range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.machine.validate()?;
        ConfigError::check_duration(
            "call_timeout",
            self.call_timeout,
            Duration::from_millis(1),
            crate::machine::MAX_DURATION,
        )
    }
}

impl<C: Controller> Default for DriverConfig<C> {
    fn default() -> Self {
        let fleet = FleetConfig::<C>::default();
        Self {
            machine: fleet.machine,
            call_timeout: Duration::from_secs(30),
            seed: None,
            admission: fleet.admission,
        }
    }
}

/// A seed from the operating system's entropy (std's `RandomState` keys come from it), different
/// in every process.
pub fn entropy_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x7469_6572_6421);
    hasher.finish()
}

/// The receiving end of a driver's event stream: every [`TierEvent`], in order, none lost.
pub type EventReceiver = mpsc::UnboundedReceiver<TierEvent>;

/// Drives the fleet of a desired set of controller `C` against a lister, a writer and a clock.
#[derive(Debug)]
pub struct Driver<L, W, Clk, C: Controller = Antrea> {
    lister: L,
    writer: W,
    clock: Clk,
    fleet: Fleet<C>,
    call_timeout: Duration,
    status: watch::Sender<Status>,
    events: Option<mpsc::UnboundedSender<TierEvent>>,
    leadership: Option<watch::Receiver<bool>>,
}

impl<L: TierLister<C>, W: TierWriter<C>, Clk: Clock, C: Controller> Driver<L, W, Clk, C> {
    /// A driver for `desired`. Nothing happens until [`run`](Self::run). The jitter seed is
    /// `config.seed`, or drawn from OS entropy when `None`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field of `config` out of its range (see
    /// [`DriverConfig::validate`]); nothing is started.
    pub fn new(
        lister: L,
        writer: W,
        clock: Clk,
        desired: DesiredSet<C>,
        config: DriverConfig<C>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let fleet_config = FleetConfig {
            machine: config.machine,
            admission: config.admission,
            seed: config.seed.unwrap_or_else(entropy_seed),
        };
        let fleet = Fleet::new(&desired, fleet_config, clock.now())?;
        let (status, _) = watch::channel(fleet.status());
        Ok(Self {
            lister,
            writer,
            clock,
            fleet,
            call_timeout: config.call_timeout,
            status,
            events: None,
            leadership: None,
        })
    }

    /// Gates the driver's writes on `may_write`: a write starts only while its latest value is
    /// `true` (this replica leads). Without a call every write is permitted. The value is an
    /// input like the cache ([`Fleet::handle_leadership`]): while it is `false` the driver
    /// keeps observing, and publishes [`Status::standby`]; once it turns `true` a pending write
    /// goes at once. A closed channel (its sender dropped: the elector is gone) counts as
    /// `false` from then on. Calls already in flight when it turns `false` are not cut: each
    /// ends within [`DriverConfig::call_timeout`] (the adapter's own timeout, normally
    /// shorter), which bounds how long after losing the lead a write can still be applied.
    pub fn leadership(&mut self, may_write: watch::Receiver<bool>) {
        self.leadership = Some(may_write);
    }

    /// A subscription to the driver's status; take it before [`run`](Self::run).
    pub fn status(&self) -> StatusHandle {
        StatusHandle::from(self.status.subscribe())
    }

    /// The stream of every [`TierEvent`], in order and lossless (unbounded: events come once per
    /// episode, never per retry). Take it before [`run`](Self::run); a later call replaces the
    /// stream. Without a call, events are only logged.
    pub fn events(&mut self) -> EventReceiver {
        let (tx, rx) = mpsc::unbounded_channel();
        self.events = Some(tx);
        rx
    }

    /// Runs until every Tier converged ([`Mode::Once`]) or until `shutdown` resolves.
    ///
    /// # Guarantees
    ///
    /// - No write before the cache is synced, none to a name outside the desired set, at most
    ///   one in flight per Tier, none the observed set predicts will be denied.
    /// - Once `shutdown` resolves, no further write starts and the call returns at its next
    ///   poll; calls in flight are dropped.
    /// - With a [`leadership`](Self::leadership) gate, no write starts while it is `false`.
    pub async fn run(self, mode: Mode, shutdown: impl Future<Output = ()>) -> Stopped {
        let Self {
            lister,
            writer,
            clock,
            mut fleet,
            call_timeout,
            status,
            events,
            leadership,
        } = self;
        let mut shutdown = pin!(shutdown.fuse());
        let mut published = Published::new(&status, events);
        let mut gate = Gate(leadership);
        if let Some(may_write) = gate.current() {
            fleet.handle_leadership(may_write, clock.now());
        }
        published.publish(&mut fleet);

        futures::select_biased! {
            () = shutdown => return published.stop(Stopped::Cancelled),
            () = lister.wait_synced().fuse() => {}
        }
        let mut snapshot = lister.snapshot();
        fleet.handle_snapshot(&snapshot, clock.now());
        let mut inflight = FuturesUnordered::new();
        loop {
            let now = clock.now();
            fleet.handle_timeout(now);
            while let Some((id, action)) = fleet.poll_action(now) {
                inflight.push(perform(&writer, &clock, call_timeout, id, action));
            }
            published.publish(&mut fleet);
            if mode == Mode::Once && inflight.is_empty() && fleet.is_converged() {
                return published.stop(Stopped::Converged);
            }
            let wake = match fleet.poll_timeout() {
                Some(deadline) => Either::Left(clock.sleep_until(deadline)),
                None => Either::Right(std::future::pending()),
            };
            futures::select_biased! {
                () = shutdown => return published.stop(Stopped::Cancelled),
                (id, outcome) = inflight.select_next_some() => {
                    fleet.handle_outcome(id, outcome, clock.now());
                    snapshot = lister.snapshot();
                    fleet.handle_snapshot(&snapshot, clock.now());
                }
                () = lister.changed(snapshot.generation).fuse() => {
                    snapshot = lister.snapshot();
                    fleet.handle_snapshot(&snapshot, clock.now());
                }
                may_write = gate.changed().fuse() => {
                    fleet.handle_leadership(may_write, clock.now());
                }
                () = wake.fuse() => {}
            }
        }
    }
}

/// The leadership gate of a run: the latest value of the embedder's or elector's channel.
struct Gate(Option<watch::Receiver<bool>>);

impl Gate {
    /// The current value, marked seen (`false` once closed); `None` without a gate.
    fn current(&mut self) -> Option<bool> {
        let rx = self.0.as_mut()?;
        if rx.has_changed().is_err() {
            self.0 = None;
            return Some(false);
        }
        Some(*rx.borrow_and_update())
    }

    /// Resolves with the next value; never without a gate. A closed channel resolves `false`
    /// once, then never again.
    async fn changed(&mut self) -> bool {
        let Some(rx) = self.0.as_mut() else {
            return std::future::pending().await;
        };
        if rx.changed().await.is_ok() {
            return *rx.borrow_and_update();
        }
        self.0 = None;
        false
    }
}

/// Performs one action, bounded by `timeout` on `clock`, inside a span naming the Tier.
async fn perform<W: TierWriter<C>, Clk: Clock, C: Controller>(
    writer: &W,
    clock: &Clk,
    timeout: Duration,
    id: TierId,
    action: Action<C>,
) -> (TierId, Result<(), WriteError>) {
    let span = tracing::info_span!("tier", name = %action.tier().name(), verb = action.verb());
    let deadline = crate::fleet::saturating_add(clock.now(), timeout);
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
    (id, outcome)
}

/// Publishes statuses, forwards and logs events, and logs one line per state change.
struct Published<'a> {
    tx: &'a watch::Sender<Status>,
    events: Option<mpsc::UnboundedSender<TierEvent>>,
    initialized: bool,
    last: Vec<TierStatus>,
    standby: bool,
}

impl<'a> Published<'a> {
    fn new(
        tx: &'a watch::Sender<Status>,
        events: Option<mpsc::UnboundedSender<TierEvent>>,
    ) -> Self {
        Self {
            tx,
            events,
            initialized: false,
            last: Vec::new(),
            standby: false,
        }
    }

    fn publish<C: Controller>(&mut self, fleet: &mut Fleet<C>) {
        while let Some(event) = fleet.poll_event() {
            if event.is_warning() {
                tracing::warn!(tier = event.tier(), "{event}");
            } else {
                tracing::info!(tier = event.tier(), "{event}");
            }
            if let Some(events) = &self.events {
                // A dropped receiver only means nobody listens any more.
                let _ = events.send(event);
            }
        }
        let status = fleet.status();
        for (i, tier) in status.tiers.iter().enumerate() {
            let before = self.last.get(i).map(|s| s.state.as_str());
            if before != Some(tier.state.as_str()) && before.is_some() {
                // Events cover every other cause; a run of failed calls has none, so entering it
                // is worth one line (not one per retry).
                if matches!(tier.state, TierState::Retrying { .. }) {
                    tracing::warn!(tier = %tier.name, "{tier}");
                } else {
                    tracing::debug!(tier = %tier.name, "{tier}");
                }
            }
        }
        if status.standby != self.standby {
            self.standby = status.standby;
            if status.standby {
                tracing::info!("standby: another replica leads; no Tier write starts here");
            } else {
                tracing::info!("leading: this replica writes the Tiers");
            }
        }
        if status.initialized && !self.initialized {
            self.initialized = true;
            tracing::info!(
                tiers = status.tiers.len(),
                seconds = status
                    .time_to_initialized()
                    .unwrap_or_default()
                    .as_secs_f64(),
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
