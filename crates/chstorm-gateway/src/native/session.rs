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

use super::backend::BackendConn;
use super::client::{ClientConn, ClientPacket, Shared, SHUTDOWN_WAIT};
use super::client_io::{ClientRead, ClientWrite};
use crate::metrics::PhaseLabel;
use crate::query::auth::authenticate;
use crate::query::exit::Exit;
use crate::state::{State, UserRt};
use chstorm_proto::native::packets::server;
use chstorm_proto::native::server::block::Scratch;
use chstorm_proto::native::server::packets::{self, ClientHello, MIN_CLIENT_REVISION};
use chstorm_proto::native::wire::Io;
use chstorm_proto::native::{ServerInfo, CLIENT_REVISION};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

/// How long a client connection may sit idle between queries: 1 hour (18.16's
/// `idle_connection_timeout`).
const IDLE_CLIENT: Duration = Duration::from_secs(3600);

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
        // From 54458 the client says its quota key once it has read the Hello
        // (`TCPHandler::receiveAddendum`). The backend connections, shared by the gateway's
        // clients, do not carry it.
        if revision >= chstorm_proto::native::packets::rev::ADDENDUM {
            let addendum = io.string_max(packets::MAX_HELLO_STRING);
            tokio::time::timeout(hello_timeout, addendum).await.ok()?.ok()?;
        }
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
            ClientPacket::TablesStatus(request) => {
                let state = shared.state.load_full();
                super::status::answer(&shared, &state, &user, &mut conn, &request).await
            }
            // A Cancel after the query ended, stray data, a keep-alive: nothing to do.
            ClientPacket::Cancel | ClientPacket::Data { .. } | ClientPacket::KeepAlive => true,
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
    let user = match authenticate(&state.users, name, &hello.password, Some(peer.ip())) {
        Ok(u) => u,
        Err(d) => {
            // ClickHouse 18.16: 193 (WRONG_PASSWORD) for a wrong password, 192 for an unknown
            // user, 195 (IP_ADDRESS_NOT_ALLOWED) for a network; the gateway does not tell an
            // unknown user from a wrong password (the refusal's kind gives the code).
            Exit::new(&state.metrics, &d.label).refused(&d.refusal);
            let _ = w.write_all(&refuse(d.refusal.kind.code(), d.refusal.native_text().to_string())).await;
            return None;
        }
    };
    // The revision: the highest the client, the gateway and the replicas all speak. The backends'
    // Hello tells theirs; the gateway announces `min(54460, theirs)`, and the client then speaks
    // the lower of that and its own, as with a server.
    let offered = hello.revision.min(CLIENT_REVISION);
    let info = match server_info(shared, state, &user.cfg, &hello.database, offered).await {
        Ok(i) => i,
        Err((code, msg)) => {
            let _ = w.write_all(&refuse(code, msg)).await;
            return None;
        }
    };
    // The lowest revision a replica of the cluster said in its Hello (a rolling upgrade mixes
    // them), else the first Hello's: every backend connection of the session then speaks it.
    let lowest = state
        .clusters
        .get(&user.cfg.cluster)
        .and_then(|c| c.balancer.replicas().filter_map(|r| r.version().and_then(|v| v.revision)).min());
    let announced = lowest.unwrap_or(info.revision).min(CLIENT_REVISION);
    let revision = hello.revision.min(announced);
    let mut out = Vec::with_capacity(64);
    packets::server_hello(&mut out, &info, announced, revision);
    w.write_all(&out).await.ok()?;
    Some((user, revision))
}

/// The backends' Hello, from the first connection the gateway makes, as `user`'s login (it then
/// goes to the pool, for that login). Err: the exception for the client, the server's own when
/// it refused the Hello for the client's reason (a database that does not exist: Code 81), else
/// 210; nothing is marked down here.
async fn server_info(
    shared: &Shared,
    state: &State,
    user: &crate::config::User,
    database: &str,
    revision: u64,
) -> Result<ServerInfo, (i32, String)> {
    if let Some(i) = shared.server_info.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        return Ok(i);
    }
    let cluster = &user.cluster;
    let c =
        state.clusters.get(cluster).ok_or_else(|| (210, format!("chstorm gateway: cluster '{cluster}' is gone")))?;
    let login = state.login(user, c);
    let mut last = String::from("no replica");
    for r in c.balancer.replicas() {
        let Some(native) = c.cfg.native.get(&r.addr.base) else { continue };
        match BackendConn::connect(native, database, revision, login, state.config.pool.connect_timeout.0).await {
            Ok(conn) => {
                r.observe_hello(&conn.server);
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
