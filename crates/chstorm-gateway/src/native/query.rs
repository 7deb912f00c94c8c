//! One Query packet: the client's external tables are read whole (held, so a read can be sent
//! again), the query passes the same admission and the same [`crate::plan`] as an HTTP request,
//! then attempts run under the same [`Policy`] and retry budget as HTTP: a read that has sent
//! nothing to the client yet moves to another replica when its connection is refused, breaks
//! before the first answer packet, or the server answers a retry-safe code (202, 209, 210, 279).
//! Hedged reads are HTTP-only for now. The answer's packets are relayed as read
//! ([`super::block`]); the client's packets during the query (INSERT data, Cancel) go to the
//! backend as read. Every query is counted in `chstorm_gateway_requests_total` like an HTTP one.

use super::backend::BackendConn;
use super::block::{skip_block, Scratch};
use super::client_io::ClientWrite;
use super::packets::{self, Query, QUERY_KIND_INITIAL};
use super::session::{ClientConn, ClientPacket, Shared};
use crate::attempt::{Decision, Failure, Policy};
use crate::body::KillGuard;
use crate::budget::Grant;
use crate::metrics::{RequestLabels, RouteLabel};
use crate::plan::{BodyShape, PlanInput, Target};
use crate::state::{ClusterRt, State, UserRt};
use chstorm_proto::native::packets::{read_exception, rev, server, skip_profile_info, skip_progress};
use chstorm_proto::native::wire::Io;
use chstorm_proto::rules::retry_safe_code;
use chstorm_proto::ProtoError;
use http::{HeaderMap, Method, StatusCode};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedReadHalf;
use tower::retry::budget::Budget as _;

/// Most bytes of external tables held for one query: 64 MiB.
pub const MAX_HELD: usize = 64 << 20;
/// Answer packets are gathered up to this size before a write to the client (256 KiB), and
/// written at once whenever nothing more is buffered from the backend.
const FLUSH_AT: usize = 256 << 10;

/// Counts a finished query as the HTTP path does.
pub fn count(state: &State, user: &str, status: u16, route: &'static str) {
    state.metrics.requests.get_or_create(&RequestLabels { user: user.to_string(), status, route }).inc();
}

/// Writes `bytes` to the client; false when it is gone.
async fn say(w: &mut ClientWrite, bytes: Vec<u8>) -> bool {
    w.write_all(&bytes).await.is_ok()
}

fn exception_bytes(code: i32, message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    packets::exception(&mut out, code, message);
    out
}

/// The ClickHouse code for a refusal of the plan or of admission.
fn refusal_code(status: StatusCode, message: &str) -> i32 {
    match status {
        StatusCode::FORBIDDEN if message.contains("read-only") => 164, // READONLY
        StatusCode::FORBIDDEN => 497,                                  // ACCESS_DENIED
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => 202, // TOO_MANY_SIMULTANEOUS_QUERIES
        _ => 1002,
    }
}

