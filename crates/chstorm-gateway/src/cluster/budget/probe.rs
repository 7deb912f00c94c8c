//! What a budget learns from its replica, over the replica's HTTP interface as the cluster's user:
//!
//! * The server's cores, for `auto` and `adaptive` totals and for the per-query cap when
//!   `max_per_query` is not set: `SELECT value, changed FROM system.settings WHERE name =
//!   'max_threads'`. ClickHouse's default `max_threads` is its count of CPU cores. Newer servers
//!   show it as `'auto(N)'` (whatever `changed` says, the N is the cores); 18.16 shows the plain
//!   number `N` with `changed = 0`. A plain number with `changed = 1` was set by the user's
//!   profile and says nothing about the cores: then, as when the replica does not answer, the
//!   gateway uses this machine's logical cores ([`fallback_cores`], [`fallback_total`]) with a
//!   warning, and keeps asking every [`RETRY_EVERY`] until the replica answers. The cores also
//!   cap each grant when `max_per_query` is not set ([`Threads::cap_at_cores`]).
//! * `adaptive` totals also read the server's CPU every second ([`CPU_SQL`]) where the server
//!   publishes it (not 18.16: after 5 answers without, no more).
//! * `observe`: every `observe_interval` (100 ms), one small query lists the server's running
//!   queries with their `max_threads` from `system.processes`: the `Settings.Names` /
//!   `Settings.Values` arrays on 18.16 (and up to the versions that turned them into the map
//!   `Settings`, read as `Settings['max_threads']`). Which form the server has is detected once
//!   from `system.columns`. A query that did not set `max_threads` counts as the server's default
//!   (the value read above). Queries in flight through this gateway are recognised by their
//!   query_id and skipped (they are counted by their grants); the gateway's own probes carry the
//!   query_id prefix [`PROBE_PREFIX`] and are left out by the query itself. Everything else,
//!   queries sent to the server directly and the queries of other gateways (which carry their
//!   grant as `max_threads`), is the budget's `external` share.
//!
//! `system.metrics` (`Query`, `QueryThread` on 18.16; `GlobalThreadActive` on newer servers)
//! would be cheaper still, but counts this gateway's queries too, with no way to subtract them,
//! and `QueryThread` counts threads that exist, not the `max_threads` a starting query may grow
//! to; so the per-query list is used. It costs one HTTP round trip and a few rows per poll.

use super::{ClusterBudget, ReplicaBudget};
use crate::cluster::upstream::{full, Upstream};
use crate::config::{ReplicaAddr, ThreadTotal, Threads};
use crate::log::log;
use http_body_util::BodyExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The query_id prefix of the gateway's own probe queries.
pub const PROBE_PREFIX: &str = "chgw-observe-";
/// How often an unanswered probe (auto total, processes schema) is tried again.
pub const RETRY_EVERY: Duration = Duration::from_secs(5);
/// Timeout of one probe query.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// This machine's logical cores.
pub fn fallback_cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The `auto` total for `cores` cores: the cores. The seed found "the cores or twice that"
/// best; on its table, here, total = cores beat 2 x cores (queue mode, 20 clients): twice the
/// cores put 4 threads on 2 busy cores (the benchmark in docs/GATEWAY.md, "Thread budget"). A
/// lone query's grant is capped at the cores ([`Threads::cap_at_cores`]), so it gets the same
/// either way.
pub fn auto_total(cores: usize) -> usize {
    cores.max(1)
}

/// The `auto` total used while the server's cores are unknown: this machine's cores.
pub fn fallback_total() -> usize {
    auto_total(fallback_cores())
}

/// What the `max_threads` row of `system.settings` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxThreadsSetting {
    /// The server's cores, when the value is the default.
    pub cores: Option<usize>,
    /// The `max_threads` a query of this user gets when it sets none.
    pub default_max_threads: Option<usize>,
}

/// Reads `value` and `changed` of `system.settings` for `max_threads`: `'auto(8)'` (newer
/// servers), `8` with changed = 0 (18.16: the default, i.e. the cores), `8` with changed = 1
/// (set by a profile: not the cores).
pub fn parse_max_threads(value: &str, changed: &str) -> MaxThreadsSetting {
    let v = value.trim().trim_matches('\'').trim();
    if let Some(n) =
        v.strip_prefix("auto(").and_then(|r| r.strip_suffix(')')).and_then(|n| n.trim().parse::<usize>().ok())
    {
        let n = (n > 0).then_some(n);
        return MaxThreadsSetting { cores: n, default_max_threads: n };
    }
    match v.parse::<usize>() {
        Ok(n) if n > 0 => {
            let is_default = changed.trim() == "0";
            MaxThreadsSetting { cores: is_default.then_some(n), default_max_threads: Some(n) }
        }
        _ => MaxThreadsSetting { cores: None, default_max_threads: None },
    }
}

