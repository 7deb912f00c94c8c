//! A lean HTTP/1.1 client for ClickHouse's HTTP interface.
//!
//! Why not hyper's client: a load generator sends the same request shape millions of times and
//! throws the answers away. Here the request head is rendered once ([`RequestHead`]), each
//! request is one `write` of head + `Content-Length` + body from a reused buffer, and the answer
//! is parsed in place (httparse) and discarded while counting bytes. There is no header map, no
//! body channel and no allocation per request, which keeps client CPU per query below wrk's
//! (see docs/PERFORMANCE.md). The gateway, which must proxy arbitrary traffic, uses hyper.
//!
//! Supported answers: `Content-Length` and `chunked` bodies; `Connection: close`. Error answers
//! (non-2xx) keep the first [`ERROR_BODY_LIMIT`] bytes for the message and the ClickHouse
//! exception code (`X-ClickHouse-Exception-Code` header, or `Code: N` in the body). A 200 answer
//! that a current server cut after writing its exception into the body
//! ([`crate::rules::exception_after_head`]) is that exception, not a broken connection. A head
//! may have any number of headers (a current server writes an `X-ClickHouse-Progress` header
//! every 100 ms when asked) within [`MAX_ANSWER_HEAD`].

use crate::error::{exception_after_head, parse_exception_code, ProtoError, EXCEPTION_TAG_HEADER, MAX_BODY_EXCEPTION};
use crate::stream::{Connector, Stream};
use crate::target::Target;
use crate::QueryStats;
use base64::Engine as _;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes of an error answer's body kept for its message.
pub const ERROR_BODY_LIMIT: usize = 1024;
/// Largest answer head read, by chstorm's client and by the gateway's: 1 MiB. A current server
/// asked for `send_progress_in_http_headers` writes an `X-ClickHouse-Progress` header (about 150
/// bytes) every `http_headers_progress_interval_ms` (100 ms) until its body starts: some 12
/// minutes of a query's progress.
pub const MAX_ANSWER_HEAD: usize = 1 << 20;
/// Most headers one answer head may have: 16384 (the `http` crate's header maps hold at most
/// 32768).
pub const MAX_ANSWER_HEADERS: usize = 16 << 10;
/// Headers parsed in place before a head with more needs room allocated for them.
const INLINE_HEADERS: usize = 32;
/// Read buffer size, in bytes: small, because a run may hold 10,000 connections; it grows
/// (in steps of this size) only for answers that need it.
const READ_BUF: usize = 4 * 1024;

/// Characters escaped in URL parameters: all but RFC 3986's unreserved ones.
const URL_COMPONENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The fixed part of a request, rendered once per run.
#[derive(Clone, Debug)]
pub struct RequestHead {
    /// The request line up to the end of its target (`POST /?a=1`), without ` HTTP/1.1`.
    line: Vec<u8>,
    /// What joins one more URL parameter to `line`: `?` or `&`.
    param_sep: u8,
    /// From ` HTTP/1.1\r\n` up to and including `Content-Length: ` (POST) or the final CRLF (GET).
    rest: Vec<u8>,
    has_body: bool,
}

impl RequestHead {
    /// `POST {path}?{settings}` carrying the query in the body. `extra_settings` are added after
    /// the URL's own settings (later ones win on the server). `keepalive: false` adds
    /// `Connection: close`.
    pub fn query(target: &Target, extra_settings: &[(String, String)], keepalive: bool) -> RequestHead {
        let mut line = format!("POST {}", target.path);
        let mut sep = if target.path.contains('?') { '&' } else { '?' };
        let enc = |s: &str| percent_encoding::utf8_percent_encode(s, URL_COMPONENT).to_string();
        if let Some(db) = &target.database {
            line.push_str(&format!("{sep}database={}", enc(db)));
            sep = '&';
        }
        for (k, v) in target.settings.iter().chain(extra_settings) {
            line.push_str(&format!("{sep}{}={}", enc(k), enc(v)));
            sep = '&';
        }
        Self::build(target, &line, keepalive, true)
    }

    /// `GET /ping`, answered by the HTTP server without running a query.
    pub fn ping(target: &Target, keepalive: bool) -> RequestHead {
        Self::build(target, "GET /ping", keepalive, false)
    }

