//! Calico's Tier as a current Calico install serves it: the native CRD `tiers.projectcalico.org`
//! (`projectcalico.org/v3`, cluster-scoped; or the older `crd.projectcalico.org/v1`, same
//! schema), its three built-in Tiers, the CRD's schema with its default and its CEL rules, and
//! the ValidatingAdmissionPolicy that protects the built-ins from deletion.
//!
//! Like [`antrea`](crate::antrea), this is an **independent oracle**, not a call into
//! `tier_core`: the test API server stands for Calico, so it must not share tierd's reading of
//! Calico's rules. Its facts are transcribed from Calico's sources:
//! `api/pkg/apis/projectcalico/v3/tier.go` (the constants and the `XValidation` rules),
//! `manifests/v3_projectcalico_org.yaml` (the generated CRD: `defaultAction` enum and default
//! `Deny`, `order` a number, `metadata` and `spec` required, a `status` subresource) and
//! `api/admission/protect-builtin-tiers.yaml` (the admission policy, matching
//! `projectcalico.org` `v3` DELETEs only).
//!
//! What kube-apiserver does with them, in order: prune unknown fields, drop `null`s, apply the
//! default (`defaultAction: Deny`), validate the schema, then the CEL rules (skipped after a
//! type error, and for an update that changes nothing, as CRD validation ratcheting does). Equal
//! orders are allowed: Calico has no overlap rule and no limit on the number of Tiers. The
//! `/status` subresource's own path is not served (404): nothing here writes a Tier's status,
//! and the main resource keeps the stored `status` on every write, as with the subresource.

use serde_json::{Map, Value, json};

use crate::crd::{self, type_cause};
use crate::status::{Cause, ResourceName, StatusError};
use crate::util::object_name;

/// `kind` of Calico Tier objects.
pub const KIND: &str = "Tier";
/// `kind` of Calico Tier lists.
pub const LIST_KIND: &str = "TierList";
/// Plural resource name.
pub const PLURAL: &str = "tiers";
/// The ValidatingAdmissionPolicy (and its binding) that refuses deleting a built-in Tier.
pub const ADMISSION_POLICY: &str = "protect-builtin-tiers.projectcalico.org";
/// The finalizer Calico's Tier controller puts on Tiers (it removes their policies first).
pub const FINALIZER: &str = "projectcalico.org/tier-controller";
/// The `defaultAction` a Tier gets when it names none (the CRD's default).
pub const DEFAULT_ACTION: &str = "Deny";

/// Which API serves Calico's Tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CalicoApi {
    /// `projectcalico.org/v3` as native CRDs: what a current Calico install serves, and the only
    /// one the built-in Tiers' deletion protection matches.
    #[default]
    V3,
    /// `crd.projectcalico.org/v1`: the Kubernetes-datastore CRDs of older installs (behind the
    /// aggregated calico-apiserver), same schema and rules.
    CrdV1,
}

impl CalicoApi {
    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            Self::V3 => "projectcalico.org",
            Self::CrdV1 => "crd.projectcalico.org",
        }
    }

    /// The served version.
    pub fn version(self) -> &'static str {
        match self {
            Self::V3 => "v3",
            Self::CrdV1 => "v1",
        }
    }

    /// `apiVersion` of its Tier objects.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::V3 => "projectcalico.org/v3",
            Self::CrdV1 => "crd.projectcalico.org/v1",
        }
    }

    /// Its Tiers as named in Status messages (`tiers.projectcalico.org`).
    pub fn resource(self) -> ResourceName {
        ResourceName {
            group: self.group(),
            plural: PLURAL,
            kind: KIND,
        }
    }

    /// Whether deleting a built-in Tier is refused: the admission policy matches only
    /// `projectcalico.org` `v3`.
    pub fn protects_builtins(self) -> bool {
        matches!(self, Self::V3)
    }
}

impl std::fmt::Display for CalicoApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.api_version())
    }
}

/// An `apiVersion` that is not one Calico serves its Tier at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a Calico Tier API: use projectcalico.org/v3 or crd.projectcalico.org/v1")]
pub struct UnknownCalicoApi(pub String);

