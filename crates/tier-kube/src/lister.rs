//! [`KubeLister`]: the [`TierLister`] port on a kube-runtime reflector, for any controller's
//! Tier object ([`KubeTier`]; Antrea's [`Tier`] by default).
//!
//! A `watcher` on `Api<T>::all`, retried by a [`RetryWatch`] (kube's client-go-like
//! `DefaultBackoff`, or the [`RetryBackoff`] given), feeds a `reflector` that keeps a
//! [`Store<T>`]. A task, spawned by [`KubeLister::start`] and
//! aborted when the last clone of the lister is dropped, polls that stream and, after every
//! applied event (`Apply`, `Delete`, `InitDone`) that changed what the core can observe, bumps a
//! generation counter and publishes it, with that view of the store and the deletions seen so
//! far ([`Deletions`]), on a `tokio::sync::watch` channel.
//!
//! # Guarantees
//!
//! - "Synced" means the first complete list (the moment `Store::wait_until_ready` resolves):
//!   generation 0 means not synced, and the first `InitDone` always raises it to 1.
//! - The generation is bumped only after the store holds the change, and together with the
//!   view of the store it was bumped for: a [`snapshot`](TierLister::snapshot) is exactly the
//!   view of its generation. A snapshot therefore costs a reference count, not a walk of the
//!   store (the webhook takes one per review); the view is built once per change.
//! - Bookmarks and events that change nothing observable (a relist that finds the same Tiers at
//!   the same resourceVersions) do not bump it.
//! - Every deletion is recorded at the generation that shows it (a `Delete` event, or a relist
//!   without a Tier the last view held), so a reader that looks only now and then (the driver
//!   takes the latest snapshot) still learns that a Tier was created and deleted in between.
//!
//! # Recovery
//!
//! A dropped watch is restarted from the last resourceVersion; a watch answered with 410 Gone
//! makes the watcher list again, and the store swaps in the complete new list at `InitDone`,
//! dropping Tiers deleted in between. Either way every change made while the watch was down
//! shows up in the store and bumps the generation. Errors are counted and kept in words for
//! metrics and readiness ([`KubeLister::watch_stats`]); the watcher retries with backoff (reset
//! only once the API server answered: see [`crate::backoff`]) and never gives up. The log says
//! an outage once: a WARN when the watch starts failing, a reminder at most every
//! [`OUTAGE_REMINDER`](crate::backoff::OUTAGE_REMINDER), and "recovered after …" at the first
//! complete list or change after it ([`OutageLog`]). A 410 Gone is routine, logged at DEBUG.
//!
//! # Stopping
//!
//! The task ends when the last clone is dropped (it is aborted, and it reads nothing more once
//! no lister is left). A command that drops its client and runtime right after should
//! [`stop`](KubeLister::stop) the lister first, which returns once the task is gone: the watch
//! then never meets a client or runtime shutting down under it.
//!
//! # Resources
//!
//! The lister holds the resource it watches (`T::DynamicType`: `()` for Antrea's fixed
//! `tiers.crd.antrea.io`, an `ApiResource` for Calico's configured group/version) and hands it
//! to its [`writer`](KubeLister::writer). [`start`](KubeLister::start),
//! [`start_with`](KubeLister::start_with), [`from_reflector`](KubeLister::from_reflector) and
//! [`shared`](KubeLister::shared) are Antrea's; [`watch`](KubeLister::watch),
//! [`watch_with_backoff`](KubeLister::watch_with_backoff),
//! [`from_reflector_with`](KubeLister::from_reflector_with) and
//! [`shared_with`](KubeLister::shared_with) take the resource.
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), tier_kube::lister::ListerError> {
//! use tier_core::TierLister;
//!
//! let lister = tier_kube::lister::KubeLister::start(client)?;
//! lister.wait_synced().await;
//! let snapshot = lister.snapshot();
//! assert!(snapshot.is_synced());
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use futures::StreamExt;
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff};
use tier_core::{Deletions, Generation, Snapshot, TierLister};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backoff::{OutageLog, RetryBackoff, RetryWatch};
use crate::crd::Tier;
use crate::explain::ResourceHints;
use crate::kube_tier::{KubeTier, Observed};
use crate::writer::{KubeWriter, WriterConfig};

