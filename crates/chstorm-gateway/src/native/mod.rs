//! ClickHouse's native TCP protocol on `listen_native`: the gateway acts as a ClickHouse server
//! towards the client and as a client towards the replicas, with the HTTP path's users, rules,
//! plan, replica choice, retry policy and budget.
//!
//! # Revision
//!
//! A session speaks the highest revision its client, the gateway and the replicas all speak:
//! the gateway offers at most 54460 ([`chstorm_proto::versions::NATIVE_REVISION`], which says
//! why that one) to the replicas, announces `min(54460, the lowest revision a replica of the
//! user's cluster said in its Hello)` in its own Hello, and the client
//! speaks the lower of that and its own, as with a server: 54412 over ClickHouse 18.16, 54460
//! over a current release, whatever the client (a 26.9 client offers 54492). Backend
//! connections are opened at the session's revision, so every packet relayed has one layout on
//! both sides; the gateway reads and writes each layout it speaks: settings in 18.16's typed
//! format below 54429 ([`chstorm_proto::native::server::typed_settings`]) and as strings with
//! flags from it (any setting of any release passes), the Hello addendum (54458), query
//! parameters (54459: relayed as they came), `ClientInfo` of every revision and interface (a
//! clickhouse-local or chdb client is interface 6), ProfileEvents packets, Progress with its
//! elapsed time. A client below 54401 is refused at its Hello
//! ([`chstorm_proto::native::server::packets::MIN_CLIENT_REVISION`]). A replica that speaks a
//! lower revision than a session's (one downgraded while the session lives) is not used for it.
//! Not offered: what revisions above 54460 add (password-complexity rules, interserver nonces,
//! sparse serialization, chunked packets, timezone updates), parallel replicas and interserver
//! secrets (the gateway serves initial queries only).
//!
//! # What is relayed
//!
//! Data, Progress, ProfileInfo, Totals, Extremes, Log, TableColumns, ProfileEvents, PartUUIDs,
//! TimezoneUpdate, Exception and EndOfStream from the server, Data (external tables, INSERT
//! blocks) and Cancel from the client, and a client's TablesStatusRequest (answered by a
//! replica's TablesStatusResponse): parsed
//! only to find where each packet ends, and passed on as the very bytes read
//! ([`chstorm_proto::native::server::block`]).
//! Compressed blocks (the Query packet's flag, on by default in `clickhouse-client` and always
//! in `clickhouse-benchmark`) pass as the frames they came in; LZ4, ZSTD and uncompressed
//! frames are understood.
//!
//! A block with rows of a column type the gateway cannot delimit (an aggregate function's state
//! such as `sumState`'s, `Variant`, `Dynamic`, `JSON`, `BFloat16`) is the server's answer all the
//! same: from that block on, the answer streams through to the client as it comes
//! ([`query`]'s `stream_through`), not held, hedged or retried, and its replica is not blamed.
//! The client's next Query or Ping tells that the answer is over; its backend connection is then
//! closed, and a session pinned to it ends. Blocks without rows (every SELECT's header block)
//! carry no column data, so their types need not be known.
//!
//! # Sessions
//!
//! A client connection is a session on one server ([`query`]): `SET` and `USE` are kept by the
//! gateway and applied to the connection's later queries; the first statement that is not a
//! plain read pins the connection to the backend connection it ran on ([`client::Pinned`]),
//! never pooled, closed when the client leaves.
//!
//! # TLS
//!
//! `listen_native_secure` serves the same protocol over TLS (as ClickHouse's `tcp_port_secure`),
//! with the certificate of the gateway's `tls:` section; the session code is the same, over
//! the halves of [`client_io`]. Backend connections (gateway to replica) are plain TCP.
//!
//! Modules: [`backend`] (connections and pool), [`client_io`] (a client connection, plain,
//! TLS or, in tests, in memory), [`client`] (the connection's state and the client's packets, as
//! the session and the query share them), [`session`] (one client connection, and the graceful stop),
//! [`status`] (a client's TablesStatusRequest), [`query`]
//! (one query: admission, plan, attempts, relay), [`transport`] (an attempt on a replica, for
//! the attempt loop the HTTP port uses too). The wire format, server side (the client's Hello
//! and Query, the gateway's Hello and Exception, 18.16's setting types, block boundaries), is
//! [`chstorm_proto::native::server`]'s.

pub mod backend;
pub mod cached;
pub mod client;
pub mod client_io;
pub mod query;
pub mod session;
pub mod status;
pub mod transport;

#[cfg(test)]
mod tests;

// The codec's block and setting modules, by the names the query and relay code use for them.
pub use chstorm_proto::native::server::{block, typed_settings as settings};

use crate::runtime::drain::Drain;
use crate::state::State;
use arc_swap::ArcSwap;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// What both native listeners (plain and TLS) share: one backend pool, one server Hello.
pub fn shared(state: Arc<ArcSwap<State>>, drain: Arc<Drain>) -> Arc<client::Shared> {
    let max_idle = {
        let c = &state.load().config;
        c.pool.max_idle(c.limits.max_concurrency)
    };
    Arc::new(client::Shared {
        state,
        pool: backend::Pool::new(max_idle),
        server_info: std::sync::Mutex::new(None),
        drain,
    })
}

/// Accepts native connections on `listener`, on every worker, until the tasks are aborted; each
/// is served (after a TLS handshake when `tls` is given) on the worker that took it.
pub fn spawn(
    listener: tokio::net::TcpListener,
    shared: Arc<client::Shared>,
    tls: Option<TlsAcceptor>,
    workers: &crate::runtime::workers::Workers,
) -> std::io::Result<Vec<tokio::task::JoinHandle<()>>> {
    workers.accept(listener, move |tcp, peer| session::serve(shared.clone(), tcp, peer, tls.clone()))
}
