//! The innermost service: checks a query against its user's rules, routes it, picks a replica,
//! forwards it, retries it elsewhere when that is safe, and streams the answer back.
//!
//! Retries: only reads (SELECT, WITH, SHOW, DESCRIBE, EXISTS, EXPLAIN) whose body the gateway
//! holds, only when nothing has gone to the client yet, only for failures that prove the query did
//! not run (connect refused/reset/timeout before an answer, or ClickHouse codes 202, 209, 210,
//! 279), and only within the retry budget. Never a write.

use crate::balancer::Replica;
use crate::body::{KillGuard, Streamed};
use crate::client_body::ClientBody as Incoming;
use crate::config::User;
use crate::log::log;
use crate::metrics::{RequestLabels, RouteLabel};
use crate::request::{classify, encode_params, is_setting, parse_params, Kind, SHARD_KEY_HEADER, SHARD_KEY_PARAM};
use crate::state::State;
use crate::upstream::{full, GBody};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::retry::budget::Budget;

/// Largest query body the gateway reads to route and retry (1 MiB). Bigger bodies must carry the
/// query in the URL (`?query=INSERT ...`) and are streamed.
pub const MAX_QUERY_BODY: usize = 1 << 20;
/// Largest error answer read from a backend to find its exception code (64 KiB).
const MAX_ERROR_BODY: usize = 64 << 10;
/// How long the gateway waits for a backend's answer head when the user has no
/// max_execution_time: 10 minutes.
const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(600);
/// ClickHouse codes after which a read may go to another replica: TOO_MANY_SIMULTANEOUS_QUERIES,
/// SOCKET_TIMEOUT, NETWORK_ERROR, ALL_CONNECTION_TRIES_FAILED.
pub const RETRY_CODES: &[i32] = &[202, 209, 210, 279];
/// Headers not passed between client and backend.
const HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "authorization",
    "x-clickhouse-user",
    "x-clickhouse-key",
    SHARD_KEY_HEADER,
    "content-length",
];

/// A one-line error answer.
pub fn reply(status: StatusCode, msg: impl Into<String>) -> Response<GBody> {
    let mut r = Response::new(full(format!("{}\n", msg.into())));
    *r.status_mut() = status;
    r.headers_mut().insert("content-type", HeaderValue::from_static("text/plain; charset=UTF-8"));
    r
}

fn exception_code(headers: &HeaderMap, body: &[u8]) -> Option<i32> {
    if let Some(v) = headers.get("x-clickhouse-exception-code").and_then(|v| v.to_str().ok()) {
        return v.trim().parse().ok();
    }
    let pos = body.windows(6).position(|w| w == b"Code: ")?;
    let digits: String = body[pos + 6..].iter().take_while(|b| b.is_ascii_digit()).map(|&b| b as char).collect();
    digits.parse().ok()
}

enum ReqBody {
    Held(Bytes),
    Stream(Incoming),
}

