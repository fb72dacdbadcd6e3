//! Storage: Tiers, Antrea's policies ([`Policies`]) and recorded Events, the global resourceVersion, and the retained change
//! history that watches replay and consistent list pages are rebuilt from.
//!
//! [`Store`] is also the "other actors" API: tests write Tiers through it at any time,
//! bypassing authentication, faults and admission (but not schema validation, except for
//! [`Store::put_raw`]); every write bumps the resourceVersion and reaches open watches.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::history::{Change, ChangeType, Feed, Subscription, added, drain};
use crate::objects::{ObjectKey, ObjectKind, key, stamp};
use crate::policies::Policies;
use crate::status::{Cause, ResourceName, StatusError};
use crate::tier::{self, API_VERSION, KIND, TIERS};
use crate::util::{
    metadata_mut, new_uid, now_rfc3339, object_name, object_rv, object_uid, parse_rv, random_suffix,
};

/// DeleteOptions preconditions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Preconditions {
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
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
    changes: broadcast::Sender<Arc<Change>>,
    policies: Policies,
}

struct State {
    rv: u64,
    tiers: BTreeMap<String, Value>,
    history: VecDeque<Arc<Change>>,
    window: usize,
    /// Every change with `rv > floor` is in `history`.
    floor: u64,
    events: Vec<(EventsApi, Value)>,
    /// Secrets and webhook configurations (`resources`).
    objects: BTreeMap<ObjectKey, Value>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Store")
            .field("resource_version", &state.rv)
            .field("tiers", &state.tiers.keys().collect::<Vec<_>>())
            .field("events", &state.events.len())
            .finish()
    }
}

/// Capacity of the channel feeding open watches; a watch that falls this far behind is closed.
const WATCH_CHANNEL_CAPACITY: usize = 4096;

