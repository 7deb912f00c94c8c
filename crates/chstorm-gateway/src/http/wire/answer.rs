//! An answer on the wire, byte for byte as hyper's HTTP/1 server writes it with
//! `title_case_headers` (hyper 1.x, `proto::h1::role`, `Server::encode`), so that a client
//! cannot tell which front served it:
//!
//! * the status line (`HTTP/1.1 200 OK`, or the code and its canonical reason);
//! * the headers in the map's order, one line each, except `Connection`, `Transfer-Encoding`
//!   and `Trailer`, whose values share one line; `Content-Length` once;
//! * the framing hyper adds: `Content-Length` for a body of known length, `Content-Length: 0`
//!   for none, `Transfer-Encoding: chunked` otherwise, none of them where the method or status
//!   has no body (`HEAD`, 204, 304); then `Date` unless the answer has one.
//!
//! Names are spelled as the HTTP front always spells them ([`Speller`]): as the replica spelled
//! them when the answer carries its spelling, ClickHouse's spelling for the first of each of its
//! own names, title case for the rest. An answer of an `https://` replica whose spelling is kept
//! ([`BackendSpelling`] without [`SpelledNames`]) has each of ClickHouse's names in ClickHouse's
//! spelling, every time it comes; which is how a ClickHouse replica spells them.

use crate::cluster::h1::spelling::{clickhouse_header, BackendSpelling, SpelledNames, CLICKHOUSE_NAMES};
use crate::http::ids::{self, Ids};
use http::{header, HeaderName, HeaderValue, Method, StatusCode};
use std::cell::RefCell;

/// How an answer's body goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Exactly this many bytes (0: no body at all).
    Length(u64),
    Chunked,
}

/// What the answer's body says of its length (hyper's `BodyLength`, `None` for a body at its
/// end already).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLength {
    None,
    Known(u64),
    Unknown,
}

/// An answer head hyper would refuse to write: two different lengths, one not a number, or a
/// framing header after another.
/// hyper then closes the connection without an answer; so does the own front.
#[derive(Debug, thiserror::Error)]
#[error("the answer's head has a Content-Length that is not one number")]
pub struct BadHead;

/// The connection headers of an answer as 18.16 sends them, set by the writer as it writes the
/// head (`crate::http::conn` decides them): `Connection: Close` when the client closes or the
/// answer's own first `Connection` is `close`, else `Connection: Keep-Alive`; then `Keep-Alive:
/// <keep_alive>`, or none at all. Each goes where `HeaderMap::insert` would put it
/// ([`ConnHeaders::insert_into`], for hyper's server): in place of the answer's first header of
/// its name (the others dropped), else after the answer's own headers. Inserted, the two cost
/// two hashed inserts and a lookup per answer.
#[derive(Debug, Clone)]
pub struct ConnHeaders {
    pub client_closes: bool,
    pub keep_alive: Option<HeaderValue>,
}

/// `keep-alive`.
pub static KEEP_ALIVE: http::HeaderName = http::HeaderName::from_static("keep-alive");
static CONNECTION: http::HeaderName = header::CONNECTION;

impl ConnHeaders {
    /// Inserted into `h`, as the writer writes them.
    pub fn insert_into(&self, h: &mut http::HeaderMap) {
        let answer_closes = h.get(header::CONNECTION).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        h.insert(header::CONNECTION, HeaderValue::from_static(self.connection(answer_closes).0));
        match &self.keep_alive {
            Some(v) => {
                h.insert(KEEP_ALIVE.clone(), v.clone());
            }
            // Not `HeaderMap::remove`, which moves the map's last header into the place of the
            // one removed: the writer drops it and keeps the order.
            None if h.contains_key(&KEEP_ALIVE) => {
                let mut kept = http::HeaderMap::with_capacity(h.len());
                let mut name = None;
                for (k, v) in std::mem::take(h) {
                    name = k.or(name);
                    if let Some(k) = name.as_ref().filter(|k| **k != KEEP_ALIVE) {
                        kept.append(k.clone(), v);
                    }
                }
                *h = kept;
            }
            None => {}
        }
    }

    /// The `Connection` value, and whether it closes.
    fn connection(&self, answer_closes: bool) -> (&'static str, bool) {
        if self.client_closes || answer_closes {
            ("Close", true)
        } else {
            ("Keep-Alive", false)
        }
    }
}

/// The headers the writer sets on an answer, where inserting them into its map would put them:
/// its connection headers, then the gateway's ids.
#[derive(Clone, Copy)]
pub struct Set<'x> {
    pub conn: Option<&'x ConnHeaders>,
    pub ids: Option<&'x Ids>,
}

