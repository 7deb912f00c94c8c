//! One client connection on the native port (plain or TLS, [`super::client_io`]): Hello and
//! authentication, then Ping and Query packets until the client leaves. The client's packets
//! are read whole by [`ClientConn::read_packet`]; while a query runs, the relay waits until a
//! first byte of the client's next packet is buffered ([`ClientConn::ready`], which drops
//! nothing when the backend answers first) and only then reads the packet, so it can wait for
//! the backend and the client at once in one task (a reader task with a channel cost two
//! thread wake-ups per query).
//!
//! # Graceful stop
//!
//! Each session is counted in the gateway's [`Drain`] while it lives. Once the gateway drains
//! (SIGTERM), a session finishes the query it is running and then closes; a session waiting
//! between queries closes when the drain's [`IDLE_GRACE`] has passed (a query sent before then
//! is served, then the session closes); a Ping while draining closes the session instead of
//! answering, so a client that pings before reusing a connection (clickhouse-client,
//! clickhouse-benchmark and most drivers do) reconnects at once, to the gateway that took over
//! the port.
//!
//! [`IDLE_GRACE`]: crate::runtime::drain::IDLE_GRACE

use super::backend::{BackendConn, Pool};
use super::client_io::{ClientRead, ClientWrite};
use crate::metrics::PhaseLabel;
use crate::runtime::drain::Drain;
use crate::state::{State, UserRt};
use arc_swap::ArcSwap;
use chstorm_proto::mem::{Charge, Mem};
use chstorm_proto::native::packets::{client, server};
use chstorm_proto::native::server::block::{skip_block, Scratch};
use chstorm_proto::native::server::packets::{self, ClientHello, Query, QueryError, MIN_CLIENT_REVISION};
use chstorm_proto::native::wire::Io;
use chstorm_proto::native::{ServerInfo, CLIENT_REVISION};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

/// How long a client connection may sit idle between queries: 1 hour (18.16's
/// `idle_connection_timeout`).
const IDLE_CLIENT: Duration = Duration::from_secs(3600);

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
    /// A Data packet, its raw bytes; `empty` for the empty block that ends a run of data;
    /// `charge` holds the bytes' room on the connection's account.
    Data {
        raw: Vec<u8>,
        empty: bool,
        charge: Option<Charge>,
    },
    Cancel,
    Ping,
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
    compression: bool,
    scratch: Scratch,
    /// The connection's memory account ([`State::client_mem`]).
    pub mem: Mem,
    /// What the running query's packet holds (its text and settings), until it ends.
    query_charge: Option<Charge>,
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
    pub conn: BackendConn,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Pinned {
    pub fn new(conn: BackendConn, gauge: prometheus_client::metrics::gauge::Gauge) -> Pinned {
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
            client::DATA => {
                let io = &mut self.io;
                io.tee_start_charged(vec![client::DATA as u8], self.mem.charge());
                let read = async {
                    if revision >= chstorm_proto::native::packets::rev::TEMPORARY_TABLES {
                        io.skip_string().await?;
                    }
                    skip_block(io, revision, self.compression, &mut self.scratch, &self.mem).await
                }
                .await;
                let (raw, charge) = self.io.tee_take_charged();
                match read {
                    Ok(shape) => ClientPacket::Data { raw, empty: shape.is_empty(), charge },
                    Err(e) => self.failed("a data block from the client", e),
                }
            }
            client::CANCEL => ClientPacket::Cancel,
            client::PING => ClientPacket::Ping,
            other => ClientPacket::Gone(Some(format!("packet {other} from the client is not supported"))),
        }
    }
}

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

