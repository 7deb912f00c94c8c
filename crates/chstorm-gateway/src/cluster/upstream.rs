//! Backend connections, behind the [`Backend`] trait so the attempt logic runs against a fake
//! in unit tests: for each `http://` replica, login and worker thread a pool of the gateway's own
//! HTTP/1 client ([`super::h1`]); for `https://` replicas a hyper client per replica, login and
//! worker. A request goes on its login's pool only ([`BackendRequest::pool`],
//! [`super::login`]), so a connection opened for one ClickHouse user never carries another's
//! query; `KILL QUERY` goes on a connection of its own.
//! A replica marked down gets its pools emptied ([`Backend::reset_pool`]): connections to a
//! server that is shutting down or hung are not handed out again.
//!
//! The pool's idle timeout must sit below the server's `keep_alive_timeout`, or the pool hands
//! out a connection the server is closing at that moment (chproxy's race). With `auto` the
//! gateway learns the server's value from the `Keep-Alive: timeout=N` header of a `/ping` at
//! start-up and keeps idle connections 500 ms less (ClickHouse 18.16's package default is 3 s, so
//! 2.5 s). TCP_NODELAY is set; the number of idle connections per replica is bounded.

use super::h1::spelling::BackendSpelling;
pub use super::message::{empty, full, BackendError, BackendRequest, BoxError, BoxFuture, GBody, Prefixed};
use crate::config::{IdleTimeout, PoolCfg, ReplicaAddr};
use arc_swap::ArcSwap;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Margin kept below the server's keep-alive timeout.
pub const KEEPALIVE_MARGIN: Duration = Duration::from_millis(500);
/// Used when `auto` cannot learn the server's value (ClickHouse's default, 3 s, less the margin).
pub const FALLBACK_IDLE: Duration = Duration::from_millis(2500);

type Connector = crate::cluster::backend_io::ResetIfAbandoned<hyper_rustls::HttpsConnector<HttpConnector>>;
/// Its connections are reset, not closed, when dropped mid-exchange ([`crate::cluster::backend_io`]).
type HttpsClient = Client<Connector, GBody>;
/// The backends as the attempt loop sees them.
pub trait Backend: Send + Sync + 'static {
    /// Sends `req` to `replica` (on a pooled connection when there is one); resolves with the
    /// answer head. Dropping the future drops the connection.
    fn send(
        &self,
        replica: &ReplicaAddr,
        req: BackendRequest,
    ) -> BoxFuture<Result<hyper::Response<GBody>, BackendError>>;
    /// `KILL QUERY WHERE query_id = '...' ASYNC` on `replica`, authenticated by `auth` (an
    /// `Authorization` header value: the login that ran the query), on a new connection; true
    /// when the server accepted it. Bounded by 5 s.
    fn kill(&self, replica: &ReplicaAddr, auth: &str, query_id: &str) -> BoxFuture<bool>;
    /// Forgets the idle pooled connections to `replica` (it went down).
    fn reset_pool(&self, replica: &ReplicaAddr);
    /// Is `replica` alive? `GET /ping` on a new connection, bounded by `timeout`.
    fn alive(&self, replica: &ReplicaAddr, timeout: Duration) -> BoxFuture<Probe>;
    /// [`Backend::alive`], for a silent read's watch: a probe of `replica` started less than
    /// [`SHARE_PROBE`] ago, with a bound within a quarter of `timeout`, is shared, so the reads
    /// silent at once on one replica (every read of a loaded server) send one ping, not one
    /// each. The query-of-death test, which must see the replica after its connection broke,
    /// calls [`Backend::alive`].
    fn alive_shared(&self, replica: &ReplicaAddr, timeout: Duration) -> BoxFuture<Probe> {
        self.alive(replica, timeout)
    }
}

/// How recent a probe [`Backend::alive_shared`] joins must be: 25 ms, the order of the
/// shortest per-try deadline (`hedging.min_delay`, 20 ms).
pub const SHARE_PROBE: Duration = Duration::from_millis(25);

/// A probe that later callers may join: when it started, its bound, its outcome.
type SharedProbe = (tokio::time::Instant, Duration, futures_util::future::Shared<BoxFuture<Probe>>);

/// What a liveness probe ([`Backend::alive`]) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// The server answered: its process runs and serves requests.
    Alive,
    /// The connection was refused or broke: the server process is gone.
    Dead,
    /// No answer within the timeout: the server is hung (stopped, swapping, stuck).
    Silent,
}

