//! ClickHouse's rules that every part of chstorm must read the same way: which exception codes
//! prove a query did not run (so a retry is safe), and how an exception code is found in an
//! answer. The load engine, compare and the gateway all use this module; nothing else keeps a
//! copy. What kind of statement a query is belongs to the reading of SQL text,
//! `chstorm_sql::statement`.
//!
//! Must not import anything from the rest of chstorm: it is pure text rules.

pub use crate::error::{
    exception_after_head, parse_exception_code, BodyException, EXCEPTION_TAG_HEADER, RETRY_SAFE_CODES,
};

/// The exception code of an HTTP answer: the `X-ClickHouse-Exception-Code` header when there is
/// one (every release since 2018 sends it), else the `Code: N` at the start of the text (18.16:
/// `Code: 47, e.displayText() = DB::Exception: ...`; current: `Code: 47. DB::Exception: ...`).
pub fn http_exception_code(header: Option<&str>, body: &[u8]) -> Option<i32> {
    if let Some(code) = header.and_then(|v| v.trim().parse().ok()) {
        return Some(code);
    }
    parse_exception_code(body)
}

/// TIMEOUT_EXCEEDED: the query ran longer than its `max_execution_time`.
pub const TIMEOUT_EXCEEDED: i32 = 159;

/// The limit a `Timeout exceeded` exception names, in seconds: 18.16's `Timeout exceeded:
/// elapsed 30.000167 seconds, maximum: 30`, 26.9's `Timeout exceeded: elapsed 1000.139 ms,
/// maximum: 1000.000 ms` (`src/QueryPipeline/ExecutionSpeedLimits.cpp`; asked of chdb-core
/// 26.9.0). A number without a unit is seconds. None when the text names no maximum.
pub fn timeout_maximum(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    let rest = &text[text.find("Timeout exceeded: ")?..];
    let max = &rest[rest.find("maximum: ")? + "maximum: ".len()..];
    let end = max.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(max.len());
    let n: f64 = max[..end].trim_end_matches('.').parse().ok()?;
    Some(if max[end..].starts_with(" ms") { n / 1000.0 } else { n })
}

/// True when ClickHouse's exception `code` proves the query did not run, so it may be sent again
/// (to another replica): TOO_MANY_SIMULTANEOUS_QUERIES (202), SOCKET_TIMEOUT (209),
/// NETWORK_ERROR (210), ALL_CONNECTION_TRIES_FAILED (279), SERVER_OVERLOADED (745, current
/// releases only).
pub fn retry_safe_code(code: i32) -> bool {
    RETRY_SAFE_CODES.contains(&code)
}

/// QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING: the server already runs a query with this id.
pub const QUERY_ID_TAKEN: i32 = 216;

/// TOO_MANY_SIMULTANEOUS_QUERIES: the server (its `max_concurrent_queries`) or the user (its
/// `max_concurrent_queries_for_user`) already runs as many queries as allowed; the message says
/// `Maximum: N`.
pub const TOO_MANY_SIMULTANEOUS_QUERIES: i32 = 202;

/// True when ClickHouse's exception `code` proves the query did not run on that server and a
/// read may go to another replica: the [`retry_safe_code`]s, and 216 (the server already runs a
/// query with this id: a proxy's hedged copy still being killed there, when the client reuses its
/// query_id at once, as `clickhouse-client --multiquery --query_id` does). Only the retry-safe
/// codes say the replica itself is in trouble; 216 does not.
pub fn may_run_elsewhere(code: i32) -> bool {
    retry_safe_code(code) || code == QUERY_ID_TAKEN
}

/// True when ClickHouse's exception `code` says the server itself is in trouble, so it counts
/// against the replica's health: the [`retry_safe_code`]s (202 too many queries, 209 socket
/// timeout, 210 network error, 279 no connection), 173 CANNOT_ALLOCATE_MEMORY, 225 NO_ZOOKEEPER
/// and 999 KEEPER_EXCEPTION. Every other code is the client's or the query's doing and blames no
/// replica: a bad database (81 UNKNOWN_DATABASE), a bad login (192 UNKNOWN_USER, 193
/// WRONG_PASSWORD, 194 REQUIRED_PASSWORD, 195 IP_ADDRESS_NOT_ALLOWED, 516
/// AUTHENTICATION_FAILED), a refusal (164 READONLY, 497 ACCESS_DENIED), a wrong query (47, 60,
/// 62, ...), 216 (query id taken), a timeout the query asked for (159).
pub fn blames_server(code: i32) -> bool {
    retry_safe_code(code) || matches!(code, 173 | 225 | 999)
}

