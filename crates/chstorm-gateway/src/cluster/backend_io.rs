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
            Ok(ResetIfAbandonedIo::new(stream))
        })
    }
}

/// A backend connection that is reset when dropped with a request unanswered.
pub struct ResetIfAbandonedIo<T: Socket> {
    inner: T,
    /// Bytes were written since the last bytes were read.
    unanswered: bool,
}

/// HTTP backend connections open now in this process (pooled idle and busy, every replica).
use crate::metrics::BACKEND_CONNECTIONS as OPEN;

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

impl Socket for TokioIo<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.inner()
    }
}

impl<T: Socket> ResetIfAbandonedIo<T> {
    /// Wraps a connected stream (nothing written yet).
    pub fn new(inner: T) -> ResetIfAbandonedIo<T> {
        OPEN.inc();
        ResetIfAbandonedIo { inner, unanswered: false }
    }
}

impl<T: Socket> Drop for ResetIfAbandonedIo<T> {
    fn drop(&mut self) {
        OPEN.dec();
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback connection: (the wrapped client side, the server side).
    async fn pair() -> (ResetIfAbandonedIo<TokioIo<TcpStream>>, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        (ResetIfAbandonedIo::new(TokioIo::new(client)), server)
    }

    async fn write(io: &mut ResetIfAbandonedIo<TokioIo<TcpStream>>, b: &[u8]) {
        std::future::poll_fn(|cx| Pin::new(&mut *io).poll_write(cx, b)).await.unwrap();
    }

    async fn read(io: &mut ResetIfAbandonedIo<TokioIo<TcpStream>>) -> usize {
        let mut mem = [std::mem::MaybeUninit::<u8>::uninit(); 64];
        let mut buf = hyper::rt::ReadBuf::uninit(&mut mem);
        std::future::poll_fn(|cx| Pin::new(&mut *io).poll_read(cx, buf.unfilled())).await.unwrap();
        buf.filled().len()
    }

    async fn shutdown(io: &mut ResetIfAbandonedIo<TokioIo<TcpStream>>) {
        std::future::poll_fn(|cx| Pin::new(&mut *io).poll_shutdown(cx)).await.unwrap();
    }

    /// What the server sees after the client's last bytes: Ok(0) for a close, Err for a reset.
    async fn server_sees_end(server: &mut TcpStream, expect: &[u8]) -> std::io::Result<usize> {
        let mut got = vec![0u8; expect.len()];
        within(server.read_exact(&mut got)).await.unwrap();
        assert_eq!(got, expect);
        let mut more = [0u8; 8];
        within(server.read(&mut more)).await
    }

    /// `f`, or a panic after 10 s.
    async fn within<F: Future>(f: F) -> F::Output {
        tokio::time::timeout(std::time::Duration::from_secs(10), f).await.expect("no answer within 10 s")
    }

    #[tokio::test]
    async fn dropped_with_a_request_unanswered_the_server_sees_a_reset() {
        let (mut io, mut server) = pair().await;
        write(&mut io, b"POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n1\n2\n").await;
        shutdown(&mut io).await; // hyper's shutdown before the drop: no FIN may go out
        drop(io);
        let e = server_sees_end(&mut server, b"POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n1\n2\n").await;
        assert_eq!(e.unwrap_err().kind(), std::io::ErrorKind::ConnectionReset);
    }

    #[tokio::test]
    async fn dropped_after_its_answer_the_server_sees_a_normal_close() {
        let (mut io, mut server) = pair().await;
        let req = b"GET /ping HTTP/1.1\r\n\r\n";
        write(&mut io, req).await;
        within(server.read_exact(&mut vec![0u8; req.len()])).await.unwrap();
        server.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nOk.\n").await.unwrap();
        assert!(within(read(&mut io)).await > 0);
        shutdown(&mut io).await;
        drop(io);
        assert_eq!(within(server.read(&mut [0u8; 8])).await.unwrap(), 0, "a FIN, not a reset");
    }

    #[tokio::test]
    async fn an_idle_connection_closes_normally() {
        let (io, mut server) = pair().await;
        drop(io);
        assert_eq!(within(server.read(&mut [0u8; 8])).await.unwrap(), 0);
    }
}
