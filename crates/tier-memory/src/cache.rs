//! The lister side: an informer-like cache of the store, which may sync late and lag behind.
//!
//! A [`MemoryLister`] implements [`TierLister`]. It starts from the store's content when it is
//! created (its "list") and then receives every change (its "watch"). A change becomes visible
//! `lag` after it was written, on tokio's clock (virtual under paused time); with a zero lag it
//! is visible as soon as the write returns. Changes become visible in write order.
//!
//! Every deletion it applies is recorded at the generation that shows it ([`Snapshot::deleted`]):
//! a reader that looks only after a create and its deletion were both applied still learns of
//! the deletion.
//!
//! The cache is lazy: it applies due changes whenever it is read, and
//! [`changed`](TierLister::changed) sleeps until the next change is due, so no task runs in the
//! background.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::time::Duration;
//! use tier_core::{TierLister, TierSpec};
//! use tier_memory::{CacheConfig, MemoryCluster, SyncMode};
//!
//! let cluster = MemoryCluster::new();
//! let cache = cluster.cache(CacheConfig::default().sync(SyncMode::Manual).lag(Duration::from_secs(1)));
//! assert_eq!(cache.snapshot().tiers, None);
//! cache.sync();
//! cluster.create_raw(&TierSpec::new("a", 1, "")).unwrap();
//! assert!(cache.snapshot().observe("a") == tier_core::Observed::Absent);
//! tokio::time::sleep(Duration::from_secs(1)).await;
//! assert!(cache.snapshot().observe("a").resource_version().is_some());
//! # }
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tier_core::{Antrea, CachedTier, Controller, Deletions, Generation, Snapshot, TierLister};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::lock;
use crate::store::Change;

/// When a cache completes its first list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// Synced as soon as it is created (the default).
    #[default]
    Immediate,
    /// Synced only once [`MemoryLister::sync`] is called.
    Manual,
    /// Synced this long (on tokio's clock) after it is created, or at `sync()`.
    After(Duration),
}

/// How a cache syncs and how far it lags behind the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheConfig {
    /// When the first list completes.
    pub sync: SyncMode,
    /// How long after a write the cache shows it (zero: at once).
    pub lag: Duration,
}

impl CacheConfig {
    /// The same configuration syncing per `sync`.
    pub fn sync(mut self, sync: SyncMode) -> Self {
        self.sync = sync;
        self
    }

    /// The same configuration lagging by `lag`.
    pub fn lag(mut self, lag: Duration) -> Self {
        self.lag = lag;
        self
    }
}

/// A cache of the cluster's Tiers, implementing [`TierLister`]. Cheap to clone; clones share
/// the cache.
#[derive(Debug)]
pub struct MemoryLister<C: Controller = Antrea> {
    shared: Arc<CacheShared<C>>,
}

impl<C: Controller> Clone for MemoryLister<C> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The state shared by a cache's handles and the cluster that feeds it.
#[derive(Debug)]
pub(crate) struct CacheShared<C: Controller> {
    state: Mutex<CacheState<C>>,
    notify: Notify,
}

#[derive(Debug)]
struct CacheState<C: Controller> {
    view: Arc<BTreeMap<String, C::Observed>>,
    /// Every deletion applied, at the generation that shows it (bounded by [`Deletions::MAX`]).
    deleted: Deletions,
    /// Changes written but not visible yet, with the instant they become visible.
    pending: VecDeque<(Instant, Change<C>)>,
    /// Changes applied to `view` so far.
    applied: u64,
    synced: bool,
    sync_at: Option<Instant>,
    lag: Duration,
}

impl<C: Controller> CacheState<C> {
    /// Applies every change due at `now` and syncs if the sync deadline passed.
    fn catch_up(&mut self, now: Instant) {
        if self.sync_at.is_some_and(|at| at <= now) {
            self.synced = true;
            self.sync_at = None;
        }
        while let Some((due, _)) = self.pending.front() {
            if *due > now {
                break;
            }
            let Some((_, change)) = self.pending.pop_front() else {
                break;
            };
            let view = Arc::make_mut(&mut self.view);
            self.applied += 1;
            match change {
                Change::Put(tier) => {
                    view.insert(tier.name().to_owned(), tier);
                }
                Change::Delete(name) => {
                    view.remove(&name);
                    // The generation this change is visible at (see `generation`).
                    self.deleted.record(&name, self.applied + 1);
                }
            }
        }
    }

    /// 0 before the first list, then one more for the list and for every visible change.
    fn generation(&self) -> Generation {
        if self.synced { self.applied + 1 } else { 0 }
    }

