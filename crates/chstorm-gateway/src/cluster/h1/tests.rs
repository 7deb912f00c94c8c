//! The HTTP/1 client against scripted loopback servers: framing both ways, reuse, and every way
//! a connection ends.

use super::pool::Pool;
use super::*;
use crate::cluster::message::{full, BackendRequest, BoxError, GBody};
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A scripted server: each request (read up to its head's end and the body its
/// `content-length` or chunked framing says) gets the next answer; `close` closes the
/// connection after it.
struct Server {
    base: String,
    accepts: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
}

#[derive(Clone)]
struct Answer {
    bytes: &'static [u8],
    close: bool,
}

fn keep(bytes: &'static [u8]) -> Answer {
    Answer { bytes, close: false }
}

async fn server(script: Vec<Answer>) -> Server {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let (accepts, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
    let (a, r) = (accepts.clone(), requests.clone());
    let script = Arc::new(Mutex::new(script.into_iter()));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let (r, script) = (r.clone(), script.clone());
            tokio::spawn(async move {
                while let Some(req) = read_request(&mut s).await {
                    r.lock().unwrap().push(req);
                    let Some(ans) = script.lock().unwrap().next() else { return };
                    if s.write_all(ans.bytes).await.is_err() || ans.close {
                        return;
                    }
                }
            });
        }
    });
    Server { base, accepts, requests }
}

/// One request's bytes, or None at the client's close.
async fn read_request(s: &mut TcpStream) -> Option<String> {
    let mut got = Vec::new();
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_ascii_lowercase();
            let len = head.lines().find_map(|l| l.strip_prefix("content-length: ")).map_or(0, |n| n.parse().unwrap());
            let whole = if head.contains("transfer-encoding: chunked") {
                text.ends_with("0\r\n\r\n")
            } else {
                got.len() >= end + 4 + len
            };
            if whole {
                return Some(text);
            }
        }
        let mut b = [0u8; 4096];
        match s.read(&mut b).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&b[..n]),
        }
    }
}

fn pool(base: &str, idle: Duration) -> Arc<Pool> {
    Arc::new(Pool::new(base, idle, 8, Duration::from_secs(1)).unwrap())
}

fn post(body: &'static str) -> BackendRequest {
    BackendRequest::new(http::Method::POST, "/?query=x", full(body))
}

