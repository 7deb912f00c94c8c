//! Reading a client's request before it is planned: its URL parameters and its body.
//!
//! A body of at most [`MAX_HELD_BODY`] is read whole and *held*: it can be classified, routed,
//! rewritten, and sent again (retries, hedges). A body compressed as ClickHouse reads it
//! (`Content-Encoding`: gzip, deflate, and, as current releases read them, zstd, lz4 (LZ4
//! frames), br, xz, bz2 and snappy; `chooseCompressionMethod` in ClickHouse's
//! `src/IO/CompressionMethod.cpp`) is held decompressed, never past the same bound: a body that
//! inflates past it is streamed as it came, its head read to classify it. A bigger body (`INSERT ... FORMAT TSV` followed by its data, as
//! `cat data | curl --data-binary @-` sends it) is *streamed*: only its head is read, to classify
//! the statement, and the head and the rest go to the backend as they come, whatever their size.
//! A `decompress=1` body (ClickHouse's own compressed frames, as `clickhouse-compressor` writes
//! them) is decoded to read the statement, within the same bound, and forwarded as it came:
//! LZ4, ZSTD and uncompressed frames are read ([`ch_frames`]); one of another method, or
//! another `Content-Encoding`, is *opaque*: the plan refuses it, unless the statement in the
//! URL says the body is an INSERT's data in a data format.
//!
//! The statement is the `query` parameter joined with the body, as ClickHouse joins them
//! ([`crate::request::join_query`]).
//!
//! A `multipart/form-data` body of a user with rules is read as 18.16 reads it ([`read_form`],
//! parsed with `multer`): its plain fields become URL parameters after the URL's, its `query`
//! fields the statement, and it is forwarded rebuilt, so that the plan's rules see and decide
//! every setting.

use crate::cluster::upstream::GBody;
use crate::query::refusal::{Kind, Refusal};
use crate::query::request::BodyShape;
use crate::request::{join_query, parse_params};
use bytes::{Bytes, BytesMut};
use chstorm_proto::mem::{Charge, Mem, MemError};
use http::request::Parts;
use http_body_util::BodyExt;
use std::io::Read;

pub use crate::query::request::MAX_HELD_BODY;

/// The client's body, as read.
pub enum ClientBody {
    /// Read whole (decompressed).
    Held(Bytes),
    /// Its first bytes (as the client sent them, compressed or not) and the rest.
    Streamed { head: Bytes, rest: GBody },
    /// Passed through unread.
    Opaque(GBody),
}

/// True for a `multipart/form-data` body: 18.16 reads its plain fields as URL parameters
/// (applied after the URL's) and the `query` fields as the statement.
pub fn is_multipart(headers: &http::HeaderMap) -> bool {
    is_multipart_type(headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()))
}

/// [`is_multipart`], of the request's `Content-Type` (None: none, or not visible ASCII).
pub fn is_multipart_type(content_type: Option<&str>) -> bool {
    const MULTIPART: &str = "multipart/form-data";
    content_type
        .is_some_and(|v| v.trim_start().get(..MULTIPART.len()).is_some_and(|p| p.eq_ignore_ascii_case(MULTIPART)))
}

/// A request read far enough to be planned.
pub struct ClientRequest {
    pub params: Vec<(String, String)>,
    /// The statement (see [`crate::query::request::QueryRequest::sql`]).
    pub sql: Option<String>,
    pub shape: BodyShape,
    pub body: ClientBody,
    /// A multipart/form-data body read by [`read_form`]: its fields are in `params`.
    pub form_read: bool,
    /// The room the held bytes take on the gateway's memory budget; kept while they live.
    pub charge: Charge,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Plain,
    Gzip,
    Deflate,
    Zstd,
    Lz4,
    Brotli,
    Xz,
    Bzip2,
    Snappy,
    Unknown,
}

