//! One Query packet: the client's external tables are read whole (held, so a read can be sent
//! again), the query passes the same admission ([`crate::query::admission`]) and the same [`crate::query::plan`] as an HTTP
//! request,
//! then the attempts run in the HTTP port's loop ([`crate::attempt::attempts`], through the
//! native [`super::transport`]): the same policy, hedging, re-issue on down and retry budget. A
//! read that has sent nothing to the client yet (its answer is held up to 256 KiB or the per-try
//! deadline, see [`super::transport`]) moves to another replica when its connection is refused
//! or breaks (unless its replica died of it: a query of death, [`crate::attempt::quarantine`]), its
//! replica is marked down, or the server answers a retry-safe code (202, 209, 210, 279, 745); one
//! whose replica is silent for the per-try deadline is hedged. While the attempts run, the
//! client is watched: a Cancel drops them (each query is killed on its replica) and ends the
//! answer. The answer's packets are relayed as read ([`super::block`]), what was held at once,
//! then Progress at most every 100 ms; the client's packets during the query (INSERT data,
//! Cancel) go to the backend as read. Every query's end is recorded by [`crate::query::exit`], as an HTTP one's.
//!
//! A user that keeps answers (`users[].cache` with a TTL) gets a read's kept answer before its
//! slots are taken ([`cached`]): the packets its replica sent, as its client read them; a miss
//! runs as any query, and its answer is kept when it ended whole within the entry limit. The
//! native port merges no reads in flight (the HTTP port does).
//!
//! # Session state
//!
//! `SET` is checked as the Query packet's settings are (the plan's allow-list, fixed settings
//! and read-only rules, 18.16's types and `readonly` rules) and kept in the [`ClientConn`]; each
//! later query sends the session's settings, then its own. `USE db` is checked on a backend
//! connection opened to `db` and changes the database of later queries. The client's own
//! `readonly` (1 or 2) is relayed. The first statement that is not a plain read
//! ([`chstorm_sql::statement`]) pins the session to the backend connection it ran
//! on; later queries run there only ([`pinned`]): state the gateway cannot replay (temporary
//! tables, a script's tables on one replica) stays visible, and no other client ever gets that
//! connection. A server exception to the backend Hello that blames the client (a bad database,
//! [`chstorm_proto::rules::blames_server`]) is the query's answer and marks nothing down.

use super::backend::BackendConn;
use super::cached::{backend_settings, cached, Cached, Capture, Kept};
use super::client::{ClientConn, ClientPacket, Pinned, Shared};
use super::client_io::ClientWrite;
use super::transport::{read_server_packet, HeldProgress, Native, NativeHead, Packet};
use crate::attempt::{Answered, Outcome};
use crate::cluster::login::BackendLogin;
use crate::metrics::UNKNOWN_USER;
use crate::query::admission::{admit_rate, admit_slots, SlotRefusal, Slots};
use crate::query::exit::{Exit, REJECTED};
use crate::query::plan::Plan;
use crate::query::refusal::{Kind, Refusal};
use crate::query::request::{new_query_id, QueryRequest};
use crate::state::{ClusterRt, State, UserRt};
use chstorm_proto::mem::Charge;
use chstorm_proto::native::packets::{server, QUERY_KIND_INITIAL};

/// `ClientInfo::QueryKind::SECONDARY_QUERY` (`src/Interpreters/ClientInfo.h`).
const QUERY_KIND_SECONDARY: u8 = 2;
use chstorm_proto::native::server::packets::{self, Query};
use chstorm_proto::rules::http_exception_code;
use chstorm_sql::reading::{read_all, Reading};
use chstorm_sql::statement::Class;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// Answer packets are gathered up to this size before a write to the client (256 KiB), and
/// written at once whenever nothing more is buffered from the backend.
const FLUSH_AT: usize = 256 << 10;
/// Progress and ProfileInfo packets alone are written at most this often (100 ms, 18.16's
/// `interactive_delay`); held ones go with the next packet. A small answer's trailing Progress,
/// ProfileInfo, Progress and EndOfStream then cost the client one write, not four.
const PROGRESS_EVERY: std::time::Duration = chstorm_proto::native::packets::DEFAULT_INTERACTIVE_DELAY;