/// Starting a [`KubeLister`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ListerError {
    /// There is no tokio runtime to run the watch task on.
    #[error("the Tier lister must be started from within a tokio runtime: {0}")]
    NoRuntime(#[source] tokio::runtime::TryCurrentError),
}

/// Health of the watch, for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// Complete lists applied (`InitDone` events): 1 after the first sync, +1 per relist.
    pub lists: u64,
    /// Errors the watch stream reported (failed lists, failed or expired watches).
    pub errors: u64,
    /// The most recent of those errors, if any, in words
    /// ([`crate::explain::watch_error_about`] the lister's resource).
    pub last_error: Option<String>,
}

/// The [`TierLister`] port on a reflector of one Tier resource (by default Antrea's
/// `tiers.crd.antrea.io`). Cheap to clone; the watch task stops when the last clone is dropped.
pub struct KubeLister<T: KubeTier = Tier> {
    inner: Arc<Inner<T>>,
}

impl<T: KubeTier> Clone for KubeLister<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<T: KubeTier> std::fmt::Debug for KubeLister<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLister")
            .field("resource", &self.inner.resource)
            .field("cached", &self.inner.store.state().len())
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

struct Inner<T: KubeTier> {
    store: Store<T>,
    resource: T::DynamicType,
    published: watch::Receiver<Published<T>>,
    stats: Arc<Mutex<WatchStats>>,
    /// The task polling the reflector stream, when the lister owns it.
    task: Option<JoinHandle<()>>,
}

impl<T: KubeTier> Drop for Inner<T> {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// What an embedder's reflector stream shows a [`KubeLister::shared`] lister: call
/// [`observe`](Self::observe) with every item the stream yields, right after the reflector
/// yields it.
pub struct ListerFeed<T: KubeTier = Tier> {
    store: Store<T>,
    hints: ResourceHints,
    published: watch::Sender<Published<T>>,
    stats: Arc<Mutex<WatchStats>>,
    /// Shared with the lister's own watch client, which ends it at the server's first answer.
    outage: Arc<Mutex<OutageLog>>,
}

/// What the feed last published: the generation and, from the first complete list, the view
/// of the store it was bumped for and every deletion seen up to it (bounded by
/// [`Deletions::MAX`]).
struct Published<T: KubeTier> {
    generation: Generation,
    tiers: Option<Arc<BTreeMap<String, Observed<T>>>>,
    deleted: Deletions,
}

impl<T: KubeTier> std::fmt::Debug for ListerFeed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListerFeed")
            .field("generation", &self.published.borrow().generation)
            .finish_non_exhaustive()
    }
}

impl<T: KubeTier> ListerFeed<T> {
    /// Takes in one item of the reflector stream (already applied to the store): counts lists
    /// and errors, and bumps the generation when what the core can observe changed.
    pub fn observe(&mut self, event: &Result<watcher::Event<T>, watcher::Error>) {
        if let Ok(event) = event
            && crate::backoff::is_progress(event)
        {
            lock(&self.outage).answered();
        }
        match event {
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Ok(
                event @ (watcher::Event::Apply(_)
                | watcher::Event::Delete(_)
                | watcher::Event::InitDone),
            ) => {
                if matches!(event, watcher::Event::InitDone) {
                    lock(&self.stats).lists += 1;
                }
                // Before the first complete list the store is not ready: nothing to publish.
                if lock(&self.stats).lists == 0 {
                    return;
                }
                let now = observed(&self.store);
                let (changed, deleted) = {
                    let published = self.published.borrow();
                    let next = published.generation + 1;
                    let mut deleted = published.deleted.clone();
                    // Gone since the last view (a deletion, or a relist without it), and the
                    // object of a Delete event even if no view showed it.
                    let mut gone: Vec<String> = published
                        .tiers
                        .iter()
                        .flat_map(|before| before.keys())
                        .filter(|name| !now.contains_key(*name))
                        .cloned()
                        .collect();
                    if let watcher::Event::Delete(object) = event {
                        let name = kube::ResourceExt::name_any(object);
                        if !now.contains_key(&name) {
                            gone.push(name);
                        }
                    }
                    for name in &gone {
                        deleted.record(name, next);
                    }
                    let changed = published.tiers.as_deref() != Some(&now) || !gone.is_empty();
                    (changed, deleted)
                };
                if changed {
                    tracing::debug!(tiers = now.len(), %event, "observed Tier set changed");
                    self.published.send_modify(|published| {
                        published.generation += 1;
                        published.tiers = Some(Arc::new(now));
                        published.deleted = deleted;
                    });
                }
            }
            Err(error) => {
                let words = crate::explain::watch_error_about(error, &self.hints);
                if crate::explain::is_expired(error) {
                    // Routine: the watcher lists again; the relist's InitDone says it worked.
                    tracing::debug!(error = %words, "Tier watch expired; listing again");
                } else {
                    lock(&self.outage).failed(&words);
                }
                let mut stats = lock(&self.stats);
                stats.errors += 1;
                stats.last_error = Some(words);
            }
        }
    }