impl std::str::FromStr for CalicoApi {
    type Err = UnknownCalicoApi;

    /// Parses an `apiVersion`: `projectcalico.org/v3` or `crd.projectcalico.org/v1`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        [Self::V3, Self::CrdV1]
            .into_iter()
            .find(|api| api.api_version() == text)
            .ok_or_else(|| UnknownCalicoApi(text.to_owned()))
    }
}

impl crd::Schema for CalicoApi {
    fn resource(&self) -> ResourceName {
        CalicoApi::resource(*self)
    }

    fn api_version(&self) -> &'static str {
        CalicoApi::api_version(*self)
    }

    fn list_kind(&self) -> &'static str {
        LIST_KIND
    }

    fn check_type(&self, obj: &Value) -> Result<(), StatusError> {
        check_type(*self, obj)
    }

    fn prepare(&self, obj: &mut Value, old: Option<&Value>) -> Result<(), StatusError> {
        prepare(*self, obj, old)
    }
}

/// One of Calico's built-in Tiers, with the values its CRD pins it to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuiltinTier {
    /// `metadata.name`.
    pub name: &'static str,
    /// `spec.order`.
    pub order: f64,
    /// `spec.defaultAction`.
    pub default_action: &'static str,
}

impl BuiltinTier {
    /// The Tier object a client would create for this built-in Tier.
    pub fn object(&self, api: CalicoApi) -> Value {
        tier(api, self.name, Some(self.order), Some(self.default_action))
    }
}

/// The three built-in Tiers, in the order Calico's `EnsureInitialized` creates them.
pub const BUILTIN_TIERS: [BuiltinTier; 3] = [
    BuiltinTier {
        name: "default",
        order: 1_000_000.0,
        default_action: "Deny",
    },
    BuiltinTier {
        name: "kube-admin",
        order: 1_000.0,
        default_action: "Pass",
    },
    BuiltinTier {
        name: "kube-baseline",
        order: 10_000_000.0,
        default_action: "Pass",
    },
];

/// A Calico Tier as a client would send it for a create; `order` and `default_action` are
/// left out when `None`.
pub fn tier(api: CalicoApi, name: &str, order: Option<f64>, default_action: Option<&str>) -> Value {
    let mut spec = Map::new();
    if let Some(order) = order {
        spec.insert("order".into(), json!(order));
    }
    if let Some(action) = default_action {
        spec.insert("defaultAction".into(), json!(action));
    }
    json!({
        "apiVersion": api.api_version(),
        "kind": KIND,
        "metadata": { "name": name },
        "spec": spec,
    })
}

/// `spec.order` of a stored Tier (`None`: no order, i.e. last).
pub fn order(obj: &Value) -> Option<f64> {
    obj.pointer("/spec/order").and_then(Value::as_f64)
}

/// `spec.defaultAction` of a stored Tier.
pub fn default_action(obj: &Value) -> Option<&str> {
    obj.pointer("/spec/defaultAction").and_then(Value::as_str)
}

/// Checks `apiVersion` and `kind` of a request body (400 BadRequest when wrong).
pub(crate) fn check_type(api: CalicoApi, obj: &Value) -> Result<(), StatusError> {
    crd::check_type(obj, api.api_version(), KIND)
}

