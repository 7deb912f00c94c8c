//! `/metrics` (prometheus-client), in two formats chosen by the scraper's `Accept` header:
//! OpenMetrics 1.0 when it asks for `application/openmetrics-text` (Prometheus does), else the
//! Prometheus text format 0.0.4 (curl, `promtool check metrics`), derived from the OpenMetrics text
//! by [`openmetrics_to_text`] (prometheus-client 0.22 writes only OpenMetrics, whose counter
//! families are named without `_total`, which 0.0.4 parsers read as a second, untyped family).
//!
//! Every label value comes from a bounded set: configured names (users, clusters, replicas),
//! HTTP status codes, or fixed words. A request from an unauthenticated or unknown user is
//! counted as user [`UNKNOWN_USER`], so made-up user names cannot grow the output.
//!
//! This module names no other module of the gateway (every layer counts into it): the attempt
//! policy's families ([`AttemptMetrics`]) and the backend connection gauge
//! ([`BACKEND_CONNECTIONS`]) are defined here, and [`Metrics::default`] registers the families
//! group by group (requests, retries and hedges, thread budget, native).
//!
//! | metric | labels | meaning |
//! |---|---|---|
//! | `chstorm_gateway_requests_total` | user, status, route | requests answered; user = a configured user or `unknown`; route = routed, fanout, rejected |
//! | `chstorm_gateway_request_duration_seconds` | route | time to the response head |
//! | `chstorm_gateway_in_flight` | | queries holding a global slot |
//! | `chstorm_gateway_queued` | | queries waiting for a global slot |
//! | `chstorm_gateway_replica_up` | cluster, replica | 1 healthy, 0 down (replica = shard.replica, 1-based) |
//! | `chstorm_gateway_replica_version` | cluster, replica, version | 1 for the ClickHouse version detected now (`unknown` while none is: before the first probe, after the replica went down), 0 for one detected before |
//! | `chstorm_gateway_backend_connections` | | HTTP connections to the replicas open now, idle in the pools and busy (the native port's are not counted) |
//! | `chstorm_gateway_retries_total` | | retries sent to another replica |
//! | `chstorm_gateway_retry_budget_exhausted_total` | | retries refused by the budget |
//! | `chstorm_gateway_killed_queries_total` | reason | attempts cancelled with KILL QUERY: client_gone, timeout, hedge_lost (a faster copy won), replica_down |
//! | `chstorm_gateway_per_try_timeouts_total` | | attempts that passed their per-try deadline with no answer head |
//! | `chstorm_gateway_hedges_total` | | hedged copies sent (within the retry budget) |
//! | `chstorm_gateway_hedge_reasons_total` | reason | hedged copies sent, by reason: `silent` (no answer byte, no progress and no `/ping` answer for the per-try deadline) |
//! | `chstorm_gateway_hedges_spared_total` | | reads past their per-try deadline left alone (once each) because their replica showed it was working |
//! | `chstorm_gateway_query_deaths_total` | | reads whose replica died while running them: not resent, their shape refused for `limits.query_of_death_ttl` |
//! | `chstorm_gateway_quarantine_refusals_total` | | reads refused because a read of their shape killed a replica |
//! | `chstorm_gateway_hedge_wins_total` | | hedged copies that answered first |
//! | `chstorm_gateway_hedges_held_total` | | requests past their per-try deadline not hedged (once each) because every other healthy replica of the shard was slow too (more than a quarter of its attempts overdue) |
//! | `chstorm_gateway_client_timeouts_total` | phase | client connections dropped: `header` (headers not sent within `limits.client_header_timeout`, TLS handshakes included), `body` (no body byte for `limits.client_body_idle_timeout`, or slower than `limits.client_body_min_rate`), `write` (no answer byte taken for `limits.client_write_timeout`) |
//! | `chstorm_gateway_threads_budget` | cluster, replica | the replica's thread budget (`threads.total`) |
//! | `chstorm_gateway_threads_in_use` | cluster, replica | threads granted to queries in flight through this gateway |
//! | `chstorm_gateway_threads_external` | cluster, replica | threads of other queries on the server (`observe`) |
//! | `chstorm_gateway_threads_queued` | cluster, replica | queries waiting for a thread (`queue` mode) |
//! | `chstorm_gateway_thread_grant` | cluster, replica | histogram of threads granted per query |
//! | `chstorm_gateway_thread_floor_grants_total` | cluster, replica | 1-thread grants made with the budget spent |
//! | `chstorm_gateway_thread_queue_wait_seconds` | cluster, replica | time queries waited for a thread (`queue` mode) |
//! | `chstorm_gateway_thread_queue_timeouts_total` | cluster, replica | waits that reached `max_wait` (then 1 thread) |
//! | `chstorm_gateway_thread_total_moves_total` | cluster, replica | `total: adaptive`: moves of the total a probe proved |
//! | `chstorm_gateway_thread_total_probes_total` | cluster, replica | `total: adaptive`: probe windows at a candidate total |
//! | `chstorm_gateway_thread_server_cpu` | cluster, replica | the server's CPU busy share, 0..1 (`total: adaptive`, servers that publish it) |
//! | `chstorm_gateway_cache_hits_total` | user | reads answered from a kept answer (`users[*].cache`) |
//! | `chstorm_gateway_cache_misses_total` | user | cacheable reads sent to a replica (each starts a query others may merge into) |
//! | `chstorm_gateway_cache_merged_total` | user | reads that waited for an identical read running already and got its answer |
//! | `chstorm_gateway_cache_skipped_total` | user, reason | reads of a user with a cache neither merged nor cached, by reason (not_select, session, body, function, system_table, database, asked) |
//! | `chstorm_gateway_cache_evictions_total` | user | kept answers evicted before their TTL for room (`cache.max_size_mib`), by the user that stored them |
//! | `chstorm_gateway_cache_bytes` | user | bytes held by the answers the user stored |
//! | `chstorm_gateway_native_pinned_sessions` | | native client connections pinned to one backend connection (they hold state: a temporary table, a write) |
//! | `chstorm_gateway_replica_delay_seconds` | cluster, replica | the largest replication delay of the replica's replicated tables (`system.replicas.absolute_delay`); -1 unknown |
//! | `chstorm_gateway_replica_routed_delay_seconds` | cluster, replica | the same for the routed local tables alone (what routed reads are judged by); -1 unknown |
//! | `chstorm_gateway_replica_writable` | cluster, replica | 1 when no replicated table of it is read-only and its ZooKeeper session is alive, 0 when not (writes go elsewhere), -1 unknown |
//! | `chstorm_gateway_reads_steered_total` | cluster, replica | reads sent to a fresher replica instead of this healthy one, which lagged `health.max_replica_delay` or more or whose delay was unknown |
//! | `chstorm_gateway_writes_steered_total` | cluster, replica | writes sent to another replica because this healthy one was read-only |
//! | `chstorm_gateway_stale_reads_total` | cluster, reason | reads sent to a replica that was not known fresh, because no healthy replica of its shard was: reason `stale` (the least stale) or `unknown` |
//! | `chstorm_gateway_stale_refusals_total` | cluster | reads refused with Code 369 because every healthy replica lagged and falling back was off |
//! | `chstorm_gateway_replica_status_errors_total` | cluster, replica | replication status reads that failed (the delay counts as unknown until one succeeds) |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The `user` label of requests whose user is not authenticated or not configured.
pub const UNKNOWN_USER: &str = "unknown";

