//! A client connection on the native port as the session and the query share it: the
//! listener's [`Shared`] state, the connection ([`ClientConn`]: its halves, its settings and
//! database, its memory account, the backend connection it is pinned to), and the client's
//! packets read whole ([`ClientPacket`]).

use super::backend::{BackendConn, Pool};
use super::block::{skip_block, Scratch};
use super::client_io::{ClientRead, ClientWrite};
use crate::runtime::drain::Drain;
use crate::state::State;
use arc_swap::ArcSwap;
use chstorm_proto::mem::{Charge, Mem};
use chstorm_proto::native::packets::client;
use chstorm_proto::native::server::packets::{self, Query, QueryError};
use chstorm_proto::native::server::scan::data_in;
use chstorm_proto::native::wire::Io;
use chstorm_proto::native::ServerInfo;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest wait for a session's last bytes and close to go out: 1 s.
pub(super) const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// What the native listener shares between its connections.
pub struct Shared {
    pub state: Arc<ArcSwap<State>>,
    pub pool: Pool,
    /// The backends' Hello (name, version, timezone), told to clients as the gateway's own.
    pub server_info: Mutex<Option<ServerInfo>>,
    /// The gateway's graceful stop: counts the sessions, and tells them to close.
    pub drain: Arc<Drain>,
}

/// A packet from the client, read whole.
pub enum ClientPacket {
    Query(Box<Query>),
    /// A Data packet (or a Scalar, laid out alike), its raw bytes; `empty` for the empty block
    /// that ends a run of data;
    /// `charge` holds the bytes' room on the connection's account.
    Data {
        raw: Vec<u8>,
        empty: bool,
        charge: Option<Charge>,
    },
    Cancel,
    Ping,
    /// A TablesStatusRequest (a distributed client asks for its tables' replication delay), its
    /// bytes: a replica answers it.
    TablesStatus(Vec<u8>),
    /// KeepAlive: nothing to answer.
    KeepAlive,
    /// The client left (or broke the protocol: the message says how).
    Gone(Option<String>),
    /// A Query packet with a setting the gateway cannot read.
    BadSetting(String),
    /// A packet that would pass the connection's or the gateway's memory limits
    /// (`limits.max_client_buffer_mib`, `limits.max_buffered_mib`).
    TooBig(String),
}

impl ClientPacket {
    /// The exception a client gets for a packet that ends its session (nothing for one that
    /// left without a word).
    pub fn refusal(&self) -> Option<Vec<u8>> {
        let (code, msg) = match self {
            ClientPacket::BadSetting(name) => (115, format!("Unknown setting {name}")),
            ClientPacket::TooBig(why) => (241, format!("chstorm gateway: {why}")), // MEMORY_LIMIT_EXCEEDED
            ClientPacket::Gone(Some(why)) => (101, format!("chstorm gateway: {why}")),
            _ => return None,
        };
        let mut out = Vec::new();
        packets::exception(&mut out, code, &msg);
        Some(out)
    }
}

/// The client side of a session.
pub struct ClientConn {
    pub io: Io<ClientRead>,
    pub w: ClientWrite,
    /// The negotiated revision.
    pub revision: u64,
    pub database: String,
    /// The compression flag of the last Query packet: how its Data packets come.
    pub(super) compression: bool,
    pub(super) scratch: Scratch,
    /// The connection's memory account ([`State::client_mem`]).
    pub mem: Mem,
    /// What the running query's packet holds (its text and settings), until it ends.
    pub(super) query_charge: Option<Charge>,
    /// The session's settings (`SET`), in order, one value per name: sent with every later
    /// query, before the Query packet's own.
    pub settings: Vec<(String, String)>,
    /// The backend connection this client is pinned to, once it holds state the gateway cannot
    /// replay (see [`super::query`]).
    pub pinned: Option<Pinned>,
}

