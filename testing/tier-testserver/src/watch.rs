//! Watches: a chunked stream of one JSON event per line (ADDED, MODIFIED, DELETED, BOOKMARK,
//! ERROR), fed by a `Feed` (the Tier store, or one Antrea policy resource), ended by
//! `timeoutSeconds`, [`drop_watches`](crate::TestApiServer::drop_watches) or server shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval};

use crate::context::{ApiRequest, Shared, refuse_selectors};
use crate::history::{Change, Feed, Subscription};
use crate::reply::{self, ResponseBody};
use crate::status::StatusError;
use crate::util::parse_rv;

/// The longest a watch lasts, whatever `timeoutSeconds` asks.
const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

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
    request: &ApiRequest<'_>,
    scope: Scope,
    feed: Arc<dyn Feed>,
) -> Result<Response<ResponseBody>, StatusError> {
    refuse_selectors(request)?;
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
            .map_or(shared.config.default_watch_timeout, Duration::from_secs)
            .min(MAX_WATCH_TIMEOUT),
    };
    let slot = OpenWatch::reserve(shared)?;
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
            rv.saturating_add(1)
        )))
    } else {
        feed.subscribe(from, params.initial_events)
    };
    match subscription {
        Ok(subscription) => {
            tokio::spawn(run(slot, feed, subscription, params, sender));
        }
        Err(error) => {
            // The channel is empty, so this cannot fail for lack of room; dropping the
            // sender then ends the stream after the event.
            let _ = sender.try_send(line("ERROR", &error.to_status()));
        }
    }
    Ok(reply::stream(receiver))
}

/// A watch counted as open while alive; there are at most
/// [`Limits::max_watches`](crate::config::Limits) at once.
struct OpenWatch(Arc<Shared>);

impl OpenWatch {
    /// Counts one more open watch, or 429 TooManyRequests (`Retry-After: 1`) at the bound.
    fn reserve(shared: &Arc<Shared>) -> Result<Self, StatusError> {
        let max = shared.config.limits.max_watches;
        shared
            .open_watches
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|_| {
                StatusError::new(
                    429,
                    "TooManyRequests",
                    format!("too many open watches (at most {max}), please try again later"),
                )
                .with_retry_after(1)
            })?;
        Ok(Self(Arc::clone(shared)))
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn run(
    slot: OpenWatch,
    feed: Arc<dyn Feed>,
    subscription: Subscription,
    params: WatchParams,
    sender: mpsc::Sender<Bytes>,
) {
    let shared = &slot.0;
    // Every send waits at most until the deadline: a client that stops reading cannot hold
    // the watch (and its slot) past its timeout.
    let sink = Sink {
        sender,
        deadline: Instant::now() + params.timeout,
    };
    let mut generation = shared.watch_generation.subscribe();
    generation.mark_unchanged();
    let mut shutdown = shared.shutdown.clone();
    let Subscription {
        initial,
        mut receiver,
        rv,
    } = subscription;
    for change in &initial {
        if !sink.change(change, &params.scope).await {
            return;
        }
    }
    let (api_version, kind) = (feed.api_version(), feed.kind());
    if params.initial_events && !sink.send(bookmark(api_version, kind, rv, true)).await {
        return;
    }
    let deadline = tokio::time::sleep_until(sink.deadline);
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
            () = sink.sender.closed() => break,
            () = tick(&mut ticker) => {
                let Ok((rv, pending)) = feed.sync_point(&mut receiver) else {
                    break;
                };
                for change in &pending {
                    if !sink.change(change, &params.scope).await {
                        return;
                    }
                }
                if !sink.send(bookmark(api_version, kind, rv, false)).await {
                    return;
                }
            }
            received = receiver.recv() => match received {
                Ok(change) => {
                    if !sink.change(&change, &params.scope).await {
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

/// The stream's sending end, with the watch's deadline.
struct Sink {
    sender: mpsc::Sender<Bytes>,
    deadline: Instant,
}

impl Sink {
    /// Sends `chunk`; false when the client is gone or the deadline passed first.
    async fn send(&self, chunk: Bytes) -> bool {
        matches!(
            tokio::time::timeout_at(self.deadline, self.sender.send(chunk)).await,
            Ok(Ok(()))
        )
    }

    /// Sends `change` if it lies in `scope`; false as [`send`](Self::send).
    async fn change(&self, change: &Change, scope: &Scope) -> bool {
        !scope.matches(&change.object)
            || self.send(line(change.kind.as_str(), &change.object)).await
    }
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": kind, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// A BOOKMARK of `api_version`/`kind` at `rv`; `initial_end` marks the end of
/// `sendInitialEvents`.
fn bookmark(api_version: &str, kind: &str, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}),
    )
}