/// Content type of the Prometheus text format 0.0.4.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of OpenMetrics 1.0.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub user: String,
    pub status: u16,
    pub route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaLabels {
    pub cluster: String,
    pub replica: String,
}

/// A replica and its detected ClickHouse version (`18.16.1`, or `unknown`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabels {
    pub cluster: String,
    pub replica: String,
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KillLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// `header` or `body`.
    pub phase: &'static str,
}

fn grant_histogram() -> Histogram {
    // 1, 2, 4, ... 128 threads
    Histogram::new(exponential_buckets(1.0, 2.0, 8))
}

fn wait_histogram() -> Histogram {
    // 0.1 ms .. ~1.6 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 15))
}

fn latency_histogram() -> Histogram {
    // 0.1 ms .. ~3.3 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// The `reason` label of a hedge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

/// The `user` label alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UserLabel {
    pub user: String,
}

/// The labels of a read its user's cache skipped.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkipLabels {
    pub user: String,
    pub reason: &'static str,
}

/// The result cache's and merging's metrics, by user (`crate::cache`).
#[derive(Default)]
pub struct CacheMetrics {
    pub hits: Family<UserLabel, Counter>,
    pub misses: Family<UserLabel, Counter>,
    pub merged: Family<UserLabel, Counter>,
    pub skipped: Family<SkipLabels, Counter>,
    pub evictions: Family<UserLabel, Counter>,
    pub bytes: Family<UserLabel, Gauge>,
}

