//! One stored Tier resource (Antrea's or Calico's): its objects by name, its retained change
//! history, whether its CRD is installed, and the storage rules kube-apiserver applies to a
//! custom resource: server-managed metadata, `generation`, no-op updates, optimistic
//! concurrency, DeleteOptions preconditions and finalizers.
//!
//! A table does not own the resourceVersion: the store passes its global counter in, so every
//! write of every resource takes the next one, as etcd's revision does.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::config::Limits;
use crate::crd::Schema;
use crate::history::{Change, ChangeType, Subscription, added};
use crate::status::{ResourceName, StatusError};
use crate::util::{
    check_size, metadata_mut, new_uid, now_rfc3339, object_name, object_rv, object_uid, parse_rv,
};

/// Capacity of the channel feeding a table's open watches; a watch that falls this far behind
/// is closed.
const WATCH_CHANNEL_CAPACITY: usize = 4096;

/// DeleteOptions preconditions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Preconditions {
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
}

/// One Tier resource's storage.
pub(crate) struct Table {
    schema: Arc<dyn Schema>,
    objects: BTreeMap<String, Value>,
    history: VecDeque<Arc<Change>>,
    /// How many changes `history` keeps.
    window: usize,
    /// Every change with `rv > floor` is in `history`.
    floor: u64,
    changes: broadcast::Sender<Arc<Change>>,
    installed: bool,
    /// Most objects, largest object.
    limits: Limits,
}

impl Table {
    /// An empty table of `schema` retaining the last `window` changes, within `limits`.
    pub(crate) fn new(
        schema: Arc<dyn Schema>,
        window: usize,
        limits: Limits,
        installed: bool,
    ) -> Self {
        Self {
            schema,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            window: window.max(1),
            floor: 0,
            changes: broadcast::channel(WATCH_CHANNEL_CAPACITY).0,
            installed,
            limits,
        }
    }

    /// The resource's schema.
    pub(crate) fn schema(&self) -> &dyn Schema {
        self.schema.as_ref()
    }

    /// The resource as named in Status messages.
    pub(crate) fn resource(&self) -> ResourceName {
        self.schema.resource()
    }

    /// Whether the CRD is installed.
    pub(crate) fn installed(&self) -> bool {
        self.installed
    }

    /// Installs the CRD (idempotent); a new one starts empty.
    pub(crate) fn install(&mut self) {
        self.installed = true;
    }

    /// Uninstalls the CRD: every object is deleted (open watches see DELETED); requests then
    /// answer 404 until [`install`](Self::install).
    pub(crate) fn uninstall(&mut self, rv: &mut u64) {
        let names: Vec<String> = self.objects.keys().cloned().collect();
        for name in names {
            let _ = self.remove(rv, &name);
        }
        self.installed = false;
    }

    /// 404 NotFound for `name`.
    pub(crate) fn not_found(&self, name: &str) -> StatusError {
        StatusError::not_found(self.resource(), name)
    }

