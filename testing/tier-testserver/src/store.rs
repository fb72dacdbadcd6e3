//! Storage: the Tier tables (Antrea's and Calico's, [`table`](crate::table)), Antrea's
//! policies ([`Policies`]), recorded Events and plain objects, under one global
//! resourceVersion.
//!
//! [`Store`] is also the "other actors" API: tests write Tiers through it at any time,
//! bypassing authentication, faults and admission (but not schema validation, except for
//! [`Store::put_raw`]); every write bumps the resourceVersion and reaches open watches.
//! [`CalicoTiers`] is the same API for Calico's Tiers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::calico::CalicoApi;
use crate::config::{Limits, ServerConfig};
use crate::history::{Change, Feed, Subscription, drain};
use crate::objects::{ObjectKey, ObjectKind, key, stamp};
use crate::policies::Policies;
use crate::status::{Cause, ResourceName, StatusError};
use crate::table::Table;
use crate::tier;
use crate::util::{
    check_size, metadata_mut, new_uid, now_rfc3339, object_name, object_rv, parse_rv, random_suffix,
};

/// Which Tier table a request addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TableId {
    /// Antrea's `tiers.crd.antrea.io` (always installed).
    Antrea,
    /// Calico's `tiers.projectcalico.org` (or `tiers.crd.projectcalico.org`).
    Calico,
}

/// Which Events API an Event was written through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventsApi {
    /// `/api/v1/namespaces/{ns}/events` (`v1` Event).
    CoreV1,
    /// `/apis/events.k8s.io/v1/namespaces/{ns}/events` (`events.k8s.io/v1` Event).
    EventsV1,
}

impl EventsApi {
    /// `apiVersion` of Events of this API.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::CoreV1 => "v1",
            Self::EventsV1 => "events.k8s.io/v1",
        }
    }

    /// The resource as named in Status messages.
    pub(crate) fn resource(self) -> ResourceName {
        ResourceName {
            group: match self {
                Self::CoreV1 => "",
                Self::EventsV1 => "events.k8s.io",
            },
            plural: "events",
            kind: "Event",
        }
    }
}

/// Shared handle on the server's storage; clones see the same data.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    policies: Policies,
    calico: CalicoApi,
}

struct State {
    rv: u64,
    antrea: Table,
    calico: Table,
    /// Oldest first, at most `limits.max_events`.
    events: VecDeque<(EventsApi, Value)>,
    limits: Limits,
    /// Secrets and webhook configurations (`objects`).
    objects: BTreeMap<ObjectKey, Value>,
}