/// Tells the client why its packet ends the session (when it is owed a word); false.
async fn refuse_packet(conn: &mut ClientConn, p: ClientPacket) -> bool {
    conn.refuse(p).await;
    false
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

/// Records `refusal` under `exit` and tells the client (its kind's code, its text); false when
/// the client is gone.
async fn refused(exit: &Exit<'_>, w: &mut ClientWrite, refusal: &Refusal) -> bool {
    exit.refused(refusal);
    say(w, exception_bytes(refusal.kind.code(), refusal.native_text())).await
}

/// Records `status` on `route` under `exit` and tells the client `answer`; false when the
/// client is gone.
async fn answered(exit: &Exit<'_>, w: &mut ClientWrite, status: u16, route: &'static str, answer: Vec<u8>) -> bool {
    exit.record(status, route);
    say(w, answer).await
}

/// The client's external tables, to the empty block that ends them, held on the connection's
/// account (`limits.max_client_buffer_mib`); Err: the session ends (the packet was refused).
/// With them, whether there were any before that empty block.
async fn external_tables(conn: &mut ClientConn) -> Result<(Vec<u8>, Charge, bool), bool> {
    let mut held = Vec::new();
    let mut charge = conn.mem.charge();
    let mut any = false;
    loop {
        match conn.read_packet().await {
            ClientPacket::Data { raw, empty, charge: c } => {
                any |= !empty;
                if held.is_empty() {
                    held = raw;
                } else {
                    held.extend_from_slice(&raw);
                }
                charge.absorb(c.unwrap_or_else(|| conn.mem.charge()));
                if empty {
                    return Ok((held, charge, any));
                }
            }
            p => return Err(refuse_packet(conn, p).await),
        }
    }
}

/// Runs one query for `user`; false when the client connection must be closed.
pub async fn run(shared: &Shared, state: &State, user: &Arc<UserRt>, conn: &mut ClientConn, mut q: Query) -> bool {
    let exit = Exit::new(&state.metrics, &user.cfg.name);
    let (held, _held_charge, tables) = match external_tables(conn).await {
        Ok(h) => h,
        Err(keep) => return keep,
    };
    let Some(cluster) = state.clusters.get(&user.cfg.cluster) else {
        let why = format!("user '{}' names a cluster that is gone", user.cfg.name);
        return refused(&exit, &mut conn.w, &Refusal::new(Kind::Internal, why)).await;
    };
    // A secondary query (ClickHouse as a client: `remote()`, a Distributed table's initiator)
    // goes on as an initial one: the same bytes but the kind, so the replica runs it as the
    // gateway's user with every check of an initial query (a server applies a secondary query's
    // settings without their constraints, `TCPHandler::receiveQuery`).
    if q.query_kind == QUERY_KIND_SECONDARY && !q.client_info.is_empty() {
        q.client_info[0] = QUERY_KIND_INITIAL;
        q.query_kind = QUERY_KIND_INITIAL;
    }
    if q.query_kind != QUERY_KIND_INITIAL {
        let msg = format!(
            "query kind {} is not served on the gateway's native port (only initial and secondary queries)",
            q.query_kind
        );
        return answered(&exit, &mut conn.w, 400, REJECTED, exception_bytes(48, &msg)).await;
    }
    let (_slots, mut kept, planned) = match admit(state, user, cluster, conn, &q, tables, &exit).await {
        Ok(a) => a,
        Err(keep) => return keep,
    };
    let use_db = match session_statement(shared, state, user, cluster, conn, &q, &exit).await {
        Statement::Done(keep) => return keep,
        Statement::Query { use_db } => use_db,
    };
    let (plan, client_readonly) = match planned.unwrap_or_else(|| plan(state, user, cluster, conn, &q)) {
        Ok(p) => p,
        Err(r) => return refused(&exit, &mut conn.w, &r).await,
    };
    let sql = plan.replace_body.clone().unwrap_or_else(|| q.sql.clone());
    let route = plan.target.label();
    let database = conn.database.clone();
    let mut transport = Native {
        pool: shared.pool.clone(),
        natives: &cluster.cfg.native,
        database: &database,
        revision: conn.revision,
        login: state.login(&user.cfg, cluster),
        connect_timeout: state.config.pool.connect_timeout.0,
        q: &q,
        plan: &plan,
        sql: &sql,
        held: &held,
        settings: Vec::new(),
        readonly: user.cfg.readonly,
        encoded: kept.as_mut().and_then(|k| k.encoded.take()),
        progress: Default::default(),
    };
    transport.settings = backend_settings(&plan, client_readonly);
    // A setting whose value cannot be encoded fails here, before any replica is tried.
    if let Err(e) = transport.check() {
        return answered(&exit, &mut conn.w, 400, REJECTED, exception_bytes(115, &e.to_string())).await;
    }
    let mut capture = kept.as_ref().map(|k| Capture::new(k.policy.max_entry_size, conn.mem.charge()));
    let (status, keep) = if conn.pinned.is_some() {
        pinned(&plan, &mut transport, conn).await
    } else {
        // The first statement that is not a plain read pins the session to its connection.
        let pin = plan.kind == chstorm_sql::statement::StatementKind::Write;
        answer(state, cluster, &plan, &mut transport, conn, pin, &mut capture).await
    };
    if let (Some(k), Some(c), 200) = (kept, capture, status) {
        if c.whole {
            state.cache.keep(k.key, &user.cfg.name, k.policy, c.bytes.into(), k.sent_at);
        }
    }
    if let (Some(db), 200) = (use_db, status) {
        conn.database = db;
    }
    exit.record(status, route);
    keep
}

/// Admission, as the HTTP front does it: the user's rate, then its slots and the gateway's
/// ([`admit_slots`]). A user that keeps answers (and a query without external `tables` outside a
/// pinned session) takes its slots only once its query needs a server: a kept answer is written
/// here, and the query's plan made for the lookup is handed on (a refusal by the plan is
/// written after admission, as any user's). Err: the query was answered here (refused, or
/// kept); keep the client?
async fn admit<'a>(
    state: &State,
    user: &'a Arc<UserRt>,
    cluster: &ClusterRt,
    conn: &mut ClientConn,
    q: &Query,
    tables: bool,
    exit: &Exit<'_>,
) -> Result<(Slots, Option<Box<Kept<'a>>>, Option<Planned>), bool> {
    if let Err(r) = admit_rate(user) {
        return Err(refused(exit, &mut conn.w, &r).await);
    }
    let keeps = user.cfg.cache.as_ref().filter(|c| c.keeps() && !tables && conn.pinned.is_none());
    let planned = keeps.map(|_| plan(state, user, cluster, conn, q));
    let kept = match (keeps, &planned) {
        (Some(policy), Some(Ok(p))) => match cached(state, user, cluster, conn, q, (policy, p)) {
            Cached::Hit(body, route) => return Err(answered(exit, &mut conn.w, 200, route, body.to_vec()).await),
            Cached::Miss(k) => Some(k),
            Cached::No => None,
        },
        _ => None,
    };
    match admit_slots(user, &state.global, &state.metrics).await {
        Ok(s) => Ok((s, kept, planned)),
        Err(SlotRefusal::User(r)) => Err(refused(exit, &mut conn.w, &r).await),
        // The user's slot is held until the refusal is written, as for a query admitted at once.
        Err(SlotRefusal::Global(r, _user)) => {
            Err(refused(&Exit { user: UNKNOWN_USER, ..*exit }, &mut conn.w, &r).await)
        }
    }
}

