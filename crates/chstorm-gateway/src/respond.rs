//! `respond`: the one exit of the request path. Every outcome — a refusal by the layers or the
//! plan, a failure of the attempts, an answer passed on — becomes a response here, and is counted
//! (`chstorm_gateway_requests_total`, `chstorm_gateway_request_duration_seconds`) and logged
//! (failures, retries and hedges) here, so no exit skips the metrics.

use crate::attempt::Outcome;
use crate::body::{Guarded, Streamed};
use crate::cluster::upstream::{full, GBody};
use crate::log::log;
use crate::metrics::{Metrics, RequestLabels, RouteLabel};
use crate::plan::Refusal;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use std::time::{Duration, Instant};

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
            Outcome::Answer { head: resp, won, retries, hedged } => {
                let (mut parts, body) = resp.into_parts();
                crate::conn::note_backend_spelling(&mut parts);
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