pub struct Upstream {
    /// The `http://` replicas' pools per base URL: one per login and worker thread, the login's
    /// slot times `workers` plus the worker ([`super::worker::current`]), so a connection stays
    /// with one login and on one thread.
    h1: HashMap<String, Vec<Arc<super::h1::pool::Pool>>, ahash::RandomState>,
    /// For the thread budget's polls (the clusters' logins) and the keep-alive lookup (none).
    client: HttpsClient,
    /// The `https://` replicas' pools per base URL, indexed as `h1`'s, so a pooled connection's
    /// task runs on the thread of the requests that use it. Each is swapped for a fresh one when
    /// the replica goes down.
    pools: HashMap<String, Vec<ArcSwap<HttpsClient>>, ahash::RandomState>,
    /// Worker threads: the stride of a login's pools.
    workers: usize,
    /// Builds a fresh per-replica client.
    make_pool: Box<dyn Fn() -> HttpsClient + Send + Sync>,
    /// For health probes and kills: no pooling, so every probe tests the replica's listener (a
    /// server in graceful shutdown closes its listener but still answers on open connections; a
    /// probe over a pooled connection would call it healthy), and a kill's login keeps no
    /// connection.
    probe_client: HttpsClient,
    /// The last probe of each replica, for [`Backend::alive_shared`].
    probes: std::sync::Mutex<HashMap<String, SharedProbe>>,
    pub idle_timeout: Duration,
}

fn tls_config(cfg: &PoolCfg) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots_list());
    if let Some(path) = &cfg.tls_ca {
        let pem = std::fs::read(path).map_err(|e| format!("pool.tls_ca {}: {e}", path.display()))?;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| format!("pool.tls_ca {}: {e}", path.display()))?;
            roots.add(cert).map_err(|e| format!("pool.tls_ca {}: {e}", path.display()))?;
        }
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn webpki_roots_list() -> Vec<rustls::pki_types::TrustAnchor<'static>> {
    webpki_roots::TLS_SERVER_ROOTS.to_vec()
}