/// What [`session_statement`] made of a query.
enum Statement {
    /// A `SET` or `USE` answered by the gateway (or refused); keep the client?
    Done(bool),
    /// A query to run; `use_db` when it is a `USE` a pinned connection runs itself (so that
    /// its backend follows), to be the session's database once it succeeded.
    Query { use_db: Option<String> },
}

/// `SET` and `USE`, which the gateway keeps for the session: answered here, recorded on the
/// route `session` (or `rejected` for a `USE` it cannot read).
async fn session_statement(
    shared: &Shared,
    state: &State,
    user: &UserRt,
    cluster: &ClusterRt,
    conn: &mut ClientConn,
    q: &Query,
    exit: &Exit<'_>,
) -> Statement {
    let readings = read_all(&q.sql, cluster.grammars());
    let is = |c: &Class| readings.classes().any(|k| k == c);
    let (set_, use_) = (is(&Class::Set), is(&Class::Use));
    if !set_ && !use_ {
        return Statement::Query { use_db: None };
    }
    let reading = match readings.agreed() {
        Ok(r) if r.classes.len() == 1 => r,
        Ok(_) => {
            let msg = "Syntax error: SET and USE are statements of their own; send one at a time";
            return Statement::Done(answered(exit, &mut conn.w, 400, REJECTED, exception_bytes(62, msg)).await);
        }
        Err(d) => {
            let msg = format!("Syntax error: the gateway cannot read this SET or USE as every replica does: {d}");
            return Statement::Done(answered(exit, &mut conn.w, 400, REJECTED, exception_bytes(62, &msg)).await);
        }
    };
    if set_ {
        let (status, answer) = match set(user, cluster, conn, reading) {
            Ok(()) => (200, end_of_stream()),
            Err((code, msg)) => (400, exception_bytes(code, &msg)),
        };
        return Statement::Done(answered(exit, &mut conn.w, status, "session", answer).await);
    }
    let Some(db) = use_target(reading) else {
        let msg =
            format!("Syntax error: USE needs one database name: {:?}", q.sql.chars().take(100).collect::<String>());
        return Statement::Done(answered(exit, &mut conn.w, 400, REJECTED, exception_bytes(62, &msg)).await);
    };
    if conn.pinned.is_some() {
        // A pinned connection runs the USE itself, so its backend follows.
        return Statement::Query { use_db: Some(db) };
    }
    let login = state.login(&user.cfg, cluster);
    let (status, answer) = match check_database(shared, state, cluster, login, &db, conn.revision).await {
        Ok(()) => {
            conn.database = db;
            (200, end_of_stream())
        }
        Err((code, msg)) => (400, exception_bytes(code, &msg)),
    };
    Statement::Done(answered(exit, &mut conn.w, status, "session", answer).await)
}

