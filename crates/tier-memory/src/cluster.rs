//! [`MemoryCluster`]: the handle to one in-memory Tier cluster, and its builder.
//!
//! The cluster is the API server of one controller's Tiers ([`Backend`]; Antrea by default,
//! [`MemoryCluster::calico`] for Calico): a store (what etcd holds) behind a lock, the
//! controller's schema and policy (Antrea's [admission](crate::admission)) on the write path, the caches it feeds, the
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
//! | `create_raw`, `put_raw`, `edit` | like `create`/`update` but without admission (the schema still applies) |
//! | `delete` | NotFound (404); only a policy that guards deletes (Calico's built-ins) |
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
use tier_core::calico::Calico;
use tier_core::{Antrea, DesiredTier, Generation, Snapshot, TierLister, TierWriter, WriteError};

use crate::admission::AdmissionView;
use crate::backend::Backend;
use crate::cache::{CacheConfig, CacheShared, MemoryLister, SyncMode};
use crate::calls::{CallLog, Recorder};
use crate::error::ApiError;
use crate::faults::Faults;
use crate::lock;
use crate::store::{Store, Written};
use crate::writer::MemoryWriter;

/// The client name of the cluster's own writer.
pub const DEFAULT_CLIENT: &str = "tierd";

/// A handle to an in-memory Tier cluster. Cheap to clone; clones share the cluster.
///
/// It is a [`TierLister`] (its default cache) and a [`TierWriter`] (client [`DEFAULT_CLIENT`]).
/// Build it inside the tokio runtime that uses it, so that its clock is the runtime's (virtual
/// under paused time).
#[derive(Debug)]
pub struct MemoryCluster<C: Backend = Antrea> {
    inner: Arc<ClusterInner<C>>,
    writer: MemoryWriter<C>,
}

impl<C: Backend> Clone for MemoryCluster<C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            writer: self.writer.clone(),
        }
    }
}

/// The shared state of a cluster.
#[derive(Debug)]
pub(crate) struct ClusterInner<C: Backend> {
    server: Mutex<Server<C>>,
    /// The default cache, also what an [`AdmissionView::Cache`] webhook reads.
    informer: MemoryLister<C>,
    pub(crate) faults: Faults,
    pub(crate) recorder: Recorder,
}

/// What the server lock guards. Lock order: the server, then a cache.
#[derive(Debug)]
struct Server<C: Backend> {
    store: Store<C>,
    caches: Vec<Weak<CacheShared<C>>>,
    admission: Option<C::Policy>,
    webhook_reachable: bool,
}

