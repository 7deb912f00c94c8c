//! Native connections to the replicas, and their pool.
//!
//! A connection is opened with the cluster's backend credentials at the revision the client
//! negotiated (at most 54412), so the packets relayed between them have one layout. It goes back
//! to the pool only after an exchange that ended cleanly (EndOfStream, no Cancel, nothing left
//! unread); anything else drops it, which closes it. Pooled connections are keyed by replica,
//! database and revision, kept idle at most [`IDLE_TIMEOUT`], and checked for a close by the
//! server (a non-blocking read) before they are handed out. Plain TCP only: a replica's native
//! port with TLS is not supported yet.

use crate::cluster::worker::current;
use chstorm_proto::native::packets::read_server_hello;
use chstorm_proto::native::server::packets::backend_hello;
use chstorm_proto::native::wire::Io;
use chstorm_proto::native::ServerInfo;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Idle pooled connections are closed after this: 30 s (18.16 closes idle native connections
/// after `idle_connection_timeout`, 3600 s by default).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest Hello exchange with a backend after the TCP connect: 5 s.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// One native connection to a replica.
pub struct BackendConn {
    pub io: Io<OwnedReadHalf>,
    pub w: OwnedWriteHalf,
    pub server: ServerInfo,
    pub revision: u64,
    key: Key,
}

type IdleMap = HashMap<Key, Vec<(BackendConn, Instant)>>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    native: String,
    database: String,
    revision: u64,
    /// The worker thread whose reactor the connection is registered with
    /// ([`crate::cluster::worker::current`]): a connection is only handed out on its own worker.
    worker: usize,
}

/// Why a connection could not be had (the connect or the Hello failed: no query was sent).
#[derive(Debug)]
pub struct ConnectError {
    pub message: String,
    /// The server's exception to the Hello (code, its message without `DB::Exception: `): a bad
    /// database or login. Whether it counts against the replica is
    /// [`chstorm_proto::rules::blames_server`]'s call.
    pub refused: Option<(i32, String)>,
}

impl ConnectError {
    fn new(message: String) -> ConnectError {
        ConnectError { message, refused: None }
    }

    /// True when the server refused the Hello for a reason of the client's (a database that does
    /// not exist, a bad login): the replica is fine.
    pub fn blames_client(&self) -> bool {
        self.refused.as_ref().is_some_and(|(c, _)| !chstorm_proto::rules::blames_server(*c))
    }
}

impl BackendConn {
    /// Connects to `native` (`HOST:PORT`) and says Hello.
    pub async fn connect(
        native: &str,
        database: &str,
        revision: u64,
        user: &str,
        password: &str,
        connect_timeout: Duration,
    ) -> Result<BackendConn, ConnectError> {
        let tcp = match tokio::time::timeout(connect_timeout, TcpStream::connect(native)).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Err(ConnectError::new(format!("connect {native}: {e}"))),
            Err(_) => return Err(ConnectError::new(format!("connect {native}: no answer within {connect_timeout:?}"))),
        };
        let _ = tcp.set_nodelay(true);
        let (r, mut w) = tcp.into_split();
        let mut io = Io::new(r);
        let mut hello = Vec::with_capacity(64);
        backend_hello(&mut hello, revision, database, user, password);
        let exchange = async {
            w.write_all(&hello).await?;
            read_server_hello(&mut io).await
        };
        let server = match tokio::time::timeout(HELLO_TIMEOUT, exchange).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                let refused = match &e {
                    chstorm_proto::ProtoError::Server { code, message, .. } => {
                        Some((*code, message.strip_prefix("DB::Exception: ").unwrap_or(message).to_string()))
                    }
                    _ => None,
                };
                return Err(ConnectError { message: format!("hello to {native}: {e}"), refused });
            }
            Err(_) => return Err(ConnectError::new(format!("hello to {native}: no answer in 5 s"))),
        };
        let revision = revision.min(server.revision);
        let key = Key { native: native.to_string(), database: database.to_string(), revision, worker: current() };
        Ok(BackendConn { io, w, server, revision, key })
    }

    /// False when the server closed the connection (or sent something unasked).
    fn looks_alive(&self) -> bool {
        if self.io.has_buffered() {
            return false;
        }
        let mut b = [0u8; 1];
        matches!(self.io.get_ref().try_read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// Idle connections by replica, database and revision; clones share them.
#[derive(Clone)]
pub struct Pool {
    idle: Arc<Mutex<IdleMap>>,
    max_idle: usize,
}

impl Pool {
    pub fn new(max_idle_per_replica: usize) -> Pool {
        Pool { idle: Arc::new(Mutex::new(HashMap::new())), max_idle: max_idle_per_replica }
    }

    /// An idle connection, if one is alive.
    pub fn take(&self, native: &str, database: &str, revision: u64) -> Option<BackendConn> {
        let key = Key { native: native.to_string(), database: database.to_string(), revision, worker: current() };
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(&key)?;
        while let Some((c, at)) = list.pop() {
            if at.elapsed() < IDLE_TIMEOUT && c.looks_alive() {
                return Some(c);
            }
        }
        None
    }

    /// Keeps a connection whose exchange ended cleanly.
    pub fn put(&self, c: BackendConn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry(c.key.clone()).or_default();
        list.retain(|(_, at)| at.elapsed() < IDLE_TIMEOUT);
        if list.len() < self.max_idle {
            list.push((c, Instant::now()));
        }
    }

    /// Forgets the idle connections to `native` (its replica went down).
    pub fn reset(&self, native: &str) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).retain(|k, _| k.native != native);
    }
}
