//! Request dispatch: routing, bearer-token authentication, fault application and the
//! request log, in front of the Tier, Event and discovery handlers.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::calico::CalicoApi;
use crate::context::{ApiRequest, Shared};
use crate::discovery::Document;
use crate::events;
use crate::faults::{FaultAction, Verb};
use crate::log::{Endpoint, RequestRecord};
use crate::objects::ObjectKind;
use crate::policies::PolicyResource;
use crate::policy_api;
use crate::reply::{self, Outcome};
use crate::resources::{self, ObjectRequest};
use crate::status::StatusError;
use crate::store::{EventsApi, TableId};
use crate::tier;
use crate::tier_api::{AntreaTiers, CalicoTiers};
use crate::tiers;
use crate::util::{object_name, parse_query};

/// Where a path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    /// A Tier collection (`name: None`) or one Tier, of Antrea's or Calico's resource.
    Tiers {
        table: TableId,
        name: Option<String>,
    },
    /// The deprecated `/watch/` prefix form of a Tier watch.
    WatchTiers {
        table: TableId,
        name: Option<String>,
    },
    /// An Antrea policy collection (all namespaces, or one) or one policy.
    Policies {
        resource: PolicyResource,
        namespace: Option<String>,
        name: Option<String>,
    },
    /// An Events collection or one Event.
    Events {
        api: EventsApi,
        namespace: String,
        name: Option<String>,
    },
    /// Secrets or ValidatingWebhookConfigurations (`resources`).
    Objects {
        kind: ObjectKind,
        namespace: String,
        name: Option<String>,
    },
    /// `authentication.k8s.io/v1` TokenReviews.
    TokenReviews,
    /// `authorization.k8s.io/v1` SubjectAccessReviews.
    SubjectAccessReviews,
    Discovery(Document),
    /// `selfsubjectreviews`: who the request's credentials are.
    SelfSubjectReview,
    Health,
    Unknown,
}