    fn build(target: &Target, line: &str, keepalive: bool, has_body: bool) -> RequestHead {
        let param_sep = if line.contains('?') { b'&' } else { b'?' };
        let mut h = format!(" HTTP/1.1\r\nHost: {}\r\n", target.authority());
        if let Some(user) = &target.user {
            let creds = format!("{user}:{}", target.password.as_deref().unwrap_or(""));
            h.push_str(&format!(
                "Authorization: Basic {}\r\n",
                base64::engine::general_purpose::STANDARD.encode(creds)
            ));
        }
        if !keepalive {
            h.push_str("Connection: close\r\n");
        }
        if has_body {
            h.push_str("Content-Length: ");
        } else {
            h.push_str("\r\n");
        }
        RequestHead { line: line.as_bytes().to_vec(), param_sep, rest: h.into_bytes(), has_body }
    }

    /// Appends this head to `out`, with `query_id` as one more URL parameter when given.
    fn render(&self, query_id: Option<&str>, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.line);
        if let Some(id) = query_id {
            out.push(self.param_sep);
            out.extend_from_slice(b"query_id=");
            out.extend(percent_encoding::utf8_percent_encode(id, URL_COMPONENT).flat_map(str::bytes));
        }
        out.extend_from_slice(&self.rest);
    }

    /// The URL parameters of the request line (`max_threads=1&query_id=x`), for tests and logs.
    pub fn url_params(&self) -> &str {
        let line = std::str::from_utf8(&self.line).unwrap_or("");
        line.split_once('?').map_or("", |(_, p)| p)
    }
}

/// One HTTP/1.1 connection.
pub struct HttpConn {
    stream: Stream,
    wbuf: Vec<u8>,
    rbuf: Vec<u8>,
    /// Set when the server asked to close, or the connection broke.
    closed: bool,
    /// The end of the chunked body being read, for an exception a server wrote before it cut it.
    tail: Vec<u8>,
}

/// How the body of an answer is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

impl HttpConn {
    pub async fn connect(connector: &Connector) -> Result<HttpConn, ProtoError> {
        Ok(HttpConn {
            stream: connector.connect().await?,
            wbuf: Vec::with_capacity(1024),
            rbuf: Vec::with_capacity(READ_BUF),
            tail: Vec::new(),
            closed: false,
        })
    }

    /// False once the server said `Connection: close` or the connection failed.
    pub fn reusable(&self) -> bool {
        !self.closed
    }

    /// Sends one request with `body` (ignored for GET) and reads the whole answer, discarding a
    /// successful body. Bounded by `timeout`.
    pub async fn send(&mut self, head: &RequestHead, body: &[u8], timeout: Duration) -> Result<QueryStats, ProtoError> {
        self.exchange(head, None, body, timeout, None).await
    }

