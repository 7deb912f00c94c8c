//! A client's TablesStatusRequest (client packet 5): a distributed client (ClickHouse itself
//! as a client, `remote()` with hedged connections or `max_replica_delay_for_distributed_queries`)
//! asks for its tables' replication delay before it sends its query. A replica of the user's
//! cluster answers it: the request goes to one as it came, and its TablesStatusResponse (or its
//! exception) comes back as it came (`TCPHandler::processTablesStatusRequest`; the response's
//! layout is `TablesStatusResponse::write` in ClickHouse's `src/Client/TablesStatus.cpp`). The
//! connection goes back to the pool; a replica that cannot answer is passed over, and none is
//! marked down for it.

use super::backend::BackendConn;
use super::client::{ClientConn, Shared};
use crate::state::{State, UserRt};
use chstorm_proto::native::packets::{read_exception, server};
use chstorm_proto::native::wire::Io;
use chstorm_proto::ProtoError;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedReadHalf;

/// From this revision each table's status ends with a read-only flag
/// (`DBMS_MIN_REVISION_WITH_TABLE_READ_ONLY_CHECK`), above what the gateway speaks today.
const TABLE_READ_ONLY_CHECK: u64 = 54467;

/// Longest wait for a replica's answer to a TablesStatusRequest: 10 s.
const STATUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Answers `request` (the packet's bytes) from a replica of `user`'s cluster; false when the
/// client is gone.
pub async fn answer(shared: &Shared, state: &State, user: &UserRt, conn: &mut ClientConn, request: &[u8]) -> bool {
    let answer = match ask(shared, state, user, conn, request).await {
        Ok(bytes) => bytes,
        Err(why) => {
            let mut out = Vec::new();
            let msg = format!("chstorm gateway: no replica answered the TablesStatusRequest ({why})");
            chstorm_proto::native::server::packets::exception(&mut out, 210, &msg);
            out
        }
    };
    conn.w.write_all(&answer).await.is_ok()
}

/// The first answer a replica gives, as its bytes; Err: why none did.
async fn ask(
    shared: &Shared,
    state: &State,
    user: &UserRt,
    conn: &ClientConn,
    request: &[u8],
) -> Result<Vec<u8>, String> {
    let cluster = state.clusters.get(&user.cfg.cluster).ok_or("the user's cluster is gone")?;
    let login = state.login(&user.cfg, cluster);
    let mut last = String::from("no replica is up");
    for r in cluster.balancer.replicas().filter(|r| r.is_healthy()) {
        let Some(native) = cluster.cfg.native.get(&r.addr.base) else { continue };
        let mut b = match shared.pool.take(native, login, &conn.database, conn.revision) {
            Some(c) => c,
            None => {
                let t = state.config.pool.connect_timeout.0;
                match BackendConn::connect(native, &conn.database, conn.revision, login, t).await {
                    Ok(c) => c,
                    Err(e) => {
                        last = e.message;
                        continue;
                    }
                }
            }
        };
        if b.revision != conn.revision {
            continue;
        }
        let exchange = async {
            b.w.write_all(request).await?;
            read_response(&mut b.io, b.revision).await
        };
        match tokio::time::timeout(STATUS_TIMEOUT, exchange).await {
            Ok(Ok((bytes, clean))) => {
                if clean && !b.io.has_buffered() {
                    shared.pool.put(b);
                }
                return Ok(bytes);
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("no answer within {STATUS_TIMEOUT:?}"),
        }
    }
    Err(last)
}

/// Reads a TablesStatusResponse (or an Exception) whole: its bytes, and whether the connection
/// is clean after it.
async fn read_response(io: &mut Io<OwnedReadHalf>, revision: u64) -> Result<(Vec<u8>, bool), ProtoError> {
    io.tee_start(Vec::new());
    let r = async {
        match io.varuint().await? {
            server::TABLES_STATUS_RESPONSE => {
                let n = io.count(1 << 16, "tables in a TablesStatusResponse").await?;
                for _ in 0..n {
                    io.skip_string().await?; // database
                    io.skip_string().await?; // table
                    if io.u8().await? != 0 {
                        io.varuint().await?; // absolute_delay
                    }
                    if revision >= TABLE_READ_ONLY_CHECK {
                        io.u8().await?; // is_readonly
                    }
                }
                Ok(true)
            }
            server::EXCEPTION => match read_exception(io).await {
                ProtoError::Server { .. } => Ok(true),
                e => Err(e),
            },
            other => Err(ProtoError::Protocol(format!("packet {other} in answer to a TablesStatusRequest"))),
        }
    }
    .await;
    let bytes = io.tee_take();
    r.map(|clean| (bytes, clean))
}