impl Store {
    /// An empty store at resourceVersion 1 that retains the last `window` Tier changes.
    pub(crate) fn new(window: usize) -> Self {
        let (changes, _) = broadcast::channel(WATCH_CHANNEL_CAPACITY);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    rv: 1,
                    tiers: BTreeMap::new(),
                    history: VecDeque::new(),
                    window: window.max(1),
                    floor: 0,
                    events: Vec::new(),
                    objects: BTreeMap::new(),
                }),
                changes,
                policies: Policies::default(),
            }),
        }
    }

    /// Antrea's policy resources (ClusterNetworkPolicies and NetworkPolicies).
    pub fn policies(&self) -> Policies {
        self.inner.policies.clone()
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

    /// The Tier named `name`, as stored.
    pub fn get(&self, name: &str) -> Option<Value> {
        self.state().tiers.get(name).cloned()
    }

    /// All Tiers, sorted by name.
    pub fn list(&self) -> Vec<Value> {
        self.state().tiers.values().cloned().collect()
    }

    /// The current global resourceVersion (bumped by every Tier or Event write).
    pub fn resource_version(&self) -> u64 {
        self.state().rv
    }

    /// Every Event recorded through the Events endpoints, oldest first.
    pub fn events(&self) -> Vec<Value> {
        self.state().events.iter().map(|(_, e)| e.clone()).collect()
    }

    /// Forgets the retained change history: every watch or continue token older than the
    /// current resourceVersion now gets 410 Expired.
    pub fn compact(&self) {
        let mut state = self.state();
        state.history.clear();
        state.floor = state.rv;
    }

    /// Creates a Tier as another actor would (schema-validated, no admission).
    ///
    /// `apiVersion`/`kind` are filled in when missing; server-managed metadata is ignored.
    /// Fails with 422 Invalid or 409 AlreadyExists.
    pub fn create(&self, mut obj: Value) -> Result<Value, StatusError> {
        fill_type_meta(&mut obj);
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.remove("resourceVersion");
        }
        tier::check_type(&obj)?;
        tier::prune(&mut obj);
        tier::validate(&obj)?;
        self.commit_create(obj, false)
    }

    /// Replaces a Tier as another actor would (schema-validated, no admission).
    ///
    /// With `metadata.resourceVersion` set, a stale one fails with 409 Conflict; without
    /// it the write is unconditional. Fails with 404 NotFound when the Tier is missing.
    pub fn update(&self, mut obj: Value) -> Result<Value, StatusError> {
        fill_type_meta(&mut obj);
        tier::check_type(&obj)?;
        tier::prune(&mut obj);
        tier::validate(&obj)?;
        let name = object_name(&obj).unwrap_or_default().to_owned();
        let expected = match object_rv(&obj) {
            Some(rv) => Some(parse_rv(rv).ok_or_else(|| StatusError::stale(TIERS, &name))?),
            None => None,
        };
        self.commit_update(&name, obj, expected, false)
    }

    /// Reads the Tier `name`, lets `edit` change it, and writes it back unconditionally
    /// (schema-validated, no admission). Fails with 404 NotFound when the Tier is missing.
    pub fn modify(&self, name: &str, edit: impl FnOnce(&mut Value)) -> Result<Value, StatusError> {
        let mut obj = self
            .get(name)
            .ok_or_else(|| StatusError::not_found(TIERS, name))?;
        edit(&mut obj);
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.remove("resourceVersion");
        }
        self.update(obj)
    }

    /// Deletes a Tier now as another actor would (no admission, finalizers ignored).
    /// Returns the deleted object; 404 NotFound when missing.
    pub fn delete(&self, name: &str) -> Result<Value, StatusError> {
        let mut state = self.state();
        let Some(existing) = state.tiers.remove(name) else {
            return Err(StatusError::not_found(TIERS, name));
        };
        Ok(self.record_delete(&mut state, existing))
    }

    /// Writes `obj` into storage as is: no validation, no pruning, no admission. Sets
    /// `metadata.resourceVersion` (and `uid`/`creationTimestamp` when missing) and emits ADDED
    /// or MODIFIED. Only `metadata.name` is required (400 BadRequest otherwise).
    pub fn put_raw(&self, mut obj: Value) -> Result<Value, StatusError> {
        let name = object_name(&obj)
            .ok_or_else(|| StatusError::bad_request("put_raw needs metadata.name"))?
            .to_owned();
        let mut state = self.state();
        state.rv += 1;
        let rv = state.rv;
        let old = state.tiers.get(&name).cloned();
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
            meta.entry("uid").or_insert_with(|| json!(new_uid()));
            meta.entry("creationTimestamp")
                .or_insert_with(|| json!(now_rfc3339()));
        }
        state.tiers.insert(name, obj.clone());
        let kind = if old.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.push_change(&mut state, kind, obj.clone(), old);
        Ok(obj)
    }

    /// Stores a validated, admitted new Tier (fills uid, creationTimestamp, generation,
    /// resourceVersion). 500 when the body carries a resourceVersion, 409 AlreadyExists
    /// when the name is taken. A dry run returns the object without storing it.
    pub(crate) fn commit_create(
        &self,
        mut obj: Value,
        dry_run: bool,
    ) -> Result<Value, StatusError> {
        if object_rv(&obj).is_some() {
            return Err(StatusError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = object_name(&obj).unwrap_or_default().to_owned();
        let mut state = self.state();
        if state.tiers.contains_key(&name) {
            return Err(StatusError::already_exists(TIERS, &name));
        }
        let rv = state.rv + 1;
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("uid".into(), json!(new_uid()));
            meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
            meta.insert("generation".into(), json!(1));
            meta.remove("deletionTimestamp");
            meta.remove("deletionGracePeriodSeconds");
            meta.remove("namespace");
            meta.remove("selfLink");
            if !dry_run {
                meta.insert("resourceVersion".into(), json!(rv.to_string()));
            }
        }
        if dry_run {
            return Ok(obj);
        }
        state.rv = rv;
        state.tiers.insert(name, obj.clone());
        self.push_change(&mut state, ChangeType::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Stores a validated, admitted replacement of Tier `name`.
    ///
    /// `expected_rv` (when set) must still be the stored resourceVersion (409 Conflict
    /// otherwise). Server-managed metadata is carried over; `generation` goes up when
    /// anything outside `metadata` changed. A write that changes nothing is a no-op (no
    /// new resourceVersion, no event), as in kube-apiserver. Removing the last finalizer
    /// of a Tier being deleted deletes it.
    pub(crate) fn commit_update(
        &self,
        name: &str,
        mut obj: Value,
        expected_rv: Option<u64>,
        dry_run: bool,
    ) -> Result<Value, StatusError> {
        let mut state = self.state();
        let Some(existing) = state.tiers.get(name).cloned() else {
            return Err(StatusError::not_found(TIERS, name));
        };
        if let Some(expected) = expected_rv
            && object_rv(&existing).and_then(parse_rv) != Some(expected)
        {
            return Err(StatusError::stale(TIERS, name));
        }
        carry_system_fields(&existing, &mut obj);
        if without_rv(&obj) == without_rv(&existing) {
            return Ok(existing);
        }
        if dry_run {
            return Ok(obj);
        }
        let deleting = existing.pointer("/metadata/deletionTimestamp").is_some();
        if deleting && !has_finalizers(&obj) {
            state.tiers.remove(name);
            return Ok(self.record_delete(&mut state, obj));
        }
        state.rv += 1;
        let rv = state.rv;
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        state.tiers.insert(name.to_owned(), obj.clone());
        self.push_change(
            &mut state,
            ChangeType::Modified,
            obj.clone(),
            Some(existing),
        );
        Ok(obj)
    }

    /// Deletes Tier `name` after checking `preconditions` (409 Conflict) under the lock.
    ///
    /// Returns the object and whether it is gone: a Tier with finalizers only gets a
    /// `deletionTimestamp` (kube-apiserver then answers 202).
    pub(crate) fn commit_delete(
        &self,
        name: &str,
        preconditions: &Preconditions,
        dry_run: bool,
    ) -> Result<(Value, bool), StatusError> {
        let mut state = self.state();
        let Some(existing) = state.tiers.get(name).cloned() else {
            return Err(StatusError::not_found(TIERS, name));
        };
        check_preconditions(&existing, preconditions, name)?;
        let finalizers = has_finalizers(&existing);
        if dry_run {
            return Ok((existing, !finalizers));
        }
        if !finalizers {
            state.tiers.remove(name);
            return Ok((self.record_delete(&mut state, existing), true));
        }
        if existing.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok((existing, false));
        }
        let mut obj = existing.clone();
        state.rv += 1;
        let rv = state.rv;
        if let Some(meta) = metadata_mut(&mut obj) {
            let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
            meta.insert("generation".into(), json!(generation + 1));
            meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        state.tiers.insert(name.to_owned(), obj.clone());
        self.push_change(
            &mut state,
            ChangeType::Modified,
            obj.clone(),
            Some(existing),
        );
        Ok((obj, false))
    }

    /// All Tiers at resourceVersion `at` (`None`: now) and that resourceVersion.
    ///
    /// Rebuilt from the retained history by undoing later changes; 410 Expired when `at`
    /// is older than the history.
    pub(crate) fn snapshot(&self, at: Option<u64>) -> Result<(u64, Vec<Value>), StatusError> {
        let state = self.state();
        let at = match at {
            Some(at) if at < state.rv => at,
            _ => return Ok((state.rv, state.tiers.values().cloned().collect())),
        };
        if at < state.floor {
            return Err(too_old(at, state.floor));
        }
        let mut tiers = state.tiers.clone();
        for change in state.history.iter().rev().take_while(|c| c.rv > at) {
            let name = object_name(&change.object).unwrap_or_default().to_owned();
            match &change.old {
                Some(old) => tiers.insert(name, old.clone()),
                None => tiers.remove(&name),
            };
        }
        Ok((at, tiers.into_values().collect()))
    }

    /// Starts a watch. `from: None` (resourceVersion unset or "0") and `initial_state`
    /// (`sendInitialEvents`) begin with synthetic ADDED events for every Tier; otherwise the
    /// retained changes after `from` are replayed (410 Expired when they are gone).
    pub(crate) fn subscribe(
        &self,
        from: Option<u64>,
        initial_state: bool,
    ) -> Result<Subscription, StatusError> {
        let state = self.state();
        let receiver = self.inner.changes.subscribe();
        let initial = match from {
            Some(from) if !initial_state => {
                if from < state.floor {
                    return Err(too_old(from, state.floor));
                }
                state
                    .history
                    .iter()
                    .filter(|c| c.rv > from)
                    .cloned()
                    .collect()
            }
            _ => added(state.tiers.values(), state.rv),
        };
        Ok(Subscription {
            initial,
            receiver,
            rv: state.rv,
        })
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
        state.events.push((api, obj.clone()));
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
        let Some(index) = find_event(&state, api, namespace, name) else {
            return Err(StatusError::not_found(api.resource(), name));
        };
        state.rv += 1;
        let rv = state.rv;
        let Some((_, event)) = state.events.get_mut(index) else {
            return Err(StatusError::not_found(api.resource(), name));
        };
        let (uid, created) = (
            event.pointer("/metadata/uid").cloned(),
            event.pointer("/metadata/creationTimestamp").cloned(),
        );
        crate::patch::merge_patch(event, patch);
        if let Some(map) = event.as_object_mut() {
            map.insert("apiVersion".into(), json!(api.api_version()));
            map.insert("kind".into(), json!("Event"));
        }
        if let Some(meta) = metadata_mut(event) {
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
        Ok(event.clone())
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

    fn record_delete(&self, state: &mut State, mut obj: Value) -> Value {
        state.rv += 1;
        let rv = state.rv;
        let old = obj.clone();
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        self.push_change(state, ChangeType::Deleted, obj.clone(), Some(old));
        obj
    }

    fn push_change(&self, state: &mut State, kind: ChangeType, object: Value, old: Option<Value>) {
        let change = Arc::new(Change {
            rv: state.rv,
            kind,
            object,
            old,
        });
        state.history.push_back(Arc::clone(&change));
        while state.history.len() > state.window {
            if let Some(evicted) = state.history.pop_front() {
                state.floor = evicted.rv;
            }
        }
        // No open watch is not an error.
        let _ = self.inner.changes.send(change);
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

impl Feed for Store {
    fn subscribe(&self, from: Option<u64>, initial: bool) -> Result<Subscription, StatusError> {
        Store::subscribe(self, from, initial)
    }

    fn sync_point(
        &self,
        receiver: &mut broadcast::Receiver<Arc<Change>>,
    ) -> Result<(u64, Vec<Arc<Change>>), broadcast::error::TryRecvError> {
        Store::sync_point(self, receiver)
    }

    fn resource_version(&self) -> u64 {
        Store::resource_version(self)
    }

    fn api_version(&self) -> &str {
        API_VERSION
    }

    fn kind(&self) -> &str {
        KIND
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

fn too_old(requested: u64, floor: u64) -> StatusError {
    StatusError::expired(format!(
        "too old resource version: {requested} ({})",
        floor + 1
    ))
}

fn fill_type_meta(obj: &mut Value) {
    if let Some(map) = obj.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| json!(API_VERSION));
        map.entry("kind").or_insert_with(|| json!(KIND));
    }
}

/// Checks DeleteOptions preconditions against the stored object (409 Conflict).
pub(crate) fn check_preconditions(
    existing: &Value,
    preconditions: &Preconditions,
    name: &str,
) -> Result<(), StatusError> {
    if let Some(uid) = &preconditions.uid {
        let actual = object_uid(existing).unwrap_or_default();
        if uid != actual {
            return Err(StatusError::conflict(
                TIERS,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                ),
            ));
        }
    }
    if let Some(rv) = &preconditions.resource_version {
        let actual = object_rv(existing).unwrap_or_default();
        if rv != actual {
            return Err(StatusError::conflict(
                TIERS,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
                ),
            ));
        }
    }
    Ok(())
}

/// Copies server-managed metadata from the stored object and sets `generation`.
fn carry_system_fields(existing: &Value, obj: &mut Value) {
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), json!(API_VERSION));
        map.insert("kind".into(), json!(KIND));
    }
    let spec_changed = without_metadata(existing) != without_metadata(obj);
    let Some(meta) = metadata_mut(obj) else {
        return;
    };
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
    ] {
        match existing.pointer(&format!("/metadata/{field}")) {
            Some(value) => meta.insert(field.into(), value.clone()),
            None => meta.remove(field),
        };
    }
    meta.remove("namespace");
    meta.remove("selfLink");
    let generation = existing
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    meta.insert(
        "generation".into(),
        json!(if spec_changed {
            generation + 1
        } else {
            generation
        }),
    );
}