/// Writes the answer head of `parts` to `out`, with the headers `set` on it: its framing, and
/// whether the connection closes after it (a `close` token in its `Connection`).
pub fn head(
    parts: &http::response::Parts,
    method: &Method,
    body: BodyLength,
    set: Set<'_>,
    out: &mut Vec<u8>,
) -> Result<(Framing, bool), BadHead> {
    let status = parts.status;
    status_line(status, out);
    let chunkable = can_chunk(method, status);
    let mut w = Writer { out, speller: Speller::of(&parts.extensions), open: None };
    let set = Overlay { conn: set.conn, ids: set.ids, placed: [false; 2 + ids::NAMES.len()], n: itoa::Buffer::new() };
    let lines = header_lines(&mut w, &parts.headers, set, method, body, chunkable)?;
    let mut framing = match lines.framing {
        Some(f) => f,
        None => implicit_framing(&mut w, method, status, body, chunkable),
    };
    if !chunkable {
        framing = Framing::Length(0);
    }
    if !lines.wrote_date {
        w.speller.write(w.out, &header::DATE);
        w.out.extend_from_slice(b": ");
        date(w.out);
        w.out.extend_from_slice(b"\r\n");
    }
    w.out.extend_from_slice(b"\r\n");
    Ok((framing, lines.close))
}

fn status_line(status: StatusCode, out: &mut Vec<u8>) {
    if status == StatusCode::OK {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// What the header lines said.
struct Lines {
    /// The framing a length or coding header set (`None`: none did).
    framing: Option<Framing>,
    wrote_date: bool,
    close: bool,
}

/// Writes the answer's own header lines, as hyper's `encode_headers` does, with the headers
/// `set` on it where inserting them into `headers` would have put them.
fn header_lines<'a>(
    w: &mut Writer<'a, '_>,
    headers: &'a http::HeaderMap,
    mut set: Overlay<'_>,
    method: &Method,
    body: BodyLength,
    chunkable: bool,
) -> Result<Lines, BadHead> {
    let mut lines = Lines { framing: None, wrote_date: false, close: false };
    let mut wrote_len = false;
    for (name, value) in headers {
        if w.open.is_some_and(|o| o.name != name) {
            w.close_line();
        }
        if set.in_place(w, name, value, &mut lines) {
            continue;
        }
        let continued = w.open.is_some();
        if wrote_len && !continued && (*name == header::CONTENT_LENGTH || *name == header::TRANSFER_ENCODING) {
            return Err(BadHead); // a second framing header, hyper's "unexpected" one
        }
        match *name {
            header::CONTENT_LENGTH => match body {
                BodyLength::Known(n) => {
                    if !continued {
                        lines.framing = Some(Framing::Length(n));
                        w.open_line(name, value, false);
                        wrote_len = true;
                    }
                    continue;
                }
                BodyLength::Unknown => {
                    let n = std::str::from_utf8(value.as_bytes()).ok().and_then(|v| v.parse::<u64>().ok());
                    match (lines.framing, n) {
                        (_, None) => return Err(BadHead),
                        (Some(Framing::Length(m)), Some(n)) if m != n => return Err(BadHead),
                        (Some(_), _) => {}
                        (None, Some(n)) => {
                            lines.framing = Some(Framing::Length(n));
                            w.open_line(name, value, false);
                            wrote_len = true;
                        }
                    }
                    continue;
                }
                BodyLength::None if *method != Method::HEAD => continue,
                BodyLength::None => {
                    lines.framing = Some(Framing::Length(0));
                    wrote_len = true;
                }
            },
            header::TRANSFER_ENCODING | header::TRAILER => {
                if !chunkable {
                    continue;
                }
                if *name == header::TRANSFER_ENCODING {
                    wrote_len = true;
                    lines.framing = Some(Framing::Chunked);
                }
                let unchunked = *name == header::TRANSFER_ENCODING && !last_token_is(value, "chunked");
                w.add_value(name, value, unchunked);
                continue;
            }
            header::CONNECTION => {
                lines.close |= has_token(value, "close");
                w.add_value(name, value, false);
                continue;
            }
            header::DATE => lines.wrote_date = true,
            _ => {}
        }
        w.line(name, value.as_bytes());
    }
    if w.open.is_some() {
        w.close_line();
    }
    set.rest(w, &mut lines);
    Ok(lines)
}

/// The headers the writer sets on an answer: its connection headers, then the gateway's ids
/// ([`crate::http::ids`]); and which of them went out in place of the answer's own.
struct Overlay<'x> {
    conn: Option<&'x ConnHeaders>,
    ids: Option<&'x Ids>,
    /// `Connection`, `Keep-Alive`, then [`ids::NAMES`].
    placed: [bool; 2 + ids::NAMES.len()],
    n: itoa::Buffer,
}

