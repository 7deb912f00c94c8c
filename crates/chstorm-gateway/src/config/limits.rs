//! `limits:`: global admission, and the bounds on what a client may cost (time, memory, depth).

use super::{ConfigError, Ctx, Dur};
use serde::Deserialize;
use std::time::Duration;

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
    /// (`crate::attempt::quarantine`). Default 5 min; `0s` turns the quarantine off (the read that
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

/// Checks the bounds of `limits:` that serde cannot.
pub(super) fn check(ctx: &Ctx, limits: &Limits) -> Result<(), ConfigError> {
    for (field, d) in [
        ("client_header_timeout", limits.client_header_timeout.0),
        ("client_body_idle_timeout", limits.client_body_idle_timeout.0),
        ("client_packet_timeout", limits.client_packet_timeout.0),
        ("client_write_timeout", limits.client_write_timeout.0),
    ] {
        if d < MIN_CLIENT_TIMEOUT {
            return Err(ctx.err(
                field,
                format!("limits.{field}: {} is too short; at least 100ms", humantime::format_duration(d)),
            ));
        }
    }
    if limits.max_client_buffer_mib == 0 || limits.max_buffered_mib == 0 {
        return Err(ctx.err(
            "max_client_buffer_mib",
            "limits.max_client_buffer_mib and limits.max_buffered_mib: must be at least 1".into(),
        ));
    }
    if limits.max_concurrency == 0 {
        return Err(ctx.err("max_concurrency", "limits.max_concurrency: must be at least 1".into()));
    }
    if limits.max_query_depth == 0 {
        return Err(ctx.err("max_query_depth", "limits.max_query_depth: must be at least 1".into()));
    }
    Ok(())
}
