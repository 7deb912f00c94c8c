//! The thread budget: `threads:` on a cluster (docs/GATEWAY.md, "Thread budget").
//!
//! ClickHouse gives every query `max_threads` threads whatever the load. Here each replica has a
//! budget of `total` threads shared by the queries that run on it through the gateway; a query
//! admitted to a replica is granted
//!
//! ```text
//! grant = clamp(total - in_use, 1, want)      want = min(max_per_query, the client's max_threads)
//! ```
//!
//! and the grant is sent as the query's `max_threads`. `in_use` is the sum of the grants held by
//! queries in flight on that replica (plus, with `observe`, the threads of the other queries the
//! server runs, see [`probe`]). When the budget is spent, `grant` mode gives 1 thread at once (a
//! *floor*); `queue` mode waits up to `max_wait` for a thread to free, first come first served,
//! then gives 1.
//!
//! A [`Grant`] is an RAII value: it returns its threads when dropped, and the proxy hands it to
//! the response body, so a budget is held exactly as long as the answer streams, and is returned
//! when the answer ends, fails, or the client goes away. A waiter dropped mid-wait (a client that
//! disconnects while queued) leaves the queue, and gives back a grant handed to it in between.
//!
//! Invariant (tested under concurrency): `in_use <= total - external + floors`, where `floors` is
//! the number of floor grants held; no grant is below 1 or above `want`.

pub mod adaptive;
pub mod probe;
#[cfg(test)]
mod tests;

use crate::cluster::balancer::Replica;
use crate::config::{Cluster, ThreadMode, ThreadTotal, Threads};
use crate::log::log;
use crate::metrics::{Metrics, ReplicaLabels};
use adaptive::{Change, Controller, Reason, ServerLoad, Tuning};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The metrics of one replica's budget (handles cloned out of the families once).
#[derive(Clone)]
pub struct BudgetMetrics {
    total: Gauge,
    in_use: Gauge,
    external: Gauge,
    queued: Gauge,
    grant: Histogram,
    floors: Counter,
    wait: Histogram,
    timeouts: Counter,
    moves: Counter,
    probes: Counter,
    /// Created at the first figure: a server that publishes none shows none.
    server_cpu: (Family<ReplicaLabels, Gauge<f64, AtomicU64>>, ReplicaLabels),
}

impl BudgetMetrics {
    pub fn new(m: &Metrics, cluster: &str, replica: &str) -> BudgetMetrics {
        let l = ReplicaLabels { cluster: cluster.to_string(), replica: replica.to_string() };
        BudgetMetrics {
            total: m.threads_total.get_or_create(&l).clone(),
            in_use: m.threads_in_use.get_or_create(&l).clone(),
            external: m.threads_external.get_or_create(&l).clone(),
            queued: m.threads_queued.get_or_create(&l).clone(),
            grant: m.thread_grant.get_or_create(&l).clone(),
            floors: m.thread_floor_grants.get_or_create(&l).clone(),
            wait: m.thread_queue_wait.get_or_create(&l).clone(),
            timeouts: m.thread_queue_timeouts.get_or_create(&l).clone(),
            moves: m.thread_total_moves.get_or_create(&l).clone(),
            probes: m.thread_total_probes.get_or_create(&l).clone(),
            server_cpu: (m.thread_server_cpu.clone(), l.clone()),
        }
    }
}

/// The threads a query asks for: `max_per_query`, lowered by the client's own `max_threads`
/// (a positive number; 0 means the server's default, so no lowering). The proxy has already
/// refused a `max_threads` the user may not set.
pub fn wanted(params: &[(String, String)], max_per_query: usize) -> usize {
    let client = params
        .iter()
        .rev()
        .find(|(k, _)| k == "max_threads")
        .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        .filter(|&n| n > 0);
    match client {
        Some(n) => (n.min(max_per_query as u64) as usize).max(1),
        None => max_per_query.max(1),
    }
}

/// A point-in-time view of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub total: usize,
    /// Sum of the grants held through this gateway.
    pub in_use: usize,
    /// Floor grants held (1 thread given with the budget spent).
    pub floors: usize,
    /// Threads of the server's other queries (`observe`; else 0).
    pub external: usize,
    /// Queries waiting (`queue` mode).
    pub queued: usize,
}

