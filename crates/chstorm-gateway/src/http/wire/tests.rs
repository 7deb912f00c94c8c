//! The own front against hyper's server: the same requests and answers through both, the bytes
//! on the wire compared (the `Date` value aside); and its endings.

use super::*;
use crate::cluster::h1::spelling::{BackendSpelling, SpelledNames};
use crate::cluster::upstream::full;
use crate::http::ids::Ids;
use http::{HeaderValue, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An answer for the comparison: made anew for each front.
#[derive(Clone, Debug)]
struct Canned {
    status: u16,
    headers: Vec<(&'static str, String)>,
    /// The body's frames; `None`: a body that does not know its length.
    frames: Vec<Vec<u8>>,
    known_length: bool,
    spelled: Option<Vec<&'static str>>,
    backend: bool,
    /// The gateway's own headers ([`crate::http::ids`]) and the connection headers
    /// ([`answer::ConnHeaders`]), and whether they are put in the map before the answer is
    /// written (as for hyper's server) or left to the writer.
    ids: Option<Ids>,
    conn: Option<answer::ConnHeaders>,
    materialized: bool,
}

impl Canned {
    fn make(&self) -> Response<GBody> {
        let mut r = if self.known_length {
            Response::new(full(self.frames.concat()))
        } else {
            let frames: Vec<Result<http_body::Frame<Bytes>, crate::cluster::upstream::BoxError>> =
                self.frames.iter().map(|f| Ok(http_body::Frame::data(Bytes::from(f.clone())))).collect();
            let stream = futures_util::stream::iter(frames);
            Response::new(http_body_util::StreamBody::new(stream).boxed_unsync())
        };
        *r.status_mut() = StatusCode::from_u16(self.status).unwrap();
        for (n, v) in &self.headers {
            r.headers_mut().append(*n, HeaderValue::from_str(v).unwrap());
        }
        if let Some(names) = &self.spelled {
            r.extensions_mut().insert(SpelledNames::of(names));
        }
        if self.backend {
            r.extensions_mut().insert(BackendSpelling);
        }
        r
    }

    /// [`Canned::make`], with its headers put in the map: as the HTTP front hands an answer
    /// to hyper's server (`conn::Listener::serve_hyper`, `conn::with_spelling`).
    fn make_inserted(&self) -> Response<GBody> {
        self.reply_set().into_inserted()
    }

    /// As the HTTP front gives it to the own front's writer.
    fn reply(&self) -> Reply {
        match self.materialized {
            true => self.make_inserted().into(),
            false => self.reply_set(),
        }
    }

    /// [`Canned::make`], with the headers for the writer to set.
    fn reply_set(&self) -> Reply {
        Reply { resp: self.make(), conn: self.conn.clone(), ids: self.ids.clone() }
    }
}

/// What a client reads after sending `request` to the own front, which answers with `canned`.
async fn through_own(request: &[u8], canned: &Canned) -> Vec<u8> {
    let (mut client, mut server) = tokio::io::duplex(1 << 20);
    let canned = canned.clone();
    let front = tokio::spawn(async move {
        serve(&mut server, Duration::from_secs(5), std::future::pending::<()>(), move |_req| {
            let r = canned.reply();
            async move { r }
        })
        .await;
    });
    client.write_all(request).await.unwrap();
    client.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut got))
        .await
        .expect("the front closes")
        .unwrap();
    front.abort();
    got
}