/// A query's plan and the client's own `readonly` ([`plan`]), or why the plan refused it.
type Planned = Result<(Plan, Option<String>), Refusal>;

/// The plan, as for HTTP, of a [`QueryRequest`] whose parameters are the session's and the
/// Query packet's settings, the session's database and the query_id; with the client's own
/// `readonly`, which goes apart.
fn plan(state: &State, user: &UserRt, cluster: &ClusterRt, conn: &ClientConn, q: &Query) -> Planned {
    let (mut params, client_readonly) = session_params(&conn.settings, &q.settings);
    if !conn.database.is_empty() {
        params.push(("database".into(), conn.database.clone()));
    }
    params.push(("query_id".into(), q.query_id.clone()));
    let mut req = QueryRequest::native(params, &q.sql, state.config.limits.max_query_depth);
    req.grammars = cluster.grammars();
    let max_per_query = cluster.budget.as_ref().map(|b| b.cfg.max_per_query);
    let plan = crate::query::plan::plan(req, &user.cfg, &cluster.cfg, max_per_query, new_query_id)?;
    Ok((plan, client_readonly))
}

/// Runs the attempts (the HTTP port's loop, [`crate::attempt::attempts`]) while watching the
/// client, then relays the winner's answer; (status for the metrics, keep the client).
async fn answer(
    state: &State,
    cluster: &ClusterRt,
    plan: &Plan,
    transport: &mut Native<'_>,
    conn: &mut ClientConn,
    pin: bool,
    capture: &mut Option<Capture>,
) -> (u16, bool) {
    let ctx = cluster.attempt_ctx(state, transport.login, cluster.native_head_times(plan.target));
    // Client packets before the answer's head: INSERT data (a client waits for the header
    // block first, but may not), held for the winner.
    // Held on the connection's account, as the external tables are.
    let mut early: Vec<u8> = Vec::new();
    let mut _early_charge = conn.mem.charge();
    // A held read's progress goes to the client as it runs.
    let (progress, revision) = (transport.progress.clone(), conn.revision);
    // The earliest time of the next Progress write (none before the first): at most one every
    // PROGRESS_EVERY.
    let mut next_progress = None;
    let outcome = {
        let attempts = crate::attempt::attempts(plan, transport, &ctx);
        tokio::pin!(attempts);
        loop {
            tokio::select! {
                biased;
                o = &mut attempts => break o,
                _ = progress.ready(next_progress) => {
                    next_progress = Some(tokio::time::Instant::now() + PROGRESS_EVERY);
                    let sent = progress_then(&progress, revision, Vec::new());
                    // Dropping the attempts cancels their queries (KILL QUERY by query_id).
                    if !sent.is_empty() && conn.w.write_all(&sent).await.is_err() {
                        return (499, false);
                    }
                }
                _ = conn.ready() => match conn.read_packet().await {
                    ClientPacket::Data { raw, charge, .. } => {
                        early.extend_from_slice(&raw);
                        _early_charge.absorb(charge.unwrap_or_else(|| conn.mem.charge()));
                    }
                    // Dropping the attempts cancels their queries (KILL QUERY by query_id).
                    ClientPacket::Cancel => {
                        let mut end = Vec::new();
                        chstorm_proto::native::wire::put_varuint(&mut end, server::END_OF_STREAM);
                        return (499, say(&mut conn.w, end).await);
                    }
                    ClientPacket::Ping | ClientPacket::KeepAlive => {}
                    p => {
                        let status = if matches!(p, ClientPacket::TooBig(_)) { 413 } else { 499 };
                        return (status, refuse_packet(conn, p).await);
                    }
                },
            }
        }
    };
    match outcome {
        Outcome::Failed { status, message, .. } => {
            let code = http_exception_code(None, message.as_bytes()).unwrap_or(1002);
            let text = message.strip_prefix(&format!("Code: {code}. ")).unwrap_or(&message);
            let out = progress_then(&progress, revision, exception_bytes(code, text));
            (status.as_u16(), say(&mut conn.w, out).await)
        }
        Outcome::Answer(answered) => {
            let Answered { head, mut won, .. } = *answered;
            let NativeHead { conn: backend, code, exception, raw, undelimited } = head;
            let raw = progress_then(&progress, revision, raw);
            let Some(mut backend) = backend else {
                // The server refused the Hello (no such database, a bad login): no query ran.
                won.guard.disarm();
                return (500, say(&mut conn.w, raw).await);
            };
            if !early.is_empty() && backend.w.write_all(&early).await.is_err() {
                let msg = "chstorm gateway: the replica failed while the client's data was sent";
                won.guard.reason = "replica_failed";
                return (502, say(&mut conn.w, exception_bytes(210, msg)).await);
            }
            let end = if undelimited {
                if let Some(c) = capture {
                    c.spoil();
                }
                let deadline = plan.body_deadline.map(|d| tokio::time::Instant::now() + d);
                let BackendConn { io, w, .. } = &mut *backend;
                stream_through(conn, io, w, &raw, deadline).await
            } else {
                let first = First { code, exception, raw };
                relay(conn, &mut backend, (transport.q.compression, plan), Some(first), capture).await
            };
            settle(state, transport, conn, backend, &mut won, end, pin)
        }
    }
}