/// Runs one query for `user`; false when the client connection must be closed.
pub async fn run(shared: &Shared, state: &State, user: &Arc<UserRt>, conn: &mut ClientConn, q: Query) -> bool {
    let started = Instant::now();
    let name = user.cfg.name.as_str();
    // The client's external tables, to the empty block that ends them.
    let mut held = Vec::new();
    loop {
        match conn.read_packet().await {
            ClientPacket::Data { raw, empty } => {
                held.extend_from_slice(&raw);
                if held.len() > MAX_HELD {
                    let msg = format!("chstorm gateway: external tables over {} MiB", MAX_HELD >> 20);
                    let _ = conn.w.write_all(&exception_bytes(1002, &msg)).await;
                    return false;
                }
                if empty {
                    break;
                }
            }
            _ => return false,
        }
    }
    let refuse = |code: i32, msg: &str| exception_bytes(code, msg.trim_start_matches("chstorm gateway: "));
    // Admission, as the HTTP layers do it: global, then the user's rate and concurrency.
    state.metrics.queued.set(state.global.queued() as i64);
    let _global = match state.global.acquire().await {
        Ok(p) => p,
        Err(why) => {
            count(state, crate::metrics::UNKNOWN_USER, 503, "rejected");
            return say(&mut conn.w, refuse(202, &format!("overloaded: {why}"))).await;
        }
    };
    state.metrics.in_flight.set(state.global.in_flight() as i64);
    if let Some(rate) = &user.rate {
        if let Err(why) = rate.check() {
            count(state, name, 429, "rejected");
            return say(&mut conn.w, refuse(202, &format!("user '{name}': {why}"))).await;
        }
    }
    let _permit = match user.limiter.acquire().await {
        Ok(p) => p,
        Err(why) => {
            count(state, name, 429, "rejected");
            return say(&mut conn.w, refuse(202, &format!("user '{name}': {why}"))).await;
        }
    };
    let Some(cluster) = state.clusters.get(&user.cfg.cluster) else {
        count(state, name, 500, "rejected");
        return say(&mut conn.w, refuse(1002, &format!("user '{name}' names a cluster that is gone"))).await;
    };
    if q.query_kind != QUERY_KIND_INITIAL {
        count(state, name, 400, "rejected");
        let msg = "only initial queries are served on the gateway's native port (not a server's secondary queries)";
        return say(&mut conn.w, refuse(48, msg)).await;
    }
    let word = chstorm_proto::rules::first_keyword(&q.sql);
    if word.eq_ignore_ascii_case("SET") || word.eq_ignore_ascii_case("USE") {
        count(state, name, 400, "rejected");
        let msg = format!(
            "{} is not supported on the gateway's native port: its backend connections are shared, so a \
             connection's own settings or database would leak; pass settings with each query \
             (clickhouse-client --max_threads=2, or a SETTINGS clause) and the database at connect time (--database)",
            word.to_ascii_uppercase()
        );
        return say(&mut conn.w, refuse(48, &msg)).await;
    }

    // The plan: the same as for HTTP, fed a POST to `/` whose parameters are the settings.
    let mut params = q.settings.clone();
    if !conn.database.is_empty() {
        params.push(("database".into(), conn.database.clone()));
    }
    params.push(("query_id".into(), q.query_id.clone()));
    let headers = HeaderMap::new();
    let input = PlanInput {
        method: &Method::POST,
        path: "/",
        headers: &headers,
        params,
        sql: Some(&q.sql),
        body: BodyShape::Held,
    };
    let max_per_query = cluster.budget.as_ref().map(|b| b.cfg.max_per_query);
    let plan = match crate::plan::plan(input, &user.cfg, &cluster.cfg, max_per_query, crate::proxy::new_query_id) {
        Ok(p) => p,
        Err(r) => {
            count(state, name, r.status.as_u16(), "rejected");
            return say(&mut conn.w, refuse(refusal_code(r.status, &r.message), &r.message)).await;
        }
    };
    let sql = plan.replace_body.clone().unwrap_or_else(|| q.sql.clone());
    let route = plan.target.label();
    let attempts = Attempts { shared, state, cluster, plan: &plan, q: &q, sql: &sql, held: &held, user };
    let (status, keep) = attempts.run(conn).await;
    count(state, name, status, route);
    state.metrics.duration.get_or_create(&RouteLabel { route }).observe(started.elapsed().as_secs_f64());
    keep
}

struct Attempts<'a> {
    shared: &'a Shared,
    state: &'a State,
    cluster: &'a ClusterRt,
    plan: &'a crate::plan::Plan,
    q: &'a Query,
    sql: &'a str,
    held: &'a [u8],
    user: &'a UserRt,
}

