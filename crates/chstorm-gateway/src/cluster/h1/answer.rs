//! Reading an answer: its head parsed with `httparse` (interim `1xx` heads skipped), its body
//! framed by `Content-Length`, chunked, or the connection's close, and yielded as it comes, in
//! the pieces the socket gave. At the body's end the connection goes back to its pool when the
//! server keeps it alive and nothing is left over; an answer dropped before its end closes it.

use super::conn::Conn;
use super::pool::Pool;
use crate::cluster::message::{BackendError, BoxError};
use bytes::{Buf, Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderName};
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The largest answer head read: 1 MiB, as chstorm's own client's
/// ([`chstorm_proto::http::MAX_ANSWER_HEAD`]): ClickHouse's heads are a few hundred bytes, but a
/// current server asked for `send_progress_in_http_headers` writes an `X-ClickHouse-Progress`
/// header every 100 ms until its body starts.
const MAX_HEAD: usize = chstorm_proto::http::MAX_ANSWER_HEAD;
/// Headers parsed with room on the stack; a head with more gets room for as many as it has (at
/// most [`chstorm_proto::http::MAX_ANSWER_HEADERS`]).
const MAX_HEADERS: usize = 128;
/// The longest chunk-size line, and the most trailer bytes, of a chunked body: 4 KiB.
const MAX_LINE: usize = 4 * 1024;

/// An answer's head, as read.
pub struct Head {
    pub parts: http::response::Parts,
    pub framing: Framing,
    /// The server keeps the connection alive after this answer.
    pub keep_alive: bool,
    /// The header names as spelled, when one is spelled otherwise than the front would spell it
    /// ([`super::spelling`]).
    pub spelled: Option<Vec<String>>,
}

/// How an answer's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (a `HEAD` request's answer, 204, 304).
    None,
    Length(u64),
    Chunked,
    /// Until the server closes the connection.
    Close,
}

fn failed(message: String) -> BackendError {
    BackendError { connect: false, message }
}

/// Reads the answer head off `conn` (the answer to a `HEAD` request when `to_head`).
pub async fn read_head(conn: &mut Conn, to_head: bool) -> Result<Head, BackendError> {
    loop {
        if !conn.buf.is_empty() {
            // Uninitialised room for the headers: `httparse` writes the ones it finds, and no
            // 4 KiB of empty headers is written first on every answer.
            let mut room = [const { std::mem::MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
            let mut more = Vec::new();
            let mut r = httparse::Response::new(&mut []);
            let mut parsed =
                httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut r, &conn.buf, &mut room);
            if parsed == Err(httparse::Error::TooManyHeaders) {
                more.resize_with(chstorm_proto::http::header_room(&conn.buf), std::mem::MaybeUninit::uninit);
                r = httparse::Response::new(&mut []);
                parsed =
                    httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut r, &conn.buf, &mut more);
            }
            match parsed {
                Ok(httparse::Status::Complete(n)) => {
                    let code = r.code.unwrap_or(0);
                    if (100..200).contains(&code) && code != 101 {
                        conn.buf.advance(n);
                        continue;
                    }
                    let mut head = build(&r, to_head)?;
                    if super::spelling::own_spelling(r.headers) {
                        head.spelled = Some(r.headers.iter().map(|h| h.name.to_string()).collect());
                    }
                    conn.buf.advance(n);
                    return Ok(head);
                }
                Ok(httparse::Status::Partial) if conn.buf.len() > MAX_HEAD => {
                    return Err(failed(format!("an answer head over {} KiB", MAX_HEAD >> 10)))
                }
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => {
                    let max = chstorm_proto::http::MAX_ANSWER_HEADERS;
                    return Err(failed(format!("an answer head with more than {max} headers")));
                }
                Err(e) => return Err(failed(format!("a malformed answer head: {e}"))),
            }
        }
        match conn.fill().await {
            Ok(0) => return Err(failed("the connection closed before the answer head".into())),
            Ok(_) => {}
            Err(e) => return Err(failed(format!("reading the answer head: {e}"))),
        }
    }
}

/// A hop-by-hop header (RFC 9110 7.6.1, and the old `keep-alive` and `proxy-connection`): about
/// this connection, read here and not passed on; or `Content-Length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framed {
    Length,
    Coding,
    Connection,
    OtherHop,
}

