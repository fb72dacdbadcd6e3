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
//! | `Head` | the request head is complete | [`Limits::header_timeout`] from its first byte |
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
//!
//! # The body budget
//!
//! Request bodies are the other thing a client makes the server hold: a handler buffers a body
//! until it is complete, and a client can send all but its last byte and wait for the body
//! timeout, on every connection. A [`BodyBudget`] bounds the bytes held in unfinished request
//! bodies across all connections of a server ([`Limits::max_body_bytes_held`], default
//! 16 MiB). The first [`Limits::max_header_bytes`] of each body are free, as its head was
//! (so a Tier review of a few KiB never waits for the budget, however full attackers keep
//! it, and one whose `Content-Length` is within them is not even counted); beyond them each chunk takes its size from the budget as it arrives, and the request
//! gives it all back when it finishes (its response is ready) or is dropped (the connection
//! closed or timed out). A chunk that does not fit waits for bytes to be given back, the
//! chunks of one request [`BODY_BUDGET_WAIT`] in all; then the request is refused with `503 Service Unavailable`,
//! `Retry-After: 1` and `Connection: close` (a body larger than the whole budget at once with
//! `413`), instead of memory growing with the number of connections. Bodies therefore hold at
//! most [`Limits::max_connections`] × [`Limits::max_header_bytes`] plus the budget.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, Semaphore};
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
    /// The most bytes held in unfinished request bodies across all connections of a server
    /// (default 16 MiB); see [the body budget](self#the-body-budget).
    pub max_body_bytes_held: usize,
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
            max_body_bytes_held: 16 * 1024 * 1024,
        }
    }
}

/// How long the chunks of one request body may wait in all for room in a full [`BodyBudget`]
/// before the request is refused.
pub const BODY_BUDGET_WAIT: Duration = Duration::from_secs(1);

/// Bytes of unfinished request bodies a server may hold at once; see
/// [the body budget](self#the-body-budget). Cheap to clone; clones share one budget, so one
/// budget can bound several servers together ([`Server::body_budget`](crate::Server::body_budget)).
#[derive(Clone, Debug)]
pub struct BodyBudget {
    inner: Arc<BudgetInner>,
}

#[derive(Debug)]
struct BudgetInner {
    limit: usize,
    free: Semaphore,
    peak: AtomicUsize,
}

impl BodyBudget {
    /// A budget of `limit` bytes (at most 4 GiB; at least 1 byte).
    pub fn new(limit: usize) -> Self {
        let limit = limit
            .clamp(1, usize::try_from(u32::MAX).unwrap_or(usize::MAX))
            .min(Semaphore::MAX_PERMITS);
        Self {
            inner: Arc::new(BudgetInner {
                limit,
                free: Semaphore::new(limit),
                peak: AtomicUsize::new(0),
            }),
        }
    }

    /// The budget in bytes.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Bytes held now by unfinished request bodies.
    pub fn held(&self) -> usize {
        self.inner
            .limit
            .saturating_sub(self.inner.free.available_permits())
    }

    /// The most bytes ever held at once.
    pub fn peak(&self) -> usize {
        self.inner.peak.load(Ordering::Relaxed)
    }

    fn record_peak(&self) {
        self.inner.peak.fetch_max(self.held(), Ordering::Relaxed);
    }
}

/// Why a request body was refused by the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BudgetRefusal {
    /// The budget stayed full for [`BODY_BUDGET_WAIT`].
    #[error(
        "the server holds {limit} bytes of unfinished request bodies, its limit; retry shortly"
    )]
    Exhausted {
        /// The budget.
        limit: usize,
    },
    /// One chunk is larger than the whole budget.
    #[error("a body chunk of {chunk} bytes exceeds the server's budget of {limit} bytes")]
    TooLarge {
        /// The chunk.
        chunk: usize,
        /// The budget.
        limit: usize,
    },
}

/// What one request holds of the budget; gives it back when dropped.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: BodyBudget,
    held: AtomicUsize,
    refused: Mutex<Option<BudgetRefusal>>,
    any_refused: AtomicBool,
    /// When waiting ends: [`BODY_BUDGET_WAIT`] after the first wait began.
    deadline: Mutex<Option<Instant>>,
}

impl Charge {
    pub(crate) fn new(budget: BodyBudget) -> Arc<Self> {
        Arc::new(Self {
            budget,
            held: AtomicUsize::new(0),
            refused: Mutex::new(None),
            any_refused: AtomicBool::new(false),
            deadline: Mutex::new(None),
        })
    }

