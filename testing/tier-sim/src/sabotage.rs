//! Deliberately broken initializers, to prove that the invariant checks can fail.
//!
//! A [`Saboteur`] sits between tierd's driver and the [checking decorators](crate::check), so
//! the checks see what a broken initializer would send to (or read from) the cluster. Without a
//! [`Sabotage`] it passes everything through unchanged.

use std::sync::Arc;

use async_trait::async_trait;
use tier_core::{
    DesiredSet, Generation, ObservedTier, Snapshot, TierLister, TierSpec, TierWriter, WriteError,
};

/// How to break an initializer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Sabotage {
    /// The lister claims to be synced at once and shows an empty set until it really syncs:
    /// the initializer writes before its cache synced (issue 6694's root cause).
    EarlySync,
    /// Creates go to `<name>-shadow` instead of the desired name.
    ForeignName,
    /// Every call is sent twice at once.
    DuplicateCalls,
    /// The lister shows every desired Tier as in sync, whatever the cache holds.
    LyingCache,
    /// Writes report success without reaching the server.
    SwallowWrites,
}

/// A port decorator that breaks the port as its [`Sabotage`] says (or not at all).
#[derive(Debug)]
pub struct Saboteur<T> {
    inner: T,
    sabotage: Option<Sabotage>,
    desired: Arc<DesiredSet>,
}

impl<T> Saboteur<T> {
    /// Wraps `inner`; `sabotage: None` passes everything through.
    pub fn new(inner: T, sabotage: Option<Sabotage>, desired: &DesiredSet) -> Self {
        Self {
            inner,
            sabotage,
            desired: Arc::new(desired.clone()),
        }
    }
}

#[async_trait]
impl<L: TierLister> TierLister for Saboteur<L> {
    async fn wait_synced(&self) {
        if self.sabotage != Some(Sabotage::EarlySync) {
            self.inner.wait_synced().await;
        }
    }

    fn snapshot(&self) -> Snapshot {
        let snapshot = self.inner.snapshot();
        match self.sabotage {
            Some(Sabotage::EarlySync) if !snapshot.is_synced() => {
                Snapshot::synced(snapshot.generation, [])
            }
            Some(Sabotage::LyingCache) => {
                let tiers = self.desired.tiers().iter().map(|t| ObservedTier {
                    name: t.name.clone(),
                    priority: t.priority,
                    description: t.description.clone(),
                    resource_version: snapshot
                        .observe(&t.name)
                        .resource_version()
                        .unwrap_or("0")
                        .to_owned(),
                    last_writer: None,
                });
                Snapshot::synced(snapshot.generation, tiers)
            }
            _ => snapshot,
        }
    }

    async fn changed(&self, seen: Generation) {
        self.inner.changed(seen).await;
    }
}

#[async_trait]
impl<W: TierWriter> TierWriter for Saboteur<W> {
    async fn create(&self, tier: &TierSpec) -> Result<(), WriteError> {
        match self.sabotage {
            Some(Sabotage::ForeignName) => {
                let mut shadow = tier.clone();
                shadow.name.push_str("-shadow");
                self.inner.create(&shadow).await
            }
            Some(Sabotage::DuplicateCalls) => {
                let (first, _) = futures::join!(self.inner.create(tier), self.inner.create(tier));
                first
            }
            Some(Sabotage::SwallowWrites) => Ok(()),
            _ => self.inner.create(tier).await,
        }
    }

    async fn update(&self, tier: &TierSpec, resource_version: &str) -> Result<(), WriteError> {
        match self.sabotage {
            Some(Sabotage::DuplicateCalls) => {
                let (first, _) = futures::join!(
                    self.inner.update(tier, resource_version),
                    self.inner.update(tier, resource_version)
                );
                first
            }
            Some(Sabotage::SwallowWrites) => Ok(()),
            _ => self.inner.update(tier, resource_version).await,
        }
    }
}