/// How `system.processes` shows a query's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessesSchema {
    /// `Settings.Names` / `Settings.Values` arrays (18.16).
    Nested,
    /// `Settings Map(String, String)` (newer servers).
    Map,
    /// No settings column: every other query counts as the default max_threads.
    NoSettings,
}

/// The schema, from the names of `system.processes`' columns.
pub fn processes_schema<'a>(columns: impl IntoIterator<Item = &'a str>) -> ProcessesSchema {
    let cols: Vec<&str> = columns.into_iter().map(str::trim).collect();
    if cols.contains(&"Settings.Names") && cols.contains(&"Settings.Values") {
        ProcessesSchema::Nested
    } else if cols.contains(&"Settings") {
        ProcessesSchema::Map
    } else {
        ProcessesSchema::NoSettings
    }
}

/// The poll: (query_id, max_threads or 0) of every running query but the gateway's probes.
pub fn observe_sql(schema: ProcessesSchema) -> String {
    let threads = match schema {
        ProcessesSchema::Nested => "toUInt64OrZero(Settings.Values[indexOf(Settings.Names, 'max_threads')])",
        ProcessesSchema::Map => "toUInt64OrZero(Settings['max_threads'])",
        ProcessesSchema::NoSettings => "toUInt64(0)",
    };
    format!("SELECT query_id, {threads} FROM system.processes WHERE query_id NOT LIKE '{PROBE_PREFIX}%' FORMAT TabSeparated")
}

/// Parses the poll's answer; a query without max_threads (0) counts as `default_threads`.
pub fn parse_running(tsv: &str, default_threads: usize) -> Vec<(String, usize)> {
    tsv.lines()
        .filter_map(|l| {
            let (q, t) = l.rsplit_once('\t')?;
            let t: usize = t.trim().parse().ok()?;
            Some((q.to_string(), if t == 0 { default_threads.max(1) } else { t }))
        })
        .collect()
}

/// Runs `sql` on a replica; the answer's text.
pub async fn query(upstream: &Upstream, auth: &str, addr: &ReplicaAddr, sql: &str) -> Result<String, String> {
    let id = format!("{PROBE_PREFIX}{:016x}", rand::random::<u64>());
    let req = hyper::Request::post(format!("{}/?query_id={id}", addr.base))
        .header("authorization", auth)
        .body(full(sql.to_string()))
        .map_err(|e| e.to_string())?;
    let fut = async {
        let resp = upstream.send(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = http_body_util::Limited::new(resp.into_body(), 1 << 20)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let text = String::from_utf8_lossy(&body).into_owned();
        if status.is_success() {
            Ok(text)
        } else {
            Err(format!("HTTP {status}: {}", text.trim()))
        }
    };
    tokio::time::timeout(PROBE_TIMEOUT, fut)
        .await
        .map_err(|_| format!("no answer within {} ms", PROBE_TIMEOUT.as_millis()))?
}

/// What a replica told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerFacts {
    pub max_threads: MaxThreadsSetting,
    /// Known when `observe` asked for it.
    pub schema: Option<ProcessesSchema>,
}

impl ServerFacts {
    /// The threads a query that sets no max_threads gets.
    pub fn default_threads(&self) -> usize {
        self.max_threads.default_max_threads.or(self.max_threads.cores).unwrap_or_else(fallback_cores)
    }
}

/// Asks a replica for its max_threads setting and, if `schema`, the form of system.processes.
pub async fn learn(upstream: &Upstream, auth: &str, addr: &ReplicaAddr, schema: bool) -> Result<ServerFacts, String> {
    let row = query(
        upstream,
        auth,
        addr,
        "SELECT value, changed FROM system.settings WHERE name = 'max_threads' FORMAT TabSeparated",
    )
    .await?;
    let mut cols = row.lines().next().unwrap_or("").split('\t');
    let max_threads = parse_max_threads(cols.next().unwrap_or(""), cols.next().unwrap_or(""));
    let schema = if schema {
        let cols = query(
            upstream,
            auth,
            addr,
            "SELECT name FROM system.columns WHERE database = 'system' AND table = 'processes' FORMAT TabSeparated",
        )
        .await?;
        Some(processes_schema(cols.lines()))
    } else {
        None
    };
    Ok(ServerFacts { max_threads, schema })
}

