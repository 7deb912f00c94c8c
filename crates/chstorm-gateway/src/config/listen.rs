//! `listen`, `listen_native`, `listen_native_secure`, `metrics_listen`, `tls`, `workers` and
//! `shutdown`: the gateway's own sockets and threads.

use super::{ConfigError, Ctx, Dur, RawConfig};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The certificate and key (PEM files) of `listen` (then HTTPS) and of `listen_native_secure`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
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

/// `workers:` as written: a count or a word (`auto`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawWorkers {
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

/// True when two listen addresses would take the same port: the same port (not 0, which
/// means any free one), on the same IP or with either on every IP.
fn same_port(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && a.port() != 0 && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// The listen addresses and the worker count, validated.
pub(super) struct Addrs {
    pub listen: SocketAddr,
    pub workers: usize,
    pub listen_native: Option<SocketAddr>,
    pub listen_native_secure: Option<SocketAddr>,
    pub metrics_listen: Option<SocketAddr>,
}

/// Parses the addresses and `workers:`, in the order of the checks below; no two listeners may
/// take the same port.
pub(super) fn parse(ctx: &Ctx, raw: &RawConfig) -> Result<Addrs, ConfigError> {
    let listen = address(ctx, "listen", &raw.listen, "127.0.0.1:8124")?;
    let workers = workers(ctx, raw.workers.as_ref())?;
    let listen_native = match &raw.listen_native {
        None => None,
        Some(n) => Some(address(ctx, "listen_native", n, "127.0.0.1:9001")?),
    };
    if listen_native.is_some_and(|n| n == listen && n.port() != 0) {
        return Err(ctx.err(
            "listen_native:",
            format!("listen_native: {listen} is also `listen`; the native protocol needs its own port"),
        ));
    }
    let listen_native_secure = native_secure(ctx, raw, listen, listen_native)?;
    let metrics_listen = metrics_listen(ctx, raw.metrics_listen.as_deref(), listen, listen_native_secure)?;
    Ok(Addrs { listen, workers, listen_native, listen_native_secure, metrics_listen })
}

/// `key: text` as a socket address.
fn address(ctx: &Ctx, key: &str, text: &str, like: &str) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|_| ctx.err(&format!("{key}:"), format!("{key}: '{text}' is not an address like {like}")))
}

/// `workers:`: `auto` (absent too) or 1 to [`MAX_WORKERS`].
fn workers(ctx: &Ctx, raw: Option<&RawWorkers>) -> Result<usize, ConfigError> {
    match raw {
        None => Ok(auto_workers()),
        Some(RawWorkers::Word(w)) if w == "auto" => Ok(auto_workers()),
        Some(RawWorkers::Count(n)) if (1..=MAX_WORKERS as i64).contains(n) => Ok(*n as usize),
        Some(w) => {
            let said = match w {
                RawWorkers::Count(n) => n.to_string(),
                RawWorkers::Word(s) => format!("'{s}'"),
            };
            Err(ctx.err("workers:", format!("workers: {said} is not `auto` or a thread count from 1 to {MAX_WORKERS}")))
        }
    }
}

/// `listen_native_secure:`: needs `tls:`, and a port of its own.
fn native_secure(
    ctx: &Ctx,
    raw: &RawConfig,
    listen: SocketAddr,
    listen_native: Option<SocketAddr>,
) -> Result<Option<SocketAddr>, ConfigError> {
    let Some(n) = &raw.listen_native_secure else {
        return Ok(None);
    };
    let secure = address(ctx, "listen_native_secure", n, "127.0.0.1:9440")?;
    if raw.tls.is_none() {
        return Err(ctx.err(
            "listen_native_secure:",
            "listen_native_secure: needs a certificate; add a `tls:` section with `cert:` and `key:` \
             (PEM files; note that `tls:` also makes `listen` HTTPS)"
                .into(),
        ));
    }
    for (other, addr) in [("listen", Some(listen)), ("listen_native", listen_native)] {
        if addr.is_some_and(|a| same_port(a, secure)) {
            return Err(ctx.err(
                "listen_native_secure:",
                format!("listen_native_secure: {secure} is also `{other}`; native TLS needs its own port"),
            ));
        }
    }
    Ok(Some(secure))
}

/// `metrics_listen:`: a port of its own (absent: `/metrics` is served on `listen`).
fn metrics_listen(
    ctx: &Ctx,
    raw: Option<&str>,
    listen: SocketAddr,
    secure: Option<SocketAddr>,
) -> Result<Option<SocketAddr>, ConfigError> {
    let Some(m) = raw else {
        return Ok(None);
    };
    let m = address(ctx, "metrics_listen", m, "127.0.0.1:9363")?;
    if secure.is_some_and(|s| same_port(m, s)) {
        return Err(ctx.err(
            "metrics_listen:",
            format!("metrics_listen: {m} is also `listen_native_secure`; give /metrics its own port"),
        ));
    }
    if m == listen && m.port() != 0 {
        return Err(ctx.err(
            "metrics_listen:",
            format!("metrics_listen: {listen} is also `listen`; give /metrics its own port, or remove metrics_listen to serve it on `listen`"),
        ));
    }
    Ok(Some(m))
}
