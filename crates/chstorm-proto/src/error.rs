//! Errors of the transports.
//!
//! Every error says who is at fault ([`Fault`]) and whether repeating the request on another
//! connection is safe ([`ProtoError::retry_safe`]); the load engine counts errors by
//! [`ProtoError::kind_key`].

use std::borrow::Cow;
use std::io;

/// Who caused an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The caller: a bad URL, bad flags, a query the server rejects as wrong.
    Client,
    /// The server or the network between us.
    Upstream,
    /// chstorm itself (a bug or a resource limit on the client machine).
    Us,
}

/// An error from a transport.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The URL or transport options are wrong.
    #[error("invalid target: {0}")]
    InvalidTarget(String),
    /// The TCP connection (or the TLS handshake) could not be established.
    #[error("connect to {addr} failed: {source}")]
    Connect { addr: String, source: io::Error },
    /// A network wait took longer than its timeout.
    #[error("timed out after {0:?} {1}")]
    Timeout(std::time::Duration, &'static str),
    /// The connection failed after it was established (reset, broken pipe, early EOF).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The HTTP server answered with a non-2xx status, or cut a 2xx answer right after the
    /// exception it wrote into the body ([`exception_after_head`]). `code` is the ClickHouse
    /// exception code when the answer carried one (`X-ClickHouse-Exception-Code` or `Code: N` in
    /// the body).
    #[error("HTTP {status}{}: {message}", code.map(|c| format!(" (ClickHouse code {c})")).unwrap_or_default())]
    HttpStatus { status: u16, code: Option<i32>, message: String },
    /// The native server sent an exception packet.
    #[error("ClickHouse exception {code} ({name}): {message}")]
    Server { code: i32, name: String, message: String },
    /// The peer broke the protocol (unexpected packet, malformed HTTP, unsupported column type).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A native block has rows of a column type whose bytes the codec cannot delimit (an
    /// aggregate function's state, `Variant`, `Dynamic`, `JSON`, ...): the server did nothing
    /// wrong, and the stream cannot be read past this block. A proxy passes the rest on as it
    /// comes ([`crate::native::server`]).
    #[error("unsupported column type '{0}' over the native protocol; use an http:// URL for this query")]
    UnknownType(String),
    /// TLS configuration problem on our side (bad CA file).
    #[error("TLS setup: {0}")]
    TlsSetup(String),
}

/// ClickHouse error codes that mean "try again elsewhere or later" and never imply that the
/// query had an effect: TOO_MANY_SIMULTANEOUS_QUERIES (202), NETWORK_ERROR (210),
/// SOCKET_TIMEOUT (209), ALL_CONNECTION_TRIES_FAILED (279), and SERVER_OVERLOADED (745, current
/// releases: the server refused the query before it ran, as its CPU is overloaded;
/// `src/Common/ErrorCodes.cpp`). TIMEOUT_EXCEEDED (159) is not included: the query may have
/// run. A code a release does not have is never sent by it, so one list serves every version
/// ([`crate::versions`]).
pub const RETRY_SAFE_CODES: &[i32] = &[202, 209, 210, 279, 745];

impl ProtoError {
    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            ProtoError::InvalidTarget(_) | ProtoError::TlsSetup(_) => Fault::Client,
            ProtoError::Connect { .. } | ProtoError::Timeout(..) | ProtoError::Io(_) => Fault::Upstream,
            ProtoError::HttpStatus { status, code, .. } => match code {
                Some(c) if RETRY_SAFE_CODES.contains(c) => Fault::Upstream,
                Some(_) => Fault::Client,
                None if *status >= 500 => Fault::Upstream,
                None => Fault::Client,
            },
            ProtoError::Server { code, .. } if RETRY_SAFE_CODES.contains(code) => Fault::Upstream,
            ProtoError::Server { .. } => Fault::Client,
            ProtoError::Protocol(_) | ProtoError::UnknownType(_) => Fault::Us,
        }
    }

    /// Whether the same request may be sent again (to this or another server) without risk of
    /// doing its work twice. Only failures that happen before the server could act count.
    pub fn retry_safe(&self) -> bool {
        match self {
            ProtoError::Connect { .. } => true,
            ProtoError::HttpStatus { code: Some(c), .. } | ProtoError::Server { code: c, .. } => {
                RETRY_SAFE_CODES.contains(c)
            }
            _ => false,
        }
    }

    /// The key under which the load engine counts this error: `connect`, `timeout`, `io`,
    /// `protocol`, `unsupported_type`, `clickhouse_<code>` when the server named an exception code, else
    /// `http_<status>`.
    pub fn kind_key(&self) -> Cow<'static, str> {
        match self {
            ProtoError::InvalidTarget(_) | ProtoError::TlsSetup(_) => Cow::Borrowed("config"),
            ProtoError::Connect { .. } => Cow::Borrowed("connect"),
            ProtoError::Timeout(..) => Cow::Borrowed("timeout"),
            ProtoError::Io(_) => Cow::Borrowed("io"),
            ProtoError::Protocol(_) => Cow::Borrowed("protocol"),
            ProtoError::UnknownType(_) => Cow::Borrowed("unsupported_type"),
            ProtoError::HttpStatus { code: Some(c), .. } | ProtoError::Server { code: c, .. } => {
                Cow::Owned(format!("clickhouse_{c}"))
            }
            ProtoError::HttpStatus { status, .. } => Cow::Owned(format!("http_{status}")),
        }
    }

    /// True when the connection that produced this error must not be reused.
    pub fn breaks_connection(&self) -> bool {
        !matches!(self, ProtoError::HttpStatus { .. } | ProtoError::Server { .. })
    }
}

