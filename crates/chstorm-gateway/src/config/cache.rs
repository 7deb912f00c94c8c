//! `cache:`: the gateway-wide bound of the result cache (top level), and each user's merging
//! and caching of reads (`users[*].cache`). See `crate::cache` and docs/GATEWAY.md, "Cache and
//! merging".

use super::{ConfigError, Ctx, Dur};
use serde::Deserialize;
use std::time::Duration;

/// The top-level `cache:` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheCfg {
    /// Most bytes all users' cached answers hold together, in MiB; past it the least recently
    /// used entries are evicted. Default 256; at least 1.
    pub max_size_mib: usize,
}

impl Default for CacheCfg {
    fn default() -> Self {
        CacheCfg { max_size_mib: 256 }
    }
}

/// A user's `cache:` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUserCache {
    ttl: Dur,
    #[serde(default = "default_entry_kib")]
    max_entry_size_kib: usize,
    #[serde(default = "default_waiters")]
    max_waiters: usize,
}

fn default_entry_kib() -> usize {
    512
}
fn default_waiters() -> usize {
    256
}

/// The longest `ttl`: 1 hour.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// The largest `max_entry_size_kib`: 64 MiB.
pub const MAX_ENTRY_KIB: usize = 64 << 10;

/// A user's merging and caching of reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserCache {
    /// How long an answer may be served from memory, from the moment its query was sent; zero:
    /// identical reads in flight are merged and no answer is kept. At most 1 hour.
    pub ttl: Duration,
    /// The largest answer kept (and held whole for the merged waiters), in bytes
    /// (`max_entry_size_kib`, default 512 KiB, at most 64 MiB); a larger one streams to its
    /// waiters at the pace of the slowest and is not kept.
    pub max_entry_size: usize,
    /// The most clients one query's answer goes to (`max_waiters`, default 256, at least 1); a
    /// further identical read runs on its own.
    pub max_waiters: usize,
}

impl UserCache {
    /// Whether answers are kept (not only merged).
    pub fn keeps(&self) -> bool {
        !self.ttl.is_zero()
    }
}

/// Validates a user's `cache:` (`i` its index, `at` finds its line).
pub(super) fn user(ctx: &Ctx, i: usize, at: &str, raw: &RawUserCache) -> Result<UserCache, ConfigError> {
    if raw.ttl.0 > MAX_TTL {
        return Err(ctx.err(
            at,
            format!("users[{i}].cache.ttl: {} is too long; at most 1h", humantime::format_duration(raw.ttl.0)),
        ));
    }
    if raw.max_entry_size_kib == 0 || raw.max_entry_size_kib > MAX_ENTRY_KIB {
        return Err(ctx.err(
            at,
            format!(
                "users[{i}].cache.max_entry_size_kib: {} is out of bounds; 1 to {MAX_ENTRY_KIB}",
                raw.max_entry_size_kib
            ),
        ));
    }
    if raw.max_waiters == 0 {
        return Err(ctx.err(at, format!("users[{i}].cache.max_waiters: must be at least 1")));
    }
    Ok(UserCache { ttl: raw.ttl.0, max_entry_size: raw.max_entry_size_kib << 10, max_waiters: raw.max_waiters })
}

/// Checks the top-level `cache:`.
pub(super) fn check(ctx: &Ctx, cfg: &CacheCfg) -> Result<(), ConfigError> {
    if cfg.max_size_mib == 0 {
        return Err(ctx.err("max_size_mib", "cache.max_size_mib: must be at least 1".into()));
    }
    Ok(())
}