impl CacheMetrics {
    /// Registers them in `r`.
    pub fn register(&self, r: &mut Registry) {
        r.register("chstorm_gateway_cache_hits", "Reads answered from a kept answer", self.hits.clone());
        r.register("chstorm_gateway_cache_misses", "Cacheable reads sent to a replica", self.misses.clone());
        r.register(
            "chstorm_gateway_cache_merged",
            "Reads that got the answer of an identical read running already",
            self.merged.clone(),
        );
        r.register("chstorm_gateway_cache_skipped", "Reads neither merged nor cached, by reason", self.skipped.clone());
        r.register(
            "chstorm_gateway_cache_evictions",
            "Kept answers evicted before their TTL for room",
            self.evictions.clone(),
        );
        r.register("chstorm_gateway_cache_bytes", "Bytes held by the answers the user stored", self.bytes.clone());
    }
}

/// HTTP backend connections open now in this process (pooled idle and busy, every replica):
/// `chstorm_gateway_backend_connections`, counted by `crate::cluster::backend_io`.
/// Process-wide because the connector is; one gateway runs per process.
pub static BACKEND_CONNECTIONS: std::sync::LazyLock<Gauge> = std::sync::LazyLock::new(Default::default);

/// The attempt policy's metrics (registered with the others in [`Metrics`]).
#[derive(Default)]
pub struct AttemptMetrics {
    /// Hedged copies sent, by reason (`silent`: no byte, progress or ping for the deadline).
    pub hedge_reasons: Family<ReasonLabel, Counter>,
    /// Reads past their per-try deadline left alone because they showed they were working.
    pub hedges_spared: Counter,
    /// Reads held to have killed their replica (not resent; their shape refused).
    pub query_deaths: Counter,
    /// Reads refused because their shape killed a replica within `limits.query_of_death_ttl`.
    pub quarantine_refusals: Counter,
}

impl AttemptMetrics {
    /// Registers them in `r`.
    pub fn register(&self, r: &mut Registry) {
        r.register("chstorm_gateway_hedge_reasons", "Hedged copies sent, by reason", self.hedge_reasons.clone());
        r.register(
            "chstorm_gateway_hedges_spared",
            "Reads past their per-try deadline not hedged because they showed progress",
            self.hedges_spared.clone(),
        );
        r.register(
            "chstorm_gateway_query_deaths",
            "Reads whose replica died while running them (not resent; their shape refused)",
            self.query_deaths.clone(),
        );
        r.register(
            "chstorm_gateway_quarantine_refusals",
            "Reads refused because a read of their shape killed a replica",
            self.quarantine_refusals.clone(),
        );
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    pub cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterReasonLabels {
    pub cluster: String,
    pub reason: &'static str,
}

/// Replication delays and the reads and writes they steered (`crate::cluster::replication`).
#[derive(Default)]
pub struct ReplicationMetrics {
    pub delay: Family<ReplicaLabels, Gauge>,
    pub routed_delay: Family<ReplicaLabels, Gauge>,
    pub writable: Family<ReplicaLabels, Gauge>,
    pub reads_steered: Family<ReplicaLabels, Counter>,
    pub writes_steered: Family<ReplicaLabels, Counter>,
    pub stale_reads: Family<ClusterReasonLabels, Counter>,
    pub stale_refusals: Family<ClusterLabel, Counter>,
    pub status_errors: Family<ReplicaLabels, Counter>,
}

impl ReplicationMetrics {
    /// Registers them in `r`.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "chstorm_gateway_replica_delay_seconds",
            "The largest replication delay of the replica's replicated tables; -1 unknown",
            self.delay.clone(),
        );
        r.register(
            "chstorm_gateway_replica_routed_delay_seconds",
            "The largest replication delay of the routed local tables on the replica; -1 unknown",
            self.routed_delay.clone(),
        );
        r.register(
            "chstorm_gateway_replica_writable",
            "1 when the replica takes writes (no read-only table, ZooKeeper session alive), 0 not, -1 unknown",
            self.writable.clone(),
        );
        r.register(
            "chstorm_gateway_reads_steered",
            "Reads sent to a fresher replica instead of this lagging (or unknown) healthy one",
            self.reads_steered.clone(),
        );
        r.register(
            "chstorm_gateway_writes_steered",
            "Writes sent to another replica because this healthy one was read-only",
            self.writes_steered.clone(),
        );
        r.register(
            "chstorm_gateway_stale_reads",
            "Reads sent to a replica not known fresh because no healthy replica of its shard was",
            self.stale_reads.clone(),
        );
        r.register(
            "chstorm_gateway_stale_refusals",
            "Reads refused (Code 369) because every healthy replica lagged and falling back was off",
            self.stale_refusals.clone(),
        );
        r.register(
            "chstorm_gateway_replica_status_errors",
            "Replication status reads that failed",
            self.status_errors.clone(),
        );
    }
}

