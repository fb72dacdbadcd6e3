//! The published status of a driver: what readiness checks, metrics and logs subscribe to.

use std::time::Instant;

use tokio::sync::watch;

use crate::machine::{TierState, TierStatus, WriteKind};
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
    /// When the driver started running, on its clock.
    pub started_at: Option<Instant>,
    /// When `initialized` became true, on the driver's clock.
    pub initialized_at: Option<Instant>,
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

/// Something worth telling people about one Tier, derived from two consecutive statuses: one
/// event per episode, never one per retry. Adapters turn these into Kubernetes Events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TierEvent {
    /// tierd created the Tier.
    Created {
        /// The Tier.
        tier: String,
    },
    /// tierd updated the Tier's fields to the desired ones.
    Corrected {
        /// The Tier.
        tier: String,
    },
    /// The server started refusing writes of the Tier.
    Blocked {
        /// The Tier.
        tier: String,
        /// The server's message.
        message: String,
    },
    /// Someone keeps changing the Tier back; corrections are held off.
    Contested {
        /// The Tier.
        tier: String,
        /// Corrections in a row so far.
        corrections: u32,
    },
}

impl TierEvent {
    /// The Tier the event is about.
    pub fn tier(&self) -> &str {
        match self {
            TierEvent::Created { tier }
            | TierEvent::Corrected { tier }
            | TierEvent::Blocked { tier, .. }
            | TierEvent::Contested { tier, .. } => tier,
        }
    }
}

/// The events between `before` and `after`, in Tier order: a successful write, the start of
/// a blocked episode, the start of a contest.
pub fn events(before: &Status, after: &Status) -> Vec<TierEvent> {
    let mut out = Vec::new();
    for next in &after.tiers {
        let prev = before.tiers.iter().find(|t| t.name == next.name);
        let tier = || next.name.clone();
        if next.outcomes.ok > prev.map_or(0, |p| p.outcomes.ok) {
            out.push(match next.last_write {
                Some(WriteKind::Create) => TierEvent::Created { tier: tier() },
                _ => TierEvent::Corrected { tier: tier() },
            });
        }
        let was_blocked = prev.is_some_and(|p| matches!(p.state, TierState::Blocked { .. }));
        if let TierState::Blocked { message, .. } = &next.state
            && !was_blocked
        {
            out.push(TierEvent::Blocked {
                tier: tier(),
                message: message.clone(),
            });
        }
        if next.contested && !prev.is_some_and(|p| p.contested) {
            out.push(TierEvent::Contested {
                tier: tier(),
                corrections: u32::try_from(next.corrections).unwrap_or(u32::MAX),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::machine::OutcomeCounts;

    fn tier(state: TierState, ok: u64, last_write: Option<WriteKind>) -> TierStatus {
        TierStatus {
            name: "t".into(),
            state,
            outcomes: OutcomeCounts {
                ok,
                ..OutcomeCounts::default()
            },
            corrections: 0,
            contested: false,
            converged_at: None,
            last_write,
        }
    }

    fn status(tiers: Vec<TierStatus>) -> Status {
        Status {
            tiers,
            ..Status::default()
        }
    }

    #[test]
    fn one_event_per_episode_not_per_retry() {
        let blocked = |attempt| TierState::Blocked {
            since: Instant::now(),
            attempt,
            message: "denied".into(),
        };
        let s0 = status(vec![tier(TierState::Pending, 0, None)]);
        let s1 = status(vec![tier(blocked(1), 0, None)]);
        let s2 = status(vec![tier(blocked(2), 0, None)]);
        let s3 = status(vec![tier(TierState::Pending, 1, Some(WriteKind::Create))]);
        let s4 = status(vec![tier(TierState::Converged, 1, Some(WriteKind::Create))]);
        let s5 = status(vec![tier(TierState::Converged, 2, Some(WriteKind::Update))]);
        assert_eq!(
            events(&s0, &s1),
            [TierEvent::Blocked {
                tier: "t".into(),
                message: "denied".into()
            }]
        );
        assert_eq!(events(&s1, &s2), []);
        assert_eq!(events(&s2, &s3), [TierEvent::Created { tier: "t".into() }]);
        assert_eq!(events(&s3, &s4), []);
        assert_eq!(
            events(&s4, &s5),
            [TierEvent::Corrected { tier: "t".into() }]
        );
        let mut contested = tier(TierState::Converged, 2, Some(WriteKind::Update));
        contested.contested = true;
        contested.corrections = 3;
        let s6 = status(vec![contested.clone()]);
        assert_eq!(
            events(&s5, &s6),
            [TierEvent::Contested {
                tier: "t".into(),
                corrections: 3
            }]
        );
        assert_eq!(events(&s6, &status(vec![contested])), []);
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
