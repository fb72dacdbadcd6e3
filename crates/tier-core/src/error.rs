//! The error a write port reports, already classified for the state machine.

use std::fmt;
use std::time::Duration;

/// How the state machine treats a failed write. Adapters map their errors into one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// The write was based on an outdated view (AlreadyExists, Conflict, NotFound on update):
    /// decide again from the next observation, without a backoff sleep. Retryable.
    Stale,
    /// The server or the path to it failed (5xx, 429, timeout, transport): retry with
    /// exponential backoff and jitter, honouring `Retry-After`. Retryable.
    Transient,
    /// The server refused the write itself (admission denial, Invalid, Forbidden,
    /// Unauthorized): a person or another object must change something. Retried slowly, and at
    /// once whenever the observed Tier set changes.
    Blocked,
}

impl ErrorClass {
    /// A short lowercase label, stable for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Stale => "stale",
            ErrorClass::Transient => "transient",
            ErrorClass::Blocked => "blocked",
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
}

impl WriteError {
    /// An error of `class` with `message` and no `Retry-After`.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
            retry_after: None,
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

    /// A [`ErrorClass::Blocked`] error.
    pub fn blocked(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Blocked, message)
    }

    /// The same error with a `Retry-After` hint.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }
}
