//! The floor under the gateway's CPU per query (`scripts/bench_gateway_cpu.py`).
//!
//! Two relays with nothing of the gateway in them, measured under the same `wrk` as the gateway
//! so that its CPU per query can be read against what any proxy on this machine must spend:
//!
//! - `l4`: accept, connect one backend connection per client connection, copy bytes both ways
//!   (`tokio::io::copy_bidirectional`). No parsing: the least a proxy can do.
//! - `http`: a hyper HTTP/1 server whose every request is sent as-is through a hyper-util pooled
//!   client and whose answer is streamed back. The least an HTTP proxy that can route by request
//!   does: one parse each way, one pool.
//! - `h1`: the same work without hyper: each request and answer framed with `httparse` (a
//!   `Content-Length` or chunked body, its bytes passed on as they came), the backend exchange
//!   inside the client connection's own task (no connection task, no channel), one write each
//!   way for a small exchange, idle backend connections in one shared pool. What an HTTP/1 path
//!   of the gateway's own could cost. It holds each answer whole (fine for `SELECT 1`, not a
//!   proxy); a pooled connection the server closed while idle gets the request once more on a
//!   new connection.
//! - `hfront`: hyper's server in front of `h1`'s backend exchange: which half of the hyper
//!   floor's cost is its server, and which its client.
//!
//! Both run on one current-thread runtime, as the gateway's `workers: 1` does.
//!
//! ```sh
//! cargo run --release -p chstorm-gateway --example floor_relay -- l4 127.0.0.1:9100 127.0.0.1:8123
//! ```
//!
//! Written here rather than taken from a crate: the point is to measure tokio and hyper alone,
//! with the same versions and runtime the gateway uses.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response, Uri};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, listen, backend) = match args.as_slice() {
        [m, l, b] if ["l4", "http", "h1", "hfront"].contains(&m.as_str()) => (m.clone(), l.clone(), b.clone()),
        _ => {
            eprintln!(
                "usage: floor_relay l4|http|h1|hfront LISTEN_ADDR BACKEND_ADDR (e.g. l4 127.0.0.1:9100 127.0.0.1:8123)"
            );
            std::process::exit(2);
        }
    };
    let listen: SocketAddr = listen.parse().unwrap_or_else(|e| {
        eprintln!("floor_relay: LISTEN_ADDR {listen:?}: {e}; write it as IP:PORT");
        std::process::exit(2)
    });
    let backend: SocketAddr = backend.parse().unwrap_or_else(|e| {
        eprintln!("floor_relay: BACKEND_ADDR {backend:?}: {e}; write it as IP:PORT");
        std::process::exit(2)
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind(listen).await.unwrap_or_else(|e| {
            eprintln!("floor_relay: cannot listen on {listen}: {e}");
            std::process::exit(1)
        });
        eprintln!("floor_relay {mode} listening on {listen}, backend {backend}");
        match mode.as_str() {
            "l4" => l4(listener, backend).await,
            "h1" => h1(listener, backend).await,
            "hfront" => hfront(listener, backend).await,
            _ => http(listener, backend).await,
        }
    });
}

/// Accepts connections forever, each (with TCP_NODELAY) served by `serve` in a task of its own.
async fn accept_each<F, Fut>(listener: TcpListener, serve: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve(stream));
    }
}

async fn l4(listener: TcpListener, backend: SocketAddr) {
    accept_each(listener, move |mut client| async move {
        let Ok(mut upstream) = TcpStream::connect(backend).await else { return };
        let _ = upstream.set_nodelay(true);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    })
    .await
}

type Body = BoxBody<Bytes, hyper::Error>;

async fn http(listener: TcpListener, backend: SocketAddr) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new()).build(connector);
    accept_each(listener, move |stream| {
        let client = client.clone();
        async move {
            let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                let client = client.clone();
                async move {
                    let path = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
                    *req.uri_mut() = Uri::try_from(format!("http://{backend}{path}")).expect("a valid URI");
                    match client.request(req).await {
                        Ok(resp) => Ok::<Response<Body>, hyper::Error>(resp.map(|b| b.boxed())),
                        Err(_) => {
                            let empty = http_body_util::Empty::new().map_err(|never| match never {}).boxed();
                            Ok(Response::builder().status(502).body(empty).expect("a valid response"))
                        }
                    }
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        }
    })
    .await
}

/// Idle backend connections of the `h1` relay.
type Pool = std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>;

async fn h1(listener: TcpListener, backend: SocketAddr) {
    let pool = Pool::default();
    accept_each(listener, move |client| {
        let pool = pool.clone();
        async move {
            if let Err(e) = h1_conn(client, backend, &pool).await {
                eprintln!("floor_relay h1: {e}");
            }
        }
    })
    .await
}

/// Relays one client connection's requests, one at a time, each over a pooled backend connection.
async fn h1_conn(mut client: TcpStream, backend: SocketAddr, pool: &Pool) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut req = bytes::BytesMut::with_capacity(16 << 10);
    let mut ans = bytes::BytesMut::with_capacity(16 << 10);
    loop {
        let Some(len) = read_framed(&mut client, &mut req, request_len).await? else { return Ok(()) };
        let (up, alen) = exchange(&req[..len], backend, pool, &mut ans).await?;
        let _ = req.split_to(len);
        client.write_all(&ans[..alen]).await?;
        let _ = ans.split_to(alen);
        pool.lock().unwrap_or_else(|e| e.into_inner()).push(up);
    }
}

async fn hfront(listener: TcpListener, backend: SocketAddr) {
    let pool = Pool::default();
    accept_each(listener, move |stream| {
        let pool = pool.clone();
        async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let pool = pool.clone();
                async move {
                    let resp = match hfront_exchange(req, backend, &pool).await {
                        Ok(r) => r,
                        Err(_) => Response::builder().status(502).body(Bytes::new()).expect("a valid response"),
                    };
                    Ok::<Response<Body>, hyper::Error>(resp.map(full_body))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        }
    })
    .await
}

