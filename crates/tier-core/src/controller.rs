//! The seam between the decision code and one controller's Tiers.
//!
//! The machine, the fleet, the observation and the driver know only these traits. Each
//! controller is a marker type implementing [`Controller`]: [`Antrea`](crate::Antrea) (the
//! default of every generic type) and [`Calico`](crate::calico::Calico). What differs between
//! them is data and rules: the fields tierd ensures and which of them differ
//! ([`Controller::drift`], from which [`Controller::in_sync`] follows), the validation of a
//! desired set ([`Controller::validate`]), the prediction of the controller's admission
//! ([`Controller::predict`]) and the words for a denial it recognises
//! ([`Controller::explain_denial`]).

use std::fmt::Debug;

use crate::machine::Blocker;
use crate::observe::{Drift, FieldWriter, Snapshot};
use crate::spec::Violation;

/// A desired Tier of some controller: its name and the fields tierd ensures.
pub trait DesiredTier: Clone + Debug + PartialEq + Send + Sync + 'static {
    /// The controller whose Tier this is (lets `DesiredSet::new(specs, ..)` infer it).
    type Controller: Controller<Spec = Self>;
    /// The Tier's object name.
    fn name(&self) -> &str;
}

/// A Tier as a cache holds it.
pub trait CachedTier: Clone + Debug + PartialEq + Send + Sync + 'static {
    /// The controller whose Tier this is (lets `Snapshot::synced(.., tiers)` infer it).
    type Controller: Controller<Observed = Self>;
    /// The Tier's object name.
    fn name(&self) -> &str;
    /// The object's resourceVersion, an opaque token used as a write precondition.
    fn resource_version(&self) -> &str;
    /// Who last set the fields tierd ensures, where the object says (its `managedFields`).
    fn last_writer(&self) -> Option<&FieldWriter>;
}

/// Everything the decision code needs to know about one controller's Tiers.
pub trait Controller: Copy + Debug + Default + PartialEq + Eq + Send + Sync + 'static {
    /// A desired Tier.
    type Spec: DesiredTier<Controller = Self>;
    /// A Tier as the cache holds it.
    type Observed: CachedTier<Controller = Self>;
    /// What the controller's admission allows, used to predict denied creates.
    type Admission: Clone + Debug + PartialEq + Send + Sync + 'static;
    /// The rules a desired set must satisfy.
    type Rules: Clone + Debug + Default + PartialEq + Send + Sync + 'static;

    /// The controller's name, as people read it: `Antrea`, `Calico`.
    const NAME: &'static str;

    /// The ensured fields of `observed` that differ from `desired`'s, named as the API names
    /// them: the one comparison behind [`in_sync`](Self::in_sync), the decision, the
    /// `Corrected` event and `tierd plan`.
    fn drift(desired: &Self::Spec, observed: &Self::Observed) -> Drift;

    /// Whether `observed` carries exactly the ensured fields of `desired` (no [`drift`](Self::drift)).
    fn in_sync(desired: &Self::Spec, observed: &Self::Observed) -> bool {
        Self::drift(desired, observed).is_empty()
    }

    /// Words for a denial of a write of `desired` (observed as `observed`) whose cause the
    /// controller recognises in the server's `message`: a rule that retrying cannot pass, said
    /// in words with the fix. `None` (the default) for any other denial, which tierd takes for
    /// an admission webhook whose view lags its own.
    fn explain_denial(
        desired: &Self::Spec,
        observed: Option<&Self::Observed>,
        message: &str,
    ) -> Option<String> {
        let _ = (desired, observed, message);
        None
    }

    /// How the cache will show `desired` once created (empty resourceVersion, no writer).
    fn expected(desired: &Self::Spec) -> Self::Observed;

    /// Every violation of the set's per-Tier and cross-Tier rules, in input order (the
    /// emptiness of the set is checked by [`DesiredSet::new`](crate::DesiredSet::new)).
    fn validate(tiers: &[Self::Spec], rules: &Self::Rules) -> Vec<Violation>;

    /// Whether the controller's admission would deny creating `desired` given `snapshot`, and
    /// which Tiers are in the way; `None` when it would pass or nothing is known yet.
    fn predict(
        admission: &Self::Admission,
        desired: &Self::Spec,
        snapshot: &Snapshot<Self>,
    ) -> Option<Blocker>;

    /// The admission used when a configuration does not say; `None` predicts nothing.
    fn default_admission() -> Option<Self::Admission>;
}