/// Applies what was learned to an `auto` or `adaptive` budget; logs the outcome.
fn apply(
    cluster: &str,
    b: &ReplicaBudget,
    addr: &ReplicaAddr,
    facts: Option<&ServerFacts>,
    error: Option<&str>,
    first: bool,
) {
    if !b.auto_pending.load(Ordering::Acquire) {
        return;
    }
    match facts.and_then(|f| f.max_threads.cores) {
        Some(cores) => {
            b.learn_cores(cores);
            match b.kind {
                ThreadTotal::Adaptive => b.make_adaptive(cores),
                ThreadTotal::Auto => b.set_total(auto_total(cores)),
                ThreadTotal::Fixed(_) => {}
            }
            b.auto_pending.store(false, Ordering::Release);
            log(
                "info",
                "thread budget: the server's cores learned",
                serde_json::json!({"cluster": cluster, "replica": b.label, "url": addr.base,
                "server_cores": cores, "total": b.total(), "total_kind": format!("{:?}", b.kind),
                "max_per_query": b.max_per_query()}),
            );
        }
        None if first => {
            log(
                "warn",
                "thread budget: the server's cores are unknown, using this machine's until the server tells",
                serde_json::json!({
                "cluster": cluster, "replica": b.label, "url": addr.base, "total": b.total(),
                "why": error.map(str::to_string).unwrap_or_else(|| "max_threads is set by the user's profile, so it is not the server's cores; write threads.total as a number".into())}),
            );
        }
        None => {}
    }
}

/// At start-up: asks every replica that needs it (an `auto` total, or `observe`) at once.
pub async fn resolve(cb: &ClusterBudget, upstream: &Arc<Upstream>, auth: &str) -> Vec<Vec<Option<ServerFacts>>> {
    let observe = cb.cfg.observe;
    let mut tasks = Vec::new();
    for (si, row) in cb.replicas.iter().enumerate() {
        for (ri, b) in row.iter().enumerate() {
            let needed = observe || b.auto_pending.load(Ordering::Acquire);
            let (up, auth, addr) = (upstream.clone(), auth.to_string(), cb.addrs[si][ri].clone());
            tasks.push(tokio::spawn(async move {
                if !needed {
                    return (si, ri, None);
                }
                (si, ri, Some(learn(&up, &auth, &addr, observe).await))
            }));
        }
    }
    let mut out: Vec<Vec<Option<ServerFacts>>> = cb.replicas.iter().map(|r| vec![None; r.len()]).collect();
    for t in tasks {
        let Ok((si, ri, res)) = t.await else { continue };
        let Some(res) = res else { continue };
        let b = &cb.replicas[si][ri];
        let addr = &cb.addrs[si][ri];
        match res {
            Ok(f) => {
                apply(&cb.cluster, b, addr, Some(&f), None, true);
                out[si][ri] = Some(f);
            }
            Err(e) => apply(&cb.cluster, b, addr, None, Some(&e), true),
        }
    }
    out
}

/// How often an adaptive budget reads the server's CPU (servers refresh
/// `system.asynchronous_metrics` every second by default).
pub const CPU_EVERY: Duration = Duration::from_secs(1);

/// The CPU figures a server may publish, busy shares normalized to 0..1 by its cores: the
/// `OS*TimeNormalized` of the machine, or, in a container, the `CGroup*TimeNormalized` of its
/// cgroup (preferred when present). 18.16 has neither (its asynchronous metrics are about
/// caches, memory and replication); then the adaptive total goes by latency and throughput.
pub const CPU_SQL: &str = "SELECT metric, value FROM system.asynchronous_metrics WHERE metric IN \
    ('OSUserTimeNormalized', 'OSSystemTimeNormalized', 'OSNiceTimeNormalized', \
    'CGroupUserTimeNormalized', 'CGroupSystemTimeNormalized') FORMAT TabSeparated";

/// The busy share from [`CPU_SQL`]'s answer; `None` when the server has no such metric.
pub fn parse_cpu(tsv: &str) -> Option<f64> {
    let (mut os, mut cgroup) = (None, None);
    for (name, value) in tsv.lines().filter_map(|l| {
        let (k, v) = l.split_once('\t')?;
        Some((k.trim(), v.trim().parse::<f64>().ok().filter(|v| v.is_finite())?))
    }) {
        let sum = if name.starts_with("CGroup") { &mut cgroup } else { &mut os };
        *sum.get_or_insert(0.0) += value;
    }
    cgroup.or(os).map(|c: f64| c.clamp(0.0, 1.0))
}

/// Whether the server publishes CPU figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cpu {
    /// Not seen yet, after this many answers without (a server may fill
    /// `system.asynchronous_metrics` only some time after it starts).
    Unknown(u32),
    Published,
    Absent,
}