async fn text(resp: http::Response<GBody>) -> Result<String, BoxError> {
    Ok(String::from_utf8(resp.into_body().collect().await?.to_bytes().to_vec()).unwrap())
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n1\n";
const LONG: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_held_body_goes_with_its_length_and_the_connection_is_reused() {
    let s = server(vec![keep(OK), keep(OK), keep(OK)]).await;
    let p = pool(&s.base, LONG);
    for _ in 0..3 {
        let resp = send(p.clone(), post("SELECT 1")).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(text(resp).await.unwrap(), "1\n");
    }
    assert_eq!(s.accepts.load(Ordering::SeqCst), 1, "one connection for the three");
    assert_eq!(p.idle_count(), 1);
    let req = s.requests.lock().unwrap()[0].clone();
    let authority = s.base.strip_prefix("http://").unwrap();
    assert_eq!(req, format!("POST /?query=x HTTP/1.1\r\nhost: {authority}\r\ncontent-length: 8\r\n\r\nSELECT 1"));
}

#[tokio::test]
async fn the_shared_headers_go_in_their_order_then_the_gateway_s_authorization_and_an_empty_post_says_its_length() {
    let s = server(vec![keep(OK), keep(OK)]).await;
    let p = pool(&s.base, LONG);
    let mut shared = http::HeaderMap::new();
    shared.append("x-b", http::HeaderValue::from_static("1"));
    shared.append("accept-encoding", http::HeaderValue::from_static("gzip"));
    shared.append("x-b", http::HeaderValue::from_static("2"));
    let shared = Arc::new(shared);
    for body in ["", "SELECT 1"] {
        let mut req = post(body);
        (req.headers, req.auth, req.empty_post) =
            (shared.clone(), Some(http::HeaderValue::from_static("Basic Z3c6")), body.is_empty());
        assert_eq!(text(send(p.clone(), req).await.unwrap()).await.unwrap(), "1\n");
    }
    let authority = s.base.strip_prefix("http://").unwrap();
    let head = format!("POST /?query=x HTTP/1.1\r\nhost: {authority}\r\nx-b: 1\r\nx-b: 2\r\naccept-encoding: gzip\r\nauthorization: Basic Z3c6\r\n");
    let got = s.requests.lock().unwrap().clone();
    assert_eq!(got, [format!("{head}content-length: 0\r\n\r\n"), format!("{head}content-length: 8\r\n\r\nSELECT 1")]);
    assert_eq!(Arc::strong_count(&shared), 1, "the requests' share is given back");
}

#[tokio::test]
async fn a_target_that_would_end_the_request_line_is_refused_before_anything_is_written() {
    let s = server(vec![keep(OK)]).await;
    let p = pool(&s.base, LONG);
    for target in ["/?query=1 HTTP/1.1\r\nx: y", "/a b", "/\n", "/\u{e9}", "/\t", "/\0"] {
        let req = BackendRequest::new(http::Method::POST, target, full("q"));
        let e = send(p.clone(), req).await.unwrap_err();
        assert!(e.message.contains("not all visible ASCII"), "{target:?}: {e}");
    }
    assert!(s.requests.lock().unwrap().is_empty(), "nothing reached the server");
    assert_eq!(text(send(p.clone(), post("SELECT 1")).await.unwrap()).await.unwrap(), "1\n");
}

#[tokio::test]
async fn a_chunked_answer_streams_and_ends_with_its_trailers() {
    let chunked =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n1\n\r\n3;ext=1\r\nab\n\r\n0\r\nX-T: 1\r\n\r\n";
    let s = server(vec![keep(chunked), keep(OK)]).await;
    let p = pool(&s.base, LONG);
    let resp = send(p.clone(), post("q")).await.unwrap();
    assert_eq!(text(resp).await.unwrap(), "1\nab\n");
    assert_eq!(p.idle_count(), 1, "whole: back in the pool");
    assert_eq!(text(send(p.clone(), post("q")).await.unwrap()).await.unwrap(), "1\n");
    assert_eq!(s.accepts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn answers_that_end_their_connection_are_not_reused() {
    for ans in [
        b"HTTP/1.1 200 OK\r\n\r\nuntil the close" as &[u8],
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n1\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n1\n",
    ] {
        let s = server(vec![Answer { bytes: ans, close: true }, keep(OK)]).await;
        let p = pool(&s.base, LONG);
        let first = text(send(p.clone(), post("q")).await.unwrap()).await.unwrap();
        assert!(first == "until the close" || first == "1\n", "{first:?}");
        assert_eq!(p.idle_count(), 0, "{}", String::from_utf8_lossy(ans));
        assert_eq!(text(send(p.clone(), post("q")).await.unwrap()).await.unwrap(), "1\n");
        assert_eq!(s.accepts.load(Ordering::SeqCst), 2);
    }
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_not_handed_out() {
    // The server closes after its answer, though the answer says nothing of it.
    let s = server(vec![Answer { bytes: OK, close: true }, keep(OK)]).await;
    let p = pool(&s.base, LONG);
    assert_eq!(text(send(p.clone(), post("q")).await.unwrap()).await.unwrap(), "1\n");
    p.idle_readable().await; // the FIN has reached the reactor
    assert_eq!(text(send(p.clone(), post("q")).await.unwrap()).await.unwrap(), "1\n");
    assert_eq!(s.accepts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_idle_connection_is_closed_at_its_idle_timeout() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let p = pool(&base, Duration::from_millis(200));
    let t0 = std::time::Instant::now(); // before the connection goes idle
    let exchange = tokio::spawn(send(p.clone(), post("q")));
    let (mut srv, _) = l.accept().await.unwrap();
    read_request(&mut srv).await.unwrap();
    srv.write_all(OK).await.unwrap();
    text(exchange.await.unwrap().unwrap()).await.unwrap();
    assert_eq!(p.idle_count(), 1);
    let n = tokio::time::timeout(Duration::from_secs(5), srv.read(&mut [0u8; 8])).await.unwrap().unwrap();
    assert_eq!(n, 0, "a normal close");
    assert!(t0.elapsed() >= Duration::from_millis(200), "closed at its timeout, not before: {:?}", t0.elapsed());
    assert_eq!(p.idle_count(), 0);
}

/// A body whose frames come from `rx`.
fn streamed(rx: tokio::sync::mpsc::Receiver<Bytes>) -> GBody {
    struct S(tokio::sync::mpsc::Receiver<Bytes>);
    impl http_body::Body for S {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
        }
    }
    S(rx).boxed_unsync()
}

#[tokio::test]
async fn a_streamed_body_goes_chunked_as_it_comes() {
    let s = server(vec![keep(OK)]).await;
    let p = pool(&s.base, LONG);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let req = BackendRequest::new(http::Method::POST, "/", streamed(rx));
    let exchange = tokio::spawn(send(p.clone(), req));
    tx.send(Bytes::from_static(b"INSERT ")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    tx.send(Bytes::from_static(b"1\n")).await.unwrap();
    drop(tx);
    assert_eq!(text(exchange.await.unwrap().unwrap()).await.unwrap(), "1\n");
    let req = s.requests.lock().unwrap()[0].clone();
    assert!(req.ends_with("transfer-encoding: chunked\r\n\r\n7\r\nINSERT \r\n2\r\n1\n\r\n0\r\n\r\n"), "{req:?}");
    assert_eq!(p.idle_count(), 1);
}

#[tokio::test]
async fn an_answer_before_the_body_s_end_ends_the_sending() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let p = pool(&base, LONG);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(Bytes::from_static(b"INSERT ")).await.unwrap();
    let req = BackendRequest::new(http::Method::POST, "/", streamed(rx));
    let exchange = tokio::spawn(send(p.clone(), req));
    let (mut srv, _) = l.accept().await.unwrap();
    let mut b = [0u8; 1024];
    let _ = srv.read(&mut b).await.unwrap();
    srv.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 8\r\n\r\nCode: 62").await.unwrap();
    let resp =
        tokio::time::timeout(Duration::from_secs(5), exchange).await.expect("not stuck on the body").unwrap().unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(text(resp).await.unwrap(), "Code: 62");
    assert_eq!(p.idle_count(), 0, "its request was not whole: the connection is not reused");
    drop(tx);
}

#[tokio::test]
async fn an_exchange_dropped_mid_request_resets_its_connection() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let p = pool(&base, LONG);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(Bytes::from_static(b"INSERT half")).await.unwrap();
    let req = BackendRequest::new(http::Method::POST, "/", streamed(rx));
    let exchange = tokio::spawn(send(p.clone(), req));
    let (mut srv, _) = l.accept().await.unwrap();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("INSERT half") {
        let mut b = [0u8; 1024];
        let n = srv.read(&mut b).await.unwrap();
        got.extend_from_slice(&b[..n]);
    }
    exchange.abort();
    let e = tokio::time::timeout(Duration::from_secs(5), srv.read(&mut [0u8; 8])).await.unwrap();
    assert_eq!(e.unwrap_err().kind(), std::io::ErrorKind::ConnectionReset, "a reset, never a FIN that ends the body");
    drop(tx);
}

#[tokio::test]
async fn a_reset_pool_takes_back_no_connection() {
    let s = server(vec![keep(OK), keep(OK)]).await;
    let p = pool(&s.base, LONG);
    text(send(p.clone(), post("q")).await.unwrap()).await.unwrap();
    let busy = send(p.clone(), post("q")).await.unwrap();
    assert_eq!(p.idle_count(), 0, "the idle one is in use");
    p.reset();
    text(busy).await.unwrap();
    assert_eq!(p.idle_count(), 0, "made before the reset: closed, not pooled");
}

#[tokio::test]
async fn interim_heads_are_skipped_and_a_head_request_has_no_body() {
    let s = server(vec![
        keep(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n1\n"),
        keep(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"),
        keep(OK),
    ])
    .await;
    let p = pool(&s.base, LONG);
    assert_eq!(text(send(p.clone(), post("q")).await.unwrap()).await.unwrap(), "1\n");
    let head = BackendRequest::new(http::Method::HEAD, "/", crate::cluster::message::empty());
    let resp = send(p.clone(), head).await.unwrap();
    assert_eq!(resp.headers()["content-length"], "9");
    assert_eq!(text(resp).await.unwrap(), "");
    assert_eq!(text(send(p.clone(), post("q")).await.unwrap()).await.unwrap(), "1\n");
    assert_eq!(s.accepts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn bad_answers_fail_in_one_line() {
    let big: &'static [u8] =
        Box::leak(format!("HTTP/1.1 200 OK\r\nX: {}\r\n", "a".repeat(1100 << 10)).into_bytes().into_boxed_slice());
    // More headers than any map may hold, within the head's size.
    let many: &'static [u8] =
        Box::leak(format!("HTTP/1.1 200 OK\r\n{}\r\n", "A: b\r\n".repeat(20_000)).into_bytes().into_boxed_slice());
    for (ans, want) in [
        (b"SSH-2.0-OpenSSH\r\n\r\n" as &[u8], "a malformed answer head"),
        (big, "an answer head over 1024 KiB"),
        (many, "an answer head with more than 16384 headers"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "two different Content-Length headers"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n1\n", "the connection closed before the answer's end"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "a bad chunk size \"zz\""),
        (b"", "the connection closed before the answer head"),
    ] {
        let s = server(vec![Answer { bytes: ans, close: true }]).await;
        let p = pool(&s.base, LONG);
        let e = match send(p.clone(), post("q")).await {
            Err(e) => e.message,
            Ok(resp) => text(resp).await.unwrap_err().to_string(),
        };
        assert!(e.starts_with(want), "{e:?} for {:?}", String::from_utf8_lossy(&ans[..ans.len().min(40)]));
        assert!(!e.contains('\n'));
        assert_eq!(p.idle_count(), 0);
    }
}

#[tokio::test]
async fn a_refused_connect_is_a_connect_error() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    let e = send(pool(&base, LONG), post("q")).await.unwrap_err();
    assert!(e.connect, "the query certainly did not run");
    assert!(e.message.starts_with("connect to 127.0.0.1:"), "{}", e.message);
}

#[tokio::test]
async fn a_repeated_clickhouse_header_keeps_its_replica_s_spelling() {
    let s = server(vec![
        keep(b"HTTP/1.1 200 OK\r\nX-ClickHouse-Progress: 1\r\nX-ClickHouse-Progress: 2\r\nContent-Length: 0\r\n\r\n"),
        keep(b"HTTP/1.1 200 OK\r\nX-ClickHouse-Progress: 1\r\nContent-Length: 0\r\n\r\n"),
    ])
    .await;
    let p = pool(&s.base, LONG);
    let twice = send(p.clone(), post("q")).await.unwrap();
    assert!(twice.extensions().get::<spelling::BackendSpelling>().is_some());
    let once = send(p.clone(), post("q")).await.unwrap();
    assert!(once.extensions().get::<spelling::BackendSpelling>().is_none(), "the front's own spelling is the same");
}

#[tokio::test]
async fn a_request_whose_connect_stalls_takes_a_connection_that_comes_back() {
    // A server whose listen backlog is full: a new connect's SYN is dropped and waits for its
    // retransmit, as under a burst of new client connections.
    let (l, addr, p) = backlog_of_one();
    let a = tokio::spawn(send(p.clone(), post("a")));
    let (mut first, _) = l.accept().await.unwrap();
    assert!(read_request(&mut first).await.unwrap().ends_with("\r\n\r\na"));
    let _fill: Vec<TcpStream> = futures_fill(addr).await;
    let b = tokio::spawn(send(p.clone(), post("b")));
    tokio::time::sleep(Duration::from_millis(50)).await; // b is connecting, and waits in line
    first.write_all(OK).await.unwrap();
    assert_eq!(text(a.await.unwrap().unwrap()).await.unwrap(), "1\n");
    // a's connection came back and went to b: b's request arrives on it.
    let req = tokio::time::timeout(Duration::from_secs(10), read_request(&mut first))
        .await
        .expect("b came on a's connection");
    assert!(req.unwrap().ends_with("\r\n\r\nb"));
    first.write_all(OK).await.unwrap();
    assert_eq!(text(b.await.unwrap().unwrap()).await.unwrap(), "1\n");
}

#[tokio::test]
async fn a_connect_that_loses_the_race_is_given_up() {
    // As above: b's connect is stalled (its SYN dropped) when a's connection comes back to it.
    let (l, addr, p) = backlog_of_one();
    let a = tokio::spawn(send(p.clone(), post("a")));
    let (mut first, _) = l.accept().await.unwrap();
    read_request(&mut first).await.unwrap();
    let fill = futures_fill(addr).await;
    assert!(!fill.is_empty(), "the accept queue is full");
    let b = tokio::spawn(send(p.clone(), post("b")));
    tokio::time::sleep(Duration::from_millis(50)).await;
    first.write_all(OK).await.unwrap();
    text(a.await.unwrap().unwrap()).await.unwrap();
    read_request(&mut first).await.unwrap();
    first.write_all(OK).await.unwrap();
    text(b.await.unwrap().unwrap()).await.unwrap();
    // The queue drains; a connect still going on would be accepted at its SYN's retransmit (1 s).
    for _ in 0..fill.len() {
        l.accept().await.unwrap();
    }
    let late = tokio::time::timeout(Duration::from_millis(2500), l.accept()).await;
    assert!(late.is_err(), "b's connect went on after b had a's connection");
    assert_eq!(p.idle_count(), 1, "only a's connection is kept");
}

/// A listener with a backlog of one, its address, and a pool to it (30 s connect timeout).
fn backlog_of_one() -> (tokio::net::TcpListener, std::net::SocketAddr, Arc<Pool>) {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let l = sock.listen(1).unwrap();
    let addr = l.local_addr().unwrap();
    let p = Arc::new(Pool::new(&format!("http://{addr}"), LONG, 8, Duration::from_secs(30)).unwrap());
    (l, addr, p)
}

/// Connections that fill `addr`'s accept queue (nothing accepts them).
async fn futures_fill(addr: std::net::SocketAddr) -> Vec<TcpStream> {
    let mut v = Vec::new();
    for _ in 0..2 {
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            v.push(s);
        }
    }
    v
}

#[test]
fn the_framing_and_hop_by_hop_names_are_told_apart_in_any_case() {
    use super::answer::{framed, Framed};
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut flip = |name: &str| -> String {
        name.chars()
            .map(|c| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                if seed & 1 == 1 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect()
    };
    for _ in 0..50 {
        for name in crate::request::HOP_BY_HOP.iter().chain(&["content-length"]) {
            let want = match *name {
                "content-length" => Framed::Length,
                "transfer-encoding" => Framed::Coding,
                "connection" => Framed::Connection,
                _ => Framed::OtherHop,
            };
            let spelled = flip(name);
            assert_eq!(framed(&spelled), Some(want), "{spelled}");
        }
        for other in ["content-type", "x-connection", "connectio", "keep-alive2", "t", "tee", "upgrades", "date", ""] {
            let spelled = flip(other);
            assert_eq!(framed(&spelled), None, "{spelled}");
        }
    }
}

#[tokio::test]
async fn hop_by_hop_headers_in_any_spelling_frame_the_answer_and_are_not_passed_on() {
    let answers: [&'static [u8]; 3] = [
        b"HTTP/1.1 200 OK\r\nCONNECTION: Keep-Alive\r\nkeep-alive: timeout=3\r\nTE: x\r\nX-A: 1\r\n\
          transfer-encoding: gzip, CHUNKED\r\n\r\n2\r\n1\n\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-length: 2\r\nConnection: CLOSE\r\nUpgrade: x\r\nProxy-Connection: y\r\n\r\n1\n",
        b"HTTP/1.1 200 OK\r\nConnection: a\x01b\r\nContent-Length: 2\r\n\r\n1\n",
    ];
    let s = server(vec![keep(answers[0]), Answer { bytes: answers[1], close: true }]).await;
    let p = pool(&s.base, LONG);
    let resp = send(p.clone(), post("q")).await.unwrap();
    let names: Vec<_> = resp.headers().keys().map(|k| k.as_str().to_string()).collect();
    assert_eq!(names, ["x-a"], "only the end-to-end header");
    assert_eq!(text(resp).await.unwrap(), "1\n", "chunked, read by its last coding");
    assert_eq!(p.idle_count(), 1, "kept alive");
    let resp = send(p.clone(), post("q")).await.unwrap();
    let names: Vec<_> = resp.headers().keys().map(|k| k.as_str().to_string()).collect();
    assert_eq!(names, ["content-length"], "the length stays, for the front to frame by");
    assert_eq!(text(resp).await.unwrap(), "1\n");
    assert_eq!(p.idle_count(), 0, "`CLOSE` in any case closes");
    // A control byte in a hop-by-hop value is refused by the parser, as in any other value.
    let s = server(vec![Answer { bytes: answers[2], close: true }]).await;
    let e = send(pool(&s.base, LONG), post("q")).await.unwrap_err();
    assert!(e.message.starts_with("a malformed answer head"), "{}", e.message);
}