    /// Whether no lister reads what this feed publishes any more (every clone was dropped).
    fn is_orphaned(&self) -> bool {
        self.published.is_closed()
    }
}

impl KubeLister<Tier> {
    /// Watches every Antrea Tier of the cluster with `watcher::Config::default()` (bookmarks
    /// on, pages of 500). Spawns the watch task at once on the current tokio runtime.
    pub fn start(client: kube::Client) -> Result<Self, ListerError> {
        Self::start_with(Api::all(client), watcher::Config::default())
    }

    /// Like [`start`](KubeLister::start), with an explicit API handle and watcher
    /// configuration.
    pub fn start_with(api: Api<Tier>, config: watcher::Config) -> Result<Self, ListerError> {
        // Tiers are cluster-scoped: the handle is `Api::all` of its client.
        Self::own_watch(api.into_client(), (), config, DefaultBackoff::default())
    }

    /// A lister on an embedder's reflector: `store` is its store and `events` the stream
    /// `kube::runtime::reflector(writer, ...)` returned for it, which the lister's task polls.
    /// Use [`shared`](Self::shared) instead when the embedder polls the stream itself.
    pub fn from_reflector<S>(store: Store<Tier>, events: S) -> Result<Self, ListerError>
    where
        S: futures::Stream<Item = Result<watcher::Event<Tier>, watcher::Error>> + Send + 'static,
    {
        Self::from_reflector_with((), store, events)
    }

    /// A lister on an embedder's reflector store, fed by the embedder: show the returned
    /// [`ListerFeed`] every item of the reflector stream (see [`ListerFeed::observe`]). The
    /// lister runs no task and no watch of its own; it never syncs if the feed is dropped
    /// before the first complete list.
    pub fn shared(store: Store<Tier>) -> (Self, ListerFeed) {
        Self::shared_with((), store)
    }
}

impl<T: KubeTier> KubeLister<T> {
    /// Watches every Tier of `resource` (a Calico group/version, say) with `config`. Spawns the
    /// watch task at once on the current tokio runtime.
    pub fn watch(
        client: kube::Client,
        resource: T::DynamicType,
        config: watcher::Config,
    ) -> Result<Self, ListerError> {
        Self::own_watch(client, resource, config, DefaultBackoff::default())
    }

    /// [`watch`](Self::watch) retrying failed lists and watches at `backoff`'s pace (tierd's
    /// commands use [`RetryBackoff::default`], at most 2 s between attempts) instead of kube's
    /// default backoff.
    pub fn watch_with_backoff(
        client: kube::Client,
        resource: T::DynamicType,
        config: watcher::Config,
        backoff: RetryBackoff,
    ) -> Result<Self, ListerError> {
        Self::own_watch(client, resource, config, backoff)
    }

