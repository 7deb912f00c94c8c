//! The gateway's own HTTP/1 server for the requests a storm of small queries is made of: a
//! request head read and parsed by `httparse` ([`head`]), the query served, its answer written
//! in one write when it is small ([`answer`]), and the next head read, all in the connection's
//! own task. The first request it does not serve ([`head::Parsed::Other`]: HTTP/1.0,
//! `Transfer-Encoding`, `Expect: 100-continue`, a body that has not come whole with its head, a
//! head `httparse` refuses or one over 64 KiB) goes with the bytes read of it to hyper's server,
//! which then serves the connection to its end (`super::conn`).
//!
//! Why not hyper for all of it: with hyper's server, the client connection around the query
//! service cost a `SELECT 1` about 19,700 user-space instructions (its dispatcher, its buffers,
//! its header case map), two thirds of what HAProxy spends on the whole request; with this one,
//! about 11,100 (docs/PERFORMANCE.md, "Where the instructions go"). What this front does, it
//! does as hyper does, byte for byte on the wire: the same parser, the same answer heads, the
//! same timeouts:
//!
//! * `limits.client_header_timeout` runs from the moment the connection waits for a head;
//!   [`Ended::TimedOut`] says whether part of one had come.
//! * A client's FIN ends the connection once its answer has gone out (the FIN watch is the
//!   connection's, `super::client_fin`).
//! * The drain: a connection waiting for a head closes; a busy one closes after its answer.
//! * A write that waits `limits.client_write_timeout` fails (the connection's I/O does that),
//!   and so does a body that fails: the connection closes, the answer's guards drop.

pub mod answer;
pub mod head;

use super::client_body::FrontBody;
use crate::cluster::upstream::GBody;
use answer::{BodyLength, Framing};
use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response};
use http_body::Body;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// The most bytes of a head the own front reads before it hands the connection to hyper: 64 KiB.
const MAX_HEAD: usize = 64 * 1024;
/// What one read asks the socket for at least: 8 KiB.
const READ_AT_LEAST: usize = 8 * 1024;
/// A body frame this long or longer is written as it is, not copied after the head: 16 KiB.
const WRITE_AS_IS: usize = 16 * 1024;

/// How the own front's part of a connection ended.
#[derive(Debug)]
pub enum Ended {
    /// The client closed, an answer closed the connection, or the drain did.
    Closed,
    /// No whole head came in `limits.client_header_timeout`; `partial`: part of one had.
    TimedOut { partial: bool },
    /// A read or a write failed, or an answer's body did.
    Failed,
    /// A request for hyper: the bytes read of it, and of any after it.
    Handover(Bytes),
}

/// Serves requests on `io` with `service` until the connection ends or a request is one for
/// hyper. `forced`: resolves when the gateway's drain closes connections.
pub async fn serve<IO, S, F, R>(
    io: &mut IO,
    header_timeout: Duration,
    forced: impl Future<Output = ()>,
    mut service: S,
) -> Ended
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: FnMut(Box<Request<FrontBody>>) -> F,
    F: Future<Output = R>,
    R: Into<Reply>,
{
    tokio::pin!(forced);
    let mut buf = BytesMut::with_capacity(READ_AT_LEAST);
    let mut out = Vec::with_capacity(1024);
    loop {
        let (parts, body) = match read_head(io, &mut buf, header_timeout, forced.as_mut()).await {
            Ok(r) => r,
            Err(ended) => return ended,
        };
        let method = parts.method.clone();
        let reply = service(Box::new(Request::from_parts(parts, FrontBody::Whole(body)))).await.into();
        match write_answer(io, &method, reply, &mut out).await {
            Ok(false) => {}
            Ok(true) => {
                let _ = io.shutdown().await;
                return Ended::Closed;
            }
            Err(()) => return Ended::Failed,
        }
    }
}

/// An answer as a service gives it to the own front, with the headers its writer sets: the
/// connection's ([`answer::ConnHeaders`]; none: the answer's own) and the gateway's ids
/// ([`crate::http::ids`]).
pub struct Reply {
    pub resp: Response<GBody>,
    pub conn: Option<answer::ConnHeaders>,
    pub ids: Option<crate::http::ids::Ids>,
}

impl From<Response<GBody>> for Reply {
    fn from(resp: Response<GBody>) -> Reply {
        Reply { resp, conn: None, ids: None }
    }
}

impl Reply {
    /// The answer with the headers the writer would set put into its map, where the writer
    /// would put them: for hyper's server, which writes only the map.
    pub fn into_inserted(self) -> Response<GBody> {
        let mut resp = self.resp;
        if let Some(c) = self.conn {
            c.insert_into(resp.headers_mut());
        }
        crate::http::ids::Served { resp, ids: self.ids }.into_response()
    }
}

