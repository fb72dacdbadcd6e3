//! Calico's `Tier` resource: [`CalicoTier`], its spec, and the group/version it is served at
//! ([`CalicoApi`], configuration of the adapter, never a constant of the core).
//!
//! # Which API
//!
//! The default is **`projectcalico.org/v3`** (`tiers.projectcalico.org`), because that is the
//! Tier API every current Calico install serves, whatever its storage: recent releases install
//! `projectcalico.org/v3` as native CRDs (with Calico's CEL rules pinning the built-in Tiers'
//! order and default action, and the `protect-builtin-tiers.projectcalico.org` admission policy
//! refusing their deletion), and installs that still store Tiers as `crd.projectcalico.org/v1`
//! CRDs serve `projectcalico.org/v3` through the aggregated calico-apiserver, with the same
//! validation. Writing `crd.projectcalico.org/v1` directly goes around that validation (it is
//! Calico's storage format, not its API), so it is offered only as a configuration
//! ([`CalicoApi::CrdV1`]) for clusters without the calico-apiserver.
//!
//! Both versions have the same `spec`: `order` (a nullable float: absent means "last") and
//! `defaultAction` (`Deny` or `Pass`; the CRDs default an absent one to `Deny`).
//!
//! ```
//! use tier_kube::calico::{CalicoApi, CalicoTier, CalicoTierSpec, DefaultAction};
//!
//! let api: CalicoApi = "projectcalico.org/v3".parse().unwrap();
//! assert_eq!(api, CalicoApi::default());
//! let resource = api.resource();
//! let tier = CalicoTier::new("kube-admin", &resource, CalicoTierSpec::new(Some(1000.0), DefaultAction::Pass));
//! let json = serde_json::to_value(&tier).unwrap();
//! assert_eq!(json["apiVersion"], "projectcalico.org/v3");
//! assert_eq!(json["spec"]["defaultAction"], "Pass");
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use kube::core::{ApiResource, ObjectMeta, TypeMeta};
use serde::{Deserialize, Serialize};

/// The group/version Calico's Tiers are read and written at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CalicoApi {
    /// `projectcalico.org/v3`: the API a current install serves (native CRDs, or the
    /// aggregated calico-apiserver). The default; see the [module docs](self).
    #[default]
    V3,
    /// `crd.projectcalico.org/v1`: Calico's older CRD storage, written directly (no
    /// calico-apiserver validation).
    CrdV1,
}

impl CalicoApi {
    /// Every supported API, the default first.
    pub const ALL: [CalicoApi; 2] = [CalicoApi::V3, CalicoApi::CrdV1];

    /// The API group (`projectcalico.org`).
    pub fn group(self) -> &'static str {
        match self {
            CalicoApi::V3 => "projectcalico.org",
            CalicoApi::CrdV1 => "crd.projectcalico.org",
        }
    }

    /// The version (`v3`).
    pub fn version(self) -> &'static str {
        match self {
            CalicoApi::V3 => "v3",
            CalicoApi::CrdV1 => "v1",
        }
    }

    /// `group/version`, as `apiVersion` spells it.
    pub fn api_version(self) -> &'static str {
        match self {
            CalicoApi::V3 => "projectcalico.org/v3",
            CalicoApi::CrdV1 => "crd.projectcalico.org/v1",
        }
    }

    /// The resource the lister and writer use: kind `Tier`, plural `tiers` at this
    /// group/version.
    pub fn resource(self) -> ApiResource {
        ApiResource {
            group: self.group().to_owned(),
            version: self.version().to_owned(),
            api_version: self.api_version().to_owned(),
            kind: KIND.to_owned(),
            plural: PLURAL.to_owned(),
        }
    }
}

impl fmt::Display for CalicoApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.api_version())
    }
}

/// A string that names no supported Calico Tier API.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown Calico Tier API {0:?}: use \"projectcalico.org/v3\" (current installs) or \
     \"crd.projectcalico.org/v1\" (CRD storage without the calico-apiserver)"
)]
pub struct UnknownCalicoApi(pub String);

