//! [`PolicyCache`]: which Antrea policies name which Tier, for the webhook's DELETE rule.
//!
//! Antrea denies deleting a Tier that a policy still names in its raw `spec.tier` (no defaulting):
//! first counting Antrea ClusterNetworkPolicies (`clusternetworkpolicies.crd.antrea.io`,
//! cluster-scoped), then Antrea NetworkPolicies (`networkpolicies.crd.antrea.io`, namespaced, all
//! namespaces). One [`PolicyCache`] watches one of the two resources (v1beta1) and keeps only an
//! index `spec.tier → count`, plus one entry per policy so deletes and moves are counted right.
//!
//! # What is decoded
//!
//! Only `metadata.name`, `metadata.namespace`, `metadata.resourceVersion`, `metadata.uid` and
//! `spec.tier`; everything else is skipped while parsing, so any valid policy decodes (whatever
//! its rules, whatever future fields) and 10,000 policies cost a few MiB, not their full bodies.
//! A `spec.tier` that is absent or not a string counts as no Tier.
//!
//! # Synced, and a CRD that is not installed
//!
//! The cache is *synced* after its first complete list. A list answered with 404 means the CRD
//! is not installed, so no such policy can exist: the cache then counts as synced and **empty**
//! (and says so in its [`state`](PolicyCache::state)), while the watch keeps retrying with
//! backoff, so a CRD installed later is listed and indexed. Any other error before the first
//! list leaves it unsynced, with the error kept for `/readyz?verbose`.
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), tier_kube::lister::ListerError> {
//! use tier_core::admission::ReferenceIndex;
//! use tier_kube::policies::{ClusterNetworkPolicies, PolicyCache};
//!
//! let acnps = PolicyCache::<ClusterNetworkPolicies>::start(client)?;
//! acnps.wait_synced().await;
//! let used_by = acnps.references("securityops");
//! # let _ = used_by;
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::core::{ClusterResourceScope, NamespaceResourceScope};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff};
use serde::Deserialize;
use tier_core::admission::ReferenceIndex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backoff::{OutageLog, RetryWatch};
use crate::explain::ResourceHints;
use crate::lister::ListerError;

/// The API group of Antrea's policies.
pub(crate) const GROUP: &str = "crd.antrea.io";
/// The version watched.
pub(crate) const VERSION: &str = "v1beta1";

/// One of the two Antrea policy resources that can name a Tier.
pub trait PolicyKind: Clone + fmt::Debug + Send + Sync + 'static {
    /// `kind`, e.g. `ClusterNetworkPolicy`.
    const KIND: &'static str;
    /// The resource (plural), e.g. `clusternetworkpolicies`.
    const PLURAL: &'static str;
    /// What a person calls these policies, e.g. `Antrea ClusterNetworkPolicies`.
    const NOUN: &'static str;
    /// Cluster-scoped or namespaced.
    type Scope;
}

/// Antrea ClusterNetworkPolicies (`acnp`), cluster-scoped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterNetworkPolicies;

impl PolicyKind for ClusterNetworkPolicies {
    const KIND: &'static str = "ClusterNetworkPolicy";
    const PLURAL: &'static str = "clusternetworkpolicies";
    const NOUN: &'static str = "Antrea ClusterNetworkPolicies";
    type Scope = ClusterResourceScope;
}

/// Antrea NetworkPolicies (`annp`), namespaced; watched in every namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetworkPolicies;

impl PolicyKind for NetworkPolicies {
    const KIND: &'static str = "NetworkPolicy";
    const PLURAL: &'static str = "networkpolicies";
    const NOUN: &'static str = "Antrea NetworkPolicies";
    type Scope = NamespaceResourceScope;
}

/// A policy as the cache decodes it: identity and the raw `spec.tier`, nothing else.
#[derive(Clone, Debug)]
pub struct PolicyRef<K> {
    /// Name, namespace, resourceVersion and uid only.
    pub metadata: ObjectMeta,
    /// The raw `spec.tier`, if it is a string.
    pub tier: Option<String>,
    kind: PhantomData<K>,
}

impl<K> PolicyRef<K> {
    /// A policy `namespace/name` naming `tier` (for tests and benchmarks).
    pub fn new(namespace: Option<&str>, name: &str, tier: Option<&str>) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: namespace.map(str::to_owned),
                ..ObjectMeta::default()
            },
            tier: tier.map(str::to_owned),
            kind: PhantomData,
        }
    }

    fn key(&self) -> (Option<String>, String) {
        (
            self.metadata.namespace.clone(),
            self.metadata.name.clone().unwrap_or_default(),
        )
    }
}

