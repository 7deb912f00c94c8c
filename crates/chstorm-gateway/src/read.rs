//! Reading a client's request before it is planned: its URL parameters and its body.
//!
//! A body of at most [`MAX_HELD_BODY`] is read whole and *held*: it can be classified, routed,
//! rewritten, and sent again (retries, hedges). A gzip or deflate body (`Content-Encoding`) is
//! held decompressed. A bigger body (`INSERT ... FORMAT TSV` followed by its data, as
//! `cat data | curl --data-binary @-` sends it) is *streamed*: only its head is read, to classify
//! the statement, and the head and the rest go to the backend as they come, whatever their size.
//! A `decompress=1` body (ClickHouse's own compressed frames, as `clickhouse-compressor` writes
//! them) is decoded to read the statement, within the same bound, and forwarded as it came:
//! LZ4 and uncompressed frames are read ([`ch_frames`]); one with ZSTD (or another method), or
//! another `Content-Encoding`, is *opaque* and passed through unread (the plan refuses it for
//! users with rules).
//!
//! The statement is the `query` parameter joined with the body, as ClickHouse joins them
//! ([`crate::request::join_query`]).

use crate::plan::{BodyShape, Refusal};
use crate::request::{join_query, parse_params};
use crate::upstream::{BoxError, GBody};
use bytes::{Bytes, BytesMut};
use http::request::Parts;
use http::StatusCode;
use http_body_util::BodyExt;
use std::io::Read;

/// Largest body held whole (1 MiB), after decompression. Bigger bodies stream.
pub const MAX_HELD_BODY: usize = 1 << 20;

/// The client's body, as read.
pub enum ClientBody {
    /// Read whole (decompressed).
    Held(Bytes),
    /// Its first bytes (as the client sent them, compressed or not) and the rest.
    Streamed { head: Bytes, rest: GBody },
    /// Passed through unread.
    Opaque(GBody),
}

/// A request read far enough to be planned.
pub struct ClientRequest {
    pub params: Vec<(String, String)>,
    /// The statement (see [`crate::plan::PlanInput::sql`]).
    pub sql: Option<String>,
    pub shape: BodyShape,
    pub body: ClientBody,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Plain,
    Gzip,
    Deflate,
    Unknown,
}

/// True when the body is in ClickHouse's compressed frames (`decompress=1`, any value but 0,
/// as the server reads it).
fn ch_compressed(params: &[(String, String)]) -> bool {
    params.iter().any(|(k, v)| k == "decompress" && v != "0")
}

fn encoding(parts: &Parts) -> Encoding {
    match parts.headers.get("content-encoding").map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase()) {
        None => Encoding::Plain,
        Some(e) if e.is_empty() || e == "identity" => Encoding::Plain,
        Some(e) if e == "gzip" || e == "x-gzip" => Encoding::Gzip,
        Some(e) if e == "deflate" => Encoding::Deflate,
        Some(_) => Encoding::Unknown,
    }
}

/// Decompresses at most `limit + 1` bytes of `data` (which may be cut short). Returns the
/// bytes and whether the whole stream ended within `limit`.
fn decompress(enc: Encoding, data: &[u8], limit: usize) -> Result<(Vec<u8>, bool), std::io::Error> {
    let mut out = Vec::new();
    let reader: Box<dyn Read + '_> = match enc {
        Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(data)),
        Encoding::Deflate => Box::new(flate2::read::ZlibDecoder::new(data)),
        _ => Box::new(data),
    };
    let res = reader.take(limit as u64 + 1).read_to_end(&mut out);
    match res {
        Ok(_) => {
            let whole = out.len() <= limit;
            Ok((out, whole))
        }
        // A head cut mid-stream: what came out is still a head.
        Err(_) if !out.is_empty() => Ok((out, false)),
        Err(e) => Err(e),
    }
}

