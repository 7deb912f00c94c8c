//! What differs between the ClickHouse releases chstorm talks to, in one place: each fact of
//! 18.16 (the release its tests run for real) and of current releases (24.x to 26.x), the
//! ClickHouse source file that shows it, and the rule chstorm follows. Everything that depends
//! on a server's version looks it up here, by the [`ServerVersion`] detected for the server
//! (its native Hello, or `SELECT version()` over HTTP).
//!
//! # Native protocol
//!
//! | fact | 18.16 | current | source |
//! |---|---|---|---|
//! | protocol revision of the server | 54412 | 54460 (22.x) to 54492 (26.9) | `src/Core/ProtocolDefines.h`, `DBMS_TCP_PROTOCOL_VERSION` |
//! | revision a connection speaks | `min(client's, server's)` | the same | `src/Server/TCPHandler.cpp`, `receiveHello` / `sendHello` |
//! | settings in a Query packet | each value in its own type (below 54429) | strings with flags (54429 on) | `src/Core/BaseSettings.h`, `SettingsWriteFormat`; `TCPHandler::receiveQuery` |
//! | interserver secret's hash after the settings | none | from 54441 | `TCPHandler::receiveQuery` |
//! | query parameters after the text | none | from 54459 | `TCPHandler::receiveQuery`, `DBMS_MIN_PROTOCOL_VERSION_WITH_PARAMETERS` |
//! | `ClientInfo` fields | kind, initial user/id/address, interface, its fields, quota key, patch | + start time (54449), distributed depth (54448), OpenTelemetry (54442), parallel replicas (54453), ... | `src/Interpreters/ClientInfo.cpp`, `ClientInfo::read` |
//! | interfaces other than TCP and HTTP (`LOCAL` = 6: clickhouse-local, chdb) | no fields of their own | the same | `ClientInfo::read` |
//! | Hello addendum (quota key) | none | from 54458 | `TCPHandler::receiveAddendum` |
//! | Progress fields | rows, bytes, total rows | + written rows and bytes (54420), elapsed ns (54460), total bytes (54463) | `src/IO/Progress.cpp`, `ProgressValues::write` |
//! | a byte after each column's type in a block | none | from 54454 (1 = custom serialization, sent from 54465) | `src/Formats/NativeWriter.cpp` |
//! | ProfileEvents packets (14) | none | from 54451, never compressed | `TCPHandler::sendProfileEvents` |
//! | TablesStatusRequest (client 5) and its response (9) | from 54226 | the same, + read-only flag (54467) | `src/Core/Protocol.h`, `src/Client/TablesStatus.cpp` |
//!
//! chstorm speaks up to [`NATIVE_REVISION`], on both sides of the gateway and in bench.
//!
//! # HTTP interface
//!
//! | fact | 18.16 | current | source |
//! |---|---|---|---|
//! | exception text | `Code: N, e.displayText() = DB::Exception: ...` | `Code: N. DB::Exception: ... (NAME) (version X)` | `src/Common/Exception.cpp`, `getExceptionMessage` |
//! | `X-ClickHouse-Exception-Code` on an error before the head | yes | yes | `src/Server/HTTP/WriteBufferFromHTTPServerResponse.cpp`, `setExceptionCode` |
//! | an error after the 200 head | appended to the rows, the answer ends as usual | `__exception__` and the text, then no final chunk (24.x to 25.10); a block tagged by `X-ClickHouse-Exception-Tag` (25.11 on) | `src/Server/HTTP/HTTP1/HTTP1ServerResponse.cpp`, `cancelWithException` |
//! | progress headers | `X-ClickHouse-Progress` every `http_headers_progress_interval_ms` (this build sends none) | the same, any number until the body starts | `WriteBufferFromHTTP1ServerResponse::onProgress` |
//! | credentials given two ways | the first found is used | Code 516 (`Authorization` beside `X-ClickHouse-User`/`-Key` or `user`/`password` parameters) | `src/Server/HTTP/authenticateUserByHTTP.cpp` |
//!
//! chstorm never sends credentials two ways, whatever the release: the gateway's own go in place
//! of every form of the client's.
//! | quota key | `quota_key` parameter or `X-ClickHouse-Quota` | the same, both at once is Code 36 | `authenticateUserByHTTP.cpp` |
//! | idle keep-alive | 3 s | 3 s (10 s from 24.x's config) | `config.xml`, `keep_alive_timeout` |
//! | retry-safe exception codes | 202, 209, 210, 279 | + 745 SERVER_OVERLOADED | `src/Common/ErrorCodes.cpp` |
//!
//! The rules that read these facts: [`crate::rules`] (exception parsing, retry safety),
//! [`crate::http`] (chstorm's client), and the gateway's fronts, which ask [`ServerVersion`]
//! how a replica words its errors.

/// The native protocol revision chstorm speaks at most, as a client (bench, compare, the
/// gateway towards its replicas) and as a server (the gateway's native port): 54460.
///
/// Why this one: it is the revision of clickhouse-go v2, the client most current tools are
/// built on, and it has everything a current client needs from a proxy: settings as strings
/// (54429: any setting of any release passes, not only 18.16's), query parameters (54459),
/// the Hello addendum with the quota key (54458), ProfileEvents packets (54451) and the
/// elapsed time in Progress (54460). Every later revision adds what a proxy would have to
/// speak without a use for it (password-complexity rules and an interserver nonce in the
/// server's Hello, sparse and replicated column serializations, chunked packets, timezone
/// updates); a connection negotiates them away, as every server and client does with a peer of
/// a lower revision (`min` of the two, `TCPHandler::receiveHello`), so a 26.9 client or server
/// speaks 54460 with chstorm and 54412 with 18.16.
pub const NATIVE_REVISION: u64 = 54460;

