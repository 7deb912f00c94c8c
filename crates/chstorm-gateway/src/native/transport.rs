//! The native [`Transport`] of the attempt loop (`crate::attempt`): an attempt takes a pooled
//! (or new) backend connection to its replica's native port, sends the Query packet and the
//! held external tables, and resolves at the answer's first packet, its *head*. So the native
//! port hedges, re-issues on down and retries through the very loop the HTTP port uses.
//!
//! The head of a native read is its whole answer, up to [`HOLD_AT`] (256 KiB) and up to the
//! per-try deadline: the packets are held, not relayed, until EndOfStream, an exception, that
//! much has come, or the first Progress packet after the per-try deadline ([`Live::hold`];
//! 18.16 sends a Progress packet every 100 ms of a running read, so a working read is let go
//! within about 100 ms of the deadline, and its progress reaches the client from then on, while
//! the attempt loop hedges no more). A slow small answer's blocks arriving after the deadline do
//! not let it go: its replica stopping before EndOfStream would hold it for as long as it is
//! stopped (a lookup on a loaded machine outlives a 20 ms deadline). Every packet read is a sign of work ([`Live::activity`]): a
//! replica that sends Progress is never hedged. So, as
//! over HTTP, a read whose replica dies or hangs before its answer is whole can still move to
//! another replica, and the per-try deadline (the hedge) and `head_timeout` run to the end of a
//! small answer. Without it, a replica stopped between a lookup's first block and its
//! EndOfStream (18.16 sends a SELECT's header block once the query is analysed, its blocks as
//! they come, then Progress, ProfileInfo and EndOfStream, each in its own write) held that query
//! for as long as it was stopped: 3 s in a test. A larger answer is relayed from 256 KiB on, as it
//! comes. A write's head is its first packet: an INSERT's header block asks the client for its
//! data. The native port keeps its own head-time window per route
//! (`ClusterRt::native_head_times`), since its answers come in another rhythm than HTTP ones.
use super::backend::{BackendConn, Pool};
use crate::attempt::{Judged, Live, Transport};
use crate::cluster::replica::Replica;
use crate::cluster::upstream::{BackendError, BoxFuture};
use crate::query::plan::Plan;
use chstorm_proto::native::packets::{read_exception, rev, server, skip_profile_info, skip_progress};
use chstorm_proto::native::server::block::{skip_block, Scratch};
use chstorm_proto::native::server::packets::{self, Query};
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
    pub conn: Option<BackendConn>,
    /// The last packet's code (`server::DATA`, `server::EXCEPTION`, ...).
    pub code: u64,
    /// Its exception code, when it is an Exception.
    pub exception: Option<i32>,
    /// The packets' bytes, to relay as they are.
    pub raw: Vec<u8>,
    /// Let go at the per-try deadline before the answer ended: not an answer-head time.
    pub partial: bool,
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

/// Where and how the attempts of one native query connect.
pub struct Native<'a> {
    pub pool: Pool,
    /// Each replica's native address by its HTTP base URL (the config's `native` lists).
    pub natives: &'a BTreeMap<String, String>,
    pub database: &'a str,
    /// The revision the client negotiated; backend connections speak it too.
    pub revision: u64,
    pub user: &'a str,
    pub password: &'a str,
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
    /// The Query packet without a thread grant, built once when the settings were checked
    /// ([`Native::check`]): an attempt without a grant sends a copy instead of encoding again.
    pub ungranted: Option<Vec<u8>>,
}