impl Overlay<'_> {
    /// Whether the answer's header `name: value` is one the overlay sets: then what replaces it
    /// is written here, once, and the header itself is not.
    fn in_place(&mut self, w: &mut Writer<'_, '_>, name: &HeaderName, value: &HeaderValue, lines: &mut Lines) -> bool {
        if let Some(c) = self.conn {
            if *name == header::CONNECTION {
                if !std::mem::replace(&mut self.placed[0], true) {
                    let (v, close) = c.connection(value.as_bytes().eq_ignore_ascii_case(b"close"));
                    lines.close |= close;
                    w.line(&CONNECTION, v.as_bytes());
                }
                return true;
            }
            if *name == KEEP_ALIVE {
                if let Some(v) = c.keep_alive.as_ref().filter(|_| !std::mem::replace(&mut self.placed[1], true)) {
                    w.line(&KEEP_ALIVE, v.as_bytes());
                }
                return true;
            }
        }
        let Some((ids, i)) = self.ids.and_then(|ids| Some((ids, Ids::index(name)?))) else { return false };
        let Some(v) = ids.value(i, &mut self.n) else { return false };
        if !std::mem::replace(&mut self.placed[2 + i], true) {
            w.line(ids::NAMES[i], v);
        }
        true
    }

    /// Writes those not written in place, after the answer's own headers.
    fn rest(&mut self, w: &mut Writer<'_, '_>, lines: &mut Lines) {
        if let Some(c) = self.conn {
            if !self.placed[0] {
                let (v, close) = c.connection(false);
                lines.close |= close;
                w.line(&CONNECTION, v.as_bytes());
            }
            if let Some(v) = c.keep_alive.as_ref().filter(|_| !self.placed[1]) {
                w.line(&KEEP_ALIVE, v.as_bytes());
            }
        }
        for (i, name) in ids::NAMES.iter().enumerate() {
            if let Some(v) = self.ids.filter(|_| !self.placed[2 + i]).and_then(|ids| ids.value(i, &mut self.n)) {
                w.line(name, v);
            }
        }
    }
}

/// The framing header hyper adds to an answer that has none, and the framing.
fn implicit_framing(
    w: &mut Writer<'_, '_>,
    method: &Method,
    status: StatusCode,
    body: BodyLength,
    chunkable: bool,
) -> Framing {
    match body {
        BodyLength::Unknown if chunkable => {
            w.line(&header::TRANSFER_ENCODING, b"chunked");
            Framing::Chunked
        }
        BodyLength::Unknown => Framing::Length(0),
        BodyLength::None | BodyLength::Known(0) => {
            if can_have_length(status) && *method != Method::HEAD {
                w.line(&header::CONTENT_LENGTH, b"0");
            }
            Framing::Length(0)
        }
        BodyLength::Known(n) if can_have_length(status) => {
            w.line(&header::CONTENT_LENGTH, itoa::Buffer::new().format(n).as_bytes());
            Framing::Length(n)
        }
        BodyLength::Known(_) => Framing::Length(0),
    }
}

/// Appends a body frame `data` in `framing` to `out`.
pub fn frame(framing: Framing, data: &[u8], out: &mut Vec<u8>) {
    frame_start(framing, data.len(), out);
    out.extend_from_slice(data);
    frame_end(framing, out);
}

/// What goes before a frame of `len` bytes: its chunk size line, when chunked.
pub fn frame_start(framing: Framing, len: usize, out: &mut Vec<u8>) {
    if framing == Framing::Chunked {
        push_hex(out, len);
        out.extend_from_slice(b"\r\n");
    }
}

/// What goes after a frame: the chunk's line end, when chunked.
pub fn frame_end(framing: Framing, out: &mut Vec<u8>) {
    if framing == Framing::Chunked {
        out.extend_from_slice(b"\r\n");
    }
}

/// The end of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Appends `n` in upper-case hex, as hyper writes a chunk's size.
fn push_hex(out: &mut Vec<u8>, n: usize) {
    let digits = (usize::BITS - n.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        out.push(b"0123456789ABCDEF"[(n >> (4 * i)) & 15]);
    }
}

/// A line that collects a header's values (`Connection`, `Transfer-Encoding`, `Trailer`).
#[derive(Clone, Copy)]
struct Open<'a> {
    name: &'a http::HeaderName,
    /// Ends in `, chunked` (a `Transfer-Encoding` whose value does not end in it).
    add_chunked: bool,
}

struct Writer<'a, 'o> {
    out: &'o mut Vec<u8>,
    speller: Speller<'a>,
    open: Option<Open<'a>>,
}

