//! Connection limits: the timeouts every connection lives under, and the pool that caps open
//! connections and pending handshakes by shedding rather than by pausing `accept`.
//!
//! Every accepted connection gets a slot in its server's pool, tagged with the phase it is
//! in and since when:
//!
//! | phase | ends when | limit |
//! |---|---|---|
//! | `Handshake` | the TLS handshake completes | [`Limits::client_hello_timeout`] for the ClientHello, [`Limits::handshake_timeout`] in all |
//! | `Idle` | the first byte of a request arrives | [`Limits::idle_timeout`] (keep-alive and fresh connections alike) |
//! | `Head` | the request head is complete | [`Limits::header_timeout`] from its first byte; hyper's own header timer (idle + header, Tokio timer) backs it up |
//! | `Busy` | the response is ready | [`Limits::body_timeout`]: reading the body and answering; a `408` with `Connection: close` when it passes |
//!
//! A connection past its limit is closed. When a new connection arrives and the pool is full,
//! the server does not stop accepting: it sheds the connection that has waited longest without
//! a request (the oldest handshake, idle or half-sent head), and only when every connection is
//! busy, the oldest busy one. A new handshake beyond [`Limits::max_handshakes`] sheds the oldest
//! pending handshake. Probes and admission reviews therefore always get a slot at once, however
//! many stalled connections an attacker holds, and the memory held by connections is bounded by
//! [`Limits::max_connections`] × [`Limits::max_header_bytes`] plus TLS buffers, whatever the
//! attacker does.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The limits every connection of a [`Server`](crate::Server) lives under; see the
/// [module docs](self). The defaults suit a webhook behind kube-apiserver (whose own call
/// timeout is at most 30 s, 5 s for tierd's) and the kubelet's probes (1 s by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest from accepting a TLS connection to receiving its ClientHello (default 2 s).
    pub client_hello_timeout: Duration,
    /// The longest a whole TLS handshake may take (default 5 s).
    pub handshake_timeout: Duration,
    /// The longest a connection may wait for the first byte of a request, on a new connection
    /// and between keep-alive requests (default 30 s).
    pub idle_timeout: Duration,
    /// The longest from the first byte of a request to the end of its head (default 5 s).
    pub header_timeout: Duration,
    /// The longest from the end of the head to the response: reading the body and handling
    /// (default 10 s). Past it, the answer is `408 Request Timeout` and the connection closes.
    pub body_timeout: Duration,
    /// The most connections open at once, handshakes included (default 1024).
    pub max_connections: usize,
    /// The most TLS handshakes in progress at once (default 256).
    pub max_handshakes: usize,
    /// The largest request head (request line and headers) in bytes; larger ones get `431`
    /// (default 16 KiB, at least 8 KiB). This is also each connection's read buffer cap.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            client_hello_timeout: Duration::from_secs(2),
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_handshakes: 256,
            max_header_bytes: 16 * 1024,
        }
    }
}

/// hyper's smallest allowed read buffer.
pub(crate) const MIN_HEADER_BYTES: usize = 8192;

/// Extra time past `body_timeout` before a busy connection is closed without an answer (the
/// `408` normally comes first).
const BUSY_GRACE: Duration = Duration::from_secs(1);

/// What a connection is doing; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Handshake,
    Idle,
    Head,
    Busy,
}

/// Why a connection was closed by the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    Shed,
    IdleTimeout,
    HeaderTimeout,
    BodyTimeout,
}

impl Closed {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Shed => "shed",
            Self::IdleTimeout => "idle_timeout",
            Self::HeaderTimeout => "header_timeout",
            Self::BodyTimeout => "body_timeout",
        }
    }
}

/// One connection's entry in the pool.
#[derive(Debug)]
pub(crate) struct Slot {
    id: u64,
    state: Mutex<(Phase, Instant)>,
    shed: Notify,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, (Phase, Instant)> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enters `phase` now.
    pub(crate) fn set(&self, phase: Phase) {
        *self.lock() = (phase, Instant::now());
    }

    /// Marks the start of a request head if the connection was idle.
    fn reading(&self) {
        let mut state = self.lock();
        if state.0 == Phase::Idle {
            *state = (Phase::Head, Instant::now());
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        self.lock().0
    }

    /// When the current phase runs out, and why the connection is then closed (`None` for a
    /// handshake, whose timeout the handshake itself enforces).
    pub(crate) fn deadline(&self, limits: &Limits) -> (Instant, Option<Closed>) {
        let (phase, since) = *self.lock();
        match phase {
            Phase::Handshake => (since + limits.handshake_timeout, None),
            Phase::Idle => (since + limits.idle_timeout, Some(Closed::IdleTimeout)),
            Phase::Head => (since + limits.header_timeout, Some(Closed::HeaderTimeout)),
            Phase::Busy => (
                since + limits.body_timeout + BUSY_GRACE,
                Some(Closed::BodyTimeout),
            ),
        }
    }

    /// Resolves when the pool shed this connection.
    pub(crate) async fn shed(&self) {
        self.shed.notified().await;
    }
}

/// The open connections of one server; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Pool {
    max_connections: usize,
    max_handshakes: usize,
    inner: Mutex<Inner>,
    empty: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    slots: HashMap<u64, Arc<Slot>>,
}

/// Removes its slot from the pool when the connection's task ends.
#[derive(Debug)]
pub(crate) struct Admitted {
    pool: Arc<Pool>,
    pub(crate) slot: Arc<Slot>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut inner = self.pool.lock();
        inner.slots.remove(&self.slot.id);
        if inner.slots.is_empty() {
            self.pool.empty.notify_waiters();
        }
    }
}

