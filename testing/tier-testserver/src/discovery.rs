//! Discovery documents (`/api`, `/apis`, group and group-version resource lists) and
//! `/version`, listing only what this server serves: Calico's group only while its Tier CRD is
//! installed, as kube-apiserver lists a CRD's group only while the CRD exists.

use std::net::SocketAddr;

use serde_json::{Value, json};

use crate::calico::CalicoApi;
use crate::tier::{GROUP, KIND, PLURAL, VERSION};

/// A discovery document the server knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Document {
    /// `/api`.
    CoreVersions,
    /// `/api/v1`.
    CoreV1,
    /// `/apis`.
    Groups,
    /// `/apis/crd.antrea.io`.
    AntreaGroup,
    /// `/apis/crd.antrea.io/v1beta1`.
    AntreaV1beta1,
    /// `/apis/projectcalico.org` (or `crd.projectcalico.org`).
    CalicoGroup,
    /// `/apis/projectcalico.org/v3` (or `crd.projectcalico.org/v1`).
    CalicoVersion,
    /// `/apis/events.k8s.io`.
    EventsGroup,
    /// `/apis/events.k8s.io/v1`.
    EventsV1,
    /// `/version`.
    Version,
}

impl Document {
    /// The document for a path, if it is one, with Calico's Tier served at `calico`.
    pub(crate) fn for_path(path: &str, calico: CalicoApi) -> Option<Self> {
        let path = path.trim_end_matches('/');
        if let Some(rest) = path
            .strip_prefix("/apis/")
            .and_then(|p| p.strip_prefix(calico.group()))
        {
            return match rest.strip_prefix('/') {
                None if rest.is_empty() => Some(Self::CalicoGroup),
                Some(version) if version == calico.version() => Some(Self::CalicoVersion),
                _ => None,
            };
        }
        Some(match path {
            "/api" => Self::CoreVersions,
            "/api/v1" => Self::CoreV1,
            "/apis" => Self::Groups,
            "/apis/crd.antrea.io" => Self::AntreaGroup,
            "/apis/crd.antrea.io/v1beta1" => Self::AntreaV1beta1,
            "/apis/events.k8s.io" => Self::EventsGroup,
            "/apis/events.k8s.io/v1" => Self::EventsV1,
            "/version" => Self::Version,
            _ => return None,
        })
    }

    /// The JSON body; `None` (404) for Calico's documents while `calico` is `None`, i.e. its
    /// CRD is not installed.
    pub(crate) fn render(self, addr: SocketAddr, calico: Option<CalicoApi>) -> Option<Value> {
        let calico_group = calico.map(|api| group(api.group(), api.version()));
        Some(match self {
            Self::CoreVersions => json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr.to_string()}],
            }),
            Self::CoreV1 => resource_list("v1", vec![events_resource()]),
            Self::Groups => {
                let mut groups = vec![group(GROUP, VERSION), group("events.k8s.io", "v1")];
                groups.extend(calico_group);
                json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
            }
            Self::CalicoGroup => with_type(calico_group?),
            Self::CalicoVersion => {
                let api = calico?;
                resource_list(
                    api.api_version(),
                    vec![json!({
                        "name": crate::calico::PLURAL,
                        "singularName": "tier",
                        "namespaced": false,
                        "kind": crate::calico::KIND,
                        "verbs": ["delete", "get", "list", "patch", "create", "update", "watch"],
                        "storageVersionHash": "tierd-testserver",
                    })],
                )
            }
            Self::AntreaGroup => with_type(group(GROUP, VERSION)),
            Self::EventsGroup => with_type(group("events.k8s.io", "v1")),
            Self::AntreaV1beta1 => resource_list(
                &format!("{GROUP}/{VERSION}"),
                vec![json!({
                    "name": PLURAL,
                    "singularName": "tier",
                    "namespaced": false,
                    "kind": KIND,
                    "verbs": ["delete", "get", "list", "patch", "create", "update", "watch"],
                    "shortNames": ["tr"],
                    "storageVersionHash": "tierd-testserver",
                })],
            ),
            Self::EventsV1 => resource_list("events.k8s.io/v1", vec![events_resource()]),
            Self::Version => json!({
                "major": "1",
                "minor": "33",
                "gitVersion": "v1.33.0-tier-testserver",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2025-01-01T00:00:00Z",
                "goVersion": "go1.24.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            }),
        })
    }
}

fn group(name: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{name}/{version}"), "version": version});
    json!({"name": name, "versions": [gv], "preferredVersion": gv})
}

fn with_type(mut value: Value) -> Value {
    if let Some(map) = value.as_object_mut() {
        map.insert("kind".into(), json!("APIGroup"));
        map.insert("apiVersion".into(), json!("v1"));
    }
    value
}

fn resource_list(group_version: &str, resources: Vec<Value>) -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

fn events_resource() -> Value {
    json!({
        "name": "events",
        "singularName": "event",
        "namespaced": true,
        "kind": "Event",
        "verbs": ["create", "get", "list", "patch"],
        "shortNames": ["ev"],
    })
}
