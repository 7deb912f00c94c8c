//! A request head, parsed by `httparse` (hyper's own parser) into the `http` crate's parts, when
//! the gateway's own front serves the request: an HTTP/1.1 request in origin form whose body,
//! if any, has one `Content-Length` and has come whole with the head. Anything else (HTTP/1.0,
//! `Transfer-Encoding`, `Expect`, `Upgrade`, a head `httparse` or the `http` crate refuses, a
//! body still on its way) is [`Parsed::Other`]: hyper serves it, and the connection from there.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, Method, Uri, Version};

/// The most header lines the own front parses; a head with more goes to hyper (which takes
/// 100, and answers 431 beyond).
const MAX_HEADERS: usize = 64;

/// What the bytes read so far hold. (Returned once per head and moved on at once: boxing the
/// parts would only add an allocation.)
#[allow(clippy::large_enum_variant)]
pub enum Parsed {
    /// Part of a head; read on.
    Partial,
    /// A request the own front serves: its parts, and its body taken off the buffer.
    Simple(http::request::Parts, Option<Bytes>),
    /// A request for hyper (the buffer left as it was).
    Other,
}

/// Parses the head at the start of `buf`; for [`Parsed::Simple`] the head and the body are
/// taken off `buf`, which then starts at the next request's first byte, if any came.
pub fn parse(buf: &mut BytesMut) -> Parsed {
    // Uninitialised room: `httparse` writes the lines it finds, and no 2 KiB of empty lines is
    // written first on every request.
    let mut lines = [const { std::mem::MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, buf, &mut lines)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let (Some(1), Some(method), Some(path)) = (req.version, req.method, req.path) else { return Parsed::Other };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else { return Parsed::Other };
    if method == Method::CONNECT || !path.starts_with('/') {
        return Parsed::Other;
    }
    let Ok(uri) = Uri::try_from(path) else { return Parsed::Other };
    let Some((headers, body_len)) = headers(req.headers) else { return Parsed::Other };
    if buf.len() - head_len < body_len {
        return Parsed::Other;
    }
    let mut r = http::Request::new(());
    *r.method_mut() = method;
    *r.uri_mut() = uri;
    *r.version_mut() = Version::HTTP_11;
    *r.headers_mut() = headers;
    let _ = buf.split_to(head_len);
    let body = (body_len > 0).then(|| buf.split_to(body_len).freeze());
    Parsed::Simple(r.into_parts().0, body)
}

/// The header map of `lines`, and the body's length; `None` for a head hyper must see.
fn headers(lines: &[httparse::Header<'_>]) -> Option<(HeaderMap, usize)> {
    let mut map = HeaderMap::with_capacity(lines.len());
    let mut length = None;
    for line in lines {
        let name = HeaderName::from_bytes(line.name.as_bytes()).ok()?;
        if name == http::header::TRANSFER_ENCODING || name == http::header::EXPECT || name == http::header::UPGRADE {
            return None;
        }
        if name == http::header::CONTENT_LENGTH {
            if length.is_some() {
                return None;
            }
            length = Some(content_length(line.value)?);
        }
        let value = crate::header_values::value(&name, line.value).ok()?;
        map.append(name, value);
    }
    Some((map, length.unwrap_or(0)))
}

/// A `Content-Length` value of digits alone, at most 18 of them.
fn content_length(v: &[u8]) -> Option<usize> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    usize::try_from(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'))).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> (Parsed, BytesMut) {
        let mut buf = BytesMut::from(text.as_bytes());
        (parse(&mut buf), buf)
    }

    #[test]
    fn a_simple_request_is_taken_off_with_its_body_and_the_next_one_stays() {
        let (p, rest) =
            parsed("POST /?query=INSERT HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 3\r\n\r\nabcGET /");
        let Parsed::Simple(parts, body) = p else { panic!("simple") };
        assert_eq!(parts.method, Method::POST);
        assert_eq!(parts.uri.path_and_query().unwrap().as_str(), "/?query=INSERT");
        assert_eq!(parts.headers.get_all("x-a").iter().collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(body.as_deref(), Some(&b"abc"[..]));
        assert_eq!(&rest[..], b"GET /");
        let (p, rest) = parsed("GET /?query=SELECT%201 HTTP/1.1\r\n\r\n");
        assert!(matches!(p, Parsed::Simple(_, None)));
        assert!(rest.is_empty());
    }

    #[test]
    fn a_value_seen_again_is_shared_and_credentials_are_made_for_their_request_alone() {
        let head = "GET / HTTP/1.1\r\nHost: h:1\r\nAuthorization: Basic dTpw\r\nX-ClickHouse-Key: p\r\n\r\n";
        let ((Parsed::Simple(a, _), _), (Parsed::Simple(b, _), _)) = (parsed(head), parsed(head)) else {
            panic!("simple")
        };
        let at = |p: &http::request::Parts, name: &str| p.headers[name].as_bytes().as_ptr();
        assert_eq!(at(&a, "host"), at(&b, "host"), "one Host value, shared");
        for name in ["authorization", "x-clickhouse-key"] {
            assert_eq!(a.headers[name], b.headers[name]);
            assert_ne!(at(&a, name), at(&b, name), "{name} is made for each request");
        }
    }

    #[test]
    fn part_of_a_head_is_partial() {
        for text in ["G", "GET / HTTP/1.1\r\n", "GET / HTTP/1.1\r\nHost: x\r\n"] {
            assert!(matches!(parsed(text).0, Parsed::Partial), "{text:?}");
        }
    }

    #[test]
    fn every_other_request_is_left_whole_for_hyper() {
        let others = [
            "GET / HTTP/1.0\r\n\r\n",
            "GET http://x/ HTTP/1.1\r\n\r\n",
            "GET * HTTP/1.1\r\n\r\n",
            "CONNECT x:1 HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
            "GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 8\r\n\r\nSELECT",
            "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
            "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\nx",
            "POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\nx",
            "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\nx",
            "GET / HTTP/1.1\r\nX-A: a\x00b\r\n\r\n",
            "GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n",
            "GET / HTTP/1.1\r\nX A: a\r\n\r\n",
            "GET /\x7f HTTP/1.1\r\n\r\n",
        ];
        for text in others {
            let (p, rest) = parsed(text);
            assert!(matches!(p, Parsed::Other), "{text:?}");
            assert_eq!(&rest[..], text.as_bytes(), "left as it came");
        }
        let many: String = (0..MAX_HEADERS + 1).map(|i| format!("X-{i}: v\r\n")).collect();
        assert!(matches!(parsed(&format!("GET / HTTP/1.1\r\n{many}\r\n")).0, Parsed::Other));
    }
}