    /// Why the body was refused, if it was.
    pub(crate) fn refused(&self) -> Option<BudgetRefusal> {
        if !self.any_refused.load(Ordering::Acquire) {
            return None;
        }
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn refuse(&self, refusal: BudgetRefusal) -> BudgetRefusal {
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = Some(refusal);
        self.any_refused.store(true, Ordering::Release);
        refusal
    }

    fn took(&self, n: usize) {
        self.held.fetch_add(n, Ordering::Relaxed);
        self.budget.record_peak();
    }

    /// Takes `n` bytes at once if they are free.
    fn try_take(&self, n: u32) -> bool {
        match self.budget.inner.free.try_acquire_many(n) {
            Ok(permit) => {
                permit.forget();
                self.took(n as usize);
                true
            }
            Err(_) => false,
        }
    }

    /// Takes `n` bytes, waiting for them until [`BODY_BUDGET_WAIT`] after this request's first
    /// wait began.
    async fn take(self: Arc<Self>, n: u32) -> Result<(), BudgetRefusal> {
        let deadline = *self
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(|| Instant::now() + BODY_BUDGET_WAIT);
        let acquire = self.budget.inner.free.acquire_many(n);
        match tokio::time::timeout_at(deadline, acquire).await {
            Ok(Ok(permit)) => {
                permit.forget();
                self.took(n as usize);
                Ok(())
            }
            _ => Err(self.refuse(BudgetRefusal::Exhausted {
                limit: self.budget.limit(),
            })),
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let held = *self.held.get_mut();
        if held > 0 {
            self.budget.inner.free.add_permits(held);
        }
    }
}

type Waiting = std::pin::Pin<Box<dyn Future<Output = Result<(), BudgetRefusal>> + Send>>;

/// A request body whose chunks are charged to a [`BodyBudget`] as they arrive.
pub(crate) struct Budgeted<B> {
    inner: B,
    charge: Arc<Charge>,
    /// Bytes this body may still take without charging the budget.
    allowance: usize,
    waiting: Option<(Frame<Bytes>, Waiting)>,
}

impl<B> Budgeted<B> {
    /// Charges `inner` to `charge` beyond its first `allowance` bytes.
    pub(crate) fn new(inner: B, charge: Arc<Charge>, allowance: usize) -> Self {
        Self {
            inner,
            charge,
            allowance,
            waiting: None,
        }
    }
}

impl<B> Body for Budgeted<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        loop {
            if let Some((_, waiting)) = &mut this.waiting {
                let taken = ready!(waiting.as_mut().poll(cx));
                let Some((frame, _)) = this.waiting.take() else {
                    continue;
                };
                return Poll::Ready(Some(match taken {
                    Ok(()) => Ok(frame),
                    Err(refusal) => Err(Box::new(refusal)),
                }));
            }
            let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(error)) => return Poll::Ready(Some(Err(error.into()))),
                None => return Poll::Ready(None),
            };
            let len = frame.data_ref().map_or(0, Bytes::len);
            let free = len.min(this.allowance);
            this.allowance -= free;
            let size = len - free;
            if size == 0 {
                return Poll::Ready(Some(Ok(frame)));
            }
            let limit = this.charge.budget.limit();
            let Some(n) = u32::try_from(size).ok().filter(|_| size <= limit) else {
                let refusal = this
                    .charge
                    .refuse(BudgetRefusal::TooLarge { chunk: size, limit });
                return Poll::Ready(Some(Err(Box::new(refusal))));
            };
            if this.charge.try_take(n) {
                return Poll::Ready(Some(Ok(frame)));
            }
            this.waiting = Some((frame, Box::pin(Arc::clone(&this.charge).take(n))));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.waiting.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
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
    BodyBudget,
}

impl Closed {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Shed => "shed",
            Self::IdleTimeout => "idle_timeout",
            Self::HeaderTimeout => "header_timeout",
            Self::BodyTimeout => "body_timeout",
            Self::BodyBudget => "body_budget",
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

    /// A body of `n` bytes charged to `budget` from its first byte, and its charge.
    fn charged_body(
        n: usize,
        budget: BodyBudget,
    ) -> (Budgeted<http_body_util::Full<Bytes>>, Arc<Charge>) {
        let charge = Charge::new(budget);
        let body = Budgeted::new(
            http_body_util::Full::new(Bytes::from(vec![b'x'; n])),
            Arc::clone(&charge),
            0,
        );
        (body, charge)
    }

    #[tokio::test(start_paused = true)]
    async fn the_body_budget_charges_waits_refuses_and_gives_back() {
        use http_body_util::BodyExt;

        let budget = BodyBudget::new(100);
        // Within the free allowance: nothing charged.
        let charge = Charge::new(budget.clone());
        let free = Budgeted::new(
            http_body_util::Full::new(Bytes::from(vec![b'x'; 50])),
            Arc::clone(&charge),
            64,
        );
        assert_eq!(free.collect().await.unwrap().to_bytes().len(), 50);
        assert_eq!(budget.held(), 0);

        let (first, first_charge) = charged_body(60, budget.clone());
        let held = first.collect().await.unwrap().to_bytes();
        assert_eq!((held.len(), budget.held()), (60, 60));

        // No room: waits BODY_BUDGET_WAIT, then refused; nothing more held.
        let (second, second_charge) = charged_body(60, budget.clone());
        let start = Instant::now();
        assert!(second.collect().await.is_err());
        assert_eq!(start.elapsed(), BODY_BUDGET_WAIT);
        assert_eq!(
            second_charge.refused(),
            Some(BudgetRefusal::Exhausted { limit: 100 })
        );
        assert_eq!(budget.held(), 60);

        // A chunk larger than the whole budget: refused at once.
        let (huge, huge_charge) = charged_body(101, budget.clone());
        assert!(huge.collect().await.is_err());
        assert_eq!(
            huge_charge.refused(),
            Some(BudgetRefusal::TooLarge {
                chunk: 101,
                limit: 100
            })
        );

        // The finished request gives its bytes back; the next body fits.
        drop(first_charge);
        assert_eq!(budget.held(), 0);
        let (third, _third_charge) = charged_body(100, budget.clone());
        assert_eq!(third.collect().await.unwrap().to_bytes().len(), 100);
        assert_eq!(budget.peak(), 100);
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