/// After the winner's answer was relayed: its KILL guard, and where its backend connection goes
/// (the pool, the session it pins, or closed); (status for the metrics, keep the client).
fn settle(
    state: &State,
    transport: &Native<'_>,
    conn: &mut ClientConn,
    backend: Box<BackendConn>,
    won: &mut crate::attempt::Won,
    end: End,
    pin: bool,
) -> (u16, bool) {
    match end {
        End::Done { clean, server_ended, status, undelimited } => {
            if server_ended {
                won.guard.disarm();
            } else {
                won.guard.reason = if status == 504 { "timeout" } else { "replica_failed" };
            }
            if pin && undelimited {
                // The state it would pin the session to is on a connection left in an unknown
                // place: the session ends instead of losing it unseen.
                return (status, false);
            }
            if pin && server_ended && !backend.io.has_buffered() {
                conn.pinned = Some(Pinned::new(backend, state.metrics.native_pinned.clone()));
            } else if clean {
                transport.pool.put(backend);
            }
            (status, true)
        }
        End::Cut(status) => {
            won.guard.reason = "timeout";
            (status, false)
        }
        End::ClientGone => {
            won.guard.reason = "client_gone";
            // Cancel on the connection too; dropping it closes it.
            let _ = backend.w.try_write(&[chstorm_proto::native::packets::client::CANCEL as u8]);
            (499, false)
        }
    }
}

/// The exception of an answer cut at `plan`'s deadline, naming the user's cap that set it.
fn past_deadline(plan: &Plan) -> String {
    let secs = plan.body_deadline.unwrap_or_default().as_secs();
    let why = format!("chstorm gateway: no answer within {secs} s; the query was killed");
    match plan.time_cap {
        Some(cap) => format!("{why} ({})", crate::query::plan::time_cap_note(cap)),
        None => why,
    }
}

/// How a relay ended.
enum End {
    /// The answer ended (EndOfStream or an exception): `clean` when the connection may be
    /// pooled; `server_ended` when the server ended it (no KILL needed); `status` for the metrics;
    /// `undelimited` when its end was streamed through ([`stream_through`]): the backend
    /// connection's state is not known.
    Done { clean: bool, server_ended: bool, status: u16, undelimited: bool },
    /// An undelimited answer stopped at the body deadline: the client's stream is mid-block, so
    /// its connection closes (and the query is killed).
    Cut(u16),
    /// The client left or broke the protocol: close it (and cancel the query).
    ClientGone,
}

/// The answer's first packet, already read by the attempt.
struct First {
    code: u64,
    exception: Option<i32>,
    raw: Vec<u8>,
}

