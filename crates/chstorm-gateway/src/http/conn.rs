//! One client connection: HTTP/1 with the client timeouts, and the requests on it sent where
//! ClickHouse would send them ([`super::endpoints`]); a query goes to [`super::service`].
//!
//! The connection is served by the gateway's own HTTP/1 server ([`super::wire`]) until a request
//! comes that it leaves to hyper's (HTTP/1.0, a chunked or announced body, a body not yet whole,
//! a malformed head); hyper's then serves the connection to its end, from that request's first
//! byte. Both write the same bytes, and keep the same limits:
//!
//! * `limits.client_header_timeout`: the time a connection may wait for a whole request head
//!   (hyper's header read timeout, with tokio's timer, once hyper has it). It runs from the
//!   moment the connection waits for a head, so it also closes kept-alive connections that stay
//!   idle that long; a TLS handshake gets the same time. The connection is closed without an
//!   answer, as ClickHouse closes a connection on its receive timeout.
//! * `limits.client_body_idle_timeout`: every query's body is a [`ClientBody`] with that idle
//!   timeout; when it passes, the request's whole future (admission permits, backend request, KILL
//!   guard) is dropped and the client gets a 408 and a closed connection.
//! * `limits.client_write_timeout`: a write to the client that waits this long (the client
//!   stopped reading; its socket buffers are full) fails, which ends the connection and drops
//!   the answer's body: its KILL guard cancels the query on the replica and its admission permits
//!   are released ([`Counted`]).
//!
//! Answers go out as 18.16 sends them: header names spelled as ClickHouse spells them,
//! `Connection: Keep-Alive` / `Keep-Alive: timeout=N` or `Connection: Close`, and 18.16's 411
//! for a POST without a length ([`as_clickhouse_sends_it`], [`length_required`]). Requests that
//! HTTP/1.1 forbids and 18.16 takes (a NUL in a header value, a folded line, two lengths) get
//! hyper's bare 400. A client's FIN after a whole request (hyper's `half_close(true)`) ends a read
//! and lets any other statement run to its end and be answered ([`super::client_fin`]). See
//! `docs/GATEWAY.md`, "HTTP details".
//!
//! `chstorm_gateway_client_timeouts_total{phase}` counts them: `header` (part of a request head
//! came, not all of it), `idle` (nothing came: a kept-alive or fresh connection left unused),
//! `tls` (no TLS handshake in time), `body`, `write` (the client stopped reading). To tell `header`
//! from `idle` once hyper serves, the connection counts the bytes it reads ([`Counted`]) and
//! notes the count when each answer has gone out.

use super::client_body::{ClientBody, FrontBody, IdleBody};
use super::client_fin::{ClientFin, Watch};
use super::endpoints::{endpoint, not_found_text, replicas_status, verbose, Endpoint};
use super::ids::Served;
use super::respond::reply;
use super::service::{listing_access, refused, with_www_authenticate, AuthenticatedAs, Listing};
use super::wire::answer::ConnHeaders;
use super::wire::{Ended, Reply, Rewind};
use crate::cluster::h1::spelling::{case_map, clickhouse_header, BackendSpelling, SpelledNames, CLICKHOUSE_NAMES};
use crate::cluster::upstream::{full, GBody};
use crate::log::log;
use crate::metrics::{Metrics, PhaseLabel};
use crate::out_of_line::boxed;
use crate::query::exit::{Exit, REJECTED};
use crate::state::State;
use arc_swap::ArcSwap;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// ClickHouse's HTTP interface; `/metrics` too when `metrics_here`.
    Main { metrics_here: bool },
    /// `metrics_listen`: `GET /metrics` only.
    MetricsOnly,
}

/// What the connections of one listener share.
#[derive(Clone)]
pub struct Listener {
    pub state: Arc<ArcSwap<State>>,
    pub metrics: Arc<Metrics>,
    pub role: Role,
    /// The gateway's graceful stop: counts this listener's connections, and tells them to close.
    pub drain: Arc<crate::runtime::drain::Drain>,
}

impl Listener {
    fn timed_out(&self, phase: &'static str) {
        self.metrics.client_timeouts.get_or_create(&PhaseLabel { phase }).inc();
    }