    /// Like [`HttpConn::send`], with `query_id` as the request's `query_id` URL parameter, so
    /// the query can be found in `system.processes` and `system.query_log`, and killed.
    pub async fn send_with_id(
        &mut self,
        head: &RequestHead,
        query_id: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<QueryStats, ProtoError> {
        self.exchange(head, Some(query_id), body, timeout, None).await
    }

    /// Like [`HttpConn::send`] but returns the body of a successful answer as text (at most
    /// `limit` bytes are kept). For small answers: versions, test checks.
    pub async fn send_text(
        &mut self,
        head: &RequestHead,
        body: &[u8],
        timeout: Duration,
        limit: usize,
    ) -> Result<String, ProtoError> {
        let mut out = Vec::new();
        self.exchange(head, None, body, timeout, Some((&mut out, limit))).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    async fn exchange(
        &mut self,
        head: &RequestHead,
        query_id: Option<&str>,
        body: &[u8],
        timeout: Duration,
        keep: Option<(&mut Vec<u8>, usize)>,
    ) -> Result<QueryStats, ProtoError> {
        match tokio::time::timeout(timeout, self.exchange_inner(head, query_id, body, keep)).await {
            Ok(Ok(stats)) => Ok(stats),
            Ok(Err(e)) => {
                if e.breaks_connection() {
                    self.closed = true;
                }
                Err(e)
            }
            Err(_) => {
                self.closed = true;
                Err(ProtoError::Timeout(timeout, "waiting for the HTTP answer"))
            }
        }
    }

    async fn exchange_inner(
        &mut self,
        head: &RequestHead,
        query_id: Option<&str>,
        body: &[u8],
        mut keep: Option<(&mut Vec<u8>, usize)>,
    ) -> Result<QueryStats, ProtoError> {
        self.wbuf.clear();
        head.render(query_id, &mut self.wbuf);
        if head.has_body {
            self.wbuf.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
            self.wbuf.extend_from_slice(b"\r\n\r\n");
            self.wbuf.extend_from_slice(body);
        }
        self.stream.write_all(&self.wbuf).await?;
        self.stream.flush().await?;

        self.rbuf.clear();
        let Head { status, framing, code: code_header, len: head_len, closes: server_closes, tag } = loop {
            if let Some(parsed) = parse_head(&self.rbuf)? {
                break parsed;
            }
            if self.rbuf.len() >= MAX_ANSWER_HEAD {
                return Err(ProtoError::Protocol(format!("HTTP answer head longer than {MAX_ANSWER_HEAD} bytes")));
            }
            if self.fill().await? == 0 {
                return Err(ProtoError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed before the HTTP answer",
                )));
            }
        };
        if server_closes {
            self.closed = true;
        }
        let ok = (200..300).contains(&status);
        let mut err_body = Vec::new();
        let sink: Option<(&mut Vec<u8>, usize)> =
            if ok { keep.as_mut().map(|(v, l)| (&mut **v, *l)) } else { Some((&mut err_body, ERROR_BODY_LIMIT)) };
        let bytes = match self.read_body(head_len, framing, sink, ok).await {
            Ok(b) => b,
            // Cut by the server right after an exception it wrote into the body: that exception.
            Err(e) if ok && framing == Framing::Chunked => {
                self.closed = true;
                let Some(x) = exception_after_head(&self.tail, tag.as_deref()) else { return Err(e) };
                let message = x.message.lines().next().unwrap_or("").trim().to_string();
                return Err(ProtoError::HttpStatus { status, code: x.code, message });
            }
            Err(e) => return Err(e),
        };
        if ok {
            Ok(QueryStats { bytes, rows: 0 })
        } else {
            let code = code_header.or_else(|| parse_exception_code(&err_body));
            let text = String::from_utf8_lossy(&err_body);
            let message = text.lines().next().unwrap_or("").trim().to_string();
            Err(ProtoError::HttpStatus { status, code, message })
        }
    }

    /// Reads more bytes into `rbuf`; returns how many (0 at EOF).
    async fn fill(&mut self) -> Result<usize, ProtoError> {
        let len = self.rbuf.len();
        if self.rbuf.capacity() - len < 1024 {
            self.rbuf.reserve(READ_BUF);
        }
        let n = self.stream.read_buf(&mut self.rbuf).await?;
        Ok(n)
    }