    /// When the cache next changes by itself (a change falls due, or the sync deadline).
    fn next_deadline(&self) -> Option<Instant> {
        let change = self.pending.front().map(|(due, _)| *due);
        match (change, self.sync_at.filter(|_| !self.synced)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn snapshot(&self) -> Snapshot<C> {
        Snapshot {
            generation: self.generation(),
            tiers: self.synced.then(|| Arc::clone(&self.view)),
            deleted: self.deleted.clone(),
        }
    }
}

/// `now + delay`, saturating at a far future instead of overflowing.
fn later(now: Instant, delay: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(delay)
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

impl<C: Controller> CacheShared<C> {
    /// Queues `change`, written now, to become visible after the lag.
    pub(crate) fn push(&self, change: Change<C>) {
        let now = Instant::now();
        {
            let mut state = lock(&self.state);
            let mut due = later(now, state.lag);
            // Never let a shorter lag reorder changes.
            if let Some((last, _)) = state.pending.back() {
                due = due.max(*last);
            }
            state.pending.push_back((due, change));
            state.catch_up(now);
        }
        self.notify.notify_waiters();
    }
}

impl<C: Controller> MemoryLister<C> {
    /// A cache whose first list returns `tiers`.
    pub(crate) fn new(config: CacheConfig, tiers: Arc<BTreeMap<String, C::Observed>>) -> Self {
        let (synced, sync_at) = match config.sync {
            SyncMode::Immediate => (true, None),
            SyncMode::Manual => (false, None),
            SyncMode::After(delay) => (false, Some(later(Instant::now(), delay))),
        };
        let state = CacheState {
            view: tiers,
            deleted: Deletions::default(),
            pending: VecDeque::new(),
            applied: 0,
            synced,
            sync_at,
            lag: config.lag,
        };
        Self {
            shared: Arc::new(CacheShared {
                state: Mutex::new(state),
                notify: Notify::new(),
            }),
        }
    }

    /// The shared state, for the cluster to feed.
    pub(crate) fn shared(&self) -> &Arc<CacheShared<C>> {
        &self.shared
    }

    /// What the cache shows now, `None` before sync (what a webhook reading it sees).
    pub(crate) fn view_now(&self) -> Option<Arc<BTreeMap<String, C::Observed>>> {
        self.read(CacheState::snapshot).tiers
    }

    /// Completes the first list now (whatever the [`SyncMode`]); a no-op once synced.
    pub fn sync(&self) {
        {
            let mut state = lock(&self.shared.state);
            state.synced = true;
            state.sync_at = None;
        }
        self.shared.notify.notify_waiters();
    }

    /// Whether the first list has completed.
    pub fn is_synced(&self) -> bool {
        self.read(|state| state.synced)
    }

    /// How far the cache lags behind the store.
    pub fn lag(&self) -> Duration {
        self.read(|state| state.lag)
    }

    /// Changes the lag for writes from now on; changes already queued keep their due time.
    pub fn set_lag(&self, lag: Duration) {
        lock(&self.shared.state).lag = lag;
    }

    /// Shows every pending change now, as a relist after a watch outage would.
    pub fn flush(&self) {
        {
            let mut state = lock(&self.shared.state);
            let now = Instant::now();
            for (due, _) in &mut state.pending {
                *due = now;
            }
            state.catch_up(now);
        }
        self.shared.notify.notify_waiters();
    }

    /// How many written changes the cache does not show yet.
    pub fn pending(&self) -> usize {
        self.read(|state| state.pending.len())
    }

    fn read<T>(&self, f: impl FnOnce(&CacheState<C>) -> T) -> T {
        let mut state = lock(&self.shared.state);
        state.catch_up(Instant::now());
        f(&state)
    }

    /// Waits until `ready` holds for the cache, re-checking on every change and deadline.
    /// Cancel-safe: it holds nothing between polls but a registration with the notifier.
    async fn wait_until(&self, ready: impl Fn(&CacheState<C>) -> bool + Send) {
        loop {
            let mut notified = pin!(self.shared.notify.notified());
            notified.as_mut().enable();
            let deadline = {
                let mut state = lock(&self.shared.state);
                state.catch_up(Instant::now());
                if ready(&state) {
                    return;
                }
                state.next_deadline()
            };
            match deadline {
                Some(at) => {
                    // Either outcome means "look again".
                    let _ = tokio::time::timeout_at(at, notified).await;
                }
                None => notified.await,
            }
        }
    }
}

#[async_trait]
impl<C: Controller> TierLister<C> for MemoryLister<C> {
    async fn wait_synced(&self) {
        self.wait_until(|state| state.synced).await;
    }

    fn snapshot(&self) -> Snapshot<C> {
        self.read(CacheState::snapshot)
    }

    async fn changed(&self, seen: Generation) {
        self.wait_until(|state| state.generation() > seen).await;
    }
}
