//! A client's FIN, seen without reading its connection.
//!
//! A client that sends a whole request and then shuts down its sending side (a half-close)
//! still reads the answer: 18.16 answers it, and runs its INSERT. A client that leaves sends
//! the same FIN. The two cannot be told apart without writing to the client, so the gateway
//! follows ClickHouse's own rule for this (`cancel_http_readonly_queries_on_client_close`,
//! which cancels a read on a FIN and lets every other statement run to its end):
//!
//! * a **read** (SELECT, WITH, SHOW, DESCRIBE, EXISTS, EXPLAIN) whose client sends its FIN
//!   before the whole answer has gone out is abandoned: its query is killed on the replica (the
//!   KILL guard, `killed_queries_total{reason="client_gone"}`), and the client gets Code 394 if
//!   no answer head has gone out yet, a cut connection otherwise (an answer the gateway held
//!   whole goes out whole: its query has ended). Without this a client that left would keep a
//!   silent read running to its end;
//! * **any other statement** (INSERT, CREATE, ...) runs to its end and is answered, as direct.
//!
//! hyper itself runs with `half_close(true)` (it no longer ends a connection at a FIN while a
//! request is in flight), and the FIN is watched here instead: a second descriptor of the same
//! socket, registered with tokio, wakes on `EPOLLRDHUP` (tokio's `read_closed`) without taking
//! a byte from the connection. A pipelined next request wakes it too; it then waits for the next
//! event. The FIN is a TCP one, so a TLS client is watched the same way. A connection is watched
//! once it has sent its first bytes (after its TLS handshake), so it then holds two descriptors
//! of its socket: size the descriptor limit for twice the clients that send queries
//! (`LimitNOFILE=65536` in `deploy/chstorm-gateway.service`: 32,000 such clients).

use crate::cluster::upstream::{BoxError, GBody};
use crate::signal::{Signal, Wait};
use bytes::Bytes;
use http_body::{Body, Frame};
use std::future::Future;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::Interest;

/// Fires when the client's FIN has come; the connection hands it to each of its queries.
#[derive(Clone, Debug, Default)]
pub struct ClientFin(Arc<Signal>);

impl ClientFin {
    /// Resolves once the client's FIN has come (never, for a client that keeps its side open).
    pub fn came(&self) -> Wait<&Signal> {
        self.0.wait()
    }

    /// `body`, ended with an error as soon as the FIN comes: the front then closes the
    /// connection and drops the body, whose guards cancel the query.
    pub fn cut(&self, body: GBody) -> GBody {
        use http_body_util::BodyExt;
        Cut { fin: self.0.clone().wait_owned(), body }.boxed_unsync()
    }
}

/// The watch of one connection: `(fin, watcher)`. The watcher must run beside the connection
/// (and be dropped with it: it holds a descriptor of the socket). None when the socket cannot
/// be watched (no descriptor left); the connection then works as without the watch.
pub fn watch(tcp: &tokio::net::TcpStream) -> Option<(ClientFin, impl Future<Output = ()> + Send + 'static)> {
    // A second descriptor of the socket (close-on-exec), owned by the std stream from here.
    let second = std::net::TcpStream::from(tcp.as_fd().try_clone_to_owned().ok()?);
    second.set_nonblocking(true).ok()?;
    let second = tokio::net::TcpStream::from_std(second).ok()?;
    let fin = ClientFin::default();
    let token = fin.0.clone();
    let watcher = async move {
        loop {
            match second.ready(Interest::READABLE).await {
                Ok(r) if r.is_read_closed() => return token.fire(),
                // Bytes of a next request: not a FIN; clear the readiness, wait for the next.
                Ok(_) => {
                    let _ = second.try_io(Interest::READABLE, || Err::<(), _>(std::io::ErrorKind::WouldBlock.into()));
                }
                Err(_) => return,
            }
        }
    };
    Some((fin, watcher))
}

/// The answer body of a read: [`ClientFin::cut`].
struct Cut {
    fin: Wait<Arc<Signal>>,
    body: GBody,
}

impl Body for Cut {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if Pin::new(&mut self.fin).poll(cx).is_ready() {
            return Poll::Ready(Some(Err("the client closed its side of the connection during a read".into())));
        }
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