    /// Consumes the body that starts at `rbuf[pos..]`, returning its payload size in bytes.
    async fn read_body(
        &mut self,
        mut pos: usize,
        framing: Framing,
        mut sink: Option<(&mut Vec<u8>, usize)>,
        ok: bool,
    ) -> Result<u64, ProtoError> {
        let mut total = 0u64;
        self.tail.clear();
        let mut keep = |data: &[u8]| {
            if let Some((v, limit)) = sink.as_mut() {
                let room = limit.saturating_sub(v.len());
                v.extend_from_slice(&data[..data.len().min(room)]);
            }
        };
        match framing {
            Framing::Length(mut left) => {
                while left > 0 {
                    if pos >= self.rbuf.len() {
                        self.rbuf.clear();
                        pos = 0;
                        if self.fill().await? == 0 {
                            return Err(eof("in the HTTP body"));
                        }
                    }
                    let take = ((self.rbuf.len() - pos) as u64).min(left) as usize;
                    keep(&self.rbuf[pos..pos + take]);
                    pos += take;
                    left -= take as u64;
                    total += take as u64;
                }
            }
            Framing::UntilClose => {
                self.closed = true;
                loop {
                    keep(&self.rbuf[pos..]);
                    total += (self.rbuf.len() - pos) as u64;
                    self.rbuf.clear();
                    pos = 0;
                    if self.fill().await? == 0 {
                        break;
                    }
                }
            }
            Framing::Chunked => loop {
                // Find the chunk-size line.
                let line_end = loop {
                    if let Some(i) = find_crlf(&self.rbuf[pos..]) {
                        break pos + i;
                    }
                    self.rbuf.drain(..pos);
                    pos = 0;
                    if self.rbuf.len() > 1024 {
                        return Err(ProtoError::Protocol("chunk size line too long".into()));
                    }
                    if self.fill().await? == 0 {
                        return Err(eof("in a chunk header"));
                    }
                };
                let size = parse_chunk_size(&self.rbuf[pos..line_end])?;
                pos = line_end + 2;
                // Chunk data plus its trailing CRLF (for the last chunk: the empty trailer line).
                let mut left = size + 2;
                if size == 0 {
                    // Skip optional trailers up to the blank line.
                    loop {
                        if let Some(i) = find_crlf(&self.rbuf[pos..]) {
                            if i == 0 {
                                pos += 2;
                                break;
                            }
                            pos += i + 2;
                            continue;
                        }
                        self.rbuf.drain(..pos);
                        pos = 0;
                        if self.fill().await? == 0 {
                            return Err(eof("in chunk trailers"));
                        }
                    }
                    let _ = pos;
                    break;
                }
                while left > 0 {
                    if pos >= self.rbuf.len() {
                        self.rbuf.clear();
                        pos = 0;
                        if self.fill().await? == 0 {
                            return Err(eof("in a chunk"));
                        }
                    }
                    let take = ((self.rbuf.len() - pos) as u64).min(left) as usize;
                    let data_part = take.min(left.saturating_sub(2) as usize);
                    keep(&self.rbuf[pos..pos + data_part]);
                    if ok {
                        keep_tail(&mut self.tail, &self.rbuf[pos..pos + data_part]);
                    }
                    total += data_part as u64;
                    pos += take;
                    left -= take as u64;
                }
            },
        }
        Ok(total)
    }
}

/// The most of a chunked answer's end kept to look for an exception block in, when it is cut.
const TAIL: usize = MAX_BODY_EXCEPTION + 64;

/// Appends `data` to `tail`, keeping at most its last [`TAIL`] bytes (trimmed in steps of
/// [`TAIL`], so a byte is moved at most once).
fn keep_tail(tail: &mut Vec<u8>, data: &[u8]) {
    let data = &data[data.len().saturating_sub(TAIL)..];
    if tail.len() + data.len() > 2 * TAIL {
        tail.drain(..tail.len() + data.len() - TAIL);
    }
    tail.extend_from_slice(data);
}

/// How many headers the head that starts `buf` may have, at most: its line ends, as many as
/// [`MAX_ANSWER_HEADERS`].
pub fn header_room(buf: &[u8]) -> usize {
    let end = buf.windows(3).position(|w| w == b"\n\r\n" || &w[..2] == b"\n\n").map_or(buf.len(), |i| i + 1);
    buf[..end].iter().filter(|b| **b == b'\n').count().min(MAX_ANSWER_HEADERS)
}

fn eof(where_: &str) -> ProtoError {
    ProtoError::Io(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("connection closed {where_}")))
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, ProtoError> {
    let hex = line.split(|&b| b == b';').next().unwrap_or(line);
    let s = std::str::from_utf8(hex).map_err(|_| ProtoError::Protocol("bad chunk size".into()))?;
    u64::from_str_radix(s.trim(), 16).map_err(|_| ProtoError::Protocol(format!("bad chunk size '{}'", s.trim())))
}

/// What the client reads of an answer head.
struct Head {
    status: u16,
    framing: Framing,
    /// `X-ClickHouse-Exception-Code`.
    code: Option<i32>,
    len: usize,
    closes: bool,
    /// `X-ClickHouse-Exception-Tag` (current servers send it on every answer).
    tag: Option<String>,
}