/// A backend connection that belongs to one client connection: never pooled, closed when the
/// client leaves. Counted in `chstorm_gateway_native_pinned_sessions` while it lives.
pub struct Pinned {
    pub conn: Box<BackendConn>,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Pinned {
    pub fn new(conn: Box<BackendConn>, gauge: prometheus_client::metrics::gauge::Gauge) -> Pinned {
        gauge.inc();
        Pinned { conn, gauge }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

impl ClientConn {
    /// Waits until the client's next packet has begun: a byte of it is buffered, or the
    /// connection closed or failed (which the next [`ClientConn::read_packet`] reports).
    /// Cancel-safe. (A byte, not the socket's readiness: on TLS, readable bytes may be a record
    /// with no data in it, and a readiness flag can be stale until a read clears it.)
    pub async fn ready(&mut self) {
        self.io.get_mut().within_packet(false);
        let _ = self.io.fill_some().await;
    }

    /// Reads one packet whole. Not cancel-safe: a packet dropped midway leaves the stream out
    /// of step (the caller then closes the connection).
    /// A read that waits longer than `limits.client_packet_timeout` for a byte fails, and the
    /// packet is `Gone`; so does a wait for the next packet here (the caller waits with
    /// [`ClientConn::ready`] when the client owes nothing).
    pub async fn read_packet(&mut self) -> ClientPacket {
        let revision = self.revision;
        self.io.get_mut().within_packet(true);
        if let Some(p) = self.packet_in_buffer() {
            return p;
        }
        let code = match self.io.varuint().await {
            Ok(c) => c,
            Err(e) => return ClientPacket::Gone(timed_out(&e)),
        };
        match code {
            client::QUERY => {
                self.query_charge = None;
                let mut charge = self.mem.charge();
                match packets::read_query(&mut self.io, revision, &mut charge).await {
                    Ok(q) => {
                        self.compression = q.compression;
                        self.query_charge = Some(charge);
                        ClientPacket::Query(Box::new(q))
                    }
                    Err(QueryError::UnknownSetting(name)) => ClientPacket::BadSetting(name),
                    Err(QueryError::Proto(e)) => self.failed("a Query packet", e),
                }
            }
            client::DATA | client::SCALAR => {
                let io = &mut self.io;
                io.tee_start_charged(vec![code as u8], self.mem.charge());
                let read = async {
                    if revision >= chstorm_proto::native::packets::rev::TEMPORARY_TABLES {
                        io.skip_string().await?;
                    }
                    skip_block(io, revision, self.compression, &mut self.scratch, &self.mem).await
                }
                .await;
                let (raw, charge) = self.io.tee_take_charged();
                match read {
                    // A scalar goes with the query's data, and never ends it.
                    Ok(shape) => ClientPacket::Data { raw, empty: code == client::DATA && shape.is_empty(), charge },
                    Err(e) => self.failed("a data block from the client", e),
                }
            }
            client::CANCEL => ClientPacket::Cancel,
            client::PING => ClientPacket::Ping,
            client::KEEP_ALIVE => ClientPacket::KeepAlive,
            client::TABLES_STATUS_REQUEST => {
                let io = &mut self.io;
                io.tee_start_charged(vec![client::TABLES_STATUS_REQUEST as u8], self.mem.charge());
                let read = async {
                    let n = io.count(MAX_STATUS_TABLES, "tables in a TablesStatusRequest").await?;
                    for _ in 0..2 * n {
                        io.string_max(packets::MAX_HELLO_STRING).await?; // database, table
                    }
                    Ok::<_, chstorm_proto::ProtoError>(())
                }
                .await;
                let (raw, _charge) = self.io.tee_take_charged();
                match read {
                    Ok(()) => ClientPacket::TablesStatus(raw),
                    Err(e) => self.failed("a TablesStatusRequest", e),
                }
            }
            other => ClientPacket::Gone(Some(format!("packet {other} from the client is not supported"))),
        }
    }
}

impl ClientConn {
    /// A Query or Data packet already whole in the read buffer, taken without awaiting
    /// ([`packets::query_in`], [`data_in`]) as [`ClientConn::read_packet`] reads it; None for
    /// anything else, which that then reads (and refuses) field by field.
    fn packet_in_buffer(&mut self) -> Option<ClientPacket> {
        let buf = self.io.buffered();
        let (code, at) = chstorm_proto::native::wire::decode_varuint(buf).ok()??;
        match code {
            client::QUERY => {
                let mut charge = self.mem.charge();
                let (q, len) = packets::query_in(&buf[at..], self.revision, &mut charge)?;
                self.io.consume(at + len);
                self.compression = q.compression;
                self.query_charge = Some(charge);
                Some(ClientPacket::Query(Box::new(q)))
            }
            client::DATA => {
                let (len, shape) = data_in(&buf[at..], self.revision, self.compression, &mut self.scratch)?;
                let mut charge = self.mem.charge();
                charge.set(at + len).ok()?;
                let raw = buf[..at + len].to_vec();
                self.io.consume(at + len);
                Some(ClientPacket::Data { raw, empty: shape.is_empty(), charge: Some(charge) })
            }
            _ => None,
        }
    }
}

/// Most tables one TablesStatusRequest may name.
const MAX_STATUS_TABLES: u64 = 1 << 16;

/// What a timed-out read says (a client that left says nothing).
fn timed_out(e: &chstorm_proto::ProtoError) -> Option<String> {
    match e {
        chstorm_proto::ProtoError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => Some(io.to_string()),
        _ => None,
    }
}

impl ClientConn {
    /// Ends the session on a packet the gateway will not take: its exception (when the client
    /// is owed one), the write side closed, then the rest of what the client sends is read
    /// and dropped for at most [`SHUTDOWN_WAIT`] (1 s), so the close does not reset the
    /// connection (a reset can discard the exception before the client reads it).
    pub async fn refuse(&mut self, p: ClientPacket) {
        let Some(out) = p.refusal() else { return };
        if self.w.write_all(&out).await.is_err() {
            return;
        }
        let _ = tokio::time::timeout(SHUTDOWN_WAIT, async {
            let _ = self.w.shutdown().await;
            self.io.get_mut().within_packet(false);
            let _ = self.io.discard_to_eof().await;
        })
        .await;
    }

    /// A packet that could not be read: too big for the memory limits, or broken.
    fn failed(&mut self, what: &str, e: chstorm_proto::ProtoError) -> ClientPacket {
        match self.io.mem_error() {
            Some(m) => ClientPacket::TooBig(format!("{what}: {m}")),
            None => ClientPacket::Gone(Some(format!("{what}: {e}"))),
        }
    }
}