impl Upstream {
    /// `logins` x `workers` pools for each of `replicas` (`logins`: [`super::login::Logins::len`]),
    /// each keeping at most `max_idle` idle connections, plus the shared client for budget polls.
    pub fn new(
        cfg: &PoolCfg,
        idle_timeout: Duration,
        max_idle: usize,
        replicas: &[ReplicaAddr],
        workers: usize,
        logins: usize,
    ) -> Result<Upstream, String> {
        let (workers, per_replica) = (workers.max(1), workers.max(1) * logins.max(1));
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(cfg.connect_timeout.0));
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(cfg)?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let pooled = https.clone();
        let make_pool = move || {
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(idle_timeout)
                .pool_max_idle_per_host(max_idle)
                .pool_timer(hyper_util::rt::TokioTimer::new())
                // The answer's header names reach the client spelled as the replica spelled
                // them (`X-ClickHouse-...`), see `crate::http::conn`.
                .http1_preserve_header_case(true)
                .build(crate::cluster::backend_io::ResetIfAbandoned(pooled.clone()))
        };
        let client = make_pool();
        let h1 = replicas
            .iter()
            .filter(|r| !r.https)
            .map(|r| {
                let pool = || super::h1::pool::Pool::new(&r.base, idle_timeout, max_idle, cfg.connect_timeout.0);
                Ok((r.base.clone(), (0..per_replica).map(|_| pool().map(Arc::new)).collect::<Result<_, _>>()?))
            })
            .collect::<Result<_, String>>()?;
        let pools = replicas
            .iter()
            .filter(|r| r.https)
            .map(|r| (r.base.clone(), (0..per_replica).map(|_| ArcSwap::from_pointee(make_pool())).collect()))
            .collect();
        let probe_client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(crate::cluster::backend_io::ResetIfAbandoned(https));
        Ok(Upstream {
            h1,
            client,
            pools,
            workers,
            make_pool: Box::new(make_pool),
            probe_client,
            probes: Default::default(),
            idle_timeout,
        })
    }

    /// The idle timeout to use: fixed, or learned from the replicas' `Keep-Alive` headers.
    pub async fn choose_idle_timeout(cfg: &PoolCfg, replicas: &[ReplicaAddr]) -> Duration {
        match cfg.idle_timeout {
            IdleTimeout::Fixed(d) => d,
            IdleTimeout::Auto => {
                let Ok(probe) = Upstream::new(cfg, Duration::from_secs(1), 1, &[], 1, 1) else { return FALLBACK_IDLE };
                let mut learned: Option<Duration> = None;
                for r in replicas {
                    if let Some(t) = probe.keepalive_timeout(r).await {
                        learned = Some(learned.map_or(t, |l| l.min(t)));
                    }
                }
                learned
                    .map(|t| t.saturating_sub(KEEPALIVE_MARGIN).max(Duration::from_millis(200)))
                    .unwrap_or(FALLBACK_IDLE)
            }
        }
    }

    /// The server's `Keep-Alive: timeout=N`, from a `/ping`.
    async fn keepalive_timeout(&self, r: &ReplicaAddr) -> Option<Duration> {
        let req = hyper::Request::get(format!("{}/ping", r.base)).body(empty()).ok()?;
        let resp = tokio::time::timeout(Duration::from_secs(2), self.client.request(req)).await.ok()?.ok()?;
        let v = resp.headers().get("keep-alive")?.to_str().ok()?;
        let secs: u64 =
            v.split(',').find_map(|p| p.trim().strip_prefix("timeout=")).and_then(|n| n.trim().parse().ok())?;
        Some(Duration::from_secs(secs))
    }

    /// Active probe: `GET /ping` answers `Ok.` within `timeout`.
    pub async fn ping(&self, r: &ReplicaAddr, timeout: Duration) -> bool {
        let Ok(req) = hyper::Request::get(format!("{}/ping", r.base)).body(empty()) else { return false };
        let fut = async {
            let resp = self.probe_client.request(req).await.ok()?;
            if !resp.status().is_success() {
                return None;
            }
            let body = resp.into_body().collect().await.ok()?.to_bytes();
            Some(body.starts_with(b"Ok."))
        };
        matches!(tokio::time::timeout(timeout, fut).await, Ok(Some(true)))
    }

    /// The text `sql` answers on `r` (at most `limit` bytes), as the user of `auth` (an
    /// `Authorization` value), within `timeout`; None on any error. For the gateway's own probes.
    pub async fn query_text(
        &self,
        r: &ReplicaAddr,
        sql: &str,
        auth: &http::HeaderValue,
        timeout: Duration,
        limit: usize,
    ) -> Option<String> {
        let uri = format!(
            "{}/?query={}",
            r.base,
            crate::request::encode_params(&[("q".into(), sql.into())]).strip_prefix("q=")?
        );
        let req = hyper::Request::get(uri).header(http::header::AUTHORIZATION, auth.clone()).body(empty()).ok()?;
        let fut = async {
            let resp = self.probe_client.request(req).await.ok()?;
            if !resp.status().is_success() {
                return None;
            }
            let body = http_body_util::Limited::new(resp.into_body(), limit).collect().await.ok()?.to_bytes();
            String::from_utf8(body.to_vec()).ok()
        };
        tokio::time::timeout(timeout, fut).await.ok()?
    }

    pub async fn send(
        &self,
        req: hyper::Request<GBody>,
    ) -> Result<hyper::Response<Incoming>, hyper_util::client::legacy::Error> {
        self.client.request(req).await
    }

    /// The index of this worker's pool of the login at `slot` among a replica's pools.
    fn pool_index(&self, slot: usize) -> usize {
        slot.saturating_mul(self.workers).saturating_add(super::worker::current() % self.workers)
    }

    /// This worker's pool of `replica` for the login at `slot`: None for a slot the config has
    /// not (no other login's pool stands in).
    fn pool(&self, replica: &ReplicaAddr, slot: usize) -> Option<HttpsClient> {
        let i = self.pool_index(slot);
        match self.pools.get(&replica.base) {
            Some(p) => p.get(i).map(|c| HttpsClient::clone(&c.load())),
            None => Some(self.client.clone()).filter(|_| slot == 0),
        }
    }
}

/// The exchange of a request whose login has no pool here.
fn no_pool(replica: &ReplicaAddr, slot: usize) -> BoxFuture<Result<hyper::Response<GBody>, BackendError>> {
    let message = format!("replica {}: no connection pool for login slot {slot}", replica.base);
    Box::pin(std::future::ready(Err(BackendError { connect: true, message })))
}

