//! The errors the in-memory API server answers with, worded like kube-apiserver's.
//!
//! Each [`ApiError`] knows its HTTP code, its `reason` and the [`ErrorClass`] the core gives it;
//! it converts into the port's [`WriteError`]:
//!
//! ```
//! use tier_core::{ErrorClass, WriteError};
//! use tier_memory::ApiError;
//! use tier_memory::backend::ANTREA_TIERS;
//!
//! let err = ApiError::AlreadyExists { resource: ANTREA_TIERS, name: "baseline".into() };
//! assert_eq!((err.code(), err.reason()), (409, "AlreadyExists"));
//! let write: WriteError = err.into();
//! assert_eq!(write.class, ErrorClass::Stale);
//! assert_eq!(write.message, r#"tiers.crd.antrea.io "baseline" already exists"#);
//! ```

use tier_core::{ErrorClass, WriteError};

use crate::backend::Resource;

/// The name of Antrea's Tier validating webhook.
pub const WEBHOOK: &str = "tiervalidator.antrea.io";

/// A refused API call. Stale variants are retryable after a fresh look at the cache; the others
/// need something to change first (or, for [`WebhookUnreachable`](Self::WebhookUnreachable),
/// time).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 409 `AlreadyExists`: a create of a name that exists.
    #[error("{} \"{name}\" already exists", resource.plural)]
    AlreadyExists {
        /// The resource.
        resource: Resource,
        /// The Tier's name.
        name: String,
    },
    /// 409 `Conflict`: an update whose resourceVersion is no longer current.
    #[error(
        "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please \
         apply your changes to the latest version and try again",
        resource.plural
    )]
    Conflict {
        /// The resource.
        resource: Resource,
        /// The Tier's name.
        name: String,
    },
    /// 404 `NotFound`: an update or delete of a name that does not exist.
    #[error("{} \"{name}\" not found", resource.plural)]
    NotFound {
        /// The resource.
        resource: Resource,
        /// The Tier's name.
        name: String,
    },
    /// 422 `Invalid`: the object breaks the CRD schema or lacks a resourceVersion on update.
    #[error("{} \"{name}\" is invalid: {field}: Invalid value: {value}: {detail}", resource.kind)]
    Invalid {
        /// The resource.
        resource: Resource,
        /// The Tier's name.
        name: String,
        /// The offending field path, e.g. `spec.priority`.
        field: &'static str,
        /// The offending value, rendered as the API server does.
        value: String,
        /// What is wrong with it.
        detail: String,
    },
    /// 400 with an empty reason: the validating webhook denied the request.
    #[error("admission webhook \"{WEBHOOK}\" denied the request: {message}")]
    Denied {
        /// The webhook's own message, e.g. `tier x priority 150 overlaps with existing Tier`.
        message: String,
    },
    /// 422 `Invalid`: a ValidatingAdmissionPolicy denied the request (Calico's protection of
    /// its built-in Tiers).
    #[error(
        "{} \"{name}\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding \
         '{policy}' denied request: {message}",
        resource.plural
    )]
    PolicyDenied {
        /// The resource.
        resource: Resource,
        /// The Tier's name.
        name: String,
        /// The policy's name.
        policy: &'static str,
        /// The policy's message.
        message: String,
    },
    /// 500 `InternalError`: the webhook could not be reached (failure policy Fail).
    #[error(
        "Internal error occurred: failed calling webhook \"{WEBHOOK}\": failed to call webhook: \
         Post \"https://antrea.kube-system.svc:443/validate/tier?timeout=5s\": no endpoints \
         available for service \"antrea\""
    )]
    WebhookUnreachable,
}

impl ApiError {
    /// The HTTP status code kube-apiserver would answer with.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } => 409,
            ApiError::NotFound { .. } => 404,
            ApiError::Invalid { .. } | ApiError::PolicyDenied { .. } => 422,
            ApiError::Denied { .. } => 400,
            ApiError::WebhookUnreachable => 500,
        }
    }

    /// The Status `reason` (empty for a webhook denial, as kube-apiserver sends it).
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } => "Conflict",
            ApiError::NotFound { .. } => "NotFound",
            ApiError::Invalid { .. } | ApiError::PolicyDenied { .. } => "Invalid",
            ApiError::Denied { .. } => "",
            ApiError::WebhookUnreachable => "InternalError",
        }
    }

    /// How the core treats this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            ApiError::AlreadyExists { .. }
            | ApiError::Conflict { .. }
            | ApiError::NotFound { .. } => ErrorClass::Stale,
            ApiError::Invalid { .. } | ApiError::PolicyDenied { .. } | ApiError::Denied { .. } => {
                ErrorClass::Denied
            }
            ApiError::WebhookUnreachable => ErrorClass::Transient,
        }
    }
}

impl From<ApiError> for WriteError {
    fn from(error: ApiError) -> Self {
        WriteError::new(error.class(), error.to_string())
    }
}
