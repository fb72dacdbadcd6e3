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

use kube::ResourceExt;
use kube::core::{ApiResource, ObjectMeta, TypeMeta};
use serde::{Deserialize, Serialize};
pub use tier_core::calico::DefaultAction;
use tier_core::calico::{Calico, ObservedTier, TierSpec};

use crate::explain::ResourceHints;
use crate::kube_tier::{self, KubeTier};

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
        self.default_action.unwrap_or_default()
    }

    /// The spec for a desired Tier: its order (absent stays absent) and default action.
    pub fn from_desired(desired: &TierSpec) -> Self {
        Self::new(desired.order, desired.default_action)
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

/// What the core sees of a Calico Tier object: name, order (absent = last), default action
/// (absent = `Deny`), resourceVersion (absent = empty) and who last set the order or default
/// action (from `managedFields`).
pub fn observe(tier: &CalicoTier) -> ObservedTier {
    ObservedTier {
        name: tier.name_any(),
        order: tier.spec.order,
        default_action: tier.spec.default_action(),
        resource_version: tier.resource_version().unwrap_or_default(),
        last_writer: kube_tier::last_writer(tier),
    }
}

/// Calico's Tier on the shared lister and writer: the resource ([`CalicoApi::resource`]) is
/// configuration; an update sets `order` and `defaultAction` and keeps every other field.
impl KubeTier for CalicoTier {
    type Controller = Calico;

    const ENSURED_FIELDS: &'static [&'static str] = &["f:order", "f:defaultAction"];

    fn observe(&self) -> ObservedTier {
        observe(self)
    }

    fn object(desired: &TierSpec, resource: &ApiResource) -> Self {
        CalicoTier::new(
            &desired.name,
            resource,
            CalicoTierSpec::from_desired(desired),
        )
    }

    fn set_desired(&mut self, desired: &TierSpec) {
        self.spec.order = desired.order;
        self.spec.default_action = Some(desired.default_action);
    }

    fn hints(resource: &ApiResource) -> ResourceHints {
        let v3 = resource.group == CalicoApi::V3.group();
        ResourceHints {
            resource: Self::resource_name(resource),
            rbac: "deploy/overlays/calico/rbac.yaml",
            install: if v3 {
                "install Calico (a current release serves projectcalico.org/v3 Tiers), or \
                 choose the API its install serves"
            } else {
                "install Calico's CRDs, or choose the API its install serves"
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
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

    /// The core compares orders exactly, so a write must read back bit for bit, or tierd would
    /// correct the same Tier forever.
    #[test]
    fn every_finite_order_reads_back_exactly() {
        let mut orders = vec![
            0.0,
            1.0,
            0.1,
            1.0 / 3.0,
            1000.0,
            1_000_000.0,
            10_000_000.0,
            -2.5,
            f64::MIN_POSITIVE,
            f64::EPSILON,
            f64::MAX,
            f64::MIN,
            9_007_199_254_740_993.0,
            123_456_789.123_456_79,
        ];
        let mut rng = fastrand::Rng::with_seed(18);
        orders.extend(
            (0..2000)
                .map(|_| f64::from_bits(rng.u64(..)))
                .filter(|f| f.is_finite()),
        );
        for order in orders {
            let spec = CalicoTierSpec::new(Some(order), DefaultAction::Deny);
            let text = serde_json::to_string(&spec).unwrap();
            let back: CalicoTierSpec = serde_json::from_str(&text).unwrap();
            assert_eq!(
                back.order.map(f64::to_bits),
                Some(order.to_bits()),
                "{order:e} as {text}"
            );
        }
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

    fn entry(manager: &str, time: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            time: Some(Time(time.parse().unwrap())),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn observes_order_action_resource_version_and_last_writer() {
        let mut tier = parse(json!({
            "metadata": {"name": "kube-admin", "resourceVersion": "7"},
            "spec": {"order": 1000, "defaultAction": "Pass"}
        }));
        tier.metadata.managed_fields = Some(vec![
            entry(
                "calico-kube-controllers",
                "2026-12-01T08:00:00Z",
                json!({"f:spec": {"f:order": {}, "f:defaultAction": {}}}),
            ),
            entry(
                "kubectl-edit",
                "2026-12-01T09:00:00Z",
                json!({"f:spec": {"f:defaultAction": {}}}),
            ),
            entry(
                "labeller",
                "2026-12-01T10:00:00Z",
                json!({"f:metadata": {"f:labels": {}}}),
            ),
        ]);
        assert_eq!(
            observe(&tier),
            ObservedTier {
                name: "kube-admin".into(),
                order: Some(1000.0),
                default_action: DefaultAction::Pass,
                resource_version: "7".into(),
                last_writer: Some(tier_core::FieldWriter {
                    manager: "kubectl-edit".into(),
                    time: Some("2026-12-01T09:00:00Z".into()),
                }),
            }
        );
        // Antrea's field names own nothing here.
        tier.metadata.managed_fields = Some(vec![entry(
            "x",
            "2026-12-01T08:00:00Z",
            json!({"f:spec": {"f:priority": {}}}),
        )]);
        assert_eq!(observe(&tier).last_writer, None);
    }

    #[test]
    fn a_created_object_is_in_sync_with_its_desired_tier() {
        let resource = CalicoApi::V3.resource();
        for desired in tier_core::calico::built_ins() {
            let object = <CalicoTier as KubeTier>::object(&desired, &resource);
            assert_eq!(object.metadata.name.as_deref(), Some(desired.name.as_str()));
            assert!(tier_core::calico::in_sync(&desired, &observe(&object)));
        }
        let last = TierSpec::new("last", None, DefaultAction::Deny);
        let json =
            serde_json::to_value(<CalicoTier as KubeTier>::object(&last, &resource)).unwrap();
        assert_eq!(json["spec"], json!({"defaultAction": "Deny"}));
    }

    #[test]
    fn an_update_sets_order_and_action_and_keeps_everything_else() {
        let mut tier = parse(json!({
            "metadata": {"name": "default", "resourceVersion": "3", "labels": {"a": "b"}},
            "spec": {"order": 5, "futureField": true},
            "status": {"conditions": []}
        }));
        let before = tier.clone();
        tier.set_desired(&TierSpec::new(
            "default",
            Some(tier_core::calico::DEFAULT_ORDER),
            DefaultAction::Deny,
        ));
        assert_eq!(tier.spec.order, Some(1_000_000.0));
        assert_eq!(tier.spec.default_action, Some(DefaultAction::Deny));
        assert_eq!(tier.spec.other, before.spec.other);
        assert_eq!(tier.metadata, before.metadata);
        assert_eq!(tier.status, before.status);
        // An absent desired order removes the field (the Tier goes last).
        tier.set_desired(&TierSpec::new("default", None, DefaultAction::Pass));
        let json = serde_json::to_value(&tier).unwrap();
        assert!(json["spec"].get("order").is_none(), "{json}");
    }

    #[test]
    fn failures_name_calicos_resource() {
        let words = crate::explain::status_words_about(
            &kube::core::Status::failure("forbidden", "Forbidden").with_code(403),
            &CalicoTier::hints(&CalicoApi::V3.resource()),
        );
        assert!(words.contains("on tiers.projectcalico.org"), "{words}");
        assert!(
            words.contains("deploy/overlays/calico/rbac.yaml"),
            "{words}"
        );
        assert!(!words.contains("antrea"), "{words}");
        let hints = CalicoTier::hints(&CalicoApi::CrdV1.resource());
        assert_eq!(hints.resource, "tiers.crd.projectcalico.org");
    }

    #[tokio::test]
    async fn the_shared_lister_keeps_calico_tiers_under_their_resource() {
        use futures::channel::mpsc;
        use kube::runtime::{reflector, watcher};
        use tier_core::TierLister;

        let resource = CalicoApi::V3.resource();
        let (feed, events) = mpsc::unbounded();
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let lister = crate::KubeLister::from_reflector_with(
            resource.clone(),
            store,
            reflector::reflector(writer, events),
        )
        .unwrap();
        let tier = parse(json!({
            "apiVersion": "projectcalico.org/v3", "kind": "Tier",
            "metadata": {"name": "default", "resourceVersion": "4"},
            "spec": {"order": 1000000, "defaultAction": "Deny"}
        }));
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(tier.clone()),
            watcher::Event::InitDone,
        ] {
            feed.unbounded_send(Ok(event)).unwrap();
        }
        tokio::time::timeout(std::time::Duration::from_secs(5), lister.wait_synced())
            .await
            .unwrap();
        let snapshot: tier_core::Snapshot<Calico> = lister.snapshot();
        assert_eq!(snapshot.generation, 1);
        assert_eq!(
            snapshot.observe("default"),
            tier_core::Observed::Present(observe(&tier))
        );
        assert_eq!(lister.resource(), &resource);
        // The store is keyed by the resource: the writer finds the object under it.
        let key = kube::runtime::reflector::ObjectRef::new_with("default", resource);
        assert_eq!(lister.store().get(&key).as_deref(), Some(&tier));
    }
}
