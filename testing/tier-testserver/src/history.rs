//! Change history: the committed changes of a watched resource ([`Change`]), what a new
//! watch starts from ([`Subscription`]), and the [`Feed`] a watch streams from, implemented by
//! the Tier store and by each Antrea policy resource.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use crate::status::StatusError;
use crate::util::{object_rv, parse_rv};

/// Type of a change, as watch events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    /// The watch event `type`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    /// resourceVersion of the write.
    pub(crate) rv: u64,
    pub(crate) kind: ChangeType,
    /// The object after the write (for a delete: the last state, carrying the delete's rv).
    pub(crate) object: Value,
    /// The object before the write, if it existed.
    pub(crate) old: Option<Value>,
}

/// A new watch's starting point: what to send first and the receiver of later changes.
pub(crate) struct Subscription {
    pub(crate) initial: Vec<Arc<Change>>,
    pub(crate) receiver: broadcast::Receiver<Arc<Change>>,
    /// The store's resourceVersion when the subscription was made.
    pub(crate) rv: u64,
}

/// What a watch streams: a resource's changes, replayable from a resourceVersion.
pub(crate) trait Feed: Send + Sync + 'static {
    /// Starts a subscription from `from` (`None`: now, with synthetic ADDED events), or with
    /// the full state first when `initial` (`sendInitialEvents`); 410 Expired when the
    /// changes after `from` are no longer retained.
    fn subscribe(&self, from: Option<u64>, initial: bool) -> Result<Subscription, StatusError>;
    /// The current resourceVersion with every change queued for `receiver`.
    fn sync_point(
        &self,
        receiver: &mut broadcast::Receiver<Arc<Change>>,
    ) -> Result<(u64, Vec<Arc<Change>>), broadcast::error::TryRecvError>;
    /// The current resourceVersion.
    fn resource_version(&self) -> u64;
    /// `apiVersion` of the objects (for BOOKMARK events).
    fn api_version(&self) -> &str;
    /// `kind` of the objects (for BOOKMARK events).
    fn kind(&self) -> &str;
    /// Whether [`expire_next_watch`](crate::TestApiServer::expire_next_watch) applies.
    fn expirable(&self) -> bool;
}

/// Synthetic ADDED changes for `objects`, at their own resourceVersion (else `rv`): what a
/// watch from "now" sends first.
pub(crate) fn added<'a>(objects: impl Iterator<Item = &'a Value>, rv: u64) -> Vec<Arc<Change>> {
    objects
        .map(|obj| {
            Arc::new(Change {
                rv: object_rv(obj).and_then(parse_rv).unwrap_or(rv),
                kind: ChangeType::Added,
                object: obj.clone(),
                old: None,
            })
        })
        .collect()
}

/// Every change already queued for `receiver`.
pub(crate) fn drain(
    receiver: &mut broadcast::Receiver<Arc<Change>>,
) -> Result<Vec<Arc<Change>>, broadcast::error::TryRecvError> {
    let mut pending = Vec::new();
    loop {
        match receiver.try_recv() {
            Ok(change) => pending.push(change),
            Err(broadcast::error::TryRecvError::Empty) => return Ok(pending),
            Err(e) => return Err(e),
        }
    }
}
