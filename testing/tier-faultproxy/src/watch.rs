//! Watch responses on their way through: passed on frame by frame as they arrive (never
//! buffered), counted by event, and ended early when a fault or
//! [`drop_watches`](crate::FaultProxy::drop_watches) says so.
//!
//! Events are counted by the stream's framing: one JSON object per line
//! (`application/json`, kube-apiserver's encoder ends every event with `\n` and escapes
//! newlines inside strings), or a 4-byte big-endian length before each protobuf event
//! (`application/vnd.kubernetes.protobuf;stream=watch`). A stream the proxy ends early ends
//! right after an event, never inside one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::watch;

use crate::faults::WatchEnd;
use crate::io::ConnControl;

/// Any error a body passed on may end with.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How a watch stream separates its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One event per `\n`-terminated line.
    Lines,
    /// Each event preceded by its length, 4 bytes big-endian.
    LengthPrefixed {
        /// Header bytes read of the current frame (0..=4).
        header_read: usize,
        /// The header read so far.
        header: [u8; 4],
        /// Payload bytes still to come of the current frame.
        remaining: u64,
    },
}

impl Framing {
    /// The framing of a watch response with this `Content-Type`.
    pub(crate) fn for_content_type(content_type: Option<&str>) -> Self {
        if content_type.is_some_and(|ct| ct.contains("protobuf")) {
            Self::LengthPrefixed {
                header_read: 0,
                header: [0; 4],
                remaining: 0,
            }
        } else {
            Self::Lines
        }
    }

    /// Reads `data`, counting the events that end in it, up to `limit`: returns how many ended
    /// and, when the `limit`-th ended, the offset just after it.
    pub(crate) fn feed(&mut self, data: &[u8], limit: u64) -> (u64, Option<usize>) {
        let mut ended = 0u64;
        if limit == 0 {
            return (0, Some(0));
        }
        match self {
            Self::Lines => {
                for (at, _) in data.iter().enumerate().filter(|(_, b)| **b == b'\n') {
                    ended = ended.saturating_add(1);
                    if ended == limit {
                        return (ended, Some(at.saturating_add(1)));
                    }
                }
            }
            Self::LengthPrefixed {
                header_read,
                header,
                remaining,
            } => {
                let mut at = 0usize;
                while at < data.len() {
                    let mut frame_ended = false;
                    if *header_read < 4 {
                        if let (Some(slot), Some(byte)) =
                            (header.get_mut(*header_read), data.get(at))
                        {
                            *slot = *byte;
                        }
                        *header_read = header_read.saturating_add(1);
                        at = at.saturating_add(1);
                        if *header_read == 4 {
                            *remaining = u64::from(u32::from_be_bytes(*header));
                            frame_ended = *remaining == 0;
                        }
                    } else {
                        let left = u64::try_from(data.len().saturating_sub(at)).unwrap_or(u64::MAX);
                        let step = (*remaining).min(left);
                        *remaining = remaining.saturating_sub(step);
                        at = at.saturating_add(usize::try_from(step).unwrap_or(usize::MAX));
                        frame_ended = *remaining == 0;
                    }
                    if frame_ended {
                        *header_read = 0;
                        ended = ended.saturating_add(1);
                        if ended == limit {
                            return (ended, Some(at));
                        }
                    }
                }
            }
        }
        (ended, None)
    }
}

/// Counts the watch streams passing through; each [`OpenWatch`] is one.
#[derive(Debug)]
pub(crate) struct OpenWatch(Arc<AtomicUsize>);

impl OpenWatch {
    pub(crate) fn new(open: &Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(open))
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// When and how a watch is ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct EndPlan {
    /// End right after this many events.
    pub(crate) after_events: Option<u64>,
    /// End after this long.
    pub(crate) after: Option<Duration>,
    /// How the fault ends it.
    pub(crate) end: WatchEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Streaming,
    Ending(WatchEnd),
    Done,
}

/// A watch response body passed on from the upstream.
pub(crate) struct WatchBody<B> {
    inner: B,
    framing: Framing,
    events_left: Option<u64>,
    plan_end: WatchEnd,
    signal: Pin<Box<dyn Future<Output = WatchEnd> + Send>>,
    state: State,
    conn: ConnControl,
    _open: OpenWatch,
}

