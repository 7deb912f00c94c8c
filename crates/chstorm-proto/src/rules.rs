//! ClickHouse's rules that every part of chstorm must read the same way: which exception codes
//! prove a query did not run (so a retry is safe), how an exception code is found in an answer,
//! and what kind of statement a query is. The load engine, compare and the gateway all use this
//! module; nothing else keeps a copy.
//!
//! Must not import anything from the rest of chstorm: it is pure text rules.

pub use crate::error::{parse_exception_code, RETRY_SAFE_CODES};

/// The exception code of an HTTP answer: the `X-ClickHouse-Exception-Code` header when there is
/// one (every release since 2018 sends it), else the `Code: N` at the start of the text (18.16:
/// `Code: 47, e.displayText() = DB::Exception: ...`; current: `Code: 47. DB::Exception: ...`).
pub fn http_exception_code(header: Option<&str>, body: &[u8]) -> Option<i32> {
    if let Some(code) = header.and_then(|v| v.trim().parse().ok()) {
        return Some(code);
    }
    parse_exception_code(body)
}

/// True when ClickHouse's exception `code` proves the query did not run, so it may be sent again
/// (to another replica): TOO_MANY_SIMULTANEOUS_QUERIES (202), SOCKET_TIMEOUT (209),
/// NETWORK_ERROR (210), ALL_CONNECTION_TRIES_FAILED (279).
pub fn retry_safe_code(code: i32) -> bool {
    RETRY_SAFE_CODES.contains(&code)
}

/// QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING: the server already runs a query with this id.
pub const QUERY_ID_TAKEN: i32 = 216;

/// True when ClickHouse's exception `code` proves the query did not run on that server and a
/// read may go to another replica: the [`retry_safe_code`]s, and 216 (the server already runs a
/// query with this id: a proxy's hedged copy still being killed there, when the client reuses its
/// query_id at once, as `clickhouse-client --multiquery --query_id` does). Only the retry-safe
/// codes say the replica itself is in trouble; 216 does not.
pub fn may_run_elsewhere(code: i32) -> bool {
    retry_safe_code(code) || code == QUERY_ID_TAKEN
}

/// What a statement does, from its first keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    /// SELECT, WITH, SHOW, DESCRIBE/DESC, EXISTS, EXPLAIN: reads only, so it may be sent again.
    Read,
    /// Anything else (INSERT, CREATE, ALTER, KILL, SET, USE, OPTIMIZE, ...), and text whose first
    /// keyword cannot be found: never sent twice.
    Write,
}

/// The first keyword of `sql`, skipping white space, `--` line comments, `/* */` comments and
/// opening brackets: `"  /* x */ (select 1)"` gives `"select"`; empty when there is none.
pub fn first_keyword(sql: &str) -> &str {
    let mut s = sql;
    loop {
        let t = s.trim_start();
        if let Some(rest) = t.strip_prefix("--") {
            s = rest.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(rest) = t.strip_prefix("/*") {
            s = rest.split_once("*/").map_or("", |(_, r)| r);
        } else if let Some(rest) = t.strip_prefix('(') {
            s = rest;
        } else {
            s = t;
            break;
        }
    }
    let end = s.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(s.len());
    &s[..end]
}

/// Classifies `sql` by its first keyword ([`first_keyword`]). Unknown or empty text is a
/// [`StatementKind::Write`] (the safe answer: a write is never retried and a read-only user may
/// not send it).
pub fn statement_kind(sql: &str) -> StatementKind {
    let word = first_keyword(sql);
    const READS: &[&str] = &["SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN"];
    if READS.iter().any(|r| r.eq_ignore_ascii_case(word)) {
        StatementKind::Read
    } else {
        StatementKind::Write
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_keywords() {
        assert_eq!(first_keyword("  -- c\n /* x */ set max_threads = 1"), "set");
        assert_eq!(first_keyword("USE db"), "USE");
        assert_eq!(first_keyword(" ((SELECT 1))"), "SELECT");
        assert_eq!(first_keyword(""), "");
    }

    #[test]
    fn classification() {
        for q in [
            "SELECT 1",
            "  select 1",
            "WITH 1 AS x SELECT x",
            "-- c\nSELECT 1",
            "/* c */ (SELECT 1)",
            "SHOW TABLES",
            "desc t",
            "EXISTS t",
            "explain select 1",
        ] {
            assert_eq!(statement_kind(q), StatementKind::Read, "{q}");
        }
        for q in [
            "INSERT INTO t VALUES (1)",
            "CREATE TABLE t (x UInt8) ENGINE = Memory",
            "KILL QUERY WHERE 1",
            "SET x = 1",
            "",
            "OPTIMIZE TABLE t",
            "SELECTX 1",
            "/* unterminated SELECT 1",
            "USE db",
        ] {
            assert_eq!(statement_kind(q), StatementKind::Write, "{q}");
        }
    }

    #[test]
    fn exception_codes_from_header_or_body() {
        assert_eq!(http_exception_code(None, b"Code: 202, e.displayText() = DB::Exception: Too many"), Some(202));
        assert_eq!(http_exception_code(Some("241"), b"Code: 202"), Some(241));
        assert_eq!(http_exception_code(Some(" x"), b"Code: 60. DB::Exception"), Some(60));
        assert_eq!(http_exception_code(None, b"nothing"), None);
        assert!(retry_safe_code(202) && retry_safe_code(279) && !retry_safe_code(159) && !retry_safe_code(60));
    }
}