/// Extracts the exception code from a ClickHouse error text such as
/// `Code: 47, e.displayText() = DB::Exception: ...` (18.16) or `Code: 47. DB::Exception: ...`
/// (current releases).
pub fn parse_exception_code(body: &[u8]) -> Option<i32> {
    let pos = body.windows(6).position(|w| w == b"Code: ")?;
    let digits: &[u8] = &body[pos + 6..];
    let end = digits.iter().position(|b| !b.is_ascii_digit()).unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// The marker a current server writes around an exception that comes after its answer's 200
/// head (`EXCEPTION_MARKER` in ClickHouse's `src/Server/HTTP/HTTP1/HTTP1ServerResponse.cpp`).
pub const EXCEPTION_MARKER: &[u8] = b"__exception__";
/// The header that names the tag of an answer's exception block, 25.11 on
/// (`WriteBufferFromHTTP1ServerResponse::finishSendHeaders`).
pub const EXCEPTION_TAG_HEADER: &str = "x-clickhouse-exception-tag";
/// The longest exception text looked for at the end of an answer: 64 KiB (a current server cuts
/// its block to `MAX_EXCEPTION_SIZE`, 16 KiB).
pub const MAX_BODY_EXCEPTION: usize = 64 << 10;

/// An exception a server wrote into an answer's body after its 200 head, then cut the answer
/// (no final chunk): the query failed on the server, and nothing about the server is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyException {
    /// The exception code of its text (`Code: N.`), when it has one.
    pub code: Option<i32>,
    /// The text, `Code: N. DB::Exception: ...`, without the marker and tag around it.
    pub message: String,
    /// Where the block starts in the body: the rows before it are the server's too.
    pub at: usize,
}

/// The exception block that ends `body`, in the framing of the server that wrote it; None when
/// `body` does not end with one (a cut answer that is a broken one).
///
/// * With `tag` (the answer's `X-ClickHouse-Exception-Tag`, ClickHouse 25.11 on,
///   `WriteBufferFromHTTP1ServerResponse::cancelWithException`): `\r\n__exception__\r\n<tag>\r\n`,
///   the text ending with a line feed, `<its length> <tag>\r\n__exception__\r\n`. Only that
///   form counts: the tag is random per answer, so rows cannot forge it.
/// * Without (24.x to 25.10, the same function before the tag): `__exception__\r\n`, then
///   the text, `Code: N. ...`, to the end of the body.
///
/// Earlier releases (18.16 among them) append the text to the rows and end the answer as usual;
/// such an answer is whole, and nothing here is needed for it.
pub fn exception_after_head(body: &[u8], tag: Option<&str>) -> Option<BodyException> {
    let tail = &body[body.len().saturating_sub(MAX_BODY_EXCEPTION + 64)..];
    let base = body.len() - tail.len();
    let (at, text) = match tag {
        Some(tag) => tagged(tail, tag.trim().as_bytes())?,
        None => untagged(tail)?,
    };
    let message = String::from_utf8_lossy(text).trim_end().to_string();
    Some(BodyException { code: parse_exception_code(text), message, at: base + at })
}