impl<'de, K> Deserialize<'de> for PolicyRef<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            name: Option<String>,
            namespace: Option<String>,
            resource_version: Option<String>,
            uid: Option<String>,
        }
        #[derive(Deserialize, Default)]
        struct Spec {
            tier: Option<serde_json::Value>,
        }
        #[derive(Deserialize)]
        struct Raw {
            metadata: Meta,
            #[serde(default)]
            spec: Option<Spec>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let tier = raw
            .spec
            .and_then(|s| s.tier)
            .and_then(|t| t.as_str().map(str::to_owned));
        Ok(Self {
            metadata: ObjectMeta {
                name: raw.metadata.name,
                namespace: raw.metadata.namespace,
                resource_version: raw.metadata.resource_version,
                uid: raw.metadata.uid,
                ..ObjectMeta::default()
            },
            tier,
            kind: PhantomData,
        })
    }
}

impl<K: PolicyKind> kube::Resource for PolicyRef<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind((): &()) -> Cow<'_, str> {
        K::KIND.into()
    }

    fn group((): &()) -> Cow<'_, str> {
        GROUP.into()
    }

    fn version((): &()) -> Cow<'_, str> {
        VERSION.into()
    }

    fn plural((): &()) -> Cow<'_, str> {
        K::PLURAL.into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What the cache knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheState {
    /// No complete list yet; the last error, if any.
    Unsynced(Option<String>),
    /// Listed: the index is complete.
    Synced,
    /// The list answered 404: the CRD is not installed, so no such policy exists. The watch
    /// keeps retrying.
    NotInstalled,
}

/// `spec.tier` by policy, and policies by Tier.
#[derive(Debug, Default)]
struct Index {
    tiers: HashMap<(Option<String>, String), Option<String>>,
    counts: HashMap<String, usize>,
}

impl Index {
    fn apply(&mut self, key: (Option<String>, String), tier: Option<String>) {
        let old = self.tiers.insert(key, tier.clone());
        self.uncount(old.flatten());
        if let Some(tier) = tier {
            *self.counts.entry(tier).or_default() += 1;
        }
    }

    fn delete(&mut self, key: &(Option<String>, String)) {
        let old = self.tiers.remove(key);
        self.uncount(old.flatten());
    }

    fn uncount(&mut self, tier: Option<String>) {
        let Some(tier) = tier else { return };
        if let Some(n) = self.counts.get_mut(&tier) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.counts.remove(&tier);
            }
        }
    }
}

#[derive(Debug)]
struct Shared {
    index: Index,
    state: CacheState,
}

/// A cache of one Antrea policy resource indexed by raw `spec.tier`; see the
/// [module docs](self). Cheap to clone; the watch task stops when the last clone is dropped.
pub struct PolicyCache<K> {
    shared: Arc<RwLock<Shared>>,
    /// Bumped after every change of the index or the state.
    version: watch::Receiver<u64>,
    task: Arc<TaskGuard>,
    kind: PhantomData<K>,
}

impl<K> Clone for PolicyCache<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            version: self.version.clone(),
            task: Arc::clone(&self.task),
            kind: PhantomData,
        }
    }
}