/// A server's version, as detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    /// Its native protocol revision, when the native Hello told it (HTTP does not).
    pub revision: Option<u64>,
}

impl ServerVersion {
    /// ClickHouse 18.16.1, the release chstorm's tests run.
    pub const V18_16: ServerVersion = ServerVersion { major: 18, minor: 16, patch: 1, revision: Some(54412) };

    /// Parses `SELECT version()`'s answer (`18.16.1`, `26.9.1.1`, `24.8.4.13-lts`): its first
    /// three numbers.
    pub fn parse(text: &str) -> Option<ServerVersion> {
        let mut it = text.trim().split(['.', '-']).map(|p| p.parse::<u64>());
        let (major, minor) = (it.next()?.ok()?, it.next()?.ok()?);
        let patch = it.next().and_then(Result::ok).unwrap_or(0);
        Some(ServerVersion { major, minor, patch, revision: None })
    }

    /// `major.minor.patch`.
    pub fn label(&self) -> String {
        format!("{}.{}.{}", self.major, self.minor, self.patch)
    }

    fn at_least(&self, major: u64, minor: u64) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// How this release words an exception's text: [`ErrorWording::Old`] (`Code: N,
    /// e.displayText() = DB::Exception: ...`) before 20.x's `getExceptionMessage` change
    /// (`src/Common/Exception.cpp`), [`ErrorWording::Current`] (`Code: N. DB::Exception: ...`)
    /// after.
    pub fn error_wording(&self) -> ErrorWording {
        if self.at_least(21, 1) {
            ErrorWording::Current
        } else {
            ErrorWording::Old
        }
    }
}

/// How a release words an exception's text ([`ServerVersion::error_wording`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorWording {
    /// `Code: 210, e.displayText() = DB::Exception: ...` (18.16 and until 20.x).
    Old,
    /// `Code: 210. DB::Exception: ...` (21.x on).
    Current,
}

impl ErrorWording {
    /// An exception's text as a server of this wording writes it, `message` after the
    /// `DB::Exception: ` prefix; the current wording ends with the code's name, when
    /// [`error_name`] knows it (`Code: 210. DB::Exception: ... (NETWORK_ERROR)`: clients such as
    /// @clickhouse/client read the name there).
    pub fn text(self, code: i32, message: &str) -> String {
        match (self, error_name(code)) {
            (ErrorWording::Old, _) => format!("Code: {code}, e.displayText() = DB::Exception: {message}"),
            (ErrorWording::Current, Some(name)) => {
                let stop = if message.ends_with('.') { "" } else { "." };
                format!("Code: {code}. DB::Exception: {message}{stop} ({name})")
            }
            (ErrorWording::Current, None) => format!("Code: {code}. DB::Exception: {message}"),
        }
    }
}

/// The names of the exception codes chstorm's own errors carry (`src/Common/ErrorCodes.cpp`).
pub fn error_name(code: i32) -> Option<&'static str> {
    Some(match code {
        36 => "BAD_ARGUMENTS",
        48 => "NOT_IMPLEMENTED",
        62 => "SYNTAX_ERROR",
        81 => "UNKNOWN_DATABASE",
        101 => "UNEXPECTED_PACKET_FROM_CLIENT",
        115 => "UNKNOWN_SETTING",
        159 => "TIMEOUT_EXCEEDED",
        164 => "READONLY",
        167 => "TOO_DEEP_AST",
        193 => "WRONG_PASSWORD",
        195 => "IP_ADDRESS_NOT_ALLOWED",
        202 => "TOO_MANY_SIMULTANEOUS_QUERIES",
        209 => "SOCKET_TIMEOUT",
        210 => "NETWORK_ERROR",
        241 => "MEMORY_LIMIT_EXCEEDED",
        279 => "ALL_CONNECTION_TRIES_FAILED",
        381 => "HTTP_LENGTH_REQUIRED",
        394 => "QUERY_WAS_CANCELLED",
        456 => "UNKNOWN_QUERY_PARAMETER",
        497 => "ACCESS_DENIED",
        516 => "AUTHENTICATION_FAILED",
        745 => "SERVER_OVERLOADED",
        1002 => "UNKNOWN_EXCEPTION",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_tell_their_rules() {
        let v = ServerVersion::parse("18.16.1\n").unwrap();
        assert_eq!((v.label(), v.error_wording()), ("18.16.1".into(), ErrorWording::Old));
        let v = ServerVersion::parse("26.9.1.1").unwrap();
        assert_eq!((v.label(), v.error_wording()), ("26.9.1".into(), ErrorWording::Current));
        assert_eq!(ServerVersion::parse("24.8.4.13-lts").unwrap().label(), "24.8.4");
        assert_eq!(ServerVersion::parse("ok"), None);
        assert_eq!(ErrorWording::Old.text(210, "no replica"), "Code: 210, e.displayText() = DB::Exception: no replica");
        assert_eq!(
            ErrorWording::Current.text(210, "no replica"),
            "Code: 210. DB::Exception: no replica. (NETWORK_ERROR)"
        );
        assert_eq!(ErrorWording::Current.text(9999, "x"), "Code: 9999. DB::Exception: x");
        assert_eq!(ErrorWording::Current.text(164, "read-only."), "Code: 164. DB::Exception: read-only. (READONLY)");
        const { assert!(NATIVE_REVISION >= crate::native::packets::rev::SERVER_QUERY_TIME_IN_PROGRESS) };
    }
}
