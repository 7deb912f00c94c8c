//! Reading a ClickHouse HTTP request: its parameters, which of them are settings, and how the
//! `query` parameter and the body make one statement. (Statement kinds are ClickHouse rules:
//! `chstorm_proto::rules`.)

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

/// The statement as ClickHouse reads it from an HTTP request: the `query` parameter, then a
/// newline, then the body (ClickHouse's HTTP handler appends `\n` to a non-empty `query`
/// parameter and reads the body after it). Either part may be absent.
pub fn join_query(url_query: Option<&str>, body: &[u8]) -> String {
    let body = String::from_utf8_lossy(body);
    match url_query.filter(|q| !q.is_empty()) {
        Some(q) if body.is_empty() => q.to_string(),
        Some(q) => format!("{q}\n{body}"),
        None => body.into_owned(),
    }
}

/// True when a URL parameter is a ClickHouse setting (not a request parameter, not a query
/// parameter `param_*`, not the gateway's own).
pub fn is_setting(name: &str) -> bool {
    !NOT_SETTINGS.contains(&name) && !name.starts_with("param_") && name != SHARD_KEY_PARAM
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
}
