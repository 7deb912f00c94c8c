//! The gateway's YAML configuration (see `docs/gateway.example.yaml`).
//!
//! [`Config::load`] parses and validates; every error names the file, the line where it is
//! known, the field and the reason. Unknown keys are errors. Defaults are stated on each field.

use chstorm_sql::route::{ColumnType, Router};
use ipnet::IpNet;
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A config that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {message}", line.map(|l| format!(": line {l}")).unwrap_or_default())]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

pub use chstorm_yaml::Dur;

/// `auto` or a duration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IdleTimeout {
    /// The backend's `Keep-Alive: timeout=N` minus 500 ms (18.16 sends 3 s: 2.5 s).
    Auto,
    Fixed(Duration),
}

impl<'de> Deserialize<'de> for IdleTimeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "auto" {
            return Ok(IdleTimeout::Auto);
        }
        humantime::parse_duration(&s)
            .map(IdleTimeout::Fixed)
            .map_err(|e| de::Error::custom(format!("'{s}' is not auto or a duration ({e})")))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Global admission limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Queries in flight through the gateway, all users. Default 256.
    pub max_concurrency: usize,
    /// Queries waiting for a slot. Default 1024. Past it: 503 at once.
    pub queue_size: usize,
    /// Longest wait for a slot. Default 1 s. Past it: 503.
    pub queue_max_wait: Dur,
    /// A client must send a request's line and headers within this time, counted from the
    /// connection's first read (a new connection, or the end of the previous answer on a kept-alive
    /// one), or the gateway closes the connection without an answer. So it also closes kept-alive
    /// client connections idle this long. Default 10 s; at least 100 ms. Also bounds the TLS
    /// handshake.
    pub client_header_timeout: Dur,
    /// A request whose body sends no byte for this long while the gateway waits for it fails with
    /// 408: its backend request is abandoned (and its query killed), its admission slots are freed
    /// and the connection is closed. Default 30 s; at least 100 ms.
    pub client_body_idle_timeout: Dur,
    /// How long reads of a query's shape are refused after one killed the replica running it
    /// (`crate::quarantine`). Default 5 min; `0s` turns the quarantine off (the read that
    /// killed its replica is still not sent to another).
    pub query_of_death_ttl: Dur,
    /// The deepest nesting of a query's text, in `(`/`[` brackets and `CASE ... END` open at once
    /// ([`chstorm_sql::rules::nesting_depth`]); a deeper query is refused with ClickHouse's Code 167
    /// before it is read further or sent (18.16 dies of a stack overflow from about 760). Default
    /// 300; at least 1.
    pub max_query_depth: usize,
    /// Most bytes one client connection may have buffered in the gateway at once, in MiB: on
    /// the native port a packet being read (a Query's text and settings, a data block's raw
    /// bytes and one decompressed frame) and a query's held external tables; on HTTP a held
    /// body. Past it the client gets an exception (native, code 241) or 413 (HTTP) and its
    /// connection is closed. Default 256 MiB; at least 1.
    pub max_client_buffer_mib: usize,
    /// Most bytes all client connections together may have buffered, in MiB, beyond the first
    /// 64 KiB of each ([`chstorm_proto::mem`]): past it a client that needs more fails as
    /// above, the others keep what they have. Default 1024 MiB; at least 1.
    pub max_buffered_mib: usize,
    /// A native client that has begun a packet (or a Query's external data, up to its empty
    /// block) and sends no byte of it for this long is closed. Default 30 s; at least 100 ms.
    pub client_packet_timeout: Dur,
    /// The slowest a request body may come, in bytes a second: the time the gateway spends
    /// waiting for a body, summed over its gaps, may not pass `client_body_idle_timeout` plus one
    /// second for every `client_body_min_rate` bytes received (Apache's `mod_reqtimeout` rule),
    /// so a trickle (one byte every 20 s) is cut off like a silent body. Default 500; 0 turns the
    /// rule off (only each gap is bounded).
    pub client_body_min_rate: u64,
    /// A client that takes no byte of its answer for this long (the connection's send buffer
    /// stays full) is disconnected: the answer's query is killed on its replica and its admission
    /// slots are freed. Default 30 s; at least 100 ms.
    pub client_write_timeout: Dur,
}

/// The default `limits.max_query_depth`: 300, well under the 758 nested scalar subqueries that
/// crash an 18.16 server (see [`chstorm_sql::rules::nesting_depth`]).
pub const DEFAULT_MAX_QUERY_DEPTH: usize = 300;

/// The smallest `limits.client_header_timeout` and `limits.client_body_idle_timeout` (100 ms).
pub const MIN_CLIENT_TIMEOUT: Duration = Duration::from_millis(100);

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_concurrency: 256,
            queue_size: 1024,
            queue_max_wait: Dur(Duration::from_secs(1)),
            client_header_timeout: Dur(Duration::from_secs(10)),
            client_body_idle_timeout: Dur(Duration::from_secs(30)),
            query_of_death_ttl: Dur(Duration::from_secs(300)),
            max_query_depth: DEFAULT_MAX_QUERY_DEPTH,
            max_client_buffer_mib: 256,
            max_buffered_mib: 1024,
            client_packet_timeout: Dur(Duration::from_secs(30)),
            client_body_min_rate: 500,
            client_write_timeout: Dur(Duration::from_secs(30)),
        }
    }
}

/// Active health checks.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Health {
    /// Time between `GET /ping` probes of each replica. Default 500 ms.
    pub interval: Dur,
    /// Probe timeout. Default 1 s.
    pub timeout: Dur,
    /// Consecutive failed probes that mark a replica down. Default 2. (A failed request marks it
    /// down at once.)
    pub fall: u32,
    /// Consecutive good probes that mark a down replica up. Default 2.
    pub rise: u32,
}

impl Default for Health {
    fn default() -> Self {
        Health { interval: Dur(Duration::from_millis(500)), timeout: Dur(Duration::from_secs(1)), fall: 2, rise: 2 }
    }
}

/// The retry budget.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Retries {
    /// Retries may add at most this share to the request rate. Default 0.1.
    pub budget_ratio: f32,
    /// ... but at least this many retries a second are allowed. Default 10.
    pub min_per_second: u32,
}

impl Default for Retries {
    fn default() -> Self {
        Retries { budget_ratio: 0.1, min_per_second: 10 }
    }
}

/// `hedging.delay`: how the per-try deadline is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HedgeDelay {
    /// From the route's recent answer times (`quantile` x `factor` within the bounds).
    Auto,
    /// A fixed per-try deadline.
    Fixed(Duration),
    /// No hedged reads.
    Off,
}

