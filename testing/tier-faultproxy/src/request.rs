//! What a request addresses, read from its method, path and query as kube-apiserver's
//! `RequestInfo` reads it, and [`Matcher`], the filter faults and the request log share.

use std::fmt;

use http::Method;

/// What a request does to a resource, as kube-apiserver's authorizer names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET on one object.
    Get,
    /// GET on a collection.
    List,
    /// GET with `watch=true` (or `watch=1`), or under the legacy `/watch/` prefix.
    Watch,
    /// POST on a collection.
    Create,
    /// PUT on one object.
    Update,
    /// PATCH on one object.
    Patch,
    /// DELETE on one object.
    Delete,
    /// DELETE on a collection.
    DeleteCollection,
}

impl Verb {
    /// The verb as RBAC names it (`create`, `list`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resource as RBAC names it: an API group, a plural resource and optionally a subresource.
///
/// Written as `kubectl` and RBAC write it: `"tiers.crd.antrea.io"` (plural, then group after
/// the first dot), `"secrets"` (the core group), `"tiers.crd.antrea.io/status"` (a
/// subresource). As in RBAC, a resource without a subresource does not match its
/// subresources.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    /// Plural resource name (`tiers`).
    pub resource: String,
    /// Subresource (`status`, `scale`), if any.
    pub subresource: Option<String>,
}

impl Resource {
    /// `resource` in `group` (empty for the core group), without a subresource.
    pub fn new(group: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
            subresource: None,
        }
    }

    /// This resource's `subresource`.
    #[must_use]
    pub fn subresource(mut self, subresource: impl Into<String>) -> Self {
        self.subresource = Some(subresource.into());
        self
    }
}

impl From<&str> for Resource {
    /// Parses `plural[.group][/subresource]`.
    fn from(text: &str) -> Self {
        let (main, subresource) = match text.split_once('/') {
            Some((main, sub)) => (main, Some(sub.to_owned())),
            None => (text, None),
        };
        let (resource, group) = main.split_once('.').unwrap_or((main, ""));
        Self {
            group: group.to_owned(),
            resource: resource.to_owned(),
            subresource,
        }
    }
}

impl From<String> for Resource {
    fn from(text: String) -> Self {
        Self::from(text.as_str())
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(sub) = &self.subresource {
            write!(f, "/{sub}")?;
        }
        Ok(())
    }
}

/// What one request addresses. Requests outside `/api` and `/apis` (discovery roots,
/// `/version`, `/healthz`, a webhook's path) have no verb and no resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// The verb, for a resource request.
    pub verb: Option<Verb>,
    /// The resource, for a resource request.
    pub resource: Option<Resource>,
    /// The namespace, for a namespaced resource request.
    pub namespace: Option<String>,
    /// The object's name: from the path; for a list or watch, from a `fieldSelector` of
    /// exactly `metadata.name=<name>` (as kube-apiserver authorizes it); for a create, from
    /// the body's `metadata.name` when the proxy read it.
    pub name: Option<String>,
}

impl RequestInfo {
    /// Classifies a request by `method`, `path` and raw `query` (without `?`), as
    /// kube-apiserver's `RequestInfoFactory` does. Never fails: what is not a resource request
    /// is returned empty.
    pub fn classify(method: &Method, path: &str, query: &str) -> Self {
        let mut parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match parts.as_slice() {
            ["api", _version, rest @ ..] => (String::new(), rest.to_vec()),
            ["apis", group, _version, rest @ ..] => ((*group).to_owned(), rest.to_vec()),
            _ => return Self::default(),
        };
        parts = rest;
        let mut legacy_watch = false;
        if parts.first() == Some(&"watch") {
            legacy_watch = true;
            parts.remove(0);
        }
        let mut namespace = None;
        // `/namespaces/{ns}/{resource}...` is a scope; `/namespaces/{name}` and its own
        // subresources (`status`, `finalize`) are the namespace object itself.
        if parts.first() == Some(&"namespaces")
            && parts.len() > 2
            && !matches!(parts.get(2), Some(&("status" | "finalize")))
        {
            namespace = parts.get(1).map(|ns| (*ns).to_owned());
            parts.drain(..2);
        }
        let Some(resource) = parts.first().filter(|r| !r.is_empty()) else {
            return Self::default();
        };
        let resource = Resource {
            group,
            resource: (*resource).to_owned(),
            subresource: parts.get(2).map(|s| (*s).to_owned()),
        };
        let mut name = parts.get(1).map(|n| (*n).to_owned());
        let watch_param = query_value(query, "watch").is_some_and(|v| v == "true" || v == "1");
        let verb = if *method == Method::GET || *method == Method::HEAD {
            match (&name, legacy_watch || watch_param) {
                (_, true) => Verb::Watch,
                (Some(_), false) => Verb::Get,
                (None, false) => Verb::List,
            }
        } else if *method == Method::POST {
            Verb::Create
        } else if *method == Method::PUT {
            Verb::Update
        } else if *method == Method::PATCH {
            Verb::Patch
        } else if *method == Method::DELETE {
            if name.is_some() {
                Verb::Delete
            } else {
                Verb::DeleteCollection
            }
        } else {
            return Self::default();
        };
        if matches!(verb, Verb::List | Verb::Watch | Verb::DeleteCollection) && name.is_none() {
            name = query_value(query, "fieldSelector").and_then(|selector| {
                let selector = selector.trim();
                let value = selector
                    .strip_prefix("metadata.name==")
                    .or_else(|| selector.strip_prefix("metadata.name="))?;
                (!value.contains(',')).then(|| value.to_owned())
            });
        }
        Self {
            verb: Some(verb),
            resource: Some(resource),
            namespace,
            name,
        }
    }
}

