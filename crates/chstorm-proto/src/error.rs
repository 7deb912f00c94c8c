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
    /// The HTTP server answered with a non-2xx status. `code` is the ClickHouse exception code
    /// when the answer carried one (`X-ClickHouse-Exception-Code` or `Code: N` in the body).
    #[error("HTTP {status}{}: {message}", code.map(|c| format!(" (ClickHouse code {c})")).unwrap_or_default())]
    HttpStatus { status: u16, code: Option<i32>, message: String },
    /// The native server sent an exception packet.
    #[error("ClickHouse exception {code} ({name}): {message}")]
    Server { code: i32, name: String, message: String },
    /// The peer broke the protocol (unexpected packet, malformed HTTP, unsupported column type).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// TLS configuration problem on our side (bad CA file).
    #[error("TLS setup: {0}")]
    TlsSetup(String),
}

/// ClickHouse error codes that mean "try again elsewhere or later" and never imply that the
/// query had an effect: TOO_MANY_SIMULTANEOUS_QUERIES (202), NETWORK_ERROR (210),
/// SOCKET_TIMEOUT (209), ALL_CONNECTION_TRIES_FAILED (279), TIMEOUT_EXCEEDED (159 is not
/// included: the query may have run).
pub const RETRY_SAFE_CODES: &[i32] = &[202, 209, 210, 279];

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
            ProtoError::Protocol(_) => Fault::Us,
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
    /// `protocol`, `clickhouse_<code>` when the server named an exception code, else
    /// `http_<status>`.
    pub fn kind_key(&self) -> Cow<'static, str> {
        match self {
            ProtoError::InvalidTarget(_) | ProtoError::TlsSetup(_) => Cow::Borrowed("config"),
            ProtoError::Connect { .. } => Cow::Borrowed("connect"),
            ProtoError::Timeout(..) => Cow::Borrowed("timeout"),
            ProtoError::Io(_) => Cow::Borrowed("io"),
            ProtoError::Protocol(_) => Cow::Borrowed("protocol"),
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

#[cfg(test)]
mod tests {
    use super::*;

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