/// How a relay ended.
enum End {
    /// Nothing reached the client: another replica may take the query.
    Retryable(Failure, String),
    /// The answer ended (EndOfStream or an exception): `clean` when the connection may be
    /// pooled; `status` for the metrics.
    Done { clean: bool, server_ended: bool, status: u16 },
    /// The client left or broke the protocol: close it (and cancel the query).
    ClientGone,
}

impl Attempts<'_> {
    /// The settings for the backend: the plan's, the thread grant as a real `max_threads`
    /// setting, and `readonly = 1` last for a read-only user.
    fn settings(&self, grant: Option<&Grant>) -> Vec<(String, String)> {
        let mut s: Vec<(String, String)> =
            self.plan.params.iter().filter(|(k, _)| crate::request::is_setting(k)).cloned().collect();
        if let Some(g) = grant {
            s.push(("max_threads".into(), g.threads().to_string()));
        }
        if self.user.cfg.readonly {
            s.push(("readonly".into(), "1".into()));
        }
        s
    }

    /// Runs the attempts; (status for the metrics, keep the client connection).
    async fn run(&self, conn: &mut ClientConn) -> (u16, bool) {
        let (state, cluster, plan) = (self.state, self.cluster, self.plan);
        let policy = Policy {
            latitude: plan.latitude,
            max_attempts: cluster.balancer.replicas().count() + 1,
            max_extra: 0,
            hedge_after: None,
        };
        state.retry_budget.deposit();
        let mut tried: Vec<(usize, usize)> = Vec::new();
        let mut lost_once: Vec<(usize, usize)> = Vec::new();
        let mut attempts = 0usize;
        loop {
            let inflight = match plan.target {
                Target::Shard(s) => cluster.balancer.pick(Some(s), &tried),
                Target::Any => cluster.balancer.pick(None, &tried),
                Target::Session(h) => cluster.balancer.pick_sticky(h, &tried),
            };
            let Some(inflight) = inflight else {
                let msg = format!("chstorm gateway: no replica left to try after {attempts} attempts");
                return (503, self.say(conn, exception_bytes(279, &msg)).await);
            };
            attempts += 1;
            let replica = inflight.replica().clone();
            let id = (replica.shard, replica.index);
            let Some(native) = cluster.cfg.native.get(&replica.addr.base) else {
                let msg = format!("chstorm gateway: replica {} has no native address in the config", replica.label());
                return (500, self.say(conn, exception_bytes(1002, &msg)).await);
            };
            let grant = match (cluster.budget.as_ref(), plan.want_threads) {
                (Some(b), Some(want)) => b.acquire(&replica, want, &plan.query_id).await,
                _ => None,
            };
            let mut query = Vec::with_capacity(256 + self.sql.len() + self.held.len());
            if let Err(e) =
                packets::backend_query(&mut query, self.q, &plan.query_id, &self.settings(grant.as_ref()), self.sql)
            {
                return (400, self.say(conn, exception_bytes(115, &e.to_string())).await);
            }
            query.extend_from_slice(self.held);
            let failure = match self.attempt(conn, native, &replica, &query).await {
                Ok((status, keep)) => return (status, keep),
                Err(f) => f,
            };
            let (failure, message, pooled) = failure;
            let blame = pooled && !lost_once.contains(&id) && matches!(failure, Failure::Lost(_));
            if blame {
                // A pooled connection may have gone stale: one more try on a fresh one.
                lost_once.push(id);
            } else {
                tried.push(id);
                if !matches!(failure, Failure::Busy(_)) && cluster.balancer.report_failure(&replica) {
                    self.shared.pool.reset(native);
                    state.backend.reset_pool(&replica.addr);
                    crate::log::log(
                        "warn",
                        "replica down (native query failed)",
                        serde_json::json!({"replica": replica.label(), "native": native, "error": message,
                            "query_id": plan.query_id}),
                    );
                }
            }
            let retry = policy.retry(&failure, attempts) == Decision::Retry;
            if !retry || !state.retry_budget.withdraw() {
                if retry {
                    state.metrics.budget_exhausted.inc();
                }
                let (code, status) = match failure {
                    Failure::Busy(c) => (c, 503),
                    _ => (210, 502),
                };
                let msg = format!("chstorm gateway: replica {} failed: {message}", replica.label());
                return (status, self.say(conn, exception_bytes(code, &msg)).await);
            }
            state.metrics.retries.inc();
        }
    }

    async fn say(&self, conn: &mut ClientConn, bytes: Vec<u8>) -> bool {
        conn.w.write_all(&bytes).await.is_ok()
    }

    /// One attempt on `native`: Ok((status, keep the client)) when the client got an answer,
    /// Err((failure, message, on a pooled connection)) when another replica may take it.
    async fn attempt(
        &self,
        conn: &mut ClientConn,
        native: &str,
        replica: &Arc<crate::replica::Replica>,
        query: &[u8],
    ) -> Result<(u16, bool), (Failure, String, bool)> {
        let (state, cluster, plan) = (self.state, self.cluster, self.plan);
        let pooled = self.shared.pool.take(native, &conn.database, conn.revision);
        let was_pooled = pooled.is_some();
        let mut b = match pooled {
            Some(c) => c,
            None => BackendConn::connect(
                native,
                &conn.database,
                conn.revision,
                &cluster.cfg.user,
                &cluster.cfg.password,
                state.config.pool.connect_timeout.0,
            )
            .await
            .map_err(|e| {
                let f = if e.refused { Failure::Unsent(e.message.clone()) } else { Failure::Lost(e.message.clone()) };
                (f, e.message, false)
            })?,
        };
        if b.revision != conn.revision {
            let msg = format!(
                "chstorm gateway: replica {} speaks protocol revision {}, below the client's {}",
                replica.label(),
                b.revision,
                conn.revision
            );
            return Ok((502, self.say(conn, exception_bytes(210, &msg)).await));
        }
        // The query may run as soon as it is sent: guard it (KILL QUERY when given up).
        let mut guard = KillGuard {
            armed: true,
            reason: "client_gone",
            query_id: plan.query_id.clone(),
            replica: replica.addr.clone(),
            auth: cluster.auth.clone(),
            backend: state.backend.clone(),
            metrics: state.metrics.clone(),
        };
        if let Err(e) = b.w.write_all(query).await {
            guard.disarm();
            return Err((Failure::Lost(e.to_string()), format!("sending the query: {e}"), was_pooled));
        }
        match relay(conn, &mut b, self.q.compression, plan).await {
            End::Retryable(f, msg) => {
                guard.disarm();
                Err((f, msg, was_pooled))
            }
            End::Done { clean, server_ended, status } => {
                if server_ended {
                    guard.disarm();
                } else {
                    guard.reason = if status == 504 { "timeout" } else { "replica_failed" };
                }
                if clean {
                    self.shared.pool.put(b);
                }
                Ok((status, true))
            }
            End::ClientGone => {
                guard.reason = "client_gone";
                // Cancel on the connection too; dropping it closes it.
                let _ = b.w.try_write(&[chstorm_proto::native::packets::client::CANCEL as u8]);
                Ok((499, false))
            }
        }
    }
}

