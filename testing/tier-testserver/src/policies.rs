//! Antrea's two policy resources that can name a Tier: ClusterNetworkPolicies
//! (`clusternetworkpolicies.crd.antrea.io`, cluster-scoped) and NetworkPolicies
//! (`networkpolicies.crd.antrea.io`, namespaced), v1beta1.
//!
//! Served as far as a Tier webhook's policy cache and the tests need: list (all namespaces, or
//! one; paged with `limit`/`continue`), watch (through the Tier watch machinery, the
//! crate-private `history::Feed`), get, create and delete. Objects are stored as sent (only metadata is filled in); no schema is
//! enforced beyond a name. A resource that is not installed answers every request with 404, as
//! kube-apiserver does for a CRD that does not exist; [`Policies::uninstall`] deletes its objects
//! (emitting DELETED to open watches) and [`Policies::install`] brings it back empty.
//!
//! The built-in Antrea admission reads [`Policies::references`] for a Tier DELETE.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::config::Limits;
use crate::history::{Change, ChangeType, Feed, Subscription, added, drain};
use crate::status::{ResourceName, StatusError};
use crate::tier::{API_VERSION, GROUP};
use crate::util::{check_size, metadata_mut, new_uid, now_rfc3339, object_name};

/// One of the two Antrea policy resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyResource {
    /// `clusternetworkpolicies.crd.antrea.io` (`acnp`), cluster-scoped.
    ClusterNetworkPolicies,
    /// `networkpolicies.crd.antrea.io` (`annp`), namespaced.
    NetworkPolicies,
}

impl PolicyResource {
    /// Both, in the order Antrea's Tier webhook checks them.
    pub const ALL: [Self; 2] = [Self::ClusterNetworkPolicies, Self::NetworkPolicies];

    /// The plural resource name.
    pub fn plural(self) -> &'static str {
        self.name().plural
    }

    /// `kind` of its objects.
    pub fn kind(self) -> &'static str {
        self.name().kind
    }

    /// Whether its objects live in namespaces.
    pub fn namespaced(self) -> bool {
        matches!(self, Self::NetworkPolicies)
    }

    /// The resource as named in Status messages.
    pub fn name(self) -> ResourceName {
        match self {
            Self::ClusterNetworkPolicies => ResourceName {
                group: GROUP,
                plural: "clusternetworkpolicies",
                kind: "ClusterNetworkPolicy",
            },
            Self::NetworkPolicies => ResourceName {
                group: GROUP,
                plural: "networkpolicies",
                kind: "NetworkPolicy",
            },
        }
    }

    /// The resource a plural names.
    pub(crate) fn from_plural(plural: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.plural() == plural)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A policy object naming `tier` in `spec.tier`, as a client would create it (`namespace` for
/// an Antrea NetworkPolicy).
pub fn policy(resource: PolicyResource, namespace: Option<&str>, name: &str, tier: &str) -> Value {
    let mut metadata = json!({ "name": name });
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": resource.kind(),
        "metadata": metadata,
        "spec": {"tier": tier, "priority": 5, "appliedTo": [{"podSelector": {}}], "ingress": []},
    })
}

/// (namespace, name): the storage key (namespace empty for cluster-scoped objects).
pub(crate) type Key = (String, String);

struct Resource {
    installed: bool,
    objects: BTreeMap<Key, Value>,
    /// The last `window` changes.
    history: VecDeque<Arc<Change>>,
    /// Every change with `rv > floor` is in `history`.
    floor: u64,
    changes: broadcast::Sender<Arc<Change>>,
}

struct State {
    rv: u64,
    resources: [Resource; 2],
    window: usize,
    limits: Limits,
}

/// Storage of both policy resources; clones share it. Also the "other actors" API: tests
/// create and delete policies and install or uninstall the CRDs through it.
#[derive(Clone)]
pub struct Policies {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Policies")
            .field("resource_version", &state.rv)
            .field(
                "cluster_network_policies",
                &state.resources[0].objects.len(),
            )
            .field("network_policies", &state.resources[1].objects.len())
            .finish()
    }
}

impl Default for Policies {
    /// Both resources installed and empty, retaining 1000 changes each, within the default
    /// [`Limits`].
    fn default() -> Self {
        Self::new(1000, Limits::default())
    }
}

