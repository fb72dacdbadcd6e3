//! Watches: a chunked stream of one JSON event per line (ADDED, MODIFIED, DELETED, BOOKMARK,
//! ERROR), fed by a [`Feed`] (the Tier store, or one Antrea policy resource), ended by
//! `timeoutSeconds`, [`drop_watches`](crate::TestApiServer::drop_watches) or server shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval};

use crate::reply::{self, ResponseBody};
use crate::server::Shared;
use crate::status::StatusError;
use crate::store::{Change, Store, Subscription, parse_rv};
use crate::tier::{API_VERSION, KIND};
use crate::tiers::TierRequest;

/// What a watch streams: a resource's changes, replayable from a resourceVersion.
pub(crate) trait Feed: Send + Sync + 'static {
    /// Starts a subscription; see [`Store::subscribe`].
    fn subscribe(&self, from: Option<u64>, initial: bool) -> Result<Subscription, StatusError>;
    /// The current resourceVersion with every change queued for `receiver`.
    fn sync_point(
        &self,
        receiver: &mut tokio::sync::broadcast::Receiver<Arc<Change>>,
    ) -> Result<(u64, Vec<Arc<Change>>), tokio::sync::broadcast::error::TryRecvError>;
    /// The current resourceVersion.
    fn resource_version(&self) -> u64;
    /// `kind` of the objects (for BOOKMARK events).
    fn kind(&self) -> &'static str;
    /// Whether [`expire_next_watch`](crate::TestApiServer::expire_next_watch) applies.
    fn expirable(&self) -> bool;
}

impl Feed for Store {
    fn subscribe(&self, from: Option<u64>, initial: bool) -> Result<Subscription, StatusError> {
        Store::subscribe(self, from, initial)
    }

    fn sync_point(
        &self,
        receiver: &mut tokio::sync::broadcast::Receiver<Arc<Change>>,
    ) -> Result<(u64, Vec<Arc<Change>>), tokio::sync::broadcast::error::TryRecvError> {
        Store::sync_point(self, receiver)
    }

    fn resource_version(&self) -> u64 {
        Store::resource_version(self)
    }

    fn kind(&self) -> &'static str {
        KIND
    }

    fn expirable(&self) -> bool {
        true
    }
}

/// Chunks buffered between the watch task and the connection.
const STREAM_BUFFER: usize = 256;

struct WatchParams {
    scope: Scope,
    bookmarks: bool,
    initial_events: bool,
    timeout: Duration,
}

/// Starts a watch of `feed`, limited to `scope` (one Tier for the `/watch/tiers/{name}` form, one
/// namespace for a namespaced path). Label and field selectors are refused, as for lists.
///
/// A resourceVersion older than the retained history, or an armed
/// [`expire_next_watch`](crate::TestApiServer::expire_next_watch), yields a 200 stream
/// holding one ERROR event with a 410 Expired Status, as kube-apiserver's watch cache does.
pub(crate) fn start(
    shared: &Arc<Shared>,
    request: &TierRequest<'_>,
    scope: Scope,
    feed: Arc<dyn Feed>,
) -> Result<Response<ResponseBody>, StatusError> {
    crate::tiers::refuse_selectors(request)?;
    let from = match request.param("resourceVersion") {
        None | Some("" | "0") => None,
        Some(text) => Some(parse_rv(text).ok_or_else(|| {
            StatusError::bad_request(format!("invalid resource version: {text}"))
        })?),
    };
    let params = WatchParams {
        scope,
        bookmarks: request.param("allowWatchBookmarks") == Some("true"),
        initial_events: request.param("sendInitialEvents") == Some("true"),
        timeout: request
            .param("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|t| *t > 0)
            .map_or(shared.config.default_watch_timeout, Duration::from_secs),
    };
    let (sender, receiver) = mpsc::channel(STREAM_BUFFER);
    let expired = feed.expirable()
        && shared
            .expire_watches
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    let subscription = if expired {
        let rv = feed.resource_version();
        Err(StatusError::expired(format!(
            "too old resource version: {} ({})",
            from.unwrap_or(rv),
            rv + 1
        )))
    } else {
        feed.subscribe(from, params.initial_events)
    };
    match subscription {
        Ok(subscription) => {
            tokio::spawn(run(Arc::clone(shared), feed, subscription, params, sender));
        }
        Err(error) => {
            // The channel is empty, so this cannot fail for lack of room; dropping the
            // sender then ends the stream after the event.
            let _ = sender.try_send(line("ERROR", &error.to_status()));
        }
    }
    Ok(reply::stream(receiver))
}

/// Counts a watch as open while alive.
struct OpenWatch<'a>(&'a AtomicUsize);