impl<B> WatchBody<B> {
    /// Passes `inner` on, framed as `framing`, ended by `plan` or by a value sent on `drops`
    /// (each send ends every open watch in the way it says).
    pub(crate) fn new(
        inner: B,
        framing: Framing,
        plan: EndPlan,
        mut drops: watch::Receiver<WatchEnd>,
        conn: ConnControl,
        open: OpenWatch,
    ) -> Self {
        let timed_end = plan.end;
        let after = plan.after;
        let signal = Box::pin(async move {
            let timer = async {
                match after {
                    Some(after) => tokio::time::sleep(after).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = timer => timed_end,
                changed = drops.changed() => match changed {
                    Ok(()) => *drops.borrow_and_update(),
                    // The proxy is gone; its connections end with it.
                    Err(_) => WatchEnd::Clean,
                },
            }
        });
        let state = if plan.after_events == Some(0) {
            State::Ending(plan.end)
        } else {
            State::Streaming
        };
        Self {
            inner,
            framing,
            events_left: plan.after_events,
            plan_end: plan.end,
            signal,
            state,
            conn,
            _open: open,
        }
    }

    fn finish(&mut self, how: WatchEnd) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.state = State::Done;
        match how {
            WatchEnd::Clean => Poll::Ready(None),
            WatchEnd::Reset => {
                self.conn.mark_reset();
                Poll::Ready(Some(Err("watch reset by tier-faultproxy".into())))
            }
        }
    }
}