/// A family of histograms made by a constructor (the buckets).
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric of the gateway, registered once per process: [`Metrics::default`] makes them
/// and registers them family by family, in the order of the module doc's table.
pub struct Metrics {
    /// Tells this gateway's metrics from another's in one process (each `Metrics` its own).
    pub id: u64,
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Histograms<RouteLabel>,
    pub in_flight: Gauge,
    pub queued: Gauge,
    pub replica_up: Family<ReplicaLabels, Gauge>,
    pub replica_version: Family<VersionLabels, Gauge>,
    pub retries: Counter,
    pub budget_exhausted: Counter,
    pub killed: Family<KillLabel, Counter>,
    pub per_try_timeouts: Counter,
    pub hedges: Counter,
    pub hedge_wins: Counter,
    pub hedges_held: Counter,
    /// The attempt policy's own metrics (hedge reasons, spared reads).
    pub attempt: AttemptMetrics,
    pub client_timeouts: Family<PhaseLabel, Counter>,
    pub threads_total: Family<ReplicaLabels, Gauge>,
    pub threads_in_use: Family<ReplicaLabels, Gauge>,
    pub threads_external: Family<ReplicaLabels, Gauge>,
    pub threads_queued: Family<ReplicaLabels, Gauge>,
    pub thread_grant: Histograms<ReplicaLabels>,
    pub thread_floor_grants: Family<ReplicaLabels, Counter>,
    pub thread_queue_wait: Histograms<ReplicaLabels>,
    pub thread_queue_timeouts: Family<ReplicaLabels, Counter>,
    pub thread_total_moves: Family<ReplicaLabels, Counter>,
    pub thread_total_probes: Family<ReplicaLabels, Counter>,
    pub thread_server_cpu: Family<ReplicaLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub native_pinned: Gauge,
    /// Replication delays and what they steered.
    pub replication: ReplicationMetrics,
    /// The result cache's (shared with each state's `crate::cache::Cache`).
    pub cache: std::sync::Arc<CacheMetrics>,
}

impl Default for Metrics {
    fn default() -> Self {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut m = Metrics {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            registry: Registry::default(),
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            in_flight: Gauge::default(),
            queued: Gauge::default(),
            replica_up: Family::default(),
            replica_version: Family::default(),
            retries: Counter::default(),
            budget_exhausted: Counter::default(),
            killed: Family::default(),
            per_try_timeouts: Counter::default(),
            hedges: Counter::default(),
            hedge_wins: Counter::default(),
            hedges_held: Counter::default(),
            attempt: AttemptMetrics::default(),
            client_timeouts: Family::default(),
            threads_total: Family::default(),
            threads_in_use: Family::default(),
            threads_external: Family::default(),
            threads_queued: Family::default(),
            thread_grant: Family::new_with_constructor(grant_histogram),
            thread_floor_grants: Family::default(),
            thread_queue_wait: Family::new_with_constructor(wait_histogram),
            thread_queue_timeouts: Family::default(),
            thread_total_moves: Family::default(),
            thread_total_probes: Family::default(),
            thread_server_cpu: Family::default(),
            native_pinned: Gauge::default(),
            replication: ReplicationMetrics::default(),
            cache: Default::default(),
        };
        let mut r = Registry::default();
        m.register_requests(&mut r);
        m.register_retries_and_hedges(&mut r);
        m.register_threads(&mut r);
        r.register(
            "chstorm_gateway_native_pinned_sessions",
            "Native client connections pinned to one backend connection",
            m.native_pinned.clone(),
        );
        m.replication.register(&mut r);
        m.cache.register(&mut r);
        m.registry = r;
        m
    }
}

