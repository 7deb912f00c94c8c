//! Reading a ClickHouse HTTP request: its parameters, which of them are settings, where the
//! query is, and whether it only reads.

use percent_encoding::percent_decode_str;

/// URL parameters of ClickHouse's HTTP interface that are not settings.
const NOT_SETTINGS: &[&str] = &[
    "query",
    "database",
    "default_format",
    "query_id",
    "session_id",
    "session_timeout",
    "session_check",
    "compress",
    "decompress",
    "user",
    "password",
    "quota_key",
    "buffer_size",
    "wait_end_of_query",
    "stacktrace",
    "role",
];

/// The gateway's own parameter: the shard key of a routed query. Not passed on.
pub const SHARD_KEY_PARAM: &str = "shard_key";
/// The gateway's own header for the shard key.
pub const SHARD_KEY_HEADER: &str = "x-chstorm-shard-key";

/// Splits a query string into decoded (name, value) pairs, in order.
pub fn parse_params(query: Option<&str>) -> Vec<(String, String)> {
    let Some(q) = query else { return Vec::new() };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned();
            (dec(k), dec(v))
        })
        .collect()
}

/// Encodes pairs back into a query string.
pub fn encode_params(params: &[(String, String)]) -> String {
    const SET: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    params
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                percent_encoding::utf8_percent_encode(k, SET),
                percent_encoding::utf8_percent_encode(v, SET)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// True when a URL parameter is a ClickHouse setting (not a request parameter, not a query
/// parameter `param_*`, not the gateway's own).
pub fn is_setting(name: &str) -> bool {
    !NOT_SETTINGS.contains(&name) && !name.starts_with("param_") && name != SHARD_KEY_PARAM
}

/// What a statement does, from its first keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SELECT, WITH, SHOW, DESCRIBE/DESC, EXISTS, EXPLAIN: retried on another replica when safe.
    Read,
    /// Anything else (INSERT, CREATE, ALTER, KILL, SET, ...): never retried.
    Write,
}

/// Classifies `sql` by its first keyword, skipping white space, comments and opening brackets.
pub fn classify(sql: &str) -> Kind {
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
    let word: String = s.chars().take_while(|c| c.is_ascii_alphabetic()).collect::<String>().to_ascii_uppercase();
    match word.as_str() {
        "SELECT" | "WITH" | "SHOW" | "DESCRIBE" | "DESC" | "EXISTS" | "EXPLAIN" => Kind::Read,
        _ => Kind::Write,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_round_trip() {
        let p = parse_params(Some("query=SELECT%201&max_threads=2&x=a+b&flag"));
        assert_eq!(p[0], ("query".into(), "SELECT 1".into()));
        assert_eq!(p[2], ("x".into(), "a b".into()));
        assert_eq!(p[3], ("flag".into(), "".into()));
        assert_eq!(encode_params(&p[..2]), "query=SELECT%201&max_threads=2");
    }

    #[test]
    fn settings_are_told_apart() {
        assert!(is_setting("max_threads") && is_setting("enable_http_compression"));
        assert!(
            !is_setting("query") && !is_setting("param_id") && !is_setting("shard_key") && !is_setting("session_id")
        );
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
        ] {
            assert_eq!(classify(q), Kind::Read, "{q}");
        }
        for q in [
            "INSERT INTO t VALUES (1)",
            "CREATE TABLE t (x UInt8) ENGINE = Memory",
            "KILL QUERY WHERE 1",
            "SET x = 1",
            "",
            "OPTIMIZE TABLE t",
        ] {
            assert_eq!(classify(q), Kind::Write, "{q}");
        }
    }
}
