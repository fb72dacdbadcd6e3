//! The Tier verbs (list, get, create, update, patch, delete; watch lives in `watch`) for
//! every Tier resource ([`TierApi`]: Antrea's, Calico's), each in kube-apiserver's order of
//! checks: the CRD installed, decoding, preconditions, schema validation, admission, storage.

use std::sync::Arc;

use http::Response;
use serde_json::{Value, json};

use crate::admission::AdmissionInput;
use crate::antrea::Operation;
use crate::context::{ApiRequest, Shared, refuse_selectors};
use crate::faults::Verb;
use crate::paging::{decode_continue, encode_continue};
use crate::patch;
use crate::reply::{self, ResponseBody};
use crate::status::{Cause, ResourceName, StatusError};
use crate::store::{TableFeed, TableId};
use crate::table::{Preconditions, check_preconditions};
use crate::tier_api::TierApi;
use crate::util::{metadata_mut, object_name, object_rv, object_uid, parse_rv, random_suffix};
use crate::watch;

/// Serves one verb on `api`'s Tiers; failures become Status responses.
pub(crate) async fn serve(
    shared: &Arc<Shared>,
    api: &impl TierApi,
    verb: Verb,
    name: Option<&str>,
    request: &ApiRequest<'_>,
) -> Response<ResponseBody> {
    let result = match installed(shared, api.table()) {
        Err(error) => Err(error),
        Ok(()) => match (verb, name) {
            (Verb::List, _) => list(shared, api, request),
            (Verb::Watch, name) => watch::start(
                shared,
                request,
                watch::Scope {
                    name: name.map(str::to_owned),
                    namespace: None,
                },
                Arc::new(TableFeed::new(&shared.store, api.table())),
            ),
            (Verb::Create, _) => create(shared, api, request).await,
            (Verb::Get, Some(name)) => get(shared, api, name).map(|obj| reply::json(200, &obj)),
            (Verb::Update, Some(name)) => update(shared, api, name, request).await,
            (Verb::Patch, Some(name)) => patch(shared, api, name, request).await,
            (Verb::Delete, Some(name)) => delete(shared, api, name, request).await,
            (_, None) => Err(StatusError::method_not_allowed("without a name")),
        },
    };
    result.unwrap_or_else(|error| reply::status(&error))
}

/// 404, as for any path the server does not serve, when the table's CRD is not installed.
fn installed(shared: &Shared, table: TableId) -> Result<(), StatusError> {
    shared.store.with_table(table, |_, _| Ok(()))
}

/// The stored object `name` (404 NotFound).
fn get(shared: &Shared, api: &impl TierApi, name: &str) -> Result<Value, StatusError> {
    shared.store.with_table(api.table(), |_, table| {
        table
            .get(name)
            .cloned()
            .ok_or_else(|| table.not_found(name))
    })
}

fn list(
    shared: &Shared,
    api: &impl TierApi,
    request: &ApiRequest<'_>,
) -> Result<Response<ResponseBody>, StatusError> {
    refuse_selectors(request)?;
    let limit = match request.param("limit") {
        None | Some("") => None,
        Some(text) => Some(
            text.parse::<i64>()
                .map_err(|_| StatusError::bad_request(format!("limit: invalid value {text:?}")))?,
        ),
    }
    .and_then(|l| usize::try_from(l).ok())
    .filter(|l| *l > 0);
    let (rv, items, after) = match request.param("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let (rv, start) = decode_continue(token)?;
            let (rv, items) = snapshot(shared, api, Some(rv)).map_err(|_| {
                StatusError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
            })?;
            (rv, items, Some(start))
        }
        None => {
            let exact = request.param("resourceVersionMatch") == Some("Exact");
            let at = match request.param("resourceVersion") {
                Some(text) if exact && !text.is_empty() && text != "0" => {
                    Some(parse_rv(text).ok_or_else(|| {
                        StatusError::bad_request(format!("invalid resource version: {text}"))
                    })?)
                }
                _ => None,
            };
            let (rv, items) = snapshot(shared, api, at)?;
            (rv, items, None)
        }
    };
    let matching: Vec<Value> = items
        .into_iter()
        .filter(|obj| {
            after
                .as_deref()
                .is_none_or(|start| object_name(obj).unwrap_or_default() > start)
        })
        .collect();
    let total = matching.len();
    let page: Vec<Value> = match limit {
        Some(limit) => matching.into_iter().take(limit).collect(),
        None => matching,
    };
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if page.len() < total {
        let last = page.last().and_then(object_name).unwrap_or_default();
        metadata["continue"] = json!(encode_continue(rv, last));
        metadata["remainingItemCount"] = json!(total - page.len());
    }
    Ok(reply::json(
        200,
        &json!({
            "apiVersion": api.schema().api_version(),
            "kind": api.schema().list_kind(),
            "metadata": metadata,
            "items": page,
        }),
    ))
}