/// What kube-apiserver does to a decoded Calico Tier before admission: prunes, drops `null`s,
/// applies the default, carries `status` over from `old` (the status subresource: a create
/// drops it, an update keeps the stored one), then validates the schema and the CEL rules
/// (422 Invalid with every cause).
pub(crate) fn prepare(
    api: CalicoApi,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<(), StatusError> {
    prune(obj);
    match (obj.as_object_mut(), old.and_then(|o| o.get("status"))) {
        (Some(map), Some(status)) => {
            map.insert("status".into(), status.clone());
        }
        (Some(map), None) => {
            map.remove("status");
        }
        (None, _) => {}
    }
    if let Some(Value::Object(spec)) = obj.get_mut("spec") {
        spec.entry("defaultAction")
            .or_insert_with(|| json!(DEFAULT_ACTION));
    }
    validate(api, obj, old)
}

/// Drops what the structural schema does not know, and `null` for the non-nullable spec
/// fields; an integral `order` is stored as an integer, as kube-apiserver's JSON round trip
/// writes it.
fn prune(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    map.retain(|k, _| {
        matches!(
            k.as_str(),
            "apiVersion" | "kind" | "metadata" | "spec" | "status"
        )
    });
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        crd::prune_metadata(meta);
    }
    if let Some(Value::Object(spec)) = map.get_mut("spec") {
        spec.retain(|k, v| matches!(k.as_str(), "order" | "defaultAction") && !v.is_null());
        if let Some(order) = spec.get("order").and_then(Value::as_f64)
            && spec.get("order").is_some_and(Value::is_f64)
            && order.fract() == 0.0
            && order.abs() < 9.0e15
        {
            // In range and integral: the conversion is exact.
            #[allow(clippy::cast_possible_truncation)]
            spec.insert("order".into(), json!(order as i64));
        }
    }
}

/// The two enums `defaultAction` must satisfy (`allOf`): Calico's `Action`, then the Tier's.
const ACTION_ENUMS: [&[&str]; 2] = [&["Allow", "Deny", "Log", "Pass"], &["Pass", "Deny"]];

fn validate(api: CalicoApi, obj: &Value, old: Option<&Value>) -> Result<(), StatusError> {
    let name = object_name(obj).unwrap_or_default();
    let mut causes = crd::name_causes(obj);
    let mut blocking = false;
    match obj.get("spec") {
        None => causes.push(Cause::new("FieldValueRequired", "Required value", "spec")),
        Some(Value::Object(spec)) => {
            if let Some(order) = spec.get("order")
                && !order.is_number()
            {
                causes.push(type_cause("spec.order", order, "number"));
                blocking = true;
            }
            match spec.get("defaultAction") {
                Some(Value::String(action)) => {
                    for allowed in ACTION_ENUMS {
                        if !allowed.contains(&action.as_str()) {
                            causes.push(unsupported("spec.defaultAction", action, allowed));
                        }
                    }
                }
                Some(other) => {
                    causes.push(type_cause("spec.defaultAction", other, "string"));
                    blocking = true;
                }
                None => {}
            }
        }
        Some(other) => {
            causes.push(type_cause("spec", other, "object"));
            blocking = true;
        }
    }
    // CRD validation ratcheting: an update that changes nothing is not re-judged by the rules.
    let unchanged = old.is_some_and(|old| same_object(old, obj));
    if !blocking && !unchanged {
        causes.extend(rule_causes(obj));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(StatusError::invalid(api.group(), KIND, name, &causes))
    }
}

/// The CRD's `x-kubernetes-validations`, in the CRD's order: each built-in name pins its
/// default action, then its order. Root-level rules report the field `<nil>` and the value
/// `"object"`, as kube-apiserver words them.
fn rule_causes(obj: &Value) -> Vec<Cause> {
    let name = object_name(obj).unwrap_or_default();
    let Some(builtin) = BUILTIN_TIERS.iter().find(|b| b.name == name) else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    let rule = |message: String| {
        Cause::new(
            "FieldValueInvalid",
            format!("Invalid value: \"object\": {message}"),
            "<nil>",
        )
    };
    if default_action(obj) != Some(builtin.default_action) {
        causes.push(rule(format!(
            "The '{name}' tier must have default action '{}'",
            builtin.default_action
        )));
    }
    if order(obj) != Some(builtin.order) {
        causes.push(rule(format!("{name} tier order must be {}", builtin.order)));
    }
    causes
}

/// Whether `a` and `b` are the same object apart from the resourceVersion.
fn same_object(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        v
    };
    strip(a) == strip(b)
}

fn unsupported(field: &str, value: &str, allowed: &[&str]) -> Cause {
    let quoted: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
    Cause::new(
        "FieldValueNotSupported",
        format!(
            "Unsupported value: \"{value}\": supported values: {}",
            quoted.join(", ")
        ),
        field,
    )
}