/// Why a `decompress=1` body cannot be read.
#[derive(Debug, PartialEq, Eq)]
enum FrameError {
    /// A method other than LZ4 (0x82) and none (0x02): ZSTD (0x90), LZ4HC is LZ4 on the wire.
    Method(u8),
    /// A frame whose sizes or data do not decode.
    Corrupt(&'static str),
}

/// Decodes ClickHouse's compressed frames in `data` (each: a 16-byte CityHash128 checksum, the
/// method byte, the frame's size with its 9-byte header and the decoded size, both u32 little
/// endian, then the data), as far as whole frames go and no further than `limit` decoded
/// bytes. Returns the decoded bytes and whether `data` ended exactly after its last frame. The
/// checksum is not verified: the body is forwarded as it came, and the server verifies it.
/// Written by hand: a frame is a 25-byte header around an LZ4 block, which `lz4_flex` decodes.
fn ch_frames(data: &[u8], limit: usize) -> Result<(Vec<u8>, bool), FrameError> {
    let mut out = Vec::new();
    let mut at = 0;
    while data.len() - at >= 25 {
        let h = &data[at + 16..at + 25];
        let size = u32::from_le_bytes([h[1], h[2], h[3], h[4]]) as usize;
        let plain = u32::from_le_bytes([h[5], h[6], h[7], h[8]]) as usize;
        if size < 9 {
            return Err(FrameError::Corrupt("a frame shorter than its header"));
        }
        if data.len() - at - 16 < size || out.len() + plain > limit {
            return Ok((out, false));
        }
        let payload = &data[at + 25..at + 16 + size];
        match h[0] {
            0x02 if payload.len() == plain => out.extend_from_slice(payload),
            0x02 => return Err(FrameError::Corrupt("an uncompressed frame whose sizes differ")),
            0x82 => {
                let start = out.len();
                out.resize(start + plain, 0);
                match lz4_flex::block::decompress_into(payload, &mut out[start..]) {
                    Ok(n) if n == plain => {}
                    _ => return Err(FrameError::Corrupt("an LZ4 frame that does not decode to its size")),
                }
            }
            m => return Err(FrameError::Method(m)),
        }
        at += 16 + size;
    }
    Ok((out, at == data.len()))
}

/// Reads `body` until it ends or passes `limit` bytes.
async fn read_head(body: &mut GBody, limit: usize) -> Result<(BytesMut, bool), BoxError> {
    let mut buf = BytesMut::new();
    while buf.len() <= limit {
        match body.frame().await {
            None => return Ok((buf, true)),
            Some(Err(e)) => return Err(e),
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    buf.extend_from_slice(&d);
                }
            }
        }
    }
    Ok((buf, false))
}

fn unreadable(e: impl std::fmt::Display) -> Refusal {
    Refusal::new(StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}"))
}

