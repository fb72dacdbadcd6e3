//! The published status of a driver: what readiness checks, metrics and logs subscribe to.
//!
//! Events are not derived from statuses (a `watch` channel keeps only the latest one): they are
//! outputs of the machines ([`crate::Fleet::poll_event`]), forwarded losslessly by the driver.

use std::time::Instant;

use tokio::sync::watch;

use crate::machine::{TierState, TierStatus};
use crate::observe::Generation;

/// A snapshot of a whole driver run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Whether the Tier cache has completed its first list.
    pub synced: bool,
    /// Whether every desired Tier has converged at least once since the start ("system Tiers
    /// initialized"), not necessarily at the same moment. Latched: it stays true when a Tier
    /// drifts later.
    pub initialized: bool,
    /// The generation of the observed set the statuses were computed from.
    pub generation: Generation,
    /// Every desired Tier, in the order of the desired set.
    pub tiers: Vec<TierStatus>,
    /// Whether the driver has stopped (converged in `once` mode, or cancelled).
    pub stopped: bool,
    /// When the driver started running, on its clock.
    pub started_at: Option<Instant>,
    /// When `initialized` became true, on the driver's clock.
    pub initialized_at: Option<Instant>,
    /// Whether this replica is on standby: another one leads, so it starts no write (see
    /// [`Fleet::handle_leadership`](crate::Fleet::handle_leadership)). Its caches and the
    /// Tiers' states go on; a Tier another replica keeps in sync shows as converged here too.
    pub standby: bool,
}

impl Status {
    /// How long the driver took from its start to "initialized", once it has.
    pub fn time_to_initialized(&self) -> Option<std::time::Duration> {
        Some(
            self.initialized_at?
                .saturating_duration_since(self.started_at?),
        )
    }

    /// Whether the cache is synced and every desired Tier is converged right now.
    pub fn all_converged(&self) -> bool {
        self.synced && self.tiers.iter().all(|t| t.state == TierState::Converged)
    }

    /// The Tiers that are blocked right now.
    pub fn blocked(&self) -> impl Iterator<Item = &TierStatus> {
        self.tiers
            .iter()
            .filter(|t| matches!(t.state, TierState::Blocked { .. }))
    }

    /// The Tiers that are not converged right now.
    pub fn unconverged(&self) -> impl Iterator<Item = &TierStatus> {
        self.tiers
            .iter()
            .filter(|t| t.state != TierState::Converged)
    }
}

/// The driver stopped before the awaited condition held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the Tier driver stopped before the system Tiers were initialized")]
pub struct DriverStopped;

/// A subscription to a driver's [`Status`]. Cheap to clone; every clone sees every update.
#[derive(Clone, Debug)]
pub struct StatusHandle {
    rx: watch::Receiver<Status>,
}

impl From<watch::Receiver<Status>> for StatusHandle {
    /// A handle on any status channel (a driver's, or a test's).
    fn from(rx: watch::Receiver<Status>) -> Self {
        Self { rx }
    }
}

impl StatusHandle {
    /// The latest status.
    pub fn current(&self) -> Status {
        self.rx.borrow().clone()
    }

    /// Resolves once every desired Tier has converged at least once: the "system Tiers
    /// initialized" signal for code that embeds the library.
    ///
    /// # Errors
    ///
    /// [`DriverStopped`] if the driver stops (or is dropped) first.
    pub async fn initialized(&mut self) -> Result<(), DriverStopped> {
        self.wait_for(|s| s.initialized).await
    }

    /// Resolves once `pred` holds for the status (checked at once, then on every update).
    ///
    /// # Errors
    ///
    /// [`DriverStopped`] if the driver stops (or is dropped) before `pred` holds.
    pub async fn wait_for(
        &mut self,
        mut pred: impl FnMut(&Status) -> bool,
    ) -> Result<(), DriverStopped> {
        let mut held = false;
        let result = self
            .rx
            .wait_for(|s| {
                held = pred(s);
                held || s.stopped
            })
            .await
            .map(drop);
        match result {
            Ok(()) if held => Ok(()),
            _ => Err(DriverStopped),
        }
    }

    /// Resolves when the status changes.
    ///
    /// # Errors
    ///
    /// [`DriverStopped`] once the driver is gone.
    pub async fn changed(&mut self) -> Result<(), DriverStopped> {
        self.rx.changed().await.map_err(|_| DriverStopped)
    }
}