/// Reads one server packet whole; (its code, its bytes, the exception code if it is one).
async fn read_server_packet(
    io: &mut Io<OwnedReadHalf>,
    revision: u64,
    compressed: bool,
    scratch: &mut Scratch,
) -> (Result<(u64, Option<i32>), ProtoError>, Vec<u8>) {
    io.tee_start(Vec::new());
    let r = async {
        let code = io.varuint().await?;
        let mut exc = None;
        match code {
            server::DATA | server::TOTALS | server::EXTREMES | server::LOG => {
                if revision >= rev::TEMPORARY_TABLES {
                    io.skip_string().await?;
                }
                // Server logs are never compressed.
                skip_block(io, revision, compressed && code != server::LOG, scratch).await?;
            }
            server::PROGRESS => skip_progress(io, revision).await?,
            server::PROFILE_INFO => skip_profile_info(io).await?,
            server::EXCEPTION => match read_exception(io).await {
                ProtoError::Server { code, .. } => exc = Some(code),
                e => return Err(e),
            },
            server::END_OF_STREAM => {}
            server::TABLE_COLUMNS => {
                io.skip_string().await?;
                io.skip_string().await?;
            }
            other => return Err(ProtoError::Protocol(format!("unexpected packet {other} from the server"))),
        }
        Ok((code, exc))
    }
    .await;
    (r, io.tee_take())
}