impl State {
    /// Table `id` and the resourceVersion counter.
    fn table(&mut self, id: TableId) -> (&mut u64, &mut Table) {
        match id {
            TableId::Antrea => (&mut self.rv, &mut self.antrea),
            TableId::Calico => (&mut self.rv, &mut self.calico),
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        let names = |t: &Table| {
            t.values()
                .filter_map(object_name)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        f.debug_struct("Store")
            .field("resource_version", &state.rv)
            .field("tiers", &names(&state.antrea))
            .field("calico_tiers", &names(&state.calico))
            .field("events", &state.events.len())
            .finish()
    }
}

impl Store {
    /// An empty store at resourceVersion 1 as `config` shapes it: the watch window, Calico's
    /// API and whether its CRD is installed, the limits.
    pub(crate) fn new(config: &ServerConfig) -> Self {
        let (window, limits, calico) = (config.watch_window, config.limits, config.calico_api);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    rv: 1,
                    antrea: Table::new(Arc::new(tier::Schema), window, limits, true),
                    calico: Table::new(Arc::new(calico), window, limits, config.calico_installed),
                    events: VecDeque::new(),
                    limits,
                    objects: BTreeMap::new(),
                }),
                policies: Policies::new(window, limits),
                calico,
            }),
        }
    }

    /// Antrea's policy resources (ClusterNetworkPolicies and NetworkPolicies).
    pub fn policies(&self) -> Policies {
        self.inner.policies.clone()
    }

    /// Calico's Tiers: the "other actors" API and the switch of its CRD.
    pub fn calico(&self) -> CalicoTiers {
        CalicoTiers {
            store: self.clone(),
        }
    }

    /// The API Calico's Tier is served at.
    pub(crate) fn calico_api(&self) -> CalicoApi {
        self.inner.calico
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the plain objects of `resources` and the resourceVersion counter, under the
    /// store's lock.
    pub(crate) fn with_objects<R>(
        &self,
        f: impl FnOnce(&mut u64, &mut BTreeMap<ObjectKey, Value>) -> R,
    ) -> R {
        let mut state = self.state();
        let state = &mut *state;
        f(&mut state.rv, &mut state.objects)
    }

    /// The bounds on what clients can make the store hold.
    pub(crate) fn limits(&self) -> Limits {
        self.state().limits
    }

    /// Runs `f` on Tier table `id` and the resourceVersion counter, under the store's lock;
    /// 404 (the path is not served) when the table's CRD is not installed.
    pub(crate) fn with_table<R>(
        &self,
        id: TableId,
        f: impl FnOnce(&mut u64, &mut Table) -> Result<R, StatusError>,
    ) -> Result<R, StatusError> {
        let mut state = self.state();
        let (rv, table) = state.table(id);
        if !table.installed() {
            return Err(StatusError::path_not_found());
        }
        f(rv, table)
    }

    /// Runs `f` on Tier table `id` whether or not its CRD is installed.
    fn with_any_table<R>(&self, id: TableId, f: impl FnOnce(&mut u64, &mut Table) -> R) -> R {
        let mut state = self.state();
        let (rv, table) = state.table(id);
        f(rv, table)
    }

    /// The Tier named `name`, as stored.
    pub fn get(&self, name: &str) -> Option<Value> {
        self.get_in(TableId::Antrea, name)
    }

    /// All Tiers, sorted by name.
    pub fn list(&self) -> Vec<Value> {
        self.list_in(TableId::Antrea)
    }

    /// The current global resourceVersion (bumped by every write of any resource).
    pub fn resource_version(&self) -> u64 {
        self.state().rv
    }

    /// Every Event recorded through the Events endpoints, oldest first.
    pub fn events(&self) -> Vec<Value> {
        self.state().events.iter().map(|(_, e)| e.clone()).collect()
    }

    /// Forgets the retained change history of every Tier table: every watch or continue token
    /// older than the current resourceVersion now gets 410 Expired.
    pub fn compact(&self) {
        let mut state = self.state();
        let rv = state.rv;
        state.antrea.compact(rv);
        state.calico.compact(rv);
    }

    /// Creates a Tier as another actor would (schema-validated, no admission).
    ///
    /// `apiVersion`/`kind` are filled in when missing; server-managed metadata is ignored.
    /// Fails with 422 Invalid or 409 AlreadyExists.
    pub fn create(&self, obj: Value) -> Result<Value, StatusError> {
        self.actor_create(TableId::Antrea, obj)
    }

    /// Replaces a Tier as another actor would (schema-validated, no admission).
    ///
    /// With `metadata.resourceVersion` set, a stale one fails with 409 Conflict; without
    /// it the write is unconditional. Fails with 404 NotFound when the Tier is missing.
    pub fn update(&self, obj: Value) -> Result<Value, StatusError> {
        self.actor_update(TableId::Antrea, obj)
    }

    /// Reads the Tier `name`, lets `edit` change it, and writes it back unconditionally
    /// (schema-validated, no admission). Fails with 404 NotFound when the Tier is missing.
    pub fn modify(&self, name: &str, edit: impl FnOnce(&mut Value)) -> Result<Value, StatusError> {
        self.actor_modify(TableId::Antrea, name, edit)
    }

    /// Deletes a Tier now as another actor would (no admission, finalizers ignored).
    /// Returns the deleted object; 404 NotFound when missing.
    pub fn delete(&self, name: &str) -> Result<Value, StatusError> {
        self.with_table(TableId::Antrea, |rv, table| table.remove(rv, name))
    }

    /// Writes `obj` into storage as is: no validation, no pruning, no admission. Sets
    /// `metadata.resourceVersion` (and `uid`/`creationTimestamp` when missing) and emits ADDED
    /// or MODIFIED. Only `metadata.name` is required (400 BadRequest otherwise).
    pub fn put_raw(&self, obj: Value) -> Result<Value, StatusError> {
        self.with_table(TableId::Antrea, |rv, table| table.put_raw(rv, obj))
    }

    fn get_in(&self, id: TableId, name: &str) -> Option<Value> {
        self.with_table(id, |_, table| Ok(table.get(name).cloned()))
            .ok()
            .flatten()
    }

    fn list_in(&self, id: TableId) -> Vec<Value> {
        self.with_table(id, |_, table| Ok(table.values().cloned().collect()))
            .unwrap_or_default()
    }

    fn actor_create(&self, id: TableId, mut obj: Value) -> Result<Value, StatusError> {
        self.with_table(id, |rv, table| {
            table.fill_type_meta(&mut obj);
            if let Some(meta) = metadata_mut(&mut obj) {
                meta.remove("resourceVersion");
            }
            table.schema().check_type(&obj)?;
            table.schema().prepare(&mut obj, None)?;
            table.create(rv, obj, false)
        })
    }

    fn actor_update(&self, id: TableId, mut obj: Value) -> Result<Value, StatusError> {
        self.with_table(id, |rv, table| {
            table.fill_type_meta(&mut obj);
            table.schema().check_type(&obj)?;
            let name = object_name(&obj).unwrap_or_default().to_owned();
            let existing = table
                .get(&name)
                .cloned()
                .ok_or_else(|| table.not_found(&name))?;
            table.schema().prepare(&mut obj, Some(&existing))?;
            let expected = match object_rv(&obj) {
                Some(text) => Some(
                    parse_rv(text).ok_or_else(|| StatusError::stale(table.resource(), &name))?,
                ),
                None => None,
            };
            table.update(rv, &name, obj, expected, false)
        })
    }

    fn actor_modify(
        &self,
        id: TableId,
        name: &str,
        edit: impl FnOnce(&mut Value),
    ) -> Result<Value, StatusError> {
        let mut obj = self.with_table(id, |_, table| {
            table
                .get(name)
                .cloned()
                .ok_or_else(|| table.not_found(name))
        })?;
        edit(&mut obj);
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.remove("resourceVersion");
        }
        self.actor_update(id, obj)
    }

    /// The current resourceVersion together with every change already queued for
    /// `receiver`: once those are sent, a BOOKMARK at that resourceVersion is truthful.
    pub(crate) fn sync_point(
        &self,
        receiver: &mut broadcast::Receiver<Arc<Change>>,
    ) -> Result<(u64, Vec<Arc<Change>>), broadcast::error::TryRecvError> {
        let state = self.state();
        Ok((state.rv, drain(receiver)?))
    }

    /// Records a new Event (POST): 409 AlreadyExists when the name is taken.
    pub(crate) fn create_event(
        &self,
        api: EventsApi,
        namespace: &str,
        mut obj: Value,
    ) -> Result<Value, StatusError> {
        if !obj.is_object() {
            return Err(StatusError::bad_request("an Event must be a JSON object"));
        }
        let body_ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty());
        if body_ns.is_some_and(|ns| ns != namespace) {
            return Err(StatusError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let name = match object_name(&obj) {
            Some(n) => n.to_owned(),
            None => match obj
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
            {
                Some(prefix) if !prefix.is_empty() => format!("{prefix}{}", random_suffix(5)),
                _ => {
                    return Err(StatusError::invalid(
                        api.resource().group,
                        "Event",
                        "",
                        &[Cause::new(
                            "FieldValueRequired",
                            "Required value: name or generateName is required",
                            "metadata.name",
                        )],
                    ));
                }
            },
        };
        let mut state = self.state();
        if find_event(&state, api, namespace, &name).is_some() {
            return Err(StatusError::already_exists(api.resource(), &name));
        }
        state.rv += 1;
        let rv = state.rv;
        if let Some(map) = obj.as_object_mut() {
            map.insert("apiVersion".into(), json!(api.api_version()));
            map.insert("kind".into(), json!("Event"));
        }
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("name".into(), json!(name));
            meta.insert("namespace".into(), json!(namespace));
            meta.insert("uid".into(), json!(new_uid()));
            meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        check_size(&obj, state.limits.max_object_bytes)?;
        while state.events.len() >= state.limits.max_events.max(1) {
            state.events.pop_front();
        }
        state.events.push_back((api, obj.clone()));
        Ok(obj)
    }

    /// Merge-patches a recorded Event: 404 NotFound when missing.
    pub(crate) fn patch_event(
        &self,
        api: EventsApi,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, StatusError> {
        let mut state = self.state();
        let limit = state.limits.max_object_bytes;
        let Some(index) = find_event(&state, api, namespace, name) else {
            return Err(StatusError::not_found(api.resource(), name));
        };
        let Some((_, stored)) = state.events.get(index) else {
            return Err(StatusError::not_found(api.resource(), name));
        };
        let mut event = stored.clone();
        let (uid, created) = (
            event.pointer("/metadata/uid").cloned(),
            event.pointer("/metadata/creationTimestamp").cloned(),
        );
        crate::patch::merge_patch(&mut event, patch);
        if let Some(map) = event.as_object_mut() {
            map.insert("apiVersion".into(), json!(api.api_version()));
            map.insert("kind".into(), json!("Event"));
        }
        let rv = state.rv + 1;
        if let Some(meta) = metadata_mut(&mut event) {
            meta.insert("name".into(), json!(name));
            meta.insert("namespace".into(), json!(namespace));
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
            if let Some(uid) = uid {
                meta.insert("uid".into(), uid);
            }
            if let Some(created) = created {
                meta.insert("creationTimestamp".into(), created);
            }
        }
        check_size(&event, limit)?;
        state.rv = rv;
        if let Some(slot) = state.events.get_mut(index) {
            slot.1 = event.clone();
        }
        Ok(event)
    }

    /// One recorded Event, if present.
    pub(crate) fn get_event(&self, api: EventsApi, namespace: &str, name: &str) -> Option<Value> {
        let state = self.state();
        find_event(&state, api, namespace, name)
            .and_then(|i| state.events.get(i))
            .map(|(_, e)| e.clone())
    }

    /// Recorded Events of one API and namespace, with the current resourceVersion.
    pub(crate) fn list_events(&self, api: EventsApi, namespace: &str) -> (u64, Vec<Value>) {
        let state = self.state();
        let items = state
            .events
            .iter()
            .filter(|(a, e)| {
                *a == api
                    && e.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace)
            })
            .map(|(_, e)| e.clone())
            .collect();
        (state.rv, items)
    }
}