/// `text` with its `Date` value blanked.
fn undated(text: &[u8]) -> String {
    let t = String::from_utf8_lossy(text).into_owned();
    t.split("\r\n")
        .map(|l| if l.to_ascii_lowercase().starts_with("date: ") { "Date: -".to_string() } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\r\n")
}

const NAMES: &[&str] = &[
    "content-type",
    "x-clickhouse-query-id",
    "x-clickhouse-format",
    "x-clickhouse-summary",
    "x-clickhouse-progress",
    "x-chstorm-route",
    "x-chstorm-replica",
    "x-chstorm-threads",
    "connection",
    "keep-alive",
    "date",
    "content-length",
    "www-authenticate",
    "x-custom-thing",
];

fn generated(rng: &mut rand::rngs::StdRng) -> Canned {
    let statuses = [200, 200, 200, 400, 401, 404, 408, 411, 429, 500, 501, 503, 204, 304, 299];
    let status = statuses[rng.gen_range(0..statuses.len())];
    let frames: Vec<Vec<u8>> =
        (0..rng.gen_range(0..4)).map(|i| vec![b'a' + i as u8; [0, 1, 7, 300, 20_000][rng.gen_range(0..5)]]).collect();
    let known_length = rng.gen_bool(0.5);
    let mut headers = Vec::new();
    for _ in 0..rng.gen_range(0..7) {
        let name = NAMES[rng.gen_range(0..NAMES.len())];
        let value = match name {
            "connection" => ["Keep-Alive", "Close", "close", "keep-alive, close"][rng.gen_range(0..4)].to_string(),
            "content-length" if known_length => frames.concat().len().to_string(),
            "content-length" => continue,
            _ => format!("v{}", rng.gen_range(0..100)),
        };
        headers.push((name, value));
    }
    let spelled = rng.gen_bool(0.2).then(|| {
        let mut s: Vec<&'static str> = headers.iter().map(|(n, _)| *n).collect();
        s.iter_mut().for_each(|n| {
            if rng.gen_bool(0.5) {
                *n = Box::leak(n.to_ascii_uppercase().into_boxed_str());
            }
        });
        s
    });
    let backend = spelled.is_some();
    let ids = rng.gen_bool(0.5).then(|| Ids {
        replica: rng.gen_bool(0.8).then(|| HeaderValue::from_static("127.0.0.1:8123")),
        route: ["fanout", "shard", "session"][rng.gen_range(0..3)],
        query_id: ["q1", "", "a b\tc", "bad\u{1}id", "caf\u{e9}"][rng.gen_range(0..5)].to_string(),
        threads: rng.gen_bool(0.5).then(|| rng.gen_range(1..20)),
        stale: [Default::default(), crate::cluster::replication::Freshness::Stale(412)][rng.gen_range(0..2)],
        warning: rng.gen_bool(0.2).then_some("one replica only"),
    });
    let conn = rng.gen_bool(0.7).then(|| answer::ConnHeaders {
        client_closes: rng.gen_bool(0.3),
        keep_alive: rng.gen_bool(0.7).then(|| HeaderValue::from_static("timeout=10")),
    });
    Canned { status, headers, frames, known_length, spelled, backend, ids, conn, materialized: false }
}

#[tokio::test]
async fn answers_leave_as_hypers_server_writes_them() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for i in 0..400 {
        let canned = generated(&mut rng);
        let method = ["GET", "HEAD", "POST"][i % 3];
        let request = format!("{method} /?query=SELECT%201 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
        let own = through_own(request.as_bytes(), &canned).await;
        let theirs = through_hyper(request.as_bytes(), &canned).await;
        assert_eq!(undated(&own), undated(&theirs), "{canned:?} {method}");
        if canned.ids.is_some() || canned.conn.is_some() {
            // The headers set by the writer are those inserted into the map.
            let inserted = through_own(request.as_bytes(), &Canned { materialized: true, ..canned.clone() }).await;
            assert_eq!(undated(&own), undated(&inserted), "{canned:?} {method}");
        }
    }
}

/// hyper's answer to `request`, spelled as the HTTP front has hyper spell it
/// (`conn::with_spelling`: the replica's names, or ClickHouse's).
async fn through_hyper(request: &[u8], canned: &Canned) -> Vec<u8> {
    let (mut client, server) = tokio::io::duplex(1 << 20);
    let canned = canned.clone();
    let front = tokio::spawn(async move {
        let svc = hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| {
            let mut r = canned.make_inserted();
            async move {
                crate::http::conn::with_spelling(&mut r).await;
                Ok::<_, std::convert::Infallible>(r)
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .title_case_headers(true)
            .half_close(true)
            .serve_connection(TokioIo::new(server), svc)
            .await;
    });
    client.write_all(request).await.unwrap();
    client.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut got)).await.expect("hyper closes").unwrap();
    front.abort();
    got
}

#[tokio::test]
async fn kept_alive_requests_are_served_in_turn_and_the_rest_go_to_hyper_whole() {
    let (mut client, mut server) = tokio::io::duplex(1 << 16);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let front = tokio::spawn(async move {
        serve(&mut server, Duration::from_secs(5), std::future::pending::<()>(), move |req: Box<Request<FrontBody>>| {
            let log = log.clone();
            async move {
                let body = req.into_body().collect().await.unwrap().to_bytes();
                log.lock().unwrap().push(body.clone());
                Response::new(full(body))
            }
        })
        .await
    });
    client.write_all(b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /?q HTTP/1.1\r\n\r\n").await.unwrap();
    client.write_all(b"GET / HTTP/1.0\r\n\r\nmore").await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), front).await.unwrap().unwrap();
    let Ended::Handover(rest) = ended else { panic!("{ended:?}") };
    assert_eq!(&rest[..], b"GET / HTTP/1.0\r\n\r\nmore");
    assert_eq!(*seen.lock().unwrap(), [Bytes::from_static(b"abc"), Bytes::new()]);
    let mut got = vec![0u8; 256];
    let n = client.read(&mut got).await.unwrap();
    let text = undated(&got[..n]);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nDate: -\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 0\r\nDate: -\r\n\r\n"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_head_that_does_not_come_whole_in_time_ends_the_connection() {
    for (sent, partial) in [(&b""[..], false), (&b"GET / HTTP/1.1\r\nHo"[..], true)] {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        client.write_all(sent).await.unwrap();
        let started = tokio::time::Instant::now();
        let ended = serve(&mut server, Duration::from_secs(3), std::future::pending::<()>(), |_req| async {
            Response::new(full("x"))
        })
        .await;
        assert!(matches!(ended, Ended::TimedOut { partial: p } if p == partial), "{ended:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }
}

#[tokio::test]
async fn the_drain_closes_a_waiting_connection_and_a_closing_answer_closes_it_too() {
    let (_client, mut server) = tokio::io::duplex(1 << 16);
    let ended = serve(&mut server, Duration::from_secs(60), async {}, |_req| async { Response::new(full("x")) }).await;
    assert!(matches!(ended, Ended::Closed), "{ended:?}");
    let (mut client, mut server) = tokio::io::duplex(1 << 16);
    client.write_all(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n").await.unwrap();
    let ended = serve(&mut server, Duration::from_secs(60), std::future::pending::<()>(), |_req| async {
        let mut r = Response::new(full("x"));
        r.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("Close"));
        r
    })
    .await;
    assert!(matches!(ended, Ended::Closed), "{ended:?}");
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&got).matches("HTTP/1.1 200").count(), 1, "one answer, then the close");
}

#[tokio::test]
async fn a_body_that_fails_or_ends_short_of_its_length_closes_the_connection() {
    for frames in [vec![Ok(b"ab".to_vec())], vec![Ok(b"ab".to_vec()), Err(())]] {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let ended = serve(&mut server, Duration::from_secs(60), std::future::pending::<()>(), move |_req| {
            let frames: Vec<Result<http_body::Frame<Bytes>, crate::cluster::upstream::BoxError>> = frames
                .iter()
                .map(|f| match f {
                    Ok(b) => Ok(http_body::Frame::data(Bytes::from(b.clone()))),
                    Err(()) => Err("the backend left".into()),
                })
                .collect();
            let mut r =
                Response::new(http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync());
            r.headers_mut().insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("5"));
            async move { r }
        })
        .await;
        assert!(matches!(ended, Ended::Failed), "{ended:?}");
    }
}
