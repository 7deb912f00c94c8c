//! The native [`Transport`] of the attempt loop (`crate::attempt`): an attempt takes a pooled
//! (or new) backend connection to its replica's native port, sends the Query packet and the
//! held external tables, and resolves at the answer's first packet, its *head*. So the native
//! port hedges, re-issues on down and retries through the very loop the HTTP port uses.
//!
//! The head of a native read is its whole answer, up to [`HOLD_AT`] (256 KiB): its packets are
//! held, not relayed, until EndOfStream, an exception, or that much has come. Its Progress packets
//! are held in place for its first 100 ms ([`PROGRESS_APART_AFTER`]), so a short read's answer
//! leaves byte for byte as its replica sent it; a read still running then has them taken out and
//! added up in the request's [`HeldProgress`], which the session sends to the client as it comes,
//! at most every 100 ms, and before its answer (18.16 sends one every `interactive_delay`, 100 ms,
//! of a running read, even one that has no rows yet), so a long read's progress reaches the client
//! from its first 100 ms on, ahead of its header block. Every read of new bytes from the replica
//! is a sign of work ([`crate::attempt::Live`]): a replica that sends Progress is never hedged,
//! however long its read takes. So, as over HTTP, a read whose replica dies or hangs before its
//! answer is whole (the moment a client could tell two replicas apart) can still move to another
//! replica, even one that worked for minutes first: a replica stopped between a lookup's first
//! packet and its EndOfStream does not hold the query for as long as it is stopped. The client of
//! a read that moved has seen the progress of both copies. A larger answer is relayed from
//! 256 KiB on, as it comes; from then on it stays with its replica. A write's head is its first
//! packet: an INSERT's header block asks the client for its data. The native port keeps its own
//! head-time window per route (`ClusterRt::native_head_times`), since its answers come in another
//! rhythm than HTTP ones.
use super::backend::{BackendConn, Pool};
use crate::attempt::{Judged, Live, Transport};
use crate::cluster::login::BackendLogin;
use crate::cluster::replica::Replica;
use crate::cluster::upstream::{BackendError, BoxFuture};
use crate::query::plan::Plan;
use chstorm_proto::native::packets::{
    read_exception, rev, server, skip_profile_info, skip_progress, Progress, DEFAULT_INTERACTIVE_DELAY,
};
use chstorm_proto::native::server::block::{skip_block, Scratch};
use chstorm_proto::native::server::packets::{self, Query};
use chstorm_proto::native::server::scan::{scan, Scan};
use chstorm_proto::native::wire::Io;
use chstorm_proto::rules::may_run_elsewhere;
use chstorm_proto::ProtoError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedReadHalf;

/// The answer's head (a read's packets up to EndOfStream, an exception or [`HOLD_AT`] bytes; a
/// write's first packet), read whole, and the connection it came on.
pub struct NativeHead {
    /// None when the server refused the Hello for the client's reason (no such database, a bad
    /// login): `raw` is then its exception, and no query ran.
    pub conn: Option<Box<BackendConn>>,
    /// The last packet's code (`server::DATA`, `server::EXCEPTION`, ...).
    pub code: u64,
    /// Its exception code, when it is an Exception.
    pub exception: Option<i32>,
    /// The packets' bytes, to relay as they are (a held read's Progress packets are not among
    /// them: they went to the request's [`HeldProgress`]).
    pub raw: Vec<u8>,
    /// The last packet is a block with rows of a column type the gateway cannot delimit
    /// ([`chstorm_proto::ProtoError::UnknownType`]): `raw` ends with the part of it read so far,
    /// and the rest of the answer goes to the client as it comes, undelimited
    /// ([`super::query`]).
    pub undelimited: bool,
}

impl NativeHead {
    /// A head that ends inside a block of a type the gateway cannot delimit (`raw`, so far):
    /// the rest streams through ([`super::query`]).
    fn undelimited(conn: Box<BackendConn>, raw: Vec<u8>) -> NativeHead {
        NativeHead { conn: Some(conn), code: server::DATA, exception: None, raw, undelimited: true }
    }
}