    /// The lister's own watch of `resource`: retried at `backoff`'s pace ([`RetryWatch`]),
    /// through a client that ends the outage log at the server's first answer
    /// (`client::observed`), so that a watch resumed after an outage says
    /// it recovered even if nothing changed.
    fn own_watch<B: Backoff + 'static>(
        client: kube::Client,
        resource: T::DynamicType,
        config: watcher::Config,
        backoff: B,
    ) -> Result<Self, ListerError> {
        tokio::runtime::Handle::try_current().map_err(ListerError::NoRuntime)?;
        let outage = Arc::new(Mutex::new(outage_log(&T::hints(&resource))));
        let answered = Arc::clone(&outage);
        let client = crate::client::observed(client, move || lock(&answered).answered());
        let api = Api::<T>::all_with(client, &resource);
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let events = reflector::reflector(
            writer,
            RetryWatch::new(watcher::watcher(api, config), backoff),
        );
        Self::spawned(resource, store, events, outage)
    }

    /// [`from_reflector`](KubeLister::from_reflector) for `resource`: the store's writer must
    /// have been made for the same resource (`reflector::store::Writer::new(resource)`).
    pub fn from_reflector_with<S>(
        resource: T::DynamicType,
        store: Store<T>,
        events: S,
    ) -> Result<Self, ListerError>
    where
        S: futures::Stream<Item = Result<watcher::Event<T>, watcher::Error>> + Send + 'static,
    {
        let outage = Arc::new(Mutex::new(outage_log(&T::hints(&resource))));
        Self::spawned(resource, store, events, outage)
    }

    /// A lister whose task polls `events`, logging outages on `outage`.
    fn spawned<S>(
        resource: T::DynamicType,
        store: Store<T>,
        events: S,
        outage: Arc<Mutex<OutageLog>>,
    ) -> Result<Self, ListerError>
    where
        S: futures::Stream<Item = Result<watcher::Event<T>, watcher::Error>> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().map_err(ListerError::NoRuntime)?;
        let (mut lister, feed) = Self::shared_parts(resource, store, outage);
        let task = runtime.spawn(drive(events, feed));
        if let Some(inner) = Arc::get_mut(&mut lister.inner) {
            inner.task = Some(task);
        }
        Ok(lister)
    }

    /// [`shared`](KubeLister::shared) for `resource` (see
    /// [`from_reflector_with`](Self::from_reflector_with)).
    pub fn shared_with(resource: T::DynamicType, store: Store<T>) -> (Self, ListerFeed<T>) {
        let outage = Arc::new(Mutex::new(outage_log(&T::hints(&resource))));
        Self::shared_parts(resource, store, outage)
    }

    /// The lister and its feed, logging outages on `outage`.
    fn shared_parts(
        resource: T::DynamicType,
        store: Store<T>,
        outage: Arc<Mutex<OutageLog>>,
    ) -> (Self, ListerFeed<T>) {
        let (published_tx, published) = watch::channel(Published {
            generation: 0,
            tiers: None,
            deleted: Deletions::default(),
        });
        let stats = Arc::new(Mutex::new(WatchStats::default()));
        let feed = ListerFeed {
            store: store.clone(),
            hints: T::hints(&resource),
            published: published_tx,
            stats: stats.clone(),
            outage,
        };
        let lister = Self {
            inner: Arc::new(Inner {
                store,
                resource,
                published,
                stats,
                task: None,
            }),
        };
        (lister, feed)
    }

    /// A [`KubeWriter`] for this lister's resource whose updates start from this lister's
    /// store, the only safe base (see [`KubeWriter`]). `client` should have
    /// kube's retry layer off ([`client::writer_client`](crate::client::writer_client)).
    pub fn writer(&self, client: kube::Client, config: WriterConfig) -> KubeWriter<T> {
        KubeWriter::new_with(client, self.inner.resource.clone(), self.store(), config)
    }

    /// Stops the watch and returns once its task is gone, when this is the last clone (else it
    /// only drops this one: the others keep the watch). Call it before dropping the client and
    /// the runtime (a command about to exit), so that nothing of the watch runs while they shut
    /// down.
    pub async fn stop(self) {
        let Some(mut inner) = Arc::into_inner(self.inner) else {
            return;
        };
        if let Some(task) = inner.task.take() {
            task.abort();
            // Cancelled (or, had it ended, finished): either way it is gone.
            let _ = task.await;
        }
    }

    /// The reflector's store of full Tier objects (for a webhook, or the writer's updates).
    pub fn store(&self) -> Store<T> {
        self.inner.store.clone()
    }

    /// The resource this lister watches.
    pub fn resource(&self) -> &T::DynamicType {
        &self.inner.resource
    }

    /// The current generation: 0 until the first complete list.
    pub fn generation(&self) -> Generation {
        self.inner.published.borrow().generation
    }

    /// Counts and the last error of the watch, for metrics.
    pub fn watch_stats(&self) -> WatchStats {
        lock(&self.inner.stats).clone()
    }

    /// Resolves at the first complete list; never if the watch task is gone.
    async fn synced(&self) {
        self.next(0).await;
    }

    /// Resolves once the generation is greater than `seen`; never if the watch task is gone.
    async fn next(&self, seen: Generation) {
        let mut published = self.inner.published.clone();
        if published.wait_for(|p| p.generation > seen).await.is_err() {
            // The task ended (it never does while the lister lives): nothing will change.
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait]
impl<T: KubeTier> TierLister<T::Controller> for KubeLister<T> {
    /// Resolves at the first complete list; never if the watch task is gone.
    async fn wait_synced(&self) {
        self.synced().await;
    }

    /// The view the feed published with its generation and deletions: reference counts, not a
    /// walk of the store.
    fn snapshot(&self) -> Snapshot<T::Controller> {
        let published = self.inner.published.borrow();
        match &published.tiers {
            Some(tiers) => Snapshot {
                generation: published.generation,
                tiers: Some(Arc::clone(tiers)),
                deleted: published.deleted.clone(),
            },
            None => Snapshot::default(),
        }
    }

    async fn changed(&self, seen: Generation) {
        self.next(seen).await;
    }
}

/// Everything the store holds, as the core sees it.
fn observed<T: KubeTier>(store: &Store<T>) -> BTreeMap<String, Observed<T>> {
    store
        .state()
        .iter()
        .map(|object| {
            (
                kube::ResourceExt::name_any(object.as_ref()),
                object.observe(),
            )
        })
        .collect()
}

/// Polls the reflector stream forever, showing every item to `feed`.
async fn drive<T: KubeTier, S>(events: S, mut feed: ListerFeed<T>)
where
    S: futures::Stream<Item = Result<watcher::Event<T>, watcher::Error>>,
{
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        if feed.is_orphaned() {
            // Every lister is gone (the task is being aborted): whatever this item says (a
            // client or runtime shutting down under it), nobody reads it.
            return;
        }
        feed.observe(&event);
    }
    tracing::error!("Tier watch stream ended; the Tier cache will no longer change");
}