/// Which of the headers [`Framed`] names `name` is, in any case (the same names as
/// `crate::request::HOP_BY_HOP`, told apart by length first: no header is made to ask).
pub(super) fn framed(name: &str) -> Option<Framed> {
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    match name.len() {
        14 if is("content-length") => Some(Framed::Length),
        17 if is("transfer-encoding") => Some(Framed::Coding),
        10 if is("connection") => Some(Framed::Connection),
        10 if is("keep-alive") => Some(Framed::OtherHop),
        2 if is("te") => Some(Framed::OtherHop),
        7 if is("trailer") || is("upgrade") => Some(Framed::OtherHop),
        16 if is("proxy-connection") => Some(Framed::OtherHop),
        _ => None,
    }
}

/// The head's parts, framing and keep-alive, from a parsed head. A hop-by-hop header is read
/// where it lies, and never made into a `HeaderValue`.
fn build(r: &httparse::Response, to_head: bool) -> Result<Head, BackendError> {
    let code = r.code.unwrap_or(0);
    let status = http::StatusCode::from_u16(code).map_err(|_| failed(format!("a bad answer status {code}")))?;
    let http10 = r.version == Some(0);
    // Room for the `Content-Length` the front adds to an answer held whole: no growing there.
    // (Its ids and the connection headers are set by the answer writer, not in the map.)
    let mut headers = HeaderMap::with_capacity(r.headers.len() + 1);
    let (mut length, mut chunked, mut coded, mut close, mut keep) = (None, false, false, false, false);
    for h in r.headers.iter() {
        let value = |name: &HeaderName| {
            crate::header_values::value(name, h.value).map_err(|_| failed(format!("a bad value of {}", h.name)))
        };
        match framed(h.name) {
            Some(Framed::Length) => {
                let n = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse::<u64>().ok());
                let n =
                    n.ok_or_else(|| failed(format!("a bad Content-Length {:?}", String::from_utf8_lossy(h.value))))?;
                if length.is_some_and(|l| l != n) {
                    return Err(failed("two different Content-Length headers".into()));
                }
                length = Some(n);
                headers.append(CONTENT_LENGTH, value(&CONTENT_LENGTH)?);
            }
            Some(hop) => {
                // `httparse` refused a control byte in any value already (a malformed head).
                let value = h.value;
                if hop == Framed::Coding {
                    coded = true;
                    chunked = value
                        .rsplit(|b| *b == b',')
                        .next()
                        .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
                } else if hop == Framed::Connection {
                    for t in value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                        close |= t.eq_ignore_ascii_case(b"close");
                        keep |= t.eq_ignore_ascii_case(b"keep-alive");
                    }
                }
            }
            None => {
                let name = header_name(h.name)?;
                let v = value(&name)?;
                headers.append(name, v);
            }
        }
    }
    let framing = match () {
        _ if to_head || code == 204 || code == 304 => Framing::None,
        _ if coded => {
            if chunked {
                Framing::Chunked
            } else {
                Framing::Close
            }
        }
        _ => length.map_or(Framing::Close, Framing::Length),
    };
    let keep_alive = framing != Framing::Close && !close && (!http10 || keep);
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status = status;
    parts.version = if http10 { http::Version::HTTP_10 } else { http::Version::HTTP_11 };
    parts.headers = headers;
    Ok(Head { parts, framing, keep_alive, spelled: None })
}

/// A header name of an answer. ClickHouse's own names are made once: any other name that is not
/// one of `http`'s standard ones would cost an allocation per answer.
fn header_name(name: &str) -> Result<HeaderName, BackendError> {
    static KNOWN: std::sync::LazyLock<Vec<HeaderName>> = std::sync::LazyLock::new(|| {
        super::spelling::CLICKHOUSE_NAMES
            .iter()
            .map(|n| HeaderName::from_static(Box::leak(n.to_ascii_lowercase().into_boxed_str())))
            .collect()
    });
    if name.starts_with(['x', 'X']) {
        if let Some(known) = KNOWN.iter().find(|k| k.as_str().eq_ignore_ascii_case(name)) {
            return Ok(known.clone());
        }
    }
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| failed(format!("a bad header {name:?}")))
}

