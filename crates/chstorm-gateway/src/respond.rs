//! `respond`: the one exit of the request path. Every outcome — a refusal by the layers or the
//! plan, a failure of the attempts, an answer passed on — becomes a response here, and is counted
//! (`chstorm_gateway_requests_total`, `chstorm_gateway_request_duration_seconds`) and logged
//! (failures, retries and hedges) here, so no exit skips the metrics.
//!
//! An answer's first bytes are *coalesced* ([`coalesce`]): ClickHouse 18.16 writes an HTTP answer
//! as three TCP segments (head, data chunk, last chunk) microseconds apart, and relaying each as
//! it comes costs the gateway three writes and the client three wake-ups per query. The gateway
//! waits up to [`COALESCE_WINDOW`] (or [`COALESCE_MAX`] bytes) for the rest of a small answer
//! and sends it in one write; a longer answer streams on after the window. A small answer is
//! complete when sent, so the wait costs it nothing; a long one waits at most the window once.

use crate::attempt::Outcome;
use crate::body::{Guarded, Streamed};
use crate::log::log;
use crate::metrics::{Metrics, RequestLabels, RouteLabel};
use crate::plan::Refusal;
use crate::upstream::{full, GBody};
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Longest wait for the rest of an answer before its first bytes go to the client: 1 ms (tokio's
/// timer granularity; the segments of a small 18.16 answer come within tens of microseconds).
pub const COALESCE_WINDOW: Duration = Duration::from_millis(1);
/// Most answer bytes held for one write: 64 KiB.
pub const COALESCE_MAX: usize = 64 << 10;

/// A one-line answer from the gateway itself.
pub fn reply(status: StatusCode, msg: impl Into<String>) -> Response<GBody> {
    let mut r = Response::new(full(format!("{}\n", msg.into())));
    *r.status_mut() = status;
    r.headers_mut().insert("content-type", HeaderValue::from_static("text/plain; charset=UTF-8"));
    r
}

/// Who and what a response is recorded under.
pub struct Exit<'a> {
    pub metrics: &'a Metrics,
    /// The user label (a configured name, or `unknown`).
    pub user: &'a str,
    pub started: Instant,
}

impl Exit<'_> {
    fn record(&self, status: StatusCode, route: &'static str) {
        self.metrics
            .requests
            .get_or_create(&RequestLabels { user: self.user.to_string(), status: status.as_u16(), route })
            .inc();
        self.metrics.duration.get_or_create(&RouteLabel { route }).observe(self.started.elapsed().as_secs_f64());
    }

    /// A request refused before any backend saw it (route `rejected`).
    pub fn refused(&self, refusal: Refusal) -> Response<GBody> {
        self.record(refusal.status, "rejected");
        reply(refusal.status, refusal.message)
    }

    /// The attempts' outcome for a planned request.
    pub fn outcome(
        &self,
        outcome: Outcome,
        route: &'static str,
        query_id: &str,
        body_deadline: Option<Duration>,
    ) -> Response<GBody> {
        match outcome {
            Outcome::Failed { status, message, replica, retries } => {
                self.record(status, route);
                log(
                    "warn",
                    "query",
                    serde_json::json!({"query_id": query_id, "user": self.user, "status": status.as_u16(), "route": route,
                        "replica": replica.as_ref().map(|r| r.label()), "retries": retries,
                        "ms": self.started.elapsed().as_millis() as u64, "error": message}),
                );
                let mut r = reply(status, message);
                set_ids(r.headers_mut(), query_id, route, None, None);
                r
            }
            Outcome::Answer { resp, won, retries, hedged } => {
                let (mut parts, body) = resp.into_parts();
                strip_hop(&mut parts.headers);
                let threads = won.grant.as_ref().map(|g| g.threads());
                set_ids(&mut parts.headers, query_id, route, Some(won.replica.label()), threads);
                self.record(parts.status, route);
                if retries > 0 || hedged || !parts.status.is_success() {
                    log(
                        if parts.status.is_success() { "info" } else { "warn" },
                        "query",
                        serde_json::json!({"query_id": query_id, "user": self.user, "status": parts.status.as_u16(),
                            "route": route, "replica": won.replica.label(), "retries": retries, "hedged": hedged,
                            "ms": self.started.elapsed().as_millis() as u64}),
                    );
                }
                // The answer streams; the replica's in-flight count, its thread grant and the
                // KILL guard live as long as it.
                let body = Streamed::wrap(body, won.guard, body_deadline);
                Response::from_parts(parts, Guarded::wrap(body, (won.inflight, won.grant)))
            }
        }
    }
}

fn set_ids(h: &mut HeaderMap, query_id: &str, route: &'static str, replica: Option<&str>, threads: Option<usize>) {
    if let Some(r) = replica.and_then(|r| HeaderValue::from_str(r).ok()) {
        h.insert("x-chstorm-replica", r);
    }
    h.insert("x-chstorm-route", HeaderValue::from_static(route));
    if let Ok(v) = HeaderValue::from_str(query_id) {
        h.insert("x-clickhouse-query-id", v);
    }
    if let Some(t) = threads {
        h.insert("x-chstorm-threads", HeaderValue::from(t as u64));
    }
}

fn strip_hop(h: &mut HeaderMap) {
    for name in crate::request::HOP_BY_HOP.iter().chain(&["content-length"]) {
        h.remove(*name);
    }
}

