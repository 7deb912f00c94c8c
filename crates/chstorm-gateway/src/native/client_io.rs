//! A native client's connection, plain TCP (`listen_native`) or TLS (`listen_native_secure`),
//! or, in tests, in memory (a [`DuplexStream`]: a whole session without a socket), as the two
//! halves a session uses: [`ClientRead`] under the session's [`Io`] reader, and
//! [`ClientWrite`] for the answers.
//!
//! An enum rather than making the session generic over its stream: the session and query code
//! stay one non-generic copy, and the plain path costs one branch per read or write. A plain
//! connection is split into tokio's owned halves as before; a TLS stream with
//! [`tokio::io::split`] (the halves share the stream under a lock held only during each poll,
//! so the relay may wait on the client's reads while it writes the answer).
//!
//! A read inside a packet has a deadline ([`ClientRead::within_packet`]): a client that stops
//! mid-packet for `limits.client_packet_timeout` gets a `TimedOut` error, and the session
//! closes. Waiting for a packet's first byte has none (the session's own idle limit applies).
//!
//! [`Io`]: chstorm_proto::native::wire::Io

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWriteExt, DuplexStream, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::Sleep;
use tokio_rustls::server::TlsStream;

/// The reading half of a client connection.
pub struct ClientRead {
    half: Half,
    /// Longest wait for a byte inside a packet; None: no limit.
    packet_timeout: Option<Duration>,
    /// Whether reads are inside a packet now.
    in_packet: bool,
    /// Armed while a read inside a packet waits.
    timer: Option<Pin<Box<Sleep>>>,
}

enum Half {
    Plain(OwnedReadHalf),
    Tls(ReadHalf<TlsStream<TcpStream>>),
    /// Only tests make one ([`in_memory`]).
    #[cfg_attr(not(test), allow(dead_code))]
    Mem(ReadHalf<DuplexStream>),
}

impl ClientRead {
    fn new(half: Half) -> ClientRead {
        ClientRead { half, packet_timeout: None, in_packet: false, timer: None }
    }

    /// Sets the longest wait for a byte inside a packet (`limits.client_packet_timeout`).
    pub fn set_packet_timeout(&mut self, t: Duration) {
        self.packet_timeout = Some(t);
    }

    /// Says whether the next reads are inside a packet (timed) or wait for a packet's first
    /// byte (not timed).
    pub fn within_packet(&mut self, on: bool) {
        self.in_packet = on;
        if !on {
            self.timer = None;
        }
    }
}

/// The writing half of a client connection. It has no `AsyncWrite` impl on purpose: every
/// write goes through [`ClientWrite::write_all`], which also pushes TLS records out.
pub enum ClientWrite {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
    /// Only tests make one ([`in_memory`]).
    #[cfg_attr(not(test), allow(dead_code))]
    Mem(WriteHalf<DuplexStream>),
}

/// Splits a plain connection.
pub fn plain(tcp: TcpStream) -> (ClientRead, ClientWrite) {
    let (r, w) = tcp.into_split();
    (ClientRead::new(Half::Plain(r)), ClientWrite::Plain(w))
}

/// Splits a TLS connection (after its handshake).
pub fn tls(stream: TlsStream<TcpStream>) -> (ClientRead, ClientWrite) {
    let (r, w) = tokio::io::split(stream);
    (ClientRead::new(Half::Tls(r)), ClientWrite::Tls(w))
}

/// Splits an in-memory connection (the other end of a [`tokio::io::duplex`] is the client).
#[cfg_attr(not(test), allow(dead_code))]
pub fn in_memory(stream: DuplexStream) -> (ClientRead, ClientWrite) {
    let (r, w) = tokio::io::split(stream);
    (ClientRead::new(Half::Mem(r)), ClientWrite::Mem(w))
}

impl AsyncRead for ClientRead {
    #[inline]
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let polled = match &mut me.half {
            Half::Plain(r) => Pin::new(r).poll_read(cx, buf),
            Half::Tls(r) => Pin::new(r).poll_read(cx, buf),
            Half::Mem(r) => Pin::new(r).poll_read(cx, buf),
        };
        let (Poll::Pending, true, Some(limit)) = (&polled, me.in_packet, me.packet_timeout) else {
            me.timer = None;
            return polled;
        };
        let timer = me.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                me.timer = None;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the client sent no byte of its packet for {} (limits.client_packet_timeout)",
                        humantime::format_duration(limit)
                    ),
                )))
            }
        }
    }
}