fn lock<V>(mutex: &Mutex<V>) -> std::sync::MutexGuard<'_, V> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the lister of `hints`' resource logs about an outage of its watch.
fn outage_log(hints: &ResourceHints) -> OutageLog {
    OutageLog::new(format!("the Tier watch ({})", hints.resource))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::channel::mpsc;

    use super::*;
    use crate::crd::{self, TierSpec};

    #[test]
    fn watch_errors_are_described_in_words() {
        let status = kube::core::Status::failure("Unauthorized", "Unauthorized").with_code(401);
        let error = watcher::Error::InitialListFailed(kube::Error::Api(status.boxed()));
        let words = crate::explain::watch_error(&error);
        assert_eq!(
            words,
            "listing Tiers failed: 401 Unauthorized: Unauthorized; check the kubeconfig's \
             credentials or token"
        );
        assert!(!words.contains("Status {"), "{words}");
    }

    fn tier(name: &str, priority: i32, rv: &str) -> Tier {
        let mut tier = Tier::new(
            name,
            TierSpec {
                priority,
                description: None,
            },
        );
        tier.metadata.resource_version = Some(rv.into());
        tier
    }

    type Feed = mpsc::UnboundedSender<Result<watcher::Event<Tier>, watcher::Error>>;

    /// A lister whose reflector is fed by hand instead of by a watcher.
    fn fed() -> (KubeLister, Feed) {
        let (feed, rx) = mpsc::unbounded();
        let (store, writer) = reflector::store();
        let lister = KubeLister::from_reflector(store, reflector::reflector(writer, rx)).unwrap();
        (lister, feed)
    }

    async fn settle(lister: &KubeLister, generation: Generation) {
        tokio::time::timeout(Duration::from_secs(5), lister.changed(generation - 1))
            .await
            .unwrap();
        assert_eq!(lister.generation(), generation);
    }

    async fn quiet(lister: &KubeLister, generation: Generation) {
        let woke =
            tokio::time::timeout(Duration::from_millis(50), lister.changed(generation)).await;
        assert!(woke.is_err(), "unexpected bump past {generation}");
    }

    fn send(feed: &Feed, event: watcher::Event<Tier>) {
        feed.unbounded_send(Ok(event)).unwrap();
    }

    #[tokio::test]
    async fn unsynced_until_the_first_complete_list() {
        let (lister, feed) = fed();
        assert_eq!(lister.snapshot(), Snapshot::default());
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitApply(tier("a", 1, "1")));
        quiet(&lister, 0).await;
        assert!(!lister.snapshot().is_synced());
        send(&feed, watcher::Event::InitDone);
        tokio::time::timeout(Duration::from_secs(5), lister.wait_synced())
            .await
            .unwrap();
        let snapshot = lister.snapshot();
        assert_eq!(snapshot.generation, 1);
        assert_eq!(snapshot.observe("a").resource_version(), Some("1"));
        // Synced is exactly the store's readiness.
        tokio::time::timeout(
            Duration::from_millis(100),
            lister.store().wait_until_ready(),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(lister.watch_stats().lists, 1);
    }

    #[tokio::test]
    async fn an_empty_list_syncs() {
        let (lister, feed) = fed();
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitDone);
        settle(&lister, 1).await;
        let snapshot = lister.snapshot();
        assert!(snapshot.is_synced());
        assert_eq!(snapshot.tiers.unwrap().len(), 0);
    }

    #[tokio::test]
    async fn snapshots_of_one_generation_share_one_view_built_once() {
        let (lister, feed) = fed();
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitApply(tier("a", 1, "2")));
        send(&feed, watcher::Event::InitDone);
        settle(&lister, 1).await;
        let (first, second) = (lister.snapshot(), lister.snapshot());
        let (Some(first_view), Some(second_view)) = (&first.tiers, &second.tiers) else {
            panic!("synced snapshots without Tiers: {first:?}");
        };
        // The webhook takes a snapshot per review: a reference count, not a copy of the store.
        assert!(Arc::ptr_eq(first_view, second_view));
        assert_eq!(first.observe("a").resource_version(), Some("2"));

        send(&feed, watcher::Event::Apply(tier("a", 5, "3")));
        settle(&lister, 2).await;
        let third = lister.snapshot();
        assert_eq!(third.generation, 2);
        assert_eq!(third.observe("a").resource_version(), Some("3"));
        // The old view is still the old generation's, whoever holds it.
        assert_eq!(first.observe("a").resource_version(), Some("2"));
    }

    #[tokio::test]
    async fn apply_and_delete_bump_the_generation() {
        let (lister, feed) = fed();
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitDone);
        settle(&lister, 1).await;
        send(&feed, watcher::Event::Apply(tier("a", 1, "2")));
        settle(&lister, 2).await;
        assert_eq!(lister.snapshot().observe("a").resource_version(), Some("2"));
        send(&feed, watcher::Event::Apply(tier("a", 5, "3")));
        settle(&lister, 3).await;
        assert_eq!(
            lister.snapshot().observe("a"),
            tier_core::Observed::Present(crd::observe(&tier("a", 5, "3")))
        );
        send(&feed, watcher::Event::Delete(tier("a", 5, "3")));
        settle(&lister, 4).await;
        assert_eq!(lister.snapshot().observe("a"), tier_core::Observed::Absent);
    }

    #[tokio::test]
    async fn a_create_and_its_deletion_read_together_show_the_deletion() {
        let (lister, feed) = fed();
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitDone);
        settle(&lister, 1).await;
        let before = lister.snapshot();
        // Both events are applied before the reader looks again: the set looks unchanged.
        send(&feed, watcher::Event::Apply(tier("a", 1, "2")));
        send(&feed, watcher::Event::Delete(tier("a", 1, "2")));
        settle(&lister, 3).await;
        let after = lister.snapshot();
        assert_eq!(after.observe("a"), tier_core::Observed::Absent);
        assert_eq!(before.tiers, after.tiers);
        let deleted = after.deleted_at("a").unwrap();
        assert!(deleted > before.generation, "{deleted}");
        assert_eq!(before.deleted_at("a"), None);
    }

    #[tokio::test]
    async fn a_relist_without_a_tier_records_its_deletion() {
        let (lister, feed) = fed();
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitApply(tier("a", 1, "1")));
        send(&feed, watcher::Event::InitDone);
        settle(&lister, 1).await;
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitDone);
        settle(&lister, 2).await;
        assert_eq!(lister.snapshot().deleted_at("a"), Some(2));
    }

    #[tokio::test]
    async fn a_relist_of_the_same_set_does_not_bump() {
        let (lister, feed) = fed();
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitApply(tier("a", 1, "1")));
        send(&feed, watcher::Event::InitDone);
        settle(&lister, 1).await;
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitApply(tier("a", 1, "1")));
        send(&feed, watcher::Event::InitDone);
        quiet(&lister, 1).await;
        assert_eq!(lister.watch_stats().lists, 2);
    }

    #[tokio::test]
    async fn a_relist_after_gone_loses_no_change() {
        let (lister, feed) = fed();
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitApply(tier("kept", 1, "1")));
        send(&feed, watcher::Event::InitApply(tier("deleted", 2, "2")));
        send(&feed, watcher::Event::InitApply(tier("changed", 3, "3")));
        send(&feed, watcher::Event::InitDone);
        settle(&lister, 1).await;

        // The watch expires; meanwhile "deleted" goes, "changed" changes, "added" appears.
        let mut gone = kube::core::Status::failure("too old resource version", "Expired");
        gone.code = 410;
        feed.unbounded_send(Err(watcher::Error::WatchError(gone.boxed())))
            .unwrap();
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitApply(tier("kept", 1, "1")));
        send(&feed, watcher::Event::InitApply(tier("changed", 30, "5")));
        quiet(&lister, 1).await;
        // Until the relist completes, the old view stays (complete, if older).
        assert_eq!(
            lister.snapshot().observe("deleted").resource_version(),
            Some("2")
        );
        send(&feed, watcher::Event::InitApply(tier("added", 4, "6")));
        send(&feed, watcher::Event::InitDone);
        settle(&lister, 2).await;

        let snapshot = lister.snapshot();
        assert_eq!(snapshot.observe("deleted"), tier_core::Observed::Absent);
        assert_eq!(snapshot.observe("changed").resource_version(), Some("5"));
        assert_eq!(snapshot.observe("added").resource_version(), Some("6"));
        assert_eq!(snapshot.observe("kept").resource_version(), Some("1"));
        let stats = lister.watch_stats();
        assert_eq!(stats.errors, 1);
        assert_eq!(stats.lists, 2);
        assert!(stats.last_error.unwrap().contains("too old"));
    }

    #[tokio::test]
    async fn changed_is_cancel_safe() {
        let (lister, feed) = fed();
        send(&feed, watcher::Event::Init);
        send(&feed, watcher::Event::InitDone);
        settle(&lister, 1).await;
        // Drop a pending `changed`, change the set, then ask again with the same generation.
        quiet(&lister, 1).await;
        send(&feed, watcher::Event::Apply(tier("a", 1, "1")));
        tokio::time::sleep(Duration::from_millis(20)).await;
        tokio::time::timeout(Duration::from_secs(1), lister.changed(1))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn dropping_the_last_clone_stops_the_task() {
        let (lister, feed) = fed();
        let clone = lister.clone();
        drop(lister);
        send(&feed, watcher::Event::Init);
        drop(clone);
        tokio::time::timeout(Duration::from_secs(5), async {
            while !feed.is_closed() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
    }

    /// A stream that never yields and says when it was dropped.
    struct Watched(Arc<std::sync::atomic::AtomicBool>);

    impl futures::Stream for Watched {
        type Item = Result<watcher::Event<Tier>, watcher::Error>;
        fn poll_next(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            std::task::Poll::Pending
        }
    }

    impl Drop for Watched {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn stop_returns_once_the_watch_is_gone() {
        let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (store, _writer) = reflector::store();
        let lister = KubeLister::from_reflector(store, Watched(gone.clone())).unwrap();
        tokio::task::yield_now().await;
        let clone = lister.clone();
        // Not the last clone: the watch goes on.
        clone.stop().await;
        assert!(!gone.load(std::sync::atomic::Ordering::SeqCst));
        // The last: the watch's stream (and the client it holds) is dropped before `stop`
        // returns, so a command can drop its client and runtime right after.
        lister.stop().await;
        assert!(gone.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn starting_outside_a_runtime_is_an_error() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async { kube::Client::try_from(config).unwrap() })
        })
        .join()
        .unwrap();
        let error = KubeLister::start(client).unwrap_err();
        assert!(error.to_string().contains("tokio runtime"), "{error}");
    }
}
