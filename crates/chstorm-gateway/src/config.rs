//! The gateway's YAML configuration (see `docs/gateway.example.yaml`).
//!
//! [`Config::load`] parses and validates; every error names the file, the line where it is
//! known, the field and the reason. Unknown keys are errors. Defaults are stated on each field.

use crate::route::{ColumnType, Router};
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

/// A duration written as `500ms`, `2s`, `1m`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(Dur)
            .map_err(|e| de::Error::custom(format!("'{s}' is not a duration ({e}); write e.g. 500ms, 2s")))
    }
}

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
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_concurrency: 256, queue_size: 1024, queue_max_wait: Dur(Duration::from_secs(1)) }
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
    tls: Option<TlsFiles>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    health: Health,
    #[serde(default)]
    retries: Retries,
    #[serde(default)]
    pool: PoolCfg,
    clusters: BTreeMap<String, RawCluster>,
    users: Vec<RawUser>,
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
    pub tls: Option<TlsFiles>,
    pub limits: Limits,
    pub health: Health,
    pub retries: Retries,
    pub pool: PoolCfg,
    pub clusters: BTreeMap<String, Cluster>,
    pub users: BTreeMap<String, User>,
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
        let de = serde_yaml::Deserializer::from_str(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let msg = inner.to_string();
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            let msg = match msg.split_once(": ") {
                Some((prefix, rest)) if path.starts_with(prefix) && !prefix.contains(' ') => rest.to_string(),
                _ => msg,
            };
            ConfigError {
                file: file.clone(),
                line: inner.location().map(|l| l.line()),
                message: if path == "." { msg } else { format!("{path}: {msg}") },
            }
        })?;
        let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).map(|i| i + 1);
        let err = |needle: &str, message: String| ConfigError { file: file.clone(), line: line_of(needle), message };

        let listen: SocketAddr = raw
            .listen
            .parse()
            .map_err(|_| err("listen:", format!("listen: '{}' is not an address like 127.0.0.1:8124", raw.listen)))?;
        if raw.limits.max_concurrency == 0 {
            return Err(err("max_concurrency", "limits.max_concurrency: must be at least 1".into()));
        }
        if raw.health.fall == 0 || raw.health.rise == 0 {
            return Err(err("health:", "health.fall and health.rise: must be at least 1".into()));
        }
        if !(0.0..=10.0).contains(&raw.retries.budget_ratio) {
            return Err(err("budget_ratio", "retries.budget_ratio: must be between 0 and 10".into()));
        }
        if raw.clusters.is_empty() {
            return Err(err("clusters:", "clusters: at least one cluster is needed".into()));
        }
        let mut clusters = BTreeMap::new();
        for (name, c) in raw.clusters {
            if c.shards.is_empty() {
                return Err(err(&format!("{name}:"), format!("clusters.{name}.shards: at least one shard is needed")));
            }
            let mut shards = Vec::new();
            for (i, s) in c.shards.iter().enumerate() {
                if s.replicas.is_empty() {
                    return Err(err(&format!("{name}:"), format!("clusters.{name}.shards[{i}].replicas: at least one replica is needed")));
                }
                let mut replicas = Vec::new();
                for r in &s.replicas {
                    let u = url::Url::parse(r)
                        .map_err(|e| err(r, format!("clusters.{name}.shards[{i}].replicas: '{r}' is not a URL ({e})")))?;
                    let https = match u.scheme() {
                        "http" => false,
                        "https" => true,
                        other => {
                            return Err(err(r, format!("clusters.{name}.shards[{i}].replicas: scheme '{other}' of '{r}': use http:// or https://")))
                        }
                    };
                    let host = u.host_str().ok_or_else(|| err(r, format!("clusters.{name}.shards[{i}].replicas: '{r}' has no host")))?;
                    let port = u.port_or_known_default().unwrap_or(8123);
                    replicas.push(ReplicaAddr { base: format!("{}://{host}:{port}", u.scheme()), https });
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
                    Some(Router::new(&r.sharding_key, col_type, r.tables, r.where_column, weights).map_err(|e| at(e.to_string()))?)
                }
            };
            clusters.insert(name.clone(), Cluster { name, user: c.user, password: c.password, shards, routing });
        }
        let mut users = BTreeMap::new();
        for (i, u) in raw.users.into_iter().enumerate() {
            let at = format!("name: {}", u.name);
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
                    .ok_or_else(|| err(&at, format!("users[{i}].password_sha256: not 64 hex digits (echo -n PASSWORD | sha256sum)")))?;
                Some(bytes)
            };
            let mut networks = Vec::new();
            for n in &u.networks {
                let net = n
                    .parse::<IpNet>()
                    .or_else(|_| n.parse::<std::net::IpAddr>().map(IpNet::from))
                    .map_err(|_| err(&at, format!("users[{i}].networks: '{n}' is not an address or a network like 10.0.0.0/8")))?;
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
                let v = scalar(v).ok_or_else(|| err(&at, format!("users[{i}].settings.{k}: expected a number or a string")))?;
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
            tls: raw.tls,
            limits: raw.limits,
            health: raw.health,
            retries: raw.retries,
            pool: raw.pool,
            clusters,
            users,
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
        let u = &c.users["default"];
        assert!(u.password_sha256.is_none() && u.allowed_settings == AllowedSettings::Any);
        assert_eq!(u.max_execution_time, Some(Duration::from_secs(30)));
        assert_eq!(c.pool.idle_timeout, IdleTimeout::Auto);
    }

    fn bad(text: &str) -> String {
        Config::parse(text, Path::new("g.yaml")).unwrap_err().to_string()
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
        let e = bad(&EXAMPLE.replace("listen: 127.0.0.1:8124", "listen: everywhere"));
        assert!(e.contains("listen: 'everywhere'") && e.contains("line 2"), "{e}");
    }
}