/// The decoded value of query parameter `key`, if present.
pub(crate) fn query_value(query: &str, key: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// Which requests a fault applies to or a log query counts: every field set must match.
///
/// Built from a [`Verb`] (`Matcher::from(Verb::Create)`), or [`Matcher::any`], then narrowed
/// with [`on`](Self::on), [`named`](Self::named), [`in_namespace`](Self::in_namespace) and
/// [`at_path`](Self::at_path).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matcher {
    /// The verb (`None`: any request, including those that are not for a resource).
    pub verb: Option<Verb>,
    /// The resource (`None`: any).
    pub resource: Option<Resource>,
    /// The namespace (`None`: any, including cluster-scoped requests).
    pub namespace: Option<String>,
    /// The object name (`None`: any).
    pub name: Option<String>,
    /// The exact request path, without the query (`None`: any), for requests that are not for
    /// a resource: a webhook's `/validate/tier`, `/version`.
    pub path: Option<String>,
}

impl Matcher {
    /// Matches every request.
    pub fn any() -> Self {
        Self::default()
    }

    /// Matches requests with `verb`.
    pub fn verb(verb: Verb) -> Self {
        Self {
            verb: Some(verb),
            ..Self::default()
        }
    }

    /// Only requests for `resource` (`"tiers.crd.antrea.io"`, `"secrets"`, see [`Resource`]).
    #[must_use]
    pub fn on(mut self, resource: impl Into<Resource>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Only requests for the object `name`.
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Only requests in `namespace`.
    #[must_use]
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only requests for exactly `path` (without the query).
    #[must_use]
    pub fn at_path(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// Whether a request for `path` classified as `info` matches.
    pub fn matches(&self, path: &str, info: &RequestInfo) -> bool {
        self.verb.is_none_or(|v| info.verb == Some(v))
            && self
                .resource
                .as_ref()
                .is_none_or(|r| info.resource.as_ref() == Some(r))
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| info.namespace.as_deref() == Some(ns))
            && self
                .name
                .as_deref()
                .is_none_or(|n| info.name.as_deref() == Some(n))
            && self.path.as_deref().is_none_or(|p| p == path)
    }
}

impl From<Verb> for Matcher {
    fn from(verb: Verb) -> Self {
        Self::verb(verb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, path: &str, query: &str) -> RequestInfo {
        RequestInfo::classify(&method, path, query)
    }

    #[test]
    fn cluster_scoped_custom_resources() {
        let tiers = Resource::from("tiers.crd.antrea.io");
        let list = info(
            Method::GET,
            "/apis/crd.antrea.io/v1beta1/tiers",
            "limit=500",
        );
        assert_eq!(list.verb, Some(Verb::List));
        assert_eq!(list.resource.as_ref(), Some(&tiers));
        assert_eq!((list.namespace, list.name), (None, None));
        let get = info(
            Method::GET,
            "/apis/crd.antrea.io/v1beta1/tiers/baseline",
            "",
        );
        assert_eq!(get.verb, Some(Verb::Get));
        assert_eq!(get.name.as_deref(), Some("baseline"));
        let watch = info(
            Method::GET,
            "/apis/crd.antrea.io/v1beta1/tiers",
            "watch=true&resourceVersion=5&allowWatchBookmarks=true",
        );
        assert_eq!(watch.verb, Some(Verb::Watch));
        let put = info(Method::PUT, "/apis/crd.antrea.io/v1beta1/tiers/a", "");
        assert_eq!(
            (put.verb, put.name.as_deref()),
            (Some(Verb::Update), Some("a"))
        );
        let status = info(
            Method::PUT,
            "/apis/crd.antrea.io/v1beta1/tiers/a/status",
            "",
        );
        assert_eq!(
            status.resource,
            Some(Resource::from("tiers.crd.antrea.io/status"))
        );
        assert_ne!(status.resource.as_ref(), Some(&tiers));
        assert_eq!(
            info(Method::DELETE, "/apis/crd.antrea.io/v1beta1/tiers", "").verb,
            Some(Verb::DeleteCollection)
        );
        assert_eq!(
            info(Method::PATCH, "/apis/crd.antrea.io/v1beta1/tiers/a", "").verb,
            Some(Verb::Patch)
        );
    }

    #[test]
    fn namespaced_core_resources_and_namespaces_themselves() {
        let secret = info(
            Method::GET,
            "/api/v1/namespaces/kube-system/secrets/tierd-tls",
            "",
        );
        assert_eq!(secret.resource, Some(Resource::from("secrets")));
        assert_eq!(secret.namespace.as_deref(), Some("kube-system"));
        assert_eq!(secret.name.as_deref(), Some("tierd-tls"));
        let ns = info(Method::GET, "/api/v1/namespaces/kube-system", "");
        assert_eq!(ns.resource, Some(Resource::from("namespaces")));
        assert_eq!(
            (ns.namespace, ns.name.as_deref()),
            (None, Some("kube-system"))
        );
        let finalize = info(Method::PUT, "/api/v1/namespaces/x/finalize", "");
        assert_eq!(
            finalize.resource,
            Some(Resource::from("namespaces/finalize"))
        );
        let token = info(
            Method::POST,
            "/api/v1/namespaces/kube-system/serviceaccounts/tierd/token",
            "",
        );
        assert_eq!(token.verb, Some(Verb::Create));
        assert_eq!(
            token.resource,
            Some(Resource::from("serviceaccounts/token"))
        );
        assert_eq!(token.name.as_deref(), Some("tierd"));
    }

    #[test]
    fn watches_by_query_prefix_and_single_name_selector() {
        let legacy = info(Method::GET, "/api/v1/watch/namespaces/a/secrets", "");
        assert_eq!(legacy.verb, Some(Verb::Watch));
        assert_eq!(legacy.namespace.as_deref(), Some("a"));
        let one = info(
            Method::GET,
            "/apis/crd.antrea.io/v1beta1/tiers",
            "watch=1&fieldSelector=metadata.name%3Dbaseline",
        );
        assert_eq!(one.verb, Some(Verb::Watch));
        assert_eq!(one.name.as_deref(), Some("baseline"));
        let two = info(
            Method::GET,
            "/apis/crd.antrea.io/v1beta1/tiers",
            "fieldSelector=metadata.name%3Da,metadata.namespace%3Db",
        );
        assert_eq!((two.verb, two.name), (Some(Verb::List), None));
    }

    #[test]
    fn non_resource_requests_have_no_verb() {
        for path in [
            "/version",
            "/apis",
            "/api",
            "/apis/crd.antrea.io",
            "/validate/tier",
            "/",
        ] {
            let i = info(Method::GET, path, "");
            assert_eq!(i, RequestInfo::default(), "{path}");
        }
        // A group and version without a resource is discovery.
        assert_eq!(
            info(Method::GET, "/apis/crd.antrea.io/v1beta1", ""),
            RequestInfo::default()
        );
        assert_eq!(
            info(Method::OPTIONS, "/api/v1/secrets", ""),
            RequestInfo::default()
        );
    }

    #[test]
    fn matchers_narrow_by_every_field_set() {
        let create = info(Method::POST, "/api/v1/namespaces/a/secrets", "");
        let path = "/api/v1/namespaces/a/secrets";
        assert!(Matcher::any().matches(path, &create));
        assert!(
            Matcher::verb(Verb::Create)
                .on("secrets")
                .matches(path, &create)
        );
        assert!(
            !Matcher::verb(Verb::Create)
                .on("tiers.crd.antrea.io")
                .matches(path, &create)
        );
        assert!(!Matcher::verb(Verb::Update).matches(path, &create));
        assert!(Matcher::any().in_namespace("a").matches(path, &create));
        assert!(!Matcher::any().in_namespace("b").matches(path, &create));
        assert!(!Matcher::any().named("x").matches(path, &create));
        assert!(Matcher::any().at_path(path).matches(path, &create));
        let webhook = RequestInfo::default();
        assert!(
            Matcher::any()
                .at_path("/validate/tier")
                .matches("/validate/tier", &webhook)
        );
        assert!(!Matcher::verb(Verb::Create).matches("/validate/tier", &webhook));
    }

    #[test]
    fn resources_parse_and_print_as_rbac_writes_them() {
        for text in [
            "tiers.crd.antrea.io",
            "secrets",
            "tiers.crd.antrea.io/status",
            "pods/log",
        ] {
            assert_eq!(Resource::from(text).to_string(), text);
        }
        assert_eq!(
            Resource::from("validatingwebhookconfigurations.admissionregistration.k8s.io"),
            Resource::new(
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations"
            )
        );
    }
}
