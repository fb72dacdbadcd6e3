//! [`KubeTier`]: what the shared lister and writer need to know about one controller's Tier
//! resource, and nothing else.
//!
//! [`KubeLister`](crate::KubeLister) (reflector, readiness, generation) and
//! [`KubeWriter`](crate::KubeWriter) (POST, PUT with a resourceVersion precondition, no retry,
//! [`classify`](mod@crate::classify)) are written once, generic over the Tier object type `T:
//! KubeTier`. A controller adds one implementation: which object the API serves, how it reads
//! as the core's observed Tier, how a desired Tier becomes an object (or is set into a cached
//! one for an update), and which `spec` fields tierd ensures (whose writer
//! [`last_writer`] reports).
//!
//! | controller | object | resource ([`kube::Resource::DynamicType`]) |
//! |---|---|---|
//! | Antrea | [`crd::Tier`](crate::crd::Tier) | `()`: `tiers.crd.antrea.io/v1beta1`, fixed |
//! | Calico | [`calico::CalicoTier`](crate::calico::CalicoTier) | an [`ApiResource`](kube::core::ApiResource): group/version configured ([`calico::CalicoApi`](crate::calico::CalicoApi)) |
//!
//! The resource value (the dynamic type) is configuration of the adapter, held by the lister
//! and handed to its writer; the core never sees it.

use std::fmt::Debug;
use std::hash::Hash;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tier_core::{Controller, FieldWriter};

use crate::explain::ResourceHints;

/// The core's desired Tier of `T`'s controller.
pub type Desired<T> = <<T as KubeTier>::Controller as Controller>::Spec;

/// The core's observed Tier of `T`'s controller.
pub type Observed<T> = <<T as KubeTier>::Controller as Controller>::Observed;

/// A Tier object of one controller, as the shared lister and writer handle it.
pub trait KubeTier:
    kube::Resource<DynamicType: Clone + Eq + Hash + Debug + Send + Sync + 'static>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The core's controller whose Tiers these objects are ([`tier_core::Antrea`],
    /// [`tier_core::calico::Calico`]): its desired and observed Tier types.
    type Controller: Controller;

    /// The `spec` fields tierd ensures, as `managedFields` name them (`f:priority`): the
    /// owner of any of them with the latest time is the Tier's last writer.
    const ENSURED_FIELDS: &'static [&'static str];

    /// What the core sees of this object (name, ensured fields, resourceVersion, last writer).
    fn observe(&self) -> Observed<Self>;

    /// A fresh object for `desired` (name and spec only) of `resource`.
    fn object(desired: &Desired<Self>, resource: &Self::DynamicType) -> Self;

    /// Sets the ensured fields of this (cached) object to `desired`'s, keeping everything else.
    fn set_desired(&mut self, desired: &Desired<Self>);

    /// What failure messages say about `resource` (its name, RBAC file, how to install it).
    fn hints(resource: &Self::DynamicType) -> ResourceHints;

    /// The resource's name as RBAC and CRDs spell it (`tiers.crd.antrea.io`), for messages.
    fn resource_name(resource: &Self::DynamicType) -> String {
        let group = Self::group(resource);
        let plural = Self::plural(resource);
        if group.is_empty() {
            plural.into_owned()
        } else {
            format!("{plural}.{group}")
        }
    }
}

/// The `managedFields` entry of `object` that owns one of `T::ENSURED_FIELDS` under `spec` with
/// the latest time: who last set a field tierd corrects. `None` when no entry says
/// (managedFields stripped, or an entry without a manager).
pub fn last_writer<T: KubeTier>(object: &T) -> Option<FieldWriter> {
    let owns = |entry: &&ManagedFieldsEntry| {
        entry
            .fields_v1
            .as_ref()
            .and_then(|fields| fields.0.get("f:spec"))
            .is_some_and(|spec| T::ENSURED_FIELDS.iter().any(|f| spec.get(*f).is_some()))
    };
    let entry = object
        .meta()
        .managed_fields
        .as_ref()?
        .iter()
        .filter(owns)
        .max_by_key(|entry| entry.time.as_ref().map(|t| t.0))?;
    Some(FieldWriter {
        manager: entry.manager.clone()?,
        time: entry.time.as_ref().map(|t| t.0.to_string()),
    })
}