    /// Serves one accepted TCP connection (TLS first when `tls` is given) until it closes.
    pub async fn serve_tcp(self, tcp: tokio::net::TcpStream, peer: SocketAddr, tls: Option<tokio_rustls::TlsAcceptor>) {
        let _ = tcp.set_nodelay(true);
        let header_timeout = self.state.load().config.limits.client_header_timeout.0;
        match tls {
            // A new connection costs only its socket until its first bytes come: hyper's
            // connection (its state and its read and write buffers) is made, boxed, only then.
            // Served at once, 10,000 idle connections would take about 160 MB, instead of 34 MB.
            // Same timeout and metric as hyper's own for a connection that never sends.
            None => {
                // (A peek, not `readable()`: tokio counts a new socket as readable until a read
                // says otherwise.)
                let mut one = [0u8; 1];
                let first_bytes = tokio::time::timeout(header_timeout, tcp.peek(&mut one));
                tokio::select! {
                    r = first_bytes => match r {
                        Ok(Ok(n)) if n > 0 => {
                            // Watched once it has sent something: an idle socket costs one descriptor.
                            let fin = super::client_fin::watch(&tcp);
                            boxed(move || self.serve(tcp, peer, header_timeout, fin)).await
                        }
                        Ok(_) => {} // closed before sending anything, or an error
                        Err(_) => self.timed_out("idle"),
                    },
                    _ = self.drain.forced() => {}
                }
            }
            Some(a) => match boxed(|| tokio::time::timeout(header_timeout, a.accept(tcp))).await {
                Ok(Ok(stream)) => {
                    let fin = super::client_fin::watch(stream.get_ref().0);
                    boxed(move || self.serve(stream, peer, header_timeout, fin)).await
                }
                Ok(Err(_)) => {}
                Err(_) => self.timed_out("tls"),
            },
        }
    }