/// Reads until `buf` starts with a whole head the own front serves.
async fn read_head<IO: AsyncRead + Unpin>(
    io: &mut IO,
    buf: &mut BytesMut,
    timeout: Duration,
    mut forced: Pin<&mut impl Future<Output = ()>>,
) -> Result<(http::request::Parts, Option<Bytes>), Ended> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if !buf.is_empty() {
            match head::parse(buf) {
                head::Parsed::Simple(parts, body) => return Ok((parts, body)),
                head::Parsed::Other => return Err(Ended::Handover(buf.split().freeze())),
                head::Parsed::Partial if buf.len() >= MAX_HEAD => return Err(Ended::Handover(buf.split().freeze())),
                head::Parsed::Partial => {}
            }
        }
        buf.reserve(READ_AT_LEAST);
        tokio::select! {
            biased;
            _ = forced.as_mut() => return Err(Ended::Closed),
            r = tokio::time::timeout_at(deadline, io.read_buf(buf)) => match r {
                Err(_) => return Err(Ended::TimedOut { partial: !buf.is_empty() }),
                Ok(Ok(0)) => return Err(Ended::Closed),
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return Err(Ended::Failed),
            },
        }
    }
}

/// Writes `reply` to `io` (its head and a small body in one write); whether the connection
/// closes after it.
async fn write_answer<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    method: &Method,
    reply: Reply,
    out: &mut Vec<u8>,
) -> Result<bool, ()> {
    let (parts, mut body) = reply.resp.into_parts();
    let length = if body.is_end_stream() {
        BodyLength::None
    } else {
        body.size_hint().exact().map_or(BodyLength::Unknown, BodyLength::Known)
    };
    out.clear();
    let set = answer::Set { conn: reply.conn.as_ref(), ids: reply.ids.as_ref() };
    let (framing, close) = answer::head(&parts, method, length, set, out).map_err(drop)?;
    drop(parts);
    if framing != Framing::Length(0) {
        send_body(io, framing, &mut body, out).await?;
    }
    drop(body);
    if !out.is_empty() {
        io.write_all(out).await.map_err(drop)?;
    }
    io.flush().await.map_err(drop)?;
    if out.capacity() > 2 * WRITE_AS_IS {
        *out = Vec::with_capacity(1024);
    }
    Ok(close)
}

/// What comes of polling an answer's body.
enum Step {
    /// Nothing is ready, and bytes wait in `out`: write them first.
    Flush,
    Frame(Option<Result<http_body::Frame<Bytes>, crate::cluster::upstream::BoxError>>),
}

/// Writes `body` in `framing`, behind the head in `out`; leaves in `out` what is still to write.
async fn send_body<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    framing: Framing,
    body: &mut GBody,
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    let mut left = match framing {
        Framing::Length(n) => Some(n),
        Framing::Chunked => None,
    };
    loop {
        let step = std::future::poll_fn(|cx: &mut Context<'_>| match Pin::new(&mut *body).poll_frame(cx) {
            Poll::Ready(f) => Poll::Ready(Step::Frame(f)),
            Poll::Pending if out.is_empty() => Poll::Pending,
            Poll::Pending => Poll::Ready(Step::Flush),
        })
        .await;
        let data = match step {
            Step::Flush => {
                io.write_all(out).await.map_err(drop)?;
                out.clear();
                continue;
            }
            Step::Frame(None) => break,
            // What came before the break goes out first (a current server's exception after its
            // head is the last thing it sends before it cuts its answer), then the same cut.
            Step::Frame(Some(Err(_))) => {
                let _ = io.write_all(out).await;
                let _ = io.flush().await;
                out.clear();
                return Err(());
            }
            Step::Frame(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue, // trailers: none is announced, so none is sent
            },
        };
        if let Some(n) = left.as_mut() {
            *n = n.checked_sub(data.len() as u64).ok_or(())?;
        }
        if data.len() >= WRITE_AS_IS {
            answer::frame_start(framing, data.len(), out);
            io.write_all(out).await.map_err(drop)?;
            io.write_all(&data).await.map_err(drop)?;
            out.clear();
            answer::frame_end(framing, out);
        } else if !data.is_empty() {
            answer::frame(framing, &data, out);
        }
        if body.is_end_stream() {
            break;
        }
    }
    match left {
        Some(0) => Ok(()),
        Some(_) => Err(()), // the body ended before its length
        None => {
            out.extend_from_slice(answer::LAST_CHUNK);
            Ok(())
        }
    }
}

/// An I/O stream that reads `prefix` first: a connection handed to hyper with the bytes the own
/// front read of it.
pub struct Rewind<T> {
    prefix: Bytes,
    inner: T,
}

impl<T> Rewind<T> {
    pub fn new(prefix: Bytes, inner: T) -> Rewind<T> {
        Rewind { prefix, inner }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests;