/// Relays the answer to the client, from its first packet (read here when not given), and the client's packets to the
/// backend, until the answer ends, the client leaves, or the body deadline passes.
/// What was written goes to `capture` too, when it is kept (spoilt by a cancel or a stream
/// passed through).
async fn relay(
    conn: &mut ClientConn,
    b: &mut BackendConn,
    (compressed, plan): (bool, &Plan),
    first: Option<First>,
    capture: &mut Option<Capture>,
) -> End {
    let body_deadline = plan.body_deadline.map(|d| tokio::time::Instant::now() + d);
    let mut cancelled = false;
    let mut out: Vec<u8> = Vec::new();
    // Each packet read, before it joins `out`.
    let mut packet: Vec<u8> = Vec::new();
    // The last write to the client; none yet, so what was held goes out at once, a Progress
    // packet among it too.
    let mut last_write: Option<std::time::Instant> = None;
    let mut next = first.map(|f| (Ok(Packet { code: f.code, exception: f.exception }), f.raw));
    loop {
        packet.clear();
        let result = match next.take() {
            Some((p, raw)) => {
                packet = raw;
                p
            }
            None => match next_packet(conn, b, compressed, &mut packet, body_deadline, &mut cancelled, capture).await {
                Read::Packet(r) => r,
                Read::ClientGone => return End::ClientGone,
                Read::Deadline => {
                    out.extend_from_slice(&exception_bytes(159, &past_deadline(plan)));
                    let _ = conn.w.write_all(&out).await;
                    return End::Done { clean: false, server_ended: false, status: 504, undelimited: false };
                }
            },
        };
        let (code, exc) = match result {
            Ok(p) => (p.code, p.exception),
            Err(chstorm_proto::ProtoError::UnknownType(_)) => {
                if let Some(c) = capture.as_mut() {
                    c.spoil();
                }
                out.extend_from_slice(&packet);
                return stream_through(conn, &mut b.io, &mut b.w, &out, body_deadline).await;
            }
            Err(e) => {
                out.extend_from_slice(&exception_bytes(
                    210,
                    &format!("chstorm gateway: the replica failed mid-answer: {e}"),
                ));
                let _ = conn.w.write_all(&out).await;
                return End::Done { clean: false, server_ended: false, status: 502, undelimited: false };
            }
        };
        let end = code == server::END_OF_STREAM || code == server::EXCEPTION;
        let status_only = code == server::PROGRESS || code == server::PROFILE_INFO;
        let quiet = last_write.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY);
        let drained = !b.io.has_buffered() && (!status_only || quiet);
        if end || out.len() + packet.len() >= FLUSH_AT || drained {
            // Nothing gathered before it (a held answer that is whole, most often): the packet
            // goes out as it is, not copied into `out` first.
            let bytes = if out.is_empty() {
                &packet
            } else {
                out.extend_from_slice(&packet);
                &out
            };
            if let Some(c) = capture.as_mut() {
                c.add(bytes);
            }
            if conn.w.write_all(bytes).await.is_err() {
                return End::ClientGone;
            }
            if !end {
                last_write = Some(std::time::Instant::now());
            }
            out.clear();
        } else {
            out.extend_from_slice(&packet);
        }
        if end {
            let clean = code == server::END_OF_STREAM && !cancelled && !b.io.has_buffered();
            let status = if exc.is_some() { 500 } else { 200 };
            return End::Done { clean, server_ended: true, status, undelimited: false };
        }
    }
}

/// What [`next_packet`] read.
enum Read {
    Packet(Result<Packet, chstorm_proto::ProtoError>),
    /// The client left or broke the protocol (its packet refused).
    ClientGone,
    /// The body deadline passed first.
    Deadline,
}

/// Reads the replica's next packet into `packet`, passing the client's packets on meanwhile:
/// its Data to the replica, its Cancel too (which sets `cancelled` and spoils `capture`).
async fn next_packet(
    conn: &mut ClientConn,
    b: &mut BackendConn,
    compressed: bool,
    packet: &mut Vec<u8>,
    body_deadline: Option<tokio::time::Instant>,
    cancelled: &mut bool,
    capture: &mut Option<Capture>,
) -> Read {
    let BackendConn { io, w: bw, scratch, revision, .. } = b;
    let read = read_server_packet(io, *revision, compressed, scratch, packet);
    tokio::pin!(read);
    loop {
        let sleep = until(body_deadline);
        tokio::select! {
            biased;
            r = &mut read => return Read::Packet(r),
            _ = conn.ready() => match conn.read_packet().await {
                ClientPacket::Data { raw, .. } => {
                    // A broken backend shows in the read.
                    let _ = bw.write_all(&raw).await;
                }
                ClientPacket::Cancel => {
                    *cancelled = true;
                    if let Some(c) = capture.as_mut() {
                        c.spoil();
                    }
                    let _ = bw.write_all(&[chstorm_proto::native::packets::client::CANCEL as u8]).await;
                }
                ClientPacket::Ping | ClientPacket::KeepAlive => {}
                p => {
                    refuse_packet(conn, p).await;
                    return Read::ClientGone;
                }
            },
            _ = sleep => return Read::Deadline,
        }
    }
}

/// Resolves at `deadline`; never without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Passes the rest of an answer the gateway cannot delimit (a block with rows of a column type
/// it does not know: an aggregate function's state, `Variant`, `Dynamic`, `JSON`) to the client
/// as it comes, `pending` first. The client's Data and Cancel packets go on to the replica; its
/// next Query or Ping says the answer is over (a client sends neither before it has read its
/// answer's end), and is left for the session to read. The backend connection is then closed,
/// never pooled: where it stands is not known. Such an answer is not held, hedged or retried;
/// its query never counts against its replica.
async fn stream_through(
    conn: &mut ClientConn,
    io: &mut chstorm_proto::native::wire::Io<tokio::net::tcp::OwnedReadHalf>,
    bw: &mut tokio::net::tcp::OwnedWriteHalf,
    pending: &[u8],
    body_deadline: Option<tokio::time::Instant>,
) -> End {
    let ended = End::Done { clean: false, server_ended: true, status: 200, undelimited: true };
    if conn.w.write_all(pending).await.is_err() {
        return End::ClientGone;
    }
    let mut chunk = Vec::with_capacity(64 << 10);
    loop {
        let sleep = until(body_deadline);
        tokio::select! {
            biased;
            r = io.fill_some() => {
                if r.is_err() {
                    return ended; // the server closed: its answer is what it sent
                }
                chunk.clear();
                chunk.extend_from_slice(io.buffered());
                io.consume(chunk.len());
                if conn.w.write_all(&chunk).await.is_err() {
                    return End::ClientGone;
                }
            }
            _ = conn.ready() => {
                let next = conn.io.buffered().first().map(|b| u64::from(*b));
                if matches!(next, Some(chstorm_proto::native::packets::client::QUERY | chstorm_proto::native::packets::client::PING)) {
                    return ended;
                }
                match conn.read_packet().await {
                    ClientPacket::Data { raw, .. } => {
                        let _ = bw.write_all(&raw).await;
                    }
                    ClientPacket::Cancel => {
                        let _ = bw.write_all(&[chstorm_proto::native::packets::client::CANCEL as u8]).await;
                    }
                    p => {
                        refuse_packet(conn, p).await;
                        return End::ClientGone;
                    }
                }
            }
            // Inside a block the client could read no exception: its connection closes.
            _ = sleep => return End::Cut(504),
        }
    }
}

