//! Reading a ClickHouse HTTP request: its parameters, which of them are settings, and how the
//! `query` parameter and the body make one statement. (Statement kinds are ClickHouse rules:
//! `chstorm_proto::rules`.)
//!
//! The parameters' percent-decoding and -encoding are written here rather than taken from the
//! `percent-encoding` crate: every query decodes and encodes its parameters, and the crate's
//! iterators, with the `+` rule and the byte escapes of [`decode_bytes`] around them, cost
//! several allocations a parameter. The tests check this code against the crate's on generated
//! query strings.

/// ClickHouse's header for a client's password (its user goes in `X-ClickHouse-User`).
pub static X_CLICKHOUSE_KEY: http::HeaderName = http::HeaderName::from_static("x-clickhouse-key");

/// A header that carries a client's credentials: `Authorization`, `X-ClickHouse-Key`.
pub fn is_credential(name: &http::HeaderName) -> bool {
    name == http::header::AUTHORIZATION || name == X_CLICKHOUSE_KEY
}

/// URL parameters of ClickHouse's HTTP interface that are not settings: 18.16's, and those
/// current releases reserve besides (`reserved_param_names` in ClickHouse's
/// `src/Server/HTTPHandler.cpp`: `client_protocol_version`, which clickhouse-go sends on every
/// request, and `close_session`). An 18.16 server takes the newer two for settings it does not
/// know and says so itself.
const NOT_SETTINGS: &[&str] = &[
    "client_protocol_version",
    "close_session",
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

/// Hop-by-hop headers (RFC 9110 7.6.1, and the old `keep-alive` and `proxy-connection`): about
/// one connection, never passed between client and backend, either way.
pub const HOP_BY_HOP: &[&str] =
    &["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"];

/// The gateway's own parameter: the shard key of a routed query. Not passed on.
pub const SHARD_KEY_PARAM: &str = "shard_key";
/// The gateway's own header for the shard key.
pub const SHARD_KEY_HEADER: &str = "x-chstorm-shard-key";

/// The first of the 128 private-use characters (U+10FF80 to U+10FFFF) that stand for the bytes
/// 0x80 to 0xFF in text decoded by [`decode_bytes`].
const BYTE_CHARS: u32 = 0x10FF00;

/// Bytes as text, reversibly: valid UTF-8 stays as it is, and each byte of an invalid sequence
/// becomes the private-use character U+10FF00 + byte (the byte is 0x80 or more: ASCII is always
/// valid). A valid character in U+10FF80..=U+10FFFF is escaped the same way, byte by byte, so
/// [`encode_bytes`] gives back exactly the bytes that came, whatever they were.
///
/// ClickHouse takes a query's and a setting's bytes as they are (`SELECT length('\xff')` is 1);
/// the gateway reads the text to classify and route it, and forwards it with this pair, so that
/// invalid UTF-8 reaches the server unchanged rather than as U+FFFD. The rules see an invalid
/// byte as one private-use character, which no rule matches.
pub fn decode_bytes(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        // Valid UTF-8 without a 0xF4 byte (which every escaped character starts with) stays as it is.
        Ok(s) if !bytes.contains(&0xF4) => s.to_owned(),
        _ => decode_escaping(bytes),
    }
}

/// [`decode_bytes`] of bytes held in a `Vec`: valid UTF-8 without an escaped character keeps
/// the allocation.
fn decode_owned(bytes: Vec<u8>) -> String {
    if bytes.contains(&0xF4) {
        return decode_escaping(&bytes);
    }
    String::from_utf8(bytes).unwrap_or_else(|e| decode_escaping(e.as_bytes()))
}

fn decode_escaping(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let escape = |out: &mut String, b: &[u8]| {
        out.extend(b.iter().map(|&x| char::from_u32(BYTE_CHARS + x as u32).expect("a private-use character")))
    };
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if (BYTE_CHARS + 0x80..=BYTE_CHARS + 0xFF).contains(&(c as u32)) {
                escape(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes());
            } else {
                out.push(c);
            }
        }
        escape(&mut out, chunk.invalid());
    }
    out
}