fn snapshot(
    shared: &Shared,
    api: &impl TierApi,
    at: Option<u64>,
) -> Result<(u64, Vec<Value>), StatusError> {
    shared
        .store
        .with_table(api.table(), |rv, table| table.snapshot(*rv, at))
}

const JSON_TYPES: &[&str] = &["application/json"];

fn require_json(request: &ApiRequest<'_>) -> Result<(), StatusError> {
    if request.content_type == "application/json" {
        Ok(())
    } else {
        Err(StatusError::unsupported_media_type(
            &request.content_type,
            JSON_TYPES,
        ))
    }
}

fn decode(body: &[u8]) -> Result<Value, StatusError> {
    serde_json::from_slice(body).map_err(|e| {
        StatusError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

async fn create(
    shared: &Shared,
    api: &impl TierApi,
    request: &ApiRequest<'_>,
) -> Result<Response<ResponseBody>, StatusError> {
    require_json(request)?;
    let mut obj = decode(&request.body)?;
    api.schema().check_type(&obj)?;
    if object_name(&obj).is_none()
        && let Some(prefix) = obj
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
        && let Some(meta) = metadata_mut(&mut obj)
    {
        meta.insert(
            "name".into(),
            json!(format!("{prefix}{}", random_suffix(5))),
        );
    }
    api.schema().prepare(&mut obj, None)?;
    let name = object_name(&obj).unwrap_or_default().to_owned();
    let dry_run = request.dry_run();
    api.review(
        shared,
        AdmissionInput {
            operation: Operation::Create,
            name: &name,
            user: request.user,
            object: Some(&obj),
            old_object: None,
            dry_run,
            options_kind: "CreateOptions",
        },
    )
    .await?;
    let stored = shared
        .store
        .with_table(api.table(), |rv, table| table.create(rv, obj, dry_run))?;
    Ok(reply::json(201, &stored))
}

fn name_mismatch(body_name: &str, url_name: &str) -> StatusError {
    StatusError::bad_request(format!(
        "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
    ))
}

fn uid_mismatch(
    resource: ResourceName,
    obj: &Value,
    existing: &Value,
    name: &str,
) -> Result<(), StatusError> {
    match object_uid(obj) {
        Some(uid) if Some(uid) != object_uid(existing) => check_preconditions(
            resource,
            existing,
            &Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            },
            name,
        ),
        _ => Ok(()),
    }
}

async fn update(
    shared: &Shared,
    api: &impl TierApi,
    name: &str,
    request: &ApiRequest<'_>,
) -> Result<Response<ResponseBody>, StatusError> {
    require_json(request)?;
    let resource = api.schema().resource();
    let mut obj = decode(&request.body)?;
    api.schema().check_type(&obj)?;
    let body_name = object_name(&obj).unwrap_or_default();
    if body_name != name {
        return Err(name_mismatch(body_name, name));
    }
    let existing = get(shared, api, name)?;
    let Some(rv_text) = object_rv(&obj) else {
        return Err(StatusError::invalid(
            resource.group,
            resource.plural,
            name,
            &[Cause::new(
                "FieldValueInvalid",
                "Invalid value: 0x0: must be specified for an update",
                "metadata.resourceVersion",
            )],
        ));
    };
    let rv = parse_rv(rv_text)
        .ok_or_else(|| StatusError::bad_request(format!("invalid resource version: {rv_text}")))?;
    if object_rv(&existing).and_then(parse_rv) != Some(rv) {
        return Err(StatusError::stale(resource, name));
    }
    uid_mismatch(resource, &obj, &existing, name)?;
    api.schema().prepare(&mut obj, Some(&existing))?;
    let dry_run = request.dry_run();
    api.review(
        shared,
        AdmissionInput {
            operation: Operation::Update,
            name,
            user: request.user,
            object: Some(&obj),
            old_object: Some(&existing),
            dry_run,
            options_kind: "UpdateOptions",
        },
    )
    .await?;
    let stored = shared.store.with_table(api.table(), |store_rv, table| {
        table.update(store_rv, name, obj, Some(rv), dry_run)
    })?;
    Ok(reply::json(200, &stored))
}

/// How many times a patch without a resourceVersion is re-applied after a concurrent write.
const PATCH_ATTEMPTS: usize = 5;

async fn patch(
    shared: &Shared,
    api: &impl TierApi,
    name: &str,
    request: &ApiRequest<'_>,
) -> Result<Response<ResponseBody>, StatusError> {
    let resource = api.schema().resource();
    // JSON merge patch only: what kube clients (and the embedding example) send. JSON patch
    // and server-side apply are refused with 415, never answered wrongly.
    const ACCEPTED: &[&str] = &["application/merge-patch+json"];
    match request.content_type.as_str() {
        "application/merge-patch+json" => {}
        "application/apply-patch+yaml" => {
            return Err(StatusError::new(
                415,
                "UnsupportedMediaType",
                "server-side apply (application/apply-patch+yaml) is not emulated by tier-testserver",
            ));
        }
        other => return Err(StatusError::unsupported_media_type(other, ACCEPTED)),
    }
    let patch_doc = decode(&request.body)?;
    let pins_rv = patch_doc.pointer("/metadata/resourceVersion").is_some();
    let dry_run = request.dry_run();
    let mut last_conflict = StatusError::stale(resource, name);
    for _ in 0..PATCH_ATTEMPTS {
        let existing = get(shared, api, name)?;
        let existing_rv = object_rv(&existing).and_then(parse_rv);
        let mut patched = existing.clone();
        patch::merge_patch(&mut patched, &patch_doc);
        api.schema().check_type(&patched)?;
        let patched_name = object_name(&patched).unwrap_or_default();
        if patched_name != name {
            return Err(name_mismatch(patched_name, name));
        }
        uid_mismatch(resource, &patched, &existing, name)?;
        if pins_rv && object_rv(&patched).and_then(parse_rv) != existing_rv {
            return Err(StatusError::stale(resource, name));
        }
        api.schema().prepare(&mut patched, Some(&existing))?;
        api.review(
            shared,
            AdmissionInput {
                operation: Operation::Update,
                name,
                user: request.user,
                object: Some(&patched),
                old_object: Some(&existing),
                dry_run,
                options_kind: "PatchOptions",
            },
        )
        .await?;
        match shared.store.with_table(api.table(), |rv, table| {
            table.update(rv, name, patched, existing_rv, dry_run)
        }) {
            Ok(stored) => return Ok(reply::json(200, &stored)),
            Err(conflict) if conflict.reason == "Conflict" && !pins_rv => {
                last_conflict = conflict;
            }
            Err(other) => return Err(other),
        }
    }
    Err(last_conflict)
}

async fn delete(
    shared: &Shared,
    api: &impl TierApi,
    name: &str,
    request: &ApiRequest<'_>,
) -> Result<Response<ResponseBody>, StatusError> {
    let mut preconditions = Preconditions::default();
    let mut dry_run = request.dry_run();
    if !request.body.iter().all(u8::is_ascii_whitespace) {
        let options = decode(&request.body)?;
        if !options.is_object() {
            return Err(StatusError::bad_request(
                "DeleteOptions must be a JSON object",
            ));
        }
        let text = |pointer: &str| {
            options
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        preconditions.uid = text("/preconditions/uid");
        preconditions.resource_version = text("/preconditions/resourceVersion");
        dry_run |= options
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "All"));
    }
    let existing = get(shared, api, name)?;
    check_preconditions(api.schema().resource(), &existing, &preconditions, name)?;
    api.review(
        shared,
        AdmissionInput {
            operation: Operation::Delete,
            name,
            user: request.user,
            object: None,
            old_object: Some(&existing),
            dry_run,
            options_kind: "DeleteOptions",
        },
    )
    .await?;
    let (obj, gone) = shared.store.with_table(api.table(), |rv, table| {
        table.delete(rv, name, &preconditions, dry_run)
    })?;
    Ok(reply::json(if gone { 200 } else { 202 }, &obj))
}