/// True when the body is in ClickHouse's compressed frames, as 18.16 reads `decompress`: its
/// first occurrence, true unless its value starts with `0` (verified on 18.16.1: `1`, `2`,
/// `true`, `false`, `no` and ` 1` decompress, `0`, `00` and `01` do not; an empty value is an
/// error there, Code 32, and is taken as compressed here).
fn ch_compressed(params: &[(String, String)]) -> bool {
    params.iter().find(|(k, _)| k == "decompress").is_some_and(|(_, v)| !v.starts_with('0'))
}

fn encoding(parts: &Parts) -> Encoding {
    match parts
        .headers
        .get(http::header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
    {
        None => Encoding::Plain,
        Some(e) if e.is_empty() || e == "identity" => Encoding::Plain,
        Some(e) if e == "gzip" || e == "x-gzip" => Encoding::Gzip,
        Some(e) if e == "deflate" => Encoding::Deflate,
        Some(e) if e == "zstd" || e == "zst" => Encoding::Zstd,
        Some(e) if e == "lz4" => Encoding::Lz4,
        Some(e) if e == "br" => Encoding::Brotli,
        Some(e) if e == "xz" => Encoding::Xz,
        Some(e) if e == "bz2" => Encoding::Bzip2,
        Some(e) if e == "snappy" => Encoding::Snappy,
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
        Encoding::Zstd => Box::new(zstd::stream::read::Decoder::new(data)?),
        Encoding::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(data)),
        Encoding::Brotli => Box::new(brotli_decompressor::Decompressor::new(data, 4096)),
        Encoding::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(data)),
        Encoding::Xz => return decompress_xz(data, limit),
        Encoding::Snappy => return decompress_snappy(data, limit),
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

/// A request whose body goes on unread (opaque): its `head`, then the rest.
fn unread(
    sql: Option<String>,
    params: Vec<(String, String)>,
    head: Bytes,
    body: GBody,
    charge: Charge,
) -> ClientRequest {
    let body = ClientBody::Opaque(crate::cluster::upstream::Prefixed::wrap(head, body));
    ClientRequest { sql, params, shape: BodyShape::Opaque, body, form_read: false, charge }
}

/// [`decompress`] of an xz stream: its output stops at `limit + 1` bytes.
fn decompress_xz(data: &[u8], limit: usize) -> Result<(Vec<u8>, bool), std::io::Error> {
    /// A writer that takes at most `max` bytes, then fails.
    struct Bounded(Vec<u8>, usize);
    impl std::io::Write for Bounded {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let n = b.len().min(self.1 - self.0.len());
            if n == 0 && !b.is_empty() {
                return Err(std::io::Error::other("past the bound"));
            }
            self.0.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new(), limit + 1);
    let res = lzma_rs::xz_decompress(&mut std::io::BufReader::new(data), &mut out);
    match res {
        Ok(()) => {
            let whole = out.0.len() <= limit;
            Ok((out.0, whole))
        }
        Err(_) if !out.0.is_empty() => Ok((out.0, false)),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

/// [`decompress`] of a snappy body (one raw block, as ClickHouse's `SnappyReadBuffer` reads it
/// whole): its decompressed length is read from its header first, so nothing past `limit` is
/// allocated.
fn decompress_snappy(data: &[u8], limit: usize) -> Result<(Vec<u8>, bool), std::io::Error> {
    let len = snap::raw::decompress_len(data).map_err(std::io::Error::other)?;
    if len > limit {
        return Ok((Vec::new(), false));
    }
    let out = snap::raw::Decoder::new().decompress_vec(data).map_err(std::io::Error::other)?;
    Ok((out, true))
}

/// Why a `decompress=1` body cannot be read.
#[derive(Debug, PartialEq, Eq)]
enum FrameError {
    /// A method other than LZ4 (0x82, LZ4HC too), ZSTD (0x90) and none (0x02): ClickHouse's
    /// Delta, DoubleDelta, Gorilla and T64 codecs are column codecs, not sent over HTTP.
    Method(u8),
    /// A frame whose sizes or data do not decode.
    Corrupt(&'static str),
}

/// Decodes ClickHouse's compressed frames in `data` (each: a 16-byte CityHash128 checksum, the
/// method byte, the frame's size with its 9-byte header and the decoded size, both u32 little
/// endian, then the data), as far as whole frames go and no further than `limit` decoded
/// bytes. Returns the decoded bytes and whether `data` ended exactly after its last frame. The
/// checksum is not verified: the body is forwarded as it came, and the server verifies it.
/// Written by hand: a frame is a 25-byte header around an LZ4 block, which `lz4_flex` decodes,
/// or a ZSTD frame, which `zstd` decodes into the frame's own decoded size, no more.
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
            0x90 => {
                let start = out.len();
                out.resize(start + plain, 0);
                match zstd::bulk::decompress_to_buffer(payload, &mut out[start..]) {
                    Ok(n) if n == plain => {}
                    _ => return Err(FrameError::Corrupt("a ZSTD frame that does not decode to its size")),
                }
            }
            m => return Err(FrameError::Method(m)),
        }
        at += 16 + size;
    }
    Ok((out, at == data.len()))
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
    Refusal::new(Kind::TooLarge, format!("cannot hold the request body: {e}"))
}

fn unreadable(e: impl std::fmt::Display) -> Refusal {
    Refusal::new(Kind::BadRequest, format!("cannot read the request body: {e}"))
}

/// [`read_within`] with no memory limit.
#[cfg(test)]
pub async fn read(parts: &Parts, body: GBody, forms: bool) -> Result<ClientRequest, Refusal> {
    read_within(parts, body, forms, &Mem::unbounded()).await
}

/// Reads the parameters and the body of a request; what is held is charged to `mem` (413 when
/// it has no room). With `forms`, a multipart/form-data body is read ([`read_form`]) or
/// refused; without, it is read as any other body.
pub async fn read_within(parts: &Parts, mut body: GBody, forms: bool, mem: &Mem) -> Result<ClientRequest, Refusal> {
    let mut charge = mem.charge();
    let params = parse_params(parts.uri.query());
    if forms && is_multipart(&parts.headers) {
        return crate::out_of_line::boxed(|| read_form(parts, body, params, charge)).await;
    }
    let url_query = params.iter().find(|(k, _)| k == "query").map(|(_, v)| v.clone());
    let enc = encoding(parts);
    if enc == Encoding::Unknown {
        return Ok(ClientRequest {
            sql: url_query,
            params,
            shape: BodyShape::Opaque,
            body: ClientBody::Opaque(body),
            form_read: false,
            charge,
        });
    }
    let (head, ended) = read_head(&mut body, MAX_HELD_BODY, &mut charge).await?;
    let head = head.freeze();
    // Snappy (one block) and xz are read whole or not at all: a longer body goes as it came.
    if !ended && matches!(enc, Encoding::Snappy | Encoding::Xz) {
        return Ok(unread(url_query, params, head, body, charge));
    }
    let (wire, whole) = match enc {
        Encoding::Plain => (head.clone(), ended),
        _ => {
            charge.grow(MAX_HELD_BODY + 1).map_err(too_big)?;
            let (plain, complete) = decompress(enc, &head, MAX_HELD_BODY)
                .map_err(|e| unreadable(format!("{e} (Content-Encoding does not match the body)")))?;
            (Bytes::from(plain), ended && complete)
        }
    };
    // The statement's text: the body, or what its ClickHouse frames decode to.
    let text = if ch_compressed(&params) {
        charge.grow(MAX_HELD_BODY + 1).map_err(too_big)?;
        let decoded = match ch_frames(&wire, MAX_HELD_BODY) {
            // Not even the first frame is in the head, or frames of a method the gateway does not
            // decode: nothing to read the statement from, so the body stays opaque.
            Ok((plain, _)) if plain.is_empty() && !whole => None,
            Err(FrameError::Method(_)) => None,
            Ok((plain, complete)) if complete || !whole => Some(Bytes::from(plain)),
            Ok(_) => return Err(unreadable("a decompress=1 body that ends inside a frame")),
            Err(FrameError::Corrupt(why)) => return Err(unreadable(format!("decompress=1 and {why}"))),
        };
        let Some(decoded) = decoded else {
            return Ok(unread(url_query, params, head, body, charge));
        };
        decoded
    } else {
        wire.clone()
    };
    let sql = join_query(url_query.as_deref().unwrap_or(""), &text);
    if whole {
        return Ok(ClientRequest {
            params,
            sql: Some(sql),
            shape: BodyShape::Held,
            body: ClientBody::Held(wire),
            form_read: false,
            charge,
        });
    }
    Ok(ClientRequest {
        params,
        sql: Some(sql),
        shape: BodyShape::Streamed,
        body: ClientBody::Streamed { head, rest: body },
        form_read: false,
        charge,
    })
}

fn form_refusal(why: impl std::fmt::Display) -> Refusal {
    Refusal::new(Kind::BadRequest, format!("cannot read the multipart/form-data body: {why}"))
}

/// One part of a multipart body as it is forwarded.
struct Part {
    name: String,
    file_name: Option<String>,
    content_type: Option<String>,
    data: Bytes,
}

/// Reads a multipart/form-data body as 18.16 reads it (verified with `curl -F` on 18.16.1): the
/// plain fields are URL parameters applied after the URL's (`readonly=0` in a field beats
/// `readonly=1` in the URL); every `query` value, the URL's first, then the fields', joined
/// with nothing between them, is the statement (`?query=SELECT%20` with the field `query=42`
/// answers 42); a part with a file name is an external table, whose `<name>_structure`,
/// `_types` and `_format` fields the server takes out of the parameters; text before the first
/// boundary is skipped; `query_id` and `session_id` fields are ignored. The body must be whole
/// within [`MAX_HELD_BODY`] and neither compressed nor `decompress=1` (18.16 reads a multipart
/// body as it comes). Returns the request with the fields in its parameters and the body
/// rebuilt (the same boundary): one `query` field with the statement, the external tables'
/// fields and their files. A field the gateway does not forward as a parameter (`query_id`,
/// `session_id`, `user`, `password`, `compress`, ...) is refused.
async fn read_form(
    parts: &Parts,
    mut body: GBody,
    mut params: Vec<(String, String)>,
    mut charge: Charge,
) -> Result<ClientRequest, Refusal> {
    if encoding(parts) != Encoding::Plain || ch_compressed(&params) {
        return Err(form_refusal(
            "it is compressed (Content-Encoding or decompress=1), which ClickHouse does not read",
        ));
    }
    let ct = parts.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let boundary = multer::parse_boundary(ct).map_err(form_refusal)?;
    let (raw, ended) = read_head(&mut body, MAX_HELD_BODY, &mut charge).await?;
    if !ended {
        return Err(Refusal::new(
            Kind::TooLarge,
            format!("a multipart/form-data body over {} MiB cannot be checked", MAX_HELD_BODY >> 20),
        ));
    }
    let raw = raw.freeze();
    let mut form = multer::Multipart::with_reader(&raw[..], boundary.clone());
    let mut all = Vec::new();
    while let Some(f) = form.next_field().await.map_err(form_refusal)? {
        let name = f.name().ok_or_else(|| form_refusal("a part without a name"))?.to_string();
        let file_name = f.file_name().map(str::to_string);
        let content_type = f.content_type().map(|m| m.to_string());
        let data = f.bytes().await.map_err(form_refusal)?;
        all.push(Part { name, file_name, content_type, data });
    }
    let tables: Vec<String> = all.iter().filter(|p| p.file_name.is_some()).map(|p| p.name.clone()).collect();
    let external = |k: &str| {
        ["_structure", "_types", "_format"]
            .iter()
            .any(|s| k.strip_suffix(s).is_some_and(|n| tables.iter().any(|t| t == n)))
    };
    let mut statement: String = params.iter().filter(|(k, _)| k == "query").map(|(_, v)| v.as_str()).collect();
    params.retain(|(k, _)| k != "query");
    // The external tables and their fields stay in the body, in the client's order (18.16 reads
    // a table's structure from the fields before its file).
    let mut out = vec![Part { name: "query".into(), file_name: None, content_type: None, data: Bytes::new() }];
    for p in all {
        if p.file_name.is_some() || external(&p.name) {
            out.push(p);
            continue;
        }
        let value =
            String::from_utf8(p.data.to_vec()).map_err(|_| form_refusal(format!("field '{}' is not UTF-8", p.name)))?;
        if p.name == "query" {
            statement.push_str(&value);
        } else if crate::request::is_setting(&p.name) || p.name == "database" || p.name == "default_format" {
            params.push((p.name, value));
        } else {
            return Err(form_refusal(format!("the gateway does not read a field '{}'; send it in the URL", p.name)));
        }
    }
    out[0].data = Bytes::from(statement.clone());
    let rebuilt = encode_form(&boundary, &out)?;
    Ok(ClientRequest {
        params,
        sql: Some(statement),
        shape: BodyShape::Held,
        body: ClientBody::Held(rebuilt),
        form_read: true,
        charge,
    })
}

/// Writes `parts` as a multipart/form-data body with `boundary`.
fn encode_form(boundary: &str, parts: &[Part]) -> Result<Bytes, Refusal> {
    let delimiter = format!("--{boundary}");
    let mut out = BytesMut::new();
    for p in parts {
        let names = [Some(p.name.as_str()), p.file_name.as_deref(), p.content_type.as_deref()];
        if names.iter().flatten().any(|n| n.contains(['"', '\r', '\n'])) {
            return Err(form_refusal("a part's name, file name or type holds a quote or a line break"));
        }
        if memchr_find(&p.data, delimiter.as_bytes()) {
            return Err(form_refusal("the statement holds the boundary"));
        }
        out.extend_from_slice(format!("{delimiter}\r\nContent-Disposition: form-data; name=\"{}\"", p.name).as_bytes());
        if let Some(f) = &p.file_name {
            out.extend_from_slice(format!("; filename=\"{f}\"").as_bytes());
        }
        if let Some(t) = &p.content_type {
            out.extend_from_slice(format!("\r\nContent-Type: {t}").as_bytes());
        }
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(&p.data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("{delimiter}--\r\n").as_bytes());
    Ok(out.freeze())
}

/// True when `needle` occurs in `hay`.
fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::upstream::BoxError;
    use http_body_util::{Full, StreamBody};
    use std::io::Write;

    /// [`read`] with multipart bodies read.
    async fn rd(p: &Parts, b: GBody) -> Result<ClientRequest, Refusal> {
        read(p, b, true).await
    }

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

    /// `data` compressed as a client sends it with `Content-Encoding: enc`.
    fn compress(enc: &str, data: &[u8]) -> Vec<u8> {
        match enc {
            "zstd" => zstd::encode_all(data, 1).unwrap(),
            "lz4" => {
                let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            "br" => {
                let mut out = Vec::new();
                let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
                w.write_all(data).unwrap();
                drop(w);
                out
            }
            "xz" => {
                let mut out = Vec::new();
                lzma_rs::xz_compress(&mut std::io::BufReader::new(data), &mut out).unwrap();
                out
            }
            "bz2" => {
                let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            "snappy" => snap::raw::Encoder::new().compress_vec(data).unwrap(),
            other => panic!("{other}"),
        }
    }

    #[tokio::test]
    async fn bodies_in_every_current_encoding_are_held_decompressed_within_the_bound() {
        for enc in ["zstd", "lz4", "br", "xz", "bz2", "snappy"] {
            let z = compress(enc, b"SELECT 42");
            let r = rd(&parts("/", Some(enc)), g(Full::new(Bytes::from(z)))).await.unwrap();
            assert_eq!((r.shape, r.sql.as_deref()), (BodyShape::Held, Some("SELECT 42")), "{enc}");
            // Not what it says it is: one line that says so.
            let e = rd(&parts("/", Some(enc)), g(Full::new(Bytes::from_static(b"SELECT 1")))).await.err();
            assert!(e.is_some_and(|e| e.message.contains("Content-Encoding")), "{enc}");
            // A bomb: 64 MiB of one byte inflates no further than the bound.
            let bomb = compress(enc, &vec![b' '; 64 << 20]);
            let r = rd(&parts("/?query=INSERT%20INTO%20t%20FORMAT%20TSV", Some(enc)), g(Full::new(Bytes::from(bomb))))
                .await
                .unwrap();
            assert_ne!(r.shape, BodyShape::Held, "{enc}: past the bound, not held");
        }
    }

    #[tokio::test]
    async fn held_bodies_take_room_on_the_budget_and_give_it_back() {
        let budget = chstorm_proto::mem::Budget::new(1 << 20);
        let body = || g(Full::new(Bytes::from(vec![b' '; 600 << 10])));
        let first =
            read_within(&parts("/?query=SELECT%201", None), body(), false, &budget.conn(256 << 20)).await.unwrap();
        assert_eq!(first.shape, BodyShape::Held);
        assert!(budget.used() > 500 << 10, "{}", budget.used());
        // A second body of 600 KiB does not fit beside it: 413, one line.
        let e = read_within(&parts("/?query=SELECT%201", None), body(), false, &budget.conn(256 << 20))
            .await
            .err()
            .unwrap();
        assert_eq!(e.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.message.contains("limits.max_buffered_mib"), "{}", e.message);
        // A small one always does.
        let small = g(Full::new(Bytes::from_static(b" + 1")));
        assert!(read_within(&parts("/?query=SELECT%201", None), small, false, &budget.conn(256 << 20)).await.is_ok());
        drop(first);
        assert_eq!(budget.used(), 0);
        assert!(read_within(&parts("/?query=SELECT%201", None), body(), false, &budget.conn(256 << 20)).await.is_ok());
    }

    #[tokio::test]
    async fn small_bodies_are_held_and_joined_with_the_url_query() {
        let r = rd(&parts("/?query=SELECT%201", None), g(Full::new(Bytes::from_static(b" + 1")))).await.unwrap();
        assert_eq!(r.shape, BodyShape::Held);
        assert_eq!(r.sql.as_deref(), Some("SELECT 1\n + 1"));
        let r = rd(&parts("/?query=SELECT%201", None), g(Full::new(Bytes::new()))).await.unwrap();
        assert_eq!(r.sql.as_deref(), Some("SELECT 1\n"), "an empty body adds nothing but the newline");
        assert!(matches!(r.body, ClientBody::Held(b) if b.is_empty()));
    }

    #[tokio::test]
    async fn gzip_bodies_are_held_decompressed() {
        let r = rd(&parts("/", Some("gzip")), g(Full::new(Bytes::from(gzip(b"SELECT 42"))))).await.unwrap();
        assert_eq!(r.shape, BodyShape::Held);
        assert_eq!(r.sql.as_deref(), Some("SELECT 42"));
        assert!(matches!(r.body, ClientBody::Held(b) if &b[..] == b"SELECT 42"));
        let e = rd(&parts("/", Some("gzip")), g(Full::new(Bytes::from_static(b"SELECT 1")))).await.err().unwrap();
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
        let r = rd(&parts("/", None), g(body)).await.unwrap();
        assert_eq!(r.shape, BodyShape::Streamed);
        assert!(r.sql.as_deref().unwrap().starts_with("INSERT INTO t FORMAT TSV\n12345"));
        let ClientBody::Streamed { head, rest } = r.body else { panic!("streamed") };
        let rest = rest.collect().await.unwrap().to_bytes();
        assert_eq!([&head[..], &rest[..]].concat(), data, "head + rest = what the client sent");
        // The same, gzip-compressed: classified from the decompressed head, forwarded compressed.
        let z = gzip(&data);
        let r = rd(&parts("/", Some("gzip")), g(Full::new(Bytes::from(z.clone())))).await.unwrap();
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
            let payload = match method {
                0x82 => lz4_flex::block::compress(part),
                0x90 => zstd::bulk::compress(part, 1).unwrap(),
                _ => part.to_vec(),
            };
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
        for (chunk, method) in [(4, 0x82), (1000, 0x82), (3, 0x02), (1000, 0x02), (5, 0x90), (1000, 0x90)] {
            let z = frames(sql, chunk, method);
            let r = rd(&parts("/?decompress=1", None), g(Full::new(Bytes::from(z.clone())))).await.unwrap();
            assert_eq!(r.shape, BodyShape::Held);
            assert_eq!(r.sql.as_deref().map(str::as_bytes), Some(&sql[..]), "{chunk} {method}");
            assert!(matches!(r.body, ClientBody::Held(b) if b == z), "forwarded compressed");
            // Under gzip too (the server decodes the Content-Encoding first).
            let r = rd(&parts("/?decompress=1", Some("gzip")), g(Full::new(Bytes::from(gzip(&z))))).await.unwrap();
            assert_eq!(r.sql.as_deref().map(str::as_bytes), Some(&sql[..]));
            assert!(matches!(r.body, ClientBody::Held(b) if b == z));
        }
        let r = rd(&parts("/?decompress=1&query=SELECT%201", None), g(Full::new(Bytes::from(frames(b"+1", 9, 0x82)))))
            .await
            .unwrap();
        assert_eq!(r.sql.as_deref(), Some("SELECT 1\n+1"), "joined with the query parameter");
        // A method the gateway does not decode (Delta, 0x91) is opaque, passed through whole.
        let z = frames(sql, 1000, 0x02);
        let mut delta = z.clone();
        delta[16] = 0x91;
        let r = rd(&parts("/?decompress=1&query=SELECT%201", None), g(Full::new(Bytes::from(delta.clone()))))
            .await
            .unwrap();
        assert_eq!(r.shape, BodyShape::Opaque);
        let ClientBody::Opaque(b) = r.body else { panic!("opaque") };
        assert_eq!(b.collect().await.unwrap().to_bytes(), delta);
        // A ZSTD frame whose decoded size lies is refused, never decoded past its size.
        let mut bad = frames(sql, 1000, 0x90);
        bad[21] = bad[21].wrapping_sub(1);
        let e = rd(&parts("/?decompress=1", None), g(Full::new(Bytes::from(bad)))).await.err().unwrap();
        assert!(e.message.contains("does not decode"), "{e}");
        // A frame cut short, or lying about its size, is refused in one line.
        let e = rd(&parts("/?decompress=1", None), g(Full::new(Bytes::from(z[..z.len() - 1].to_vec()))))
            .await
            .err()
            .unwrap();
        assert!(e.message.contains("ends inside a frame"), "{e}");
        let mut bad = frames(sql, 1000, 0x82);
        bad[21] ^= 0x40;
        let e = rd(&parts("/?decompress=1", None), g(Full::new(Bytes::from(bad)))).await.err().unwrap();
        assert!(e.message.contains("does not decode"), "{e}");
        // decompress=0 (or 01, or a later decompress=1) is a plain body, as 18.16 reads it.
        for q in ["decompress=0", "decompress=01", "decompress=00&decompress=1"] {
            let r = rd(&parts(&format!("/?{q}"), None), g(Full::new(Bytes::from_static(b"SELECT 2")))).await.unwrap();
            assert_eq!(r.sql.as_deref(), Some("SELECT 2"), "{q}");
        }
        // decompress=false is compressed (18.16 reads the first byte): a plain body does not decode.
        let e = rd(&parts("/?decompress=false", None), g(Full::new(Bytes::from_static(b"SELECT 2")))).await.err();
        assert!(e.is_some());
    }

    #[tokio::test]
    async fn unreadable_encodings_are_opaque() {
        for enc in ["compress", "x-unknown", "gzip, br"] {
            let r = rd(&parts("/", Some(enc)), g(Full::new(Bytes::new()))).await.unwrap();
            assert_eq!((r.shape, r.sql), (BodyShape::Opaque, None), "{enc}");
        }
    }

    fn form_parts(uri: &str, encoding: Option<&str>) -> Parts {
        let mut p = parts(uri, encoding);
        p.headers.insert("content-type", "multipart/form-data; boundary=XX".parse().unwrap());
        p
    }

    fn part(name: &str, file: Option<&str>, v: &str) -> String {
        let f = file.map_or(String::new(), |f| format!("; filename=\"{f}\""));
        format!("--XX\r\nContent-Disposition: form-data; name=\"{name}\"{f}\r\n\r\n{v}\r\n")
    }

    #[tokio::test]
    async fn multipart_fields_become_parameters_and_query_fields_the_statement() {
        let body = format!(
            "SELECT 1\r\n{}{}{}{}{}{}--XX--\r\n",
            part("readonly", None, "0"),
            part("query", None, "INSERT INTO t "),
            part("max_threads", None, "2"),
            part("query", None, "VALUES (1)"),
            part("ext", Some("e.tsv"), "1\n2\n"),
            part("ext_structure", None, "x UInt8"),
        );
        let r = rd(&form_parts("/?readonly=1&query=", None), g(Full::new(Bytes::from(body)))).await.unwrap();
        assert!(r.form_read);
        assert_eq!(r.sql.as_deref(), Some("INSERT INTO t VALUES (1)"), "the URL's query, then the fields', joined");
        let p: Vec<(&str, &str)> = r.params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(p, vec![("readonly", "1"), ("readonly", "0"), ("max_threads", "2")], "after the URL's");
        let ClientBody::Held(b) = r.body else { panic!("held") };
        let expect = format!(
            "{}{}{}--XX--\r\n",
            part("query", None, "INSERT INTO t VALUES (1)"),
            part("ext", Some("e.tsv"), "1\n2\n"),
            part("ext_structure", None, "x UInt8"),
        );
        assert_eq!(
            String::from_utf8_lossy(&b),
            expect,
            "one query field, then the external table's file and field in their order"
        );
        // Refused: fields the gateway does not take as parameters, compressed forms, a cut one.
        for (uri, enc, body) in [
            ("/", None, format!("{}--XX--\r\n", part("query_id", None, "x"))),
            ("/", None, format!("{}--XX--\r\n", part("session_id", None, "x"))),
            ("/", None, format!("{}--XX--\r\n", part("user", None, "x"))),
            ("/?decompress=1", None, format!("{}--XX--\r\n", part("query", None, "SELECT 1"))),
            ("/", Some("gzip"), String::new()),
            ("/?query=--XX", None, format!("{}--XX--\r\n", part("query", None, "SELECT 1"))),
            ("/", None, part("query", None, "SELECT 1")),
        ] {
            assert!(rd(&form_parts(uri, enc), g(Full::new(Bytes::from(body.clone())))).await.is_err(), "{uri} {body}");
        }
        // Without `forms`, a multipart body is read as any other.
        let r = read(&form_parts("/", None), g(Full::new(Bytes::from(part("query", None, "SELECT 1")))), false)
            .await
            .unwrap();
        assert!(!r.form_read && r.sql.unwrap().starts_with("--XX"));
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