/// Parses a complete response head, or returns None when more bytes are needed. Up to
/// [`INLINE_HEADERS`] headers are parsed in place; a head with more gets room for as many as it
/// has ([`header_room`]).
fn parse_head(buf: &[u8]) -> Result<Option<Head>, ProtoError> {
    let mut inline = [httparse::EMPTY_HEADER; INLINE_HEADERS];
    match parse_head_with(buf, &mut inline) {
        Err(ProtoError::Protocol(m)) if m.ends_with(&httparse::Error::TooManyHeaders.to_string()) => {
            let mut room = vec![httparse::EMPTY_HEADER; header_room(buf)];
            parse_head_with(buf, &mut room).map_err(|e| match e {
                ProtoError::Protocol(m) if m.ends_with(&httparse::Error::TooManyHeaders.to_string()) => {
                    ProtoError::Protocol(format!("HTTP answer head with more than {MAX_ANSWER_HEADERS} headers"))
                }
                e => e,
            })
        }
        r => r,
    }
}

fn parse_head_with<'b>(buf: &'b [u8], headers: &mut [httparse::Header<'b>]) -> Result<Option<Head>, ProtoError> {
    let mut resp = httparse::Response::new(headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(ProtoError::Protocol(format!("malformed HTTP answer: {e}"))),
    };
    let status = resp.code.unwrap_or(0);
    let mut framing = Framing::UntilClose;
    let mut code = None;
    let mut tag = None;
    let mut closes = resp.version == Some(0);
    for h in resp.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value).ok().and_then(|s| s.trim().parse().ok());
            framing = Framing::Length(v.ok_or_else(|| ProtoError::Protocol("bad Content-Length".into()))?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if h.value.windows(7).any(|w| w.eq_ignore_ascii_case(b"chunked")) {
                framing = Framing::Chunked;
            }
        } else if name.eq_ignore_ascii_case("connection") {
            if h.value.eq_ignore_ascii_case(b"close") {
                closes = true;
            } else if h.value.eq_ignore_ascii_case(b"keep-alive") {
                closes = false;
            }
        } else if name.eq_ignore_ascii_case("x-clickhouse-exception-code") {
            code = std::str::from_utf8(h.value).ok().and_then(|s| s.trim().parse().ok());
        } else if name.eq_ignore_ascii_case(EXCEPTION_TAG_HEADER) {
            tag = std::str::from_utf8(h.value).ok().map(|s| s.trim().to_string());
        }
    }
    // A 1xx/204/304 answer has no body.
    if status < 200 || status == 204 || status == 304 {
        framing = Framing::Length(0);
    }
    Ok(Some(Head { status, framing, code, len: head_len, closes, tag }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_query_and_ping_heads() {
        let t = Target::parse("http://u:p@127.0.0.1:8123/?max_threads=2").unwrap();
        let h = RequestHead::query(&t, &[("log_comment".into(), "a b".into())], false);
        let render = |h: &RequestHead, id: Option<&str>| {
            let mut out = Vec::new();
            h.render(id, &mut out);
            String::from_utf8(out).unwrap()
        };
        let s = render(&h, None);
        assert!(s.starts_with("POST /?max_threads=2&log_comment=a%20b HTTP/1.1\r\nHost: 127.0.0.1:8123\r\n"), "{s}");
        assert!(s.contains("Authorization: Basic dTpw\r\n"));
        assert!(s.contains("Connection: close\r\n"));
        assert!(s.ends_with("Content-Length: "));
        let s = render(&h, Some("chstorm-ab12-3"));
        assert!(s.starts_with("POST /?max_threads=2&log_comment=a%20b&query_id=chstorm-ab12-3 HTTP/1.1\r\n"), "{s}");
        let bare = Target::parse("http://127.0.0.1:8123").unwrap();
        let s = render(&RequestHead::query(&bare, &[], true), Some("a b"));
        assert!(s.starts_with("POST /?query_id=a%20b HTTP/1.1\r\n"), "{s}");
        let p = RequestHead::ping(&t, true);
        let s = render(&p, None);
        assert!(s.starts_with("GET /ping HTTP/1.1\r\n") && s.ends_with("\r\n\r\n"));
    }

    #[test]
    fn parses_heads() {
        let Head { status, framing, code, len, closes, .. } =
            parse_head(b"HTTP/1.1 500 Internal\r\nX-ClickHouse-Exception-Code: 202\r\nContent-Length: 5\r\nConnection: Close\r\n\r\nabcde")
                .unwrap()
                .unwrap();
        assert_eq!((status, code, closes), (500, Some(202), true));
        assert!(matches!(framing, Framing::Length(5)));
        assert_eq!(len, 97);
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-").unwrap().is_none());
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
        assert_eq!(parse_chunk_size(b"1a;ext=1").unwrap(), 26);
        assert!(parse_chunk_size(b"zz").is_err());
        // Hundreds of progress headers, within the head's size; past the count, one line.
        for n in [0usize, 31, 32, 33, 500, 5000] {
            let mut h = b"HTTP/1.1 200 OK\r\nX-ClickHouse-Exception-Tag: abc\r\n".to_vec();
            for i in 0..n {
                h.extend_from_slice(format!("X-ClickHouse-Progress: {{\"read_rows\":\"{i}\"}}\r\n").as_bytes());
            }
            h.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n1\r\n\n");
            let head = parse_head(&h).unwrap().expect("whole");
            assert_eq!((head.status, head.framing, head.tag.as_deref()), (200, Framing::Chunked, Some("abc")), "{n}");
            assert!(parse_head(&h[..h.len() - 10]).unwrap().is_none() || n == 0);
        }
        let mut h = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..=MAX_ANSWER_HEADERS {
            h.extend_from_slice(b"A: b\r\n");
        }
        h.extend_from_slice(b"\r\n");
        let e = parse_head(&h).err().expect("too many").to_string();
        assert!(e.contains("more than 16384 headers"), "{e}");
    }

    /// Serves `answer` to every request on a loopback port, closing after each.
    async fn serve_once(answer: Vec<u8>) -> Target {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut b = vec![0u8; 64 << 10];
                let _ = s.read(&mut b).await;
                let _ = s.write_all(&answer).await;
            }
        });
        Target::parse(&format!("http://{addr}")).unwrap()
    }

    #[tokio::test]
    async fn a_cut_after_the_servers_exception_is_that_exception() {
        let text = "Code: 395. DB::Exception: Value passed to 'throwIf' function is non-zero. (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO)";
        let tag = "kq3vzmw8rt1ydx5a";
        let tagged = format!("\r\n__exception__\r\n{tag}\r\n{text}\n{} {tag}\r\n__exception__\r\n", text.len() + 1);
        let untagged = format!("__exception__\r\n{text}\n");
        for (head, block, code) in [
            (format!("X-ClickHouse-Exception-Tag: {tag}\r\n"), tagged, Some(395)),
            (String::new(), untagged, Some(395)),
            (String::new(), "3\n4".to_string(), None),
        ] {
            let answer = format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{head}\r\n4\r\n1\n2\n\r\n{:x}\r\n{block}\r\n",
                block.len()
            );
            let t = serve_once(answer.into_bytes()).await;
            let c = Connector::new(&t, &crate::TlsOptions::default(), Duration::from_secs(5)).unwrap();
            let mut conn = HttpConn::connect(&c).await.unwrap();
            let e =
                conn.send(&RequestHead::query(&t, &[], true), b"SELECT 1", Duration::from_secs(5)).await.unwrap_err();
            match (code, &e) {
                (Some(c), ProtoError::HttpStatus { status: 200, code: Some(got), message }) => {
                    assert_eq!((*got, message.as_str()), (c, text));
                    assert_eq!(e.kind_key(), "clickhouse_395");
                }
                (None, ProtoError::Io(_)) => assert_eq!(e.kind_key(), "io"),
                _ => panic!("{code:?}: {e:?}"),
            }
            assert!(!conn.reusable());
        }
    }

    #[test]
    fn the_tail_keeps_the_end_of_the_body() {
        let mut tail = Vec::new();
        let mut all = Vec::new();
        for i in 0..10_000u32 {
            let piece = format!("row {i}\n").into_bytes();
            keep_tail(&mut tail, &piece);
            all.extend_from_slice(&piece);
            assert!(tail.len() <= 2 * TAIL);
            assert!(all.ends_with(&tail) && (tail.len() >= TAIL || tail.len() == all.len()));
        }
        keep_tail(&mut tail, &vec![b'x'; 3 * TAIL]);
        assert_eq!(tail, vec![b'x'; TAIL]);
    }
}