struct Waiter {
    id: u64,
    want: usize,
    notify: Arc<Notify>,
}

#[derive(Default)]
struct Inner {
    in_use: usize,
    floors: usize,
    external: usize,
    /// query_id -> grants held under it (only with `observe`, to tell our queries from others).
    own: HashMap<String, usize>,
    queue: VecDeque<Waiter>,
    /// Grants handed to waiters that have not picked them up yet.
    handed: HashMap<u64, usize>,
    next_id: u64,
    /// Grants held (queries in flight through this budget).
    grants: usize,
    /// `total: adaptive`: the controller that sets the total.
    ctl: Option<Controller>,
}

/// One replica's budget.
pub struct ReplicaBudget {
    /// `shard.replica`, 1-based.
    pub label: String,
    total: AtomicUsize,
    /// The server's cores are needed (an `auto` or `adaptive` total, or a grant capped at the
    /// cores) and have not been learned from the server yet.
    pub(crate) auto_pending: AtomicBool,
    /// What the total is: a number, `auto` or `adaptive`.
    pub(crate) kind: ThreadTotal,
    /// The most one grant holds: `max_per_query`, and the server's cores when
    /// [`Threads::cap_at_cores`].
    max_per_query: AtomicUsize,
    configured_max_per_query: usize,
    cap_at_cores: bool,
    mode: ThreadMode,
    max_wait: Duration,
    track_ids: bool,
    inner: Mutex<Inner>,
    metrics: Option<BudgetMetrics>,
    /// The adaptive controller's clock origin.
    origin: Instant,
}

impl std::fmt::Debug for ReplicaBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReplicaBudget({} {:?})", self.label, self.snapshot())
    }
}

/// Threads granted to one query; returned to the budget when dropped.
pub struct Grant {
    budget: Arc<ReplicaBudget>,
    threads: usize,
    floor: bool,
    query_id: Option<String>,
    /// Time spent waiting in the queue, read by the tests (the wait is a metric). Kept in every
    /// build: a field under `#[cfg(test)]` needs a `#[cfg(test)]` line inside the literal that
    /// builds a grant.
    #[cfg_attr(not(test), allow(dead_code))]
    waited: Duration,
    /// The adaptive controller's epoch when granted, and when.
    epoch: u64,
    at: Instant,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Grant({} threads{} on {})", self.threads, if self.floor { ", floor" } else { "" }, self.budget.label)
    }
}

impl Grant {
    /// The `max_threads` to send.
    pub fn threads(&self) -> usize {
        self.threads
    }
    /// True when it was granted with the budget spent (the 1-thread floor).
    #[cfg(test)]
    pub fn is_floor(&self) -> bool {
        self.floor
    }
    /// Time spent waiting in the queue (`queue` mode).
    #[cfg(test)]
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.budget.release(self.threads, self.floor, self.query_id.take(), self.epoch, self.at);
    }
}

/// Removes a waiter from the queue when its future is dropped before it got its grant, and
/// gives back a grant handed to it in between.
struct WaitGuard<'a> {
    budget: &'a ReplicaBudget,
    id: u64,
    done: bool,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let b = self.budget;
        let mut g = b.lock();
        g.queue.retain(|w| w.id != self.id);
        if let Some(t) = g.handed.remove(&self.id) {
            g.in_use -= t;
            b.dispatch(&mut g);
        }
        b.publish(&g);
    }
}

