//! The Events endpoints (`v1` and `events.k8s.io/v1`): create, merge patch (strategic merge
//! patches are applied as merge patches), get and list, enough for kube-runtime's `Recorder`.
//! Events are stored for tests to read.

use http::Response;
use serde_json::{Value, json};

use crate::faults::Verb;
use crate::reply::{self, ResponseBody};
use crate::status::StatusError;
use crate::store::{EventsApi, Store};

/// Serves one Events request; failures become Status responses.
pub(crate) fn serve(
    store: &Store,
    verb: Verb,
    api: EventsApi,
    namespace: &str,
    name: Option<&str>,
    content_type: &str,
    body: &[u8],
) -> Response<ResponseBody> {
    let result = match (verb, name) {
        (Verb::Create, _) => create(store, api, namespace, content_type, body),
        (Verb::Patch, Some(name)) => patch(store, api, namespace, name, content_type, body),
        (Verb::Get, Some(name)) => store
            .get_event(api, namespace, name)
            .map(|event| reply::json(200, &event))
            .ok_or_else(|| StatusError::not_found(api.resource(), name)),
        (Verb::List, _) => {
            let (rv, items) = store.list_events(api, namespace);
            Ok(reply::json(
                200,
                &json!({
                    "apiVersion": api.api_version(),
                    "kind": "EventList",
                    "metadata": {"resourceVersion": rv.to_string()},
                    "items": items,
                }),
            ))
        }
        _ => Err(StatusError::method_not_allowed(verb.as_str())),
    };
    result.unwrap_or_else(|error| reply::status(&error))
}

fn decode(body: &[u8]) -> Result<Value, StatusError> {
    serde_json::from_slice(body)
        .map_err(|e| StatusError::bad_request(format!("couldn't decode the Event: {e}")))
}

fn create(
    store: &Store,
    api: EventsApi,
    namespace: &str,
    content_type: &str,
    body: &[u8],
) -> Result<Response<ResponseBody>, StatusError> {
    if content_type != "application/json" {
        return Err(StatusError::unsupported_media_type(
            content_type,
            &["application/json"],
        ));
    }
    let event = store.create_event(api, namespace, decode(body)?)?;
    Ok(reply::json(201, &event))
}

fn patch(
    store: &Store,
    api: EventsApi,
    namespace: &str,
    name: &str,
    content_type: &str,
    body: &[u8],
) -> Result<Response<ResponseBody>, StatusError> {
    let doc = decode(body)?;
    let merge = match content_type {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => doc,
        other => {
            return Err(StatusError::unsupported_media_type(
                other,
                &[
                    "application/merge-patch+json",
                    "application/strategic-merge-patch+json",
                ],
            ));
        }
    };
    let event = store.patch_event(api, namespace, name, &merge)?;
    Ok(reply::json(200, &event))
}
