//! What the in-memory API server must know about one controller's Tiers: [`Backend`], with one
//! implementation per controller. The store, caches, faults and call log are shared; only the
//! schema, the objects and the checks of the write path differ.
//!
//! | | Antrea | Calico |
//! |---|---|---|
//! | resource | `tiers.crd.antrea.io` | `tiers.projectcalico.org` |
//! | schema (every write, 422) | name a DNS-1123 subdomain, priority 0..=255 | name a DNS-1123 label, order finite, built-ins pinned (the CRD's validation rules) |
//! | policy on create | the webhook ([`Admission`]): reserved, overlap, 20 priorities | none |
//! | policy on delete | none (deletes here are other actors') | built-ins refused (`protect-builtin-tiers`) |

use std::collections::BTreeMap;
use std::fmt::Debug;

use tier_core::calico::{self, Calico};
use tier_core::{
    Antrea, Controller, MAX_PRIORITY, ObservedTier, TierSpec, check_dns1123_label,
    check_dns1123_subdomain,
};

use crate::admission::{Admission, AdmissionView};
use crate::error::ApiError;

/// How the API server names a controller's Tier resource in its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Resource {
    /// The resource and group, as `AlreadyExists` and `NotFound` print it:
    /// `tiers.crd.antrea.io`.
    pub plural: &'static str,
    /// The kind and group, as `Invalid` prints it: `Tier.crd.antrea.io`.
    pub kind: &'static str,
}

/// Antrea's Tier resource.
pub const ANTREA_TIERS: Resource = Resource {
    plural: "tiers.crd.antrea.io",
    kind: "Tier.crd.antrea.io",
};

/// Calico's Tier resource (`projectcalico.org/v3`, served as native CRDs in current releases).
pub const CALICO_TIERS: Resource = Resource {
    plural: "tiers.projectcalico.org",
    kind: "Tier.projectcalico.org",
};

/// The name of Calico's policy that refuses to delete the built-in Tiers.
pub const CALICO_PROTECT_POLICY: &str = "protect-builtin-tiers.projectcalico.org";

/// A controller whose Tiers the in-memory API server can hold: its schema, how it stores a
/// desired Tier, and the policy its write path runs.
pub trait Backend: Controller {
    /// The policy on the write path beyond the schema, which may be switched off or be
    /// unreachable (Antrea: its webhook, [`Admission`]; Calico: [`calico::Admission`]).
    type Policy: Clone + Debug + Send + Sync + 'static;

    /// The resource, as messages name it.
    const RESOURCE: Resource;

    /// The policy a new cluster runs.
    fn default_policy() -> Option<Self::Policy>;

    /// The CRD's schema (and its validation rules), checked on every write.
    ///
    /// # Errors
    ///
    /// [`ApiError::Invalid`] naming the field.
    fn check_schema(spec: &Self::Spec) -> Result<(), ApiError>;

    /// `spec` as the store holds it at `resource_version`.
    fn stored(spec: &Self::Spec, resource_version: String) -> Self::Observed;

    /// The writable fields of a stored Tier (what an editor starts from).
    fn spec_of(tier: &Self::Observed) -> Self::Spec;

    /// Gives `spec` the name `name` (an edit cannot rename).
    fn rename(spec: &mut Self::Spec, name: &str);

    /// Which view of the Tiers the policy reads on a create.
    fn view(policy: &Self::Policy) -> AdmissionView;

    /// The policy's review of creating `spec`, given the Tiers it reads.
    ///
    /// # Errors
    ///
    /// The refusal, worded as the controller's.
    fn review_create(
        policy: &Self::Policy,
        existing: &BTreeMap<String, Self::Observed>,
        spec: &Self::Spec,
    ) -> Result<(), ApiError>;

    /// The policy's review of deleting the Tier called `name`.
    ///
    /// # Errors
    ///
    /// The refusal, worded as the controller's.
    fn review_delete(policy: &Self::Policy, name: &str) -> Result<(), ApiError>;
}

fn invalid(
    resource: Resource,
    name: &str,
    field: &'static str,
    value: String,
    detail: String,
) -> ApiError {
    ApiError::Invalid {
        resource,
        name: name.to_owned(),
        field,
        value,
        detail,
    }
}

impl Backend for Antrea {
    type Policy = Admission;

