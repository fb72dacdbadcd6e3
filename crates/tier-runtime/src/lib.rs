//! Runs the tierd core on tokio.
//!
//! - [`TokioClock`]: the [`Clock`] port on tokio's clock; virtual under
//!   `#[tokio::test(start_paused = true)]`, so the same code is tested on virtual time.
//! - [`spawn`]: starts a [`Driver`] as a task and returns an [`Ensurer`] handle with its status,
//!   the "system Tiers initialized" signal and a prompt shutdown; [`spawn_with_events`] also
//!   returns the driver's lossless event stream (for Kubernetes Events, or an embedder's own);
//!   [`spawn_driver`] runs a driver the caller built (with a leadership gate, say).
//!
//! The jitter seed is drawn from the operating system's entropy unless
//! [`DriverConfig::seed`] is set, so replicas never retry in lockstep.
//!
//! ```no_run
//! # async fn example(lister: impl tier_core::TierLister + 'static, writer: impl tier_core::TierWriter + 'static) {
//! use tier_core::{DesiredSet, DriverConfig, Mode};
//!
//! let mut ensurer = tier_runtime::spawn(lister, writer, DesiredSet::antrea(), DriverConfig::default(), Mode::Continuous)
//!     .expect("the default configuration is valid");
//! ensurer.status().initialized().await.ok();
//! ensurer.shutdown().await;
//! # }
//! ```

use std::time::Instant;

use async_trait::async_trait;
use tier_core::{
    Clock, ConfigError, Controller, DesiredSet, Driver, DriverConfig, EventReceiver, Mode,
    StatusHandle, Stopped, TierLister, TierWriter,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The [`Clock`] port on tokio's clock (virtual when tokio's time is paused).
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

#[async_trait]
impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    async fn sleep_until(&self, deadline: Instant) {
        tokio::time::sleep_until(deadline.into()).await;
    }
}

/// A driver running as a tokio task.
#[derive(Debug)]
pub struct Ensurer {
    status: StatusHandle,
    cancel: CancellationToken,
    task: JoinHandle<Stopped>,
}

/// Spawns a [`Driver`] for `desired` (of any controller, inferred from it) on the current tokio
/// runtime, on [`TokioClock`].
///
/// # Errors
///
/// A [`ConfigError`] naming the field of `config` out of its range; nothing is spawned.
pub fn spawn<C, L, W>(
    lister: L,
    writer: W,
    desired: DesiredSet<C>,
    config: DriverConfig<C>,
    mode: Mode,
) -> Result<Ensurer, ConfigError>
where
    C: Controller,
    L: TierLister<C> + 'static,
    W: TierWriter<C> + 'static,
{
    Ok(spawn_driver(
        Driver::new(lister, writer, TokioClock, desired, config)?,
        mode,
    ))
}

/// Like [`spawn`], and also returns every [`TierEvent`](tier_core::TierEvent) the driver
/// emits, in order and none lost (an unbounded channel; events come once per episode, never per
/// retry). Read it to the end, or drop it: an unread receiver keeps its events in memory.
///
/// # Errors
///
/// A [`ConfigError`] naming the field of `config` out of its range; nothing is spawned.
pub fn spawn_with_events<C, L, W>(
    lister: L,
    writer: W,
    desired: DesiredSet<C>,
    config: DriverConfig<C>,
    mode: Mode,
) -> Result<(Ensurer, EventReceiver), ConfigError>
where
    C: Controller,
    L: TierLister<C> + 'static,
    W: TierWriter<C> + 'static,
{
    let mut driver = Driver::new(lister, writer, TokioClock, desired, config)?;
    let events = driver.events();
    Ok((spawn_driver(driver, mode), events))
}

/// Spawns a [`Driver`] built by the caller (for what [`spawn`] does not set: its
/// [`events`](Driver::events) taken, a [`leadership`](Driver::leadership) gate) on the current
/// tokio runtime.
pub fn spawn_driver<C, L, W>(driver: Driver<L, W, TokioClock, C>, mode: Mode) -> Ensurer
where
    C: Controller,
    L: TierLister<C> + 'static,
    W: TierWriter<C> + 'static,
{
    let status = driver.status();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let task = tokio::spawn(async move { driver.run(mode, stop.cancelled_owned()).await });
    Ensurer {
        status,
        cancel,
        task,
    }
}

impl Ensurer {
    /// A subscription to the driver's status.
    pub fn status(&self) -> StatusHandle {
        self.status.clone()
    }

    /// A token that stops the driver when cancelled (for wiring to signals).
    pub fn cancellation(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Waits for the driver to stop by itself (converged, in [`Mode::Once`], or cancelled).
    /// A driver task that panicked or was aborted counts as cancelled.
    pub async fn join(self) -> Stopped {
        self.task.await.unwrap_or(Stopped::Cancelled)
    }

    /// Stops the driver: no write starts after this call, and it returns once the task ended.
    pub async fn shutdown(self) -> Stopped {
        self.cancel.cancel();
        self.join().await
    }
}