fn full_body(b: Bytes) -> Body {
    http_body_util::Full::new(b).map_err(|never| match never {}).boxed()
}

/// One request of `hfront`: written out as HTTP/1.1 bytes, exchanged, its answer parsed back
/// (a chunked body joined) into a response for hyper's server.
async fn hfront_exchange(req: Request<Incoming>, backend: SocketAddr, pool: &Pool) -> std::io::Result<Response<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(bad)?.to_bytes();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = format!("{} {path} HTTP/1.1\r\n", parts.method).into_bytes();
    for (k, v) in &parts.headers {
        if k != http::header::CONTENT_LENGTH && k != http::header::TRANSFER_ENCODING {
            out.extend_from_slice(k.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(&body);
    let mut ans = bytes::BytesMut::with_capacity(16 << 10);
    let (up, alen) = exchange(&out, backend, pool, &mut ans).await?;
    pool.lock().unwrap_or_else(|e| e.into_inner()).push(up);
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head) = r.parse(&ans[..alen]).map_err(bad)? else { return Err(bad("a cut head")) };
    let mut resp = Response::builder().status(r.code.unwrap_or(502));
    let mut chunked = false;
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        } else if !h.name.eq_ignore_ascii_case("content-length") && !h.name.eq_ignore_ascii_case("connection") {
            resp = resp.header(h.name, h.value);
        }
    }
    let raw = &ans[head..alen];
    let body = if chunked { dechunk(raw)? } else { Bytes::copy_from_slice(raw) };
    resp.body(body).map_err(bad)
}

/// The data of a whole chunked body.
fn dechunk(mut raw: &[u8]) -> std::io::Result<Bytes> {
    let mut out = Vec::with_capacity(raw.len());
    loop {
        let Ok(httparse::Status::Complete((at, size))) = httparse::parse_chunk_size(raw) else {
            return Err(bad("a bad chunk"));
        };
        if size == 0 {
            return Ok(out.into());
        }
        let end = at + size as usize;
        out.extend_from_slice(raw.get(at..end).ok_or_else(|| bad("a cut chunk"))?);
        raw = raw.get(end + 2..).ok_or_else(|| bad("a cut chunk"))?;
    }
}

/// Sends one request over a pooled backend connection (a new one when none is idle) and reads its
/// whole answer into `ans`: the connection, and the answer's length.
async fn exchange(
    req: &[u8],
    backend: SocketAddr,
    pool: &Pool,
    ans: &mut bytes::BytesMut,
) -> std::io::Result<(TcpStream, usize)> {
    use tokio::io::AsyncWriteExt;
    // A pooled connection the server closed while idle answers nothing: the request goes once
    // more on a new connection, as hyper's pool does.
    let mut pooled = pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
    loop {
        let was_pooled = pooled.is_some();
        let mut up = match pooled.take() {
            Some(c) => c,
            None => {
                let c = TcpStream::connect(backend).await?;
                c.set_nodelay(true)?;
                c
            }
        };
        let answer = match up.write_all(req).await {
            Ok(()) => read_framed(&mut up, ans, answer_len).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(Some(alen)) => return Ok((up, alen)),
            _ if was_pooled && ans.is_empty() => continue,
            Ok(None) => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the backend closed")),
            Err(e) => return Err(e),
        }
    }
}

/// Reads into `buf` until it holds one whole message as `len_of` frames it; its length, or
/// None when the peer closed first.
async fn read_framed(
    io: &mut TcpStream,
    buf: &mut bytes::BytesMut,
    len_of: fn(&[u8]) -> std::io::Result<Option<usize>>,
) -> std::io::Result<Option<usize>> {
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(n) = len_of(buf)?.filter(|n| buf.len() >= *n) {
            return Ok(Some(n));
        }
        if io.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

fn bad(what: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

fn content_length(headers: &[httparse::Header]) -> std::io::Result<Option<usize>> {
    let Some(h) = headers.iter().find(|h| h.name.eq_ignore_ascii_case("content-length")) else { return Ok(None) };
    std::str::from_utf8(h.value)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| bad("a bad Content-Length"))
}

/// A request's whole length (head and `Content-Length` body), once its head is in `buf`.
fn request_len(buf: &[u8]) -> std::io::Result<Option<usize>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Request::new(&mut headers);
    match r.parse(buf).map_err(bad)? {
        httparse::Status::Partial => Ok(None),
        httparse::Status::Complete(head) => Ok(Some(head + content_length(r.headers)?.unwrap_or(0))),
    }
}

/// An answer's whole length (head and a `Content-Length` or chunked body), once it can be told.
fn answer_len(buf: &[u8]) -> std::io::Result<Option<usize>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let head = match r.parse(buf).map_err(bad)? {
        httparse::Status::Partial => return Ok(None),
        httparse::Status::Complete(head) => head,
    };
    if let Some(len) = content_length(r.headers)? {
        return Ok(Some(head + len));
    }
    // Chunked: size lines and their chunks, up to the last chunk and the empty line after it.
    let mut at = head;
    loop {
        let (size_len, size) = match httparse::parse_chunk_size(&buf[at..]).map_err(|_| bad("a bad chunk size"))? {
            httparse::Status::Partial => return Ok(None),
            httparse::Status::Complete(c) => c,
        };
        at += size_len;
        if size == 0 {
            return Ok((buf.len() >= at + 2).then_some(at + 2));
        }
        at += size as usize + 2;
        if at > buf.len() {
            return Ok(None);
        }
    }
}
