//! [`MemoryCluster`]: the handle to one in-memory Tier cluster, and its builder.
//!
//! The cluster is the API server: a store (what etcd holds) behind a lock, Antrea's
//! [admission](crate::admission) on the write path, the caches it feeds, the
//! [faults](crate::faults) script and the [call log](crate::calls). It implements both ports
//! itself (through its default cache and the writer client [`DEFAULT_CLIENT`]); more caches and
//! writers model more initializers.
//!
//! Write paths, in kube-apiserver's order:
//!
//! | call | checks |
//! |---|---|
//! | `create` (port) | schema (422), webhook (400/500), AlreadyExists (409) |
//! | `update` (port) | NotFound (404), resourceVersion missing (422) or stale (409), schema, webhook reachable |
//! | `create_raw`, `put_raw`, `edit`, `delete` | like `create`/`update` but without admission |
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use tier_core::{ErrorClass, TierSpec, TierWriter};
//! use tier_memory::MemoryCluster;
//!
//! let cluster = MemoryCluster::builder()
//!     .with_tier(TierSpec::new("baseline", 253, "[READ-ONLY]: System generated Baseline Tier"))
//!     .build();
//! // Admission runs before the AlreadyExists check, as in the real server.
//! let err = cluster.create(&TierSpec::new("baseline", 253, "")).await.unwrap_err();
//! assert_eq!(err.class, ErrorClass::Denied);
//! assert!(err.message.ends_with("tier baseline priority 253 overlaps with existing Tier"));
//! # }
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tier_core::{Generation, ObservedTier, Snapshot, TierLister, TierSpec, TierWriter, WriteError};

use crate::admission::{Admission, AdmissionView};
use crate::cache::{CacheConfig, CacheShared, MemoryLister, SyncMode};
use crate::calls::{CallLog, Recorder};
use crate::error::ApiError;
use crate::faults::Faults;
use crate::lock;
use crate::store::{Store, Written, validate};
use crate::writer::MemoryWriter;

/// The client name of the cluster's own writer.
pub const DEFAULT_CLIENT: &str = "tierd";

/// A handle to an in-memory Tier cluster. Cheap to clone; clones share the cluster.
///
/// It is a [`TierLister`] (its default cache) and a [`TierWriter`] (client [`DEFAULT_CLIENT`]).
/// Build it inside the tokio runtime that uses it, so that its clock is the runtime's (virtual
/// under paused time).
#[derive(Clone, Debug)]
pub struct MemoryCluster {
    inner: Arc<ClusterInner>,
    writer: MemoryWriter,
}

/// The shared state of a cluster.
#[derive(Debug)]
pub(crate) struct ClusterInner {
    server: Mutex<Server>,
    /// The default cache, also what an [`AdmissionView::Cache`] webhook reads.
    informer: MemoryLister,
    pub(crate) faults: Faults,
    pub(crate) recorder: Recorder,
}

/// What the server lock guards. Lock order: the server, then a cache.
#[derive(Debug)]
struct Server {
    store: Store,
    caches: Vec<Weak<CacheShared>>,
    admission: Option<Admission>,
    webhook_reachable: bool,
}

impl Server {
    /// Hands a write's change to every live cache.
    fn emit(&mut self, written: &Written) {
        if let Some(change) = &written.change {
            self.caches.retain(|cache| match cache.upgrade() {
                Some(cache) => {
                    cache.push(change.clone());
                    true
                }
                None => false,
            });
        }
    }
}

impl ClusterInner {
    fn admit_create(&self, server: &Server, tier: &TierSpec) -> Result<(), ApiError> {
        let Some(admission) = &server.admission else {
            return Ok(());
        };
        if !server.webhook_reachable {
            return Err(ApiError::WebhookUnreachable);
        }
        match admission.view {
            AdmissionView::Store => admission.review_create(server.store.tiers(), tier),
            AdmissionView::Cache => {
                let view = self.informer.view_now().unwrap_or_default();
                admission.review_create(&view, tier)
            }
        }
    }

    /// The port's create: schema, admission, then AlreadyExists.
    pub(crate) fn create(&self, tier: &TierSpec) -> Result<Written, ApiError> {
        let mut server = lock(&self.server);
        validate(tier)?;
        self.admit_create(&server, tier)?;
        let written = server.store.create(tier)?;
        server.emit(&written);
        Ok(written)
    }