impl Backend for Upstream {
    fn send(
        &self,
        replica: &ReplicaAddr,
        req: BackendRequest,
    ) -> BoxFuture<Result<hyper::Response<GBody>, BackendError>> {
        if let Some(p) = self.h1.get(&replica.base) {
            return match p.get(self.pool_index(req.pool)) {
                Some(pool) => Box::pin(super::h1::send(pool.clone(), req)),
                None => no_pool(replica, req.pool),
            };
        }
        let Some(pool) = self.pool(replica, req.pool) else { return no_pool(replica, req.pool) };
        let req = req.into_hyper(&replica.base);
        Box::pin(async move {
            match pool.request(req?).await {
                Ok(resp) => {
                    let (mut parts, body) = resp.into_parts();
                    note_backend_spelling(&mut parts);
                    Ok(hyper::Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed_unsync()))
                }
                Err(e) => {
                    let source = std::error::Error::source(&e).map(|s| format!(": {s}")).unwrap_or_default();
                    Err(BackendError { connect: e.is_connect(), message: format!("{e}{source}") })
                }
            }
        })
    }

    fn kill(&self, replica: &ReplicaAddr, auth: &str, query_id: &str) -> BoxFuture<bool> {
        let sql =
            format!("KILL QUERY WHERE query_id = '{}' ASYNC", query_id.replace('\\', "\\\\").replace('\'', "\\'"));
        let req = hyper::Request::post(format!("{}/", replica.base)).header("authorization", auth).body(full(sql));
        let client = self.probe_client.clone();
        Box::pin(async move {
            let Ok(req) = req else { return false };
            match tokio::time::timeout(Duration::from_secs(5), client.request(req)).await {
                Ok(Ok(resp)) => {
                    let ok = resp.status().is_success();
                    let _ = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect()).await;
                    ok
                }
                _ => false,
            }
        })
    }

    fn alive(&self, replica: &ReplicaAddr, timeout: Duration) -> BoxFuture<Probe> {
        let client = self.probe_client.clone();
        let req = hyper::Request::get(format!("{}/ping", replica.base)).body(empty());
        Box::pin(async move {
            let Ok(req) = req else { return Probe::Dead };
            match tokio::time::timeout(timeout, client.request(req)).await {
                Ok(Ok(_)) => Probe::Alive,
                Ok(Err(_)) => Probe::Dead,
                Err(_) => Probe::Silent,
            }
        })
    }

    fn alive_shared(&self, replica: &ReplicaAddr, timeout: Duration) -> BoxFuture<Probe> {
        use futures_util::FutureExt;
        let now = tokio::time::Instant::now();
        let mut probes = self.probes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((started, bound, probe)) = probes.get(&replica.base) {
            if now.duration_since(*started) < SHARE_PROBE && bound.abs_diff(timeout) <= timeout / 4 {
                return Box::pin(probe.clone());
            }
        }
        let probe = self.alive(replica, timeout).shared();
        probes.insert(replica.base.clone(), (now, timeout, probe.clone()));
        Box::pin(probe)
    }

    fn reset_pool(&self, replica: &ReplicaAddr) {
        for pool in self.h1.get(&replica.base).into_iter().flatten() {
            pool.reset();
        }
        for slot in self.pools.get(&replica.base).into_iter().flatten() {
            slot.store(Arc::new((self.make_pool)()));
        }
    }
}

