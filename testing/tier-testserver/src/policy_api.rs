//! The endpoints of Antrea's policy resources ([`policies`](crate::policies)): list (all
//! namespaces, or one; paged with `limit`/`continue`), watch, get, create and delete.

use std::sync::Arc;

use http::Response;
use serde_json::{Value, json};

use crate::context::{ApiRequest, Shared};
use crate::faults::Verb;
use crate::paging::{decode_continue, encode_continue};
use crate::policies::{Key, Policies, PolicyFeed, PolicyResource};
use crate::reply::{self, ResponseBody};
use crate::status::StatusError;
use crate::tier::API_VERSION;
use crate::util::metadata_mut;
use crate::watch;

/// Serves one policy verb. `namespace` is the path's (`None`: all namespaces, or a
/// cluster-scoped resource).
pub(crate) fn serve(
    shared: &Arc<Shared>,
    resource: PolicyResource,
    verb: Verb,
    namespace: Option<&str>,
    name: Option<&str>,
    request: &ApiRequest<'_>,
) -> Response<ResponseBody> {
    let policies = shared.store.policies();
    let result = match (verb, name) {
        (Verb::List, _) => list(&policies, resource, namespace, request),
        (Verb::Watch, _) => {
            let feed = Arc::new(PolicyFeed {
                policies: policies.clone(),
                resource,
            });
            let scope = watch::Scope {
                name: None,
                namespace: namespace.map(str::to_owned),
            };
            watch::start(shared, request, scope, feed)
        }
        (Verb::Get, Some(name)) => policies
            .get(resource, &key(namespace, name))
            .map(|obj| reply::json(200, &obj)),
        (Verb::Create, _) => create(&policies, resource, namespace, request),
        (Verb::Delete, Some(name)) => policies
            .delete(resource, namespace, name)
            .map(|obj| reply::json(200, &obj)),
        _ => Err(StatusError::method_not_allowed("on Antrea policies")),
    };
    result.unwrap_or_else(|error| reply::status(&error))
}

fn key(namespace: Option<&str>, name: &str) -> Key {
    (namespace.unwrap_or_default().to_owned(), name.to_owned())
}

fn create(
    policies: &Policies,
    resource: PolicyResource,
    namespace: Option<&str>,
    request: &ApiRequest<'_>,
) -> Result<Response<ResponseBody>, StatusError> {
    let mut obj: Value = serde_json::from_slice(&request.body).map_err(|e| {
        StatusError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    if let (Some(namespace), Some(meta)) = (namespace, metadata_mut(&mut obj)) {
        meta.insert("namespace".into(), json!(namespace));
    }
    policies
        .create(resource, obj)
        .map(|obj| reply::json(201, &obj))
}

fn list(
    policies: &Policies,
    resource: PolicyResource,
    namespace: Option<&str>,
    request: &ApiRequest<'_>,
) -> Result<Response<ResponseBody>, StatusError> {
    let limit = request
        .param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let after = match request.param("continue").filter(|c| !c.is_empty()) {
        Some(token) => Some(decode_continue(token)?.1),
        None => None,
    };
    let (rv, items) = policies.snapshot(resource, namespace)?;
    let items: Vec<(String, Value)> = items
        .into_iter()
        .filter(|(k, _)| after.as_deref().is_none_or(|start| k.as_str() > start))
        .collect();
    let total = items.len();
    let take = limit.unwrap_or(total).min(total);
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if take < total {
        let last = items
            .get(take.saturating_sub(1))
            .map_or("", |(k, _)| k.as_str());
        metadata["continue"] = json!(encode_continue(rv, last));
        metadata["remainingItemCount"] = json!(total - take);
    }
    let page: Vec<Value> = items.into_iter().take(take).map(|(_, o)| o).collect();
    Ok(reply::json(
        200,
        &json!({
            "apiVersion": API_VERSION,
            "kind": format!("{}List", resource.kind()),
            "metadata": metadata,
            "items": page,
        }),
    ))
}