impl FromStr for CalicoApi {
    type Err = UnknownCalicoApi;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CalicoApi::ALL
            .into_iter()
            .find(|api| api.api_version() == s)
            .ok_or_else(|| UnknownCalicoApi(s.to_owned()))
    }
}

/// The kind of Calico's Tier.
pub const KIND: &str = "Tier";
/// The plural (resource) name of Calico's Tier.
pub const PLURAL: &str = "tiers";

/// What a Tier does with traffic that a policy of it matched but no rule did.
// Until tier-core's `calico` module lands, the adapter's own copy (the same serde names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DefaultAction {
    /// Drop the traffic.
    Deny,
    /// Pass it on to the next Tier.
    Pass,
}

/// A Calico Tier object (cluster-scoped), of the group/version of its
/// [`ApiResource`] ([`CalicoApi::resource`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalicoTier {
    /// `apiVersion` and `kind`, as sent and received.
    #[serde(flatten, default)]
    pub types: Option<TypeMeta>,
    /// The object's metadata.
    pub metadata: ObjectMeta,
    /// The spec (an absent one reads as empty).
    #[serde(default)]
    pub spec: CalicoTierSpec,
    /// The status (conditions written by Calico), kept as received; tierd never writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// The spec of a Calico Tier.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CalicoTierSpec {
    /// Evaluation order, lower first; absent means last. Equal orders are allowed (ordered by
    /// name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<f64>,
    /// What happens at the end of the Tier when no policy rule matched; absent reads as `Deny`
    /// (the CRDs' default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_action: Option<DefaultAction>,
    /// Fields of a newer Calico that this type does not know, kept through an update.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl CalicoTierSpec {
    /// A spec of `order` and `default_action`, nothing else.
    pub fn new(order: Option<f64>, default_action: DefaultAction) -> Self {
        Self {
            order,
            default_action: Some(default_action),
            other: BTreeMap::new(),
        }
    }

    /// The default action, `Deny` when absent (Calico's default).
    pub fn default_action(&self) -> DefaultAction {
        self.default_action.unwrap_or(DefaultAction::Deny)
    }
}

impl CalicoTier {
    /// A fresh object named `name` of `resource` with `spec`.
    pub fn new(name: &str, resource: &ApiResource, spec: CalicoTierSpec) -> Self {
        Self {
            types: Some(TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            }),
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }
}