impl Route {
    /// The route of `path`, with Calico's Tier served at `calico`.
    fn parse(path: &str, calico: CalicoApi) -> Self {
        let trimmed = path.trim_matches('/');
        let segments: Vec<&str> = trimmed.split('/').collect();
        let owned = |s: &str| s.to_owned();
        if let Some((kind, namespace, name)) = ObjectKind::route(&segments) {
            return Self::Objects {
                kind,
                namespace,
                name,
            };
        }
        if let Some(route) = Self::tiers(&segments, calico) {
            return route;
        }
        match segments.as_slice() {
            ["apis", "crd.antrea.io", "v1beta1", plural]
                if PolicyResource::from_plural(plural).is_some() =>
            {
                Self::policies(plural, None, None)
            }
            ["apis", "crd.antrea.io", "v1beta1", plural, name]
                if PolicyResource::from_plural(plural).is_some_and(|r| !r.namespaced()) =>
            {
                Self::policies(plural, None, Some(name))
            }
            ["apis", "crd.antrea.io", "v1beta1", "namespaces", ns, plural]
                if PolicyResource::from_plural(plural).is_some_and(PolicyResource::namespaced) =>
            {
                Self::policies(plural, Some(ns), None)
            }
            [
                "apis",
                "crd.antrea.io",
                "v1beta1",
                "namespaces",
                ns,
                plural,
                name,
            ] if PolicyResource::from_plural(plural).is_some_and(PolicyResource::namespaced) => {
                Self::policies(plural, Some(ns), Some(name))
            }
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
            ["apis", "authentication.k8s.io", "v1", "tokenreviews"] => Self::TokenReviews,
            ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] => {
                Self::SubjectAccessReviews
            }
            ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"] => {
                Self::SelfSubjectReview
            }
            ["healthz" | "livez" | "readyz", ..] => Self::Health,
            _ => Document::for_path(&format!("/{trimmed}"), calico)
                .map_or(Self::Unknown, Self::Discovery),
        }
    }

    /// A Tier path of Antrea's (`crd.antrea.io/v1beta1`) or Calico's (`calico`) group.
    fn tiers(segments: &[&str], calico: CalicoApi) -> Option<Self> {
        let (group, version, rest) = match segments {
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return None,
        };
        let table = if (group, version) == (tier::GROUP, tier::VERSION) {
            TableId::Antrea
        } else if (group, version) == (calico.group(), calico.version()) {
            TableId::Calico
        } else {
            return None;
        };
        let name = |n: &&str| Some((*n).to_owned());
        Some(match rest {
            ["tiers"] => Self::Tiers { table, name: None },
            ["tiers", n] => Self::Tiers {
                table,
                name: name(n),
            },
            ["watch", "tiers"] => Self::WatchTiers { table, name: None },
            ["watch", "tiers", n] => Self::WatchTiers {
                table,
                name: name(n),
            },
            _ => return None,
        })
    }

    fn policies(plural: &str, namespace: Option<&str>, name: Option<&str>) -> Self {
        match PolicyResource::from_plural(plural) {
            Some(resource) => Self::Policies {
                resource,
                namespace: namespace.map(str::to_owned),
                name: name.map(str::to_owned),
            },
            None => Self::Unknown,
        }
    }

    fn endpoint(&self) -> Endpoint {
        match self {
            Self::Tiers { table, .. } | Self::WatchTiers { table, .. } => match table {
                TableId::Antrea => Endpoint::Tiers,
                TableId::Calico => Endpoint::CalicoTiers,
            },
            Self::Policies { .. } => Endpoint::Policies,
            Self::Events { .. } => Endpoint::Events,
            Self::Objects { .. } => Endpoint::Objects,
            Self::Discovery(_) | Self::Health => Endpoint::Discovery,
            Self::SelfSubjectReview => Endpoint::Identity,
            Self::Unknown | Self::TokenReviews | Self::SubjectAccessReviews => Endpoint::Unknown,
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
    let route = Route::parse(parts.uri.path(), shared.store.calico_api());
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
                let calico = shared.store.calico();
                let served = calico.installed().then(|| calico.api());
                match document.render(shared.addr, served) {
                    Some(body) => Outcome::Respond(reply::json(200, &body)),
                    None => respond(&StatusError::path_not_found()),
                }
            } else {
                respond(&StatusError::method_not_allowed(method.as_str()))
            }
        }
        Route::Unknown => respond(&StatusError::path_not_found()),
        Route::TokenReviews | Route::SubjectAccessReviews => {
            if method != Method::POST {
                return respond(&StatusError::method_not_allowed(method.as_str()));
            }
            let body = match read_body(body, shared.config.max_body_bytes).await {
                Ok(body) => body,
                Err(e) => return respond(&e),
            };
            Outcome::Respond(if route == Route::TokenReviews {
                crate::auth::token_review(shared, &body)
            } else {
                crate::auth::subject_access_review(shared, &body)
            })
        }
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
        Route::Objects {
            kind,
            namespace,
            name,
        } => {
            let verb = match (method, name.is_some()) {
                (&Method::GET, false) => Verb::List,
                (&Method::GET, true) => Verb::Get,
                (&Method::POST, false) => Verb::Create,
                (&Method::PUT, true) => Verb::Update,
                (&Method::PATCH, true) => Verb::Patch,
                (&Method::DELETE, true) => Verb::Delete,
                _ => return respond(&StatusError::method_not_allowed(method.as_str())),
            };
            record.verb = Some(verb);
            record.name.clone_from(&name);
            let body = match read_body(body, shared.config.max_body_bytes).await {
                Ok(body) => body,
                Err(e) => return respond(&e),
            };
            // Faults before serving apply here too (by verb and name); lost responses do not.
            let fault = shared.faults.take(verb, name.as_deref(), kind.resource());
            record.fault = fault.as_ref().map(FaultAction::kind);
            if let Some(outcome) = before_serving(fault.as_ref()).await {
                return outcome;
            }
            let content_type = media_type(&parts.headers);
            let request = ObjectRequest {
                kind,
                namespace: &namespace,
                name: name.as_deref(),
                content_type: &content_type,
                body: &body,
            };
            Outcome::Respond(resources::serve(&shared.store, verb, &request))
        }
        Route::Tiers { table, name } => {
            let query = parse_query(parts.uri.query().unwrap_or_default());
            let Some(verb) = object_verb(method, name.is_some(), &query) else {
                return respond(&StatusError::method_not_allowed(method.as_str()));
            };
            let request = TiersRequest {
                table,
                verb,
                name,
                query,
            };
            tiers_request(shared, parts, body, request, &user, record).await
        }
        Route::Policies {
            resource,
            namespace,
            name,
        } => {
            let query = parse_query(parts.uri.query().unwrap_or_default());
            let Some(verb) = object_verb(method, name.is_some(), &query) else {
                return respond(&StatusError::method_not_allowed(method.as_str()));
            };
            record.verb = Some(verb);
            record.name.clone_from(&name);
            let body = match read_body(body, shared.config.max_body_bytes).await {
                Ok(body) => body,
                Err(e) => return respond(&e),
            };
            let request = ApiRequest {
                user: &user,
                query: &query,
                content_type: media_type(&parts.headers),
                body,
            };
            Outcome::Respond(policy_api::serve(
                shared,
                resource,
                verb,
                namespace.as_deref(),
                name.as_deref(),
                &request,
            ))
        }
        Route::WatchTiers { table, name } => {
            if method != Method::GET {
                return respond(&StatusError::method_not_allowed(method.as_str()));
            }
            let request = TiersRequest {
                table,
                verb: Verb::Watch,
                name,
                query: parse_query(parts.uri.query().unwrap_or_default()),
            };
            tiers_request(shared, parts, body, request, &user, record).await
        }
    }
}