/// A read's Progress packets are held in place for this long (100 ms, 18.16's default
/// `interactive_delay`): a short read's answer leaves exactly as the replica sent it. From then
/// on they go to the client apart ([`HeldProgress`]).
pub const PROGRESS_APART_AFTER: Duration = DEFAULT_INTERACTIVE_DELAY;

/// One attempt's held answer.
struct Held {
    raw: Vec<u8>,
    revision: u64,
    /// Where its Progress packets are in `raw`, while they are held in place, and their sum.
    progress_at: Vec<(usize, usize)>,
    in_place: Progress,
    /// Its Progress packets go to the client apart.
    apart: bool,
    since: tokio::time::Instant,
}

impl Held {
    fn new(revision: u64) -> Held {
        Held {
            // A small read's whole answer (SELECT 1's is 65 bytes on 18.16) in one allocation.
            raw: Vec::with_capacity(256),
            revision,
            progress_at: Vec::new(),
            in_place: Progress::default(),
            apart: false,
            since: tokio::time::Instant::now(),
        }
    }

    /// Holds the packet read last, `raw[at..]`, where [`read_server_packet`] put it; its bytes
    /// came from the replica at `came`. A Progress packet [`PROGRESS_APART_AFTER`] into the read
    /// takes the Progress packets held so far out of the answer into `apart`, and from then on
    /// each goes there.
    fn push(&mut self, code: u64, at: usize, apart: &HeldProgress, came: tokio::time::Instant) {
        let progress = (code == server::PROGRESS).then(|| Progress::decode(&self.raw[at..], self.revision)).flatten();
        let Some(one) = progress else { return };
        if !self.apart && came.saturating_duration_since(self.since) >= PROGRESS_APART_AFTER {
            self.apart = true;
            self.raw.truncate(at);
            let mut kept = Vec::with_capacity(self.raw.len());
            let mut from = 0;
            for &(at, len) in &self.progress_at {
                kept.extend_from_slice(&self.raw[from..at]);
                from = at + len;
            }
            kept.extend_from_slice(&self.raw[from..]);
            self.raw = kept;
            self.progress_at.clear();
            self.in_place.add(&one);
            apart.add(&self.in_place);
        } else if self.apart {
            self.raw.truncate(at);
            apart.add(&one);
        } else {
            self.progress_at.push((at, self.raw.len() - at));
            self.in_place.add(&one);
        }
    }
}

/// The Progress packets of a held read's attempts taken out of their answers, added up until
/// the session sends them to the client.
#[derive(Debug, Default)]
pub struct HeldProgress {
    sum: std::sync::Mutex<Option<Progress>>,
    added: tokio::sync::Notify,
}

impl HeldProgress {
    fn add(&self, p: &Progress) {
        self.sum.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(Progress::default).add(p);
        self.added.notify_one();
    }

