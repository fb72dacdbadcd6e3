//! The endpoints of the plain objects beside Tiers and Events ([`objects`](crate::objects)):
//! core/v1 Secrets (namespaced) and `admissionregistration.k8s.io/v1`
//! ValidatingWebhookConfigurations (cluster-scoped).
//!
//! GET (one or a list), POST (409 AlreadyExists when the name is taken: create-if-absent works
//! as in kube-apiserver), PUT (404 NotFound when missing; 409 Conflict on a stale
//! `metadata.resourceVersion`, unconditional without one), merge PATCH and DELETE. No watch, no
//! schema validation. Faults that answer before serving (a Status, a drop, a hang, a delay)
//! apply by verb and name as for Tiers. Objects share the store's resourceVersion counter and metadata rules
//! (uid, creationTimestamp, resourceVersion set by the server), and tests read and seed them
//! through [`Store::object`], [`Store::objects`] and [`Store::put_object`].

use http::Response;
use serde_json::{Value, json};

use crate::faults::Verb;
use crate::objects::{ObjectKind, key, stamp};
use crate::reply::{self, ResponseBody};
use crate::status::{Cause, StatusError};
use crate::store::Store;
use crate::util::{check_size, object_name, object_rv, parse_rv};

/// A request for one kind of plain object.
pub(crate) struct ObjectRequest<'a> {
    pub(crate) kind: ObjectKind,
    pub(crate) namespace: &'a str,
    pub(crate) name: Option<&'a str>,
    pub(crate) content_type: &'a str,
    pub(crate) body: &'a [u8],
}

/// Serves one request; failures become Status responses.
pub(crate) fn serve(
    store: &Store,
    verb: Verb,
    request: &ObjectRequest<'_>,
) -> Response<ResponseBody> {
    let result = match (verb, request.name) {
        (Verb::Get, Some(name)) => store
            .object(request.kind, request.namespace, name)
            .map(|obj| reply::json(200, &obj))
            .ok_or_else(|| StatusError::not_found(request.kind.resource(), name)),
        (Verb::List, None) => Ok(list(store, request)),
        (Verb::Create, None) => write(store, request, None).map(|obj| reply::json(201, &obj)),
        (Verb::Update, Some(name)) => {
            write(store, request, Some(name)).map(|obj| reply::json(200, &obj))
        }
        (Verb::Patch, Some(name)) => patch(store, request, name).map(|obj| reply::json(200, &obj)),
        (Verb::Delete, Some(name)) => {
            delete(store, request, name).map(|obj| reply::json(200, &obj))
        }
        _ => Err(StatusError::method_not_allowed(&format!("{verb:?}"))),
    };
    result.unwrap_or_else(|error| reply::status(&error))
}

fn list(store: &Store, request: &ObjectRequest<'_>) -> Response<ResponseBody> {
    let kind = request.kind;
    let (rv, items) = store.with_objects(|rv, objects| {
        let items: Vec<Value> = objects
            .iter()
            .filter(|((k, ns, _), _)| {
                *k == kind && (!kind.namespaced() || ns.as_str() == request.namespace)
            })
            .map(|(_, v)| v.clone())
            .collect();
        (*rv, items)
    });
    reply::json(
        200,
        &json!({
            "apiVersion": kind.api_version(),
            "kind": format!("{}List", kind.resource().kind),
            "metadata": {"resourceVersion": rv.to_string()},
            "items": items,
        }),
    )
}