    const RESOURCE: Resource = ANTREA_TIERS;

    fn default_policy() -> Option<Admission> {
        Some(Admission::antrea())
    }

    fn check_schema(spec: &TierSpec) -> Result<(), ApiError> {
        if let Err(detail) = check_dns1123_subdomain(&spec.name) {
            let value = format!("{:?}", spec.name);
            let detail = format!("a lowercase RFC 1123 subdomain: {detail}");
            return Err(invalid(
                ANTREA_TIERS,
                &spec.name,
                "metadata.name",
                value,
                detail,
            ));
        }
        let bound = if spec.priority < 0 {
            Some("greater than or equal to 0".to_owned())
        } else if spec.priority > MAX_PRIORITY {
            Some(format!("less than or equal to {MAX_PRIORITY}"))
        } else {
            None
        };
        match bound {
            Some(bound) => Err(invalid(
                ANTREA_TIERS,
                &spec.name,
                "spec.priority",
                spec.priority.to_string(),
                format!("spec.priority in body should be {bound}"),
            )),
            None => Ok(()),
        }
    }

    fn stored(spec: &TierSpec, resource_version: String) -> ObservedTier {
        ObservedTier {
            resource_version,
            ..Antrea::expected(spec)
        }
    }

    fn spec_of(tier: &ObservedTier) -> TierSpec {
        TierSpec::new(&tier.name, tier.priority, &tier.description)
    }

    fn rename(spec: &mut TierSpec, name: &str) {
        name.clone_into(&mut spec.name);
    }

    fn view(policy: &Admission) -> AdmissionView {
        policy.view
    }

    fn review_create(
        policy: &Admission,
        existing: &BTreeMap<String, ObservedTier>,
        spec: &TierSpec,
    ) -> Result<(), ApiError> {
        policy.review_create(existing, spec)
    }

    /// Antrea's webhook checks creates only here: deletes come from other actors, on purpose.
    fn review_delete(_: &Admission, _: &str) -> Result<(), ApiError> {
        Ok(())
    }
}

impl Backend for Calico {
    type Policy = calico::Admission;

    const RESOURCE: Resource = CALICO_TIERS;

    fn default_policy() -> Option<calico::Admission> {
        Some(calico::Admission::calico())
    }

    /// The name rule, a finite order, and the CRD's validation rules pinning the built-in
    /// Tiers (one home: [`calico::Admission::review_write`]).
    fn check_schema(spec: &calico::TierSpec) -> Result<(), ApiError> {
        if let Err(detail) = check_dns1123_label(&spec.name) {
            let value = format!("{:?}", spec.name);
            let detail = format!("a lowercase RFC 1123 label: {detail}");
            return Err(invalid(
                CALICO_TIERS,
                &spec.name,
                "metadata.name",
                value,
                detail,
            ));
        }
        calico::Admission::calico()
            .review_write(spec)
            .map_err(|denial| {
                let value = spec
                    .order
                    .map_or_else(|| "null".to_owned(), |o| o.to_string());
                invalid(CALICO_TIERS, &spec.name, "spec", value, denial.0)
            })
    }

    fn stored(spec: &calico::TierSpec, resource_version: String) -> calico::ObservedTier {
        calico::ObservedTier {
            resource_version,
            ..Calico::expected(spec)
        }
    }

    fn spec_of(tier: &calico::ObservedTier) -> calico::TierSpec {
        calico::TierSpec::new(&tier.name, tier.order, tier.default_action)
    }

    fn rename(spec: &mut calico::TierSpec, name: &str) {
        name.clone_into(&mut spec.name);
    }

    fn view(_: &calico::Admission) -> AdmissionView {
        AdmissionView::Store
    }

    /// Calico has no create rule beyond its schema (no overlap, no limit).
    fn review_create(
        _: &calico::Admission,
        _: &BTreeMap<String, calico::ObservedTier>,
        _: &calico::TierSpec,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    fn review_delete(policy: &calico::Admission, name: &str) -> Result<(), ApiError> {
        policy
            .review_delete(name)
            .map_err(|denial| ApiError::PolicyDenied {
                resource: CALICO_TIERS,
                name: name.to_owned(),
                policy: CALICO_PROTECT_POLICY,
                message: denial.0,
            })
    }
}