/// The verb of a request on a collection (`named: false`) or one object, as kube-apiserver
/// maps methods (`GET` with `watch=true` on a collection is a watch).
fn object_verb(method: &Method, named: bool, query: &[(String, String)]) -> Option<Verb> {
    let watching = query
        .iter()
        .rev()
        .find(|(k, _)| k == "watch")
        .is_some_and(|(_, v)| v == "true" || v == "1");
    Some(match (method, named) {
        (&Method::GET, false) if watching => Verb::Watch,
        (&Method::GET, false) => Verb::List,
        (&Method::GET, true) => Verb::Get,
        (&Method::POST, false) => Verb::Create,
        (&Method::PUT, true) => Verb::Update,
        (&Method::PATCH, true) => Verb::Patch,
        (&Method::DELETE, true) => Verb::Delete,
        _ => return None,
    })
}

/// A routed Tier request, before its body is read.
struct TiersRequest {
    table: TableId,
    verb: Verb,
    name: Option<String>,
    query: Vec<(String, String)>,
}

async fn tiers_request(
    shared: &Arc<Shared>,
    parts: &http::request::Parts,
    body: Incoming,
    request: TiersRequest,
    user: &str,
    record: &mut RequestRecord,
) -> Outcome {
    let TiersRequest {
        table,
        verb,
        name,
        query,
    } = request;
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
    let calico = shared.store.calico_api();
    let resource = match table {
        TableId::Antrea => tier::TIERS,
        TableId::Calico => calico.resource(),
    };
    let fault = shared.faults.take(verb, name.as_deref(), resource);
    record.fault = fault.as_ref().map(FaultAction::kind);
    if let Some(outcome) = before_serving(fault.as_ref()).await {
        return outcome;
    }
    let request = ApiRequest {
        user,
        query: &query,
        content_type: media_type(&parts.headers),
        body,
    };
    let name = name.as_deref();
    let response = match table {
        TableId::Antrea => tiers::serve(shared, &AntreaTiers, verb, name, &request).await,
        TableId::Calico => tiers::serve(shared, &CalicoTiers(calico), verb, name, &request).await,
    };
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

/// Applies the part of `fault` that acts before the request is served: an answer instead of
/// the server's (a Status, a dropped connection, no answer) or a delay.
async fn before_serving(fault: Option<&FaultAction>) -> Option<Outcome> {
    match fault {
        Some(FaultAction::Status {
            code,
            reason,
            message,
            retry_after,
        }) => {
            let mut error = StatusError::new(*code, reason, message.clone());
            error.retry_after = *retry_after;
            Some(respond(&error))
        }
        Some(FaultAction::Drop) => Some(Outcome::Drop),
        Some(FaultAction::Hang) => Some(Outcome::Hang),
        Some(FaultAction::Delay(delay)) => {
            tokio::time::sleep(*delay).await;
            None
        }
        _ => None,
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

    const CALICO: CalicoApi = CalicoApi::V3;

    #[test]
    fn routes_calicos_tiers_at_the_configured_api() {
        assert_eq!(
            Route::parse("/apis/projectcalico.org/v3/tiers/default", CALICO),
            Route::Tiers {
                table: TableId::Calico,
                name: Some("default".into())
            }
        );
        assert_eq!(
            Route::parse("/apis/projectcalico.org/v3/watch/tiers", CALICO),
            Route::WatchTiers {
                table: TableId::Calico,
                name: None
            }
        );
        assert_eq!(
            Route::parse("/apis/crd.projectcalico.org/v1/tiers", CALICO),
            Route::Unknown
        );
        assert_eq!(
            Route::parse("/apis/crd.projectcalico.org/v1/tiers", CalicoApi::CrdV1),
            Route::Tiers {
                table: TableId::Calico,
                name: None
            }
        );
        assert_eq!(
            Route::parse("/apis/projectcalico.org/v3", CALICO),
            Route::Discovery(Document::CalicoVersion)
        );
        assert_eq!(
            Route::parse("/apis/projectcalico.org", CALICO),
            Route::Discovery(Document::CalicoGroup)
        );
        assert_eq!(
            Route::parse("/apis/projectcalico.org/v1", CALICO),
            Route::Unknown
        );
    }

    #[test]
    fn routes_paths() {
        assert_eq!(
            Route::parse("/apis/crd.antrea.io/v1beta1/tiers", CALICO),
            Route::Tiers {
                table: TableId::Antrea,
                name: None
            }
        );
        assert_eq!(
            Route::parse("/apis/crd.antrea.io/v1beta1/tiers/baseline", CALICO),
            Route::Tiers {
                table: TableId::Antrea,
                name: Some("baseline".into())
            }
        );
        assert_eq!(
            Route::parse("/apis/crd.antrea.io/v1beta1/tiers/baseline/status", CALICO),
            Route::Unknown
        );
        assert_eq!(
            Route::parse("/apis/events.k8s.io/v1/namespaces/default/events", CALICO),
            Route::Events {
                api: EventsApi::EventsV1,
                namespace: "default".into(),
                name: None
            }
        );
        assert_eq!(
            Route::parse("/apis/crd.antrea.io/v1beta1", CALICO),
            Route::Discovery(Document::AntreaV1beta1)
        );
        assert_eq!(Route::parse("/readyz/ping", CALICO), Route::Health);
        assert_eq!(
            Route::parse("/apis/apps/v1/deployments", CALICO),
            Route::Unknown
        );
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
