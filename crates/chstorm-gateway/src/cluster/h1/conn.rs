//! One HTTP/1 connection to a replica: its socket, the bytes read from it and not yet consumed,
//! and whether it carries a request the server has not answered yet.
//!
//! Dropped in that state, it is reset (`SO_LINGER` 0), not closed: ClickHouse 18.16 takes a
//! request body cut short by a normal close (FIN) for a complete one, and would commit part of
//! an INSERT the gateway gave up on (`super::super::backend_io` has the measurement). Every
//! other close (an idle pooled connection, after a whole answer) stays a normal close: 18.16
//! logs a reset on an idle connection as an error.

use crate::metrics::BACKEND_CONNECTIONS as OPEN;
use bytes::BytesMut;
use std::task::{Context, Poll};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What one read asks the socket for at least: 16 KiB.
const READ_AT_LEAST: usize = 16 * 1024;

pub struct Conn {
    pub(super) tcp: TcpStream,
    /// Bytes read and not consumed yet.
    pub(super) buf: BytesMut,
    /// Bytes were written since the last bytes were read.
    unanswered: bool,
    /// The pool's generation when this connection was made ([`super::pool::Pool::reset`]).
    pub(super) generation: u64,
    /// When it went idle in its pool.
    pub(super) idle_since: tokio::time::Instant,
}

impl Conn {
    pub fn new(tcp: TcpStream, generation: u64) -> Conn {
        OPEN.inc();
        Conn { tcp, buf: BytesMut::new(), unanswered: false, generation, idle_since: tokio::time::Instant::now() }
    }

    /// Writes all of `bytes`.
    pub async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.unanswered = true;
        self.tcp.write_all(bytes).await
    }

    /// Reads what the socket has into [`Conn::buf`]: how many bytes (0 at the peer's close).
    pub async fn fill(&mut self) -> std::io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }

    /// [`Conn::fill`], polled.
    pub fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        self.buf.reserve(READ_AT_LEAST);
        let n = std::task::ready!(tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut self.tcp), cx, &mut self.buf))?;
        if n > 0 {
            self.unanswered = false;
        }
        Poll::Ready(Ok(n))
    }

    /// Reads what the socket has now into [`Conn::buf`], without waiting (`WouldBlock` when
    /// nothing came).
    pub fn try_fill(&mut self) -> std::io::Result<usize> {
        self.buf.reserve(READ_AT_LEAST);
        let n = self.tcp.try_read_buf(&mut self.buf)?;
        if n > 0 {
            self.unanswered = false;
        }
        Ok(n)
    }

    /// Did the server close (or write to) this idle connection? Costs no system call while the
    /// socket has not been reported readable since its last read.
    pub fn closed_while_idle(&self) -> bool {
        !matches!(self.tcp.try_read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        OPEN.dec();
        if self.unanswered {
            let _ = self.tcp.set_zero_linger();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A loopback connection: (the client side, the server side).
    async fn pair() -> (Conn, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        (Conn::new(client, 0), server)
    }

    /// What the server reads after `expect`: Ok(0) for a close, Err for a reset.
    async fn server_sees_end(server: &mut TcpStream, expect: &[u8]) -> std::io::Result<usize> {
        let mut got = vec![0u8; expect.len()];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, expect);
        server.read(&mut [0u8; 8]).await
    }

    #[tokio::test]
    async fn dropped_with_a_request_unanswered_the_server_sees_a_reset() {
        let (mut c, mut server) = pair().await;
        c.write_all(b"POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n1\n").await.unwrap();
        drop(c);
        let e = server_sees_end(&mut server, b"POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n1\n").await;
        assert_eq!(e.unwrap_err().kind(), std::io::ErrorKind::ConnectionReset);
    }

    #[tokio::test]
    async fn dropped_after_its_answer_or_idle_the_server_sees_a_normal_close() {
        let (mut c, mut server) = pair().await;
        c.write_all(b"GET /ping HTTP/1.1\r\n\r\n").await.unwrap();
        server.read_exact(&mut [0u8; 22]).await.unwrap();
        server.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nOk.\n").await.unwrap();
        assert!(c.fill().await.unwrap() > 0);
        drop(c);
        assert_eq!(server.read(&mut [0u8; 8]).await.unwrap(), 0, "a FIN, not a reset");
        let (idle, mut server) = pair().await;
        drop(idle);
        assert_eq!(server.read(&mut [0u8; 8]).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_close_while_idle_is_seen() {
        let (c, server) = pair().await;
        assert!(!c.closed_while_idle());
        drop(server);
        c.tcp.readable().await.unwrap();
        assert!(c.closed_while_idle());
    }
}