impl<'de> Deserialize<'de> for HedgeDelay {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "auto" => Ok(HedgeDelay::Auto),
            "off" => Ok(HedgeDelay::Off),
            _ => humantime::parse_duration(&s)
                .map(HedgeDelay::Fixed)
                .map_err(|e| de::Error::custom(format!("'{s}' is not auto, off or a duration ({e})"))),
        }
    }
}

/// Hedged reads (`crate::hedge`): when an idempotent read has no answer head within the per-try
/// deadline, the same query goes to another healthy replica of the same shard; the first answer
/// wins and the other is cancelled. Hedges draw on the retry budget.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hedging {
    /// `auto`, a duration, or `off`. Default `auto`.
    pub delay: HedgeDelay,
    /// `auto`: the quantile of the route's recent answer-head times. Default 0.95.
    pub quantile: f64,
    /// `auto`: times this factor. Default 2.
    pub factor: f64,
    /// `auto`: never below this. Default 20 ms.
    pub min_delay: Dur,
    /// `auto`: never above this. Default 1 s.
    pub max_delay: Dur,
    /// Extra copies of one query in flight at once. Default 1.
    pub max_extra: usize,
}

impl Default for Hedging {
    fn default() -> Self {
        Hedging {
            delay: HedgeDelay::Auto,
            quantile: 0.95,
            factor: 2.0,
            min_delay: Dur(Duration::from_millis(20)),
            max_delay: Dur(Duration::from_secs(1)),
            max_extra: 1,
        }
    }
}

/// The gateway's own shutdown (SIGTERM).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Shutdown {
    /// Longest wait for queries in flight to finish after SIGTERM. Default 30 s.
    pub drain_timeout: Dur,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown { drain_timeout: Dur(Duration::from_secs(30)) }
    }
}

/// Backend connection pools.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolCfg {
    /// Idle connections are closed after this. Default `auto`.
    pub idle_timeout: IdleTimeout,
    /// Idle connections kept per replica. Default 64.
    pub max_idle_per_replica: usize,
    /// Connect timeout. Default 1 s.
    pub connect_timeout: Dur,
    /// A PEM file of CA certificates to trust for https:// replicas, besides the web roots.
    pub tls_ca: Option<PathBuf>,
}

impl Default for PoolCfg {
    fn default() -> Self {
        PoolCfg {
            idle_timeout: IdleTimeout::Auto,
            max_idle_per_replica: 64,
            connect_timeout: Dur(Duration::from_secs(1)),
            tls_ca: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShard {
    #[serde(default = "one")]
    weight: u32,
    replicas: Vec<String>,
    /// The replicas' native TCP addresses (`HOST:PORT`), in the order of `replicas`; needed with
    /// `listen_native`.
    #[serde(default)]
    native: Vec<String>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouting {
    sharding_key: String,
    #[serde(default)]
    tables: BTreeMap<String, String>,
    /// The database of the `tables` keys that name none. Default `default`.
    database: Option<String>,
    where_column: Option<String>,
    /// The ClickHouse type of the sharding column. Default UInt64.
    #[serde(default = "default_key_type")]
    key_type: String,
}

fn default_key_type() -> String {
    "UInt64".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    #[serde(default = "default_user")]
    user: String,
    #[serde(default)]
    password: String,
    shards: Vec<RawShard>,
    routing: Option<RawRouting>,
    /// The thread budget (`crate::budget`); absent: no budget.
    threads: Option<RawThreads>,
}

/// `threads.total`: a number of threads, `auto` (from the backend's cores, as the server
/// reports them; see `crate::budget::probe`), or `adaptive` (found at run time by
/// `crate::budget::adaptive`, starting at the cores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadTotal {
    Auto,
    Adaptive,
    Fixed(usize),
}

impl<'de> Deserialize<'de> for ThreadTotal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_yaml::Value::deserialize(d)?;
        let bad = || {
            de::Error::custom(format!(
                "expected a number of threads, auto or adaptive, got {}",
                serde_yaml::to_string(&v).unwrap_or_default().trim()
            ))
        };
        match &v {
            serde_yaml::Value::String(s) if s == "auto" => Ok(ThreadTotal::Auto),
            serde_yaml::Value::String(s) if s == "adaptive" => Ok(ThreadTotal::Adaptive),
            serde_yaml::Value::String(s) => s.trim().parse().map(ThreadTotal::Fixed).map_err(|_| bad()),
            serde_yaml::Value::Number(n) => n.as_u64().map(|n| ThreadTotal::Fixed(n as usize)).ok_or_else(bad),
            _ => Err(bad()),
        }
    }
}

/// `threads.mode`: what a query gets when the budget is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadMode {
    /// 1 thread at once (the seed's `total_max_threads`).
    Grant,
    /// Wait up to `max_wait` for a free thread, then 1 thread.
    Queue,
}

