//! `health:`, `retries:`, `hedging:` and `pool:`: how the gateway uses its replicas.

use super::{ConfigError, Ctx, Dur};
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

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

/// `pool.max_idle_per_replica`: a number, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxIdle {
    /// `limits.max_concurrency`: the most connections one pool can have in use at once, so a
    /// burst of answers never closes a connection the next burst of queries must make again.
    Auto,
    Fixed(usize),
}

impl<'de> Deserialize<'de> for MaxIdle {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(usize),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(MaxIdle::Fixed(n)),
            Raw::S(s) if s == "auto" => Ok(MaxIdle::Auto),
            Raw::S(s) => Err(de::Error::custom(format!("'{s}' is not auto or a number of connections"))),
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
    /// A read does not go to a replica that lags this much or more behind its shard while a
    /// fresher healthy replica of the shard is there (`crate::cluster::replication`): its
    /// replication delay (`system.replicas.absolute_delay`) is read with every probe. Whole
    /// seconds, as ClickHouse counts them. Default 300 s, the server's own
    /// `max_replica_delay_for_distributed_queries`; `0s` turns it off (no delay is read).
    pub max_replica_delay: Dur,
    /// When every healthy replica of a shard lags (or its delay is unknown): true (default)
    /// reads the least stale (its answer carries `X-Chstorm-Stale`), false refuses the read
    /// with Code 369, as ClickHouse's `fallback_to_stale_replicas_for_distributed_queries`
    /// does; a query's own `fallback_to_stale_replicas_for_distributed_queries` wins.
    pub fallback_to_stale_replicas: bool,
}

/// The default `health.max_replica_delay`: 300 s, ClickHouse's default
/// `max_replica_delay_for_distributed_queries`.
pub const DEFAULT_MAX_REPLICA_DELAY: Duration = Duration::from_secs(300);

impl Default for Health {
    fn default() -> Self {
        Health {
            interval: Dur(Duration::from_millis(500)),
            timeout: Dur(Duration::from_secs(1)),
            fall: 2,
            rise: 2,
            max_replica_delay: Dur(DEFAULT_MAX_REPLICA_DELAY),
            fallback_to_stale_replicas: true,
        }
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

/// Hedged reads (`crate::attempt::hedge`): when an idempotent read has no answer head within the per-try
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

/// Backend connection pools.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolCfg {
    /// Idle connections are closed after this. Default `auto`.
    pub idle_timeout: IdleTimeout,
    /// Idle connections kept per replica, in each worker's pool. Default `auto`
    /// ([`MaxIdle::Auto`]: `limits.max_concurrency`); they close at `idle_timeout` anyway.
    pub max_idle_per_replica: MaxIdle,
    /// Connect timeout. Default 1 s.
    pub connect_timeout: Dur,
    /// A PEM file of CA certificates to trust for https:// replicas, besides the web roots.
    pub tls_ca: Option<PathBuf>,
}

impl Default for PoolCfg {
    fn default() -> Self {
        PoolCfg {
            idle_timeout: IdleTimeout::Auto,
            max_idle_per_replica: MaxIdle::Auto,
            connect_timeout: Dur(Duration::from_secs(1)),
            tls_ca: None,
        }
    }
}

impl PoolCfg {
    /// The idle connections a pool keeps, with `max_concurrency` the gateway's
    /// `limits.max_concurrency`.
    pub fn max_idle(&self, max_concurrency: usize) -> usize {
        match self.max_idle_per_replica {
            MaxIdle::Auto => max_concurrency,
            MaxIdle::Fixed(n) => n,
        }
    }
}

/// Checks the bounds of `health:`, `retries:` and `hedging:` that serde cannot.
pub(super) fn check(ctx: &Ctx, health: &Health, retries: &Retries, h: &Hedging) -> Result<(), ConfigError> {
    if health.fall == 0 || health.rise == 0 {
        return Err(ctx.err("health:", "health.fall and health.rise: must be at least 1".into()));
    }
    let max_delay = health.max_replica_delay.0;
    if max_delay.subsec_nanos() != 0 {
        return Err(ctx.err(
            "max_replica_delay",
            format!(
                "health.max_replica_delay: {} is not whole seconds; ClickHouse counts replication delays in whole \
                 seconds (write e.g. 300s, or 0s for off)",
                humantime::format_duration(max_delay)
            ),
        ));
    }
    if !(0.0..=10.0).contains(&retries.budget_ratio) {
        return Err(ctx.err("budget_ratio", "retries.budget_ratio: must be between 0 and 10".into()));
    }
    if !(0.5..=1.0).contains(&h.quantile) || !(1.0..=100.0).contains(&h.factor) {
        return Err(
            ctx.err("hedging:", "hedging.quantile must be within 0.5..1 and hedging.factor within 1..100".into())
        );
    }
    if h.min_delay.0 > h.max_delay.0 {
        return Err(ctx.err("hedging:", "hedging.min_delay must not be above hedging.max_delay".into()));
    }
    if h.max_extra > 4 {
        return Err(ctx.err("max_extra", "hedging.max_extra: at most 4 extra copies of a query".into()));
    }
    Ok(())
}