fn without_metadata(obj: &Value) -> Map<String, Value> {
    let mut map = obj.as_object().cloned().unwrap_or_default();
    map.remove("metadata");
    map
}

fn without_rv(obj: &Value) -> Value {
    let mut copy = obj.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    copy
}

/// Whether `obj` still lists finalizers (its deletion then waits for them).
fn has_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::tier;

    fn rv(obj: &Value) -> u64 {
        object_rv(obj).and_then(parse_rv).unwrap()
    }

    #[test]
    fn create_update_delete_bump_the_resource_version() {
        let store = Store::new(100);
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
        let store = Store::new(100);
        let created = store.create(tier("a", 1, None)).unwrap();
        let same = store.update(created.clone()).unwrap();
        assert_eq!(same, created);
        assert_eq!(store.resource_version(), rv(&created));
    }

    #[test]
    fn stale_update_conflicts_and_duplicate_create_already_exists() {
        let store = Store::new(100);
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
        let store = Store::new(100);
        store.create(tier("a", 1, None)).unwrap();
        store.create(tier("b", 2, None)).unwrap();
        let at = store.resource_version();
        store
            .modify("a", |t| t["spec"]["priority"] = json!(5))
            .unwrap();
        store.delete("b").unwrap();
        store.create(tier("c", 3, None)).unwrap();
        let (rv_at, items) = store.snapshot(Some(at)).unwrap();
        assert_eq!(rv_at, at);
        let names: Vec<_> = items.iter().map(|i| object_name(i).unwrap()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(items[0]["spec"]["priority"], 1);
        store.compact();
        assert_eq!(store.snapshot(Some(at)).unwrap_err().code, 410);
    }

    #[test]
    fn history_window_expires_old_watches() {
        let store = Store::new(2);
        let start = store.resource_version();
        for i in 0..4 {
            store.create(tier(&format!("t{i}"), i, None)).unwrap();
        }
        let err = store.subscribe(Some(start), false).err().unwrap();
        assert_eq!(err.reason, "Expired");
        let sub = store.subscribe(Some(start + 2), false).unwrap();
        assert_eq!(sub.initial.len(), 2);
        let sub = store.subscribe(None, false).unwrap();
        assert_eq!(sub.initial.len(), 4);
        assert!(sub.initial.iter().all(|c| c.kind == ChangeType::Added));
    }

    #[test]
    fn finalizers_delay_deletion() {
        let store = Store::new(100);
        let mut obj = tier("a", 1, None);
        obj["metadata"]["finalizers"] = json!(["x"]);
        store.create(obj).unwrap();
        let (obj, gone) = store
            .commit_delete("a", &Preconditions::default(), false)
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
        let store = Store::new(100);
        store.create(tier("a", 1, None)).unwrap();
        let pre = Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        };
        let err = store.commit_delete("a", &pre, false).unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message
                .contains("Precondition failed: UID in precondition: nope")
        );
    }

    #[test]
    fn put_raw_skips_validation() {
        let store = Store::new(100);
        let obj = store
            .put_raw(json!({"metadata": {"name": "Weird"}, "spec": {"priority": 999}}))
            .unwrap();
        assert!(object_rv(&obj).is_some());
        assert_eq!(store.get("Weird").unwrap()["spec"]["priority"], 999);
    }

    #[test]
    fn events_are_recorded_and_patched() {
        let store = Store::new(100);
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