/// Relays the answer to the client and the client's packets to the backend until the answer
/// ends, the client leaves, or the deadline passes.
async fn relay(conn: &mut ClientConn, b: &mut BackendConn, compressed: bool, plan: &crate::plan::Plan) -> End {
    let started = tokio::time::Instant::now();
    let head_deadline = started + plan.head_timeout;
    let body_deadline = plan.body_deadline.map(|d| started + d);
    let mut scratch = Scratch::default();
    let (mut committed, mut cancelled) = (false, false);
    let mut out: Vec<u8> = Vec::new();
    let revision = b.revision;
    let BackendConn { io, w: bw, .. } = b;
    loop {
        let deadline = if committed { body_deadline } else { Some(head_deadline) };
        let (result, raw) = {
            let read = read_server_packet(io, revision, compressed, &mut scratch);
            tokio::pin!(read);
            loop {
                let sleep = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    r = &mut read => break r,
                    _ = conn.ready() => match conn.read_packet().await {
                        ClientPacket::Data { raw, .. } => {
                            // A broken backend shows in the read.
                            let _ = bw.write_all(&raw).await;
                        }
                        ClientPacket::Cancel => {
                            cancelled = true;
                            let _ = bw.write_all(&[chstorm_proto::native::packets::client::CANCEL as u8]).await;
                        }
                        ClientPacket::Ping => {}
                        _ => return End::ClientGone,
                    },
                    _ = sleep => {
                        let secs = plan.body_deadline.filter(|_| committed).unwrap_or(plan.head_timeout).as_secs();
                        out.extend_from_slice(&exception_bytes(
                            159,
                            &format!("chstorm gateway: no answer within {secs} s; the query was killed"),
                        ));
                        let _ = conn.w.write_all(&out).await;
                        return End::Done { clean: false, server_ended: false, status: 504 };
                    }
                }
            }
        };
        let (code, exc) = match result {
            Ok(c) => c,
            Err(e) if !committed => return End::Retryable(Failure::Lost(e.to_string()), e.to_string()),
            Err(e) => {
                out.extend_from_slice(&exception_bytes(
                    210,
                    &format!("chstorm gateway: the replica failed mid-answer: {e}"),
                ));
                let _ = conn.w.write_all(&out).await;
                return End::Done { clean: false, server_ended: false, status: 502 };
            }
        };
        if !committed {
            if let Some(c) = exc.filter(|c| retry_safe_code(*c)) {
                return End::Retryable(Failure::Busy(c), format!("ClickHouse code {c}"));
            }
        }
        committed = true;
        out.extend_from_slice(&raw);
        let end = code == server::END_OF_STREAM || code == server::EXCEPTION;
        if end || out.len() >= FLUSH_AT || !io.has_buffered() {
            if conn.w.write_all(&out).await.is_err() {
                return End::ClientGone;
            }
            out.clear();
        }
        if end {
            let clean = code == server::END_OF_STREAM && !cancelled && !io.has_buffered();
            return End::Done { clean, server_ended: true, status: if exc.is_some() { 500 } else { 200 } };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_codes() {
        assert_eq!(refusal_code(StatusCode::FORBIDDEN, "user 'ro' is read-only: only SELECT"), 164);
        assert_eq!(refusal_code(StatusCode::FORBIDDEN, "setting 'x' is not allowed"), 497);
    }
}