    /// The progress added up since the last take, if a Progress packet came.
    pub fn take(&self) -> Option<Progress> {
        self.sum.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Resolves once progress was added, and not before `not_before` (when given). (Dropped
    /// while it waits for `not_before`, it loses its wake-up: the progress then goes with the
    /// next one added, or before the answer.)
    pub async fn ready(&self, not_before: Option<tokio::time::Instant>) {
        self.added.notified().await;
        if let Some(t) = not_before {
            tokio::time::sleep_until(t).await;
        }
    }
}

/// Where an attempt's connection comes from.
enum Start {
    Pooled(Box<BackendConn>),
    Dial(Dial),
}

/// How an attempt opens a connection when none is pooled: owned, as its future outlives the
/// transport's borrows.
struct Dial {
    native: String,
    database: String,
    login: Arc<BackendLogin>,
    timeout: Duration,
}

/// One server packet, as read by [`read_server_packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    pub code: u64,
    /// The exception code, when it is an Exception.
    pub exception: Option<i32>,
}

/// A read's answer is held until it ends or reaches this size (256 KiB) before it goes to the
/// client.
pub const HOLD_AT: usize = 256 << 10;

/// The longest pace between Progress packets a read's silence is forgiven (1 s): a client's
/// larger `interactive_delay` does not keep a hung replica from being hedged.
pub const MAX_PACE: Duration = Duration::from_secs(1);

/// How often a working replica sends a Progress packet for a query with `settings`: its
/// `interactive_delay` (microseconds; 18.16's default 100 ms), at most [`MAX_PACE`].
fn pace(settings: &[(String, String)]) -> Duration {
    let set = settings.iter().rev().find(|(k, _)| k == "interactive_delay");
    let us = set.and_then(|(_, v)| v.trim().parse::<u64>().ok());
    us.map_or(DEFAULT_INTERACTIVE_DELAY, Duration::from_micros).min(MAX_PACE)
}

/// Where and how the attempts of one native query connect.
pub struct Native<'a> {
    pub pool: Pool,
    /// Each replica's native address by its HTTP base URL (the config's `native` lists).
    pub natives: &'a BTreeMap<String, String>,
    pub database: &'a str,
    /// The revision the client negotiated; backend connections speak it too.
    pub revision: u64,
    /// The login the query runs as (`crate::state::State::login`): new connections say Hello
    /// with it, and only its pooled connections are taken.
    pub login: &'a Arc<BackendLogin>,
    pub connect_timeout: Duration,
    pub q: &'a Query,
    pub plan: &'a Plan,
    pub sql: &'a str,
    /// The client's external tables, sent after the Query packet of every attempt.
    pub held: &'a [u8],
    /// The plan's settings, before the thread grant.
    pub settings: Vec<(String, String)>,
    /// `readonly = 1` goes last, for a read-only user.
    pub readonly: bool,
    /// The Query packet before and after the settings an attempt adds (its thread grant,
    /// `readonly`), encoded once ([`encode_query`]: by the cache's lookup, or when the settings
    /// are checked, [`Native::check`]): an attempt copies them around its own settings instead
    /// of encoding again.
    pub encoded: Option<Encoded>,
    /// Where the attempts of a read put its Progress packets for the client.
    pub progress: Arc<HeldProgress>,
}

/// A backend Query packet in two parts: up to its last setting, and from the end of the settings
/// on; an attempt puts its own settings between them ([`Native::query_packet`]).
pub struct Encoded {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    /// Where the settings begin in `head`: after the packet's kind, its query id and its
    /// ClientInfo. From there on the packet is the same for every query id and client.
    pub settings_at: usize,
}

/// Encodes `q`'s Query packet for a replica with `query_id`, `settings` (the plan's, before
/// an attempt's) and `sql`: a setting whose value cannot be encoded fails here.
pub fn encode_query(
    q: &Query,
    query_id: &str,
    settings: &[(String, String)],
    sql: &str,
) -> Result<Encoded, super::settings::SettingError> {
    let mut head = Vec::with_capacity(256);
    packets::backend_query_head(&mut head, q, query_id, &[])?;
    let settings_at = head.len();
    packets::backend_query_settings(&mut head, q, settings)?;
    let mut tail = Vec::with_capacity(16 + sql.len());
    packets::backend_query_tail(&mut tail, q, sql);
    Ok(Encoded { head, tail, settings_at })
}

impl Native<'_> {
    /// Encodes the Query packet, before any replica is tried, unless the cache's lookup did: a
    /// setting whose value cannot be encoded fails here. Its parts are kept for the attempts
    /// ([`Native::query_packet`]).
    pub fn check(&mut self) -> Result<(), super::settings::SettingError> {
        if self.encoded.is_none() {
            self.encoded = Some(encode_query(self.q, &self.plan.query_id, &self.settings, self.sql)?);
        }
        Ok(())
    }

    fn pace(&self) -> Duration {
        pace(&self.settings)
    }

    /// The Query packet for one attempt, with `threads` granted as a real `max_threads`
    /// setting (the typed settings of revision 54412 carry it as well as a string would), then
    /// `readonly = 1` for a read-only user, and the held external tables after it.
    pub fn query_packet(&self, threads: Option<usize>) -> Result<Vec<u8>, super::settings::SettingError> {
        let fresh;
        let Encoded { head, tail, .. } = match &self.encoded {
            Some(e) => e,
            None => {
                fresh = encode_query(self.q, &self.plan.query_id, &self.settings, self.sql)?;
                &fresh
            }
        };
        let mut out = Vec::with_capacity(head.len() + 64 + tail.len() + self.held.len());
        out.extend_from_slice(head);
        let revision = self.q.revision;
        if let Some(t) = threads {
            super::settings::put_setting_at(&mut out, "max_threads", itoa::Buffer::new().format(t), 0, revision)?;
        }
        if self.readonly {
            super::settings::put_setting_at(&mut out, "readonly", "1", 0, revision)?;
        }
        out.extend_from_slice(tail);
        out.extend_from_slice(self.held);
        Ok(out)
    }
}