    async fn serve<IO>(
        self,
        io: IO,
        peer: SocketAddr,
        header_timeout: std::time::Duration,
        fin: Option<(ClientFin, Watch)>,
    ) where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let reads = Arc::new(Reads::default());
        // The watch lives as long as the connection, and its descriptor closes with it.
        let (fin, _watch) = match fin {
            Some((f, w)) => (f, Some(w)),
            None => (ClientFin::default(), None),
        };
        let keep_alive = keep_alive_value(header_timeout);
        let write_timeout = self.state.load().config.limits.client_write_timeout.0;
        let mut io = Counted { inner: io, reads: reads.clone(), write_timeout, stall: None };
        let _open = self.drain.conn();
        let (fin, keep_alive) = (&fin, &keep_alive);
        let ended = super::wire::serve(&mut io, header_timeout, self.drain.forced(), |req| {
            self.answer(req, peer, fin, keep_alive)
        })
        .await;
        // On a header timeout: whether part of a head had come (`header`) or none (`idle`).
        let timed_out = match ended {
            Ended::Closed | Ended::Failed => None,
            Ended::TimedOut { partial } => Some(partial),
            Ended::Handover(prefix) => {
                // hyper reads the head again: its bytes count as part of one.
                reads
                    .at_last_answer
                    .store(reads.total.load(Ordering::Acquire) - prefix.len() as u64, Ordering::Release);
                let io = Rewind::new(prefix, &mut io);
                let timed_out = boxed(|| self.serve_hyper(io, peer, header_timeout, fin, keep_alive, &reads)).await;
                timed_out.then(|| reads.partial())
            }
        };
        if reads.write_stalled.load(Ordering::Acquire) {
            self.timed_out("write");
            log(
                "warn",
                "client stopped reading its answer; connection closed, its query cancelled",
                serde_json::json!({"peer": peer.to_string(), "timeout_ms": write_timeout.as_millis() as u64}),
            );
        } else if let Some(partial) = timed_out {
            if partial {
                self.timed_out("header");
                log(
                    "warn",
                    "client too slow sending its request head; connection closed",
                    serde_json::json!({"peer": peer.to_string(), "timeout_ms": header_timeout.as_millis() as u64}),
                );
            } else {
                self.timed_out("idle");
            }
        }
    }

    /// Serves the rest of a connection with hyper's server: whether it ended on its header
    /// timeout.
    async fn serve_hyper<IO>(
        &self,
        io: IO,
        peer: SocketAddr,
        header_timeout: std::time::Duration,
        fin: &ClientFin,
        keep_alive: &HeaderValue,
        reads: &Arc<Reads>,
    ) -> bool
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let (this, fin, keep_alive, marks) = (self.clone(), fin.clone(), keep_alive.clone(), reads.clone());
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let (this, fin, keep_alive, marks) = (this.clone(), fin.clone(), keep_alive.clone(), marks.clone());
            async move {
                let reply = this.answer(Box::new(req.map(FrontBody::Hyper)), peer, &fin, &keep_alive).await;
                let mut resp = reply.into_inserted();
                with_spelling(&mut resp).await;
                // Note the bytes read once this answer has gone out (its body dropped).
                let (parts, body) = resp.into_parts();
                Ok::<_, std::convert::Infallible>(Response::from_parts(
                    parts,
                    super::body::Guarded::wrap(body, AnswerSent(marks)),
                ))
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            // An answer's names are spelled by the case map in its extensions, whatever
            // `preserve_header_case` says; that flag would only record each request's spelling,
            // which nothing reads (a backend request is made anew, with lowercase names).
            .title_case_headers(true)
            // A FIN after a whole request is watched by `super::client_fin`, not taken for a
            // client that left.
            .half_close(true);
        let conn = builder.serve_connection(TokioIo::new(io), svc);
        tokio::pin!(conn);
        let served = tokio::select! {
            r = conn.as_mut() => r,
            _ = self.drain.forced() => {
                // The gateway is stopping: an idle connection closes now, a busy one after its answer.
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        served.is_err_and(|e| e.is_timeout())
    }

    /// The answer to one request, with its connection headers as 18.16 sends them (set as the
    /// answer is written).
    async fn answer(
        &self,
        req: Box<Request<FrontBody>>,
        peer: SocketAddr,
        fin: &ClientFin,
        keep_alive: &HeaderValue,
    ) -> Reply {
        let (closing, version) = (wants_close(&req), req.version());
        let Served { mut resp, ids } = self.respond(req, peer, fin).await;
        if self.drain.is_draining() {
            // Stopping: the client reconnects for its next query (to the new gateway).
            resp.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        let conn = as_clickhouse_sends_it(&mut resp, closing, version, keep_alive);
        Reply { resp, conn: Some(conn), ids }
    }

    async fn respond(&self, req: Box<Request<FrontBody>>, peer: SocketAddr, fin: &ClientFin) -> Served {
        let state = self.state.load_full();
        let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let get = req.method() == Method::GET || req.method() == Method::HEAD;
        let accept = || req.headers().get(http::header::ACCEPT).and_then(|v| v.to_str().ok());
        if self.role == Role::MetricsOnly {
            if get && req.uri().path() == "/metrics" {
                return self.metrics_answer(&state, accept()).into();
            }
            return reply(
                StatusCode::NOT_FOUND,
                format!("chstorm gateway: no handler for {target} here; this listener (metrics_listen) serves GET /metrics only"),
            )
            .into();
        }
        let metrics_here = self.role == (Role::Main { metrics_here: true });
        let resp = match endpoint(req.method(), target, metrics_here) {
            Endpoint::Root => {
                let mut r = Response::new(full("Ok.\n"));
                r.headers_mut()
                    .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=UTF-8"));
                r
            }
            Endpoint::Ping if self.drain.is_draining() => {
                // A load balancer takes this instance out; queries still work until it stops.
                reply(StatusCode::SERVICE_UNAVAILABLE, "chstorm gateway: stopping (draining connections)")
            }
            Endpoint::Ping => Response::new(full("Ok.\n")),
            Endpoint::ReplicasStatus => {
                let urls = matches!(listing_access(&state, &req, peer), Listing::Allowed);
                let balancers = state.clusters.values().map(|c| &*c.balancer);
                let (status, text) = replicas_status(balancers, verbose(target), urls);
                let mut r = Response::new(full(text));
                *r.status_mut() = status;
                r
            }
            Endpoint::Metrics => match listing_access(&state, &req, peer) {
                Listing::Allowed => self.metrics_answer(&state, accept()),
                Listing::Anonymous => not_found(target),
                Listing::Refused(refusal, label) => {
                    refused(&Exit::new(&state.metrics, &label), &refusal, super::respond::wording(&state, None))
                }
            },
            Endpoint::NotFound => not_found(target),
            Endpoint::NotImplemented => {
                let mut r = reply(
                    StatusCode::NOT_IMPLEMENTED,
                    format!(
                        "chstorm gateway: {} {target}: ClickHouse's HTTP interface takes GET, HEAD and POST, or any method with the query in the URL",
                        req.method()
                    ),
                );
                r.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                r
            }
            Endpoint::Query if length_required(&req) => {
                let mut r = reply(
                    StatusCode::LENGTH_REQUIRED,
                    "Code: 381, e.displayText() = DB::Exception: There is neither Transfer-Encoding header nor Content-Length header, e.what() = DB::Exception",
                );
                // 18.16 refuses it before its query handling, which is what sets `Keep-Alive`.
                r.extensions_mut().insert(NoKeepAliveHeader);
                if req.version() == http::Version::HTTP_10 {
                    // 18.16 ends an HTTP/1.0 answer to a query (no chunks there) by closing.
                    r.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                }
                r
            }
            Endpoint::Query => {
                let http10 = req.version() == http::Version::HTTP_10;
                let Served { resp, ids } = self.query(req, peer, state, fin).await;
                let mut r = with_www_authenticate(resp);
                if http10 {
                    // 18.16 ends an HTTP/1.0 query answer (no chunks there) by closing.
                    r.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                }
                return Served { resp: r, ids };
            }
        };
        resp.into()
    }

    fn metrics_answer(&self, state: &State, accept: Option<&str>) -> Response<GBody> {
        self.metrics.in_flight.set(state.global.in_flight() as i64);
        self.metrics.queued.set(state.global.queued() as i64);
        let (text, content_type) = self.metrics.render_for(accept);
        let mut r = Response::new(full(text));
        r.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    }

    /// A query through [`super::service`], given up (408) when its body stalls.
    async fn query(
        &self,
        req: Box<Request<FrontBody>>,
        peer: SocketAddr,
        state: Arc<State>,
        fin: &ClientFin,
    ) -> Served {
        let idle = state.config.limits.client_body_idle_timeout.0;
        let (parts, body) = (*req).into_parts();
        let whole = matches!(body, FrontBody::Whole(_));
        let (body, watch) = IdleBody::new(body, idle);
        let body = body.with_min_rate(state.config.limits.client_body_min_rate);
        let req: Box<Request<ClientBody>> = Box::new(Request::from_parts(parts, body));
        let who = AuthenticatedAs::default();
        if whole {
            // A body that came whole with its head never waits for its client: nothing to watch.
            return super::service::serve(state.clone(), req, peer, &who, Some(fin)).await;
        }
        let started = std::time::Instant::now();
        let resp = tokio::select! {
            biased;
            why = watch.expired() => {
                self.timed_out("body");
                let user = who.label();
                Exit { metrics: &state.metrics, user: &user, started }.record(408, REJECTED);
                log(
                    "warn",
                    "client stopped sending the request body, or sent it too slowly; request abandoned",
                    serde_json::json!({"peer": peer.to_string(), "user": user, "error": why}),
                );
                let mut r =
                    reply(StatusCode::REQUEST_TIMEOUT, format!("chstorm gateway: {why}; the request was abandoned"));
                r.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                r.into()
            }
            r = super::service::serve(state.clone(), req, peer, &who, Some(fin)) => r,
        };
        drop(watch);
        resp
    }
}

/// 18.16's `411 Length Required`: a POST whose body has neither a `Content-Length` nor a
/// `Transfer-Encoding` of exactly `chunked` (Poco compares the whole value, so `identity,
/// chunked` is not chunked to it). Checked before authentication, as the server does.
fn length_required<B>(req: &Request<B>) -> bool {
    let h = req.headers();
    let chunked = h.get(http::header::TRANSFER_ENCODING).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"));
    req.method() == Method::POST && !chunked && !h.contains_key(http::header::CONTENT_LENGTH)
}

/// Whether the client asked to close the connection after this answer: `Connection: close`, or
/// HTTP/1.0 without `Connection: keep-alive` (hyper closes it then).
fn wants_close<B>(req: &Request<B>) -> bool {
    let tokens = || {
        req.headers()
            .get_all(http::header::CONNECTION)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(<[u8]>::trim_ascii)
    };
    tokens().any(|t| t.eq_ignore_ascii_case(b"close"))
        || (req.version() == http::Version::HTTP_10 && !tokens().any(|t| t.eq_ignore_ascii_case(b"keep-alive")))
}

/// The answer's connection headers and header names as 18.16 sends them: `Connection: Close`
/// when the connection closes after it, else `Connection: Keep-Alive`; `Keep-Alive: timeout=N`
/// unless the client asked to close (N: `limits.client_header_timeout` in whole seconds, the
/// gateway's own idle timeout); the request's HTTP version; names in title case (hyper's
/// `title_case_headers`) except those spelled otherwise, `X-ClickHouse-...`, which keep the
/// replica's spelling (its header case map, kept by the upstream client's
/// `preserve_header_case`) or take ClickHouse's from [`spelling`]. The version is set here; the
/// connection headers are set as the answer is written ([`ConnHeaders`]).
fn as_clickhouse_sends_it(
    resp: &mut Response<GBody>,
    client_closes: bool,
    version: http::Version,
    keep_alive: &HeaderValue,
) -> ConnHeaders {
    // An HTTP/1.0 answer: hyper then adds no `keep-alive` token of its own.
    *resp.version_mut() = version;
    let no_keep_alive = client_closes || resp.extensions().get::<NoKeepAliveHeader>().is_some();
    ConnHeaders { client_closes, keep_alive: (!no_keep_alive).then(|| keep_alive.clone()) }
}

/// For hyper's server: the answer's spelling as hyper's header case map (`super::wire` spells
/// names itself). The replica's, when the HTTP/1 client kept its names; hyper's client's own
/// map is in place already; else ClickHouse's spelling of its own names.
pub(crate) async fn with_spelling(resp: &mut Response<GBody>) {
    if let Some(SpelledNames(names)) = resp.extensions().get::<SpelledNames>().cloned() {
        if let Ok(map) = case_map(&names).await {
            return resp.extensions_mut().extend(map);
        }
    } else if resp.extensions().get::<BackendSpelling>().is_some() {
        return;
    }
    let names = clickhouse_names_in(resp.headers());
    if names != 0 {
        if let Some(names) = spelling(names).await {
            if resp.extensions().is_empty() {
                // The usual case (the hold's marker already taken off): the map taken whole,
                // where `extend` would move its entry into the answer's emptied map.
                *resp.extensions_mut() = names.clone();
            } else {
                resp.extensions_mut().extend(names.clone());
            }
        }
    }
}

/// The `Keep-Alive` header's value, `timeout=N`: the gateway's idle timeout (`idle`) in whole
/// seconds, at least 1.
fn keep_alive_value(idle: std::time::Duration) -> HeaderValue {
    HeaderValue::from_str(&format!("timeout={}", idle.as_secs().max(1))).expect("ascii")
}

/// Marks an answer that 18.16 sends without a `Keep-Alive` header (its 411).
#[derive(Clone, Copy)]
struct NoKeepAliveHeader;

/// ClickHouse's spelling of those of its own headers an answer carries (`names`: bits of
/// [`CLICKHOUSE_NAMES`], [`clickhouse_names_in`]), as hyper's (private) header case map in a
/// response's extensions: made once per set of names, by hyper's client parsing a canned answer
/// that names them. hyper only records a name's case while parsing, so this is the way to hand
/// it one. A map of just the names an answer has costs less to copy onto it, and to look up
/// for each of its headers, than one of all nine.
async fn spelling(names: usize) -> Option<&'static http::Extensions> {
    const SETS: usize = 1 << CLICKHOUSE_NAMES.len();
    static MAPS: [tokio::sync::OnceCell<Option<http::Extensions>>; SETS] =
        [const { tokio::sync::OnceCell::const_new() }; SETS];
    MAPS.get(names)?.get_or_init(|| async { parse_spelling(names).await.ok() }).await.as_ref()
}

async fn parse_spelling(names: usize) -> Result<http::Extensions, String> {
    let spelled: Vec<&str> =
        CLICKHOUSE_NAMES.iter().enumerate().filter(|(i, _)| names & (1 << i) != 0).map(|(_, n)| *n).collect();
    case_map(&spelled).await
}

/// Which of ClickHouse's own names `headers` has, as bits of [`CLICKHOUSE_NAMES`].
fn clickhouse_names_in(headers: &http::HeaderMap) -> usize {
    let mut names = 0;
    for k in headers.keys() {
        if let Some(i) = clickhouse_header(k) {
            names |= 1 << i;
        }
    }
    names
}

/// Bytes read on a connection, and their count when its last answer had gone out: how a header
/// timeout of hyper's server is told from an idle one (the own server knows it directly).
#[derive(Default)]
struct Reads {
    total: AtomicU64,
    at_last_answer: AtomicU64,
    /// A write waited `limits.client_write_timeout`: the connection ends for that.
    write_stalled: std::sync::atomic::AtomicBool,
}

impl Reads {
    /// Some bytes came since the last answer (part of a request head, when hyper times out).
    fn partial(&self) -> bool {
        self.total.load(Ordering::Acquire) > self.at_last_answer.load(Ordering::Acquire)
    }
}

/// Notes the read count when dropped (with the answer's body: once it has gone out).
struct AnswerSent(Arc<Reads>);

impl Drop for AnswerSent {
    fn drop(&mut self) {
        self.0.at_last_answer.store(self.0.total.load(Ordering::Acquire), Ordering::Release);
    }
}

/// An I/O stream that counts the bytes read from it, and fails a write that waits
/// `write_timeout` for the client to take bytes (`limits.client_write_timeout`).
struct Counted<T> {
    inner: T,
    reads: Arc<Reads>,
    write_timeout: std::time::Duration,
    /// Runs while a write waits; `None` while writes go through.
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.reads.total.fetch_add(n as u64, Ordering::AcqRel);
        }
        r
    }
}