/// Calico's Tiers in the store ([`Store::calico`]): seeded, read and changed as another actor
/// would (schema-validated with Calico's CRD rules, no admission policy), and the switch of
/// their CRD: while it is not installed, every request for Calico's Tiers answers 404, as
/// kube-apiserver does for a CRD that does not exist, and discovery does not list it.
#[derive(Clone, Debug)]
pub struct CalicoTiers {
    store: Store,
}

impl CalicoTiers {
    /// The API Calico's Tier is served at ([`ServerConfig::calico`](crate::ServerConfig::calico)).
    pub fn api(&self) -> CalicoApi {
        self.store.calico_api()
    }

    /// Whether the CRD is installed.
    pub fn installed(&self) -> bool {
        self.store
            .with_any_table(TableId::Calico, |_, table| table.installed())
    }

    /// Installs the CRD (idempotent; a new one starts empty).
    pub fn install(&self) {
        self.store
            .with_any_table(TableId::Calico, |_, table| table.install());
    }

    /// Uninstalls the CRD: its Tiers are deleted (open watches see DELETED) and every request
    /// for them answers 404 until [`install`](Self::install).
    pub fn uninstall(&self) {
        self.store
            .with_any_table(TableId::Calico, |rv, table| table.uninstall(rv));
    }

    /// The Tier named `name`, as stored (`None` also when the CRD is not installed).
    pub fn get(&self, name: &str) -> Option<Value> {
        self.store.get_in(TableId::Calico, name)
    }