impl<B> Body for WatchBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match this.state {
            State::Done => return Poll::Ready(None),
            State::Ending(how) => return this.finish(how),
            State::Streaming => {}
        }
        if let Poll::Ready(how) = this.signal.as_mut().poll(cx) {
            return this.finish(how);
        }
        match this.inner.frame().poll_unpin(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(mut data) => {
                    if let Some(left) = this.events_left {
                        let (ended, cut) = this.framing.feed(&data, left);
                        this.events_left = Some(left.saturating_sub(ended));
                        if let Some(cut) = cut {
                            data.truncate(cut);
                            this.state = State::Ending(this.plan_end);
                        }
                    }
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Err(other) => Poll::Ready(Some(Ok(other))),
            },
            Poll::Ready(Some(Err(error))) => {
                this.state = State::Done;
                Poll::Ready(Some(Err(error.into())))
            }
            Poll::Ready(None) => {
                this.state = State::Done;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state == State::Done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// `poll_unpin` for the `Frame` future of `http_body_util`, without pulling in `futures`.
trait PollUnpin: Future + Unpin {
    fn poll_unpin(&mut self, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(self).poll(cx)
    }
}

impl<F: Future + Unpin> PollUnpin for F {}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::{BodyExt, StreamBody};
    use tokio::sync::mpsc;

    use super::*;

    type Feed = mpsc::Sender<Result<Frame<Bytes>, Infallible>>;

    /// A body whose frames the test sends one by one.
    fn channel_body() -> (Feed, impl Body<Data = Bytes, Error = Infallible> + Unpin) {
        let (tx, mut rx) = mpsc::channel(16);
        let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        (tx, StreamBody::new(stream))
    }

    fn watch_body<B>(
        inner: B,
        plan: EndPlan,
    ) -> (
        WatchBody<B>,
        watch::Sender<WatchEnd>,
        ConnControl,
        Arc<AtomicUsize>,
    ) {
        let (drops, rx) = watch::channel(WatchEnd::Clean);
        let conn = ConnControl::default();
        let open = Arc::new(AtomicUsize::new(0));
        let body = WatchBody::new(
            inner,
            Framing::Lines,
            plan,
            rx,
            conn.clone(),
            OpenWatch::new(&open),
        );
        (body, drops, conn, open)
    }

    async fn send(feed: &Feed, text: &str) {
        feed.send(Ok(Frame::data(Bytes::from(text.to_owned()))))
            .await
            .unwrap();
    }

    async fn next_data<B>(body: &mut WatchBody<B>) -> Option<Result<Bytes, String>>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        match body.frame().await? {
            Ok(frame) => Some(Ok(frame.into_data().unwrap_or_default())),
            Err(error) => Some(Err(error.to_string())),
        }
    }

    #[test]
    fn lines_and_length_prefixed_frames_are_counted_across_chunks() {
        let mut lines = Framing::Lines;
        assert_eq!(lines.feed(b"{\"a\":1}\n{\"b\"", 5), (1, None));
        assert_eq!(lines.feed(b":2}\n{}\n{}\n", 2), (2, Some(4 + 3)));
        assert_eq!(lines.feed(b"x", 0), (0, Some(0)));

        let mut proto =
            Framing::for_content_type(Some("application/vnd.kubernetes.protobuf;stream=watch"));
        // Frames of 3 and 0 bytes, then one of 2 split across the chunks.
        let stream = [0u8, 0, 0, 3, 9, 9, 9, 0, 0, 0, 0, 0, 0, 0, 2, 7, 7];
        let (first, second) = stream.split_at(10);
        assert_eq!(proto.feed(first, 10), (1, None));
        assert_eq!(proto.feed(second, 10), (2, None));
        let mut proto = Framing::for_content_type(Some("application/vnd.kubernetes.protobuf"));
        assert_eq!(proto.feed(&stream, 2), (2, Some(11)));
    }

    #[tokio::test]
    async fn events_pass_as_they_arrive_and_the_stream_ends_after_the_nth() {
        let (feed, inner) = channel_body();
        let plan = EndPlan {
            after_events: Some(2),
            ..EndPlan::default()
        };
        let (mut body, _drops, conn, open) = watch_body(inner, plan);
        assert_eq!(open.load(Ordering::SeqCst), 1);
        send(&feed, "{\"e\":1}\n").await;
        // The first event is passed on before the second exists: nothing is buffered.
        assert_eq!(
            next_data(&mut body).await,
            Some(Ok(Bytes::from("{\"e\":1}\n")))
        );
        send(&feed, "{\"e\":2}\n{\"e\":3}\n").await;
        assert_eq!(
            next_data(&mut body).await,
            Some(Ok(Bytes::from("{\"e\":2}\n")))
        );
        assert_eq!(next_data(&mut body).await, None);
        assert!(body.is_end_stream());
        assert!(!conn.flag().load(Ordering::SeqCst));
        drop(body);
        assert_eq!(open.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timed_end_fires_on_the_clock_and_can_reset() {
        let (feed, inner) = channel_body();
        let plan = EndPlan {
            after: Some(Duration::from_secs(30)),
            end: WatchEnd::Reset,
            ..EndPlan::default()
        };
        let (mut body, _drops, conn, _open) = watch_body(inner, plan);
        send(&feed, "{}\n").await;
        assert!(matches!(next_data(&mut body).await, Some(Ok(_))));
        let started = tokio::time::Instant::now();
        let ended = next_data(&mut body).await;
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert_eq!(
            ended,
            Some(Err("watch reset by tier-faultproxy".to_owned()))
        );
        assert!(conn.flag().load(Ordering::SeqCst));
        assert_eq!(next_data(&mut body).await, None);
    }

    #[tokio::test]
    async fn drop_watches_ends_open_streams_in_the_way_it_says() {
        let (_feed, inner) = channel_body();
        let (mut body, drops, conn, _open) = watch_body(inner, EndPlan::default());
        drops.send_replace(WatchEnd::Clean);
        assert_eq!(next_data(&mut body).await, None);
        assert!(!conn.flag().load(Ordering::SeqCst));

        let (_feed, inner) = channel_body();
        let (mut body, drops, conn, _open) = watch_body(inner, EndPlan::default());
        drops.send_replace(WatchEnd::Reset);
        assert!(matches!(next_data(&mut body).await, Some(Err(_))));
        assert!(conn.flag().load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn the_upstream_ending_ends_the_stream() {
        let (feed, inner) = channel_body();
        let (mut body, _drops, _conn, _open) = watch_body(inner, EndPlan::default());
        send(&feed, "{}\n").await;
        drop(feed);
        assert!(matches!(next_data(&mut body).await, Some(Ok(_))));
        assert_eq!(next_data(&mut body).await, None);
    }
}
