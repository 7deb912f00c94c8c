//! Writing a request: its head and its body in one write when the body is in memory (the
//! gateway's held bodies are), else the head, then the body as it comes, `Content-Length` or
//! chunked framed. An answer that comes before the body is all sent (an error the server found
//! early) ends the sending: it is read like any answer, and its connection is not reused.

use super::conn::Conn;
use crate::cluster::message::{BackendError, BackendRequest, GBody};
use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;
use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Bytes gathered before they are written while the body is ready at once: 64 KiB.
const WRITE_AT: usize = 64 * 1024;

/// How the request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body, and no header that says so (a GET).
    None,
    Length(u64),
    Chunked,
}

/// How the sending ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// The whole request went out.
    Whole,
    /// The server answered before the body was all sent.
    Early,
}

/// A body's next frame as `frame()` gives it: None at the body's end.
type Next = Option<Result<http_body::Frame<Bytes>, crate::cluster::message::BoxError>>;

fn failed(message: String) -> BackendError {
    BackendError { connect: false, message }
}

/// Writes `req` on `conn`. A failed write whose server answered first (an error, then its
/// close) is [`Sent::Early`]: that answer is the one to read.
pub async fn write(conn: &mut Conn, req: &mut BackendRequest, authority: &str) -> Result<Sent, BackendError> {
    match write_all(conn, req, authority).await {
        Err(_) if conn.try_fill().is_ok_and(|n| n > 0) => Ok(Sent::Early),
        r => r,
    }
}

async fn write_all(conn: &mut Conn, req: &mut BackendRequest, authority: &str) -> Result<Sent, BackendError> {
    let framing = framing(req);
    let mut out = Vec::with_capacity(512);
    head(&mut out, req, framing, authority)?;
    let body = &mut req.body;
    let mut sent = 0u64;
    loop {
        let frame = match ready_now(body) {
            Some(f) => f,
            None => {
                flush(conn, &mut out).await?;
                match next_or_answer(conn, body).await? {
                    Some(f) => f,
                    None => return Ok(Sent::Early),
                }
            }
        };
        match frame {
            None => {
                match framing {
                    Framing::Chunked => out.extend_from_slice(b"0\r\n\r\n"),
                    Framing::Length(n) if sent != n => {
                        return Err(failed(format!("the request body ended after {sent} of its {n} bytes")))
                    }
                    _ => {}
                }
                flush(conn, &mut out).await?;
                return Ok(Sent::Whole);
            }
            Some(Err(e)) => return Err(failed(format!("reading the request body: {e}"))),
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else { continue };
                sent += data.len() as u64;
                add_data(&mut out, framing, &data, sent)?;
                if out.len() >= WRITE_AT {
                    flush(conn, &mut out).await?;
                }
            }
        }
    }
}

/// The body's framing: `Content-Length: 0` for the gateway's empty POST, else the body's exact
/// size, else chunked.
fn framing(req: &BackendRequest) -> Framing {
    if req.empty_post {
        return Framing::Length(0);
    }
    match req.body.size_hint().exact() {
        Some(0) => Framing::None,
        Some(n) => Framing::Length(n),
        None if req.body.is_end_stream() => Framing::None,
        None => Framing::Chunked,
    }
}

/// The request line and headers (names as the `http` crate keeps them, in lower case): `host`,
/// unless the headers have one, the headers, the gateway's `authorization`, the framing. A target
/// that is not all visible ASCII (which would end the request line early) is refused.
fn head(out: &mut Vec<u8>, req: &BackendRequest, framing: Framing, authority: &str) -> Result<(), BackendError> {
    let target = if req.target.is_empty() { "/" } else { req.target.as_str() };
    if !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(failed(format!("a request target that is not all visible ASCII: {target:?}")));
    }
    for piece in [req.method.as_str(), " ", target, " HTTP/1.1\r\n"] {
        out.extend_from_slice(piece.as_bytes());
    }
    if !req.headers.contains_key(http::header::HOST) {
        for piece in ["host: ", authority, "\r\n"] {
            out.extend_from_slice(piece.as_bytes());
        }
    }
    let auth = req.auth.as_ref().map(|v| (&http::header::AUTHORIZATION, v));
    for (k, v) in req.headers.iter().chain(auth) {
        if k != http::header::CONTENT_LENGTH && k != http::header::TRANSFER_ENCODING {
            out.extend_from_slice(k.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    match framing {
        Framing::None => {}
        Framing::Length(n) => {
            for piece in ["content-length: ", itoa::Buffer::new().format(n), "\r\n"] {
                out.extend_from_slice(piece.as_bytes());
            }
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// Adds one frame's `data` (`sent` bytes so far, it included) to `out`, framed.
fn add_data(out: &mut Vec<u8>, framing: Framing, data: &Bytes, sent: u64) -> Result<(), BackendError> {
    match framing {
        Framing::Chunked if !data.is_empty() => {
            let _ = write!(out, "{:x}\r\n", data.len());
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        Framing::Length(n) if sent > n => {
            return Err(failed(format!("the request body is longer than its {n} bytes")));
        }
        Framing::None if !data.is_empty() => return Err(failed("a body the request said it had not".into())),
        _ => out.extend_from_slice(data),
    }
    Ok(())
}

/// The body's next frame if it is ready now (a held body's always is).
fn ready_now(body: &mut GBody) -> Option<Next> {
    match Pin::new(body).poll_frame(&mut Context::from_waker(std::task::Waker::noop())) {
        Poll::Ready(f) => Some(f),
        Poll::Pending => None,
    }
}

/// Writes out what `out` holds.
async fn flush(conn: &mut Conn, out: &mut Vec<u8>) -> Result<(), BackendError> {
    if out.is_empty() {
        return Ok(());
    }
    let r = conn.write_all(out).await;
    out.clear();
    r.map_err(|e| failed(format!("writing the request: {e}")))
}

/// The body's next frame, or None when an answer came first.
async fn next_or_answer(conn: &mut Conn, body: &mut GBody) -> Result<Option<Next>, BackendError> {
    loop {
        tokio::select! {
            biased;
            f = body.frame() => return Ok(Some(f)),
            r = conn.tcp.readable() => {
                r.map_err(|e| failed(format!("waiting for the request body: {e}")))?;
                match conn.try_fill() {
                    Ok(0) => return Err(failed("the server closed the connection while the request was sent".into())),
                    Ok(_) => return Ok(None),
                    // Readiness left over from the last answer: nothing came.
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(failed(format!("while the request was sent: {e}"))),
                }
            }
        }
    }
}
