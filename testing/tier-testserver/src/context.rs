//! What every handler works with: the server's shared state ([`Shared`]) and the decoded
//! request ([`ApiRequest`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use tokio::sync::watch;

use crate::admission::Admission;
use crate::config::ServerConfig;
use crate::faults::Faults;
use crate::log::LogBook;
use crate::status::StatusError;
use crate::store::Store;

/// A user's permission to use `verb` on the non-resource URL `path` (RBAC's `nonResourceURLs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) user: String,
    pub(crate) verb: String,
    pub(crate) path: String,
}

/// State shared by the handle and every connection task.
pub(crate) struct Shared {
    pub(crate) store: Store,
    pub(crate) users: RwLock<BTreeMap<String, String>>,
    /// Non-resource permissions SubjectAccessReviews allow.
    pub(crate) grants: RwLock<Vec<Grant>>,
    pub(crate) admission: RwLock<Arc<Admission>>,
    pub(crate) faults: Faults,
    pub(crate) log: LogBook,
    /// Bumped by `drop_watches`; every open watch ends when it changes.
    pub(crate) watch_generation: watch::Sender<u64>,
    /// How many upcoming watch requests get a 410 ERROR event.
    pub(crate) expire_watches: AtomicUsize,
    pub(crate) open_watches: AtomicUsize,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) config: ServerConfig,
    pub(crate) addr: SocketAddr,
}

impl Shared {
    /// The user owning bearer `token`.
    pub(crate) fn user_for(&self, token: &str) -> Option<String> {
        self.users
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
            .cloned()
    }

    /// The non-resource grants.
    pub(crate) fn grants(&self) -> Vec<Grant> {
        self.grants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn admission(&self) -> Arc<Admission> {
        Arc::clone(
            &self
                .admission
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

/// A decoded resource request: who sent it, its query and its body.
pub(crate) struct ApiRequest<'a> {
    pub(crate) user: &'a str,
    pub(crate) query: &'a [(String, String)],
    /// Media type of the body, lowercased, without parameters.
    pub(crate) content_type: String,
    pub(crate) body: Bytes,
}

impl ApiRequest<'_> {
    /// The last value of query parameter `key`.
    pub(crate) fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the query asks for a dry run (`dryRun=All`).
    pub(crate) fn dry_run(&self) -> bool {
        self.query.iter().any(|(k, v)| k == "dryRun" && v == "All")
    }
}

/// Label and field selectors are not implemented: neither tierd nor kube's default watcher
/// sends them, so a request that does is refused rather than answered unfiltered.
pub(crate) fn refuse_selectors(request: &ApiRequest<'_>) -> Result<(), StatusError> {
    for param in ["labelSelector", "fieldSelector"] {
        if request.param(param).is_some_and(|s| !s.is_empty()) {
            return Err(StatusError::bad_request(format!(
                "{param} is not implemented by tier-testserver (tierd never sends one)"
            )));
        }
    }
    Ok(())
}
