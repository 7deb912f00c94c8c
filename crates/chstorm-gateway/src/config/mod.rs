//! The gateway's YAML configuration (see `docs/gateway.example.yaml`).
//!
//! [`Config::load`] parses and validates; every error names the file, the line where it is
//! known, the field and the reason. Unknown keys are errors. Defaults are stated on each field.
//!
//! The types of each section, with its parsing and validation, live in one file each:
//! * [`listen`]: `listen`, `listen_native`, `listen_native_secure`, `metrics_listen`, `tls`,
//!   `workers`, `reuse_port` and `shutdown` (the gateway's own sockets and threads);
//! * [`limits`]: `limits` (admission and the client-facing bounds);
//! * [`backend`]: `health`, `retries`, `hedging` and `pool` (how replicas are used);
//! * [`clusters`]: `clusters` (shards, replicas, native addresses, routing), each cluster's
//!   `threads` in [`threads`];
//! * [`cache`]: `cache` (the result cache's bound) and each user's `cache`;
//! * [`users`]: `users` (passwords, networks, admission, settings rules, the ClickHouse user
//!   each runs as);
//! * [`login`]: the logins the gateway uses on the replicas (a cluster's, a user's `backend`).
//!
//! [`Config::parse`] runs them in that order, so that the first error in the file's order of
//! sections is the one reported.

mod backend;
mod cache;
mod clusters;
mod limits;
mod listen;
mod login;
#[cfg(test)]
mod tests;
mod threads;
mod users;

// Every public item keeps its path `crate::config::X`; some are named only by docs and tests.
#[allow(unused_imports)]
pub use backend::{Health, HedgeDelay, Hedging, IdleTimeout, MaxIdle, PoolCfg, Retries};
#[allow(unused_imports)]
pub use cache::{CacheCfg, UserCache};
#[allow(unused_imports)]
pub use clusters::{Cluster, ReplicaAddr, Shard};
#[allow(unused_imports)]
pub use limits::{Limits, DEFAULT_MAX_QUERY_DEPTH, MIN_CLIENT_TIMEOUT};
#[allow(unused_imports)]
pub use listen::{auto_workers, Shutdown, TlsFiles, MAX_WORKERS};
pub use login::Login;
pub use threads::{ThreadMode, ThreadTotal, Threads};
#[allow(unused_imports)]
pub use users::{check_user_name, AllowedSettings, Names, User, MAX_USER_NAME};

use clusters::RawCluster;
use listen::RawWorkers;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use users::RawUser;

/// A config that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {message}", line.map(|l| format!(": line {l}")).unwrap_or_default())]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

pub use chstorm_yaml::Dur;

/// Where a section's errors point: the file's name, and its text to find the line of a key.
struct Ctx<'a> {
    file: String,
    text: &'a str,
    /// The environment variables `password_env` names are read from.
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Ctx<'_> {
    /// An error at the first line holding `needle` (none when no line does).
    fn err(&self, needle: &str, message: String) -> ConfigError {
        ConfigError { file: self.file.clone(), line: chstorm_yaml::line_of(self.text, needle), message }
    }
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
    #[serde(default)]
    cache: CacheCfg,
    clusters: BTreeMap<String, RawCluster>,
    users: Vec<RawUser>,
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
    /// The result cache's gateway-wide bound (`cache:`).
    pub cache: CacheCfg,
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

    /// Parses and validates config text, section by section (see the module doc).
    pub fn parse(text: &str, source: &Path) -> Result<Config, ConfigError> {
        Config::parse_with_env(text, source, &|name| std::env::var(name).ok())
    }

    /// [`Config::parse`], with the variables `password_env` names read from `env`.
    pub fn parse_with_env(
        text: &str,
        source: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let file = source.display().to_string();
        let raw: RawConfig = chstorm_yaml::parse(text).map_err(|e| ConfigError {
            file: file.clone(),
            line: e.line,
            message: e.message,
        })?;
        let ctx = Ctx { file, text, env };
        let addrs = listen::parse(&ctx, &raw)?;
        limits::check(&ctx, &raw.limits)?;
        backend::check(&ctx, &raw.health, &raw.retries, &raw.hedging)?;
        cache::check(&ctx, &raw.cache)?;
        let native_needed = addrs.listen_native.is_some() || addrs.listen_native_secure.is_some();
        let (clusters, threads) = clusters::parse(&ctx, raw.clusters, native_needed)?;
        let users = users::parse(&ctx, raw.users, &clusters)?;
        Ok(Config {
            source: source.to_path_buf(),
            listen: addrs.listen,
            listen_native: addrs.listen_native,
            listen_native_secure: addrs.listen_native_secure,
            metrics_listen: addrs.metrics_listen,
            tls: raw.tls,
            limits: raw.limits,
            health: raw.health,
            retries: raw.retries,
            pool: raw.pool,
            hedging: raw.hedging,
            shutdown: raw.shutdown,
            reuse_port: raw.reuse_port,
            workers: addrs.workers,
            clusters,
            users,
            threads,
            cache: raw.cache,
        })
    }
}