/// The bytes [`decode_bytes`] read `text` from (other text: its UTF-8).
pub fn encode_bytes(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match (c as u32).checked_sub(BYTE_CHARS) {
            Some(b @ 0x80..=0xFF) => out.push(b as u8),
            _ => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

/// The first value of each of `names` in `headers` (what `HeaderMap::get` gives), as text; a
/// value that is not visible ASCII is not found, as `get(..).to_str().ok()` would not find it.
/// One pass over the headers, where each `get` hashes its name: a request has few headers, and
/// the query path reads several names of every request.
pub fn first_headers<'h, const N: usize>(
    headers: &'h http::HeaderMap,
    names: [&http::HeaderName; N],
) -> [Option<&'h str>; N] {
    let mut found = [None; N];
    let mut seen = [false; N];
    for (k, v) in headers {
        if let Some(i) = names.iter().position(|n| *n == k) {
            if !seen[i] {
                seen[i] = true;
                found[i] = v.to_str().ok();
            }
        }
    }
    found
}

/// Splits a query string into decoded (name, value) pairs, in order. Percent-encoded bytes that
/// are not UTF-8 are kept ([`decode_bytes`]); [`encode_params`] sends them back unchanged.
pub fn parse_params(query: Option<&str>) -> Vec<(String, String)> {
    let Some(q) = query else { return Vec::new() };
    pairs(q).map(|(k, v)| (decode_component(k), decode_component(v))).collect()
}

/// The first parameter of each of `names` in a query string, decoded (what [`parse_params`]
/// would find first), in one pass, without decoding the others' values.
pub fn first_params<const N: usize>(query: Option<&str>, names: [&str; N]) -> [Option<String>; N] {
    let mut found = [const { None }; N];
    let Some(q) = query else { return found };
    let mut left = N;
    for (k, v) in pairs(q) {
        let decoded;
        let k = if plain(k) {
            k
        } else {
            decoded = decode_component(k);
            decoded.as_str()
        };
        if let Some(i) = names.iter().position(|n| *n == k) {
            if found[i].is_none() {
                found[i] = Some(decode_component(v));
                left -= 1;
                if left == 0 {
                    break;
                }
            }
        }
    }
    found
}

/// A query string's raw (name, value) pairs, empty ones skipped.
fn pairs(q: &str) -> impl Iterator<Item = (&str, &str)> {
    q.split('&').filter(|p| !p.is_empty()).map(|p| p.split_once('=').unwrap_or((p, "")))
}

/// Nothing to decode: no `%`, no `+`, all ASCII.
fn plain(s: &str) -> bool {
    s.bytes().all(|b| b != b'%' && b != b'+' && b.is_ascii())
}

/// One name or value of a query string decoded: `+` is a space, `%XX` its byte (a `%` without
/// two hex digits stays as it is), and the bytes are read by [`decode_bytes`].
fn decode_component(s: &str) -> String {
    if plain(s) {
        return s.to_owned();
    }
    let b = s.as_bytes();
    let hex = |i: usize| b.get(i).and_then(|c| (*c as char).to_digit(16));
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => match (hex(i + 1), hex(i + 2)) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    decode_owned(out)
}

/// Encodes pairs back into a query string, with the bytes [`parse_params`] read them from:
/// letters, digits and `-._~` as they are, any other byte as `%XX`.
pub fn encode_params(params: &[(String, String)]) -> String {
    let mut out = String::with_capacity(params.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>() + 16);
    encode_params_into(&mut out, params);
    out
}

/// [`encode_params`], appended to `out`.
pub fn encode_params_into(out: &mut String, params: &[(String, String)]) {
    for (i, (k, v)) in params.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode_param_into(out, k, v);
    }
}

/// One pair of [`encode_params`] (`name=value`), appended to `out`.
pub fn encode_param_into(out: &mut String, name: &str, value: &str) {
    encode_component(out, name);
    out.push('=');
    encode_component(out, value);
}