/// An answer's body, read off its connection as the client's side polls it.
pub struct Answer {
    conn: Option<Conn>,
    pool: Arc<Pool>,
    keep_alive: bool,
    decode: Decode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decode {
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    Trailer(usize),
    Close,
    Done,
}

/// One step of decoding.
enum Step {
    Data(Bytes),
    More,
    Done,
}

impl Answer {
    /// The body after `head`, read off `conn`; a connection with no body to read goes back to
    /// `pool` now.
    pub fn new(conn: Conn, pool: Arc<Pool>, keep_alive: bool, framing: Framing) -> Answer {
        let decode = match framing {
            Framing::None => Decode::Done,
            Framing::Length(n) => Decode::Length(n),
            Framing::Chunked => Decode::ChunkSize,
            Framing::Close => Decode::Close,
        };
        let mut a = Answer { conn: Some(conn), pool, keep_alive, decode };
        if matches!(a.decode, Decode::Done | Decode::Length(0)) {
            a.finish();
        }
        a
    }

    /// The body has ended: its connection goes back to the pool, or closes.
    fn finish(&mut self) {
        self.decode = Decode::Done;
        if let Some(c) = self.conn.take() {
            if self.keep_alive {
                self.pool.put(c);
            }
        }
    }
}

/// One step of `decode` over `buf`.
fn step(decode: &mut Decode, buf: &mut BytesMut) -> Result<Step, String> {
    loop {
        match *decode {
            Decode::Done | Decode::Length(0) => return Ok(Step::Done),
            Decode::Length(n) | Decode::ChunkData(n) => {
                if buf.is_empty() {
                    return Ok(Step::More);
                }
                let take = (buf.len() as u64).min(n);
                let left = n - take;
                *decode = match *decode {
                    Decode::Length(_) => Decode::Length(left),
                    _ if left == 0 => Decode::ChunkEnd,
                    _ => Decode::ChunkData(left),
                };
                return Ok(Step::Data(buf.split_to(take as usize).freeze()));
            }
            Decode::Close => {
                return Ok(if buf.is_empty() { Step::More } else { Step::Data(buf.split().freeze()) });
            }
            Decode::ChunkSize => {
                let Some(line) = line(buf)? else { return Ok(Step::More) };
                let hex = line.split(|b| *b == b';').next().unwrap_or_default().trim_ascii();
                let n = std::str::from_utf8(hex).ok().and_then(|h| u64::from_str_radix(h, 16).ok());
                *decode = match n {
                    Some(0) => Decode::Trailer(0),
                    Some(n) => Decode::ChunkData(n),
                    None => return Err(format!("a bad chunk size {:?}", String::from_utf8_lossy(hex))),
                };
            }
            Decode::ChunkEnd => {
                if buf.len() < 2 {
                    return Ok(Step::More);
                }
                if &buf[..2] != b"\r\n" {
                    return Err("a chunk not ended by CRLF".into());
                }
                buf.advance(2);
                *decode = Decode::ChunkSize;
            }
            Decode::Trailer(seen) => {
                let Some(line) = line(buf)? else { return Ok(Step::More) };
                if line.is_empty() {
                    *decode = Decode::Done;
                } else if seen + line.len() > MAX_LINE {
                    return Err(format!("trailers over {} KiB", MAX_LINE >> 10));
                } else {
                    *decode = Decode::Trailer(seen + line.len());
                }
            }
        }
    }
}

/// Takes one CRLF-ended line off `buf` (without its CRLF), when it is all there.
fn line(buf: &mut BytesMut) -> Result<Option<Bytes>, String> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(i) => {
            let l = buf.split_to(i).freeze();
            buf.advance(2);
            Ok(Some(l))
        }
        None if buf.len() > MAX_LINE => Err(format!("a chunked-body line over {} KiB", MAX_LINE >> 10)),
        None => Ok(None),
    }
}

impl Body for Answer {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else { return Poll::Ready(None) };
            match step(&mut this.decode, &mut conn.buf) {
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e.into())));
                }
                Ok(Step::Data(b)) => return Poll::Ready(Some(Ok(Frame::data(b)))),
                Ok(Step::Done) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Step::More) => match std::task::ready!(conn.poll_fill(cx)) {
                    Ok(0) if this.decode == Decode::Close => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(0) => {
                        this.conn = None;
                        return Poll::Ready(Some(Err("the connection closed before the answer's end".into())));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        this.conn = None;
                        return Poll::Ready(Some(Err(e.into())));
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.decode, Decode::Done | Decode::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.decode {
            Decode::Length(n) => SizeHint::with_exact(n),
            Decode::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