impl Default for ThreadMode {
    /// `grant` (docs/GATEWAY.md, "Thread budget"). `queue` holds a query back while the budget
    /// is spent, whatever the query: with the total at the cores, a storm of `SELECT 1` at c=8
    /// ran 2 at a time and kept 0.54 of direct QPS against 0.70 in `grant` mode
    /// (`scripts/bench_gateway_cpu.py`), and on `scripts/bench_threads.py`'s heavy table `grant`
    /// was level with or ahead of `queue` in every run.
    fn default() -> Self {
        ThreadMode::Grant
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThreads {
    #[serde(default = "auto_total")]
    total: ThreadTotal,
    max_per_query: Option<usize>,
    #[serde(default)]
    mode: ThreadMode,
    #[serde(default = "default_thread_wait")]
    max_wait: Dur,
    #[serde(default)]
    observe: bool,
    #[serde(default = "default_observe_interval")]
    observe_interval: Dur,
    #[serde(default)]
    per_replica: BTreeMap<String, ThreadTotal>,
}

fn auto_total() -> ThreadTotal {
    ThreadTotal::Auto
}
fn default_thread_wait() -> Dur {
    Dur(Duration::from_millis(100))
}
fn default_observe_interval() -> Dur {
    Dur(Duration::from_millis(100))
}

/// A cluster's thread budget (`clusters.NAME.threads`), one budget per replica.
#[derive(Debug, Clone, PartialEq)]
pub struct Threads {
    /// Threads shared by the queries running on one replica. Default `auto`.
    pub total: ThreadTotal,
    /// The most one query gets (the user's max_threads). Default 16, and then also at most
    /// the server's cores ([`Self::cap_at_cores`]).
    pub max_per_query: usize,
    /// `max_per_query` was not set: a grant is also capped at the replica's cores, which is
    /// the `max_threads` the server gives a query by default (learned as for `auto`).
    pub cap_at_cores: bool,
    /// Default [`ThreadMode::default`].
    pub mode: ThreadMode,
    /// `queue` mode: the longest wait for a free thread. Default 100 ms.
    pub max_wait: Duration,
    /// Correct the count from the server's `system.processes`. Default false.
    pub observe: bool,
    /// Time between two polls when `observe`. Default 100 ms.
    pub observe_interval: Duration,
    /// `total` overrides by replica base URL (`http://host:port`, as [`ReplicaAddr::base`]).
    pub per_replica: BTreeMap<String, ThreadTotal>,
}

impl Threads {
    /// The total for the replica at `base`.
    pub fn total_for(&self, base: &str) -> ThreadTotal {
        self.per_replica.get(base).copied().unwrap_or(self.total)
    }
}

fn default_user() -> String {
    "default".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUser {
    name: String,
    #[serde(default)]
    password_sha256: String,
    #[serde(default = "loopback")]
    networks: Vec<String>,
    cluster: String,
    #[serde(default = "default_user_concurrency")]
    max_concurrency: usize,
    #[serde(default = "default_user_queue")]
    queue_size: usize,
    #[serde(default = "default_user_wait")]
    queue_max_wait: Dur,
    #[serde(default)]
    requests_per_second: u32,
    max_execution_time: Option<Dur>,
    #[serde(default = "any_setting")]
    allowed_settings: Vec<String>,
    #[serde(default)]
    readonly: bool,
    #[serde(default)]
    settings: BTreeMap<String, serde_yaml::Value>,
}

fn loopback() -> Vec<String> {
    vec!["127.0.0.0/8".into(), "::1/128".into()]
}
fn default_user_concurrency() -> usize {
    64
}
fn default_user_queue() -> usize {
    128
}
fn default_user_wait() -> Dur {
    Dur(Duration::from_millis(500))
}
fn any_setting() -> Vec<String> {
    vec!["*".into()]
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: String,
    listen_native: Option<String>,
    listen_native_secure: Option<String>,
    metrics_listen: Option<String>,
    tls: Option<TlsFiles>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    health: Health,
    #[serde(default)]
    retries: Retries,
    #[serde(default)]
    pool: PoolCfg,
    #[serde(default)]
    hedging: Hedging,
    #[serde(default)]
    shutdown: Shutdown,
    #[serde(default)]
    reuse_port: bool,
    workers: Option<RawWorkers>,
    clusters: BTreeMap<String, RawCluster>,
    users: Vec<RawUser>,
}

/// `workers:` as written: a count or a word (`auto`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawWorkers {
    Count(i64),
    Word(String),
}

/// The most worker threads `workers:` may ask for.
pub const MAX_WORKERS: usize = 256;

/// `workers: auto`: half the logical cores, at least one. A worker at 130 µs of CPU per proxied
/// query serves about 7,000 queries a second; fewer, busier workers handle more wake-ups per poll
/// and leave the cores to ClickHouse or the load beside the gateway. Measured on 2 cores beside
/// a server (docs/PERFORMANCE.md): 1 worker spent 119 to 141 µs per HTTP query and 126 to 150
/// per native one, 2 workers 142 to 154 and 180 to 188.
pub fn auto_workers() -> usize {
    (std::thread::available_parallelism().map_or(1, |n| n.get()) / 2).max(1)
}

/// A backend replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaAddr {
    /// `http://host:port` (no trailing slash).
    pub base: String,
    pub https: bool,
}

#[derive(Debug, Clone)]
pub struct Shard {
    pub weight: u32,
    pub replicas: Vec<ReplicaAddr>,
}

#[derive(Debug, Clone)]
pub struct Cluster {
    pub name: String,
    pub user: String,
    pub password: String,
    pub shards: Vec<Shard>,
    /// Shard routing, when configured.
    pub routing: Option<Router>,
    /// Each replica's native TCP address (`HOST:PORT`) by its [`ReplicaAddr::base`]: from the
    /// shards' `native` lists; every replica has one when `listen_native` is set.
    pub native: BTreeMap<String, String>,
}

/// Which settings a user may set.
#[derive(Debug, Clone, PartialEq)]
pub enum AllowedSettings {
    Any,
    Only(BTreeSet<String>),
}

impl AllowedSettings {
    pub fn allows(&self, name: &str) -> bool {
        match self {
            AllowedSettings::Any => true,
            AllowedSettings::Only(s) => s.contains(name),
        }
    }
}

#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    /// None: no password.
    pub password_sha256: Option<[u8; 32]>,
    pub networks: Vec<IpNet>,
    pub cluster: String,
    pub max_concurrency: usize,
    pub queue_size: usize,
    pub queue_max_wait: Duration,
    /// 0 = no limit.
    pub requests_per_second: u32,
    pub max_execution_time: Option<Duration>,
    pub allowed_settings: AllowedSettings,
    pub readonly: bool,
    /// Fixed settings, applied after (and so winning over) the client's.
    pub settings: Vec<(String, String)>,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub source: PathBuf,
    pub listen: SocketAddr,
    /// Where the gateway speaks ClickHouse's native TCP protocol (`crate::native`). None (the
    /// default): it does not.
    pub listen_native: Option<SocketAddr>,
    /// Where the gateway speaks the native protocol over TLS (as ClickHouse's
    /// `tcp_port_secure`), with the certificate of `tls`. None (the default): it does not.
    pub listen_native_secure: Option<SocketAddr>,
    /// Where `/metrics` is served (plain HTTP, only `/metrics`). None (the default): on `listen`.
    /// When set, `listen` answers `/metrics` as ClickHouse does (404).
    pub metrics_listen: Option<SocketAddr>,
    /// The certificate and key of `listen` (then HTTPS) and of `listen_native_secure`.
    pub tls: Option<TlsFiles>,
    pub limits: Limits,
    pub health: Health,
    pub retries: Retries,
    pub pool: PoolCfg,
    pub hedging: Hedging,
    pub shutdown: Shutdown,
    /// Listen with SO_REUSEPORT, so a new gateway can start on the port before the old one
    /// stops. Default false (a second gateway on the port by mistake is an error).
    pub reuse_port: bool,
    /// Worker threads, each with its own runtime, connections and backend pools
    /// ([`crate::runtime::workers`]). Default `auto`: half the logical cores, at least 1 ([`auto_workers`]).
    pub workers: usize,
    pub clusters: BTreeMap<String, Cluster>,
    pub users: BTreeMap<String, User>,
    /// Thread budgets by cluster name (clusters without a `threads` section have none).
    pub threads: BTreeMap<String, Threads>,
}