/// Notes, on a hyper client's answer, whether its replica's header spelling (hyper's case map,
/// in its extensions) is kept ([`BackendSpelling`]): when it sent an `X-ClickHouse-Query-Id`
/// (the gateway's own replaces its value, not its name) or repeats an `X-ClickHouse-...` header
/// (`X-ClickHouse-Progress`), which the front's canned spelling names only once.
fn note_backend_spelling(parts: &mut http::response::Parts) {
    let h = &parts.headers;
    let repeated = h.keys().any(|k| k.as_str().starts_with("x-clickhouse-") && h.get_all(k).iter().nth(1).is_some());
    if h.contains_key("x-clickhouse-query-id") || repeated {
        parts.extensions.insert(BackendSpelling);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A replica that answers every connection's `/ping` with `Ok.` after 50 ms, counting its
    /// connections.
    async fn replica() -> (ReplicaAddr, Arc<AtomicUsize>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = ReplicaAddr { base: format!("http://{}", l.local_addr().unwrap()), https: false };
        let n = Arc::new(AtomicUsize::new(0));
        let count = n.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let _ = s.read(&mut [0u8; 1024]).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nOk.\n").await;
                });
            }
        });
        (addr, n)
    }

    /// A keep-alive replica that answers every request `1\n`, recording each connection's
    /// `authorization` values, by connection.
    async fn recording_replica() -> (ReplicaAddr, Arc<std::sync::Mutex<Vec<Vec<String>>>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = ReplicaAddr { base: format!("http://{}", l.local_addr().unwrap()), https: false };
        let seen = Arc::new(std::sync::Mutex::new(Vec::<Vec<String>>::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let conn = {
                    let mut all = record.lock().unwrap();
                    all.push(Vec::new());
                    all.len() - 1
                };
                let record = record.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = s.read(&mut chunk).await {
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                            buf.drain(..end + 4);
                            let auth = head.lines().find_map(|l| l.strip_prefix("authorization: ")).unwrap_or("");
                            record.lock().unwrap()[conn].push(auth.to_string());
                            // Slow enough that requests in flight at once need more connections.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n1\n").await;
                        }
                    }
                });
            }
        });
        (addr, seen)
    }

    #[tokio::test]
    async fn a_connection_opened_for_one_login_never_carries_another_logins_request() {
        let (r, seen) = recording_replica().await;
        // Two workers, three logins: six pools for the replica.
        let up =
            Upstream::new(&PoolCfg::default(), Duration::from_secs(10), 8, std::slice::from_ref(&r), 2, 3).unwrap();
        let up = Arc::new(up);
        let auths = ["Basic YTo=", "Basic Yjo=", "Basic Yzo="];
        let send = |slot: usize| {
            let mut req = BackendRequest::new(http::Method::GET, "/?query=SELECT%201", empty());
            (req.auth, req.pool) = (Some(http::HeaderValue::from_static(auths[slot])), slot);
            let (up, r) = (up.clone(), r.clone());
            async move {
                let resp = Backend::send(&*up, &r, req).await.unwrap();
                assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "1\n");
            }
        };
        // Rounds of requests of every login at once, interleaved, on both workers.
        for round in 0..6 {
            super::super::worker::set_current(round % 2);
            let batch: Vec<_> = (0..12).map(|i| send((i * 7 + round) % 3)).collect();
            futures_util::future::join_all(batch).await;
        }
        let seen = seen.lock().unwrap().clone();
        let used: Vec<_> = seen.iter().filter(|c| !c.is_empty()).collect();
        assert!(used.iter().any(|c| c.len() > 1), "connections were reused: {seen:?}");
        for c in &used {
            assert!(c.iter().all(|a| a == &c[0]), "one connection carried two logins: {c:?}");
        }
        for a in auths {
            assert!(used.iter().any(|c| c[0] == a.to_ascii_lowercase()), "{a} was sent");
        }
        assert!(
            Backend::send(&*up, &r, BackendRequest { pool: 3, ..BackendRequest::new(http::Method::GET, "/", empty()) })
                .await
                .is_err(),
            "a slot with no pool borrows none"
        );
    }

    #[tokio::test]
    async fn reads_silent_at_once_share_one_ping_and_the_query_of_death_test_gets_its_own() {
        let (r, connections) = replica().await;
        let up = Upstream::new(&PoolCfg::default(), Duration::from_secs(1), 1, std::slice::from_ref(&r), 1, 1).unwrap();
        let t = Duration::from_millis(500);
        // The ten reads fall silent within one instant: the clock stands still while they ask.
        tokio::time::pause();
        let shared: Vec<_> = (0..10).map(|i| up.alive_shared(&r, t + Duration::from_millis(i))).collect();
        tokio::time::resume();
        for p in shared {
            assert_eq!(p.await, Probe::Alive);
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1, "ten silent reads, one ping");
        assert_eq!(up.alive_shared(&r, Duration::from_millis(100)).await, Probe::Alive);
        assert_eq!(
            connections.load(Ordering::SeqCst),
            2,
            "a ping over 25 ms old is not joined, nor one of another bound"
        );
        let (a, b) = tokio::join!(up.alive(&r, t), up.alive(&r, t));
        assert_eq!((a, b), (Probe::Alive, Probe::Alive));
        assert_eq!(connections.load(Ordering::SeqCst), 4, "Backend::alive always pings afresh");
    }
}
