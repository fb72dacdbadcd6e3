//! Request dispatch: routing, bearer-token authentication, fault application and the
//! request log, in front of the Tier, Event and discovery handlers.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::discovery::Document;
use crate::events;
use crate::faults::{FaultAction, Verb};
use crate::log::{Endpoint, RequestRecord};
use crate::reply::{self, Outcome};
use crate::server::Shared;
use crate::status::StatusError;
use crate::store::EventsApi;
use crate::tiers::{self, TierRequest};
use crate::util::{object_name, parse_query};

/// Where a path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    /// The Tier collection (`name: None`) or one Tier.
    Tiers {
        name: Option<String>,
    },
    /// The deprecated `/watch/` prefix form of a Tier watch.
    WatchTiers {
        name: Option<String>,
    },
    /// An Events collection or one Event.
    Events {
        api: EventsApi,
        namespace: String,
        name: Option<String>,
    },
    Discovery(Document),
    /// `selfsubjectreviews`: who the request's credentials are.
    SelfSubjectReview,
    Health,
    Unknown,
}

impl Route {
    fn parse(path: &str) -> Self {
        let trimmed = path.trim_matches('/');
        let segments: Vec<&str> = trimmed.split('/').collect();
        let owned = |s: &str| s.to_owned();
        match segments.as_slice() {
            ["apis", "crd.antrea.io", "v1beta1", "tiers"] => Self::Tiers { name: None },
            ["apis", "crd.antrea.io", "v1beta1", "tiers", name] => Self::Tiers {
                name: Some(owned(name)),
            },
            ["apis", "crd.antrea.io", "v1beta1", "watch", "tiers"] => {
                Self::WatchTiers { name: None }
            }
            ["apis", "crd.antrea.io", "v1beta1", "watch", "tiers", name] => Self::WatchTiers {
                name: Some(owned(name)),
            },
            ["api", "v1", "namespaces", ns, "events"] => Self::Events {
                api: EventsApi::CoreV1,
                namespace: owned(ns),
                name: None,
            },
            ["api", "v1", "namespaces", ns, "events", name] => Self::Events {
                api: EventsApi::CoreV1,
                namespace: owned(ns),
                name: Some(owned(name)),
            },
            ["apis", "events.k8s.io", "v1", "namespaces", ns, "events"] => Self::Events {
                api: EventsApi::EventsV1,
                namespace: owned(ns),
                name: None,
            },
            [
                "apis",
                "events.k8s.io",
                "v1",
                "namespaces",
                ns,
                "events",
                name,
            ] => Self::Events {
                api: EventsApi::EventsV1,
                namespace: owned(ns),
                name: Some(owned(name)),
            },
            ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"] => {
                Self::SelfSubjectReview
            }
            ["healthz" | "livez" | "readyz", ..] => Self::Health,
            _ => Document::for_path(&format!("/{trimmed}")).map_or(Self::Unknown, Self::Discovery),
        }
    }

    fn endpoint(&self) -> Endpoint {
        match self {
            Self::Tiers { .. } | Self::WatchTiers { .. } => Endpoint::Tiers,
            Self::Events { .. } => Endpoint::Events,
            Self::Discovery(_) | Self::Health => Endpoint::Discovery,
            Self::SelfSubjectReview => Endpoint::Identity,
            Self::Unknown => Endpoint::Unknown,
        }
    }

    /// Paths anyone may read without credentials (kube's `system:public-info-viewer`).
    fn is_public(&self) -> bool {
        matches!(self, Self::Health | Self::Discovery(Document::Version))
    }
}

