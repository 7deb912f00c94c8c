//! Reading a client's request before it is planned: its URL parameters and its body.
//!
//! A body of at most [`MAX_HELD_BODY`] is read whole and *held*: it can be classified, routed,
//! rewritten, and sent again (retries, hedges). A gzip or deflate body (`Content-Encoding`) is
//! held decompressed. A bigger body (`INSERT ... FORMAT TSV` followed by its data, as
//! `cat data | curl --data-binary @-` sends it) is *streamed*: only its head is read, to classify
//! the statement, and the head and the rest go to the backend as they come, whatever their size.
//! A body in a format the gateway cannot read (`decompress=1`, ClickHouse's own compressed blocks,
//! or another `Content-Encoding`) is *opaque* and passed through unread.
//!
//! The statement is the `query` parameter joined with the body, as ClickHouse joins them
//! ([`crate::request::join_query`]).

use crate::plan::{BodyShape, Refusal};
use crate::request::{join_query, parse_params};
use crate::upstream::GBody;
use bytes::{Bytes, BytesMut};
use chstorm_proto::mem::{Charge, Mem, MemError};
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
    /// The room the held bytes take on the gateway's memory budget; kept while they live.
    pub charge: Charge,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Plain,
    Gzip,
    Deflate,
    Unknown,
}

fn encoding(parts: &Parts, params: &[(String, String)]) -> Encoding {
    if params.iter().any(|(k, v)| k == "decompress" && v != "0") {
        return Encoding::Unknown;
    }
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

/// Reads `body` until it ends or passes `limit` bytes, charging what it keeps to `charge`.
async fn read_head(body: &mut GBody, limit: usize, charge: &mut Charge) -> Result<(BytesMut, bool), Refusal> {
    let mut buf = BytesMut::new();
    while buf.len() <= limit {
        match body.frame().await {
            None => return Ok((buf, true)),
            Some(Err(e)) => return Err(unreadable(e)),
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    charge.set(buf.len() + d.len()).map_err(too_big)?;
                    buf.extend_from_slice(&d);
                }
            }
        }
    }
    Ok((buf, false))
}

fn too_big(e: MemError) -> Refusal {
    Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, format!("cannot hold the request body: {e}"))
}

fn unreadable(e: impl std::fmt::Display) -> Refusal {
    Refusal::new(StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}"))
}

/// [`read_within`] with no memory limit.
#[cfg(test)]
pub async fn read(parts: &Parts, body: GBody) -> Result<ClientRequest, Refusal> {
    read_within(parts, body, &Mem::unbounded()).await
}

/// Reads the parameters and the body of a request; what is held is charged to `mem` (413 when
/// it has no room).
pub async fn read_within(parts: &Parts, mut body: GBody, mem: &Mem) -> Result<ClientRequest, Refusal> {
    let mut charge = mem.charge();
    let params = parse_params(parts.uri.query());
    let url_query = params.iter().find(|(k, _)| k == "query").map(|(_, v)| v.clone());
    let enc = encoding(parts, &params);
    if enc == Encoding::Unknown {
        return Ok(ClientRequest {
            sql: url_query,
            params,
            shape: BodyShape::Opaque,
            body: ClientBody::Opaque(body),
            charge,
        });
    }
    let (head, ended) = read_head(&mut body, MAX_HELD_BODY, &mut charge).await?;
    let head = head.freeze();
    let (text, whole) = match enc {
        Encoding::Plain => (head.clone(), ended),
        _ => {
            charge.grow(MAX_HELD_BODY + 1).map_err(too_big)?;
            let (plain, complete) = decompress(enc, &head, MAX_HELD_BODY)
                .map_err(|e| unreadable(format!("{e} (Content-Encoding does not match the body)")))?;
            (Bytes::from(plain), ended && complete)
        }
    };
    let sql = join_query(url_query.as_deref().unwrap_or(""), &text);
    if whole {
        return Ok(ClientRequest {
            params,
            sql: Some(sql),
            shape: BodyShape::Held,
            body: ClientBody::Held(text),
            charge,
        });
    }
    Ok(ClientRequest {
        params,
        sql: Some(sql),
        shape: BodyShape::Streamed,
        body: ClientBody::Streamed { head, rest: body },
        charge,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::BoxError;
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
    async fn held_bodies_take_room_on_the_budget_and_give_it_back() {
        let budget = chstorm_proto::mem::Budget::new(1 << 20);
        let body = || g(Full::new(Bytes::from(vec![b' '; 600 << 10])));
        let first = read_within(&parts("/?query=SELECT%201", None), body(), &budget.conn(256 << 20)).await.unwrap();
        assert_eq!(first.shape, BodyShape::Held);
        assert!(budget.used() > 500 << 10, "{}", budget.used());
        // A second body of 600 KiB does not fit beside it: 413, one line.
        let e = read_within(&parts("/?query=SELECT%201", None), body(), &budget.conn(256 << 20)).await.err().unwrap();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.message.contains("limits.max_buffered_mib"), "{}", e.message);
        // A small one always does.
        let small = g(Full::new(Bytes::from_static(b" + 1")));
        assert!(read_within(&parts("/?query=SELECT%201", None), small, &budget.conn(256 << 20)).await.is_ok());
        drop(first);
        assert_eq!(budget.used(), 0);
        assert!(read_within(&parts("/?query=SELECT%201", None), body(), &budget.conn(256 << 20)).await.is_ok());
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

    #[tokio::test]
    async fn unreadable_encodings_are_opaque() {
        let r =
            read(&parts("/?decompress=1&query=INSERT%20INTO%20t%20FORMAT%20Native", None), g(Full::new(Bytes::new())))
                .await
                .unwrap();
        assert_eq!(r.shape, BodyShape::Opaque);
        assert_eq!(r.sql.as_deref(), Some("INSERT INTO t FORMAT Native"));
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
