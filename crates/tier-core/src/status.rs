//! The published status of a driver: what readiness checks, metrics and logs subscribe to.

use tokio::sync::watch;

use crate::machine::{TierState, TierStatus};
use crate::observe::Generation;

/// A snapshot of a whole driver run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Whether the Tier cache has completed its first list.
    pub synced: bool,
    /// Whether every desired Tier has converged at least once ("system Tiers initialized").
    /// Latched: it stays true when a Tier drifts later.
    pub initialized: bool,
    /// The generation of the observed set the statuses were computed from.
    pub generation: Generation,
    /// Every desired Tier, in the order of the desired set.
    pub tiers: Vec<TierStatus>,
    /// Whether the driver has stopped (converged in `once` mode, or cancelled).
    pub stopped: bool,
}

impl Status {
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

impl StatusHandle {
    pub(crate) fn new(rx: watch::Receiver<Status>) -> Self {
        Self { rx }
    }

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
