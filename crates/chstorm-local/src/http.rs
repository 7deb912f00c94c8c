//! A tiny blocking HTTP/1.1 client over `std::net`, just enough for `/ping`
//! and for posting SQL to a local server. Plain `http://` only; every request
//! uses `Connection: close` and reads the answer to EOF.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::LocalError;

/// Timeout of [`query`](crate::LocalServer::query): 60 s for connect, send and
/// receive together.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// A parsed HTTP answer.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Returns true if `GET {http_url}/ping` answers 200 with body `Ok.` within
/// `timeout` (which bounds connect, send and receive together).
pub fn ping(http_url: &str, timeout: Duration) -> bool {
    match request(http_url, "GET", "/ping", b"", timeout) {
        Ok(r) => r.status == 200 && r.body.trim_ascii() == b"Ok.",
        Err(_) => false,
    }
}

/// Posts `sql` to `http_url` and returns the body; a non-200 answer becomes
/// [`LocalError::Query`] carrying the body's first line.
pub(crate) fn post_query(http_url: &str, sql: &str) -> Result<String, LocalError> {
    let r = request(http_url, "POST", "/", sql.as_bytes(), QUERY_TIMEOUT)
        .map_err(|detail| LocalError::Http { url: http_url.to_string(), detail })?;
    let body = String::from_utf8_lossy(&r.body).into_owned();
    if r.status != 200 {
        let message = body.lines().next().unwrap_or("").trim().to_string();
        return Err(LocalError::Query { status: r.status, message });
    }
    Ok(body)
}

/// Sends one request and reads the whole answer; errors are plain messages.
pub(crate) fn request(
    http_url: &str,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<Response, String> {
    let deadline = Instant::now() + timeout;
    let (authority, base_path) = split_url(http_url)?;
    let addr = resolve(authority)?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect to {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let full_path = format!("{}{}", base_path.trim_end_matches('/'), path);
    let head = format!(
        "{method} {full_path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    set_timeouts(&stream, deadline)?;
    stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(body)).map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        set_timeouts(&stream, deadline)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("receive: {e}")),
        }
    }
    parse_response(&raw)
}

/// Splits `http://host:port/base` into (`host:port`, `/base`).
fn split_url(url: &str) -> Result<(&str, &str), String> {
    let rest =
        url.strip_prefix("http://").ok_or_else(|| format!("unsupported URL {url:?} (expected http://HOST:PORT)"))?;
    Ok(match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    })
}

fn resolve(authority: &str) -> Result<SocketAddr, String> {
    let with_port = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("resolve {authority}: no address"))
}

fn set_timeouts(stream: &TcpStream, deadline: Instant) -> Result<(), String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err("timed out".to_string());
    }
    stream
        .set_read_timeout(Some(left))
        .and_then(|_| stream.set_write_timeout(Some(left)))
        .map_err(|e| format!("set socket timeout: {e}"))
}

/// Parses status line, headers and (possibly chunked) body of a complete answer.
pub(crate) fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let head_end = find(raw, b"\r\n\r\n").ok_or("incomplete HTTP answer (no end of headers)")?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| "HTTP headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad HTTP status line {status_line:?}"))?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let rest = &raw[head_end + 4..];
    let body = if chunked { dechunk(rest)? } else { rest.to_vec() };
    Ok(Response { status, body })
}

/// Decodes a chunked body.
fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(data.len());
    loop {
        let eol = find(data, b"\r\n").ok_or("truncated chunk header")?;
        let size_text = std::str::from_utf8(&data[..eol]).map_err(|_| "bad chunk header")?;
        let size_hex = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| format!("bad chunk size {size_hex:?}"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size {
            return Err("truncated chunk".to_string());
        }
        out.extend_from_slice(&data[..size]);
        data = data.get(size + 2..).unwrap_or(&[]);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nOk.\n").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"Ok.\n"[..]));
        let r =
            parse_response(b"HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n")
                .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (500, &b"abcde"[..]));
        assert!(parse_response(b"garbage").is_err());
    }

    #[test]
    fn splits_urls() {
        assert_eq!(split_url("http://127.0.0.1:8123").unwrap(), ("127.0.0.1:8123", ""));
        assert_eq!(split_url("http://h:1/x/").unwrap(), ("h:1", "/x/"));
        assert!(split_url("https://h").is_err());
    }

    #[test]
    fn ping_fails_fast_on_closed_port() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert!(!ping(&format!("http://127.0.0.1:{port}"), Duration::from_millis(500)));
    }
}
