//! `clusters:`: shards, replicas (HTTP URLs and native addresses), routing; each cluster's
//! `threads:` is parsed by [`super::threads`].

use super::threads::{self, RawThreads, Threads};
use super::{ConfigError, Ctx};
use chstorm_sql::route::{ColumnType, Router};
use serde::Deserialize;
use std::collections::BTreeMap;

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
pub(super) struct RawCluster {
    #[serde(default = "default_user")]
    user: String,
    password: Option<String>,
    password_env: Option<String>,
    shards: Vec<RawShard>,
    routing: Option<RawRouting>,
    /// The thread budget (`crate::cluster::budget`); absent: no budget.
    threads: Option<RawThreads>,
}

fn default_user() -> String {
    "default".into()
}

/// A backend replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaAddr {
    /// `http://host:port` (no trailing slash).
    pub base: String,
    pub https: bool,
}

/// A shard: its weight (for routing) and its replicas.
#[derive(Debug, Clone)]
pub struct Shard {
    pub weight: u32,
    pub replicas: Vec<ReplicaAddr>,
}

/// A cluster: the credentials the gateway uses on its replicas, its shards, its routing.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub name: String,
    /// The cluster's login (`user`, and `password` or `password_env`): what the gateway's own
    /// work runs as (KILL guards aside, which go as the query's user), and the queries of users
    /// without a `backend`.
    pub user: String,
    pub password: String,
    pub shards: Vec<Shard>,
    /// Shard routing, when configured.
    pub routing: Option<Router>,
    /// Each replica's native TCP address (`HOST:PORT`) by its [`ReplicaAddr::base`]: from the
    /// shards' `native` lists; every replica has one when `listen_native` is set.
    pub native: BTreeMap<String, String>,
}

impl Cluster {
    /// The cluster's own login.
    pub fn login(&self) -> super::Login {
        super::Login { user: self.user.clone(), password: self.password.clone() }
    }
}

/// The clusters and their thread budgets, by cluster name.
type Parsed = (BTreeMap<String, Cluster>, BTreeMap<String, Threads>);

/// The clusters and their thread budgets (by cluster name); at least one cluster is needed.
/// `native_needed`: a native listener is configured, so every replica needs its native address.
pub(super) fn parse(ctx: &Ctx, raw: BTreeMap<String, RawCluster>, native_needed: bool) -> Result<Parsed, ConfigError> {
    if raw.is_empty() {
        return Err(ctx.err("clusters:", "clusters: at least one cluster is needed".into()));
    }
    let mut clusters = BTreeMap::new();
    let mut budgets = BTreeMap::new();
    for (name, c) in raw {
        if c.shards.is_empty() {
            return Err(ctx.err(&format!("{name}:"), format!("clusters.{name}.shards: at least one shard is needed")));
        }
        let mut shards = Vec::new();
        let mut native = BTreeMap::new();
        for (i, s) in c.shards.iter().enumerate() {
            shards.push(shard(ctx, &name, i, s, native_needed, &mut native)?);
        }
        if shards.iter().all(|s| s.weight == 0) {
            return Err(ctx.err(&format!("{name}:"), format!("clusters.{name}.shards: all weights are 0")));
        }
        let routing = match c.routing {
            None => None,
            Some(r) => Some(routing(ctx, &name, r, &shards)?),
        };
        if let Some(t) = c.threads {
            let known = |base: &str| shards.iter().any(|s| s.replicas.iter().any(|r| r.base == base));
            budgets.insert(name.clone(), threads::parse(ctx, &name, t, &known)?);
        }
        let place = super::login::Place { at: &format!("{name}:"), field: &format!("clusters.{name}") };
        let password = super::login::password(ctx, &place, c.password.as_deref(), c.password_env.as_deref())?;
        clusters.insert(name.clone(), Cluster { name, user: c.user, password, shards, routing, native });
    }
    Ok((clusters, budgets))
}

/// Shard `i` of cluster `name`: its replicas' URLs, and their native addresses (into `native`)
/// when the shard lists them or `native_needed`.
fn shard(
    ctx: &Ctx,
    name: &str,
    i: usize,
    s: &RawShard,
    native_needed: bool,
    native: &mut BTreeMap<String, String>,
) -> Result<Shard, ConfigError> {
    if s.replicas.is_empty() {
        return Err(ctx.err(
            &format!("{name}:"),
            format!("clusters.{name}.shards[{i}].replicas: at least one replica is needed"),
        ));
    }
    let mut replicas = Vec::new();
    for r in &s.replicas {
        replicas.push(replica(ctx, name, i, r)?);
    }
    if !s.native.is_empty() || native_needed {
        let at = format!("clusters.{name}.shards[{i}].native");
        if s.native.len() != replicas.len() {
            return Err(ctx.err(
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
                return Err(ctx.err(n, format!("{at}: '{n}' is not HOST:PORT like 127.0.0.1:9000")));
            }
            native.insert(r.base.clone(), n.clone());
        }
    }
    Ok(Shard { weight: s.weight, replicas })
}

/// A replica's URL `r` (http:// or https://; the port defaults to the scheme's).
fn replica(ctx: &Ctx, name: &str, i: usize, r: &str) -> Result<ReplicaAddr, ConfigError> {
    let u = url::Url::parse(r)
        .map_err(|e| ctx.err(r, format!("clusters.{name}.shards[{i}].replicas: '{r}' is not a URL ({e})")))?;
    let https = match u.scheme() {
        "http" => false,
        "https" => true,
        other => {
            return Err(ctx.err(
                r,
                format!("clusters.{name}.shards[{i}].replicas: scheme '{other}' of '{r}': use http:// or https://"),
            ))
        }
    };
    let host =
        u.host_str().ok_or_else(|| ctx.err(r, format!("clusters.{name}.shards[{i}].replicas: '{r}' has no host")))?;
    let port = u.port_or_known_default().unwrap_or(8123);
    Ok(ReplicaAddr { base: format!("{}://{host}:{port}", u.scheme()), https })
}

/// Cluster `name`'s `routing:` over its shards' weights.
fn routing(ctx: &Ctx, name: &str, r: RawRouting, shards: &[Shard]) -> Result<Router, ConfigError> {
    let at = |e: String| ctx.err("routing:", format!("clusters.{name}.routing: {e}"));
    let col_type = ColumnType::parse(&r.key_type).map_err(|e| at(e.to_string()))?;
    let weights = shards.iter().map(|s| s.weight).collect();
    Router::new(&r.sharding_key, col_type, r.tables, r.database, r.where_column, weights).map_err(|e| at(e.to_string()))
}