impl Transport for Native<'_> {
    type Head = NativeHead;

    fn send(
        &mut self,
        replica: &Arc<Replica>,
        threads: Option<usize>,
        live: Live,
    ) -> Option<BoxFuture<Result<NativeHead, BackendError>>> {
        let fail = |connect: bool, message: String| -> BoxFuture<Result<NativeHead, BackendError>> {
            Box::pin(std::future::ready(Err(BackendError { connect, message })))
        };
        let Some(native) = self.natives.get(&replica.addr.base) else {
            let msg = format!("replica {} has no native address in the config", replica.label());
            return Some(fail(true, msg));
        };
        let query = match self.query_packet(threads) {
            Ok(q) => q,
            Err(e) => return Some(fail(true, e.to_string())),
        };
        let (revision, compressed) = (self.revision, self.q.compression);
        // Only a read is held: an INSERT's header waits for the client's data.
        let hold = self.plan.latitude.retry;
        let (progress, replica, pace) = (self.progress.clone(), replica.clone(), self.pace());
        // A pooled connection is taken now; only a new one needs the login, made owned here.
        let start = match self.pool.take(native, self.login, self.database, revision) {
            Some(c) => Start::Pooled(c),
            None => Start::Dial(Dial {
                native: native.clone(),
                database: self.database.to_string(),
                login: self.login.clone(),
                timeout: self.connect_timeout,
            }),
        };
        Some(Box::pin(async move {
            let was_pooled = matches!(start, Start::Pooled(_));
            let mut conn = match open(start, revision, &replica).await? {
                Ok(c) => c,
                Err(refused) => return Ok(refused),
            };
            if conn.revision != revision {
                let (r, c) = (replica.label(), conn.revision);
                let message = format!("replica {r} speaks protocol revision {c}, below the client's {revision}");
                return Err(BackendError { connect: true, message });
            }
            let lost = |what: &str, native: &str, e: &dyn std::fmt::Display| BackendError {
                connect: false,
                message: format!("{what} {native}{}: {e}", if was_pooled { " (pooled connection)" } else { "" }),
            };
            conn.w.write_all(&query).await.map_err(|e| lost("sending the query to", conn.native(), &e))?;
            let mut held = Held::new(revision);
            let mut reads = conn.io.reads();
            // When the bytes of the packets at hand came: one clock read per read of the socket.
            let mut came = held.since;
            loop {
                let at = held.raw.len();
                let read =
                    read_server_packet(&mut conn.io, revision, compressed, &mut conn.scratch, &mut held.raw).await;
                let p = match read {
                    Ok(p) => p,
                    // The server's answer, not a fault: no longer held, hedged or retried.
                    Err(ProtoError::UnknownType(_)) => return Ok(NativeHead::undelimited(conn, held.raw)),
                    Err(e) => return Err(lost("reading the answer from", conn.native(), &e)),
                };
                if p.code == server::PROGRESS {
                    live.activity.set_pace(pace);
                }
                // New bytes are a sign of work: the replica is not stalled (`Replica::is_stalled`).
                // Packets that came in one read are one sign.
                if conn.io.reads() != reads {
                    reads = conn.io.reads();
                    came = tokio::time::Instant::now();
                    replica.answered_at(came);
                    live.activity.bump_at(came);
                }
                let head = |conn, raw| NativeHead {
                    conn: Some(conn),
                    code: p.code,
                    exception: p.exception,
                    raw,
                    undelimited: false,
                };
                if !hold {
                    return Ok(head(conn, held.raw));
                }
                held.push(p.code, at, &progress, came);
                let end = p.code == server::END_OF_STREAM || p.code == server::EXCEPTION;
                if end || held.raw.len() >= HOLD_AT {
                    return Ok(head(conn, held.raw));
                }
            }
        }))
    }

    fn streamed(&self) -> bool {
        false
    }

    fn is_success(head: &NativeHead) -> bool {
        head.exception.is_none()
    }

    fn judge_error(head: NativeHead) -> BoxFuture<Judged<NativeHead>> {
        Box::pin(std::future::ready(match head.exception {
            Some(c) if may_run_elsewhere(c) => Judged::Busy(c, format!("Code: {c}. (ClickHouse refused the query)")),
            _ => Judged::Answer(head),
        }))
    }

    fn shape(&self) -> Option<u64> {
        Some(crate::attempt::quarantine::fingerprint(self.sql))
    }

    fn went_down(&self, replica: &Replica) {
        if let Some(native) = self.natives.get(&replica.addr.base) {
            self.pool.reset(native);
        }
    }
}