/// Reads the parameters and the body of a request.
pub async fn read(parts: &Parts, mut body: GBody) -> Result<ClientRequest, Refusal> {
    let params = parse_params(parts.uri.query());
    let url_query = params.iter().find(|(k, _)| k == "query").map(|(_, v)| v.clone());
    let enc = encoding(parts);
    if enc == Encoding::Unknown {
        return Ok(ClientRequest { sql: url_query, params, shape: BodyShape::Opaque, body: ClientBody::Opaque(body) });
    }
    let (head, ended) = read_head(&mut body, MAX_HELD_BODY).await.map_err(unreadable)?;
    let head = head.freeze();
    let (wire, whole) = match enc {
        Encoding::Plain => (head.clone(), ended),
        _ => {
            let (plain, complete) = decompress(enc, &head, MAX_HELD_BODY)
                .map_err(|e| unreadable(format!("{e} (Content-Encoding does not match the body)")))?;
            (Bytes::from(plain), ended && complete)
        }
    };
    // The statement's text: the body, or what its ClickHouse frames decode to.
    let text = if ch_compressed(&params) {
        match ch_frames(&wire, MAX_HELD_BODY) {
            Ok((plain, complete)) if complete || !whole => {
                if plain.is_empty() && !whole {
                    // Not even the first frame is in the head: nothing to read the statement from.
                    let rest = crate::body::Prefixed::wrap(head, body);
                    return Ok(ClientRequest {
                        sql: url_query,
                        params,
                        shape: BodyShape::Opaque,
                        body: ClientBody::Opaque(rest),
                    });
                }
                Bytes::from(plain)
            }
            Ok(_) => return Err(unreadable("a decompress=1 body that ends inside a frame")),
            Err(FrameError::Corrupt(why)) => return Err(unreadable(format!("decompress=1 and {why}"))),
            Err(FrameError::Method(_)) => {
                let rest = crate::body::Prefixed::wrap(head, body);
                return Ok(ClientRequest {
                    sql: url_query,
                    params,
                    shape: BodyShape::Opaque,
                    body: ClientBody::Opaque(rest),
                });
            }
        }
    } else {
        wire.clone()
    };
    let sql = join_query(url_query.as_deref().unwrap_or(""), &text);
    if whole {
        return Ok(ClientRequest { params, sql: Some(sql), shape: BodyShape::Held, body: ClientBody::Held(wire) });
    }
    Ok(ClientRequest {
        params,
        sql: Some(sql),
        shape: BodyShape::Streamed,
        body: ClientBody::Streamed { head, rest: body },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};
    use std::io::Write;

    fn parts(uri: &str, encoding: Option<&str>) -> Parts {
        let mut b = http::Request::post(uri);
        if let Some(e) = encoding {
            b = b.header("content-encoding", e);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn g<B>(b: B) -> GBody
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        b.map_err(|e| Box::new(e) as BoxError).boxed_unsync()
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[tokio::test]
    async fn small_bodies_are_held_and_joined_with_the_url_query() {
        let r = read(&parts("/?query=SELECT%201", None), g(Full::new(Bytes::from_static(b" + 1")))).await.unwrap();
        assert_eq!(r.shape, BodyShape::Held);
        assert_eq!(r.sql.as_deref(), Some("SELECT 1\n + 1"));
        let r = read(&parts("/?query=SELECT%201", None), g(Full::new(Bytes::new()))).await.unwrap();
        assert_eq!(r.sql.as_deref(), Some("SELECT 1\n"), "an empty body adds nothing but the newline");
        assert!(matches!(r.body, ClientBody::Held(b) if b.is_empty()));
    }

    #[tokio::test]
    async fn gzip_bodies_are_held_decompressed() {
        let r = read(&parts("/", Some("gzip")), g(Full::new(Bytes::from(gzip(b"SELECT 42"))))).await.unwrap();
        assert_eq!(r.shape, BodyShape::Held);
        assert_eq!(r.sql.as_deref(), Some("SELECT 42"));
        assert!(matches!(r.body, ClientBody::Held(b) if &b[..] == b"SELECT 42"));
        let e = read(&parts("/", Some("gzip")), g(Full::new(Bytes::from_static(b"SELECT 1")))).await.err().unwrap();
        assert!(e.message.contains("Content-Encoding"), "{e}");
    }

    #[tokio::test]
    async fn big_bodies_stream_whole_and_unchanged() {
        let mut data = b"INSERT INTO t FORMAT TSV\n".to_vec();
        while data.len() < 3 * MAX_HELD_BODY {
            data.extend_from_slice(b"12345\n");
        }
        let chunks: Vec<Result<http_body::Frame<Bytes>, std::convert::Infallible>> =
            data.chunks(100_000).map(|c| Ok(http_body::Frame::data(Bytes::copy_from_slice(c)))).collect();
        let body = StreamBody::new(tokio_stream_iter(chunks));
        let r = read(&parts("/", None), g(body)).await.unwrap();
        assert_eq!(r.shape, BodyShape::Streamed);
        assert!(r.sql.as_deref().unwrap().starts_with("INSERT INTO t FORMAT TSV\n12345"));
        let ClientBody::Streamed { head, rest } = r.body else { panic!("streamed") };
        let rest = rest.collect().await.unwrap().to_bytes();
        assert_eq!([&head[..], &rest[..]].concat(), data, "head + rest = what the client sent");
        // The same, gzip-compressed: classified from the decompressed head, forwarded compressed.
        let z = gzip(&data);
        let r = read(&parts("/", Some("gzip")), g(Full::new(Bytes::from(z.clone())))).await.unwrap();
        assert_eq!(r.shape, BodyShape::Streamed);
        assert!(r.sql.as_deref().unwrap().starts_with("INSERT INTO t FORMAT TSV\n"));
        let ClientBody::Streamed { head, rest } = r.body else { panic!("streamed") };
        let rest = rest.collect().await.unwrap().to_bytes();
        assert_eq!([&head[..], &rest[..]].concat(), z);
    }

    /// ClickHouse's compressed frames of `data`, in `chunk`-byte blocks (checksum not computed).
    fn frames(data: &[u8], chunk: usize, method: u8) -> Vec<u8> {
        let mut out = Vec::new();
        for part in data.chunks(chunk) {
            let payload = if method == 0x82 { lz4_flex::block::compress(part) } else { part.to_vec() };
            out.extend_from_slice(&[0u8; 16]);
            out.push(method);
            out.extend_from_slice(&(payload.len() as u32 + 9).to_le_bytes());
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(&payload);
        }
        out
    }

    #[tokio::test]
    async fn decompress_bodies_are_read_and_forwarded_as_they_came() {
        let sql = b"SELECT 1 SETTINGS max_memory_usage = 5";
        for (chunk, method) in [(4, 0x82), (1000, 0x82), (3, 0x02), (1000, 0x02)] {
            let z = frames(sql, chunk, method);
            let r = read(&parts("/?decompress=1", None), g(Full::new(Bytes::from(z.clone())))).await.unwrap();
            assert_eq!(r.shape, BodyShape::Held);
            assert_eq!(r.sql.as_deref().map(str::as_bytes), Some(&sql[..]), "{chunk} {method}");
            assert!(matches!(r.body, ClientBody::Held(b) if b == z), "forwarded compressed");
            // Under gzip too (the server decodes the Content-Encoding first).
            let r = read(&parts("/?decompress=1", Some("gzip")), g(Full::new(Bytes::from(gzip(&z))))).await.unwrap();
            assert_eq!(r.sql.as_deref().map(str::as_bytes), Some(&sql[..]));
            assert!(matches!(r.body, ClientBody::Held(b) if b == z));
        }
        let r =
            read(&parts("/?decompress=1&query=SELECT%201", None), g(Full::new(Bytes::from(frames(b"+1", 9, 0x82)))))
                .await
                .unwrap();
        assert_eq!(r.sql.as_deref(), Some("SELECT 1\n+1"), "joined with the query parameter");
        // ZSTD (0x90) cannot be read: opaque, passed through whole.
        let z = frames(sql, 1000, 0x02);
        let mut zstd = z.clone();
        zstd[16] = 0x90;
        let r = read(&parts("/?decompress=1&query=SELECT%201", None), g(Full::new(Bytes::from(zstd.clone()))))
            .await
            .unwrap();
        assert_eq!(r.shape, BodyShape::Opaque);
        let ClientBody::Opaque(b) = r.body else { panic!("opaque") };
        assert_eq!(b.collect().await.unwrap().to_bytes(), zstd);
        // A frame cut short, or lying about its size, is refused in one line.
        let e = read(&parts("/?decompress=1", None), g(Full::new(Bytes::from(z[..z.len() - 1].to_vec()))))
            .await
            .err()
            .unwrap();
        assert!(e.message.contains("ends inside a frame"), "{e}");
        let mut bad = frames(sql, 1000, 0x82);
        bad[21] ^= 0x40;
        let e = read(&parts("/?decompress=1", None), g(Full::new(Bytes::from(bad)))).await.err().unwrap();
        assert!(e.message.contains("does not decode"), "{e}");
        // decompress=0 is a plain body.
        let r = read(&parts("/?decompress=0", None), g(Full::new(Bytes::from_static(b"SELECT 2")))).await.unwrap();
        assert_eq!(r.sql.as_deref(), Some("SELECT 2"));
    }

    #[tokio::test]
    async fn unreadable_encodings_are_opaque() {
        let r = read(&parts("/", Some("br")), g(Full::new(Bytes::new()))).await.unwrap();
        assert_eq!((r.shape, r.sql), (BodyShape::Opaque, None));
    }

    /// A stream over a vector, without pulling in a stream crate.
    fn tokio_stream_iter<T: Unpin>(v: Vec<T>) -> impl futures_core::Stream<Item = T> + Unpin {
        struct It<T>(std::vec::IntoIter<T>);
        impl<T: Unpin> futures_core::Stream for It<T> {
            type Item = T;
            fn poll_next(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<T>> {
                std::task::Poll::Ready(self.0.next())
            }
        }
        It(v.into_iter())
    }
}
