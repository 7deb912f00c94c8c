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
        [m, l, b] if m == "l4" || m == "http" => (m.clone(), l.clone(), b.clone()),
        _ => {
            eprintln!("usage: floor_relay l4|http LISTEN_ADDR BACKEND_ADDR (e.g. l4 127.0.0.1:9100 127.0.0.1:8123)");
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
        if mode == "l4" {
            l4(listener, backend).await
        } else {
            http(listener, backend).await
        }
    });
}

async fn l4(listener: TcpListener, backend: SocketAddr) {
    loop {
        let Ok((mut client, _)) = listener.accept().await else { continue };
        tokio::spawn(async move {
            let _ = client.set_nodelay(true);
            let Ok(mut upstream) = TcpStream::connect(backend).await else { return };
            let _ = upstream.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        });
    }
}

type Body = BoxBody<Bytes, hyper::Error>;

async fn http(listener: TcpListener, backend: SocketAddr) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new()).build(connector);
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        tokio::spawn(async move {
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
        });
    }
}