impl kube::Resource for CalicoTier {
    type DynamicType = ApiResource;
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.kind)
    }

    fn group(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.group)
    }

    fn version(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.version)
    }

    fn api_version(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.api_version)
    }

    fn plural(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.plural)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use kube::Resource;
    use serde_json::json;

    use super::*;

    fn parse(value: serde_json::Value) -> CalicoTier {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn an_absent_order_stays_absent() {
        let tier = parse(json!({
            "apiVersion": "projectcalico.org/v3",
            "kind": "Tier",
            "metadata": {"name": "last"},
            "spec": {"defaultAction": "Pass"}
        }));
        assert_eq!(tier.spec.order, None);
        let back = serde_json::to_value(&tier).unwrap();
        assert_eq!(back["spec"], json!({"defaultAction": "Pass"}));
        assert_eq!(parse(back), tier);
    }

    #[test]
    fn an_integer_order_reads_as_the_same_float() {
        let as_integer = parse(json!({"metadata": {"name": "a"}, "spec": {"order": 1000}}));
        let as_float = parse(json!({"metadata": {"name": "a"}, "spec": {"order": 1000.0}}));
        assert_eq!(as_integer.spec.order, Some(1000.0));
        assert_eq!(as_integer, as_float);
        let fractional = parse(json!({"metadata": {"name": "a"}, "spec": {"order": 0.5}}));
        assert_eq!(fractional.spec.order, Some(0.5));
        // Written back, it is the same number (a JSON number Go's float64 reads as 1000).
        let back = serde_json::to_value(&as_integer).unwrap();
        assert_eq!(back["spec"]["order"].as_f64(), Some(1000.0));
    }

    #[test]
    fn an_absent_default_action_reads_as_deny_and_stays_absent() {
        let tier = parse(json!({"metadata": {"name": "a"}, "spec": {"order": 5}}));
        assert_eq!(tier.spec.default_action, None);
        assert_eq!(tier.spec.default_action(), DefaultAction::Deny);
        let back = serde_json::to_value(&tier).unwrap();
        assert!(back["spec"].get("defaultAction").is_none(), "{back}");
    }

    #[test]
    fn default_actions_are_spelled_as_calico_does() {
        for (action, text) in [(DefaultAction::Deny, "Deny"), (DefaultAction::Pass, "Pass")] {
            assert_eq!(serde_json::to_value(action).unwrap(), json!(text));
            let tier = parse(json!({"metadata": {"name": "a"}, "spec": {"defaultAction": text}}));
            assert_eq!(tier.spec.default_action, Some(action));
        }
        let allow = serde_json::from_value::<CalicoTier>(
            json!({"metadata": {"name": "a"}, "spec": {"defaultAction": "Allow"}}),
        );
        assert!(allow.is_err(), "a Tier cannot default to Allow");
    }

    #[test]
    fn an_object_as_calico_serves_it_round_trips_with_status_and_unknown_fields() {
        let served = json!({
            "apiVersion": "projectcalico.org/v3",
            "kind": "Tier",
            "metadata": {
                "name": "default",
                "resourceVersion": "812",
                "finalizers": ["projectcalico.org/tier-controller"],
                "labels": {"team": "net"}
            },
            "spec": {"order": 1000000, "defaultAction": "Deny", "futureField": {"x": 1}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z"}]}
        });
        let tier = parse(served.clone());
        assert_eq!(tier.spec.order, Some(1_000_000.0));
        assert_eq!(tier.spec.other["futureField"], json!({"x": 1}));
        assert_eq!(tier.meta().resource_version.as_deref(), Some("812"));
        let back = serde_json::to_value(&tier).unwrap();
        assert_eq!(back["spec"]["futureField"], served["spec"]["futureField"]);
        assert_eq!(back["status"], served["status"]);
        assert_eq!(back["metadata"], served["metadata"]);
        assert_eq!(parse(back), tier);
    }

    #[test]
    fn a_missing_spec_reads_as_empty() {
        let tier = parse(json!({"metadata": {"name": "bare"}}));
        assert_eq!(tier.spec, CalicoTierSpec::default());
    }

    #[test]
    fn a_fresh_object_carries_its_group_version_and_no_status() {
        for api in CalicoApi::ALL {
            let resource = api.resource();
            let tier = CalicoTier::new(
                "kube-baseline",
                &resource,
                CalicoTierSpec::new(Some(10_000_000.0), DefaultAction::Pass),
            );
            assert_eq!(
                serde_json::to_value(&tier).unwrap(),
                json!({
                    "apiVersion": api.api_version(),
                    "kind": "Tier",
                    "metadata": {"name": "kube-baseline"},
                    "spec": {"order": 10_000_000.0, "defaultAction": "Pass"}
                })
            );
        }
    }

    #[test]
    fn the_api_is_configuration_with_urls_of_its_group_version() {
        assert_eq!(CalicoApi::default(), CalicoApi::V3);
        for api in CalicoApi::ALL {
            assert_eq!(api.api_version().parse::<CalicoApi>(), Ok(api));
            assert_eq!(api.to_string(), api.api_version());
        }
        assert_eq!(
            CalicoTier::url_path(&CalicoApi::V3.resource(), None),
            "/apis/projectcalico.org/v3/tiers"
        );
        assert_eq!(
            CalicoTier::url_path(&CalicoApi::CrdV1.resource(), None),
            "/apis/crd.projectcalico.org/v1/tiers"
        );
        let error = "crd.antrea.io/v1beta1".parse::<CalicoApi>().unwrap_err();
        assert!(
            error.to_string().contains("projectcalico.org/v3"),
            "{error}"
        );
    }
}