fn decode(request: &ObjectRequest<'_>) -> Result<Value, StatusError> {
    let value: Value = serde_json::from_slice(request.body).map_err(|e| {
        StatusError::bad_request(format!(
            "couldn't decode the {}: {e}",
            request.kind.resource().kind
        ))
    })?;
    if !value.is_object() {
        return Err(StatusError::bad_request("the body must be a JSON object"));
    }
    let body_ns = value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty());
    if request.kind.namespaced() && body_ns.is_some_and(|ns| ns != request.namespace) {
        return Err(StatusError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(value)
}

/// POST (`name` None) or PUT.
fn write(
    store: &Store,
    request: &ObjectRequest<'_>,
    name: Option<&str>,
) -> Result<Value, StatusError> {
    if request.content_type != "application/json" {
        return Err(StatusError::unsupported_media_type(
            request.content_type,
            &["application/json"],
        ));
    }
    let obj = decode(request)?;
    let resource = request.kind.resource();
    let body_name = object_name(&obj).unwrap_or_default().to_owned();
    let name = match name {
        Some(name) if body_name != name => {
            return Err(StatusError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        Some(name) => name.to_owned(),
        None if body_name.is_empty() => {
            return Err(StatusError::invalid(
                resource.group,
                resource.kind,
                "",
                &[Cause::new(
                    "FieldValueRequired",
                    "Required value: name or generateName is required",
                    "metadata.name",
                )],
            ));
        }
        None => body_name,
    };
    let updating = request.name.is_some();
    let expected = object_rv(&obj).map(str::to_owned);
    let key = key(request.kind, request.namespace, &name);
    let limits = store.limits();
    let max_objects = limits.max_objects;
    store.with_objects(|rv, objects| {
        let existing = objects.get(&key).cloned();
        match (&existing, updating) {
            (Some(_), false) => return Err(StatusError::already_exists(resource, &name)),
            (None, false)
                if objects.keys().filter(|(k, _, _)| *k == request.kind).count()
                    >= max_objects =>
            {
                return Err(StatusError::full(resource, max_objects));
            }
            (None, true) => return Err(StatusError::not_found(resource, &name)),
            (None, false) if expected.is_some() => {
                return Err(StatusError::internal(
                    "resourceVersion should not be set on objects to be created",
                ));
            }
            _ => {}
        }
        if let (Some(existing), Some(expected)) = (&existing, &expected) {
            let current = object_rv(existing).and_then(parse_rv);
            if parse_rv(expected).is_none() || current != parse_rv(expected) {
                return Err(StatusError::conflict(
                    resource,
                    &name,
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
        }
        check_size(&obj, limits.max_object_bytes)?;
        let stored = stamp(request.kind, &key, obj, existing.as_ref(), rv);
        objects.insert(key, stored.clone());
        Ok(stored)
    })
}

fn patch(store: &Store, request: &ObjectRequest<'_>, name: &str) -> Result<Value, StatusError> {
    if request.content_type != "application/merge-patch+json" {
        return Err(StatusError::unsupported_media_type(
            request.content_type,
            &["application/merge-patch+json"],
        ));
    }
    let doc = decode(request)?;
    let key = key(request.kind, request.namespace, name);
    let limit = store.limits().max_object_bytes;
    store.with_objects(|rv, objects| {
        let existing = objects
            .get(&key)
            .cloned()
            .ok_or_else(|| StatusError::not_found(request.kind.resource(), name))?;
        let mut patched = existing.clone();
        crate::patch::merge_patch(&mut patched, &doc);
        check_size(&patched, limit)?;
        let stored = stamp(request.kind, &key, patched, Some(&existing), rv);
        objects.insert(key, stored.clone());
        Ok(stored)
    })
}

fn delete(store: &Store, request: &ObjectRequest<'_>, name: &str) -> Result<Value, StatusError> {
    let key = key(request.kind, request.namespace, name);
    store.with_objects(|rv, objects| {
        let removed = objects
            .remove(&key)
            .ok_or_else(|| StatusError::not_found(request.kind.resource(), name))?;
        *rv += 1;
        Ok(removed)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn request<'a>(kind: ObjectKind, name: Option<&'a str>, body: &'a [u8]) -> ObjectRequest<'a> {
        ObjectRequest {
            kind,
            namespace: "ns",
            name,
            content_type: "application/json",
            body,
        }
    }

    #[test]
    fn create_is_create_if_absent_and_update_is_optimistic() {
        let store = Store::new(&crate::config::ServerConfig::default());
        let body = json!({"metadata": {"name": "s"}, "data": {"a": "YQ=="}}).to_string();
        let kind = ObjectKind::Secret;
        let created = write(&store, &request(kind, None, body.as_bytes()), None).unwrap();
        assert_eq!(created["metadata"]["namespace"], "ns");
        let again = write(&store, &request(kind, None, body.as_bytes()), None).unwrap_err();
        assert_eq!(again.code, 409);
        assert_eq!(again.reason, "AlreadyExists");

        let mut stale = created.clone();
        stale["metadata"]["resourceVersion"] = json!("1");
        let stale = stale.to_string();
        let conflict = write(
            &store,
            &request(kind, Some("s"), stale.as_bytes()),
            Some("s"),
        )
        .unwrap_err();
        assert_eq!(conflict.reason, "Conflict");

        let mut fresh = created.clone();
        fresh["data"]["a"] = json!("Yg==");
        let fresh = fresh.to_string();
        let updated = write(
            &store,
            &request(kind, Some("s"), fresh.as_bytes()),
            Some("s"),
        )
        .unwrap();
        assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
        assert_ne!(
            updated["metadata"]["resourceVersion"],
            created["metadata"]["resourceVersion"]
        );
        assert_eq!(store.object(kind, "ns", "s").unwrap()["data"]["a"], "Yg==");
        assert_eq!(store.object(kind, "other", "s"), None);
    }

    #[test]
    fn cluster_scoped_objects_ignore_the_namespace() {
        let store = Store::new(&crate::config::ServerConfig::default());
        let kind = ObjectKind::ValidatingWebhookConfiguration;
        store
            .put_object(kind, "whatever", json!({"metadata": {"name": "w"}}))
            .unwrap();
        let stored = store.object(kind, "", "w").unwrap();
        assert!(stored["metadata"]["namespace"].is_null());
        assert_eq!(stored["kind"], "ValidatingWebhookConfiguration");
        assert_eq!(store.objects(kind).len(), 1);
    }
}