/// Appends `text`'s bytes ([`encode_bytes`]) to `out`, percent-encoded as [`encode_params`] does.
fn encode_component(out: &mut String, text: &str) {
    if text.is_ascii() {
        // Runs of bytes that go as they are, pushed whole.
        let mut rest = text;
        while let Some(i) = rest.bytes().position(|b| !unreserved(b)) {
            out.push_str(&rest[..i]);
            push_byte(out, rest.as_bytes()[i]);
            rest = &rest[i + 1..];
        }
        return out.push_str(rest);
    }
    for c in text.chars() {
        match (c as u32).checked_sub(BYTE_CHARS) {
            Some(b @ 0x80..=0xFF) => push_byte(out, b as u8),
            _ => c.encode_utf8(&mut [0; 4]).bytes().for_each(|b| push_byte(out, b)),
        }
    }
}

/// Letters, digits and `-._~`: the bytes a URL component carries as they are.
fn unreserved(b: u8) -> bool {
    UNRESERVED[b as usize]
}

/// [`unreserved`] of each byte, looked up: a URL is encoded byte by byte on every request.
static UNRESERVED: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~');
        b += 1;
    }
    t
};

/// One byte of a URL component: itself when [`unreserved`], else `%XX`.
fn push_byte(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    if unreserved(b) {
        out.push(b as char);
    } else {
        out.extend(['%', HEX[(b >> 4) as usize] as char, HEX[(b & 15) as usize] as char]);
    }
}

/// True when a URL parameter is a ClickHouse setting (not a request parameter, not a query
/// parameter `param_*`, not the gateway's own).
pub fn is_setting(name: &str) -> bool {
    !NOT_SETTINGS.contains(&name) && !name.starts_with("param_") && name != SHARD_KEY_PARAM
}

/// The query text ClickHouse runs for a request with `url_query` in the `query` URL parameter
/// and a body starting with `body_head` (the whole body, or as much of its head as the caller
/// read): the two joined with a newline, as the HTTP interface does.
///
/// Verified on 18.16.1: `?query=SELECT 'x` with the body `y'` answers `x\ny` (a newline
/// between them, nothing else); `?query=SELECT 1 -- c` with the body `+1` answers 2 (the
/// comment ends at that newline); `?query=SELECT 1` with the body `2` is a syntax error at
/// "line 2, col 1"; an empty `query=` adds nothing (`?query=` with the body `SELECT 'b'`
/// answers `b`). The same holds for GET requests with a body. The server reads the first
/// `query` parameter when there are several (`?query=SELECT 1&query=SELECT 2` answers 1).
/// Current releases keep the same join (`query_param += '\n'` when it is not empty), from
/// reading the source, not verified here.
///
/// Invalid UTF-8 in the body (binary data after `INSERT ... FORMAT`, a string literal's bytes,
/// or a head cut inside a character) is kept as [`decode_bytes`] keeps it, so a statement
/// rewritten for routing goes out with the bytes that came ([`encode_bytes`]).
pub fn join_query(url_query: &str, body_head: &[u8]) -> String {
    let body = decode_bytes(body_head);
    if url_query.is_empty() {
        return body;
    }
    let mut out = String::with_capacity(url_query.len() + 1 + body.len());
    out.push_str(url_query);
    out.push('\n');
    out.push_str(&body);
    out
}