    /// The stored object `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Value> {
        self.objects.get(name)
    }

    /// Every stored object, by name.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Value> {
        self.objects.values()
    }

    /// Sets `apiVersion` and `kind` when missing.
    pub(crate) fn fill_type_meta(&self, obj: &mut Value) {
        if let Some(map) = obj.as_object_mut() {
            map.entry("apiVersion")
                .or_insert_with(|| json!(self.schema.api_version()));
            map.entry("kind")
                .or_insert_with(|| json!(self.schema.resource().kind));
        }
    }

    /// Stores a validated, admitted new object (fills uid, creationTimestamp, generation,
    /// resourceVersion). 500 when the body carries a resourceVersion, 409 AlreadyExists when
    /// the name is taken. A dry run returns the object without storing it.
    pub(crate) fn create(
        &mut self,
        rv: &mut u64,
        mut obj: Value,
        dry_run: bool,
    ) -> Result<Value, StatusError> {
        if object_rv(&obj).is_some() {
            return Err(StatusError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = object_name(&obj).unwrap_or_default().to_owned();
        if self.objects.contains_key(&name) {
            return Err(StatusError::already_exists(self.resource(), &name));
        }
        self.check_room()?;
        let next = *rv + 1;
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("uid".into(), json!(new_uid()));
            meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
            meta.insert("generation".into(), json!(1));
            meta.remove("deletionTimestamp");
            meta.remove("deletionGracePeriodSeconds");
            meta.remove("namespace");
            meta.remove("selfLink");
            if !dry_run {
                meta.insert("resourceVersion".into(), json!(next.to_string()));
            }
        }
        check_size(&obj, self.limits.max_object_bytes)?;
        if dry_run {
            return Ok(obj);
        }
        *rv = next;
        self.objects.insert(name, obj.clone());
        self.push(*rv, ChangeType::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Stores a validated, admitted replacement of `name`.
    ///
    /// `expected_rv` (when set) must still be the stored resourceVersion (409 Conflict
    /// otherwise). Server-managed metadata is carried over; `generation` goes up when anything
    /// outside `metadata` changed. A write that changes nothing is a no-op (no new
    /// resourceVersion, no event), as in kube-apiserver. Removing the last finalizer of an
    /// object being deleted deletes it.
    pub(crate) fn update(
        &mut self,
        rv: &mut u64,
        name: &str,
        mut obj: Value,
        expected_rv: Option<u64>,
        dry_run: bool,
    ) -> Result<Value, StatusError> {
        let Some(existing) = self.objects.get(name).cloned() else {
            return Err(self.not_found(name));
        };
        if let Some(expected) = expected_rv
            && object_rv(&existing).and_then(parse_rv) != Some(expected)
        {
            return Err(StatusError::stale(self.resource(), name));
        }
        self.carry_system_fields(&existing, &mut obj);
        if without_rv(&obj) == without_rv(&existing) {
            return Ok(existing);
        }
        check_size(&obj, self.limits.max_object_bytes)?;
        if dry_run {
            return Ok(obj);
        }
        let deleting = existing.pointer("/metadata/deletionTimestamp").is_some();
        if deleting && !has_finalizers(&obj) {
            self.objects.remove(name);
            return Ok(self.record_delete(rv, obj));
        }
        *rv += 1;
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        self.objects.insert(name.to_owned(), obj.clone());
        self.push(*rv, ChangeType::Modified, obj.clone(), Some(existing));
        Ok(obj)
    }

    /// Deletes `name` after checking `preconditions` (409 Conflict).
    ///
    /// Returns the object and whether it is gone: an object with finalizers only gets a
    /// `deletionTimestamp` (kube-apiserver then answers 202).
    pub(crate) fn delete(
        &mut self,
        rv: &mut u64,
        name: &str,
        preconditions: &Preconditions,
        dry_run: bool,
    ) -> Result<(Value, bool), StatusError> {
        let Some(existing) = self.objects.get(name).cloned() else {
            return Err(self.not_found(name));
        };
        check_preconditions(self.resource(), &existing, preconditions, name)?;
        let finalizers = has_finalizers(&existing);
        if dry_run {
            return Ok((existing, !finalizers));
        }
        if !finalizers {
            self.objects.remove(name);
            return Ok((self.record_delete(rv, existing), true));
        }
        if existing.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok((existing, false));
        }
        let mut obj = existing.clone();
        *rv += 1;
        if let Some(meta) = metadata_mut(&mut obj) {
            let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
            meta.insert("generation".into(), json!(generation.saturating_add(1)));
            meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        self.objects.insert(name.to_owned(), obj.clone());
        self.push(*rv, ChangeType::Modified, obj.clone(), Some(existing));
        Ok((obj, false))
    }

    /// Deletes `name` now (finalizers ignored); returns the deleted object.
    pub(crate) fn remove(&mut self, rv: &mut u64, name: &str) -> Result<Value, StatusError> {
        let Some(existing) = self.objects.remove(name) else {
            return Err(self.not_found(name));
        };
        Ok(self.record_delete(rv, existing))
    }

    /// Writes `obj` as is (no validation, no pruning); sets `metadata.resourceVersion` (and
    /// `uid`/`creationTimestamp` when missing) and emits ADDED or MODIFIED. Only
    /// `metadata.name` is required (400 BadRequest otherwise).
    pub(crate) fn put_raw(&mut self, rv: &mut u64, mut obj: Value) -> Result<Value, StatusError> {
        let name = object_name(&obj)
            .ok_or_else(|| StatusError::bad_request("put_raw needs metadata.name"))?
            .to_owned();
        let old = self.objects.get(&name).cloned();
        if old.is_none() {
            self.check_room()?;
        }
        check_size(&obj, self.limits.max_object_bytes)?;
        *rv += 1;
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
            meta.entry("uid").or_insert_with(|| json!(new_uid()));
            meta.entry("creationTimestamp")
                .or_insert_with(|| json!(now_rfc3339()));
        }
        self.objects.insert(name, obj.clone());
        let kind = if old.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.push(*rv, kind, obj.clone(), old);
        Ok(obj)
    }

    /// Forgets the retained history: watches and continue tokens older than `rv` get 410.
    pub(crate) fn compact(&mut self, rv: u64) {
        self.history.clear();
        self.floor = rv;
    }

    /// Every object at resourceVersion `at` (`None`: now, `rv`) and that resourceVersion.
    ///
    /// Rebuilt from the retained history by undoing later changes; 410 Expired when `at` is
    /// older than the history.
    pub(crate) fn snapshot(
        &self,
        rv: u64,
        at: Option<u64>,
    ) -> Result<(u64, Vec<Value>), StatusError> {
        let at = match at {
            Some(at) if at < rv => at,
            _ => return Ok((rv, self.objects.values().cloned().collect())),
        };
        if at < self.floor {
            return Err(too_old(at, self.floor));
        }
        let mut objects = self.objects.clone();
        for change in self.history.iter().rev().take_while(|c| c.rv > at) {
            let name = object_name(&change.object).unwrap_or_default().to_owned();
            match &change.old {
                Some(old) => objects.insert(name, old.clone()),
                None => objects.remove(&name),
            };
        }
        Ok((at, objects.into_values().collect()))
    }

    /// Starts a watch at store resourceVersion `rv`. `from: None` (resourceVersion unset or
    /// "0") and `initial_state` (`sendInitialEvents`) begin with synthetic ADDED events for
    /// every object; otherwise the retained changes after `from` are replayed (410 Expired
    /// when they are gone).
    pub(crate) fn subscribe(
        &self,
        rv: u64,
        from: Option<u64>,
        initial_state: bool,
    ) -> Result<Subscription, StatusError> {
        let receiver = self.changes.subscribe();
        let initial = match from {
            Some(from) if !initial_state => {
                if from < self.floor {
                    return Err(too_old(from, self.floor));
                }
                self.history
                    .iter()
                    .filter(|c| c.rv > from)
                    .cloned()
                    .collect()
            }
            _ => added(self.objects.values(), rv),
        };
        Ok(Subscription {
            initial,
            receiver,
            rv,
        })
    }

    /// 500 when one more object would exceed the bound.
    fn check_room(&self) -> Result<(), StatusError> {
        if self.objects.len() >= self.limits.max_objects {
            Err(StatusError::full(self.resource(), self.limits.max_objects))
        } else {
            Ok(())
        }
    }

    fn record_delete(&mut self, rv: &mut u64, mut obj: Value) -> Value {
        *rv += 1;
        let old = obj.clone();
        if let Some(meta) = metadata_mut(&mut obj) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        self.push(*rv, ChangeType::Deleted, obj.clone(), Some(old));
        obj
    }

    fn push(&mut self, rv: u64, kind: ChangeType, object: Value, old: Option<Value>) {
        let change = Arc::new(Change {
            rv,
            kind,
            object,
            old,
        });
        self.history.push_back(Arc::clone(&change));
        while self.history.len() > self.window {
            if let Some(evicted) = self.history.pop_front() {
                self.floor = evicted.rv;
            }
        }
        // No open watch is not an error.
        let _ = self.changes.send(change);
    }

    /// Copies server-managed metadata from the stored object and sets `generation`.
    fn carry_system_fields(&self, existing: &Value, obj: &mut Value) {
        if let Some(map) = obj.as_object_mut() {
            map.insert("apiVersion".into(), json!(self.schema.api_version()));
            map.insert("kind".into(), json!(self.schema.resource().kind));
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
                generation.saturating_add(1)
            } else {
                generation
            }),
        );
    }
}

fn too_old(requested: u64, floor: u64) -> StatusError {
    StatusError::expired(format!(
        "too old resource version: {requested} ({})",
        floor.saturating_add(1)
    ))
}

/// Checks DeleteOptions preconditions against the stored object (409 Conflict).
pub(crate) fn check_preconditions(
    resource: ResourceName,
    existing: &Value,
    preconditions: &Preconditions,
    name: &str,
) -> Result<(), StatusError> {
    if let Some(uid) = &preconditions.uid {
        let actual = object_uid(existing).unwrap_or_default();
        if uid != actual {
            return Err(StatusError::conflict(
                resource,
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
                resource,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
                ),
            ));
        }
    }
    Ok(())
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