    /// The port's update: preconditions, schema, then the webhook (which admits the
    /// controller's updates but must be reachable).
    pub(crate) fn update(
        &self,
        tier: &TierSpec,
        resource_version: &str,
    ) -> Result<Written, ApiError> {
        let mut server = lock(&self.server);
        server.store.precondition(&tier.name, resource_version)?;
        validate(tier)?;
        if server.admission.is_some() && !server.webhook_reachable {
            return Err(ApiError::WebhookUnreachable);
        }
        let written = server.store.put(tier);
        server.emit(&written);
        Ok(written)
    }
}

impl Default for MemoryCluster {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryCluster {
    /// An empty cluster with Antrea's admission and a synced, non-lagging default cache.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder for a cluster with a given starting content and configuration.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// The default cache (what the cluster's own [`TierLister`] implementation reads).
    pub fn lister(&self) -> MemoryLister {
        self.inner.informer.clone()
    }

    /// A new, independent cache of this cluster (another initializer's informer); its first
    /// list returns the store's content now.
    pub fn cache(&self, config: CacheConfig) -> MemoryLister {
        let mut server = lock(&self.inner.server);
        let cache = MemoryLister::new(config, Arc::clone(server.store.tiers()));
        server.caches.push(Arc::downgrade(cache.shared()));
        cache
    }

    /// A writer recording its calls under `client`.
    pub fn writer(&self, client: &str) -> MemoryWriter {
        MemoryWriter::new(Arc::clone(&self.inner), client)
    }

    /// The fault script of this cluster.
    pub fn faults(&self) -> Faults {
        self.inner.faults.clone()
    }

    /// A copy of the call log of every writer.
    pub fn calls(&self) -> CallLog {
        self.inner.recorder.log()
    }

    /// Forgets the calls made so far (calls in flight stay counted as in flight).
    pub fn reset_calls(&self) {
        self.inner.recorder.reset();
    }

    /// The stored Tier called `name` (the truth, not a cache's view).
    pub fn get(&self, name: &str) -> Option<ObservedTier> {
        lock(&self.inner.server).store.tiers().get(name).cloned()
    }

    /// Every stored Tier by name.
    pub fn tiers(&self) -> BTreeMap<String, ObservedTier> {
        lock(&self.inner.server).store.tiers().as_ref().clone()
    }

    /// The last resourceVersion handed out (0 before any write).
    pub fn revision(&self) -> u64 {
        lock(&self.inner.server).store.revision()
    }

    /// Replaces the admission configuration (`None`: no webhook).
    pub fn set_admission(&self, admission: Option<Admission>) {
        lock(&self.inner.server).admission = admission;
    }

    /// Makes the webhook (un)reachable. While unreachable, port writes fail with a transient
    /// 500 `failed calling webhook`, as when the controller is not Ready yet.
    pub fn set_webhook_reachable(&self, reachable: bool) {
        lock(&self.inner.server).webhook_reachable = reachable;
    }

    /// Another actor creates `tier`, bypassing admission.
    ///
    /// # Errors
    ///
    /// `Invalid` (schema) or `AlreadyExists`.
    pub fn create_raw(&self, tier: &TierSpec) -> Result<ObservedTier, ApiError> {
        validate(tier)?;
        let mut server = lock(&self.inner.server);
        let written = server.store.create(tier)?;
        tracing::debug!(tier = %tier.name, "raw create");
        server.emit(&written);
        Ok(written.tier)
    }

    /// Another actor creates or replaces `tier` unconditionally, bypassing admission.
    ///
    /// # Errors
    ///
    /// `Invalid` (schema).
    pub fn put_raw(&self, tier: &TierSpec) -> Result<ObservedTier, ApiError> {
        validate(tier)?;
        let mut server = lock(&self.inner.server);
        let written = server.store.put(tier);
        tracing::debug!(tier = %tier.name, "raw put");
        server.emit(&written);
        Ok(written.tier)
    }

    /// Another actor deletes the Tier `name`, bypassing admission. Returns the deleted Tier.
    ///
    /// # Errors
    ///
    /// `NotFound`.
    pub fn delete(&self, name: &str) -> Result<ObservedTier, ApiError> {
        let mut server = lock(&self.inner.server);
        let written = server.store.delete(name)?;
        tracing::debug!(tier = %name, "raw delete");
        server.emit(&written);
        Ok(written.tier)
    }