impl<K: PolicyKind> fmt::Debug for PolicyCache<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyCache")
            .field("kind", &K::KIND)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct TaskGuard(Option<JoinHandle<()>>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

impl<K: PolicyKind> PolicyCache<K> {
    /// Watches every policy of kind `K` in the cluster with kube's default backoff. Spawns the
    /// watch task at once on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`ListerError::NoRuntime`] outside a tokio runtime.
    pub fn start(client: kube::Client) -> Result<Self, ListerError> {
        Self::start_with(
            client,
            watcher::Config::default(),
            DefaultBackoff::default(),
        )
    }

    /// Like [`start`](Self::start), with an explicit watcher configuration and retry backoff
    /// (also the pace at which a missing CRD is looked for again). The watch covers the whole
    /// cluster (every namespace), through `client` wrapped to tell the outage log when the API
    /// server answers (a watch resumed after an outage says it recovered though nothing
    /// changed).
    ///
    /// # Errors
    ///
    /// [`ListerError::NoRuntime`] outside a tokio runtime.
    pub fn start_with(
        client: kube::Client,
        config: watcher::Config,
        backoff: impl Backoff + 'static,
    ) -> Result<Self, ListerError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(ListerError::NoRuntime)?;
        let (cache, version) = Self::detached();
        let outage = Arc::new(Mutex::new(OutageLog::new(format!(
            "the {} watch ({}.{GROUP})",
            K::KIND,
            K::PLURAL
        ))));
        let answered = Arc::clone(&outage);
        let client = crate::client::observed(client, move || lock(&answered).answered());
        let events = RetryWatch::new(
            watcher::watcher(Api::<PolicyRef<K>>::all(client), config),
            backoff,
        );
        let task = runtime.spawn(drive(events, Arc::clone(&cache.shared), version, outage));
        Ok(Self {
            task: Arc::new(TaskGuard(Some(task))),
            ..cache
        })
    }

    /// A cache fed by hand instead of a watch: already synced, holding `policies` (for tests
    /// and benchmarks of the code that reads it).
    pub fn from_policies(policies: impl IntoIterator<Item = PolicyRef<K>>) -> Self {
        let (cache, version) = Self::detached();
        {
            let mut shared = cache.write();
            for policy in policies {
                shared.index.apply(policy.key(), policy.tier);
            }
            shared.state = CacheState::Synced;
        }
        version.send_replace(1);
        cache
    }

    fn detached() -> (Self, watch::Sender<u64>) {
        let (version_tx, version) = watch::channel(0);
        let cache = Self {
            shared: Arc::new(RwLock::new(Shared {
                index: Index::default(),
                state: CacheState::Unsynced(None),
            })),
            version,
            task: Arc::new(TaskGuard(None)),
            kind: PhantomData,
        };
        (cache, version_tx)
    }

    /// What the cache knows now.
    pub fn state(&self) -> CacheState {
        self.read().state.clone()
    }

    /// Whether the index is complete (listed, or the CRD is not installed).
    pub fn is_synced(&self) -> bool {
        !matches!(self.read().state, CacheState::Unsynced(_))
    }

    /// How many policies are indexed.
    pub fn len(&self) -> usize {
        self.read().index.tiers.len()
    }

    /// Whether no policy is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once the cache is synced; never if the watch task is gone before that.
    pub async fn wait_synced(&self) {
        loop {
            let seen = self.version();
            if self.is_synced() {
                return;
            }
            self.changed(seen).await;
        }
    }

    /// A counter bumped after every change of the index or the state.
    pub fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// Resolves once [`version`](Self::version) is greater than `seen`; never if the watch task
    /// is gone.
    pub async fn changed(&self, seen: u64) {
        let mut version = self.version.clone();
        if version.wait_for(|v| *v > seen).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The readiness reason of this cache: `Ok(note)` when synced (the note says when the CRD
    /// is not installed), `Err(reason)` when not, naming the last error.
    pub fn describe(&self) -> Result<Option<String>, String> {
        match self.state() {
            CacheState::Synced => Ok(None),
            CacheState::NotInstalled => Ok(Some(format!(
                "{}.{GROUP} is not installed; no such policy can reference a Tier",
                K::PLURAL
            ))),
            CacheState::Unsynced(None) => Err(format!(
                "the {} cache has not completed its first list",
                K::NOUN
            )),
            CacheState::Unsynced(Some(error)) => Err(format!(
                "the {} cache has not completed its first list; last error: {error}",
                K::NOUN
            )),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Shared> {
        self.shared.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Shared> {
        self.shared.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: PolicyKind> ReferenceIndex for PolicyCache<K> {
    fn references(&self, tier: &str) -> Option<usize> {
        let shared = self.read();
        match shared.state {
            CacheState::Unsynced(_) => None,
            CacheState::NotInstalled => Some(0),
            CacheState::Synced => Some(shared.index.counts.get(tier).copied().unwrap_or(0)),
        }
    }
}

fn lock<V>(mutex: &Mutex<V>) -> std::sync::MutexGuard<'_, V> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `error` says the resource does not exist (the CRD is not installed).
fn not_installed(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code == 404,
        watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

/// What the words of a policy watch's failures say to do: RBAC in tierd's install, or Antrea.
fn hints<K: PolicyKind>() -> ResourceHints {
    ResourceHints {
        resource: format!("{}.{GROUP}", K::PLURAL),
        rbac: "deploy/base/rbac.yaml",
        install: "install Antrea",
    }
}

/// A policy watch failure in words (never Rust `Debug`): `listing Antrea
/// ClusterNetworkPolicies failed: 403 Forbidden: ...; grant tierd's user get, list and watch on
/// clusternetworkpolicies.crd.antrea.io (see deploy/base/rbac.yaml)`.
fn words<K: PolicyKind>(error: &watcher::Error) -> String {
    crate::explain::watch_error_of(error, K::NOUN, &format!("{} watch", K::KIND), &hints::<K>())
}

/// Polls the watch forever, keeping the index.
async fn drive<K, S>(
    events: S,
    shared: Arc<RwLock<Shared>>,
    version: watch::Sender<u64>,
    outage: Arc<Mutex<OutageLog>>,
) where
    K: PolicyKind,
    S: futures::Stream<Item = Result<watcher::Event<PolicyRef<K>>, watcher::Error>>,
{
    let mut events = std::pin::pin!(events);
    // A relist is buffered and swapped in at `InitDone`, so readers never see half a list.
    let mut relist: Option<Index> = None;
    while let Some(event) = events.next().await {
        if version.is_closed() {
            // Every cache is gone (the task is being aborted): nobody reads this item.
            return;
        }
        if let Ok(event) = &event
            && crate::backoff::is_progress(event)
        {
            lock(&outage).answered();
        }
        let mut guard = shared.write().unwrap_or_else(PoisonError::into_inner);
        let changed = !matches!(
            event,
            Ok(watcher::Event::Init | watcher::Event::InitApply(_))
        );
        match event {
            Ok(watcher::Event::Init) => relist = Some(Index::default()),
            Ok(watcher::Event::InitApply(policy)) => {
                if let Some(index) = relist.as_mut() {
                    index.apply(policy.key(), policy.tier);
                }
            }
            Ok(watcher::Event::InitDone) => {
                guard.index = relist.take().unwrap_or_default();
                guard.state = CacheState::Synced;
                tracing::debug!(
                    kind = K::KIND,
                    policies = guard.index.tiers.len(),
                    "policy cache listed"
                );
            }
            Ok(watcher::Event::Apply(policy)) => guard.index.apply(policy.key(), policy.tier),
            Ok(watcher::Event::Delete(policy)) => guard.index.delete(&policy.key()),
            Err(error) if not_installed(&error) => {
                // An answer: the server is there, the CRD is not.
                lock(&outage).answered();
                if guard.state != CacheState::NotInstalled {
                    tracing::info!(
                        kind = K::KIND,
                        "{}.{GROUP} is not installed; no such policy can reference a Tier (looking again with backoff)",
                        K::PLURAL
                    );
                }
                relist = None;
                guard.index = Index::default();
                guard.state = CacheState::NotInstalled;
            }
            Err(error) => {
                let words = words::<K>(&error);
                if crate::explain::is_expired(&error) {
                    tracing::debug!(kind = K::KIND, error = %words, "policy watch expired; listing again");
                } else {
                    lock(&outage).failed(&words);
                }
                if let CacheState::Unsynced(last) = &mut guard.state {
                    *last = Some(words);
                }
            }
        }
        drop(guard);
        if changed {
            version.send_modify(|v| *v += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_only_identity_and_tier() {
        let json = serde_json::json!({
            "apiVersion": "crd.antrea.io/v1beta1",
            "kind": "ClusterNetworkPolicy",
            "metadata": {
                "name": "p", "resourceVersion": "9", "uid": "u",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubectl"}],
            },
            "spec": {"tier": "securityops", "priority": 5, "ingress": [{"action": "Drop", "future": {"x": 1}}]},
        });
        let policy: PolicyRef<ClusterNetworkPolicies> = serde_json::from_value(json).unwrap();
        assert_eq!(policy.tier.as_deref(), Some("securityops"));
        assert_eq!(policy.metadata.name.as_deref(), Some("p"));
        assert_eq!(policy.metadata.resource_version.as_deref(), Some("9"));
        assert!(policy.metadata.annotations.is_none());
        let no_tier: PolicyRef<NetworkPolicies> = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "q", "namespace": "a"}, "spec": {"tier": 7}}),
        )
        .unwrap();
        assert_eq!(no_tier.tier, None);
        let no_spec: PolicyRef<NetworkPolicies> =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "q"}})).unwrap();
        assert_eq!(no_spec.tier, None);
    }

    #[test]
    fn the_index_counts_moves_and_deletes() {
        let mut index = Index::default();
        let key = |ns: &str, n: &str| (Some(ns.to_owned()), n.to_owned());
        index.apply(key("a", "p"), Some("t".into()));
        index.apply(key("b", "p"), Some("t".into()));
        index.apply(key("a", "p"), Some("u".into()));
        assert_eq!(index.counts.get("t"), Some(&1));
        assert_eq!(index.counts.get("u"), Some(&1));
        index.delete(&key("b", "p"));
        index.delete(&key("b", "p"));
        assert_eq!(index.counts.get("t"), None);
        index.apply(key("a", "p"), None);
        assert!(index.counts.is_empty());
    }

    #[test]
    fn raw_tier_names_are_not_defaulted() {
        let cache = PolicyCache::<NetworkPolicies>::from_policies([
            PolicyRef::new(Some("ns"), "a", Some("Emergency")),
            PolicyRef::new(Some("ns"), "b", None),
        ]);
        assert_eq!(cache.references("emergency"), Some(0));
        assert_eq!(cache.references("Emergency"), Some(1));
        assert_eq!(cache.references("application"), Some(0));
        assert_eq!(cache.len(), 2);
    }
}