impl ReplicaBudget {
    pub fn new(
        label: impl Into<String>,
        total: usize,
        cfg: &Threads,
        metrics: Option<BudgetMetrics>,
    ) -> Arc<ReplicaBudget> {
        let b = ReplicaBudget {
            label: label.into(),
            total: AtomicUsize::new(total.max(1)),
            auto_pending: AtomicBool::new(false),
            kind: ThreadTotal::Fixed(total.max(1)),
            max_per_query: AtomicUsize::new(cfg.max_per_query.max(1)),
            configured_max_per_query: cfg.max_per_query.max(1),
            cap_at_cores: cfg.cap_at_cores,
            mode: cfg.mode,
            max_wait: cfg.max_wait,
            track_ids: cfg.observe,
            inner: Mutex::new(Inner::default()),
            metrics,
            origin: Instant::now(),
        };
        if let Some(m) = &b.metrics {
            m.total.set(b.total() as i64);
        }
        Arc::new(b)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding the lock; if something did, the counts are still whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// The most one grant holds now.
    pub fn max_per_query(&self) -> usize {
        self.max_per_query.load(Ordering::Acquire)
    }

    /// The server has `cores` cores: with [`Threads::cap_at_cores`], no grant is larger.
    pub fn learn_cores(&self, cores: usize) {
        if self.cap_at_cores {
            self.max_per_query.store(self.configured_max_per_query.min(cores.max(1)), Ordering::Release);
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let g = self.lock();
        Snapshot {
            total: self.total(),
            in_use: g.in_use,
            floors: g.floors,
            external: g.external,
            queued: g.queue.len(),
        }
    }

    /// Threads free now (0 when spent).
    fn available(&self, g: &Inner) -> usize {
        self.total().saturating_sub(g.in_use + g.external)
    }

    /// Takes `clamp(available, 1, want)` threads; (threads, floor).
    fn take(&self, g: &mut Inner, want: usize) -> (usize, bool) {
        let avail = self.available(g);
        let (t, floor) = if avail == 0 { (1, true) } else { (avail.min(want).max(1), false) };
        g.in_use += t;
        if floor {
            g.floors += 1;
        }
        (t, floor)
    }

    /// Hands free threads to the waiters at the head of the queue, in order. What is free is
    /// shared among the waiters: each gets at most `max(1, free / waiting)` (a lone waiter gets
    /// up to its `want`), so a release under load starts several one-thread queries rather
    /// than one query with every thread (which would run the queue one query at a time).
    fn dispatch(&self, g: &mut Inner) {
        let share = match g.queue.len() {
            0 => return,
            n => (self.available(g) / n).max(1),
        };
        while let Some(w) = g.queue.front() {
            let avail = self.available(g);
            if avail == 0 {
                break;
            }
            let t = avail.min(w.want).min(share).max(1);
            let Some(w) = g.queue.pop_front() else { break };
            g.in_use += t;
            g.handed.insert(w.id, t);
            w.notify.notify_one();
        }
    }

    fn publish(&self, g: &Inner) {
        if let Some(m) = &self.metrics {
            m.in_use.set(g.in_use as i64);
            m.external.set(g.external as i64);
            m.queued.set(g.queue.len() as i64);
        }
    }

    fn made(
        self: &Arc<Self>,
        g: &mut Inner,
        want: usize,
        threads: usize,
        floor: bool,
        query_id: &str,
        waited: Duration,
    ) -> Grant {
        let query_id = self.track_ids.then(|| query_id.to_string());
        if let Some(q) = &query_id {
            *g.own.entry(q.clone()).or_insert(0) += 1;
        }
        g.grants += 1;
        let at = Instant::now();
        let in_flight = (g.grants + g.queue.len() + g.external) as f64;
        let held_back = threads < want || waited > Duration::ZERO;
        let epoch = match g.ctl.as_mut() {
            Some(c) => c.on_grant(at.saturating_duration_since(self.origin), held_back, in_flight),
            None => 0,
        };
        self.publish(g);
        if let Some(m) = &self.metrics {
            m.grant.observe(threads as f64);
            if floor {
                m.floors.inc();
            }
        }
        Grant { budget: self.clone(), threads, floor, query_id, waited, epoch, at }
    }

    fn release(&self, threads: usize, floor: bool, query_id: Option<String>, epoch: u64, at: Instant) {
        let mut g = self.lock();
        g.in_use = g.in_use.saturating_sub(threads);
        g.grants = g.grants.saturating_sub(1);
        let now = Instant::now();
        let change = g.ctl.as_mut().and_then(|c| {
            c.on_release(now.saturating_duration_since(self.origin), epoch, now.saturating_duration_since(at))
        });
        if let Some(c) = change {
            self.adapted(c);
        }
        if floor {
            g.floors = g.floors.saturating_sub(1);
        }
        if let Some(q) = query_id {
            if let Some(n) = g.own.get_mut(&q) {
                *n -= 1;
                if *n == 0 {
                    g.own.remove(&q);
                }
            }
        }
        self.dispatch(&mut g);
        self.publish(&g);
    }

    /// Grants at once, whatever the mode: `clamp(total - in_use, 1, want)`.
    pub fn grant_now(self: &Arc<Self>, want: usize, query_id: &str) -> Grant {
        let want = want.clamp(1, self.max_per_query());
        let mut g = self.lock();
        let (t, floor) = self.take(&mut g, want);
        self.made(&mut g, want, t, floor, query_id, Duration::ZERO)
    }

    /// Grants `want` threads or fewer (at least 1). `grant` mode never waits; `queue` mode waits
    /// up to `max_wait` in FIFO order when no thread is free (or others are already waiting),
    /// then grants 1.
    pub async fn acquire(self: &Arc<Self>, want: usize, query_id: &str) -> Grant {
        if self.mode == ThreadMode::Grant {
            return self.grant_now(want, query_id);
        }
        let want = want.clamp(1, self.max_per_query());
        let (id, notify) = {
            let mut g = self.lock();
            if g.queue.is_empty() && self.available(&g) > 0 {
                let (t, floor) = self.take(&mut g, want);
                return self.made(&mut g, want, t, floor, query_id, Duration::ZERO);
            }
            let id = g.next_id;
            g.next_id += 1;
            let notify = Arc::new(Notify::new());
            g.queue.push_back(Waiter { id, want, notify: notify.clone() });
            self.publish(&g);
            (id, notify)
        };
        let started = Instant::now();
        let mut guard = WaitGuard { budget: self, id, done: false };
        let deadline = tokio::time::Instant::now() + self.max_wait;
        loop {
            let timed_out = tokio::time::timeout_at(deadline, notify.notified()).await.is_err();
            let mut g = self.lock();
            if let Some(t) = g.handed.remove(&id) {
                guard.done = true;
                let waited = started.elapsed();
                if let Some(m) = &self.metrics {
                    m.wait.observe(waited.as_secs_f64());
                }
                return self.made(&mut g, want, t, false, query_id, waited);
            }
            if timed_out {
                guard.done = true;
                g.queue.retain(|w| w.id != id);
                let (t, floor) = self.take(&mut g, want);
                let waited = started.elapsed();
                if let Some(m) = &self.metrics {
                    m.wait.observe(waited.as_secs_f64());
                    m.timeouts.inc();
                }
                return self.made(&mut g, want, t, floor, query_id, waited);
            }
        }
    }

    /// Sets the total (an `auto` total learned from the server); more room wakes waiters.
    pub fn set_total(&self, total: usize) {
        self.total.store(total.max(1), Ordering::Release);
        if let Some(m) = &self.metrics {
            m.total.set(total.max(1) as i64);
        }
        let mut g = self.lock();
        self.dispatch(&mut g);
        self.publish(&g);
    }

    /// Applies a change the adaptive controller made (under the budget's lock).
    fn adapted(&self, c: Change) {
        self.total.store(c.to.max(1), Ordering::Release);
        if let Some(m) = &self.metrics {
            m.total.set(c.to.max(1) as i64);
            match c.reason {
                Reason::Probe => {
                    m.probes.inc();
                }
                Reason::Move => {
                    m.moves.inc();
                }
                Reason::Back => {}
            }
        }
        if c.reason == Reason::Move {
            log(
                "info",
                "thread budget: adaptive total moved",
                serde_json::json!({"replica": self.label, "from": c.from, "to": c.to}),
            );
        }
    }

    /// `total: adaptive`: the total is set by a [`Controller`] from now on, starting where
    /// `auto` would be for `cores` cores ([`probe::auto_total`]), within 1 and 4 x cores.
    /// Called again when the server's cores become known.
    pub fn make_adaptive(&self, cores: usize) {
        let cores = cores.max(1);
        self.adapt_with(Tuning::for_cores(cores), probe::auto_total(cores));
    }

    /// [`Self::make_adaptive`] with explicit bounds and pace.
    pub(crate) fn adapt_with(&self, tuning: Tuning, initial: usize) {
        let mut g = self.lock();
        let now = Instant::now().saturating_duration_since(self.origin);
        match g.ctl.as_mut() {
            Some(c) => c.retune(now, tuning, initial),
            None => g.ctl = Some(Controller::new(tuning, initial)),
        }
        let total = g.ctl.as_ref().map_or(initial, Controller::total);
        self.total.store(total, Ordering::Release);
        if let Some(m) = &self.metrics {
            m.total.set(total as i64);
        }
        self.dispatch(&mut g);
        self.publish(&g);
    }

    /// True when the total is adaptive.
    pub fn is_adaptive(&self) -> bool {
        self.lock().ctl.is_some()
    }

    /// The server's CPU load (adaptive totals use it; others only show it).
    pub fn server_load(&self, load: ServerLoad) {
        if let (Some(m), Some(c)) = (&self.metrics, load.cpu_busy) {
            m.server_cpu.0.get_or_create(&m.server_cpu.1).set(c);
        }
        let mut g = self.lock();
        let now = Instant::now().saturating_duration_since(self.origin);
        if let Some(c) = g.ctl.as_mut() {
            c.on_server(now, load);
        }
    }

    /// Sets the threads used by queries this gateway did not send.
    pub fn set_external(&self, external: usize) {
        let mut g = self.lock();
        g.external = external;
        self.dispatch(&mut g);
        self.publish(&g);
    }

    /// `observe`: the server's running queries as (query_id, threads). Those not in flight
    /// through this budget count as external. Returns the external total.
    pub fn observe(&self, running: &[(String, usize)]) -> usize {
        let mut g = self.lock();
        let external = running.iter().filter(|(q, _)| !g.own.contains_key(q)).map(|(_, t)| *t).sum();
        g.external = external;
        self.dispatch(&mut g);
        self.publish(&g);
        external
    }
}

/// The budgets of one cluster's replicas, indexed like [`crate::cluster::balancer::Balancer::shards`].
pub struct ClusterBudget {
    pub cluster: String,
    pub cfg: Threads,
    pub replicas: Vec<Vec<Arc<ReplicaBudget>>>,
    /// Base URLs, same indexes.
    pub(crate) addrs: Vec<Vec<crate::config::ReplicaAddr>>,
}

impl ClusterBudget {
    /// Budgets with their configured totals; `auto` and `adaptive` ones start at
    /// [`probe::fallback_total`], and grants capped at the cores at this machine's cores, until
    /// [`probe::resolve`] learns the server's.
    pub fn new(cluster: &Cluster, cfg: &Threads, metrics: Option<&Metrics>) -> ClusterBudget {
        let mut replicas = Vec::new();
        let mut addrs = Vec::new();
        for (si, s) in cluster.shards.iter().enumerate() {
            let mut row = Vec::new();
            for (ri, a) in s.replicas.iter().enumerate() {
                let label = format!("{}.{}", si + 1, ri + 1);
                let m = metrics.map(|m| BudgetMetrics::new(m, &cluster.name, &label));
                let kind = cfg.total_for(&a.base);
                let total = match kind {
                    ThreadTotal::Fixed(n) => n,
                    ThreadTotal::Auto | ThreadTotal::Adaptive => probe::fallback_total(),
                };
                let mut b = ReplicaBudget::new(label, total, cfg, m);
                if let Some(b) = Arc::get_mut(&mut b) {
                    b.kind = kind;
                }
                if kind == ThreadTotal::Adaptive {
                    b.make_adaptive(probe::fallback_cores());
                }
                b.learn_cores(probe::fallback_cores());
                let needs_cores = !matches!(kind, ThreadTotal::Fixed(_)) || cfg.cap_at_cores;
                b.auto_pending.store(needs_cores, Ordering::Release);
                row.push(b);
            }
            replicas.push(row);
            addrs.push(s.replicas.clone());
        }
        ClusterBudget { cluster: cluster.name.clone(), cfg: cfg.clone(), replicas, addrs }
    }

    pub fn get(&self, shard: usize, index: usize) -> Option<&Arc<ReplicaBudget>> {
        self.replicas.get(shard)?.get(index)
    }

    /// Grants threads on the replica the balancer picked.
    pub async fn acquire(&self, r: &Replica, want: usize, query_id: &str) -> Option<Grant> {
        let b = self.get(r.shard, r.index)?;
        Some(b.acquire(want, query_id).await)
    }
}