/// The progress added up since the last one sent, as one Progress packet, then `rest`.
fn progress_then(progress: &HeldProgress, revision: u64, rest: Vec<u8>) -> Vec<u8> {
    let Some(p) = progress.take() else { return rest };
    let mut out = Vec::with_capacity(16 + rest.len());
    p.encode(&mut out, revision);
    out.extend_from_slice(&rest);
    out
}

/// An EndOfStream packet: the answer to a statement without rows.
fn end_of_stream() -> Vec<u8> {
    let mut end = Vec::with_capacity(1);
    chstorm_proto::native::wire::put_varuint(&mut end, server::END_OF_STREAM);
    end
}

/// The settings of one query: the session's (`SET`), then the Query packet's, one value per
/// name (the later wins); `readonly` apart, as (params without it, its value).
fn session_params(session: &[(String, String)], query: &[(String, String)]) -> (Vec<(String, String)>, Option<String>) {
    let mut params: Vec<(String, String)> = Vec::with_capacity(session.len() + query.len());
    for (k, v) in session.iter().chain(query) {
        params.retain(|(pk, _)| pk != k);
        params.push((k.clone(), v.clone()));
    }
    let readonly = params.iter().position(|(k, _)| k == "readonly").map(|i| params.remove(i).1);
    (params, readonly)
}

/// `SET a = 1, b = 'x'`: checked by the same rules as the Query packet's settings (the user's
/// allow-list and read-only rules, through [`crate::query::plan`]), and 18.16's own (a known setting,
/// a value of its type, nothing changed under `readonly = 1`, `readonly` kept under
/// `readonly = 2`); then kept in the session. A refusal changes nothing.
fn set(user: &UserRt, cluster: &ClusterRt, conn: &mut ClientConn, sql: &Reading<'_>) -> Result<(), (i32, String)> {
    let pairs = chstorm_sql::rules::settings_of(&sql.tokens).map_err(|e| (62, format!("Syntax error: {e}")))?;
    if pairs.is_empty() {
        return Err((62, "Syntax error: SET needs name = value".into()));
    }
    let (_, session_ro) = session_params(&conn.settings, &[]);
    for (k, v) in &pairs {
        let locked = match session_ro.as_deref() {
            Some("1") => true,
            Some("2") => k == "readonly",
            _ => false,
        };
        if locked {
            return Err((164, format!("Cannot modify '{k}' setting in readonly mode")));
        }
        if k == "readonly" && !matches!(v.as_str(), "0" | "1" | "2") {
            return Err((36, format!("readonly is 0, 1 or 2, not {v}")));
        }
        // In the typed format (18.16's revision) a value must be of its setting's type; from
        // 54429 every value is a string the server checks itself.
        let auto = k == "max_threads" && v.eq_ignore_ascii_case("auto");
        let value =
            if auto && conn.revision < chstorm_proto::native::packets::rev::SETTINGS_AS_STRINGS { "0" } else { v };
        super::settings::put_setting_at(&mut Vec::new(), k, value, 0, conn.revision)
            .map_err(|e| (115, e.to_string()))?;
    }
    let params: Vec<(String, String)> = pairs.iter().filter(|(k, _)| k != "readonly").cloned().collect();
    let req = QueryRequest::native(params, "SELECT 1", crate::config::DEFAULT_MAX_QUERY_DEPTH);
    let max_per_query = cluster.budget.as_ref().map(|b| b.cfg.max_per_query);
    crate::query::plan::plan(req, &user.cfg, &cluster.cfg, max_per_query, String::new)
        .map_err(|r| (r.kind.code(), r.native_text().to_string()))?;
    for (k, mut v) in pairs {
        if k == "max_threads"
            && v.eq_ignore_ascii_case("auto")
            && conn.revision < chstorm_proto::native::packets::rev::SETTINGS_AS_STRINGS
        {
            v = "0".into(); // 18.16's MaxThreads: 0 is auto
        }
        conn.settings.retain(|(sk, _)| *sk != k);
        conn.settings.push((k, v));
    }
    Ok(())
}