impl Metrics {
    /// Requests, admission, replicas and backend connections.
    fn register_requests(&self, r: &mut Registry) {
        r.register("chstorm_gateway_requests", "Requests answered", self.requests.clone());
        r.register("chstorm_gateway_request_duration_seconds", "Time to the response head", self.duration.clone());
        r.register("chstorm_gateway_in_flight", "Queries holding a global slot", self.in_flight.clone());
        r.register("chstorm_gateway_queued", "Queries waiting for a global slot", self.queued.clone());
        r.register("chstorm_gateway_replica_up", "1 when the replica is healthy", self.replica_up.clone());
        r.register(
            "chstorm_gateway_replica_version",
            "1 for the replica's ClickHouse version detected now (unknown while none is), 0 for one before",
            self.replica_version.clone(),
        );
    }

    /// Retries, kills, per-try deadlines and hedges (the attempt policy's included), client
    /// timeouts; the backend connections sit among them, where they were first registered.
    fn register_retries_and_hedges(&self, r: &mut Registry) {
        r.register("chstorm_gateway_retries", "Retries sent to another replica", self.retries.clone());
        r.register(
            "chstorm_gateway_backend_connections",
            "HTTP connections to the replicas open now, idle in the pools and busy",
            BACKEND_CONNECTIONS.clone(),
        );
        r.register(
            "chstorm_gateway_retry_budget_exhausted",
            "Retries refused by the budget",
            self.budget_exhausted.clone(),
        );
        r.register("chstorm_gateway_killed_queries", "Attempts cancelled with KILL QUERY", self.killed.clone());
        r.register(
            "chstorm_gateway_per_try_timeouts",
            "Attempts past their per-try deadline without an answer head",
            self.per_try_timeouts.clone(),
        );
        r.register("chstorm_gateway_hedges", "Hedged copies sent", self.hedges.clone());
        r.register("chstorm_gateway_hedge_wins", "Hedged copies that answered first", self.hedge_wins.clone());
        r.register(
            "chstorm_gateway_hedges_held",
            "Requests past their per-try deadline not hedged because every other replica was slow too",
            self.hedges_held.clone(),
        );
        self.attempt.register(r);
        r.register(
            "chstorm_gateway_client_timeouts",
            "Client connections dropped for sending their headers or body too slowly",
            self.client_timeouts.clone(),
        );
    }

    /// The thread budget's, per replica.
    fn register_threads(&self, r: &mut Registry) {
        r.register("chstorm_gateway_threads_budget", "The replica's thread budget", self.threads_total.clone());
        r.register(
            "chstorm_gateway_threads_in_use",
            "Threads granted to queries in flight through this gateway",
            self.threads_in_use.clone(),
        );
        r.register(
            "chstorm_gateway_threads_external",
            "Threads of other queries on the server (observe)",
            self.threads_external.clone(),
        );
        r.register(
            "chstorm_gateway_threads_queued",
            "Queries waiting for a thread (queue mode)",
            self.threads_queued.clone(),
        );
        r.register("chstorm_gateway_thread_grant", "Threads granted per query", self.thread_grant.clone());
        r.register(
            "chstorm_gateway_thread_floor_grants",
            "1-thread grants made with the budget spent",
            self.thread_floor_grants.clone(),
        );
        r.register(
            "chstorm_gateway_thread_queue_wait_seconds",
            "Time queries waited for a thread (queue mode)",
            self.thread_queue_wait.clone(),
        );
        r.register(
            "chstorm_gateway_thread_queue_timeouts",
            "Waits for a thread that reached max_wait",
            self.thread_queue_timeouts.clone(),
        );
        r.register(
            "chstorm_gateway_thread_total_moves",
            "Moves of an adaptive thread total that a probe proved",
            self.thread_total_moves.clone(),
        );
        r.register(
            "chstorm_gateway_thread_total_probes",
            "Probe windows of an adaptive thread total at a candidate total",
            self.thread_total_probes.clone(),
        );
        r.register(
            "chstorm_gateway_thread_server_cpu",
            "The server's CPU busy share, 0..1, as an adaptive thread total last read it",
            self.thread_server_cpu.clone(),
        );
    }
}

impl Metrics {
    /// The OpenMetrics 1.0 exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }

