//! Native connections to the replicas, and their pool.
//!
//! A connection is opened with the login of the user whose query needs it (its `backend`, else
//! its cluster's: `crate::state::State::login`) at the revision the client negotiated (at most
//! 54460, `chstorm_proto::versions::NATIVE_REVISION`), so the packets relayed between them have
//! one layout. It goes back to the pool only
//! after an exchange that ended cleanly (EndOfStream, no Cancel, nothing left unread); anything
//! else drops it, which closes it. Pooled connections are keyed by replica, login, database and
//! revision (a connection opened for one login is never handed to another's query), kept idle
//! at most [`IDLE_TIMEOUT`], and checked for a close by the server (a non-blocking read) before
//! they are handed out. Plain TCP only: a replica's native
//! port with TLS is not supported yet.

use crate::cluster::login::BackendLogin;
use crate::cluster::worker::current;
use chstorm_proto::native::packets::read_server_hello;
use chstorm_proto::native::server::block::Scratch;
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
    /// The block readers' scratch space, kept with the connection: its answers' column types
    /// are compiled once, not once a query.
    pub scratch: Scratch,
    key: Key,
}

/// Idle connections by replica (its native address), newest last: a lookup by `&str` makes no
/// key, and a replica's list is short (at most `max_idle` per login, database, revision and
/// worker).
type IdleMap = HashMap<String, Vec<(Box<BackendConn>, Instant)>, ahash::RandomState>;

#[derive(Debug)]
struct Key {
    native: String,
    /// The login it said Hello with.
    login: Arc<BackendLogin>,
    database: String,
    revision: u64,
    /// The worker thread whose reactor the connection is registered with
    /// ([`crate::cluster::worker::current`]): a connection is only handed out on its own worker.
    worker: usize,
}

impl Key {
    fn is(&self, login: &BackendLogin, database: &str, revision: u64, worker: usize) -> bool {
        self.revision == revision && self.worker == worker && self.database == database && self.login.same_as(login)
    }
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
    /// Connects to `native` (`HOST:PORT`) and says Hello as `login`. The connection is boxed: it
    /// moves through the attempt loop, the pool and the session by pointer, not its 416 bytes.
    pub async fn connect(
        native: &str,
        database: &str,
        revision: u64,
        login: &Arc<BackendLogin>,
        connect_timeout: Duration,
    ) -> Result<Box<BackendConn>, ConnectError> {
        let tcp = match tokio::time::timeout(connect_timeout, TcpStream::connect(native)).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Err(ConnectError::new(format!("connect {native}: {e}"))),
            Err(_) => return Err(ConnectError::new(format!("connect {native}: no answer within {connect_timeout:?}"))),
        };
        let _ = tcp.set_nodelay(true);
        let (r, mut w) = tcp.into_split();
        let mut io = Io::new(r);
        let mut hello = Vec::with_capacity(64);
        backend_hello(&mut hello, revision, database, &login.user, &login.password);
        let exchange = async {
            w.write_all(&hello).await?;
            let server = read_server_hello(&mut io).await?;
            // From 54458 the Hello exchange ends with the client's addendum: no quota key (the
            // connection serves every client of the gateway).
            let mut addendum = Vec::new();
            chstorm_proto::native::packets::write_addendum(&mut addendum, revision.min(server.revision), "");
            w.write_all(&addendum).await?;
            Ok::<_, chstorm_proto::ProtoError>(server)
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
        let key = Key {
            native: native.to_string(),
            login: login.clone(),
            database: database.to_string(),
            revision,
            worker: current(),
        };
        Ok(Box::new(BackendConn { io, w, server, revision, scratch: Scratch::default(), key }))
    }