impl<C: Backend> Server<C> {
    /// Hands a write's change to every live cache.
    fn emit(&mut self, written: &Written<C>) {
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

impl<C: Backend> ClusterInner<C> {
    fn admit_create(&self, server: &Server<C>, tier: &C::Spec) -> Result<(), ApiError> {
        let Some(admission) = &server.admission else {
            return Ok(());
        };
        if !server.webhook_reachable {
            return Err(ApiError::WebhookUnreachable);
        }
        match C::view(admission) {
            AdmissionView::Store => C::review_create(admission, server.store.tiers(), tier),
            AdmissionView::Cache => {
                let view = self.informer.view_now().unwrap_or_default();
                C::review_create(admission, &view, tier)
            }
        }
    }

    /// The port's create: schema, admission, then AlreadyExists.
    pub(crate) fn create(&self, tier: &C::Spec) -> Result<Written<C>, ApiError> {
        let mut server = lock(&self.server);
        C::check_schema(tier)?;
        self.admit_create(&server, tier)?;
        let written = server.store.create(tier)?;
        server.emit(&written);
        Ok(written)
    }

    /// The port's update: preconditions, schema, then the webhook (which admits the
    /// controller's updates but must be reachable).
    pub(crate) fn update(
        &self,
        tier: &C::Spec,
        resource_version: &str,
    ) -> Result<Written<C>, ApiError> {
        let mut server = lock(&self.server);
        server.store.precondition(tier.name(), resource_version)?;
        C::check_schema(tier)?;
        if server.admission.is_some() && !server.webhook_reachable {
            return Err(ApiError::WebhookUnreachable);
        }
        let written = server.store.put(tier);
        server.emit(&written);
        Ok(written)
    }
}

impl<C: Backend> Default for MemoryCluster<C> {
    /// An empty cluster with the controller's policy and a synced, non-lagging default cache.
    fn default() -> Self {
        ClusterBuilder::default().build()
    }
}

impl MemoryCluster {
    /// An empty Antrea cluster with Antrea's admission and a synced, non-lagging default cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder for an Antrea cluster with a given starting content and configuration.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }
}

impl MemoryCluster<Calico> {
    /// An empty Calico cluster: Calico's schema (built-in Tiers pinned) and the protection of
    /// its built-in Tiers from deletion; a synced, non-lagging default cache. For any
    /// controller, `MemoryCluster::<C>::default()` and `ClusterBuilder::<C>::default()`.
    pub fn calico() -> Self {
        Self::default()
    }
}

impl<C: Backend> MemoryCluster<C> {
    /// The default cache (what the cluster's own [`TierLister`] implementation reads).
    pub fn lister(&self) -> MemoryLister<C> {
        self.inner.informer.clone()
    }

    /// A new, independent cache of this cluster (another initializer's informer); its first
    /// list returns the store's content now.
    pub fn cache(&self, config: CacheConfig) -> MemoryLister<C> {
        let mut server = lock(&self.inner.server);
        let cache = MemoryLister::new(config, Arc::clone(server.store.tiers()));
        server.caches.push(Arc::downgrade(cache.shared()));
        cache
    }

    /// A writer recording its calls under `client`.
    pub fn writer(&self, client: &str) -> MemoryWriter<C> {
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
    pub fn get(&self, name: &str) -> Option<C::Observed> {
        lock(&self.inner.server).store.tiers().get(name).cloned()
    }

    /// Every stored Tier by name.
    pub fn tiers(&self) -> BTreeMap<String, C::Observed> {
        lock(&self.inner.server).store.tiers().as_ref().clone()
    }

    /// The last resourceVersion handed out (0 before any write).
    pub fn revision(&self) -> u64 {
        lock(&self.inner.server).store.revision()
    }

    /// Replaces the policy on the write path (`None`: no webhook, no admission policy).
    pub fn set_admission(&self, admission: Option<C::Policy>) {
        lock(&self.inner.server).admission = admission;
    }

    /// Makes the webhook (un)reachable. While unreachable, port writes fail with a transient
    /// 500 `failed calling webhook` (Antrea's, by name), as when the controller is not Ready
    /// yet. Models Antrea's webhook only: Calico's policy runs inside the API server.
    pub fn set_webhook_reachable(&self, reachable: bool) {
        lock(&self.inner.server).webhook_reachable = reachable;
    }

    /// Another actor creates `tier`, bypassing admission.
    ///
    /// # Errors
    ///
    /// `Invalid` (schema) or `AlreadyExists`.
    pub fn create_raw(&self, tier: &C::Spec) -> Result<C::Observed, ApiError> {
        C::check_schema(tier)?;
        let mut server = lock(&self.inner.server);
        let written = server.store.create(tier)?;
        tracing::debug!(tier = %tier.name(), "raw create");
        server.emit(&written);
        Ok(written.tier)
    }

    /// Another actor creates or replaces `tier` unconditionally, bypassing admission.
    ///
    /// # Errors
    ///
    /// `Invalid` (schema).
    pub fn put_raw(&self, tier: &C::Spec) -> Result<C::Observed, ApiError> {
        C::check_schema(tier)?;
        let mut server = lock(&self.inner.server);
        let written = server.store.put(tier);
        tracing::debug!(tier = %tier.name(), "raw put");
        server.emit(&written);
        Ok(written.tier)
    }

    /// Another actor deletes the Tier `name`. Antrea's webhook is bypassed; a policy that
    /// guards deletes (Calico's protection of its built-in Tiers) is not. Returns the deleted
    /// Tier.
    ///
    /// # Errors
    ///
    /// The policy's refusal, or `NotFound`.
    pub fn delete(&self, name: &str) -> Result<C::Observed, ApiError> {
        let mut server = lock(&self.inner.server);
        if let Some(policy) = &server.admission {
            C::review_delete(policy, name)?;
        }
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
    pub fn edit(&self, name: &str, f: impl FnOnce(&mut C::Spec)) -> Result<C::Observed, ApiError> {
        let current = self.get(name).ok_or_else(|| ApiError::NotFound {
            resource: C::RESOURCE,
            name: name.to_owned(),
        })?;
        let mut tier = C::spec_of(&current);
        f(&mut tier);
        C::rename(&mut tier, name);
        C::check_schema(&tier)?;
        let mut server = lock(&self.inner.server);
        server
            .store
            .precondition(name, tier_core::CachedTier::resource_version(&current))?;
        let written = server.store.put(&tier);
        tracing::debug!(tier = %name, "raw edit");
        server.emit(&written);
        Ok(written.tier)
    }
}

#[async_trait]
impl<C: Backend> TierLister<C> for MemoryCluster<C> {
    async fn wait_synced(&self) {
        self.inner.informer.wait_synced().await;
    }

    fn snapshot(&self) -> Snapshot<C> {
        self.inner.informer.snapshot()
    }

    async fn changed(&self, seen: Generation) {
        self.inner.informer.changed(seen).await;
    }
}

#[async_trait]
impl<C: Backend> TierWriter<C> for MemoryCluster<C> {
    async fn create(&self, tier: &C::Spec) -> Result<(), WriteError> {
        self.writer.create(tier).await
    }

    async fn update(&self, tier: &C::Spec, resource_version: &str) -> Result<(), WriteError> {
        self.writer.update(tier, resource_version).await
    }
}

/// Builds a [`MemoryCluster`]: its starting Tiers, admission and default cache.
#[derive(Clone, Debug)]
pub struct ClusterBuilder<C: Backend = Antrea> {
    tiers: Vec<C::Spec>,
    admission: Option<C::Policy>,
    cache: CacheConfig,
}

impl<C: Backend> Default for ClusterBuilder<C> {
    fn default() -> Self {
        Self {
            tiers: Vec::new(),
            admission: C::default_policy(),
            cache: CacheConfig::default(),
        }
    }
}

impl<C: Backend> ClusterBuilder<C> {
    /// Starts with `tier` stored as is: no schema or admission check, so any state etcd could
    /// hold (duplicate priorities, reserved ones) can be set up. A later Tier of the same name
    /// replaces it.
    pub fn with_tier(mut self, tier: C::Spec) -> Self {
        self.tiers.push(tier);
        self
    }

    /// Starts with every Tier of `tiers` (see [`with_tier`](Self::with_tier)).
    pub fn with_tiers(mut self, tiers: impl IntoIterator<Item = C::Spec>) -> Self {
        self.tiers.extend(tiers);
        self
    }

    /// Uses `admission` (default: the controller's, [`Backend::default_policy`]).
    pub fn admission(mut self, admission: C::Policy) -> Self {
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
    pub fn build(self) -> MemoryCluster<C> {
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