/// The 25.11 block at the end of `b`: (where it starts, its text).
fn tagged<'a>(b: &'a [u8], tag: &[u8]) -> Option<(usize, &'a [u8])> {
    let rest = b.strip_suffix(b"__exception__\r\n")?.strip_suffix(b"\r\n")?;
    let nl = rest.iter().rposition(|c| *c == b'\n')?;
    let (len, t) = split_once(&rest[nl + 1..], b' ')?;
    if t != tag || tag.is_empty() {
        return None;
    }
    let len: usize = std::str::from_utf8(len).ok()?.parse().ok()?;
    let start = (nl + 1).checked_sub(len)?;
    let text = &rest[start..nl + 1];
    let head = rest[..start].strip_suffix(b"\r\n")?.strip_suffix(tag)?.strip_suffix(b"\r\n")?;
    let head = head.strip_suffix(EXCEPTION_MARKER)?.strip_suffix(b"\r\n")?;
    Some((head.len(), text))
}

/// The 24.x to 25.10 block at the end of `b`: the last marker line, then a `Code: N` text.
fn untagged(b: &[u8]) -> Option<(usize, &[u8])> {
    let marker = b"__exception__\r\n";
    let at = b.windows(marker.len()).rposition(|w| w == marker)?;
    let text = &b[at + marker.len()..];
    let digits = text.strip_prefix(b"Code: ")?;
    (digits.first().is_some_and(u8::is_ascii_digit) && !text.windows(marker.len()).any(|w| w == marker))
        .then_some((at, text))
}

fn split_once(b: &[u8], c: u8) -> Option<(&[u8], &[u8])> {
    let i = b.iter().position(|x| *x == c)?;
    Some((&b[..i], &b[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 25.11 block as `cancelWithException` writes it after `rows`.
    fn tagged_block(rows: &[u8], tag: &str, text: &str) -> Vec<u8> {
        let mut b = rows.to_vec();
        b.extend_from_slice(
            format!("\r\n__exception__\r\n{tag}\r\n{text}\n{} {tag}\r\n__exception__\r\n", text.len() + 1).as_bytes(),
        );
        b
    }

    #[test]
    fn finds_an_exception_after_the_head_in_each_framing() {
        let text = "Code: 395. DB::Exception: Value passed to 'throwIf' function is non-zero. (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO)";
        for rows in [&b""[..], b"1\n2\n", b"__exception__\r\nCode: 1. not the end\n3\n"] {
            let body = tagged_block(rows, "abcdefghijklmnop", text);
            let x = exception_after_head(&body, Some("abcdefghijklmnop")).expect("tagged");
            assert_eq!((x.code, x.message.as_str(), x.at), (Some(395), text, rows.len()));
            // Another tag, or none asked for, is not this block.
            assert_eq!(exception_after_head(&body, Some("qqqqqqqqqqqqqqqq")), None);
            // Cut anywhere inside the block: not whole, so not the server's word.
            for cut in rows.len()..body.len() {
                assert_eq!(exception_after_head(&body[..cut], Some("abcdefghijklmnop")), None, "cut at {cut}");
            }
            let mut old = rows.to_vec();
            old.extend_from_slice(format!("__exception__\r\n{text}\n").as_bytes());
            let x = exception_after_head(&old, None).expect("untagged");
            assert_eq!((x.code, x.message.as_str(), x.at), (Some(395), text, rows.len()));
        }
        // Rows that end mid-way are a broken answer.
        assert_eq!(exception_after_head(b"1\n2\n3", None), None);
        assert_eq!(exception_after_head(b"__exception__\r\nnot a code", None), None);
        assert_eq!(exception_after_head(b"", Some("t")), None);
    }

    #[test]
    fn parses_old_and_new_exception_texts() {
        assert_eq!(parse_exception_code(b"Code: 47, e.displayText() = DB::Exception: x"), Some(47));
        assert_eq!(parse_exception_code(b"Code: 202. DB::Exception: Too many"), Some(202));
        assert_eq!(parse_exception_code(b"Ok."), None);
    }

    #[test]
    fn kinds_and_retry_safety() {
        let e = ProtoError::HttpStatus { status: 500, code: Some(202), message: String::new() };
        assert_eq!(e.kind_key(), "clickhouse_202");
        assert!(e.retry_safe());
        assert_eq!(e.fault(), Fault::Upstream);
        let e = ProtoError::HttpStatus { status: 404, code: Some(47), message: String::new() };
        assert!(!e.retry_safe());
        assert_eq!(e.fault(), Fault::Client);
        let e = ProtoError::HttpStatus { status: 502, code: None, message: String::new() };
        assert_eq!(e.kind_key(), "http_502");
        let e = ProtoError::Timeout(std::time::Duration::from_secs(1), "reading");
        assert_eq!(e.kind_key(), "timeout");
        assert!(!e.retry_safe());
    }
}
