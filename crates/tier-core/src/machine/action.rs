//! What a machine asks its driver to do ([`Action`]), and what the observed set predicts about
//! a create ([`Blocker`]).

use crate::antrea::Antrea;
use crate::controller::Controller;

/// What the observed set says about creating this Tier: the create would be denied, and these
/// Tiers are why. Computed by the [`Fleet`](crate::Fleet) with the controller's
/// [`predict`](crate::Controller::predict).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    /// The Tiers in the way (for Antrea: holding the priority the create asks for): removing
    /// (or changing) them lets it through. Empty when no single Tier is to blame (Antrea's
    /// limit of distinct priorities, where removing any one of many would do).
    pub tiers: Vec<String>,
    /// What people read, e.g. `priority 150 is held by Tier team-a`.
    pub reason: String,
}

/// The one call a machine asks its driver to make.
#[must_use = "an action must be performed and its outcome handed back"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action<C: Controller = Antrea> {
    /// Create the Tier.
    Create(C::Spec),
    /// Replace the Tier's fields, if its resourceVersion is still `resource_version`.
    Update {
        /// The desired Tier.
        tier: C::Spec,
        /// The precondition.
        resource_version: String,
    },
}

/// The kind of a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// A create.
    Create,
    /// An update.
    Update,
}

impl<C: Controller> Action<C> {
    /// Whether the action creates or updates.
    pub fn kind(&self) -> WriteKind {
        match self {
            Action::Create(_) => WriteKind::Create,
            Action::Update { .. } => WriteKind::Update,
        }
    }

    /// The desired Tier the action writes.
    pub fn tier(&self) -> &C::Spec {
        match self {
            Action::Create(tier) | Action::Update { tier, .. } => tier,
        }
    }

    /// `"create"` or `"update"`.
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Create(_) => "create",
            Action::Update { .. } => "update",
        }
    }
}