    /// The exposition a scraper asks for with `accept`, and its content type.
    pub fn render_for(&self, accept: Option<&str>) -> (String, &'static str) {
        if wants_openmetrics(accept) {
            (self.render(), OPENMETRICS_CONTENT_TYPE)
        } else {
            (openmetrics_to_text(&self.render()), TEXT_CONTENT_TYPE)
        }
    }
}

/// True when an `Accept` header asks for OpenMetrics (with a non-zero quality).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            let zero_q = parts.any(|p| p.strip_prefix("q=").is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0)));
            media.eq_ignore_ascii_case("application/openmetrics-text") && !zero_q
        })
    })
}

/// Rewrites prometheus-client's OpenMetrics text as the Prometheus text format 0.0.4: a counter
/// family `x` (samples `x_total`) becomes family `x_total`, type `unknown` becomes `untyped`,
/// `# UNIT` and `# EOF` lines go. Samples are left as they are (same syntax and escaping in both
/// formats for what the gateway exports: no exemplars, no `_created` samples).
pub fn openmetrics_to_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len() + 256);
    let mut help: Option<&str> = None;
    let flush = |out: &mut String, help: &mut Option<&str>| {
        if let Some(h) = help.take() {
            out.push_str("# HELP ");
            out.push_str(h);
            out.push('\n');
        }
    };
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush(&mut out, &mut help);
            help = Some(rest);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (family, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "unknown" => (name.to_string(), "untyped"),
                other => (name.to_string(), other),
            };
            if let Some(h) = help.take() {
                match h.split_once(' ') {
                    Some((n, text)) if n == name => out.push_str(&format!("# HELP {family} {text}\n")),
                    _ => out.push_str(&format!("# HELP {h}\n")),
                }
            }
            out.push_str(&format!("# TYPE {family} {kind}\n"));
        } else if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        } else {
            flush(&mut out, &mut help);
            out.push_str(line);
            out.push('\n');
        }
    }
    flush(&mut out, &mut help);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_get_their_total_family_and_eof_goes() {
        let m = Metrics::default();
        m.requests.get_or_create(&RequestLabels { user: "u".into(), status: 200, route: "routed" }).inc();
        m.retries.inc();
        m.in_flight.set(3);
        m.duration.get_or_create(&RouteLabel { route: "routed" }).observe(0.01);
        let om = m.render();
        assert!(om.contains("# TYPE chstorm_gateway_requests counter\n") && om.ends_with("# EOF\n"), "{om}");
        let text = openmetrics_to_text(&om);
        assert!(text.contains("# HELP chstorm_gateway_requests_total Requests answered.\n# TYPE chstorm_gateway_requests_total counter\nchstorm_gateway_requests_total{user=\"u\",status=\"200\",route=\"routed\"} 1\n"), "{text}");
        assert!(
            text.contains("# TYPE chstorm_gateway_retries_total counter\nchstorm_gateway_retries_total 1\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE chstorm_gateway_in_flight gauge\nchstorm_gateway_in_flight 3\n"), "{text}");
        assert!(text.contains("# TYPE chstorm_gateway_request_duration_seconds histogram\n"), "{text}");
        assert!(
            text.contains("chstorm_gateway_request_duration_seconds_bucket{le=\"+Inf\",route=\"routed\"} 1\n"),
            "{text}"
        );
        assert!(!text.contains("EOF") && !text.contains("# TYPE chstorm_gateway_requests counter"), "{text}");
        // Every sample line is kept, in order.
        let samples = |s: &str| s.lines().filter(|l| !l.starts_with('#')).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(samples(&om), samples(&text));
    }

    #[test]
    fn unknown_types_units_and_a_lone_help_are_rewritten_or_kept() {
        let om = "# HELP a Some a.\n# TYPE a unknown\n# UNIT a seconds\na 1\n# HELP b Orphan.\nb 2\n# EOF\n";
        assert_eq!(openmetrics_to_text(om), "# HELP a Some a.\n# TYPE a untyped\na 1\n# HELP b Orphan.\nb 2\n");
    }

    #[test]
    fn openmetrics_only_when_asked_for() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(Some("text/plain;version=0.0.4")));
        assert!(!wants_openmetrics(Some("application/openmetrics-text;q=0, text/plain")));
        let m = Metrics::default();
        assert_eq!(m.render_for(Some(prometheus)).1, OPENMETRICS_CONTENT_TYPE);
        assert_eq!(m.render_for(Some("*/*")).1, TEXT_CONTENT_TYPE);
    }
}