impl Pool {
    pub(crate) fn new(limits: &Limits) -> Arc<Self> {
        Arc::new(Self {
            max_connections: limits.max_connections.max(1),
            max_handshakes: limits.max_handshakes.max(1),
            inner: Mutex::new(Inner::default()),
            empty: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Open connections.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().slots.len()
    }

    /// Admits a new connection in `phase`, shedding others to stay within the limits; returns
    /// the guard and how many connections were shed.
    pub(crate) fn admit(self: &Arc<Self>, phase: Phase) -> (Admitted, usize) {
        let mut inner = self.lock();
        let mut shed = 0;
        if phase == Phase::Handshake {
            let handshakes = inner
                .slots
                .values()
                .filter(|s| s.phase() == Phase::Handshake)
                .count();
            if handshakes >= self.max_handshakes {
                shed += usize::from(shed_one(&mut inner, |p| p == Phase::Handshake));
            }
        }
        while inner.slots.len() >= self.max_connections {
            let waiting = |p| p != Phase::Busy;
            if !shed_one(&mut inner, waiting) && !shed_one(&mut inner, |_| true) {
                break;
            }
            shed += 1;
        }
        inner.next += 1;
        let slot = Arc::new(Slot {
            id: inner.next,
            state: Mutex::new((phase, Instant::now())),
            shed: Notify::new(),
        });
        inner.slots.insert(slot.id, Arc::clone(&slot));
        let admitted = Admitted {
            pool: Arc::clone(self),
            slot,
        };
        (admitted, shed)
    }

    /// Sheds the connection that has waited longest without a request, if any (for when the
    /// process runs out of file descriptors).
    pub(crate) fn shed_waiting(&self) -> bool {
        shed_one(&mut self.lock(), |p| p != Phase::Busy)
    }

    /// Resolves once no connection is open.
    pub(crate) async fn emptied(&self) {
        loop {
            let notified = self.empty.notified();
            if self.lock().slots.is_empty() {
                return;
            }
            notified.await;
        }
    }
}

/// Sheds the oldest slot whose phase matches; returns whether one was shed.
fn shed_one(inner: &mut Inner, matches: impl Fn(Phase) -> bool) -> bool {
    let oldest = inner
        .slots
        .values()
        .filter_map(|slot| {
            let (phase, since) = *slot.lock();
            matches(phase).then_some((since, slot.id))
        })
        .min();
    let Some((_, id)) = oldest else {
        return false;
    };
    if let Some(slot) = inner.slots.remove(&id) {
        slot.shed.notify_one();
    }
    true
}

/// An I/O stream that tells its slot when the first byte of a request arrives.
#[derive(Debug)]
pub(crate) struct Tracked<I> {
    io: I,
    slot: Arc<Slot>,
}

impl<I> Tracked<I> {
    pub(crate) fn new(io: I, slot: Arc<Slot>) -> Self {
        Self { io, slot }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Tracked<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.slot.reading();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Tracked<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_connections: usize, max_handshakes: usize) -> Limits {
        Limits {
            max_connections,
            max_handshakes,
            ..Limits::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_pool_sheds_the_longest_waiting_connection_not_a_busy_one() {
        let pool = Pool::new(&limits(3, 3));
        let (busy, _) = pool.admit(Phase::Idle);
        tokio::time::advance(Duration::from_secs(1)).await;
        let (idle, _) = pool.admit(Phase::Idle);
        tokio::time::advance(Duration::from_secs(1)).await;
        let (head, _) = pool.admit(Phase::Idle);
        busy.slot.set(Phase::Busy);
        head.slot.reading();
        assert_eq!(head.slot.phase(), Phase::Head);

        // The oldest non-busy slot goes: `idle` (the busy one is older).
        let (_fresh, shed) = pool.admit(Phase::Idle);
        assert_eq!(shed, 1);
        assert_eq!(pool.len(), 3);
        tokio::time::timeout(Duration::from_millis(1), idle.slot.shed())
            .await
            .unwrap_or_else(|_| panic!("the idle connection was not shed"));
        assert!(
            tokio::time::timeout(Duration::from_millis(1), busy.slot.shed())
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn handshakes_beyond_their_cap_shed_the_oldest_handshake() {
        let pool = Pool::new(&limits(100, 2));
        let (idle, _) = pool.admit(Phase::Idle);
        let (first, _) = pool.admit(Phase::Handshake);
        tokio::time::advance(Duration::from_secs(1)).await;
        let (_second, _) = pool.admit(Phase::Handshake);
        let (_third, shed) = pool.admit(Phase::Handshake);
        assert_eq!(shed, 1);
        assert_eq!(pool.len(), 3);
        tokio::time::timeout(Duration::from_millis(1), first.slot.shed())
            .await
            .unwrap_or_else(|_| panic!("the oldest handshake was not shed"));
        drop(idle);
        assert_eq!(pool.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_follow_the_phase() {
        let limits = Limits::default();
        let pool = Pool::new(&limits);
        let start = Instant::now();
        let (conn, _) = pool.admit(Phase::Idle);
        assert_eq!(
            conn.slot.deadline(&limits),
            (start + limits.idle_timeout, Some(Closed::IdleTimeout))
        );
        tokio::time::advance(Duration::from_secs(3)).await;
        conn.slot.reading();
        assert_eq!(
            conn.slot.deadline(&limits),
            (
                start + Duration::from_secs(3) + limits.header_timeout,
                Some(Closed::HeaderTimeout)
            )
        );
        // Bytes during a busy request do not make it a new head.
        conn.slot.set(Phase::Busy);
        conn.slot.reading();
        assert_eq!(conn.slot.phase(), Phase::Busy);
    }
}