/// Serves one client connection; with `tls`, after a TLS handshake (given
/// `limits.client_header_timeout`, as the Hello is).
pub async fn serve(shared: Arc<Shared>, tcp: TcpStream, peer: SocketAddr, tls: Option<TlsAcceptor>) {
    let _ = tcp.set_nodelay(true);
    let state = shared.state.load_full();
    let open = async move {
        let Some(acceptor) = tls else { return Some(super::client_io::plain(tcp)) };
        let hello_timeout = state.config.limits.client_header_timeout.0;
        match tokio::time::timeout(hello_timeout, acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => Some(super::client_io::tls(stream)),
            Ok(Err(_)) => None,
            Err(_) => {
                state.metrics.client_timeouts.get_or_create(&PhaseLabel { phase: "tls" }).inc();
                None
            }
        }
    };
    serve_client(shared, open, peer).await
}

/// Serves one client connection whose halves `open` gives (None: it could not be opened, e.g.
/// a failed TLS handshake): Hello, then packets until the client leaves. [`serve`] opens a
/// TCP or TLS connection; a test opens one in memory ([`super::client_io::in_memory`]).
pub async fn serve_client(
    shared: Arc<Shared>,
    open: impl std::future::Future<Output = Option<(ClientRead, ClientWrite)>>,
    peer: SocketAddr,
) {
    let _open = shared.drain.conn();
    let drain = shared.drain.clone();
    let state = shared.state.load_full();
    let hello_timeout = state.config.limits.client_header_timeout.0;
    // Before the first query, a session closes as soon as the drain forces it (the client
    // has sent nothing the gateway owes an answer to).
    let setup = async {
        let (r, mut w) = open.await?;
        let mut io = Io::new(r);
        io.get_mut().set_packet_timeout(state.config.limits.client_packet_timeout.0);
        let hello = match tokio::time::timeout(hello_timeout, packets::read_client_hello(&mut io)).await {
            Ok(Ok(h)) => h,
            _ => return None,
        };
        let (user, revision) = handshake(&shared, &state, &hello, peer, &mut w).await?;
        Some((io, w, hello.database, user, revision))
    };
    let setup = tokio::select! {
        s = setup => s,
        _ = drain.forced() => None,
    };
    let Some((io, w, database, user, revision)) = setup else { return };
    let mem = state.client_mem();
    let mut conn = ClientConn {
        io,
        w,
        revision,
        database,
        compression: false,
        scratch: Scratch::default(),
        mem,
        query_charge: None,
        settings: Vec::new(),
        pinned: None,
    };
    loop {
        // Between queries: wait for the client's next packet, at most IDLE_CLIENT (the
        // packet's rest included); a draining gateway closes an idle session after its grace.
        let deadline = tokio::time::Instant::now() + IDLE_CLIENT;
        let begun = tokio::select! {
            r = tokio::time::timeout_at(deadline, conn.ready()) => r.is_ok(),
            _ = drain.forced() => false,
        };
        if !begun {
            break;
        }
        let packet = match tokio::time::timeout_at(deadline, conn.read_packet()).await {
            Ok(p) => p,
            _ => break,
        };
        let go_on = match packet {
            // While draining, a Ping closes the session: the client reconnects to the gateway
            // that took over the port (see the module doc).
            ClientPacket::Ping if drain.is_draining() => false,
            ClientPacket::Ping => {
                let mut out = Vec::with_capacity(1);
                chstorm_proto::native::wire::put_varuint(&mut out, server::PONG);
                conn.w.write_all(&out).await.is_ok()
            }
            ClientPacket::Query(q) => {
                let state = shared.state.load_full();
                // The query finishes whatever the drain says; then a draining gateway closes.
                let keep = super::query::run(&shared, &state, &user, &mut conn, *q).await && !drain.is_draining();
                // The query's text and settings are gone: so is their room.
                conn.query_charge = None;
                keep
            }
            // A Cancel after the query ended, or stray data: nothing to do.
            ClientPacket::Cancel | ClientPacket::Data { .. } => true,
            p @ (ClientPacket::BadSetting(_) | ClientPacket::TooBig(_) | ClientPacket::Gone(_)) => {
                conn.refuse(p).await;
                false
            }
        };
        if !go_on {
            break;
        }
    }
    // A TLS client gets its close_notify; a client that stopped reading does not hold the
    // session (nor the drain) open.
    let _ = tokio::time::timeout(SHUTDOWN_WAIT, conn.w.shutdown()).await;
}