impl Policies {
    /// Both resources installed and empty, each retaining its last `window` changes, within
    /// `limits`.
    pub(crate) fn new(window: usize, limits: Limits) -> Self {
        let resource = || Resource {
            installed: true,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            floor: 0,
            changes: broadcast::channel(4096).0,
        };
        Self {
            state: Arc::new(Mutex::new(State {
                rv: 1,
                resources: [resource(), resource()],
                window: window.max(1),
                limits,
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `resource`'s CRD is installed (both are, initially).
    pub fn installed(&self, resource: PolicyResource) -> bool {
        self.state().resources[resource.index()].installed
    }

    /// Installs `resource`'s CRD (idempotent); it starts empty.
    pub fn install(&self, resource: PolicyResource) {
        self.state().resources[resource.index()].installed = true;
    }

    /// Uninstalls `resource`'s CRD: its objects are deleted (open watches see DELETED) and every
    /// request for it answers 404 until [`install`](Self::install).
    pub fn uninstall(&self, resource: PolicyResource) {
        let mut state = self.state();
        let keys: Vec<Key> = state.resources[resource.index()]
            .objects
            .keys()
            .cloned()
            .collect();
        for key in keys {
            let _ = Self::remove(&mut state, resource, &key);
        }
        state.resources[resource.index()].installed = false;
    }

    /// Stores `obj` (its namespace from `metadata.namespace`) as another actor would. 404 when
    /// not installed; 409 AlreadyExists when the name is taken; 400 without a name or, for a
    /// namespaced resource, without a namespace.
    pub fn create(&self, resource: PolicyResource, mut obj: Value) -> Result<Value, StatusError> {
        let name = object_name(&obj)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| StatusError::bad_request("metadata.name: Required value"))?
            .to_owned();
        let namespace = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if resource.namespaced() == namespace.is_empty() {
            return Err(StatusError::bad_request(if resource.namespaced() {
                "the namespace of the object must be set"
            } else {
                "a cluster-scoped object has no namespace"
            }));
        }
        let mut state = self.state();
        check_installed(&state, resource)?;
        let key = (namespace, name);
        if state.resources[resource.index()].objects.contains_key(&key) {
            return Err(StatusError::already_exists(resource.name(), &key.1));
        }
        if state.resources[resource.index()].objects.len() >= state.limits.max_objects {
            return Err(StatusError::full(resource.name(), state.limits.max_objects));
        }
        state.rv += 1;
        let rv = state.rv;
        if let Some(map) = obj.as_object_mut() {
            map.insert("apiVersion".into(), json!(API_VERSION));
            map.insert("kind".into(), json!(resource.kind()));
        }
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
            meta.insert("uid".into(), json!(new_uid()));
            meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        }
        let window = state.window;
        check_size(&obj, state.limits.max_object_bytes)?;
        let slot = &mut state.resources[resource.index()];
        slot.objects.insert(key, obj.clone());
        push(slot, window, rv, ChangeType::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Deletes `namespace/name` (`namespace` `None` for cluster-scoped) as another actor would;
    /// returns the deleted object. 404 when missing or not installed.
    pub fn delete(
        &self,
        resource: PolicyResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StatusError> {
        let mut state = self.state();
        check_installed(&state, resource)?;
        let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        Self::remove(&mut state, resource, &key)
    }

    fn remove(
        state: &mut State,
        resource: PolicyResource,
        key: &Key,
    ) -> Result<Value, StatusError> {
        let Some(mut obj) = state.resources[resource.index()].objects.remove(key) else {
            return Err(StatusError::not_found(resource.name(), &key.1));
        };
        state.rv += 1;
        let rv = state.rv;
        let old = obj.clone();
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        let window = state.window;
        let slot = &mut state.resources[resource.index()];
        push(
            slot,
            window,
            rv,
            ChangeType::Deleted,
            obj.clone(),
            Some(old),
        );
        Ok(obj)
    }

    /// Every stored object of `resource`, ordered by namespace and name.
    pub fn list(&self, resource: PolicyResource) -> Vec<Value> {
        self.state().resources[resource.index()]
            .objects
            .values()
            .cloned()
            .collect()
    }

    /// How many stored policies of each resource name `tier` in `spec.tier` (raw string
    /// equality, as Antrea's index): `[ClusterNetworkPolicies, NetworkPolicies]`.
    pub fn references(&self, tier: &str) -> [usize; 2] {
        let state = self.state();
        PolicyResource::ALL.map(|r| {
            state.resources[r.index()]
                .objects
                .values()
                .filter(|o| o.pointer("/spec/tier").and_then(Value::as_str) == Some(tier))
                .count()
        })
    }

    /// The resourceVersion and the objects of `resource` in `namespace` (`None`: all), keyed
    /// `namespace/name` in order. 404 when not installed.
    pub(crate) fn snapshot(
        &self,
        resource: PolicyResource,
        namespace: Option<&str>,
    ) -> Result<(u64, Vec<(String, Value)>), StatusError> {
        let state = self.state();
        check_installed(&state, resource)?;
        let items = state.resources[resource.index()]
            .objects
            .iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|want| want == ns))
            .map(|((ns, name), obj)| (format!("{ns}/{name}"), obj.clone()))
            .collect();
        Ok((state.rv, items))
    }

    /// The stored object at `key`. 404 when missing or not installed.
    pub(crate) fn get(&self, resource: PolicyResource, key: &Key) -> Result<Value, StatusError> {
        let state = self.state();
        check_installed(&state, resource)?;
        state.resources[resource.index()]
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| StatusError::not_found(resource.name(), &key.1))
    }
}

fn check_installed(state: &State, resource: PolicyResource) -> Result<(), StatusError> {
    if state.resources[resource.index()].installed {
        Ok(())
    } else {
        Err(StatusError::path_not_found())
    }
}

fn push(
    slot: &mut Resource,
    window: usize,
    rv: u64,
    kind: ChangeType,
    object: Value,
    old: Option<Value>,
) {
    let change = Arc::new(Change {
        rv,
        kind,
        object,
        old,
    });
    slot.history.push_back(Arc::clone(&change));
    while slot.history.len() > window {
        if let Some(evicted) = slot.history.pop_front() {
            slot.floor = evicted.rv;
        }
    }
    // No open watch is not an error.
    let _ = slot.changes.send(change);
}

/// One policy resource as a watch feed.
pub(crate) struct PolicyFeed {
    pub(crate) policies: Policies,
    pub(crate) resource: PolicyResource,
}

impl Feed for PolicyFeed {
    fn subscribe(&self, from: Option<u64>, initial: bool) -> Result<Subscription, StatusError> {
        let state = self.policies.state();
        check_installed(&state, self.resource)?;
        let slot = &state.resources[self.resource.index()];
        let receiver = slot.changes.subscribe();
        let initial = match from {
            Some(from) if !initial && from < slot.floor => {
                return Err(StatusError::expired(format!(
                    "too old resource version: {from} ({})",
                    slot.floor.saturating_add(1)
                )));
            }
            Some(from) if !initial => slot
                .history
                .iter()
                .filter(|c| c.rv > from)
                .cloned()
                .collect(),
            _ => added(slot.objects.values(), state.rv),
        };
        Ok(Subscription {
            initial,
            receiver,
            rv: state.rv,
        })
    }

    fn sync_point(
        &self,
        receiver: &mut broadcast::Receiver<Arc<Change>>,
    ) -> Result<(u64, Vec<Arc<Change>>), broadcast::error::TryRecvError> {
        let state = self.policies.state();
        Ok((state.rv, drain(receiver)?))
    }

    fn resource_version(&self) -> u64 {
        self.policies.state().rv
    }

    fn api_version(&self) -> &str {
        API_VERSION
    }

    fn kind(&self) -> &str {
        self.resource.kind()
    }

    fn expirable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_count_raw_tier_names_per_resource() {
        let p = Policies::default();
        let acnp = PolicyResource::ClusterNetworkPolicies;
        let annp = PolicyResource::NetworkPolicies;
        p.create(acnp, policy(acnp, None, "a", "mine")).unwrap();
        p.create(annp, policy(annp, Some("ns1"), "a", "mine"))
            .unwrap();
        p.create(annp, policy(annp, Some("ns2"), "a", "mine"))
            .unwrap();
        p.create(annp, policy(annp, Some("ns2"), "b", "Mine"))
            .unwrap();
        assert_eq!(p.references("mine"), [1, 2]);
        assert_eq!(
            p.create(annp, policy(annp, Some("ns1"), "a", "x"))
                .unwrap_err()
                .code,
            409
        );
        assert_eq!(
            p.create(annp, policy(annp, None, "c", "x"))
                .unwrap_err()
                .code,
            400
        );
        p.delete(annp, Some("ns1"), "a").unwrap();
        assert_eq!(p.references("mine"), [1, 1]);
        p.uninstall(acnp);
        assert_eq!(p.references("mine"), [0, 1]);
        assert_eq!(
            p.create(acnp, policy(acnp, None, "a", "mine"))
                .unwrap_err()
                .code,
            404
        );
        p.install(acnp);
        assert!(p.list(acnp).is_empty());
    }

    #[test]
    fn history_and_objects_are_bounded() {
        let p = Policies::new(
            2,
            Limits {
                max_objects: 3,
                ..Limits::default()
            },
        );
        let acnp = PolicyResource::ClusterNetworkPolicies;
        for name in ["a", "b", "c"] {
            p.create(acnp, policy(acnp, None, name, "t")).unwrap();
        }
        assert_eq!(
            p.create(acnp, policy(acnp, None, "d", "t"))
                .unwrap_err()
                .code,
            500
        );
        let feed = PolicyFeed {
            policies: p.clone(),
            resource: acnp,
        };
        assert_eq!(feed.subscribe(Some(1), false).err().unwrap().code, 410);
        assert_eq!(feed.subscribe(Some(3), false).unwrap().initial.len(), 1);
    }
}
