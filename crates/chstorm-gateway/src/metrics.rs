//! `/metrics` in Prometheus text format (prometheus-client).
//!
//! | metric | labels | meaning |
//! |---|---|---|
//! | `chstorm_gateway_requests_total` | user, status, route | requests answered; route = routed, fanout, local, rejected |
//! | `chstorm_gateway_request_duration_seconds` | route | time to the response head |
//! | `chstorm_gateway_in_flight` | | queries holding a global slot |
//! | `chstorm_gateway_queued` | | queries waiting for a global slot |
//! | `chstorm_gateway_replica_up` | cluster, replica | 1 healthy, 0 down (replica = shard.replica, 1-based) |
//! | `chstorm_gateway_retries_total` | | retries sent to another replica |
//! | `chstorm_gateway_retry_budget_exhausted_total` | | retries refused by the budget |
//! | `chstorm_gateway_killed_queries_total` | reason | KILL QUERY sent (client_gone, timeout) |
//! | `chstorm_gateway_threads_total` | cluster, replica | the replica's thread budget |
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

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KillLabel {
    pub reason: &'static str,
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

/// Every metric of the gateway, registered once per process.
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Family<RouteLabel, Histogram, fn() -> Histogram>,
    pub in_flight: Gauge,
    pub queued: Gauge,
    pub replica_up: Family<ReplicaLabels, Gauge>,
    pub retries: Counter,
    pub budget_exhausted: Counter,
    pub killed: Family<KillLabel, Counter>,
    pub threads_total: Family<ReplicaLabels, Gauge>,
    pub threads_in_use: Family<ReplicaLabels, Gauge>,
    pub threads_external: Family<ReplicaLabels, Gauge>,
    pub threads_queued: Family<ReplicaLabels, Gauge>,
    pub thread_grant: Family<ReplicaLabels, Histogram, fn() -> Histogram>,
    pub thread_floor_grants: Family<ReplicaLabels, Counter>,
    pub thread_queue_wait: Family<ReplicaLabels, Histogram, fn() -> Histogram>,
    pub thread_queue_timeouts: Family<ReplicaLabels, Counter>,
    pub thread_total_moves: Family<ReplicaLabels, Counter>,
    pub thread_total_probes: Family<ReplicaLabels, Counter>,
    pub thread_server_cpu: Family<ReplicaLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let duration = Family::<RouteLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let in_flight = Gauge::default();
        let queued = Gauge::default();
        let replica_up = Family::<ReplicaLabels, Gauge>::default();
        let retries = Counter::default();
        let budget_exhausted = Counter::default();
        let killed = Family::<KillLabel, Counter>::default();
        registry.register("chstorm_gateway_requests", "Requests answered", requests.clone());
        registry.register("chstorm_gateway_request_duration_seconds", "Time to the response head", duration.clone());
        registry.register("chstorm_gateway_in_flight", "Queries holding a global slot", in_flight.clone());
        registry.register("chstorm_gateway_queued", "Queries waiting for a global slot", queued.clone());
        registry.register("chstorm_gateway_replica_up", "1 when the replica is healthy", replica_up.clone());
        registry.register("chstorm_gateway_retries", "Retries sent to another replica", retries.clone());
        registry.register(
            "chstorm_gateway_retry_budget_exhausted",
            "Retries refused by the budget",
            budget_exhausted.clone(),
        );
        registry.register("chstorm_gateway_killed_queries", "KILL QUERY sent", killed.clone());
        let threads_total = Family::<ReplicaLabels, Gauge>::default();
        let threads_in_use = Family::<ReplicaLabels, Gauge>::default();
        let threads_external = Family::<ReplicaLabels, Gauge>::default();
        let threads_queued = Family::<ReplicaLabels, Gauge>::default();
        let thread_grant = Family::<ReplicaLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            grant_histogram as fn() -> Histogram,
        );
        let thread_floor_grants = Family::<ReplicaLabels, Counter>::default();
        let thread_queue_wait = Family::<ReplicaLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            wait_histogram as fn() -> Histogram,
        );
        let thread_queue_timeouts = Family::<ReplicaLabels, Counter>::default();
        registry.register("chstorm_gateway_threads_total", "The replica's thread budget", threads_total.clone());
        registry.register(
            "chstorm_gateway_threads_in_use",
            "Threads granted to queries in flight through this gateway",
            threads_in_use.clone(),
        );
        registry.register(
            "chstorm_gateway_threads_external",
            "Threads of other queries on the server (observe)",
            threads_external.clone(),
        );
        registry.register(
            "chstorm_gateway_threads_queued",
            "Queries waiting for a thread (queue mode)",
            threads_queued.clone(),
        );
        registry.register("chstorm_gateway_thread_grant", "Threads granted per query", thread_grant.clone());
        registry.register(
            "chstorm_gateway_thread_floor_grants",
            "1-thread grants made with the budget spent",
            thread_floor_grants.clone(),
        );
        registry.register(
            "chstorm_gateway_thread_queue_wait_seconds",
            "Time queries waited for a thread (queue mode)",
            thread_queue_wait.clone(),
        );
        registry.register(
            "chstorm_gateway_thread_queue_timeouts",
            "Waits for a thread that reached max_wait",
            thread_queue_timeouts.clone(),
        );
        let thread_total_moves = Family::<ReplicaLabels, Counter>::default();
        let thread_total_probes = Family::<ReplicaLabels, Counter>::default();
        let thread_server_cpu = Family::<ReplicaLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "chstorm_gateway_thread_total_moves",
            "Moves of an adaptive thread total that a probe proved",
            thread_total_moves.clone(),
        );
        registry.register(
            "chstorm_gateway_thread_total_probes",
            "Probe windows of an adaptive thread total at a candidate total",
            thread_total_probes.clone(),
        );
        registry.register(
            "chstorm_gateway_thread_server_cpu",
            "The server's CPU busy share, 0..1, as an adaptive thread total last read it",
            thread_server_cpu.clone(),
        );
        Metrics {
            registry,
            requests,
            duration,
            in_flight,
            queued,
            replica_up,
            retries,
            budget_exhausted,
            killed,
            threads_total,
            threads_in_use,
            threads_external,
            threads_queued,
            thread_grant,
            thread_floor_grants,
            thread_queue_wait,
            thread_queue_timeouts,
            thread_total_moves,
            thread_total_probes,
            thread_server_cpu,
        }
    }
}

impl Metrics {
    /// The text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
}