/// Handles one request and logs it.
pub(crate) async fn handle(shared: Arc<Shared>, request: http::Request<Incoming>) -> Outcome {
    let (parts, body) = request.into_parts();
    let route = Route::parse(parts.uri.path());
    let mut record = RequestRecord {
        seq: 0,
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        endpoint: route.endpoint(),
        verb: None,
        name: None,
        user: None,
        code: None,
        fault: None,
    };
    let outcome = dispatch(&shared, &parts, body, route, &mut record).await;
    record.code = match &outcome {
        Outcome::Respond(response) => Some(response.status().as_u16()),
        Outcome::Drop | Outcome::Hang => None,
    };
    tracing::debug!(
        method = %record.method,
        path = %record.path,
        code = ?record.code,
        fault = ?record.fault,
        "request"
    );
    shared.log.push(record);
    outcome
}

async fn dispatch(
    shared: &Arc<Shared>,
    parts: &http::request::Parts,
    body: Incoming,
    route: Route,
    record: &mut RequestRecord,
) -> Outcome {
    let user = match bearer_token(&parts.headers) {
        Some(token) => match shared.user_for(token) {
            Some(user) => Some(user),
            None => return respond(&StatusError::unauthorized()),
        },
        None => None,
    };
    record.user.clone_from(&user);
    let user = match user {
        Some(user) => user,
        None if route.is_public() => String::new(),
        None => return respond(&StatusError::unauthorized()),
    };
    let method = &parts.method;
    match route {
        Route::Health => Outcome::Respond(reply::text(200, "ok")),
        Route::Discovery(document) => {
            if method == Method::GET {
                Outcome::Respond(reply::json(200, &document.render(shared.addr)))
            } else {
                respond(&StatusError::method_not_allowed(method.as_str()))
            }
        }
        Route::Unknown => respond(&StatusError::path_not_found()),
        Route::SelfSubjectReview if !shared.config.self_subject_review => {
            respond(&StatusError::path_not_found())
        }
        Route::SelfSubjectReview => {
            if method != Method::POST {
                return respond(&StatusError::method_not_allowed(method.as_str()));
            }
            // As kube-apiserver: the body's content does not matter, the credentials do.
            Outcome::Respond(reply::json(
                201,
                &serde_json::json!({
                    "kind": "SelfSubjectReview",
                    "apiVersion": "authentication.k8s.io/v1",
                    "metadata": {"creationTimestamp": null},
                    "status": {"userInfo": {
                        "username": user,
                        "groups": ["system:authenticated"],
                    }},
                }),
            ))
        }
        Route::Events {
            api,
            namespace,
            name,
        } => {
            let verb = match (method, name.is_some()) {
                (&Method::GET, false) => Verb::List,
                (&Method::GET, true) => Verb::Get,
                (&Method::POST, false) => Verb::Create,
                (&Method::PATCH, true) => Verb::Patch,
                _ => return respond(&StatusError::method_not_allowed(method.as_str())),
            };
            record.verb = Some(verb);
            record.name.clone_from(&name);
            let body = match read_body(body, shared.config.max_body_bytes).await {
                Ok(body) => body,
                Err(e) => return respond(&e),
            };
            Outcome::Respond(events::serve(
                &shared.store,
                verb,
                api,
                &namespace,
                name.as_deref(),
                &media_type(&parts.headers),
                &body,
            ))
        }
        Route::Tiers { name } => {
            let query = parse_query(parts.uri.query().unwrap_or_default());
            let watching = query
                .iter()
                .rev()
                .find(|(k, _)| k == "watch")
                .is_some_and(|(_, v)| v == "true" || v == "1");
            let verb = match (method, name.is_some()) {
                (&Method::GET, false) if watching => Verb::Watch,
                (&Method::GET, false) => Verb::List,
                (&Method::GET, true) => Verb::Get,
                (&Method::POST, false) => Verb::Create,
                (&Method::PUT, true) => Verb::Update,
                (&Method::PATCH, true) => Verb::Patch,
                (&Method::DELETE, true) => Verb::Delete,
                _ => return respond(&StatusError::method_not_allowed(method.as_str())),
            };
            tiers_request(shared, parts, body, verb, name, query, &user, record).await
        }
        Route::WatchTiers { name } => {
            if method != Method::GET {
                return respond(&StatusError::method_not_allowed(method.as_str()));
            }
            let query = parse_query(parts.uri.query().unwrap_or_default());
            tiers_request(shared, parts, body, Verb::Watch, name, query, &user, record).await
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn tiers_request(
    shared: &Arc<Shared>,
    parts: &http::request::Parts,
    body: Incoming,
    verb: Verb,
    name: Option<String>,
    query: Vec<(String, String)>,
    user: &str,
    record: &mut RequestRecord,
) -> Outcome {
    record.verb = Some(verb);
    let body = if matches!(
        verb,
        Verb::Create | Verb::Update | Verb::Patch | Verb::Delete
    ) {
        match read_body(body, shared.config.max_body_bytes).await {
            Ok(body) => body,
            Err(e) => return respond(&e),
        }
    } else {
        Bytes::new()
    };
    let name = match (verb, name) {
        (Verb::Create, _) => serde_json::from_slice(&body)
            .ok()
            .and_then(|obj| object_name(&obj).map(str::to_owned)),
        (_, name) => name,
    };
    record.name.clone_from(&name);
    let fault = shared.faults.take(verb, name.as_deref());
    record.fault = fault.as_ref().map(FaultAction::kind);
    match &fault {
        Some(FaultAction::Status {
            code,
            reason,
            message,
            retry_after,
        }) => {
            let mut error = StatusError::new(*code, reason, message.clone());
            error.retry_after = *retry_after;
            return respond(&error);
        }
        Some(FaultAction::Drop) => return Outcome::Drop,
        Some(FaultAction::Hang) => return Outcome::Hang,
        Some(FaultAction::Delay(delay)) => tokio::time::sleep(*delay).await,
        _ => {}
    }
    let request = TierRequest {
        user,
        query: &query,
        content_type: media_type(&parts.headers),
        body,
    };
    let response = tiers::serve(shared, verb, name.as_deref(), &request).await;
    match fault {
        Some(FaultAction::LoseResponse {
            code,
            reason,
            message,
        }) => respond(&StatusError::new(code, &reason, message)),
        Some(FaultAction::LoseResponseDrop) => Outcome::Drop,
        _ => Outcome::Respond(response),
    }
}

fn respond(error: &StatusError) -> Outcome {
    Outcome::Respond(reply::status(error))
}

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The media type of the request body, lowercased, without parameters.
fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, StatusError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(StatusError::too_large(limit)),
        Err(e) => Err(StatusError::bad_request(format!(
            "reading the request body failed: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_paths() {
        assert_eq!(
            Route::parse("/apis/crd.antrea.io/v1beta1/tiers"),
            Route::Tiers { name: None }
        );
        assert_eq!(
            Route::parse("/apis/crd.antrea.io/v1beta1/tiers/baseline"),
            Route::Tiers {
                name: Some("baseline".into())
            }
        );
        assert_eq!(
            Route::parse("/apis/crd.antrea.io/v1beta1/tiers/baseline/status"),
            Route::Unknown
        );
        assert_eq!(
            Route::parse("/apis/events.k8s.io/v1/namespaces/default/events"),
            Route::Events {
                api: EventsApi::EventsV1,
                namespace: "default".into(),
                name: None
            }
        );
        assert_eq!(
            Route::parse("/apis/crd.antrea.io/v1beta1"),
            Route::Discovery(Document::AntreaV1beta1)
        );
        assert_eq!(Route::parse("/readyz/ping"), Route::Health);
        assert_eq!(Route::parse("/apis/apps/v1/deployments"), Route::Unknown);
    }

    #[test]
    fn parses_bearer_tokens() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer_token(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&headers), None);
    }

    #[test]
    fn extracts_media_types() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            "Application/JSON; charset=utf-8".parse().unwrap(),
        );
        assert_eq!(media_type(&headers), "application/json");
    }
}