    /// Another actor reads the Tier `name`, changes it with `f` and updates it on the
    /// resourceVersion it read, bypassing admission. Renaming in `f` is ignored. `f` runs
    /// without any lock held.
    ///
    /// # Errors
    ///
    /// `NotFound`, `Invalid` (schema) or `Conflict` if the Tier changed meanwhile.
    pub fn edit(
        &self,
        name: &str,
        f: impl FnOnce(&mut TierSpec),
    ) -> Result<ObservedTier, ApiError> {
        let current = self.get(name).ok_or_else(|| ApiError::NotFound {
            name: name.to_owned(),
        })?;
        let mut tier = TierSpec::new(name, current.priority, current.description);
        f(&mut tier);
        name.clone_into(&mut tier.name);
        validate(&tier)?;
        let mut server = lock(&self.inner.server);
        server.store.precondition(name, &current.resource_version)?;
        let written = server.store.put(&tier);
        tracing::debug!(tier = %name, "raw edit");
        server.emit(&written);
        Ok(written.tier)
    }
}

#[async_trait]
impl TierLister for MemoryCluster {
    async fn wait_synced(&self) {
        self.inner.informer.wait_synced().await;
    }

    fn snapshot(&self) -> Snapshot {
        self.inner.informer.snapshot()
    }

    async fn changed(&self, seen: Generation) {
        self.inner.informer.changed(seen).await;
    }
}

#[async_trait]
impl TierWriter for MemoryCluster {
    async fn create(&self, tier: &TierSpec) -> Result<(), WriteError> {
        self.writer.create(tier).await
    }

    async fn update(&self, tier: &TierSpec, resource_version: &str) -> Result<(), WriteError> {
        self.writer.update(tier, resource_version).await
    }
}

/// Builds a [`MemoryCluster`]: its starting Tiers, admission and default cache.
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    tiers: Vec<TierSpec>,
    admission: Option<Admission>,
    cache: CacheConfig,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        Self {
            tiers: Vec::new(),
            admission: Some(Admission::antrea()),
            cache: CacheConfig::default(),
        }
    }
}

impl ClusterBuilder {
    /// Starts with `tier` stored as is: no schema or admission check, so any state etcd could
    /// hold (duplicate priorities, reserved ones) can be set up. A later Tier of the same name
    /// replaces it.
    pub fn with_tier(mut self, tier: TierSpec) -> Self {
        self.tiers.push(tier);
        self
    }

    /// Starts with every Tier of `tiers` (see [`with_tier`](Self::with_tier)).
    pub fn with_tiers(mut self, tiers: impl IntoIterator<Item = TierSpec>) -> Self {
        self.tiers.extend(tiers);
        self
    }

    /// Uses `admission` (default: [`Admission::antrea`]).
    pub fn admission(mut self, admission: Admission) -> Self {
        self.admission = Some(admission);
        self
    }

    /// Runs without any webhook: only the schema and the store check writes.
    pub fn without_admission(mut self) -> Self {
        self.admission = None;
        self
    }

    /// The default cache syncs per `sync` (default: at once).
    pub fn sync(mut self, sync: SyncMode) -> Self {
        self.cache.sync = sync;
        self
    }

    /// The default cache shows writes `lag` after they happen (default: at once).
    pub fn lag(mut self, lag: Duration) -> Self {
        self.cache.lag = lag;
        self
    }

    /// Builds the cluster (inside the tokio runtime that will use it, for
    /// [`SyncMode::After`]).
    pub fn build(self) -> MemoryCluster {
        let mut store = Store::default();
        for tier in &self.tiers {
            store.put(tier);
        }
        let informer = MemoryLister::new(self.cache, Arc::clone(store.tiers()));
        let server = Server {
            store,
            caches: vec![Arc::downgrade(informer.shared())],
            admission: self.admission,
            webhook_reachable: true,
        };
        let inner = Arc::new(ClusterInner {
            server: Mutex::new(server),
            informer,
            faults: Faults::default(),
            recorder: Recorder::default(),
        });
        MemoryCluster {
            writer: MemoryWriter::new(Arc::clone(&inner), DEFAULT_CLIENT),
            inner,
        }
    }
}
