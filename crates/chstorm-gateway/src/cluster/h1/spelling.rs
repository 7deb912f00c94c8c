//! Header names as a replica spells them. The HTTP front writes a name in title case
//! (`Content-Type`), or as ClickHouse spells its own ([`CLICKHOUSE_NAMES`]: the first
//! `X-ClickHouse-Format` of an answer), unless the answer carries its replica's spelling, marked
//! [`BackendSpelling`]: the names as the replica sent them ([`SpelledNames`], from the HTTP/1
//! client), or hyper's (private) header case map in its extensions (from hyper's client, for
//! `https://` replicas).
//!
//! The HTTP/1 client keeps the names only for an answer that needs it ([`own_spelling`]): one
//! whose names the front would spell otherwise (a repeated `X-ClickHouse-Progress`; a name in
//! another case). An 18.16 answer never does. The gateway's own HTTP/1 server spells by them
//! directly; for hyper's server the front turns them into hyper's case map ([`case_map`]): hyper
//! records a name's spelling only while its client parses a head, so the map is made by handing
//! hyper's client a head of those names, which costs a connection task's worth of work.

use hyper_util::rt::TokioIo;

/// ClickHouse's own headers, as it spells them.
pub const CLICKHOUSE_NAMES: &[&str] = &[
    "X-ClickHouse-Query-Id",
    "X-ClickHouse-Format",
    "X-ClickHouse-Timezone",
    "X-ClickHouse-Summary",
    "X-ClickHouse-Progress",
    "X-ClickHouse-Exception-Code",
    "X-ClickHouse-Server-Display-Name",
    "X-ClickHouse-Database",
    "X-ClickHouse-User",
];

/// The start all of [`CLICKHOUSE_NAMES`] share, in lower case.
const CLICKHOUSE_PREFIX: &[u8] = b"x-clickhouse-";

/// Which of [`CLICKHOUSE_NAMES`] `name` is, in any case. A name without their common start is
/// none of them, found without comparing it to each.
pub fn clickhouse_name(name: &str) -> Option<usize> {
    let b = name.as_bytes();
    if b.len() <= CLICKHOUSE_PREFIX.len() || !b[..CLICKHOUSE_PREFIX.len()].eq_ignore_ascii_case(CLICKHOUSE_PREFIX) {
        return None;
    }
    CLICKHOUSE_NAMES.iter().position(|c| c.len() == name.len() && c.eq_ignore_ascii_case(name))
}

/// Which of [`CLICKHOUSE_NAMES`] a [`http::HeaderName`] is: its name is in lower case already,
/// so one comparison by length and bytes finds it, where [`clickhouse_name`] compares in any
/// case.
pub fn clickhouse_header(name: &http::HeaderName) -> Option<usize> {
    Some(match name.as_str() {
        "x-clickhouse-query-id" => 0,
        "x-clickhouse-format" => 1,
        "x-clickhouse-timezone" => 2,
        "x-clickhouse-summary" => 3,
        "x-clickhouse-progress" => 4,
        "x-clickhouse-exception-code" => 5,
        "x-clickhouse-server-display-name" => 6,
        "x-clickhouse-database" => 7,
        "x-clickhouse-user" => 8,
        _ => return None,
    })
}

/// Marks an answer whose header names go out as its replica spelled them (its extensions hold
/// hyper's case map of them).
#[derive(Clone, Copy)]
pub struct BackendSpelling;

/// The names of an answer marked [`BackendSpelling`] by the HTTP/1 client, as its replica spelled
/// them, in order (without `Content-Length` and `Transfer-Encoding`, which the front frames
/// itself): what the front spells them by.
#[derive(Clone)]
pub struct SpelledNames(pub std::sync::Arc<[Box<str>]>);

impl SpelledNames {
    pub fn of<N: AsRef<str>>(names: &[N]) -> SpelledNames {
        let framing = |n: &str| n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding");
        SpelledNames(names.iter().map(AsRef::as_ref).filter(|n| !framing(n)).map(Box::from).collect())
    }
}

/// Would the front spell any of `headers`' names otherwise than they came: not in title case,
/// and not ClickHouse's spelling of one of its own names at its first appearance?
pub fn own_spelling(headers: &[httparse::Header]) -> bool {
    let mut seen = [false; CLICKHOUSE_NAMES.len()];
    headers.iter().any(|h| match clickhouse_name(h.name) {
        Some(i) if !seen[i] => {
            seen[i] = true;
            h.name != CLICKHOUSE_NAMES[i]
        }
        _ => !title_case(h.name.as_bytes()),
    })
}

