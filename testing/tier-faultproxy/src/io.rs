//! The accepted TCP stream, able to end with a reset (RST) instead of an orderly close, and
//! the handle request handlers use to kill their connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// A TCP stream that, when its connection was marked for reset, is closed with `SO_LINGER`
/// zero: the peer gets an RST ("connection reset by peer"), not a FIN.
#[derive(Debug)]
pub(crate) struct ResetOnDrop {
    stream: TcpStream,
    reset: Arc<AtomicBool>,
}

impl ResetOnDrop {
    pub(crate) fn new(stream: TcpStream, reset: Arc<AtomicBool>) -> Self {
        Self { stream, reset }
    }
}

impl Drop for ResetOnDrop {
    fn drop(&mut self) {
        if self.reset.load(Ordering::SeqCst) {
            // Zero linger never blocks: the close discards unsent data and sends an RST.
            let _ = self.stream.set_zero_linger();
        }
    }
}

impl AsyncRead for ResetOnDrop {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResetOnDrop {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// What a request handler holds of its connection: it can reset it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnControl {
    reset: Arc<AtomicBool>,
    kill: Arc<Notify>,
}

impl ConnControl {
    /// The flag the connection's [`ResetOnDrop`] reads.
    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.reset)
    }

    /// Marks the connection for reset and tells its task to drop it now.
    pub(crate) fn reset_now(&self) {
        self.reset.store(true, Ordering::SeqCst);
        self.kill.notify_one();
    }

    /// Marks the connection for reset, without ending it (it is ending anyway).
    pub(crate) fn mark_reset(&self) {
        self.reset.store(true, Ordering::SeqCst);
    }

    /// Resolves once [`reset_now`](Self::reset_now) was called.
    pub(crate) async fn killed(&self) {
        self.kill.notified().await;
    }
}