impl<'a> Writer<'a, '_> {
    fn line(&mut self, name: &'a http::HeaderName, value: &[u8]) {
        self.speller.write(self.out, name);
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
    }

    fn open_line(&mut self, name: &'a http::HeaderName, value: &HeaderValue, add_chunked: bool) {
        self.speller.write(self.out, name);
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value.as_bytes());
        self.open = Some(Open { name, add_chunked });
    }

    /// One more value of a collecting header: the line's first, or `, value` on it.
    fn add_value(&mut self, name: &'a http::HeaderName, value: &HeaderValue, add_chunked: bool) {
        match &mut self.open {
            Some(o) => {
                o.add_chunked = add_chunked;
                self.out.extend_from_slice(b", ");
                self.out.extend_from_slice(value.as_bytes());
            }
            None => self.open_line(name, value, add_chunked),
        }
    }

    fn close_line(&mut self) {
        if let Some(o) = self.open.take() {
            self.out.extend_from_slice(if o.add_chunked { b", chunked\r\n" } else { b"\r\n" });
        }
    }
}

/// Spells header names: see the module doc.
struct Speller<'a> {
    spelled: Option<&'a [Box<str>]>,
    backend: bool,
    /// The name written last, and how many lines of it came before.
    last: Option<(&'a str, usize)>,
}

impl<'a> Speller<'a> {
    fn of(ext: &'a http::Extensions) -> Speller<'a> {
        if ext.is_empty() {
            return Speller { spelled: None, backend: false, last: None };
        }
        let spelled = ext.get::<SpelledNames>().map(|s| &*s.0);
        Speller { spelled, backend: ext.get::<BackendSpelling>().is_some(), last: None }
    }

    fn write(&mut self, out: &mut Vec<u8>, name: &'a http::HeaderName) {
        let n = name.as_str();
        let nth = match self.last {
            Some((last, k)) if last == n => k + 1,
            _ => 0,
        };
        self.last = Some((n, nth));
        if let Some(list) = self.spelled {
            if let Some(s) = list.iter().filter(|s| s.eq_ignore_ascii_case(n)).nth(nth) {
                return out.extend_from_slice(s.as_bytes());
            }
        } else if nth == 0 || self.backend {
            if let Some(i) = clickhouse_header(name) {
                return out.extend_from_slice(CLICKHOUSE_NAMES[i].as_bytes());
            }
        }
        title_case(out, n.as_bytes());
    }
}

/// hyper's title case: the first letter and each after a `-` upper case, the rest as they are.
fn title_case(out: &mut Vec<u8>, name: &[u8]) {
    match TITLE_CASED.iter().find(|(n, _)| n.as_bytes() == name) {
        Some((_, t)) => out.extend_from_slice(t.as_bytes()),
        None => title_case_each(out, name),
    }
}

/// hyper's title case: each letter after a `-` (and the first) upper case, the others as they are.
fn title_case_each(out: &mut Vec<u8>, name: &[u8]) {
    let start = out.len();
    out.extend_from_slice(name);
    let mut prev = b'-';
    for c in &mut out[start..] {
        if prev == b'-' {
            c.make_ascii_uppercase();
        }
        prev = *c;
    }
}

/// The names every query's answer has, title-cased once: the names of a ClickHouse answer, the
/// gateway's and the connection's.
const TITLE_CASED: &[(&str, &str)] = &[
    ("date", "Date"),
    ("content-type", "Content-Type"),
    ("x-chstorm-replica", "X-Chstorm-Replica"),
    ("x-chstorm-route", "X-Chstorm-Route"),
    ("x-chstorm-threads", "X-Chstorm-Threads"),
    ("connection", "Connection"),
    ("keep-alive", "Keep-Alive"),
    ("content-length", "Content-Length"),
    ("transfer-encoding", "Transfer-Encoding"),
];

fn has_token(v: &HeaderValue, token: &str) -> bool {
    v.to_str().is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

fn last_token_is(v: &HeaderValue, token: &str) -> bool {
    v.to_str().is_ok_and(|s| s.rsplit(',').next().is_some_and(|t| t.trim().eq_ignore_ascii_case(token)))
}

fn can_chunk(method: &Method, status: StatusCode) -> bool {
    *method != Method::HEAD
        && !status.is_informational()
        && !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
}

fn can_have_length(status: StatusCode) -> bool {
    !status.is_informational() && !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
}

/// Appends the `Date` value, the HTTP date of this second (made once a second per thread).
fn date(out: &mut Vec<u8>) {
    thread_local! {
        static NOW: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
    }
    let now = std::time::SystemTime::now();
    let secs = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    NOW.with_borrow_mut(|(at, text)| {
        if *at != secs {
            let made = httpdate::fmt_http_date(now);
            if made.len() == text.len() {
                text.copy_from_slice(made.as_bytes());
                *at = secs;
            } else {
                return out.extend_from_slice(made.as_bytes());
            }
        }
        out.extend_from_slice(text);
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_names_title_cased_once_are_spelled_as_title_case_spells_them() {
        for (name, cased) in super::TITLE_CASED {
            let mut out = Vec::new();
            super::title_case_each(&mut out, name.as_bytes());
            assert_eq!(std::str::from_utf8(&out).unwrap(), *cased);
        }
    }
}