/// The database of `USE name` (a name, bare or quoted; then only `;`, white space and
/// comments).
fn use_target(sql: &Reading<'_>) -> Option<String> {
    match sql.tokens.as_slice() {
        [u, name, rest @ ..] if u.is_kw("USE") && rest.iter().all(|t| t.is_punct(";")) => {
            name.ident().filter(|n| !n.is_empty())
        }
        _ => None,
    }
}

/// Checks that `database` exists for `login` (the user's), on a connection opened to it (kept
/// in the pool): Err is the server's exception for a client's mistake (Code 81, or 291 for a
/// database the login may not use), or 210 when no replica answers. Marks nothing down.
async fn check_database(
    shared: &Shared,
    state: &State,
    cluster: &ClusterRt,
    login: &Arc<BackendLogin>,
    database: &str,
    revision: u64,
) -> Result<(), (i32, String)> {
    let mut last = String::from("no replica");
    for r in cluster.balancer.replicas() {
        let Some(native) = cluster.cfg.native.get(&r.addr.base) else { continue };
        if let Some(c) = shared.pool.take(native, login, database, revision) {
            shared.pool.put(c);
            return Ok(());
        }
        match BackendConn::connect(native, database, revision, login, state.config.pool.connect_timeout.0).await {
            Ok(c) => {
                shared.pool.put(c);
                return Ok(());
            }
            Err(e) if e.blames_client() => return Err(e.refused.unwrap_or_default()),
            Err(e) => last = e.message,
        }
    }
    Err((210, format!("no replica answers on its native port ({last})")))
}

/// Runs a query on the session's pinned connection: no other replica, no retry; when that
/// connection is lost the client gets the error (Code 210) and its connection is closed, as
/// when a server dies, since the state it held is gone.
async fn pinned(plan: &Plan, transport: &mut Native<'_>, conn: &mut ClientConn) -> (u16, bool) {
    let Some(mut p) = conn.pinned.take() else { return (500, false) };
    // No thread grant on a pinned connection: the threads the query would want (the client's
    // max_threads, else the budget's per-query maximum) go as max_threads.
    let packet = match transport.query_packet(plan.want_threads) {
        Ok(q) => q,
        Err(e) => {
            conn.pinned = Some(p);
            return (400, say(&mut conn.w, exception_bytes(115, &e.to_string())).await);
        }
    };
    if let Err(e) = p.conn.w.write_all(&packet).await {
        let msg = format!("chstorm gateway: the connection to the session's replica was lost: {e}");
        let _ = say(&mut conn.w, exception_bytes(210, &msg)).await;
        return (502, false);
    }
    match relay(conn, &mut p.conn, (transport.q.compression, plan), None, &mut None).await {
        End::Cut(status) => (status, false),
        End::Done { server_ended, status, undelimited, .. } => {
            let keep = server_ended && !p.conn.io.has_buffered() && !undelimited;
            if keep {
                conn.pinned = Some(p);
            }
            (status, keep)
        }
        End::ClientGone => {
            let _ = p.conn.w.try_write(&[chstorm_proto::native::packets::client::CANCEL as u8]);
            (499, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_settings_then_the_query_s_and_readonly_apart() {
        let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
        let (p, ro) = session_params(
            &[kv("max_threads", "2"), kv("readonly", "1"), kv("max_block_size", "10")],
            &[kv("max_threads", "3")],
        );
        assert_eq!(p, vec![kv("max_block_size", "10"), kv("max_threads", "3")]);
        assert_eq!(ro.as_deref(), Some("1"));
        assert_eq!(session_params(&[kv("readonly", "2")], &[kv("readonly", "0")]).1.as_deref(), Some("0"));
    }

    #[test]
    fn use_targets() {
        let use_target = |sql: &str| {
            let r = chstorm_sql::reading::read(sql, chstorm_sql::reading::Grammars::ALL).unwrap();
            use_target(&r)
        };
        assert_eq!(use_target("USE db1").as_deref(), Some("db1"));
        assert_eq!(use_target("  use `my db`;").as_deref(), Some("my db"));
        assert_eq!(use_target("USE \"x\" ; ").as_deref(), Some("x"));
        assert_eq!(use_target("-- c\nUSE d").as_deref(), Some("d"));
        assert_eq!(use_target("USE default;\n\n-- Reattach MV (shortcut)\n").as_deref(), Some("default"));
        assert_eq!(use_target("USE /* c */ d; /* e */").as_deref(), Some("d"));
        assert_eq!(use_target("USE"), None);
        assert_eq!(use_target("USE a b"), None);
    }
}