impl<'a> OpenWatch<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for OpenWatch<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn run(
    shared: Arc<Shared>,
    feed: Arc<dyn Feed>,
    subscription: Subscription,
    params: WatchParams,
    sender: mpsc::Sender<Bytes>,
) {
    let _open = OpenWatch::new(&shared.open_watches);
    let mut generation = shared.watch_generation.subscribe();
    generation.mark_unchanged();
    let mut shutdown = shared.shutdown.clone();
    let Subscription {
        initial,
        mut receiver,
        rv,
    } = subscription;
    for change in &initial {
        if !send_change(&sender, change, &params.scope).await {
            return;
        }
    }
    let kind = feed.kind();
    if params.initial_events && sender.send(bookmark(kind, rv, true)).await.is_err() {
        return;
    }
    let deadline = tokio::time::sleep(params.timeout);
    tokio::pin!(deadline);
    let mut ticker = params
        .bookmarks
        .then_some(shared.config.bookmark_interval)
        .flatten()
        .map(|every| tokio::time::interval_at(Instant::now() + every, every));
    loop {
        tokio::select! {
            () = &mut deadline => break,
            _ = generation.changed() => break,
            () = crate::util::stopped(&mut shutdown) => break,
            () = sender.closed() => break,
            () = tick(&mut ticker) => {
                let Ok((rv, pending)) = feed.sync_point(&mut receiver) else {
                    break;
                };
                for change in &pending {
                    if !send_change(&sender, change, &params.scope).await {
                        return;
                    }
                }
                if sender.send(bookmark(kind, rv, false)).await.is_err() {
                    return;
                }
            }
            received = receiver.recv() => match received {
                Ok(change) => {
                    if !send_change(&sender, &change, &params.scope).await {
                        return;
                    }
                }
                // Lagged too far behind or the store is gone: end the stream; the client
                // re-watches from its last resourceVersion.
                Err(_) => break,
            },
        }
    }
}

async fn tick(ticker: &mut Option<Interval>) {
    match ticker {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Which objects a watch sees, fixed by its path: one name and/or one namespace. Neither ever
/// changes on an object, so an object never moves into or out of a watch's scope.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scope {
    /// Only the object of this name.
    pub(crate) name: Option<String>,
    /// Only objects in this namespace.
    pub(crate) namespace: Option<String>,
}

impl Scope {
    fn matches(&self, object: &Value) -> bool {
        let field = |key: &str| object["metadata"][key].as_str().unwrap_or_default();
        self.name
            .as_deref()
            .is_none_or(|name| field("name") == name)
            && self
                .namespace
                .as_deref()
                .is_none_or(|namespace| field("namespace") == namespace)
    }
}

/// Sends `change` if it lies in `scope`; false when the client is gone.
async fn send_change(sender: &mpsc::Sender<Bytes>, change: &Change, scope: &Scope) -> bool {
    if !scope.matches(&change.object) {
        return true;
    }
    sender
        .send(line(change.kind.as_str(), &change.object))
        .await
        .is_ok()
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": kind, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// A BOOKMARK of `kind` at `rv`; `initial_end` marks the end of `sendInitialEvents`.
fn bookmark(kind: &str, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": kind, "apiVersion": API_VERSION, "metadata": metadata}),
    )
}