/// True when the end of a successful HTTP answer (`tail`, its last bytes) holds a ClickHouse
/// exception: a server that fails after its answer's head went out writes the exception into the
/// body (`Code: 241, e.displayText() = DB::Exception: ...` on 18.16, `Code: 241. DB::Exception:
/// ...` on current releases), so the answer is partial. Looser than a parser: any
/// `DB::Exception` in the last 4 KiB counts.
pub fn ends_in_exception(tail: &[u8]) -> bool {
    let tail = &tail[tail.len().saturating_sub(4096)..];
    tail.windows(13).any(|w| w == b"DB::Exception")
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_answer_ending_in_an_exception_is_partial() {
        assert!(super::ends_in_exception(b"1\n2\nCode: 241, e.displayText() = DB::Exception: Memory limit\n"));
        assert!(super::ends_in_exception(b"1\nCode: 241. DB::Exception: Memory limit (total) exceeded"));
        assert!(!super::ends_in_exception(b"1\n2\n3\n"));
        let mut long = b"Code: 1. DB::Exception: early".to_vec();
        long.extend(std::iter::repeat_n(b'x', 5000));
        assert!(!super::ends_in_exception(&long), "only the end counts");
    }

    use super::*;

    #[test]
    fn only_the_servers_own_trouble_blames_a_replica() {
        // (code, counts against the replica's health)
        let table = [
            (202, true),  // TOO_MANY_SIMULTANEOUS_QUERIES
            (209, true),  // SOCKET_TIMEOUT
            (210, true),  // NETWORK_ERROR
            (279, true),  // ALL_CONNECTION_TRIES_FAILED
            (745, true),  // SERVER_OVERLOADED (current releases)
            (173, true),  // CANNOT_ALLOCATE_MEMORY
            (225, true),  // NO_ZOOKEEPER
            (999, true),  // KEEPER_EXCEPTION
            (81, false),  // UNKNOWN_DATABASE: the client's Hello named no such database
            (192, false), // UNKNOWN_USER
            (193, false), // WRONG_PASSWORD
            (194, false), // REQUIRED_PASSWORD
            (195, false), // IP_ADDRESS_NOT_ALLOWED
            (516, false), // AUTHENTICATION_FAILED
            (497, false), // ACCESS_DENIED
            (164, false), // READONLY
            (60, false),  // UNKNOWN_TABLE
            (62, false),  // SYNTAX_ERROR
            (47, false),  // UNKNOWN_IDENTIFIER
            (115, false), // UNKNOWN_SETTING
            (159, false), // TIMEOUT_EXCEEDED (the query's own max_execution_time)
            (216, false), // QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING
            (241, false), // MEMORY_LIMIT_EXCEEDED (the query's own limit)
            (0, false),
        ];
        for (code, blames) in table {
            assert_eq!(blames_server(code), blames, "code {code}");
        }
    }

    #[test]
    fn exception_codes_from_header_or_body() {
        assert_eq!(http_exception_code(None, b"Code: 202, e.displayText() = DB::Exception: Too many"), Some(202));
        assert_eq!(http_exception_code(Some("241"), b"Code: 202"), Some(241));
        assert_eq!(http_exception_code(Some(" x"), b"Code: 60. DB::Exception"), Some(60));
        assert_eq!(http_exception_code(None, b"nothing"), None);
        assert!(
            retry_safe_code(202)
                && retry_safe_code(279)
                && retry_safe_code(745)
                && !retry_safe_code(159)
                && !retry_safe_code(60)
        );
    }

    #[test]
    fn a_timeout_names_its_maximum_in_every_release() {
        let old = b"Code: 159, e.displayText() = DB::Exception: Timeout exceeded: elapsed 1.000207 seconds, maximum: 1, e.what() = DB::Exception";
        assert_eq!(super::timeout_maximum(old), Some(1.0));
        let current = b"Code: 159. DB::Exception: Timeout exceeded: elapsed 1000.139 ms, maximum: 1000.000 ms. (TIMEOUT_EXCEEDED)";
        assert_eq!(super::timeout_maximum(current), Some(1.0));
        let between =
            b"Code: 159. DB::Exception: Timeout exceeded: elapsed 30.02 seconds, maximum: 30. (TIMEOUT_EXCEEDED)";
        assert_eq!(super::timeout_maximum(between), Some(30.0));
        assert_eq!(
            super::timeout_maximum(b"Code: 159. DB::Exception: Timeout exceeded: elapsed 2.5 seconds, maximum: 2.5"),
            Some(2.5)
        );
        assert_eq!(super::timeout_maximum(b"Code: 241. DB::Exception: Memory limit (maximum: 10)"), None);
        assert_eq!(super::timeout_maximum(b"\xff"), None);
    }
}