/// Is `name` in title case (as hyper's `title_case_headers` writes it)?
fn title_case(name: &[u8]) -> bool {
    let mut prev = b'-';
    name.iter().all(|&c| {
        let ok = if prev == b'-' { !c.is_ascii_lowercase() } else { !c.is_ascii_uppercase() };
        prev = c;
        ok
    })
}

/// hyper's header case map of `names` (each as spelled), in an extensions map to add to an
/// answer's.
pub async fn case_map<N: AsRef<str>>(names: &[N]) -> Result<http::Extensions, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut canned = b"HTTP/1.1 200 OK\r\n".to_vec();
    for name in names.iter().map(|n| n.as_ref().as_bytes()) {
        if !name.eq_ignore_ascii_case(b"content-length") && !name.eq_ignore_ascii_case(b"transfer-encoding") {
            canned.extend_from_slice(name);
            canned.extend_from_slice(b": x\r\n");
        }
    }
    canned.extend_from_slice(b"Content-Length: 0\r\n\r\n");
    let (client, mut server) = tokio::io::duplex(canned.len() + 4096);
    let (mut send, conn) = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .handshake::<_, http_body_util::Empty<bytes::Bytes>>(TokioIo::new(client))
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let answer = tokio::spawn(send.send_request(http::Request::new(http_body_util::Empty::new())));
    // The request first (hyper's client takes an answer that comes before it for an error).
    let mut got = Vec::new();
    while !got.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 512];
        let n = server.read(&mut b).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the canned client closed".into());
        }
        got.extend_from_slice(&b[..n]);
    }
    server.write_all(&canned).await.map_err(|e| e.to_string())?;
    let resp = answer.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    driver.abort();
    Ok(resp.into_parts().0.extensions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(names: &[&str]) -> bool {
        let h: Vec<_> = names.iter().map(|n| httparse::Header { name: n, value: b"x" }).collect();
        own_spelling(&h)
    }

    #[test]
    fn clickhouse_names_are_found_in_any_case_and_no_other_name_is() {
        for (i, name) in CLICKHOUSE_NAMES.iter().enumerate() {
            assert!(name.as_bytes()[..CLICKHOUSE_PREFIX.len()].eq_ignore_ascii_case(CLICKHOUSE_PREFIX), "{name}");
            assert_eq!(clickhouse_name(name), Some(i));
            assert_eq!(clickhouse_name(&name.to_ascii_lowercase()), Some(i));
            assert_eq!(clickhouse_name(&name.to_ascii_uppercase()), Some(i));
            assert_eq!(clickhouse_name(&name[..name.len() - 1]), None);
            assert_eq!(clickhouse_name(&format!("{name}x")), None);
        }
        for other in ["", "x-clickhouse-", "X-ClickHouse-", "Date", "x-clickhouse-formats", "y-clickhouse-format"] {
            assert_eq!(clickhouse_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_header_name_is_found_as_by_its_spelling_in_any_case() {
        for name in
            CLICKHOUSE_NAMES.iter().copied().chain(["X-ClickHouse-", "Date", "X-ClickHouse-Formats", "x-chstorm-route"])
        {
            let header = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert_eq!(clickhouse_header(&header), clickhouse_name(name), "{name}");
        }
    }

    #[test]
    fn only_a_name_the_front_would_spell_otherwise_needs_the_replica_s_spelling() {
        // An 18.16 answer.
        assert!(!own(&[
            "Date",
            "Connection",
            "Content-Type",
            "X-ClickHouse-Server-Display-Name",
            "Transfer-Encoding",
            "Keep-Alive"
        ]));
        assert!(!own(&["X-ClickHouse-Query-Id", "X-ClickHouse-Summary", "Www-Authenticate"]));
        assert!(own(&["X-ClickHouse-Progress", "X-ClickHouse-Progress"]), "a repeated ClickHouse name");
        assert!(own(&["content-type"]));
        assert!(own(&["X-Clickhouse-Format"]));
        assert!(own(&["WWW-Authenticate"]));
    }

    #[tokio::test]
    async fn a_case_map_is_made_from_names() {
        let e = case_map(&["X-ClickHouse-Progress", "X-ClickHouse-Progress", "Content-Length"]).await.unwrap();
        assert!(!e.is_empty());
    }
}
