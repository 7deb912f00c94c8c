//! `clusters.NAME.threads:`: a cluster's thread budget (`crate::cluster::budget`), one per replica.

use super::{ConfigError, Ctx, Dur};
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// `threads.total`: a number of threads, `auto` (from the backend's cores, as the server
/// reports them; see `crate::cluster::budget::probe`), or `adaptive` (found at run time by
/// `crate::cluster::budget::adaptive`, starting at the cores).
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
pub(super) struct RawThreads {
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
    /// `total` overrides by replica base URL (`http://host:port`, as [`ReplicaAddr::base`](super::ReplicaAddr::base)).
    pub per_replica: BTreeMap<String, ThreadTotal>,
}

impl Threads {
    /// The total for the replica at `base`.
    pub fn total_for(&self, base: &str) -> ThreadTotal {
        self.per_replica.get(base).copied().unwrap_or(self.total)
    }
}

/// Cluster `name`'s `threads:`; `is_replica` tells whether a base URL (`http://host:port`) is
/// one of the cluster's replicas (the keys of `per_replica` must be).
pub(super) fn parse(
    ctx: &Ctx,
    name: &str,
    t: RawThreads,
    is_replica: &dyn Fn(&str) -> bool,
) -> Result<Threads, ConfigError> {
    let at = |field: &str, e: String| ctx.err("threads:", format!("clusters.{name}.threads.{field}: {e}"));
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
            Some(format!("{}://{}:{}", u.scheme(), u.host_str()?, u.port_or_known_default().unwrap_or(8123)))
        });
        let Some(base) = base.filter(|b| is_replica(b)) else {
            return Err(ctx.err(
                &url,
                format!("clusters.{name}.threads.per_replica: '{url}' is not a replica of cluster '{name}'"),
            ));
        };
        if total == ThreadTotal::Fixed(0) {
            return Err(
                ctx.err(&url, format!("clusters.{name}.threads.per_replica.{url}: must be at least 1, or auto"))
            );
        }
        per_replica.insert(base, total);
    }
    Ok(Threads {
        total: t.total,
        max_per_query: t.max_per_query.unwrap_or(16),
        cap_at_cores: t.max_per_query.is_none(),
        mode: t.mode,
        max_wait: t.max_wait.0,
        observe: t.observe,
        observe_interval: t.observe_interval.0,
        per_replica,
    })
}
