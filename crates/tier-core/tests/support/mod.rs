//! Test support: a hand-written lister fake (mockall's async methods cannot wait, and a lister
//! must), a tokio clock, and builders. Writers are mockall mocks with exact call counts.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use tier_core::{
    Clock, DesiredSet, Generation, ObservedTier, Snapshot, TierLister, TierSpec, ValidationRules,
};
use tokio::sync::watch;

/// A cache whose content tests set directly.
#[derive(Clone)]
pub struct FakeCache {
    state: Arc<Mutex<State>>,
    generation: Arc<watch::Sender<Generation>>,
}

struct State {
    tiers: Option<BTreeMap<String, ObservedTier>>,
    next_rv: u64,
}

impl FakeCache {
    /// An unsynced cache.
    pub fn unsynced() -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                tiers: None,
                next_rv: 1,
            })),
            generation: Arc::new(watch::channel(0).0),
        }
    }

    /// A synced cache holding `tiers` (name, priority, description).
    pub fn synced(tiers: &[(&str, i64, &str)]) -> Self {
        let cache = Self::unsynced();
        cache.state.lock().unwrap().tiers = Some(BTreeMap::new());
        for (name, priority, description) in tiers {
            cache.insert(name, *priority, description);
        }
        cache.bump();
        cache
    }

    /// Completes the first list.
    pub fn sync(&self) {
        self.state
            .lock()
            .unwrap()
            .tiers
            .get_or_insert_with(BTreeMap::new);
        self.bump();
    }

    /// Creates or replaces a Tier; returns its new resourceVersion.
    pub fn put(&self, name: &str, priority: i64, description: &str) -> String {
        let rv = self.insert(name, priority, description);
        self.bump();
        rv
    }

    /// Writes `spec` as the server would after a successful create or update.
    pub fn apply(&self, spec: &TierSpec) -> String {
        self.put(&spec.name, spec.priority, &spec.description)
    }

    /// Removes a Tier.
    pub fn delete(&self, name: &str) {
        if let Some(tiers) = self.state.lock().unwrap().tiers.as_mut() {
            tiers.remove(name);
        }
        self.bump();
    }

    /// The resourceVersion of `name`.
    pub fn rv(&self, name: &str) -> String {
        self.snapshot()
            .observe(name)
            .resource_version()
            .unwrap()
            .to_owned()
    }

    fn insert(&self, name: &str, priority: i64, description: &str) -> String {
        let mut state = self.state.lock().unwrap();
        let rv = state.next_rv.to_string();
        state.next_rv += 1;
        state.tiers.get_or_insert_with(BTreeMap::new).insert(
            name.to_owned(),
            ObservedTier {
                name: name.to_owned(),
                priority,
                description: description.to_owned(),
                resource_version: rv.clone(),
                last_writer: None,
            },
        );
        rv
    }

    fn bump(&self) {
        self.generation.send_modify(|g| *g += 1);
    }
}

#[async_trait]
impl TierLister for FakeCache {
    async fn wait_synced(&self) {
        let mut rx = self.generation.subscribe();
        loop {
            if self.state.lock().unwrap().tiers.is_some() {
                return;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    fn snapshot(&self) -> Snapshot {
        let generation = *self.generation.borrow();
        let tiers = self.state.lock().unwrap().tiers.clone();
        Snapshot {
            generation,
            tiers: tiers.map(Arc::new),
            ..Snapshot::default()
        }
    }

    async fn changed(&self, seen: Generation) {
        let mut rx = self.generation.subscribe();
        if rx.wait_for(|g| *g > seen).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// tokio's clock (virtual under `start_paused`).
#[derive(Clone, Copy)]
pub struct TestClock;

#[async_trait]
impl Clock for TestClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    async fn sleep_until(&self, deadline: Instant) {
        tokio::time::sleep_until(deadline.into()).await;
    }
}

/// A desired set of the named Antrea Tiers.
pub fn antrea(names: &[&str]) -> DesiredSet {
    let tiers = DesiredSet::antrea()
        .tiers()
        .iter()
        .filter(|t| names.contains(&t.name.as_str()))
        .cloned()
        .collect();
    DesiredSet::new(tiers, &ValidationRules::default()).unwrap()
}

/// The Antrea description of `name`.
pub fn description(name: &str) -> String {
    DesiredSet::antrea().get(name).unwrap().description.clone()
}