/// Handles one authenticated, admitted request.
pub async fn handle(state: Arc<State>, u: Arc<User>, req: Request<Incoming>) -> Response<GBody> {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let mut params = parse_params(parts.uri.query());
    let url_query = params.iter().find(|(k, _)| k == "query").map(|(_, v)| v.clone());
    let compressed =
        parts.headers.contains_key("content-encoding") || params.iter().any(|(k, v)| k == "decompress" && v == "1");

    // Where is the query text? In the URL (the body, if any, is data), or the body itself.
    let (sql, body) = match (&url_query, compressed) {
        (Some(q), _) => (Some(q.clone()), ReqBody::Stream(body)),
        (None, true) => (None, ReqBody::Stream(body)),
        (None, false) => match http_body_util::Limited::new(body, MAX_QUERY_BODY).collect().await {
            Ok(b) => {
                let b = b.to_bytes();
                (Some(String::from_utf8_lossy(&b).into_owned()), ReqBody::Held(b))
            }
            Err(_) => {
                return reply(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "chstorm gateway: query body over 1 MiB or unreadable; put the query in the URL (?query=...) and stream the data",
                )
            }
        },
    };
    let kind = sql.as_deref().map_or(Kind::Write, classify);

    // The user's rules.
    if u.readonly && kind != Kind::Read {
        return reply(StatusCode::FORBIDDEN, format!("chstorm gateway: user '{}' is read-only: only SELECT, WITH, SHOW, DESCRIBE, EXISTS and EXPLAIN are allowed", u.name));
    }
    if let Some((k, _)) = params.iter().find(|(k, _)| is_setting(k) && !u.allowed_settings.allows(k)) {
        return reply(
            StatusCode::FORBIDDEN,
            format!("chstorm gateway: setting '{k}' is not allowed for user '{}'", u.name),
        );
    }

    // Backend parameters: the client's, minus credentials and the gateway's own, plus the user's
    // fixed settings, a capped max_execution_time, readonly and a query_id.
    let query_id = params
        .iter()
        .find(|(k, _)| k == "query_id")
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| format!("chgw-{:016x}{:08x}", rand::random::<u64>(), rand::random::<u32>()));
    let shard_key_param = params.iter().find(|(k, _)| k == SHARD_KEY_PARAM).map(|(_, v)| v.clone());
    params.retain(|(k, _)| !matches!(k.as_str(), "user" | "password" | "query_id" | SHARD_KEY_PARAM));
    for (k, v) in &u.settings {
        params.retain(|(pk, _)| pk != k);
        params.push((k.clone(), v.clone()));
    }
    if let Some(max) = u.max_execution_time {
        let client = params.iter().find(|(k, _)| k == "max_execution_time").and_then(|(_, v)| v.parse::<f64>().ok());
        let secs =
            client.map_or(max.as_secs_f64(), |c| if c > 0.0 { c.min(max.as_secs_f64()) } else { max.as_secs_f64() });
        params.retain(|(k, _)| k != "max_execution_time");
        params.push(("max_execution_time".into(), format!("{}", secs.ceil() as u64)));
    }
    if u.readonly {
        params.retain(|(k, _)| k != "readonly");
        params.push(("readonly".into(), "2".into()));
    }
    params.push(("query_id".into(), query_id.clone()));

    let Some(cluster) = state.clusters.get(&u.cluster) else {
        return reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("chstorm gateway: user '{}' names cluster '{}', which is gone", u.name, u.cluster),
        );
    };

    // Routing: one shard when the query carries a key and names a routed table.
    let header_key = parts.headers.get(SHARD_KEY_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (shard, route, sql) = match (&cluster.cfg.routing, &sql, kind) {
        (Some(router), Some(text), Kind::Read) => {
            match router.route(text, shard_key_param.as_deref(), header_key.as_deref()) {
                Ok(r) => (Some(r.shard), "routed", Some(r.sql)),
                Err(_) => (None, "fanout", sql),
            }
        }
        _ => (None, "fanout", sql),
    };
    let (mut body, held_body) = match body {
        ReqBody::Held(b) => {
            // A routed query from the body carries the rewritten text.
            let b =
                if url_query.is_none() && route == "routed" { Bytes::from(sql.clone().unwrap_or_default()) } else { b };
            (None, Some(b))
        }
        ReqBody::Stream(s) => (Some(s), None),
    };
    if let (Some(text), true, "routed") = (&sql, url_query.is_some(), route) {
        for (k, v) in params.iter_mut() {
            if k == "query" {
                *v = text.clone();
            }
        }
    }
    // The thread budget: the query wants max_per_query threads, or fewer when the client's (or
    // the user's fixed) max_threads says so; each attempt sends its replica's grant instead.
    let want_threads = cluster.budget.as_ref().map(|b| crate::budget::wanted(&params, b.cfg.max_per_query));
    if want_threads.is_some() {
        params.retain(|(k, _)| k != "max_threads");
    }
    let path_and_query = format!("{}?{}", parts.uri.path(), encode_params(&params));
    let retryable = kind == Kind::Read && held_body.is_some();
    let head_timeout = u.max_execution_time.map_or(DEFAULT_HEAD_TIMEOUT, |d| d + Duration::from_secs(1));

    state.retry_budget.deposit();
    // Replicas not to pick again: one that refused a connection at once; one whose (perhaps
    // pooled, stale) connection failed after a second such failure.
    let mut tried: Vec<(usize, usize)> = Vec::new();
    let mut soft_failed: Vec<(usize, usize)> = Vec::new();
    let mut attempts = 0usize;
    let max_attempts = cluster.balancer.replicas().count() + 1;
    let mut retries = 0u32;
    let finish = |status: StatusCode, replica: Option<&Replica>, retries: u32| {
        state
            .metrics
            .requests
            .get_or_create(&RequestLabels { user: u.name.clone(), status: status.as_u16(), route })
            .inc();
        state.metrics.duration.get_or_create(&RouteLabel { route }).observe(started.elapsed().as_secs_f64());
        if retries > 0 || !status.is_success() {
            log(
                if status.is_success() { "info" } else { "warn" },
                "query",
                serde_json::json!({"query_id": query_id, "user": u.name, "status": status.as_u16(), "route": route,
                    "replica": replica.map(|r| r.label()), "retries": retries, "ms": started.elapsed().as_millis() as u64}),
            );
        }
    };
    let session = params.iter().find(|(k, _)| k == "session_id").map(|(_, v)| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        v.hash(&mut h);
        h.finish()
    });
    loop {
        let picked = match (session, shard) {
            (Some(h), None) => cluster.balancer.pick_sticky(h, &tried),
            _ => cluster.balancer.pick(shard, &tried),
        };
        let Some(inflight) = picked else {
            finish(StatusCode::SERVICE_UNAVAILABLE, None, retries);
            let r = reply(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "Code: 279. chstorm gateway: no replica left to try{} after {} attempts",
                    shard.map(|s| format!(" for shard {}", s + 1)).unwrap_or_default(),
                    attempts
                ),
            );
            return r;
        };
        let replica = inflight.replica().clone();
        let id = (replica.shard, replica.index);
        attempts += 1;
        // Threads from this replica's budget (RAII: a retry's `continue` gives them back).
        let grant = match (&cluster.budget, want_threads) {
            (Some(budget), Some(want)) => budget.acquire(&replica, want, &query_id).await,
            _ => None,
        };
        let uri = match &grant {
            Some(g) => format!("{}{}&max_threads={}", replica.addr.base, path_and_query, g.threads()),
            None => format!("{}{}", replica.addr.base, path_and_query),
        };
        let mut b = Request::builder().method(parts.method.clone()).uri(uri);
        for (k, v) in parts.headers.iter() {
            if !HOP.contains(&k.as_str()) {
                b = b.header(k, v);
            }
        }
        b = b.header("authorization", &cluster.auth);
        let req_body = match (&held_body, body.take()) {
            (Some(h), _) => full(h.clone()),
            (None, Some(s)) => s.map_err(|e| Box::new(e) as crate::upstream::BoxError).boxed_unsync(),
            (None, None) => crate::upstream::empty(),
        };
        let breq = match b.body(req_body) {
            Ok(r) => r,
            Err(e) => {
                return reply(StatusCode::BAD_REQUEST, format!("chstorm gateway: cannot forward this request: {e}"))
            }
        };
        // The query may start running as soon as it is sent: guard it from here on.
        let mut guard = KillGuard {
            armed: true,
            reason: "client_gone",
            query_id: query_id.clone(),
            replica: replica.addr.clone(),
            auth: cluster.auth.clone(),
            upstream: state.upstream.clone(),
            metrics: state.metrics.clone(),
        };
        let sent = tokio::time::timeout(head_timeout, state.upstream.send(breq)).await;
        let resp = match sent {
            Err(_) => {
                guard.reason = "timeout";
                drop(guard);
                finish(StatusCode::GATEWAY_TIMEOUT, Some(&replica), retries);
                return reply(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "Code: 159. chstorm gateway: no answer from replica {} within {} s; the query was killed",
                        replica.label(),
                        head_timeout.as_secs()
                    ),
                );
            }
            Ok(Err(e)) => {
                // Nothing came back: the query did not run (connect) or its fate is unknown (reset).
                guard.disarm();
                let connect = e.is_connect();
                if connect || soft_failed.contains(&id) {
                    tried.push(id);
                } else {
                    soft_failed.push(id);
                }
                if cluster.balancer.report_failure(&replica) {
                    log(
                        "warn",
                        "replica down (request failed)",
                        serde_json::json!({"replica": replica.label(), "url": replica.addr.base, "error": e.to_string(), "query_id": query_id}),
                    );
                }
                if (retryable || (connect && held_body.is_some())) && attempts < max_attempts {
                    if state.retry_budget.withdraw() {
                        state.metrics.retries.inc();
                        retries += 1;
                        continue;
                    }
                    state.metrics.budget_exhausted.inc();
                }
                finish(StatusCode::BAD_GATEWAY, Some(&replica), retries);
                return reply(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "Code: 210. chstorm gateway: replica {} ({}) failed: {}{}",
                        replica.label(),
                        replica.addr.base,
                        e,
                        std::error::Error::source(&e).map(|s| format!(": {s}")).unwrap_or_default()
                    ),
                );
            }
            Ok(Ok(resp)) => resp,
        };
        let (mut rparts, rbody) = resp.into_parts();
        strip_hop(&mut rparts.headers);
        rparts.headers.insert(
            "x-chstorm-replica",
            HeaderValue::from_str(&replica.label()).unwrap_or(HeaderValue::from_static("?")),
        );
        rparts.headers.insert("x-chstorm-route", HeaderValue::from_static(route));
        rparts
            .headers
            .insert("x-clickhouse-query-id", HeaderValue::from_str(&query_id).unwrap_or(HeaderValue::from_static("")));
        if let Some(g) = &grant {
            rparts.headers.insert("x-chstorm-threads", HeaderValue::from(g.threads() as u64));
        }
        if !rparts.status.is_success() {
            // An error answer: small; read it to find the code, then retry or pass it on.
            guard.disarm();
            let text = http_body_util::Limited::new(rbody, MAX_ERROR_BODY)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let code = exception_code(&rparts.headers, &text);
            if code.is_some_and(|c| RETRY_CODES.contains(&c)) {
                tried.push(id);
                cluster.balancer.report_failure(&replica);
                if retryable && attempts < max_attempts {
                    if state.retry_budget.withdraw() {
                        state.metrics.retries.inc();
                        retries += 1;
                        continue;
                    }
                    state.metrics.budget_exhausted.inc();
                }
            }
            finish(rparts.status, Some(&replica), retries);
            return Response::from_parts(rparts, full(text));
        }
        finish(rparts.status, Some(&replica), retries);
        // Stream the answer; the replica's outstanding count, its thread grant and the KILL guard live
        // as long as it.
        let body = Streamed::wrap(rbody, guard, u.max_execution_time.map(|d| d + Duration::from_secs(1)));
        return Response::from_parts(rparts, crate::body::Guarded::wrap(body, (inflight, grant)));
    }
}

fn strip_hop(h: &mut HeaderMap) {
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    ] {
        h.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exception_codes_from_header_or_body() {
        let mut h = HeaderMap::new();
        assert_eq!(exception_code(&h, b"Code: 202, e.displayText() = DB::Exception: Too many"), Some(202));
        h.insert("x-clickhouse-exception-code", HeaderValue::from_static("241"));
        assert_eq!(exception_code(&h, b"Code: 202"), Some(241));
        assert_eq!(exception_code(&HeaderMap::new(), b"nothing"), None);
    }
}