impl ClientWrite {
    /// Writes all of `bytes`. On TLS it also flushes: rustls may keep the last records of a
    /// write when the socket is full, and they must reach the client now, not with the next
    /// answer.
    pub async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            ClientWrite::Plain(w) => w.write_all(bytes).await,
            ClientWrite::Mem(w) => w.write_all(bytes).await,
            ClientWrite::Tls(w) => {
                w.write_all(bytes).await?;
                w.flush().await
            }
        }
    }

    /// Closes the connection's writing side: a TLS `close_notify` first, then the TCP FIN.
    pub async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            ClientWrite::Plain(w) => w.shutdown().await,
            ClientWrite::Tls(w) => w.shutdown().await,
            ClientWrite::Mem(w) => w.shutdown().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chstorm_proto::native::wire::Io;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn plain_halves_carry_bytes_both_ways() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut peer = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (r, mut w) = plain(l.accept().await.unwrap().0);
        let mut io = Io::new(r);
        w.write_all(b"pong").await.unwrap();
        let mut got = [0u8; 4];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");
        peer.write_all(&[7]).await.unwrap();
        io.fill_some().await.unwrap();
        assert_eq!(io.u8().await.unwrap(), 7);
        w.shutdown().await.unwrap();
        assert_eq!(peer.read(&mut got).await.unwrap(), 0, "closed");
    }

    #[tokio::test]
    async fn tls_halves_flush_each_write_and_close_with_close_notify() {
        use std::sync::Arc;
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let cert = ck.cert.der().clone();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.key_pair.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let sc = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let cc = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        // Small socket buffers (accepted sockets inherit the listener's), so a write can fill
        // them.
        let ls = tokio::net::TcpSocket::new_v4().unwrap();
        ls.set_send_buffer_size(4096).unwrap();
        ls.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let l = ls.listen(8).unwrap();
        let addr = l.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let cs = tokio::net::TcpSocket::new_v4().unwrap();
            cs.set_recv_buffer_size(4096).unwrap();
            let tcp = cs.connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            tokio_rustls::TlsConnector::from(Arc::new(cc)).connect(name, tcp).await.unwrap()
        });
        let server = tokio_rustls::TlsAcceptor::from(Arc::new(sc)).accept(l.accept().await.unwrap().0).await.unwrap();
        let mut peer = client.await.unwrap();
        let (r, mut w) = tls(server);
        let mut io = Io::new(r);
        // Many small writes, each read by the peer before the next: none waits in rustls.
        for i in 0..50u8 {
            w.write_all(&[i; 3]).await.unwrap();
            let mut got = [0u8; 3];
            tokio::time::timeout(std::time::Duration::from_secs(5), peer.read_exact(&mut got)).await.unwrap().unwrap();
            assert_eq!(got, [i; 3]);
            // Meanwhile the reading half waits, and gets what the peer sends.
            peer.write_all(&[i]).await.unwrap();
            io.fill_some().await.unwrap();
            assert_eq!(io.u8().await.unwrap(), i);
        }
        // An answer that fills the (small) socket buffers while the peer is not reading yet:
        // rustls keeps the records that did not fit, and they must still go out when the peer
        // reads, not wait for a next write that may never come (the last answer of a session).
        let big: Vec<u8> = (0..48u32 << 10).map(|i| i as u8).collect();
        let writer = tokio::spawn({
            let big = big.clone();
            async move {
                w.write_all(&big).await.unwrap();
                w
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let mut got = vec![0u8; big.len()];
        tokio::time::timeout(std::time::Duration::from_secs(5), peer.read_exact(&mut got))
            .await
            .expect("the whole answer arrived without a later write")
            .unwrap();
        assert!(got == big);
        let mut w = writer.await.unwrap();
        w.shutdown().await.unwrap();
        let mut rest = Vec::new();
        assert_eq!(peer.read_to_end(&mut rest).await.unwrap(), 0, "a clean TLS close (close_notify), nothing after");
    }
}