/// The admission policy `protect-builtin-tiers.projectcalico.org` on a DELETE of `name`:
/// refused for a built-in Tier when `api` is the one it matches, answered as kube-apiserver
/// answers a ValidatingAdmissionPolicy denial without a `reason` (422 Invalid, the
/// "is forbidden" wording of an admission error, the denial as the one cause).
pub(crate) fn review_delete(api: CalicoApi, name: &str) -> Result<(), StatusError> {
    if !api.protects_builtins() || !BUILTIN_TIERS.iter().any(|b| b.name == name) {
        return Ok(());
    }
    let denial = format!(
        "ValidatingAdmissionPolicy '{ADMISSION_POLICY}' with binding '{ADMISSION_POLICY}' \
         denied request: The built-in tier {name} cannot be deleted"
    );
    let resource = api.resource();
    Err(StatusError::new(
        422,
        "Invalid",
        format!(
            "{} \"{name}\" is forbidden: {denial}",
            resource.qualified_resource()
        ),
    )
    .with_details(json!({
        "name": name,
        "group": resource.group,
        "kind": resource.plural,
        "causes": [{"message": denial}],
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    const API: CalicoApi = CalicoApi::V3;

    fn prepared(mut obj: Value) -> Result<Value, StatusError> {
        prepare(API, &mut obj, None).map(|()| obj)
    }

    fn messages(error: &StatusError) -> Vec<(String, String)> {
        error.details.as_ref().unwrap()["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["field"].as_str().unwrap().to_owned(),
                    c["message"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn the_builtins_are_valid_and_other_tiers_take_any_order() {
        for builtin in BUILTIN_TIERS {
            assert!(prepared(builtin.object(API)).is_ok(), "{builtin:?}");
        }
        assert!(prepared(tier(API, "mine", Some(1000.0), Some("Pass"))).is_ok());
        assert!(prepared(tier(API, "mine", Some(-2.5), Some("Deny"))).is_ok());
    }

    #[test]
    fn an_omitted_default_action_is_deny_and_an_omitted_order_stays_omitted() {
        let stored = prepared(tier(API, "mine", None, None)).unwrap();
        assert_eq!(stored["spec"], json!({"defaultAction": "Deny"}));
        let mut obj = tier(API, "mine", None, None);
        obj["spec"]["order"] = Value::Null;
        obj["spec"]["defaultAction"] = Value::Null;
        assert_eq!(
            prepared(obj).unwrap()["spec"],
            json!({"defaultAction": "Deny"})
        );
    }

    #[test]
    fn builtin_names_are_pinned_with_calicos_messages() {
        let error = prepared(tier(API, "default", Some(999.0), Some("Pass"))).unwrap_err();
        assert_eq!((error.code, error.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            error.message,
            "Tier.projectcalico.org \"default\" is invalid: [<nil>: Invalid value: \"object\": \
             The 'default' tier must have default action 'Deny', <nil>: Invalid value: \
             \"object\": default tier order must be 1000000]"
        );
        // Omitted values are pinned too: the default action defaults to Deny, the order is
        // missing.
        let error = prepared(tier(API, "kube-admin", None, None)).unwrap_err();
        assert_eq!(
            messages(&error),
            [
                (
                    "<nil>".to_owned(),
                    "Invalid value: \"object\": The 'kube-admin' tier must have default action 'Pass'"
                        .to_owned()
                ),
                (
                    "<nil>".to_owned(),
                    "Invalid value: \"object\": kube-admin tier order must be 1000".to_owned()
                )
            ]
        );
        let error =
            prepared(tier(API, "kube-baseline", Some(10_000_001.0), Some("Pass"))).unwrap_err();
        assert_eq!(
            messages(&error)[0].1,
            "Invalid value: \"object\": kube-baseline tier order must be 10000000"
        );
    }

    #[test]
    fn the_schema_checks_types_and_both_enums() {
        let mut obj = tier(API, "mine", None, Some("Allow"));
        let error = prepared(obj.clone()).unwrap_err();
        assert_eq!(
            messages(&error),
            [(
                "spec.defaultAction".to_owned(),
                "Unsupported value: \"Allow\": supported values: \"Pass\", \"Deny\"".to_owned()
            )]
        );
        obj["spec"]["defaultAction"] = json!("Drop");
        assert_eq!(messages(&prepared(obj.clone()).unwrap_err()).len(), 2);
        obj["spec"] = json!({"order": "first"});
        assert_eq!(
            messages(&prepared(obj.clone()).unwrap_err()),
            [(
                "spec.order".to_owned(),
                "Invalid value: \"string\": spec.order in body must be of type number: \"string\""
                    .to_owned()
            )]
        );
        // A type error blocks the rules.
        let mut builtin = BUILTIN_TIERS[0].object(API);
        builtin["spec"]["order"] = json!(true);
        assert_eq!(messages(&prepared(builtin).unwrap_err()).len(), 1);
        obj.as_object_mut().unwrap().remove("spec");
        obj["metadata"]["name"] = json!("Bad");
        assert_eq!(
            messages(&prepared(obj).unwrap_err())
                .iter()
                .map(|(f, _)| f.as_str())
                .collect::<Vec<_>>(),
            ["metadata.name", "spec"]
        );
    }

    #[test]
    fn pruning_status_and_integral_orders() {
        let mut obj = tier(API, "mine", Some(5.0), Some("Pass"));
        obj["spec"]["extra"] = json!(1);
        obj["status"] = json!({"conditions": []});
        obj["other"] = json!(1);
        let created = prepared(obj.clone()).unwrap();
        assert_eq!(
            created["spec"],
            json!({"order": 5, "defaultAction": "Pass"})
        );
        assert!(created.get("status").is_none() && created.get("other").is_none());
        let old = json!({"status": {"conditions": [{"type": "Ready"}]}});
        prepare(API, &mut obj, Some(&old)).unwrap();
        assert_eq!(obj["status"], old["status"]);
        assert_eq!(
            prepared(tier(API, "mine", Some(0.5), None)).unwrap()["spec"]["order"],
            0.5
        );
    }

    #[test]
    fn an_unchanged_update_is_not_rejudged() {
        // Stored before the rules existed: no order.
        let mut stored = tier(API, "default", None, Some("Deny"));
        stored["metadata"]["resourceVersion"] = json!("7");
        let mut same = stored.clone();
        same["metadata"]["resourceVersion"] = json!("8");
        assert!(prepare(API, &mut same, Some(&stored)).is_ok());
        let mut relabeled = stored.clone();
        relabeled["metadata"]["labels"] = json!({"a": "b"});
        assert!(prepare(API, &mut relabeled, Some(&stored)).is_err());
    }

    #[test]
    fn deleting_a_builtin_is_refused_by_the_admission_policy_on_v3_only() {
        let error = review_delete(API, "kube-admin").unwrap_err();
        assert_eq!((error.code, error.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            error.message,
            "tiers.projectcalico.org \"kube-admin\" is forbidden: ValidatingAdmissionPolicy \
             'protect-builtin-tiers.projectcalico.org' with binding \
             'protect-builtin-tiers.projectcalico.org' denied request: The built-in tier \
             kube-admin cannot be deleted"
        );
        let details = error.details.unwrap();
        assert_eq!(details["kind"], "tiers");
        assert_eq!(details["group"], "projectcalico.org");
        assert!(review_delete(API, "mine").is_ok());
        assert!(review_delete(CalicoApi::CrdV1, "default").is_ok());
    }

    #[test]
    fn apis_parse_from_their_api_version() {
        for api in [CalicoApi::V3, CalicoApi::CrdV1] {
            assert_eq!(api.to_string().parse::<CalicoApi>(), Ok(api));
        }
        assert!("projectcalico.org/v1".parse::<CalicoApi>().is_err());
    }

    #[test]
    fn both_apis_name_the_same_resource_in_their_group() {
        assert_eq!(
            CalicoApi::CrdV1.resource().qualified_resource(),
            "tiers.crd.projectcalico.org"
        );
        assert!(check_type(CalicoApi::CrdV1, &tier(API, "t", None, None)).is_err());
        assert!(check_type(API, &tier(API, "t", None, None)).is_ok());
    }
}
