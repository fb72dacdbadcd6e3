//! The error a write port reports, already classified by cause for the state machine.
//!
//! Adapters translate their own errors (HTTP codes, Kubernetes reasons) into a [`WriteError`]
//! at the edge; the core reacts to the [`ErrorClass`] and shows the message to people.

use std::fmt;
use std::time::Duration;

/// Why a write failed, as far as the state machine cares. Adapters map their errors into one of
/// these; each class has its own retry rule (see [`TierMachine`](crate::TierMachine)). Every class is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// The write was based on an outdated view (AlreadyExists, Conflict, NotFound on update):
    /// decide again from the next observation, without a backoff sleep.
    Stale,
    /// The server or the path to it failed (5xx, 429, timeout, transport): retry with
    /// exponential backoff and jitter, honouring `Retry-After`.
    Transient,
    /// The server's admission refused the write (a webhook denial, Invalid). If the writer's own
    /// cache shows why, the Tier is blocked until that changes; if not, the webhook's view lags
    /// ours and a short backoff follows.
    Denied,
    /// The writer lacks a permission (Forbidden, Unauthorized, bad credentials): no Tier change
    /// helps; retried on a slow backoff of its own.
    Forbidden,
    /// The resource type is not served (a create answered 404: the CRD is missing): retried when
    /// the cache lists again, and slowly otherwise.
    NotInstalled,
}

impl ErrorClass {
    /// Every class, in declaration order.
    pub const ALL: [ErrorClass; 5] = [
        ErrorClass::Stale,
        ErrorClass::Transient,
        ErrorClass::Denied,
        ErrorClass::Forbidden,
        ErrorClass::NotInstalled,
    ];

    /// A short lowercase label, stable for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Stale => "stale",
            ErrorClass::Transient => "transient",
            ErrorClass::Denied => "denied",
            ErrorClass::Forbidden => "forbidden",
            ErrorClass::NotInstalled => "not-installed",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed create or update, as reported by a [`TierWriter`](crate::TierWriter).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{class} error: {message}")]
pub struct WriteError {
    /// How the state machine should react.
    pub class: ErrorClass,
    /// The server's message (or the transport error), shown to people as is.
    pub message: String,
    /// The server's `Retry-After`, used as a lower bound of the next wait.
    pub retry_after: Option<Duration>,
    /// For [`ErrorClass::Forbidden`]: the missing permission, as the adapter read it from the
    /// server's message (e.g. `create tiers.crd.antrea.io`), when it could.
    pub permission: Option<String>,
}

impl WriteError {
    /// An error of `class` with `message` and no `Retry-After`.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
            retry_after: None,
            permission: None,
        }
    }

    /// A [`ErrorClass::Stale`] error.
    pub fn stale(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Stale, message)
    }

    /// A [`ErrorClass::Transient`] error.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Transient, message)
    }

    /// A [`ErrorClass::Denied`] error.
    pub fn denied(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Denied, message)
    }

    /// A [`ErrorClass::Forbidden`] error; `permission` names what is missing, if known.
    pub fn forbidden(message: impl Into<String>, permission: Option<String>) -> Self {
        Self {
            permission,
            ..Self::new(ErrorClass::Forbidden, message)
        }
    }

    /// A [`ErrorClass::NotInstalled`] error.
    pub fn not_installed(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::NotInstalled, message)
    }

    /// The same error with a `Retry-After` hint.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }
}

/// Why a [`PriorityClaims`](crate::PriorityClaims) port did not claim a priority.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// Another Tier's live claim holds the priority (or the claims are at their bound): the
    /// create must be denied, with this message.
    #[error(transparent)]
    Taken(#[from] crate::admission::Denial),
    /// The shared store failed or did not answer in time, so whether the priority is free is
    /// unknown; classified as a write to the store (transient, forbidden, ...).
    #[error("claiming the priority failed: {0}")]
    Unavailable(WriteError),
}
