//! One client connection on the native port: Hello and authentication, then Ping and Query
//! packets until the client leaves. The client's packets are read whole by
//! [`ClientConn::read_packet`]; while a query runs, the relay waits for the client's socket to
//! be readable (which drops nothing when the backend answers first) and only then reads a
//! packet, so it can wait for the backend and the client at once in one task (a reader task
//! with a channel cost two thread wake-ups per query).

use super::backend::{BackendConn, Pool};
use super::block::{skip_block, Scratch};
use super::packets::{self, ClientHello, Query, QueryError, MIN_CLIENT_REVISION};
use crate::state::{State, UserRt};
use arc_swap::ArcSwap;
use chstorm_proto::native::packets::{client, server};
use chstorm_proto::native::wire::Io;
use chstorm_proto::native::{ServerInfo, CLIENT_REVISION};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// How long a client connection may sit idle between queries: 1 hour (18.16's
/// `idle_connection_timeout`).
const IDLE_CLIENT: Duration = Duration::from_secs(3600);

/// What the native listener shares between its connections.
pub struct Shared {
    pub state: Arc<ArcSwap<State>>,
    pub pool: Pool,
    /// The backends' Hello (name, version, timezone), told to clients as the gateway's own.
    pub server_info: Mutex<Option<ServerInfo>>,
}

/// A packet from the client, read whole.
pub enum ClientPacket {
    Query(Box<Query>),
    /// A Data packet, its raw bytes; `empty` for the empty block that ends a run of data.
    Data {
        raw: Vec<u8>,
        empty: bool,
    },
    Cancel,
    Ping,
    /// The client left (or broke the protocol: the message says how).
    Gone(Option<String>),
    /// A Query packet with a setting the gateway cannot read.
    BadSetting(String),
}

/// The client side of a session.
pub struct ClientConn {
    pub io: Io<OwnedReadHalf>,
    pub w: OwnedWriteHalf,
    /// The negotiated revision.
    pub revision: u64,
    pub database: String,
    /// The compression flag of the last Query packet: how its Data packets come.
    compression: bool,
    scratch: Scratch,
}

impl ClientConn {
    /// Waits until a packet may be read without blocking on a half-sent one: bytes are
    /// buffered, or the socket is readable (or closed). Cancel-safe.
    pub async fn ready(&self) {
        if !self.io.has_buffered() {
            let _ = self.io.get_ref().readable().await;
        }
    }

    /// Reads one packet whole. Not cancel-safe: a packet dropped midway leaves the stream out
    /// of step (the caller then closes the connection).
    pub async fn read_packet(&mut self) -> ClientPacket {
        let revision = self.revision;
        let code = match self.io.varuint().await {
            Ok(c) => c,
            Err(_) => return ClientPacket::Gone(None),
        };
        match code {
            client::QUERY => match packets::read_query(&mut self.io, revision).await {
                Ok(q) => {
                    self.compression = q.compression;
                    ClientPacket::Query(Box::new(q))
                }
                Err(QueryError::UnknownSetting(name)) => ClientPacket::BadSetting(name),
                Err(QueryError::Proto(e)) => ClientPacket::Gone(Some(e.to_string())),
            },
            client::DATA => {
                let io = &mut self.io;
                io.tee_start(Vec::new());
                let read = async {
                    if revision >= chstorm_proto::native::packets::rev::TEMPORARY_TABLES {
                        io.skip_string().await?;
                    }
                    skip_block(io, revision, self.compression, &mut self.scratch).await
                }
                .await;
                let mut raw = vec![client::DATA as u8];
                raw.extend_from_slice(&self.io.tee_take());
                match read {
                    Ok(shape) => ClientPacket::Data { raw, empty: shape.is_empty() },
                    Err(e) => ClientPacket::Gone(Some(format!("a data block from the client: {e}"))),
                }
            }
            client::CANCEL => ClientPacket::Cancel,
            client::PING => ClientPacket::Ping,
            other => ClientPacket::Gone(Some(format!("packet {other} from the client is not supported"))),
        }
    }
}

/// Serves one client connection.
pub async fn serve(shared: Arc<Shared>, tcp: TcpStream, peer: SocketAddr) {
    let _ = tcp.set_nodelay(true);
    let (r, mut w) = tcp.into_split();
    let mut io = Io::new(r);
    let state = shared.state.load_full();
    let hello_timeout = state.config.limits.client_header_timeout.0;
    let hello = match tokio::time::timeout(hello_timeout, packets::read_client_hello(&mut io)).await {
        Ok(Ok(h)) => h,
        _ => return,
    };
    let Some((user, revision, info)) = handshake(&shared, &state, &hello, peer, &mut w).await else { return };
    let mut conn = ClientConn {
        io,
        w,
        revision,
        database: hello.database.clone(),
        compression: false,
        scratch: Scratch::default(),
    };
    loop {
        let packet = match tokio::time::timeout(IDLE_CLIENT, conn.read_packet()).await {
            Ok(p) => p,
            _ => break,
        };
        let go_on = match packet {
            ClientPacket::Ping => {
                let mut out = Vec::with_capacity(1);
                chstorm_proto::native::wire::put_varuint(&mut out, server::PONG);
                conn.w.write_all(&out).await.is_ok()
            }
            ClientPacket::Query(q) => {
                let state = shared.state.load_full();
                super::query::run(&shared, &state, &user, &mut conn, *q).await
            }
            // A Cancel after the query ended, or stray data: nothing to do.
            ClientPacket::Cancel | ClientPacket::Data { .. } => true,
            ClientPacket::BadSetting(name) => {
                let mut out = Vec::new();
                packets::exception(&mut out, 115, &format!("Unknown setting {name}"));
                let _ = conn.w.write_all(&out).await;
                false
            }
            ClientPacket::Gone(why) => {
                if let Some(why) = why {
                    let mut out = Vec::new();
                    packets::exception(&mut out, 101, &format!("chstorm gateway: {why}"));
                    let _ = conn.w.write_all(&out).await;
                }
                false
            }
        };
        if !go_on {
            break;
        }
    }
    let _ = info;
}

/// Authenticates the client and answers its Hello; None (after an Exception packet, as
/// ClickHouse sends one) when it is refused.
async fn handshake(
    shared: &Shared,
    state: &State,
    hello: &ClientHello,
    peer: SocketAddr,
    w: &mut OwnedWriteHalf,
) -> Option<(Arc<UserRt>, u64, ServerInfo)> {
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
        Err(msg) => {
            let _ = w.write_all(&refuse(210, format!("chstorm gateway: {msg}"))).await;
            return None;
        }
    };
    let mut out = Vec::with_capacity(64);
    packets::server_hello(&mut out, &info, revision);
    w.write_all(&out).await.ok()?;
    Some((user, revision, info))
}

/// The backends' Hello, from the first connection the gateway makes (which then goes to the
/// pool).
async fn server_info(
    shared: &Shared,
    state: &State,
    cluster: &str,
    database: &str,
    revision: u64,
) -> Result<ServerInfo, String> {
    if let Some(i) = shared.server_info.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        return Ok(i);
    }
    let c = state.clusters.get(cluster).ok_or_else(|| format!("cluster '{cluster}' is gone"))?;
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
            Err(e) => last = e.message,
        }
    }
    Err(format!("no replica of cluster '{cluster}' answers on its native port ({last})"))
}