    /// All Tiers, sorted by name (empty when the CRD is not installed).
    pub fn list(&self) -> Vec<Value> {
        self.store.list_in(TableId::Calico)
    }

    /// Creates a Tier as another actor would: pruned, defaulted and validated by the CRD
    /// (built-in names pinned), no admission policy. 422 Invalid, 409 AlreadyExists, 404
    /// when the CRD is not installed.
    pub fn create(&self, obj: Value) -> Result<Value, StatusError> {
        self.store.actor_create(TableId::Calico, obj)
    }

    /// Creates Calico's three built-in Tiers with their pinned values (as Calico's
    /// `EnsureInitialized` would), skipping those that exist.
    pub fn create_builtins(&self) -> Result<(), StatusError> {
        for builtin in crate::calico::BUILTIN_TIERS {
            match self.create(builtin.object(self.api())) {
                Ok(_) => {}
                Err(e) if e.reason == "AlreadyExists" => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Replaces a Tier as another actor would (validated by the CRD). A stale
    /// `metadata.resourceVersion` fails with 409 Conflict; without one the write is
    /// unconditional. 404 when the Tier is missing or the CRD not installed.
    pub fn update(&self, obj: Value) -> Result<Value, StatusError> {
        self.store.actor_update(TableId::Calico, obj)
    }

    /// Reads the Tier `name`, lets `edit` change it, and writes it back unconditionally
    /// (validated by the CRD).
    pub fn modify(&self, name: &str, edit: impl FnOnce(&mut Value)) -> Result<Value, StatusError> {
        self.store.actor_modify(TableId::Calico, name, edit)
    }

    /// Deletes a Tier now as another actor would (no admission policy, finalizers ignored).
    pub fn delete(&self, name: &str) -> Result<Value, StatusError> {
        self.store
            .with_table(TableId::Calico, |rv, table| table.remove(rv, name))
    }

    /// Writes `obj` as is (no validation: e.g. a built-in Tier with a wrong order, as an
    /// older Calico left it). Only `metadata.name` is required.
    pub fn put_raw(&self, obj: Value) -> Result<Value, StatusError> {
        self.store
            .with_table(TableId::Calico, |rv, table| table.put_raw(rv, obj))
    }
}

/// The plain objects ([`ObjectKind`]): Secrets and webhook configurations.
impl Store {
    /// The stored object, if present (`namespace` is ignored for a cluster-scoped kind).
    pub fn object(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<Value> {
        let key = key(kind, namespace, name);
        self.with_objects(|_, objects| objects.get(&key).cloned())
    }

    /// Every stored object of `kind`, in every namespace, ordered by namespace and name.
    pub fn objects(&self, kind: ObjectKind) -> Vec<Value> {
        self.with_objects(|_, objects| {
            objects
                .iter()
                .filter(|((k, _, _), _)| *k == kind)
                .map(|(_, v)| v.clone())
                .collect()
        })
    }

    /// Stores `obj` as another actor would, creating or replacing it unconditionally; returns
    /// it as stored. 400 BadRequest without `metadata.name`.
    pub fn put_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        obj: Value,
    ) -> Result<Value, StatusError> {
        let name = object_name(&obj)
            .ok_or_else(|| StatusError::bad_request("an object needs metadata.name"))?
            .to_owned();
        let key = key(kind, namespace, &name);
        self.with_objects(|rv, objects| {
            let existing = objects.get(&key).cloned();
            let stored = stamp(kind, &key, obj, existing.as_ref(), rv);
            objects.insert(key, stored.clone());
            Ok(stored)
        })
    }
}

/// One Tier table as a watch feed.
pub(crate) struct TableFeed {
    store: Store,
    id: TableId,
    api_version: &'static str,
    kind: &'static str,
}

impl TableFeed {
    /// The feed of table `id`.
    pub(crate) fn new(store: &Store, id: TableId) -> Self {
        let (api_version, kind) = store.with_any_table(id, |_, table| {
            (table.schema().api_version(), table.resource().kind)
        });
        Self {
            store: store.clone(),
            id,
            api_version,
            kind,
        }
    }
}

impl Feed for TableFeed {
    fn subscribe(&self, from: Option<u64>, initial: bool) -> Result<Subscription, StatusError> {
        self.store
            .with_table(self.id, |rv, table| table.subscribe(*rv, from, initial))
    }

    fn sync_point(
        &self,
        receiver: &mut broadcast::Receiver<Arc<Change>>,
    ) -> Result<(u64, Vec<Arc<Change>>), broadcast::error::TryRecvError> {
        self.store.sync_point(receiver)
    }

    fn resource_version(&self) -> u64 {
        self.store.resource_version()
    }

    fn api_version(&self) -> &str {
        self.api_version
    }

    fn kind(&self) -> &str {
        self.kind
    }

    fn expirable(&self) -> bool {
        true
    }
}

fn find_event(state: &State, api: EventsApi, namespace: &str, name: &str) -> Option<usize> {
    state.events.iter().position(|(a, e)| {
        *a == api
            && e.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace)
            && object_name(e) == Some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::ChangeType;
    use crate::table::Preconditions;
    use crate::tier::tier;
    use crate::util::object_uid;

    fn new_store(window: usize) -> Store {
        Store::new(
            &ServerConfig::default()
                .watch_window(window)
                .calico(CalicoApi::V3),
        )
    }

    #[test]
    fn tables_and_events_are_bounded() {
        let limits = crate::config::Limits {
            max_objects: 2,
            max_events: 2,
            ..Default::default()
        };
        let store = Store::new(&ServerConfig::default().limits(limits).calico(CalicoApi::V3));
        store.create(tier("a", 1, None)).unwrap();
        store.create(tier("b", 2, None)).unwrap();
        let full = store.create(tier("c", 3, None)).unwrap_err();
        assert_eq!(full.code, 500);
        assert!(
            full.message.contains("at most 2 tiers.crd.antrea.io"),
            "{full:?}"
        );
        assert_eq!(store.put_raw(tier("c", 3, None)).unwrap_err().code, 500);
        // Replacing is not growing; the other table has its own room.
        assert!(store.put_raw(tier("b", 4, None)).is_ok());
        store.calico().create_builtins().unwrap_err();
        assert_eq!(store.calico().list().len(), 2);
        store.delete("a").unwrap();
        store.create(tier("c", 3, None)).unwrap();
        for name in ["e1", "e2", "e3"] {
            store
                .create_event(
                    EventsApi::CoreV1,
                    "default",
                    json!({"metadata": {"name": name}}),
                )
                .unwrap();
        }
        let names: Vec<_> = store
            .events()
            .iter()
            .map(|e| e["metadata"]["name"].clone())
            .collect();
        assert_eq!(names, ["e2", "e3"]);
    }

    #[test]
    fn objects_cannot_grow_past_the_size_bound() {
        let limits = crate::config::Limits {
            max_object_bytes: 1000,
            ..Default::default()
        };
        let store = Store::new(&ServerConfig::default().limits(limits));
        store.create(tier("a", 1, None)).unwrap();
        let grown = store
            .modify("a", |t| {
                t["metadata"]["labels"] = json!({"x": "y".repeat(1000)})
            })
            .unwrap_err();
        assert_eq!(
            (grown.code, grown.reason.as_str()),
            (413, "RequestEntityTooLarge")
        );
        assert!(store.get("a").unwrap()["metadata"].get("labels").is_none());
        store
            .create_event(
                EventsApi::CoreV1,
                "default",
                json!({"metadata": {"name": "e"}}),
            )
            .unwrap();
        let patched = store
            .patch_event(
                EventsApi::CoreV1,
                "default",
                "e",
                &json!({"note": "n".repeat(1000)}),
            )
            .unwrap_err();
        assert_eq!(patched.code, 413);
        assert!(store.events()[0].get("note").is_none());
    }

    fn rv(obj: &Value) -> u64 {
        object_rv(obj).and_then(parse_rv).unwrap()
    }

    #[test]
    fn create_update_delete_bump_the_resource_version() {
        let store = new_store(100);
        let start = store.resource_version();
        let created = store.create(tier("a", 1, None)).unwrap();
        assert_eq!(rv(&created), start + 1);
        assert_eq!(created["metadata"]["generation"], 1);
        assert!(object_uid(&created).is_some());
        let updated = store
            .modify("a", |t| t["spec"]["priority"] = json!(2))
            .unwrap();
        assert_eq!(rv(&updated), start + 2);
        assert_eq!(updated["metadata"]["generation"], 2);
        assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
        let relabeled = store
            .modify("a", |t| t["metadata"]["labels"] = json!({"x": "y"}))
            .unwrap();
        assert_eq!(relabeled["metadata"]["generation"], 2);
        let deleted = store.delete("a").unwrap();
        assert_eq!(rv(&deleted), start + 4);
        assert!(store.get("a").is_none());
    }

    #[test]
    fn no_op_update_keeps_the_resource_version() {
        let store = new_store(100);
        let created = store.create(tier("a", 1, None)).unwrap();
        let same = store.update(created.clone()).unwrap();
        assert_eq!(same, created);
        assert_eq!(store.resource_version(), rv(&created));
    }

    #[test]
    fn stale_update_conflicts_and_duplicate_create_already_exists() {
        let store = new_store(100);
        let created = store.create(tier("a", 1, None)).unwrap();
        store
            .modify("a", |t| t["spec"]["priority"] = json!(2))
            .unwrap();
        let err = store.update(created).unwrap_err();
        assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
        let err = store.create(tier("a", 3, None)).unwrap_err();
        assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    }

    #[test]
    fn snapshots_undo_later_changes() {
        let store = new_store(100);
        store.create(tier("a", 1, None)).unwrap();
        store.create(tier("b", 2, None)).unwrap();
        let at = store.resource_version();
        store
            .modify("a", |t| t["spec"]["priority"] = json!(5))
            .unwrap();
        store.delete("b").unwrap();
        store.create(tier("c", 3, None)).unwrap();
        let (rv_at, items) = store
            .with_table(TableId::Antrea, |rv, t| t.snapshot(*rv, Some(at)))
            .unwrap();
        assert_eq!(rv_at, at);
        let names: Vec<_> = items.iter().map(|i| object_name(i).unwrap()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(items[0]["spec"]["priority"], 1);
        store.compact();
        assert_eq!(
            store
                .with_table(TableId::Antrea, |rv, t| t.snapshot(*rv, Some(at)))
                .unwrap_err()
                .code,
            410
        );
    }

    #[test]
    fn history_window_expires_old_watches() {
        let store = new_store(2);
        let start = store.resource_version();
        for i in 0..4 {
            store.create(tier(&format!("t{i}"), i, None)).unwrap();
        }
        let err = store
            .with_table(TableId::Antrea, |rv, t| {
                t.subscribe(*rv, Some(start), false)
            })
            .err()
            .unwrap();
        assert_eq!(err.reason, "Expired");
        let sub = store
            .with_table(TableId::Antrea, |rv, t| {
                t.subscribe(*rv, Some(start + 2), false)
            })
            .unwrap();
        assert_eq!(sub.initial.len(), 2);
        let sub = store
            .with_table(TableId::Antrea, |rv, t| t.subscribe(*rv, None, false))
            .unwrap();
        assert_eq!(sub.initial.len(), 4);
        assert!(sub.initial.iter().all(|c| c.kind == ChangeType::Added));
    }

    #[test]
    fn finalizers_delay_deletion() {
        let store = new_store(100);
        let mut obj = tier("a", 1, None);
        obj["metadata"]["finalizers"] = json!(["x"]);
        store.create(obj).unwrap();
        let (obj, gone) = store
            .with_table(TableId::Antrea, |rv, t| {
                t.delete(rv, "a", &Preconditions::default(), false)
            })
            .unwrap();
        assert!(!gone);
        assert!(obj.pointer("/metadata/deletionTimestamp").is_some());
        store
            .modify("a", |t| t["metadata"]["finalizers"] = json!([]))
            .unwrap();
        assert!(store.get("a").is_none());
    }

    #[test]
    fn delete_preconditions() {
        let store = new_store(100);
        store.create(tier("a", 1, None)).unwrap();
        let pre = Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        };
        let err = store
            .with_table(TableId::Antrea, |rv, t| t.delete(rv, "a", &pre, false))
            .unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message
                .contains("Precondition failed: UID in precondition: nope")
        );
    }

    #[test]
    fn put_raw_skips_validation() {
        let store = new_store(100);
        let obj = store
            .put_raw(json!({"metadata": {"name": "Weird"}, "spec": {"priority": 999}}))
            .unwrap();
        assert!(object_rv(&obj).is_some());
        assert_eq!(store.get("Weird").unwrap()["spec"]["priority"], 999);
    }

    #[test]
    fn events_are_recorded_and_patched() {
        let store = new_store(100);
        let ev = store
            .create_event(
                EventsApi::EventsV1,
                "default",
                json!({"metadata": {"name": "e1"}, "note": "a"}),
            )
            .unwrap();
        assert_eq!(ev["metadata"]["namespace"], "default");
        assert_eq!(
            store
                .create_event(
                    EventsApi::EventsV1,
                    "default",
                    json!({"metadata": {"name": "e1"}})
                )
                .unwrap_err()
                .code,
            409
        );
        let patched = store
            .patch_event(
                EventsApi::EventsV1,
                "default",
                "e1",
                &json!({"series": {"count": 2}}),
            )
            .unwrap();
        assert_eq!(patched["series"]["count"], 2);
        assert_eq!(patched["note"], "a");
        assert_eq!(store.events().len(), 1);
        assert_eq!(
            store
                .patch_event(EventsApi::CoreV1, "default", "e1", &json!({}))
                .unwrap_err()
                .code,
            404
        );
    }
}