    /// The replica's native address (`HOST:PORT`).
    pub fn native(&self) -> &str {
        &self.key.native
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

/// Idle connections by replica, login, database and revision; clones share them.
#[derive(Clone)]
pub struct Pool {
    idle: Arc<Mutex<IdleMap>>,
    max_idle: usize,
}

impl Pool {
    pub fn new(max_idle_per_replica: usize) -> Pool {
        Pool { idle: Arc::new(Mutex::new(HashMap::default())), max_idle: max_idle_per_replica }
    }

    /// An idle connection, if one is alive: the newest of those to `native` opened by `login`
    /// for `database` and `revision` on this worker. Those found expired or closed on the way are
    /// dropped.
    pub fn take(&self, native: &str, login: &BackendLogin, database: &str, revision: u64) -> Option<Box<BackendConn>> {
        let worker = current();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(native)?;
        let now = Instant::now();
        while let Some(i) = list.iter().rposition(|(c, _)| c.key.is(login, database, revision, worker)) {
            let (c, at) = list.remove(i);
            if now.duration_since(at) < IDLE_TIMEOUT && c.looks_alive() {
                return Some(c);
            }
        }
        None
    }

    /// Keeps a connection whose exchange ended cleanly, unless `max_idle` like it are kept.
    pub fn put(&self, c: Box<BackendConn>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = match idle.get_mut(&c.key.native) {
            Some(l) => l,
            None => idle.entry(c.key.native.clone()).or_default(),
        };
        let now = Instant::now();
        // A list is in the order its connections were put back (a take removes, never
        // reorders), so those idle too long are its first ones.
        let expired = list.iter().take_while(|(_, at)| now.duration_since(*at) >= IDLE_TIMEOUT).count();
        list.drain(..expired);
        let key = &c.key;
        let like = list.iter().filter(|(o, _)| o.key.is(&key.login, &key.database, key.revision, key.worker)).count();
        if like < self.max_idle {
            list.push((c, now));
        }
    }

    /// Forgets the idle connections to `native` (its replica went down).
    pub fn reset(&self, native: &str) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).remove(native);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::worker::set_current;

    /// The login `user` (without a password), at slot 0.
    fn login(user: &str) -> Arc<BackendLogin> {
        Arc::new(BackendLogin::new(&crate::config::Login { user: user.into(), password: String::new() }, 0))
    }

    /// A connection to a listener that accepts and keeps it open (a pooled connection with
    /// nothing to read), keyed by `native`, the login `default`, `database`, `revision` and this
    /// worker.
    async fn conn(native: &str, database: &str, revision: u64) -> (Box<BackendConn>, TcpStream) {
        conn_as(&login("default"), native, database, revision).await
    }

    /// [`conn`] opened by `login`.
    async fn conn_as(
        login: &Arc<BackendLogin>,
        native: &str,
        database: &str,
        revision: u64,
    ) -> (Box<BackendConn>, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (peer, _) = listener.accept().await.unwrap();
        let (r, w) = tcp.into_split();
        let server = ServerInfo {
            name: "ClickHouse".into(),
            version_major: 18,
            version_minor: 16,
            version_patch: 1,
            revision,
            timezone: "UTC".into(),
            display_name: "test".into(),
        };
        let key =
            Key { native: native.into(), login: login.clone(), database: database.into(), revision, worker: current() };
        (Box::new(BackendConn { io: Io::new(r), w, server, revision, scratch: Scratch::default(), key }), peer)
    }

    static D: std::sync::LazyLock<Arc<BackendLogin>> = std::sync::LazyLock::new(|| login("default"));

    fn port(c: &BackendConn) -> u16 {
        c.io.get_ref().local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn hands_out_the_newest_connection_of_its_own_key_only() {
        set_current(0);
        let pool = Pool::new(2);
        let mut peers = Vec::new();
        let mut ports = Vec::new();
        for (native, db, rev) in [("a:1", "default", 54412), ("a:1", "default", 54412), ("a:1", "other", 54412)] {
            let (c, p) = conn(native, db, rev).await;
            ports.push(port(&c));
            peers.push(p);
            pool.put(c);
        }
        assert!(pool.take("b:1", &D, "default", 54412).is_none(), "another replica");
        assert!(pool.take("a:1", &D, "default", 54411).is_none(), "another revision");
        set_current(1);
        assert!(pool.take("a:1", &D, "default", 54412).is_none(), "another worker");
        set_current(0);
        assert_eq!(pool.take("a:1", &D, "default", 54412).map(|c| port(&c)), Some(ports[1]), "the newest first");
        assert_eq!(pool.take("a:1", &D, "other", 54412).map(|c| port(&c)), Some(ports[2]));
        assert_eq!(pool.take("a:1", &D, "default", 54412).map(|c| port(&c)), Some(ports[0]));
        assert!(pool.take("a:1", &D, "default", 54412).is_none());
    }

    #[tokio::test]
    async fn a_connection_goes_back_only_to_queries_of_the_login_that_opened_it() {
        set_current(0);
        let pool = Pool::new(8);
        let (a, b) = (login("tenant_a"), login("tenant_b"));
        let other_password =
            Arc::new(BackendLogin::new(&crate::config::Login { user: "tenant_a".into(), password: "x".into() }, 3));
        let mut peers = Vec::new();
        let mut by_login = Vec::new();
        // Interleaved, as two users' queries come and go on one replica.
        for (i, l) in [&a, &b, &a, &b, &a].into_iter().enumerate() {
            let (c, p) = conn_as(l, "a:1", "default", 54412).await;
            by_login.push((l.user.clone(), port(&c), i));
            peers.push(p);
            pool.put(c);
        }
        assert!(pool.take("a:1", &other_password, "default", 54412).is_none(), "same name, other password");
        assert!(pool.take("a:1", &D, "default", 54412).is_none(), "a third login");
        // The same login from a config reloaded since (another slot) finds its connections.
        let a_again =
            Arc::new(BackendLogin::new(&crate::config::Login { user: "tenant_a".into(), password: "".into() }, 5));
        let mut got = Vec::new();
        while let Some(c) = pool.take("a:1", &b, "default", 54412) {
            got.push(("tenant_b", port(&c)));
        }
        while let Some(c) = pool.take("a:1", &a_again, "default", 54412) {
            got.push(("tenant_a", port(&c)));
        }
        assert_eq!(got.len(), 5, "every connection handed out once");
        for (user, p) in got {
            let opened_by = by_login.iter().find(|(_, q, _)| *q == p).map(|(u, _, _)| u.as_str());
            assert_eq!(opened_by, Some(user), "port {p}");
        }
    }

    #[tokio::test]
    async fn keeps_at_most_max_idle_alike_and_forgets_a_replica_on_reset() {
        set_current(0);
        let pool = Pool::new(2);
        let mut peers = Vec::new();
        for db in ["default", "default", "default", "other"] {
            let (c, p) = conn("a:1", db, 54412).await;
            peers.push(p);
            pool.put(c);
        }
        let (c, p) = conn("b:1", "default", 54412).await;
        peers.push(p);
        pool.put(c);
        let taken: Vec<_> = std::iter::from_fn(|| pool.take("a:1", &D, "default", 54412)).collect();
        assert_eq!(taken.len(), 2, "a third like connection is closed, not kept");
        pool.reset("a:1");
        assert!(pool.take("a:1", &D, "other", 54412).is_none());
        assert!(pool.take("b:1", &D, "default", 54412).is_some(), "another replica's stay");
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_not_handed_out() {
        set_current(0);
        let pool = Pool::new(4);
        let (old, peer_old) = conn("a:1", "default", 54412).await;
        let (new, peer_new) = conn("a:1", "default", 54412).await;
        let old_port = port(&old);
        pool.put(old);
        pool.put(new);
        drop(peer_new);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(pool.take("a:1", &D, "default", 54412).map(|c| port(&c)), Some(old_port));
        assert!(pool.take("a:1", &D, "default", 54412).is_none());
        drop(peer_old);
    }
}