/// The request's current database for routing, from its decoded URL parameters and its
/// `X-ClickHouse-Database` header: `None` is the server's default (`default`), `Some("")` means
/// "not known for sure" and matches no unqualified table name.
///
/// Verified on 18.16.1: the last `database` parameter wins (`?database=system&database=default`
/// runs in `default`; current releases take the first, so two that differ give `Some("")`);
/// `?database=` with no value leaves no current database (`SELECT
/// currentDatabase()` answers an empty line, an unqualified table is Code 81 `Default database
/// is not selected`); the `X-ClickHouse-Database` header is ignored (with or without a
/// parameter). Newer releases honour the header, and which of the two wins differs between
/// releases, so a non-empty header that does not agree with the parameter (or the default)
/// gives `Some("")`.
pub fn current_database<'a>(params: &'a [(String, String)], header: Option<&'a str>) -> Option<&'a str> {
    // 18.16 takes the last `database` parameter, current releases the first: two that differ
    // name no database the gateway can be sure of.
    let mut given = params.iter().filter(|(k, _)| k == "database").map(|(_, v)| v.as_str());
    let param = given.next();
    if given.any(|v| Some(v) != param) {
        return Some("");
    }
    match header.filter(|h| !h.is_empty()) {
        Some(h) if h != param.unwrap_or(chstorm_sql::route::DEFAULT_DATABASE) => Some(""),
        _ => param,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded xorshift generator: each call, a number below its argument.
    fn below(mut seed: u64) -> impl FnMut(usize) -> usize {
        move |n| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        }
    }

    #[test]
    fn the_first_headers_are_what_get_finds_in_generated_maps() {
        use http::{HeaderName, HeaderValue};
        let names = [
            http::header::AUTHORIZATION,
            http::header::CONTENT_TYPE,
            HeaderName::from_static("x-clickhouse-user"),
            HeaderName::from_static("x-clickhouse-key"),
            HeaderName::from_static("x-clickhouse-database"),
            HeaderName::from_static("x-clickhouse-usex"),
            http::header::HOST,
        ];
        let values = [
            HeaderValue::from_static("a"),
            HeaderValue::from_static(""),
            HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
            HeaderValue::from_static("multipart/form-data; boundary=x"),
        ];
        let mut next = below(0x9e37_79b9_7f4a_7c15);
        for _ in 0..3000 {
            let mut h = http::HeaderMap::new();
            for _ in 0..next(9) {
                h.append(names[next(names.len())].clone(), values[next(values.len())].clone());
            }
            let wanted = [&names[0], &names[2], &names[3], &names[4], &names[1]];
            let got = first_headers(&h, wanted);
            let by_get = wanted.map(|n| h.get(n).and_then(|v| v.to_str().ok()));
            assert_eq!(got, by_get, "{h:?}");
        }
    }

    #[test]
    fn params_round_trip() {
        let p = parse_params(Some("query=SELECT%201&max_threads=2&x=a+b&flag"));
        assert_eq!(p[0], ("query".into(), "SELECT 1".into()));
        assert_eq!(p[2], ("x".into(), "a b".into()));
        assert_eq!(p[3], ("flag".into(), "".into()));
        assert_eq!(encode_params(&p[..2]), "query=SELECT%201&max_threads=2");
    }

    #[test]
    fn any_bytes_survive_decoding_and_encoding() {
        let cases: &[&[u8]] = &[
            b"SELECT length('\xff')",
            b"\xc3",
            b"\xc3\x28",
            b"\xe2\x82",
            b"\xf0\x9f\x98",
            b"\xed\xa0\x80",
            b"\xc0\xaf",
            b"\xf8\x88\x80\x80\x80",
            b"\x80\xbf\xfe\xff",
            "caf\u{e9} \u{1f600} \u{10ff80}\u{10ffff}\u{10ff7f}".as_bytes(),
            b"\xf4\x8f\xbe\x80\xff",
            b"",
        ];
        for b in cases {
            assert_eq!(encode_bytes(&decode_bytes(b)), *b, "{b:?}");
        }
        // Generated: every byte pair and a run of random byte strings.
        for x in 0..=255u8 {
            for y in 0..=255u8 {
                let b = [b'a', x, y, b'z'];
                assert_eq!(encode_bytes(&decode_bytes(&b)), b);
            }
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let n = (seed % 24) as usize;
            let b: Vec<u8> = (0..n)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            assert_eq!(encode_bytes(&decode_bytes(&b)), b);
        }
        // Valid UTF-8 is read as itself.
        assert_eq!(decode_bytes("SELECT 'é'".as_bytes()), "SELECT 'é'");
    }

    #[test]
    fn parameters_keep_their_bytes() {
        for q in [
            "query=SELECT%20length%28%27%FF%27%29",
            "query=SELECT%20%27%C3%28%27&max_threads=%FF",
            "query=%E2%82%AC%E2%82&x%FF=%F0%9F%98%80%F0",
            "query=%F4%8F%BE%80",
        ] {
            assert_eq!(encode_params(&parse_params(Some(q))), q, "{q}");
        }
    }

    /// The decoding and encoding as the `percent-encoding` crate does them, the reference for
    /// the gateway's own.
    fn reference_parse(q: &str) -> Vec<(String, String)> {
        q.split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                let dec = |s: &str| {
                    decode_escaping(&percent_encoding::percent_decode_str(&s.replace('+', " ")).collect::<Vec<u8>>())
                };
                (dec(k), dec(v))
            })
            .collect()
    }

    fn reference_encode(params: &[(String, String)]) -> String {
        const SET: &percent_encoding::AsciiSet =
            &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
        let enc = |s: &str| percent_encoding::percent_encode(&encode_bytes(s), SET).to_string();
        params.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&")
    }

    #[test]
    fn parameters_decode_and_encode_as_the_reference_does() {
        // Generated query strings over the characters that matter: escapes (good, cut, not hex),
        // `+`, separators, ASCII, multi-byte UTF-8 and the escaped private-use range.
        let alphabet: &[&str] = &[
            "%",
            "%2",
            "%20",
            "%2B",
            "%FF",
            "%f4",
            "%8F",
            "%BE",
            "%zz",
            "%C3%A9",
            "+",
            "&",
            "=",
            "a",
            "Z",
            "0",
            "-",
            ".",
            "_",
            "~",
            "é",
            "\u{10ff80}",
            "\u{1f600}",
            " ",
            "'",
            "/",
            "?",
            "%%",
            "%4",
            "x=y",
            "&&",
        ];
        let mut next = below(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let len = next(12);
            let q: String = (0..len).map(|_| alphabet[next(alphabet.len())]).collect();
            let got = parse_params(Some(&q));
            assert_eq!(got, reference_parse(&q), "{q:?}");
            assert_eq!(encode_params(&got), reference_encode(&got), "{q:?}");
            let names = ["a", "x", "é", " ", ""];
            let first = names.map(|name| got.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()));
            assert_eq!(first_params(Some(&q), names), first, "{q:?}");
            for (i, name) in names.into_iter().enumerate() {
                assert_eq!(first_params(Some(&q), [name]), [first[i].clone()], "{q:?} {name:?}");
            }
        }
    }

    #[test]
    fn query_parameter_and_body_are_joined_with_a_newline() {
        assert_eq!(
            join_query("SELECT count() FROM items WHERE shop_id = 42", b" OR shop_id = 43"),
            "SELECT count() FROM items WHERE shop_id = 42\n OR shop_id = 43"
        );
        assert_eq!(join_query("SELECT 'x", b"y'"), "SELECT 'x\ny'");
        assert_eq!(join_query("SELECT 1 -- c", b"+1"), "SELECT 1 -- c\n+1");
        assert_eq!(join_query("", b"SELECT 'b'"), "SELECT 'b'");
        assert_eq!(join_query("SELECT 1", b""), "SELECT 1\n");
        assert_eq!(join_query("", b""), "");
        assert_eq!(
            join_query("INSERT INTO t FORMAT RowBinary", b"\xff\x00"),
            "INSERT INTO t FORMAT RowBinary\n\u{10ffff}\u{0}"
        );
    }

    #[test]
    fn current_database_as_the_server_picks_it() {
        let p = |q: &str| parse_params(Some(q));
        assert_eq!(current_database(&p("query=x"), None), None);
        assert_eq!(current_database(&p("database=otherdb"), None), Some("otherdb"));
        // 18.16 takes the last, current releases the first: two that differ are no database.
        assert_eq!(current_database(&p("database=system&database=default"), None), Some(""));
        assert_eq!(current_database(&p("database=db&database=db"), None), Some("db"));
        assert_eq!(current_database(&p("database="), None), Some(""));
        assert_eq!(current_database(&p("database=otherdb"), Some("")), Some("otherdb"));
        // The header: ignored by 18.16, honoured by newer releases; only an agreeing one is certain.
        assert_eq!(current_database(&p("database=otherdb"), Some("otherdb")), Some("otherdb"));
        assert_eq!(current_database(&p(""), Some("default")), None);
        assert_eq!(current_database(&p(""), Some("otherdb")), Some(""));
        assert_eq!(current_database(&p("database=default"), Some("otherdb")), Some(""));
    }

    #[test]
    fn settings_are_told_apart() {
        assert!(is_setting("max_threads") && is_setting("enable_http_compression"));
        assert!(!is_setting("client_protocol_version") && !is_setting("close_session") && !is_setting("quota_key"));
        assert!(
            !is_setting("query") && !is_setting("param_id") && !is_setting("shard_key") && !is_setting("session_id")
        );
    }
}