/// The attempt's connection: the pooled one, or a new one to the replica (whose Hello tells its
/// version). Ok(Err(head)): the server refused the Hello for the client's reason (a bad
/// database or login), its exception the answer, no fault of the replica's. Err: the connection
/// or its Hello failed, and nothing was sent: the query did not run.
async fn open(
    start: Start,
    revision: u64,
    replica: &Replica,
) -> Result<Result<Box<BackendConn>, NativeHead>, BackendError> {
    let d = match start {
        Start::Pooled(c) => return Ok(Ok(c)),
        Start::Dial(d) => d,
    };
    match BackendConn::connect(&d.native, &d.database, revision, &d.login, d.timeout).await {
        Ok(c) => {
            replica.observe_hello(&c.server);
            Ok(Ok(c))
        }
        Err(e) if e.blames_client() => {
            let (code, message) = e.refused.unwrap_or_default();
            let mut raw = Vec::new();
            packets::exception(&mut raw, code, &message);
            let (exception, undelimited) = (Some(code), false);
            Ok(Err(NativeHead { conn: None, code: server::EXCEPTION, exception, raw, undelimited }))
        }
        Err(e) => Err(BackendError { connect: true, message: e.message }),
    }
}

/// Reads one server packet whole and appends its bytes to `out`; on an error `out` is left as
/// it was, but for [`ProtoError::UnknownType`] (a block with rows of a type no reader here can
/// delimit), where `out` ends with the bytes of the packet read so far, for the caller to pass
/// on with the rest. A packet already whole in the read buffer is found there without awaiting
/// ([`scan`]); any other is read field by field.
pub async fn read_server_packet(
    io: &mut Io<OwnedReadHalf>,
    revision: u64,
    compressed: bool,
    scratch: &mut Scratch,
    out: &mut Vec<u8>,
) -> Result<Packet, ProtoError> {
    io.fill_some().await?; // at once when bytes are buffered
    if let Scan::Whole { code, len } = scan(io.buffered(), revision, compressed, scratch) {
        out.extend_from_slice(&io.buffered()[..len]);
        io.consume(len);
        return Ok(Packet { code, exception: None });
    }
    let at = out.len();
    io.tee_start(std::mem::take(out));
    let r = async {
        let code = io.varuint().await?;
        let mut exc = None;
        match code {
            server::DATA | server::TOTALS | server::EXTREMES | server::LOG | server::PROFILE_EVENTS => {
                if revision >= rev::TEMPORARY_TABLES {
                    io.skip_string().await?;
                }
                // Server logs and profile events are never compressed.
                let c = compressed && code != server::LOG && code != server::PROFILE_EVENTS;
                skip_block(io, revision, c, scratch, super::block::server_mem()).await?;
            }
            server::TIMEZONE_UPDATE => io.skip_string().await?,
            server::PART_UUIDS => {
                let n = io.count(1 << 24, "part UUID count").await?;
                for _ in 0..n {
                    let _: [u8; 16] = io.array().await?;
                }
            }
            server::READ_TASK_REQUEST => {}
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
        Ok(Packet { code, exception: exc })
    }
    .await;
    *out = io.tee_take();
    if r.as_ref().is_err_and(|e| !matches!(e, ProtoError::UnknownType(_))) {
        out.truncate(at);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attempt::hedge::Activity;
    use crate::config::{Config, ReplicaAddr};
    use crate::query::request::QueryRequest;
    use chstorm_proto::native::packets::empty_data;
    use chstorm_proto::native::server::packets::server_hello;
    use chstorm_proto::native::CLIENT_REVISION;
    use tokio::io::AsyncReadExt;

    /// The login `default`, without a password.
    static DEFAULT: std::sync::LazyLock<Arc<BackendLogin>> = std::sync::LazyLock::new(|| {
        Arc::new(BackendLogin::new(&crate::config::Login { user: "default".into(), password: String::new() }, 0))
    });

    const REV: u64 = 54412;
    /// How long a fake replica keeps its connection open after its answer.
    const LINGER: Duration = Duration::from_secs(5);

    /// An empty server Data block: a SELECT's header (no columns here).
    fn header() -> Vec<u8> {
        let mut h = empty_data(REV);
        h[0] = server::DATA as u8;
        h
    }

    fn progress() -> Vec<u8> {
        let mut p = Vec::new();
        Progress { rows: 10, bytes: 80, total_rows: 1000, ..Progress::default() }.encode(&mut p, REV);
        p
    }

    /// A replica's native port for one query: its Hello, then for the query each packet of
    /// `answer` in turn, each followed by its pause; it closes the connection `linger` later.
    async fn replica(answer: Vec<(Vec<u8>, Duration)>, linger: Duration) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0; 64 << 10];
            let _ = s.read(&mut buf).await.unwrap();
            let info = crate::native::tests::backend_info();
            let mut hello = Vec::new();
            server_hello(&mut hello, &info, REV, REV);
            s.write_all(&hello).await.unwrap();
            let _ = s.read(&mut buf).await.unwrap();
            for (packet, pause) in answer {
                s.write_all(&packet).await.unwrap();
                tokio::time::sleep(pause).await;
            }
            tokio::time::sleep(linger).await;
        });
        addr
    }

    /// The plan of `sql` for the example config's default user.
    fn plan_of(sql: &str) -> Plan {
        let cfg = Config::parse(include_str!("../../../../docs/gateway.example.yaml"), "g.yaml".as_ref()).unwrap();
        let req = QueryRequest::native(vec![], sql, 300);
        crate::query::plan::plan(req, &cfg.users["default"], &cfg.clusters["storm"], None, || "qid".into()).unwrap()
    }

    /// A transport for `q` under `plan` to `natives`, as the session makes one: no settings,
    /// no external tables, not read-only.
    fn transport<'a>(natives: &'a BTreeMap<String, String>, q: &'a Query, plan: &'a Plan) -> Native<'a> {
        Native {
            pool: Pool::new(1),
            natives,
            database: "default",
            revision: REV.min(CLIENT_REVISION),
            login: &DEFAULT,
            connect_timeout: Duration::from_secs(5),
            q,
            plan,
            sql: &q.sql,
            held: &[],
            settings: Vec::new(),
            readonly: false,
            encoded: None,
            progress: Default::default(),
        }
    }

    /// Sends a read to a replica answering `answer`; (its head's future, the transport's
    /// progress taken apart, the attempt's signs of work).
    async fn read_from(
        answer: Vec<(Vec<u8>, Duration)>,
        linger: Duration,
    ) -> (BoxFuture<Result<NativeHead, BackendError>>, Arc<HeldProgress>, Arc<Activity>) {
        let native = replica(answer, linger).await;
        let sql = "SELECT count() FROM items";
        let plan = plan_of(sql);
        assert!(plan.latitude.retry, "a read");
        let replica = Arc::new(Replica::new(ReplicaAddr { base: "http://r1".into(), https: false }, 1, 1));
        let natives = BTreeMap::from([("http://r1".to_string(), native)]);
        let q = Query { query_id: "qid".into(), sql: sql.into(), stage: 2, ..Query::default() };
        let mut t = transport(&natives, &q, &plan);
        let activity = Arc::new(Activity::default());
        let head = t.send(&replica, None, Live { activity: activity.clone() }).unwrap();
        (head, t.progress.clone(), activity)
    }

    #[test]
    fn an_attempt_s_packet_is_the_checked_one_with_its_grant_and_readonly_among_the_settings() {
        let sql = "SELECT 1";
        let plan = plan_of(sql);
        let q = Query { query_id: "qid".into(), sql: sql.into(), stage: 2, ..Query::default() };
        let natives = BTreeMap::new();
        let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
        for (threads, readonly) in [(None, false), (Some(3), false), (None, true), (Some(12), true)] {
            let mut t = Native {
                held: b"external tables",
                settings: vec![kv("max_block_size", "10"), kv("load_balancing", "random")],
                readonly,
                ..transport(&natives, &q, &plan)
            };
            let mut settings = t.settings.clone();
            settings.extend(threads.map(|n| kv("max_threads", &n.to_string())));
            settings.extend(readonly.then(|| kv("readonly", "1")));
            let mut want = Vec::new();
            packets::backend_query(&mut want, &q, "qid", &settings, sql).unwrap();
            want.extend_from_slice(b"external tables");
            assert_eq!(t.query_packet(threads).unwrap(), want, "unchecked, {threads:?} {readonly}");
            t.check().unwrap();
            assert_eq!(t.query_packet(threads).unwrap(), want, "checked, {threads:?} {readonly}");
        }
    }

    #[test]
    fn the_pace_is_the_query_s_interactive_delay_within_a_second() {
        let set = |v: &str| vec![("interactive_delay".to_string(), v.to_string())];
        assert_eq!(pace(&[]), Duration::from_millis(100));
        assert_eq!(pace(&set("20000")), Duration::from_millis(20));
        assert_eq!(pace(&set("3600000000")), MAX_PACE);
        assert_eq!(pace(&set("soon")), Duration::from_millis(100));
    }

    #[tokio::test]
    async fn a_short_read_leaves_as_its_replica_sent_it() {
        let eos = vec![server::END_OF_STREAM as u8];
        let answer = [header(), progress(), header(), progress(), eos];
        let (head, apart, _) = read_from(answer.iter().map(|p| (p.clone(), Duration::ZERO)).collect(), LINGER).await;
        let head = head.await.unwrap();
        assert_eq!(head.raw, answer.concat(), "byte for byte, its Progress packets in place");
        assert_eq!(apart.take(), None);
    }

    #[tokio::test]
    async fn a_long_read_sends_its_progress_apart_and_is_held_to_its_end() {
        // Its header block, 20 Progress packets 20 ms apart, 300 ms of silence (a stopped
        // server), and EndOfStream.
        let mut answer = vec![(header(), Duration::ZERO)];
        answer.extend((0..20).map(|_| (progress(), Duration::from_millis(20))));
        answer.push((vec![], Duration::from_millis(300)));
        answer.push((vec![server::END_OF_STREAM as u8], Duration::ZERO));
        let (mut head, apart, activity) = read_from(answer, LINGER).await;
        // Signs of work, and the read stays held through the silence.
        if let Ok(r) = tokio::time::timeout(Duration::from_millis(550), &mut head).await {
            panic!("let go early: {:?}", r.map(|h| h.raw));
        }
        // The packets held in place for the first 100 ms were taken out with the rest.
        let sum = apart.take().expect("progress was added up");
        assert_eq!((sum.rows, sum.bytes, sum.total_rows), (200, 1600, 20_000));
        assert!(activity.silent_for() < Duration::from_millis(300));
        let head = head.await.unwrap();
        assert_eq!(head.code, server::END_OF_STREAM);
        assert_eq!(head.raw, [header(), vec![server::END_OF_STREAM as u8]].concat());
        assert_eq!(apart.take(), None);
    }

    #[tokio::test]
    async fn a_read_cut_before_its_end_is_the_attempt_s_failure() {
        // A replica killed after its header block and a Progress: nothing of the answer is
        // handed on; the attempt fails (and the attempt loop may send the read elsewhere).
        let answer = vec![(header(), Duration::ZERO), (progress(), Duration::ZERO)];
        let (head, _, _) = read_from(answer, Duration::ZERO).await;
        let e = tokio::time::timeout(Duration::from_secs(5), head).await.expect("the break is seen").err().unwrap();
        assert!(!e.connect, "the query was sent: its outcome is unknown");
        assert!(e.message.starts_with("reading the answer from"), "{}", e.message);
    }
}