/// Waits up to [`COALESCE_WINDOW`] for an answer's body to end (or [`COALESCE_MAX`] bytes), so
/// that its head and body reach the client in one write; what did not come in time streams on.
/// Consecutive data frames are joined into one chunk (the bytes the client reads are the same).
pub async fn coalesce(resp: Response<GBody>) -> Response<GBody> {
    let (parts, mut body) = resp.into_parts();
    if body.is_end_stream() {
        return Response::from_parts(parts, body);
    }
    let deadline = tokio::time::Instant::now() + COALESCE_WINDOW;
    let mut ready: VecDeque<Result<Frame<Bytes>, crate::upstream::BoxError>> = VecDeque::new();
    let mut data = BytesMut::new();
    let mut ended = false;
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(f))) => match f.into_data() {
                Ok(d) => {
                    data.extend_from_slice(&d);
                    if data.len() >= COALESCE_MAX {
                        break;
                    }
                }
                Err(other) => {
                    flush(&mut data, &mut ready);
                    ready.push_back(Ok(other));
                }
            },
            Ok(Some(Err(e))) => {
                flush(&mut data, &mut ready);
                ready.push_back(Err(e));
                ended = true;
                break;
            }
            Ok(None) => {
                ended = true;
                break;
            }
            Err(_) => break, // the window passed: stream the rest
        }
        if body.is_end_stream() {
            ended = true;
            break;
        }
    }
    flush(&mut data, &mut ready);
    let rest = (!ended).then_some(body);
    Response::from_parts(parts, Coalesced { ready, rest }.boxed_unsync())
}

fn flush(data: &mut BytesMut, ready: &mut VecDeque<Result<Frame<Bytes>, crate::upstream::BoxError>>) {
    if !data.is_empty() {
        ready.push_back(Ok(Frame::data(data.split().freeze())));
    }
}

/// The frames that came within the window, then the rest of the body (None when it ended).
struct Coalesced {
    ready: VecDeque<Result<Frame<Bytes>, crate::upstream::BoxError>>,
    rest: Option<GBody>,
}

impl Body for Coalesced {
    type Data = Bytes;
    type Error = crate::upstream::BoxError;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(f) = self.ready.pop_front() {
            return Poll::Ready(Some(f));
        }
        match self.rest.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }
    fn is_end_stream(&self) -> bool {
        self.ready.is_empty() && self.rest.as_ref().is_none_or(|b| b.is_end_stream())
    }
    fn size_hint(&self) -> SizeHint {
        match (&self.rest, self.ready.len()) {
            (None, 0) => SizeHint::with_exact(0),
            (None, 1) => match self.ready.front() {
                Some(Ok(f)) => f.data_ref().map_or_else(SizeHint::default, |d| SizeHint::with_exact(d.len() as u64)),
                _ => SizeHint::default(),
            },
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::BoxError;
    use std::future::Future;

    /// A body that yields `frames` with the given delays before each.
    fn timed(frames: Vec<(Duration, &'static str)>) -> GBody {
        let s = futures_util_stream(frames);
        http_body_util::StreamBody::new(s).boxed_unsync()
    }

    fn futures_util_stream(
        frames: Vec<(Duration, &'static str)>,
    ) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, BoxError>> + Send {
        struct S {
            frames: VecDeque<(Duration, &'static str)>,
            sleep: Option<Pin<Box<tokio::time::Sleep>>>,
        }
        impl futures_core::Stream for S {
            type Item = Result<Frame<Bytes>, BoxError>;
            fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
                let Some(&(d, text)) = self.frames.front() else { return Poll::Ready(None) };
                if self.sleep.is_none() {
                    self.sleep = Some(Box::pin(tokio::time::sleep(d)));
                }
                match self.sleep.as_mut().map(|s| s.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => {
                        self.sleep = None;
                        self.frames.pop_front();
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(text.as_bytes())))))
                    }
                    _ => Poll::Pending,
                }
            }
        }
        S { frames: frames.into(), sleep: None }
    }

    async fn frames(b: GBody) -> Vec<String> {
        let mut b = b;
        let mut out = vec![];
        while let Some(f) = b.frame().await {
            out.push(String::from_utf8(f.unwrap().into_data().unwrap().to_vec()).unwrap());
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn a_small_answer_goes_in_one_piece_and_a_slow_one_streams_after_the_window() {
        // (tokio's timers tick in milliseconds, so "within the window" is "at once" here.)
        let fast = Response::new(timed(vec![(Duration::ZERO, "1\n"), (Duration::ZERO, "2\n")]));
        let t0 = tokio::time::Instant::now();
        let r = coalesce(fast).await;
        assert_eq!(t0.elapsed(), Duration::ZERO, "waited only for the end, not the window");
        assert!(r.body().is_end_stream() || r.body().size_hint().exact() == Some(4));
        assert_eq!(frames(r.into_body()).await, vec!["1\n2\n"]);

        let slow = Response::new(timed(vec![(Duration::ZERO, "a"), (Duration::from_secs(2), "b")]));
        let t0 = tokio::time::Instant::now();
        let r = coalesce(slow).await;
        assert_eq!(t0.elapsed(), COALESCE_WINDOW, "the head waits at most the window");
        assert_eq!(frames(r.into_body()).await, vec!["a", "b"], "the rest streams as it comes");
    }
}