impl Native<'_> {
    /// Encodes the Query packet once, before any replica is tried: a setting whose value cannot
    /// be encoded fails here. The packet is kept for the attempts that get no thread grant.
    pub fn check(&mut self) -> Result<(), super::settings::SettingError> {
        self.ungranted = Some(self.query_packet(None)?);
        Ok(())
    }

    /// The Query packet for one attempt, with `threads` granted as a real `max_threads`
    /// setting (the typed settings of revision 54412 carry it as well as a string would).
    pub fn query_packet(&self, threads: Option<usize>) -> Result<Vec<u8>, super::settings::SettingError> {
        let mut settings = self.settings.clone();
        if let Some(t) = threads {
            settings.push(("max_threads".into(), t.to_string()));
        }
        if self.readonly {
            settings.push(("readonly".into(), "1".into()));
        }
        let mut out = Vec::with_capacity(256 + self.sql.len() + self.held.len());
        packets::backend_query(&mut out, self.q, &self.plan.query_id, &settings, self.sql)?;
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
        let Some(native) = self.natives.get(&replica.addr.base).cloned() else {
            let msg = format!("replica {} has no native address in the config", replica.label());
            return Some(fail(true, msg));
        };
        let packet = match (threads, &self.ungranted) {
            (None, Some(p)) => Ok(p.clone()),
            _ => self.query_packet(threads),
        };
        let query = match packet {
            Ok(q) => q,
            Err(e) => return Some(fail(true, e.to_string())),
        };
        let (pool, revision, compressed) = (self.pool.clone(), self.revision, self.q.compression);
        // Only a read is held: an INSERT's header waits for the client's data.
        let hold = self.plan.latitude.retry;
        let (database, user, password) = (self.database.to_string(), self.user.to_string(), self.password.to_string());
        let (connect_timeout, label) = (self.connect_timeout, replica.label().to_string());
        Some(Box::pin(async move {
            let pooled = pool.take(&native, &database, revision);
            let was_pooled = pooled.is_some();
            let mut conn = match pooled {
                Some(c) => c,
                // Nothing was sent when the connection or its Hello failed: the query did not run.
                None => {
                    match BackendConn::connect(&native, &database, revision, &user, &password, connect_timeout).await {
                        Ok(c) => c,
                        // The client's mistake is its answer, and no fault of the replica's.
                        Err(e) if e.blames_client() => {
                            let (code, message) = e.refused.unwrap_or_default();
                            let mut raw = Vec::new();
                            packets::exception(&mut raw, code, &message);
                            return Ok(NativeHead {
                                conn: None,
                                code: server::EXCEPTION,
                                exception: Some(code),
                                raw,
                                partial: false,
                            });
                        }
                        Err(e) => return Err(BackendError { connect: true, message: e.message }),
                    }
                }
            };
            if conn.revision != revision {
                let message = format!(
                    "replica {label} speaks protocol revision {}, below the client's {revision}",
                    conn.revision
                );
                return Err(BackendError { connect: true, message });
            }
            let lost = |what: &str, e: &dyn std::fmt::Display| BackendError {
                connect: false,
                message: format!("{what} {native}{}: {e}", if was_pooled { " (pooled connection)" } else { "" }),
            };
            conn.w.write_all(&query).await.map_err(|e| lost("sending the query to", &e))?;
            let sent = tokio::time::Instant::now();
            let mut scratch = Scratch::default();
            let mut held = Vec::new();
            loop {
                let (read, raw) = read_server_packet(&mut conn.io, revision, compressed, &mut scratch).await;
                let p = read.map_err(|e| lost("reading the answer from", &e))?;
                live.activity.bump();
                held.extend_from_slice(&raw);
                let end = p.code == server::END_OF_STREAM || p.code == server::EXCEPTION;
                // The deadline lets go on a Progress packet, the sign of a read still at work; the
                // answer's own blocks (a slow lookup's) stay held, so it can still move if its
                // replica stops before EndOfStream.
                let due = p.code == server::PROGRESS && sent.elapsed() >= live.hold;
                if !hold || end || held.len() >= HOLD_AT || due {
                    let partial = hold && !end && held.len() < HOLD_AT;
                    return Ok(NativeHead {
                        conn: Some(conn),
                        code: p.code,
                        exception: p.exception,
                        raw: held,
                        partial,
                    });
                }
            }
        }))
    }

    fn streamed(&self) -> bool {
        false
    }

    fn head_time_counts(head: &NativeHead) -> bool {
        !head.partial
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

/// Reads one server packet whole; (what it is, its bytes).
pub async fn read_server_packet(
    io: &mut Io<OwnedReadHalf>,
    revision: u64,
    compressed: bool,
    scratch: &mut Scratch,
) -> (Result<Packet, ProtoError>, Vec<u8>) {
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
                skip_block(io, revision, compressed && code != server::LOG, scratch, super::block::server_mem())
                    .await?;
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
        Ok(Packet { code, exception: exc })
    }
    .await;
    (r, io.tee_take())
}