impl<T> Counted<T> {
    /// The write clock: `r` as it is while the client takes bytes; an error once a write has
    /// waited `write_timeout` (the client stopped reading), which ends the connection.
    fn stalled<R>(&mut self, cx: &mut Context<'_>, r: Poll<std::io::Result<R>>) -> Poll<std::io::Result<R>> {
        if r.is_ready() {
            self.stall = None;
            return r;
        }
        let limit = self.write_timeout;
        let clock = self.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if clock.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.stall = None;
        self.reads.write_stalled.store(true, Ordering::Release);
        Poll::Ready(Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the client took no byte of its answer for {} ms", limit.as_millis()),
        )))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.stalled(cx, r)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.stalled(cx, r)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.stalled(cx, r)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.stalled(cx, r)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// ClickHouse's 404 for `target`. ClickHouse also closes the connection there, only because it
/// sends this body without a length; this one has a length, so the connection stays open.
fn not_found(target: &str) -> Response<GBody> {
    let mut r = Response::new(full(not_found_text(target)));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clickhouse_spelling_is_parsed_once_per_set_of_names() {
        let all = (1 << CLICKHOUSE_NAMES.len()) - 1;
        let e = parse_spelling(all).await;
        assert!(e.is_ok(), "{:?}", e.err());
        for names in [1, 2, 0b101, all] {
            let first = spelling(names).await.expect("a case map") as *const http::Extensions;
            assert_eq!(spelling(names).await.unwrap() as *const _, first, "made once");
        }
        assert!(spelling(all + 1).await.is_none(), "no such set");
    }

    #[test]
    fn an_answers_clickhouse_names_are_found_in_any_case() {
        let mut h = http::HeaderMap::new();
        assert_eq!(clickhouse_names_in(&h), 0);
        h.insert("content-type", HeaderValue::from_static("x"));
        h.insert("x-clickhouse-query-id", HeaderValue::from_static("q"));
        h.insert("X-ClickHouse-Summary", HeaderValue::from_static("{}"));
        h.insert("x-clickhouse-unknown", HeaderValue::from_static("u"));
        h.append("x-clickhouse-progress", HeaderValue::from_static("1"));
        h.append("x-clickhouse-progress", HeaderValue::from_static("2"));
        let at = |n: &str| 1 << CLICKHOUSE_NAMES.iter().position(|c| *c == n).unwrap();
        assert_eq!(
            clickhouse_names_in(&h),
            at("X-ClickHouse-Query-Id") | at("X-ClickHouse-Summary") | at("X-ClickHouse-Progress")
        );
    }
}