/// Answers without a CPU figure after which the server is taken not to publish any.
const CPU_MISSES: u32 = 5;

/// The background work of one replica's budget: learning an `auto`/`adaptive` total's cores
/// that start-up could not, the `observe` poll, and an adaptive total's reading of the server's
/// CPU. Returns when there is nothing left to do.
pub async fn run(
    cluster: String,
    b: Arc<ReplicaBudget>,
    addr: ReplicaAddr,
    cfg: Threads,
    upstream: Arc<Upstream>,
    auth: String,
    mut facts: Option<ServerFacts>,
) {
    let adaptive = b.is_adaptive();
    let every = match (cfg.observe, adaptive) {
        (true, _) => cfg.observe_interval.min(CPU_EVERY),
        (false, true) => CPU_EVERY,
        (false, false) => RETRY_EVERY,
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_try = Instant::now();
    let mut last_cpu: Option<Instant> = None;
    let mut cpu = Cpu::Unknown(0);
    let mut failing = false;
    loop {
        tick.tick().await;
        let auto = b.auto_pending.load(Ordering::Acquire);
        let need_facts = auto || (cfg.observe && facts.and_then(|f| f.schema).is_none());
        let want_cpu = adaptive && cpu != Cpu::Absent;
        if !cfg.observe && !auto && !want_cpu {
            return;
        }
        if need_facts && last_try.elapsed() >= RETRY_EVERY {
            last_try = Instant::now();
            match learn(&upstream, &auth, &addr, cfg.observe).await {
                Ok(f) => {
                    apply(&cluster, &b, &addr, Some(&f), None, false);
                    facts = Some(f);
                }
                Err(_) => continue,
            }
        }
        if want_cpu && last_cpu.is_none_or(|t| t.elapsed() >= CPU_EVERY) {
            last_cpu = Some(Instant::now());
            if let Ok(tsv) = query(&upstream, &auth, &addr, CPU_SQL).await {
                match parse_cpu(&tsv) {
                    Some(busy) => {
                        cpu = Cpu::Published;
                        b.server_load(super::adaptive::ServerLoad { cpu_busy: Some(busy) });
                    }
                    None => match cpu {
                        Cpu::Unknown(n) if n + 1 < CPU_MISSES => cpu = Cpu::Unknown(n + 1),
                        Cpu::Unknown(_) => {
                            cpu = Cpu::Absent;
                            log(
                            "info",
                            "thread budget: the server publishes no CPU figures; the adaptive total goes by latency and throughput",
                            serde_json::json!({"cluster": cluster, "replica": b.label, "url": addr.base}),
                        );
                        }
                        _ => {}
                    },
                }
            }
        }
        if !cfg.observe {
            continue;
        }
        let Some(f) = facts else { continue };
        let Some(schema) = f.schema else { continue };
        match query(&upstream, &auth, &addr, &observe_sql(schema)).await {
            Ok(tsv) => {
                let running = parse_running(&tsv, f.default_threads());
                b.observe(&running);
                if failing {
                    failing = false;
                    log(
                        "info",
                        "thread budget: observe poll works again",
                        serde_json::json!({"cluster": cluster, "replica": b.label}),
                    );
                }
            }
            Err(e) => {
                // Nothing is known of the server: count nothing external (a down replica runs nothing).
                b.set_external(0);
                if !failing {
                    failing = true;
                    log(
                        "warn",
                        "thread budget: observe poll failed",
                        serde_json::json!({"cluster": cluster, "replica": b.label, "url": addr.base, "error": e}),
                    );
                }
            }
        }
    }
}

/// Starts [`run`] for every replica that needs it; the handles abort them.
pub fn spawn(
    cb: &ClusterBudget,
    upstream: &Arc<Upstream>,
    auth: &str,
    facts: Vec<Vec<Option<ServerFacts>>>,
) -> Vec<tokio::task::AbortHandle> {
    let mut handles = Vec::new();
    for (si, row) in cb.replicas.iter().enumerate() {
        for (ri, b) in row.iter().enumerate() {
            if !cb.cfg.observe && !b.auto_pending.load(Ordering::Acquire) && !b.is_adaptive() {
                continue;
            }
            let f = facts.get(si).and_then(|r| r.get(ri)).copied().flatten();
            let task = tokio::spawn(run(
                cb.cluster.clone(),
                b.clone(),
                cb.addrs[si][ri].clone(),
                cb.cfg.clone(),
                upstream.clone(),
                auth.to_string(),
                f,
            ));
            handles.push(task.abort_handle());
        }
    }
    handles
}