/// The longest user name the gateway accepts, in a request or in the config: 128 bytes.
pub const MAX_USER_NAME: usize = 128;

/// Why `name` cannot be a user name (the same rule for the config and for requests): empty,
/// longer than [`MAX_USER_NAME`] bytes, or holding a control character.
pub fn check_user_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the user name is empty".into());
    }
    if name.len() > MAX_USER_NAME {
        return Err(format!("the user name is {} bytes long; at most {MAX_USER_NAME}", name.len()));
    }
    if name.chars().any(char::is_control) {
        return Err("the user name holds a control character".into());
    }
    Ok(())
}

/// True when two listen addresses would take the same port: the same port (not 0, which
/// means any free one), on the same IP or with either on every IP.
fn same_port(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && a.port() != 0 && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

fn scalar(v: &serde_yaml::Value) -> Option<String> {
    match v {
        serde_yaml::Value::String(s) => Some(s.clone()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        serde_yaml::Value::Bool(b) => Some(if *b { "1" } else { "0" }.into()),
        _ => None,
    }
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            line: None,
            message: format!("cannot read it: {e}"),
        })?;
        Config::parse(&text, path)
    }

    /// Parses and validates config text.
    pub fn parse(text: &str, source: &Path) -> Result<Config, ConfigError> {
        let file = source.display().to_string();
        let raw: RawConfig = chstorm_yaml::parse(text).map_err(|e| ConfigError {
            file: file.clone(),
            line: e.line,
            message: e.message,
        })?;
        let err = |needle: &str, message: String| ConfigError {
            file: file.clone(),
            line: chstorm_yaml::line_of(text, needle),
            message,
        };

        let listen: SocketAddr = raw
            .listen
            .parse()
            .map_err(|_| err("listen:", format!("listen: '{}' is not an address like 127.0.0.1:8124", raw.listen)))?;
        let auto = auto_workers();
        let workers = match &raw.workers {
            None => auto,
            Some(RawWorkers::Word(w)) if w == "auto" => auto,
            Some(RawWorkers::Count(n)) if (1..=MAX_WORKERS as i64).contains(n) => *n as usize,
            Some(w) => {
                let said = match w {
                    RawWorkers::Count(n) => n.to_string(),
                    RawWorkers::Word(s) => format!("'{s}'"),
                };
                return Err(err(
                    "workers:",
                    format!("workers: {said} is not `auto` or a thread count from 1 to {MAX_WORKERS}"),
                ));
            }
        };
        let listen_native = match &raw.listen_native {
            None => None,
            Some(n) => Some(n.parse::<SocketAddr>().map_err(|_| {
                err("listen_native:", format!("listen_native: '{n}' is not an address like 127.0.0.1:9001"))
            })?),
        };
        if listen_native.is_some_and(|n| n == listen && n.port() != 0) {
            return Err(err(
                "listen_native:",
                format!("listen_native: {listen} is also `listen`; the native protocol needs its own port"),
            ));
        }
        let listen_native_secure = match &raw.listen_native_secure {
            None => None,
            Some(n) => Some(n.parse::<SocketAddr>().map_err(|_| {
                err(
                    "listen_native_secure:",
                    format!("listen_native_secure: '{n}' is not an address like 127.0.0.1:9440"),
                )
            })?),
        };
        if let Some(secure) = listen_native_secure {
            if raw.tls.is_none() {
                return Err(err(
                    "listen_native_secure:",
                    "listen_native_secure: needs a certificate; add a `tls:` section with `cert:` and `key:` \
                     (PEM files; note that `tls:` also makes `listen` HTTPS)"
                        .into(),
                ));
            }
            for (other, addr) in [("listen", Some(listen)), ("listen_native", listen_native)] {
                if addr.is_some_and(|a| same_port(a, secure)) {
                    return Err(err(
                        "listen_native_secure:",
                        format!("listen_native_secure: {secure} is also `{other}`; native TLS needs its own port"),
                    ));
                }
            }
        }
        let metrics_listen = match &raw.metrics_listen {
            None => None,
            Some(m) => Some(m.parse::<SocketAddr>().map_err(|_| {
                err("metrics_listen:", format!("metrics_listen: '{m}' is not an address like 127.0.0.1:9363"))
            })?),
        };
        if let (Some(m), Some(secure)) = (metrics_listen, listen_native_secure) {
            if same_port(m, secure) {
                return Err(err(
                    "metrics_listen:",
                    format!("metrics_listen: {m} is also `listen_native_secure`; give /metrics its own port"),
                ));
            }
        }
        if metrics_listen.is_some_and(|m| m == listen && m.port() != 0) {
            return Err(err(
                "metrics_listen:",
                format!("metrics_listen: {listen} is also `listen`; give /metrics its own port, or remove metrics_listen to serve it on `listen`"),
            ));
        }
        for (field, d) in [
            ("client_header_timeout", raw.limits.client_header_timeout.0),
            ("client_body_idle_timeout", raw.limits.client_body_idle_timeout.0),
            ("client_packet_timeout", raw.limits.client_packet_timeout.0),
            ("client_write_timeout", raw.limits.client_write_timeout.0),
        ] {
            if d < MIN_CLIENT_TIMEOUT {
                return Err(err(
                    field,
                    format!("limits.{field}: {} is too short; at least 100ms", humantime::format_duration(d)),
                ));
            }
        }
        if raw.limits.max_client_buffer_mib == 0 || raw.limits.max_buffered_mib == 0 {
            return Err(err(
                "max_client_buffer_mib",
                "limits.max_client_buffer_mib and limits.max_buffered_mib: must be at least 1".into(),
            ));
        }
        if raw.limits.max_concurrency == 0 {
            return Err(err("max_concurrency", "limits.max_concurrency: must be at least 1".into()));
        }
        if raw.limits.max_query_depth == 0 {
            return Err(err("max_query_depth", "limits.max_query_depth: must be at least 1".into()));
        }
        if raw.health.fall == 0 || raw.health.rise == 0 {
            return Err(err("health:", "health.fall and health.rise: must be at least 1".into()));
        }
        if !(0.0..=10.0).contains(&raw.retries.budget_ratio) {
            return Err(err("budget_ratio", "retries.budget_ratio: must be between 0 and 10".into()));
        }
        let h = &raw.hedging;
        if !(0.5..=1.0).contains(&h.quantile) || !(1.0..=100.0).contains(&h.factor) {
            return Err(err(
                "hedging:",
                "hedging.quantile must be within 0.5..1 and hedging.factor within 1..100".into(),
            ));
        }
        if h.min_delay.0 > h.max_delay.0 {
            return Err(err("hedging:", "hedging.min_delay must not be above hedging.max_delay".into()));
        }
        if h.max_extra > 4 {
            return Err(err("max_extra", "hedging.max_extra: at most 4 extra copies of a query".into()));
        }
        if raw.clusters.is_empty() {
            return Err(err("clusters:", "clusters: at least one cluster is needed".into()));
        }
        let mut clusters = BTreeMap::new();
        let mut threads = BTreeMap::new();
        for (name, c) in raw.clusters {
            if c.shards.is_empty() {
                return Err(err(&format!("{name}:"), format!("clusters.{name}.shards: at least one shard is needed")));
            }
            let mut shards = Vec::new();
            let mut native = BTreeMap::new();
            for (i, s) in c.shards.iter().enumerate() {
                if s.replicas.is_empty() {
                    return Err(err(
                        &format!("{name}:"),
                        format!("clusters.{name}.shards[{i}].replicas: at least one replica is needed"),
                    ));
                }
                let mut replicas = Vec::new();
                for r in &s.replicas {
                    let u = url::Url::parse(r).map_err(|e| {
                        err(r, format!("clusters.{name}.shards[{i}].replicas: '{r}' is not a URL ({e})"))
                    })?;
                    let https = match u.scheme() {
                        "http" => false,
                        "https" => true,
                        other => {
                            return Err(err(r, format!("clusters.{name}.shards[{i}].replicas: scheme '{other}' of '{r}': use http:// or https://")))
                        }
                    };
                    let host = u
                        .host_str()
                        .ok_or_else(|| err(r, format!("clusters.{name}.shards[{i}].replicas: '{r}' has no host")))?;
                    let port = u.port_or_known_default().unwrap_or(8123);
                    replicas.push(ReplicaAddr { base: format!("{}://{host}:{port}", u.scheme()), https });
                }
                if !s.native.is_empty() || listen_native.is_some() || listen_native_secure.is_some() {
                    let at = format!("clusters.{name}.shards[{i}].native");
                    if s.native.len() != replicas.len() {
                        return Err(err(
                            &format!("{name}:"),
                            format!(
                                "{at}: {} addresses for {} replicas; with listen_native each replica needs its native \
                                 HOST:PORT (its tcp_port), in the order of `replicas`",
                                s.native.len(),
                                replicas.len()
                            ),
                        ));
                    }
                    for (r, n) in replicas.iter().zip(&s.native) {
                        let port = n.rsplit_once(':').and_then(|(h, p)| (!h.is_empty()).then_some(p));
                        if port.and_then(|p| p.parse::<u16>().ok()).filter(|p| *p != 0).is_none() {
                            return Err(err(n, format!("{at}: '{n}' is not HOST:PORT like 127.0.0.1:9000")));
                        }
                        native.insert(r.base.clone(), n.clone());
                    }
                }
                shards.push(Shard { weight: s.weight, replicas });
            }
            if shards.iter().all(|s| s.weight == 0) {
                return Err(err(&format!("{name}:"), format!("clusters.{name}.shards: all weights are 0")));
            }
            let routing = match c.routing {
                None => None,
                Some(r) => {
                    let at = |e: String| err("routing:", format!("clusters.{name}.routing: {e}"));
                    let col_type = ColumnType::parse(&r.key_type).map_err(|e| at(e.to_string()))?;
                    let weights = shards.iter().map(|s| s.weight).collect();
                    Some(
                        Router::new(&r.sharding_key, col_type, r.tables, r.database, r.where_column, weights)
                            .map_err(|e| at(e.to_string()))?,
                    )
                }
            };
            if let Some(t) = c.threads {
                let at = |field: &str, e: String| err("threads:", format!("clusters.{name}.threads.{field}: {e}"));
                if t.total == ThreadTotal::Fixed(0) {
                    return Err(at("total", "must be at least 1, or auto".into()));
                }
                if t.max_per_query == Some(0) {
                    return Err(at("max_per_query", "must be at least 1".into()));
                }
                if t.observe_interval.0 < Duration::from_millis(10) {
                    return Err(at("observe_interval", "must be at least 10ms".into()));
                }
                let mut per_replica = BTreeMap::new();
                for (url, total) in t.per_replica {
                    let base = url::Url::parse(&url).ok().and_then(|u| {
                        Some(format!(
                            "{}://{}:{}",
                            u.scheme(),
                            u.host_str()?,
                            u.port_or_known_default().unwrap_or(8123)
                        ))
                    });
                    let known =
                        base.as_ref().filter(|b| shards.iter().any(|s| s.replicas.iter().any(|r| &r.base == *b)));
                    let Some(base) = known else {
                        return Err(err(
                            &url,
                            format!(
                                "clusters.{name}.threads.per_replica: '{url}' is not a replica of cluster '{name}'"
                            ),
                        ));
                    };
                    if total == ThreadTotal::Fixed(0) {
                        return Err(err(
                            &url,
                            format!("clusters.{name}.threads.per_replica.{url}: must be at least 1, or auto"),
                        ));
                    }
                    per_replica.insert(base.clone(), total);
                }
                threads.insert(
                    name.clone(),
                    Threads {
                        total: t.total,
                        max_per_query: t.max_per_query.unwrap_or(16),
                        cap_at_cores: t.max_per_query.is_none(),
                        mode: t.mode,
                        max_wait: t.max_wait.0,
                        observe: t.observe,
                        observe_interval: t.observe_interval.0,
                        per_replica,
                    },
                );
            }
            clusters
                .insert(name.clone(), Cluster { name, user: c.user, password: c.password, shards, routing, native });
        }
        let mut users = BTreeMap::new();
        for (i, u) in raw.users.into_iter().enumerate() {
            let at = format!("name: {}", u.name);
            if let Err(why) = check_user_name(&u.name) {
                return Err(err(&at, format!("users[{i}].name: {why}")));
            }
            if u.name == crate::metrics::UNKNOWN_USER {
                return Err(err(
                    &at,
                    format!("users[{i}].name: '{}' is reserved: it is the metrics label of requests from unauthenticated or unknown users", u.name),
                ));
            }
            if users.contains_key(&u.name) {
                return Err(err(&at, format!("users[{i}].name: '{}' appears twice", u.name)));
            }
            if !clusters.contains_key(&u.cluster) {
                return Err(err(&at, format!("users[{i}].cluster: no cluster named '{}'", u.cluster)));
            }
            let password_sha256 = if u.password_sha256.is_empty() {
                None
            } else {
                let bytes = hex::decode(u.password_sha256.trim())
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .ok_or_else(|| {
                        err(
                            &at,
                            format!("users[{i}].password_sha256: not 64 hex digits (echo -n PASSWORD | sha256sum)"),
                        )
                    })?;
                Some(bytes)
            };
            let mut networks = Vec::new();
            for n in &u.networks {
                let net =
                    n.parse::<IpNet>().or_else(|_| n.parse::<std::net::IpAddr>().map(IpNet::from)).map_err(|_| {
                        err(&at, format!("users[{i}].networks: '{n}' is not an address or a network like 10.0.0.0/8"))
                    })?;
                networks.push(net);
            }
            if u.max_concurrency == 0 {
                return Err(err(&at, format!("users[{i}].max_concurrency: must be at least 1")));
            }
            let allowed_settings = if u.allowed_settings.iter().any(|s| s == "*") {
                AllowedSettings::Any
            } else {
                AllowedSettings::Only(u.allowed_settings.iter().cloned().collect())
            };
            let mut settings = Vec::new();
            for (k, v) in &u.settings {
                let v = scalar(v)
                    .ok_or_else(|| err(&at, format!("users[{i}].settings.{k}: expected a number or a string")))?;
                settings.push((k.clone(), v));
            }
            users.insert(
                u.name.clone(),
                User {
                    name: u.name,
                    password_sha256,
                    networks,
                    cluster: u.cluster,
                    max_concurrency: u.max_concurrency,
                    queue_size: u.queue_size,
                    queue_max_wait: u.queue_max_wait.0,
                    requests_per_second: u.requests_per_second,
                    max_execution_time: u.max_execution_time.map(|d| d.0),
                    allowed_settings,
                    readonly: u.readonly,
                    settings,
                },
            );
        }
        if users.is_empty() {
            return Err(err("users:", "users: at least one user is needed".into()));
        }
        Ok(Config {
            source: source.to_path_buf(),
            listen,
            listen_native,
            listen_native_secure,
            metrics_listen,
            tls: raw.tls,
            limits: raw.limits,
            health: raw.health,
            retries: raw.retries,
            pool: raw.pool,
            hedging: raw.hedging,
            shutdown: raw.shutdown,
            reuse_port: raw.reuse_port,
            workers,
            clusters,
            users,
            threads,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../docs/gateway.example.yaml");

    #[test]
    fn the_documented_example_is_valid() {
        let c = Config::parse(EXAMPLE, Path::new("gateway.yaml")).unwrap();
        assert_eq!(c.listen.port(), 8124);
        let storm = &c.clusters["storm"];
        assert_eq!(storm.shards.len(), 2);
        assert_eq!(storm.shards[1].replicas[0].base, "http://127.0.0.1:18125");
        assert_eq!(storm.routing.as_ref().unwrap().weights(), &[1, 1]);
        let routed = |db: Option<&str>| {
            storm.routing.as_ref().unwrap().route("SELECT * FROM items WHERE shop_id = 1", None, None, db).is_ok()
        };
        assert!(routed(None) && routed(Some("default")) && !routed(Some("otherdb")));
        let u = &c.users["default"];
        assert!(u.password_sha256.is_none() && u.allowed_settings == AllowedSettings::Any);
        assert_eq!(u.max_execution_time, Some(Duration::from_secs(30)));
        assert_eq!(c.pool.idle_timeout, IdleTimeout::Auto);
    }

    fn bad(text: &str) -> String {
        Config::parse(text, Path::new("g.yaml")).unwrap_err().to_string()
    }

    #[test]
    fn workers_are_auto_or_a_count() {
        let half = (std::thread::available_parallelism().unwrap().get() / 2).max(1);
        assert_eq!(Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap().workers, half);
        let with = |w: &str| format!("workers: {w}\n{EXAMPLE}");
        assert_eq!(Config::parse(&with("auto"), Path::new("g.yaml")).unwrap().workers, half);
        assert_eq!(Config::parse(&with("3"), Path::new("g.yaml")).unwrap().workers, 3);
        for w in ["0", "-1", "257", "many"] {
            let e = bad(&with(w));
            assert!(e.contains("is not `auto` or a thread count from 1 to 256"), "{w}: {e}");
        }
    }

    #[test]
    fn listen_native_needs_a_native_address_per_replica() {
        let c = Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap();
        assert_eq!(c.listen_native.map(|a| a.port()), Some(9001));
        assert_eq!(c.clusters["storm"].native["http://127.0.0.1:18126"], "127.0.0.1:19003");
        let e = bad(&EXAMPLE.replace("listen_native: 127.0.0.1:9001", "listen_native: nine"));
        assert!(e.contains("listen_native: 'nine' is not an address"), "{e}");
        let e = bad(&EXAMPLE.replace("listen_native: 127.0.0.1:9001", "listen_native: 127.0.0.1:8124"));
        assert!(e.contains("is also `listen`"), "{e}");
        let e = bad(&EXAMPLE.replace("native: [127.0.0.1:19002, 127.0.0.1:19003]", "native: [127.0.0.1:19002]"));
        assert!(e.contains("shards[1].native: 1 addresses for 2 replicas"), "{e}");
        let e = bad(&EXAMPLE.replace("127.0.0.1:19003]", "127.0.0.1]"));
        assert!(e.contains("'127.0.0.1' is not HOST:PORT"), "{e}");
        // Without listen_native, no list is needed.
        let text = EXAMPLE
            .replace("listen_native: 127.0.0.1:9001", "")
            .replace("native: [127.0.0.1:19002, 127.0.0.1:19003]", "");
        let c = Config::parse(&text, Path::new("g.yaml")).unwrap();
        assert!(c.listen_native.is_none() && c.clusters["storm"].native.len() == 2);
    }

    #[test]
    fn listen_native_secure_needs_tls_and_its_own_port() {
        let secure = |extra: &str| {
            EXAMPLE.replace("listen_native: 127.0.0.1:9001", &format!("listen_native: 127.0.0.1:9001\n{extra}"))
        };
        let tls = "tls:\n  cert: /c.pem\n  key: /k.pem\n";
        let c = Config::parse(&secure(&format!("listen_native_secure: 127.0.0.1:9440\n{tls}")), Path::new("g.yaml"))
            .unwrap();
        assert_eq!(c.listen_native_secure, Some("127.0.0.1:9440".parse().unwrap()));
        assert_eq!(Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap().listen_native_secure, None, "off by default");
        let e = bad(&secure("listen_native_secure: 127.0.0.1:9440\n"));
        assert!(e.contains("listen_native_secure: needs a certificate; add a `tls:` section"), "{e}");
        assert!(e.contains("line 4") && !e.contains('\n'), "one line, with the key's line: {e}");
        let e = bad(&secure(&format!("listen_native_secure: 127.0.0.1:9001\n{tls}")));
        assert!(e.contains("listen_native_secure: 127.0.0.1:9001 is also `listen_native`"), "{e}");
        let e = bad(&secure(&format!("listen_native_secure: 0.0.0.0:8124\n{tls}")));
        assert!(e.contains("is also `listen`"), "every IP takes listen's port too: {e}");
        let e = bad(&secure(&format!("listen_native_secure: 127.0.0.1:9440\nmetrics_listen: 127.0.0.1:9440\n{tls}")));
        assert!(e.contains("metrics_listen: 127.0.0.1:9440 is also `listen_native_secure`"), "{e}");
        let e = bad(&secure(&format!("listen_native_secure: 9440\n{tls}")));
        assert!(e.contains("listen_native_secure: '9440' is not an address"), "{e}");
        // Port 0 (any free port) clashes with nothing.
        Config::parse(
            &EXAMPLE.replace(
                "listen_native: 127.0.0.1:9001",
                &format!("listen_native: 127.0.0.1:0\nlisten_native_secure: 127.0.0.1:0\n{tls}"),
            ),
            Path::new("g.yaml"),
        )
        .unwrap();
        // It needs the shards' native lists, as listen_native does.
        let text = secure(&format!("listen_native_secure: 127.0.0.1:9440\n{tls}"))
            .replace("listen_native: 127.0.0.1:9001\n", "")
            .replace("native: [127.0.0.1:19002, 127.0.0.1:19003]", "");
        assert!(bad(&text).contains("shards[1].native: 0 addresses for 2 replicas"), "{}", bad(&text));
    }

    #[test]
    fn errors_name_field_and_reason() {
        let e = bad(&EXAMPLE.replace("  interval: 500ms", "  interval: soon"));
        assert!(e.contains("health.interval") && e.contains("'soon' is not a duration"), "{e}");
        let e = bad(&EXAMPLE.replace("  fall: 2", "  fal: 2"));
        assert!(e.contains("unknown field `fal`") && e.contains("line "), "{e}");
        let e = bad(&EXAMPLE.replace("cluster: storm\n", "cluster: nope\n"));
        assert!(e.contains("users[0].cluster: no cluster named 'nope'"), "{e}");
        let e = bad(&EXAMPLE.replace("password_sha256: \"\"", "password_sha256: \"abc\""));
        assert!(e.contains("password_sha256: not 64 hex digits"), "{e}");
        let e = bad(&EXAMPLE.replace("127.0.0.0/8", "localhost-ish"));
        assert!(e.contains("networks: 'localhost-ish'"), "{e}");
        let e = bad(&EXAMPLE.replace("cityHash64(shop_id)", "rand()"));
        assert!(e.contains("sharding_key"), "{e}");
        let e = bad(&EXAMPLE.replace("http://127.0.0.1:18126", "tcp://127.0.0.1:9000"));
        assert!(e.contains("use http:// or https://"), "{e}");
        let e = bad(&EXAMPLE.replace("      database: default ", "      database: a.b "));
        assert!(e.contains("routing: routing.database: 'a.b' is not a database name"), "{e}");
        let e = bad(&EXAMPLE.replace("listen: 127.0.0.1:8124", "listen: everywhere"));
        assert!(e.contains("listen: 'everywhere'") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn max_query_depth() {
        let c = Config::parse(EXAMPLE, Path::new("gateway.yaml")).unwrap();
        assert_eq!(c.limits.max_query_depth, DEFAULT_MAX_QUERY_DEPTH);
        assert_eq!(Limits::default().max_query_depth, 300, "the example states the default");
        let c = Config::parse(&EXAMPLE.replace("max_query_depth: 300", "max_query_depth: 50"), Path::new("g.yaml"));
        assert_eq!(c.unwrap().limits.max_query_depth, 50);
        let e = bad(&EXAMPLE.replace("max_query_depth: 300", "max_query_depth: 0"));
        assert!(e.contains("limits.max_query_depth: must be at least 1"), "{e}");
    }

    #[test]
    fn client_buffer_limits_and_packet_timeout() {
        let c = Config::parse(EXAMPLE, Path::new("gateway.yaml")).unwrap();
        let d = Limits::default();
        let got = |l: &Limits| (l.max_client_buffer_mib, l.max_buffered_mib, l.client_packet_timeout.0);
        assert_eq!(got(&c.limits), (256, 1024, Duration::from_secs(30)));
        assert_eq!(got(&d), got(&c.limits), "the example states the defaults");
        let e = bad(&EXAMPLE.replace("max_buffered_mib: 1024", "max_buffered_mib: 0"));
        assert!(e.contains("must be at least 1"), "{e}");
        let e = bad(&EXAMPLE.replace("client_packet_timeout: 30s", "client_packet_timeout: 5ms"));
        assert!(e.contains("limits.client_packet_timeout: 5ms is too short"), "{e}");
    }

    #[test]
    fn client_timeouts_metrics_listen_and_user_names() {
        let c = Config::parse(EXAMPLE, Path::new("gateway.yaml")).unwrap();
        assert_eq!(c.limits.client_header_timeout.0, Duration::from_secs(10));
        assert_eq!(c.limits.client_body_idle_timeout.0, Duration::from_secs(30));
        assert_eq!(c.metrics_listen, None, "the example leaves metrics_listen commented out");
        let defaults = Limits::default();
        assert_eq!(
            (defaults.client_header_timeout.0, defaults.client_body_idle_timeout.0),
            (Duration::from_secs(10), Duration::from_secs(30)),
            "the example states the defaults"
        );
        let uncommented = EXAMPLE.replace("# metrics_listen: ", "metrics_listen: ");
        let c = Config::parse(&uncommented, Path::new("g.yaml")).unwrap();
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9363".parse().unwrap()));
        let e = bad(&EXAMPLE.replace("# metrics_listen: 127.0.0.1:9363", "metrics_listen: somewhere"));
        assert!(e.contains("metrics_listen: 'somewhere' is not an address") && e.contains("line "), "{e}");
        let e = bad(&EXAMPLE.replace("# metrics_listen: 127.0.0.1:9363", "metrics_listen: 127.0.0.1:8124"));
        assert!(e.contains("is also `listen`"), "{e}");
        let e = bad(&EXAMPLE.replace("client_body_idle_timeout: 30s", "client_body_idle_timeout: 10ms"));
        assert!(
            e.contains("limits.client_body_idle_timeout: 10ms is too short; at least 100ms") && e.contains("line "),
            "{e}"
        );
        let e = bad(&EXAMPLE.replace("client_write_timeout: 30s", "client_write_timeout: 50ms"));
        assert!(e.contains("limits.client_write_timeout: 50ms is too short; at least 100ms"), "{e}");
        let e = bad(&EXAMPLE.replace("client_body_min_rate: 500", "client_body_min_rate: -1"));
        assert!(e.contains("client_body_min_rate"), "{e}");
        let e = bad(&EXAMPLE.replace("client_header_timeout: 10s", "client_header_timeout: 0s"));
        assert!(e.contains("limits.client_header_timeout: 0s is too short"), "{e}");
        let e = bad(&EXAMPLE.replace("client_header_timeout: 10s", "client_header_timeout: later"));
        assert!(e.contains("limits.client_header_timeout") && e.contains("'later' is not a duration"), "{e}");
        let e = bad(&EXAMPLE.replace("- name: default", "- name: unknown"));
        assert!(e.contains("users[0].name: 'unknown' is reserved"), "{e}");
        let long = "u".repeat(MAX_USER_NAME + 1);
        let e = bad(&EXAMPLE.replace("- name: default", &format!("- name: {long}")));
        assert!(e.contains("users[0].name: the user name is 129 bytes long; at most 128"), "{e}");
        assert!(check_user_name(&"u".repeat(MAX_USER_NAME)).is_ok());
        assert!(
            check_user_name("").is_err() && check_user_name("a\nb").is_err() && check_user_name("a\u{7f}").is_err()
        );
        assert!(check_user_name("analyst-7").is_ok() && check_user_name("имя").is_ok());
    }

    #[test]
    fn threads_section() {
        let c = Config::parse(EXAMPLE, Path::new("gateway.yaml")).unwrap();
        assert!(c.threads.is_empty(), "the example leaves the budget commented out");
        // The example's commented block, uncommented, is valid and means what it says.
        let uncommented = EXAMPLE.replace("    # threads:", "    threads:").replace("    #   ", "      ");
        let t = &Config::parse(&uncommented, Path::new("gateway.yaml")).unwrap().threads["storm"];
        assert_eq!(
            (t.total, t.max_per_query, t.mode, t.max_wait, t.observe),
            (ThreadTotal::Auto, 16, ThreadMode::Grant, Duration::from_millis(100), false)
        );
        assert_eq!(t.total_for("http://127.0.0.1:18126"), ThreadTotal::Fixed(8));
        let with = |t: &str| EXAMPLE.replace("    routing:\n", &format!("    threads:\n{t}    routing:\n"));
        let c = Config::parse(&with("      total: 8\n      max_per_query: 4\n      mode: queue\n      max_wait: 50ms\n      observe: true\n      per_replica:\n        http://127.0.0.1:18126: auto\n"), Path::new("g.yaml")).unwrap();
        let t = &c.threads["storm"];
        assert_eq!(
            (t.total, t.max_per_query, t.mode, t.max_wait, t.observe),
            (ThreadTotal::Fixed(8), 4, ThreadMode::Queue, Duration::from_millis(50), true)
        );
        assert!(!t.cap_at_cores, "max_per_query set: that is the cap");
        assert_eq!(t.total_for("http://127.0.0.1:18126"), ThreadTotal::Auto);
        assert_eq!(t.total_for("http://127.0.0.1:18123"), ThreadTotal::Fixed(8));
        let t = &Config::parse(&with("      total: auto\n"), Path::new("g.yaml")).unwrap().threads["storm"];
        assert_eq!(
            (t.total, t.max_per_query, t.mode, t.max_wait, t.observe),
            (ThreadTotal::Auto, 16, ThreadMode::Grant, Duration::from_millis(100), false)
        );
        // `threads: {}`: every default (what docs/GATEWAY.md and scripts/bench_threads.py call
        // the default budget).
        let t =
            &Config::parse(&EXAMPLE.replace("    routing:\n", "    threads: {}\n    routing:\n"), Path::new("g.yaml"))
                .unwrap()
                .threads["storm"];
        assert_eq!(
            (t.total, t.max_per_query, t.mode, t.max_wait, t.observe),
            (ThreadTotal::Auto, 16, ThreadMode::Grant, Duration::from_millis(100), false)
        );
        assert!(t.cap_at_cores, "max_per_query not set: grants are capped at the server's cores too");
        let t = &Config::parse(
            &with("      total: adaptive\n      per_replica:\n        http://127.0.0.1:18126: 3\n"),
            Path::new("g.yaml"),
        )
        .unwrap()
        .threads["storm"];
        assert_eq!(t.total_for("http://127.0.0.1:18123"), ThreadTotal::Adaptive);
        assert_eq!(t.total_for("http://127.0.0.1:18126"), ThreadTotal::Fixed(3));
        let e = bad(&with("      total: 0\n"));
        assert!(e.contains("clusters.storm.threads.total: must be at least 1, or auto") && e.contains("line "), "{e}");
        let e = bad(&with("      total: many\n"));
        assert!(e.contains("threads.total") && e.contains("expected a number of threads, auto or adaptive"), "{e}");
        let e = bad(&with("      mode: fast\n"));
        assert!(e.contains("threads.mode") && e.contains("unknown variant `fast`"), "{e}");
        let e = bad(&with("      max_per_query: 0\n"));
        assert!(e.contains("threads.max_per_query: must be at least 1"), "{e}");
        let e = bad(&with("      per_replica:\n        http://10.0.0.1:8123: 4\n"));
        assert!(e.contains("per_replica: 'http://10.0.0.1:8123' is not a replica of cluster 'storm'"), "{e}");
        let e = bad(&with("      totl: 4\n"));
        assert!(e.contains("unknown field `totl`"), "{e}");
    }
}
