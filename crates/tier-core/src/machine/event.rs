//! [`TierEvent`]: what is worth telling people about one Tier, one event per episode.

use std::fmt;

use crate::observe::{Drift, FieldWriter};

/// Something worth telling people about one Tier: one event per episode, never one per retry.
/// Emitted by the machine ([`TierMachine::poll_event`](super::TierMachine::poll_event)) in order, never coalesced; logs,
/// Kubernetes Events and the demo all read this one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TierEvent {
    /// tierd created the Tier.
    Created {
        /// The Tier.
        tier: String,
    },
    /// tierd updated the Tier's fields to the desired ones.
    Corrected {
        /// The Tier.
        tier: String,
        /// The fields that differed from the desired ones where the update was decided
        /// ([`Controller::drift`](crate::Controller::drift)): `description`.
        fields: Drift,
    },
    /// A create would be denied because of other Tiers; nothing is sent until they change.
    Blocked {
        /// The Tier.
        tier: String,
        /// The Tiers in the way.
        blockers: Vec<String>,
        /// Why.
        reason: String,
    },
    /// The server keeps denying a write the observed set allows (or denies it by a rule tierd
    /// recognises, `rule`).
    Denied {
        /// The Tier.
        tier: String,
        /// The server's message.
        message: String,
        /// The rule the denial comes from and its fix, in words, when the controller recognises
        /// it ([`Controller::explain_denial`](crate::Controller::explain_denial)); `None`: the
        /// cache shows no reason.
        rule: Option<String>,
    },
    /// tierd lacks a permission to write the Tier.
    Forbidden {
        /// The Tier.
        tier: String,
        /// The missing permission, if known.
        permission: Option<String>,
        /// The server's message.
        message: String,
    },
    /// The Tier resource type is not installed.
    NotInstalled {
        /// The Tier.
        tier: String,
        /// The server's message.
        message: String,
    },
    /// Another writer undid tierd's accepted writes and the write budget is spent: corrections
    /// are held off.
    Contested {
        /// The Tier.
        tier: String,
        /// tierd's accepted writes that another writer undid, since the budget was last full.
        streak: u32,
        /// The writer that last undid one, where the object names it (its `managedFields`);
        /// `None` for a deletion.
        by: Option<FieldWriter>,
    },
    /// A contest ended: the write budget is full again (no correction was needed for
    /// `burst × refill` after the last hold).
    ContestEnded {
        /// The Tier.
        tier: String,
    },
}

impl TierEvent {
    /// The Tier the event is about.
    pub fn tier(&self) -> &str {
        match self {
            TierEvent::Created { tier }
            | TierEvent::Corrected { tier, .. }
            | TierEvent::Blocked { tier, .. }
            | TierEvent::Denied { tier, .. }
            | TierEvent::Forbidden { tier, .. }
            | TierEvent::NotInstalled { tier, .. }
            | TierEvent::Contested { tier, .. }
            | TierEvent::ContestEnded { tier } => tier,
        }
    }

    /// Whether people should look at it (a Kubernetes `Warning`), rather than just know it.
    pub fn is_warning(&self) -> bool {
        !matches!(
            self,
            TierEvent::Created { .. }
                | TierEvent::Corrected { .. }
                | TierEvent::ContestEnded { .. }
        )
    }
}

impl fmt::Display for TierEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TierEvent::Created { tier } => write!(f, "created Tier {tier}"),
            TierEvent::Corrected { tier, fields } => {
                write!(f, "corrected the {fields} of Tier {tier}")
            }
            TierEvent::Blocked { tier, reason, .. } => {
                write!(f, "Tier {tier} cannot be created: {reason}")
            }
            TierEvent::Denied {
                tier,
                message,
                rule: Some(rule),
            } => write!(
                f,
                "the API server denies writes of Tier {tier}: {message}; {rule}"
            ),
            TierEvent::Denied {
                tier,
                message,
                rule: None,
            } => write!(
                f,
                "the API server keeps denying writes of Tier {tier} although tierd's cache shows \
                 no reason: {message}"
            ),
            TierEvent::Forbidden {
                tier,
                permission: Some(permission),
                ..
            } => write!(f, "tierd may not {permission} (Tier {tier}); grant it"),
            TierEvent::Forbidden { tier, message, .. } => {
                write!(f, "tierd may not write Tier {tier}: {message}")
            }
            TierEvent::NotInstalled { tier, message } => {
                write!(f, "cannot create Tier {tier}: {message}")
            }
            TierEvent::Contested { tier, streak, by } => write!(
                f,
                "{} undid tierd's accepted writes of Tier {tier} ({}); tierd now holds off its \
                 corrections",
                super::state::writer_words(by.as_ref()),
                super::state::times(*streak)
            ),
            TierEvent::ContestEnded { tier } => {
                write!(f, "Tier {tier} is no longer contested")
            }
        }
    }
}