/// Longest wait for a session's last bytes and close to go out: 1 s.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// Authenticates the client and answers its Hello; None (after an Exception packet, as
/// ClickHouse sends one) when it is refused.
async fn handshake(
    shared: &Shared,
    state: &State,
    hello: &ClientHello,
    peer: SocketAddr,
    w: &mut ClientWrite,
) -> Option<(Arc<UserRt>, u64)> {
    let refuse = |code: i32, msg: String| {
        let mut out = Vec::new();
        packets::exception(&mut out, code, &msg);
        out
    };
    if hello.revision < MIN_CLIENT_REVISION {
        let out = refuse(
            2,
            format!(
                "chstorm gateway: client revision {} is too old; at least {MIN_CLIENT_REVISION} is needed",
                hello.revision
            ),
        );
        let _ = w.write_all(&out).await;
        return None;
    }
    let name = if hello.user.is_empty() { "default" } else { hello.user.as_str() };
    let user = match crate::layers::authenticate(state, name, &hello.password, Some(peer.ip())) {
        Ok(u) => u,
        Err(r) => {
            // ClickHouse 18.16: 193 (WRONG_PASSWORD) for a wrong password, 192 for an unknown
            // user, 195 (IP_ADDRESS_NOT_ALLOWED) for a network; the gateway does not tell an
            // unknown user from a wrong password.
            let code = if r.status == http::StatusCode::FORBIDDEN { 195 } else { 193 };
            crate::native::query::count(state, &r.label, r.status.as_u16(), "rejected");
            let _ = w.write_all(&refuse(code, r.message.trim_start_matches("chstorm gateway: ").to_string())).await;
            return None;
        }
    };
    let revision = hello.revision.min(CLIENT_REVISION);
    let info = match server_info(shared, state, &user.cfg.cluster, &hello.database, revision).await {
        Ok(i) => i,
        Err((code, msg)) => {
            let _ = w.write_all(&refuse(code, msg)).await;
            return None;
        }
    };
    let mut out = Vec::with_capacity(64);
    packets::server_hello(&mut out, &info, revision);
    w.write_all(&out).await.ok()?;
    Some((user, revision))
}

/// The backends' Hello, from the first connection the gateway makes (which then goes to the
/// pool). Err: the exception for the client, the server's own when it refused the Hello for the
/// client's reason (a database that does not exist: Code 81), else 210; nothing is marked down
/// here.
async fn server_info(
    shared: &Shared,
    state: &State,
    cluster: &str,
    database: &str,
    revision: u64,
) -> Result<ServerInfo, (i32, String)> {
    if let Some(i) = shared.server_info.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        return Ok(i);
    }
    let c =
        state.clusters.get(cluster).ok_or_else(|| (210, format!("chstorm gateway: cluster '{cluster}' is gone")))?;
    let mut last = String::from("no replica");
    for r in c.balancer.replicas() {
        let Some(native) = c.cfg.native.get(&r.addr.base) else { continue };
        match BackendConn::connect(
            native,
            database,
            revision,
            &c.cfg.user,
            &c.cfg.password,
            state.config.pool.connect_timeout.0,
        )
        .await
        {
            Ok(conn) => {
                let info = conn.server.clone();
                *shared.server_info.lock().unwrap_or_else(|e| e.into_inner()) = Some(info.clone());
                shared.pool.put(conn);
                return Ok(info);
            }
            Err(e) if e.blames_client() => return Err(e.refused.unwrap_or_default()),
            Err(e) => last = e.message,
        }
    }
    Err((210, format!("chstorm gateway: no replica of cluster '{cluster}' answers on its native port ({last})")))
}
