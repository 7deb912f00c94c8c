//! Backend connections that are reset, not closed, when dropped in the middle of an exchange.
//!
//! ClickHouse 18.16 takes a request body cut short by a normal close (FIN) for a complete one:
//! `INSERT ... FORMAT TSV` with `Content-Length: 1000`, 6 bytes sent, then a close, inserts the
//! rows in those 6 bytes (chunked bodies likewise; checked against the server). A reset (RST)
//! fails the INSERT. So when the gateway gives up on a request while it is being sent (its client
//! stalled or left mid-upload), the backend connection must be reset, or the server commits part
//! of what chstorm abandoned.
//!
//! [`ResetIfAbandoned`] wraps the pool's connector; each connection notes whether it has written
//! bytes the server has not answered yet (a write since the last read). Shut down or dropped in
//! that state, it skips the write-side shutdown and its socket gets `SO_LINGER` 0, so the kernel
//! sends a reset. Every other close (an idle pooled
//! connection, after a whole answer) stays a normal close: 18.16 logs a reset on an idle
//! connection as an error, and there is no reason for one.

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::MaybeHttpsStream;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::net::TcpStream;

type Stream = MaybeHttpsStream<TokioIo<TcpStream>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connector whose connections are [`ResetIfAbandonedIo`].
#[derive(Clone)]
pub struct ResetIfAbandoned<C>(pub C);

impl<C> tower::Service<http::Uri> for ResetIfAbandoned<C>
where
    C: tower::Service<http::Uri, Response = Stream> + Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = ResetIfAbandonedIo<Stream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let stream = connecting.await.map_err(Into::into)?;
            Ok(ResetIfAbandonedIo { inner: stream, unanswered: false })
        })
    }
}

/// A backend connection that is reset when dropped with a request unanswered.
pub struct ResetIfAbandonedIo<T: Socket> {
    inner: T,
    /// Bytes were written since the last bytes were read.
    unanswered: bool,
}

/// The TCP socket under a (maybe TLS) backend stream.
pub trait Socket {
    fn tcp(&self) -> &TcpStream;
}

impl Socket for Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            MaybeHttpsStream::Http(io) => io.inner(),
            MaybeHttpsStream::Https(io) => io.inner().get_ref().0.inner().inner(),
        }
    }
}

impl<T: Socket> Drop for ResetIfAbandonedIo<T> {
    fn drop(&mut self) {
        if self.unanswered {
            let _ = self.inner.tcp().set_zero_linger();
        }
    }
}

impl<T: Socket + Connection> Connection for ResetIfAbandonedIo<T> {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}

impl<T: Socket + Read + Unpin> Read for ResetIfAbandonedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        // A cursor cannot be lent and looked at afterwards: read into a buffer over its memory,
        // then advance it by what was read (as hyper-util's own adapters do).
        // SAFETY: `tmp` only writes initialised bytes into the cursor's memory and reports how
        // many; the cursor is advanced by exactly that many.
        let n = unsafe {
            let mut tmp = hyper::rt::ReadBuf::uninit(buf.as_mut());
            match Pin::new(&mut self.inner).poll_read(cx, tmp.unfilled()) {
                Poll::Ready(Ok(())) => tmp.filled().len(),
                other => return other,
            }
        };
        // SAFETY: the first `n` bytes of the cursor were just filled.
        unsafe { buf.advance(n) };
        if n > 0 {
            self.unanswered = false;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: Socket + Write + Unpin> Write for ResetIfAbandonedIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.unanswered = true;
        }
        r
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.unanswered = true;
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // hyper shuts the write side down (a FIN) before it drops a connection it gives up on:
        // with a request unanswered that FIN would end the request body. Leave it to the reset.
        if self.unanswered {
            let _ = self.inner.tcp().set_zero_linger();
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
