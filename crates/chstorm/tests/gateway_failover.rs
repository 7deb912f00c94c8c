//! Replica failures under load through the gateway, on a replicated 2x2 cluster: kill -9 of one
//! replica, then a rolling restart of all four (each restarted replica rejoins and catches up
//! before the next goes), with bench sending point lookups in an open loop, over HTTP and over
//! the native port. No query may fail. Over HTTP new versions of some rows are also written
//! through the gateway all along, and a reader checks that no lookup of them answers older data
//! than the gateway's staleness bound allows.

mod common;
use chstorm_testenv::{curl, start_cluster, Env, ROWS};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `health.max_replica_delay` of these gateways.
const MAX_DELAY: Duration = Duration::from_secs(2);

/// A gateway on the env's cluster, reads kept off replicas [`MAX_DELAY`] behind: (gateway, its
/// HTTP url).
fn gateway(env: &Env) -> (chstorm_gateway::Gateway, String) {
    let path = env.gateway_config(|t| {
        t.replace("  rise: 2\n", &format!("  rise: 2\n  max_replica_delay: {}s\n", MAX_DELAY.as_secs()))
    });
    let gw = env.rt.block_on(chstorm_gateway::Gateway::start(path)).unwrap();
    let url = format!("http://{}", gw.addr);
    (gw, url)
}

/// The replica's routed-table delay as the gateway last read it (None: not read, or unknown).
fn routed_delay(gw: &str, label: &str) -> Option<f64> {
    let series = format!("chstorm_gateway_replica_routed_delay_seconds{{cluster=\"storm\",replica=\"{label}\"}} ");
    let m = curl(&[&format!("{gw}/metrics")]).2;
    m.lines().find_map(|l| l.strip_prefix(&series)?.trim().parse().ok()).filter(|d: &f64| *d >= 0.0)
}

/// The tests of this file take turns: each runs a 2x2 cluster and an open loop, and two at once
/// would measure the 2 cores' contention instead of the gateway.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lookup() -> String {
    // Point lookups the gateway routes (a literal shop_id), skewed toward the big shops.
    let shops = (ROWS / 100).max(1);
    format!("SELECT * FROM items FINAL WHERE shop_id = {{s:zipf({shops},1.1)}} AND item_id = {{i:uniform(1,{ROWS})}}")
}

/// The open-loop rate of the failover tests: below the 500/s or so of a release build, because
/// tests run a debug build of both bench and gateway beside 4 servers on 2 cores.
const RATE: &str = "300";

fn replica_up(gw: &str, label: &str) -> Option<bool> {
    let m = curl(&[&format!("{gw}/metrics")]).2;
    m.lines()
        .find(|l| l.starts_with("chstorm_gateway_replica_up{") && l.contains(&format!("replica=\"{label}\"")))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.trim() == "1")
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "{what} did not happen within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn replica_failures_under_load_fail_no_query() {
    failures_under_load(false);
}

#[test]
fn replica_failures_under_load_fail_no_native_query() {
    failures_under_load(true);
}

/// The scenario, with bench on the gateway's HTTP port or on its native port (`clickhouse://`).
fn failures_under_load(native: bool) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut env = start_cluster();
    let (gw_handle, gw) = gateway(&env);
    // bench's target: the metrics stay on the HTTP port.
    let target = match native {
        true => format!("clickhouse://default@{}", gw_handle.native_addr.expect("local up writes listen_native")),
        false => gw.clone(),
    };
    let q = lookup();

    // 1. kill -9 of replica 1.1 while 500 lookups a second go through the gateway.
    let (url, q2) = (target.clone(), q.clone());
    let load = std::thread::spawn(move || {
        common::bench(&["--url", &url, "-q", &q2, "--rate", RATE, "-c", "32", "-d", "6s", "--timeout", "5s"]).1
    });
    std::thread::sleep(Duration::from_secs(2));
    env.cluster.kill9(1, 1);
    // Marked down on the first failure, not after probes: within well under the probe interval x fall.
    wait_for("replica 1.1 marked down", Duration::from_millis(1500), || replica_up(&gw, "1.1") == Some(false));
    let r = load.join().unwrap();
    eprintln!("kill -9 (native: {native}): queries {} errors {} max {:.4}", r.queries, r.errors, r.latency_s.max);
    assert_eq!(r.errors, 0, "failed queries across a kill -9: {:?}", r.errors_by_kind);
    assert!(r.queries >= 900, "the load really ran: {} queries", r.queries);
    // It comes back after a restart, and catches up once its old ZooKeeper session expired.
    env.cluster.restart(1, 1).unwrap();
    wait_for("replica 1.1 back up", Duration::from_secs(5), || replica_up(&gw, "1.1") == Some(true));
    wait_for("replica 1.1 caught up", Duration::from_secs(20), || fresh(&gw, "1.1"));
    let writes = (!native).then(|| Writes::start(&env, &gw));
    if let Some(w) = &writes {
        w.wait_acked(4);
    }

    // 2. A rolling restart of all four replicas, one at a time, under load (the load runs until
    // the last replica is back, at most 60 s). As an operator's rolling restart does, a replica
    // goes only once the other replica of its shard has caught up.
    let (url, q2) = (target.clone(), q.clone());
    let stop_load = chstorm_load::StopHandle::new();
    let stop2 = stop_load.clone();
    let load = std::thread::spawn(move || {
        common::bench_with_stop(
            &["--url", &url, "-q", &q2, "--rate", RATE, "-c", "32", "-d", "60s", "--timeout", "5s"],
            &stop2,
        )
        .1
    });
    std::thread::sleep(Duration::from_secs(1));
    let t_restart = Instant::now();
    for (s, r) in [(1, 1), (2, 1), (1, 2), (2, 2)] {
        let label = format!("{s}.{r}");
        let sibling = format!("{s}.{}", 3 - r);
        wait_for(&format!("replica {sibling} caught up"), Duration::from_secs(20), || fresh(&gw, &sibling));
        // A graceful stop (SIGTERM), as an operator's restart does, then start again.
        let node = env.cluster.node_mut(s, r);
        let pid = node.pid() as i32;
        unsafe { libc_kill(pid, 15) };
        wait_for(&format!("replica {label} marked down"), Duration::from_secs(5), || {
            replica_up(&gw, &label) == Some(false)
        });
        // As systemd does: SIGTERM, a stop timeout (3 s here), then SIGKILL. 18.16 may keep
        // waiting on other nodes' idle Distributed connections after SIGTERM.
        let t = Instant::now();
        let gone = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |st| st.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')))
        };
        while !gone() && t.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(100));
        }
        env.cluster.kill9(s, r);
        env.cluster.restart(s, r).unwrap();
        wait_for(&format!("replica {label} back up"), Duration::from_secs(8), || replica_up(&gw, &label) == Some(true));
    }
    for label in ["1.2", "2.2"] {
        wait_for(&format!("replica {label} caught up"), Duration::from_secs(20), || fresh(&gw, label));
    }
    eprintln!("rolling restart (native: {native}) took {:?}", t_restart.elapsed());
    stop_load.interrupt();
    if let Some(w) = writes {
        w.check();
    }
    let r = load.join().unwrap();
    eprintln!(
        "rolling restart (native: {native}): queries {} errors {} max {:.4}",
        r.queries, r.errors, r.latency_s.max
    );
    assert_eq!(r.errors, 0, "failed queries across a rolling restart: {:?}", r.errors_by_kind);
    assert!(r.queries > 1000, "the load really ran: {} queries", r.queries);
    // Retries are not asked for: a replica killed between two queries, or stopped gracefully
    // (its queries end first), may be marked down before any query meets it. That each failure
    // really happened is what the waits for "marked down" above check.
    let m = curl(&[&format!("{gw}/metrics")]).2;
    let retries = m.lines().find(|l| l.starts_with("chstorm_gateway_retries_total")).unwrap_or("none");
    eprintln!("rolling restart (native: {native}): {retries}");
}

/// The gateway reads the replica's delay, below [`MAX_DELAY`].
fn fresh(gw: &str, label: &str) -> bool {
    routed_delay(gw, label).is_some_and(|d| d < MAX_DELAY.as_secs_f64())
}

/// How old an answer through the gateway may be: the data of a replica it reads is at most
/// `max_replica_delay` behind, plus 1 s (ClickHouse counts delays in whole seconds), plus one
/// health round before a replica that falls behind is seen (`health.interval` and
/// `health.timeout`, 500 ms and 1 s in the generated config).
const STALENESS_BOUND: Duration = Duration::from_millis(2000 + 1000 + 500 + 1000);

/// One lookup: when it was sent, the version it answered (or why not), the replica that
/// answered and its `X-Chstorm-Stale`.
struct Lookup {
    sent: Instant,
    got: Result<u64, String>,
    replica: String,
    stale: Option<String>,
}

/// New versions of 30 rows written through the gateway every 250 ms while replicas restart,
/// and lookups of them through the gateway, each checked against the versions written more
/// than [`STALENESS_BOUND`] before it was sent. The writes ask for `insert_quorum=2`: a version
/// is acknowledged once both replicas of its shard hold it (while one is down its shard's
/// writes fail, and are not counted). Without a quorum, a version acknowledged by one replica
/// that then stops is on no other until it comes back, and the shard's reads meanwhile are the
/// least stale replica's, with `X-Chstorm-Stale` (as the gateway's fallback says).
struct Writes {
    stop: Arc<AtomicBool>,
    /// Versions acknowledged so far.
    acked: Arc<AtomicUsize>,
    writer: std::thread::JoinHandle<(Vec<(Instant, u64)>, u32)>,
    reader: std::thread::JoinHandle<Vec<Lookup>>,
}

impl Writes {
    fn start(env: &Env, gw: &str) -> Writes {
        let keys: Vec<(u64, u64)> = chstorm_testenv::post(
            &env.node_url(2, 1),
            "SELECT shop_id, item_id FROM items FINAL WHERE item_id % 613 = 0 ORDER BY item_id LIMIT 30",
        )
        .1
        .lines()
        .map(|l| {
            let (a, b) = l.split_once('\t').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
        assert_eq!(keys.len(), 30);
        let stop = Arc::new(AtomicBool::new(false));
        let url = format!("{gw}/?insert_distributed_sync=1&insert_quorum=2&insert_quorum_timeout=2000");
        let acked = Arc::new(AtomicUsize::new(0));
        let (k, st, n) = (keys.clone(), stop.clone(), acked.clone());
        let writer = std::thread::spawn(move || {
            let mut written = Vec::new();
            let mut failed = 0;
            for v in 1000u64.. {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let rows: Vec<String> = k.iter().map(|(s, i)| format!("({s}, {i}, {v})")).collect();
                let sql = format!("INSERT INTO items (shop_id, item_id, version) VALUES {}", rows.join(", "));
                match chstorm_testenv::post(&url, &sql) {
                    (200, _) => {
                        written.push((Instant::now(), v));
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => failed += 1,
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            (written, failed)
        });
        let (url, st) = (gw.to_string(), stop.clone());
        let reader = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for (shop, item) in keys.iter().cycle() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let sent = Instant::now();
                let q = format!("SELECT max(version) FROM items FINAL WHERE shop_id = {shop} AND item_id = {item}");
                let (status, head, body) = curl(&["--data-binary", &q, &url]);
                let header = |n: &str| head.lines().find_map(|l| l.strip_prefix(n)).map(|v| v.trim().to_string());
                let got = match status {
                    200 => body.trim().parse().map_err(|e| format!("{e}: {body}")),
                    _ => Err(format!("HTTP {status}: {}", body.trim())),
                };
                let (replica, stale) = (header("x-chstorm-replica:").unwrap_or_default(), header("x-chstorm-stale:"));
                seen.push(Lookup { sent, got, replica, stale });
            }
            seen
        });
        Writes { stop, acked, writer, reader }
    }

    /// Waits until `n` versions are acknowledged: the writes a rolling restart leaves room for
    /// (while any replica is down or behind, a quorum write fails) are few, so the versions the
    /// check rests on are written before it starts. A quorum write takes a few hundred
    /// milliseconds on 18.16, more on a slow host.
    fn wait_acked(&self, n: usize) {
        wait_for(&format!("{n} versions written"), Duration::from_secs(20), || self.acked.load(Ordering::Relaxed) >= n);
    }

    /// Stops both and checks: no lookup failed, none answered a version older than the newest
    /// one written [`STALENESS_BOUND`] before it was sent.
    fn check(self) {
        self.stop.store(true, Ordering::Relaxed);
        let (written, write_failures) = self.writer.join().unwrap();
        let seen = self.reader.join().unwrap();
        let failed: Vec<&String> = seen.iter().filter_map(|l| l.got.as_ref().err()).collect();
        let t0 = seen.first().map(|l| l.sent).unwrap_or_else(Instant::now);
        let stale = seen
            .iter()
            .filter(|l| {
                let due = written.iter().rev().find(|(at, _)| *at + STALENESS_BOUND <= l.sent).map(|(_, v)| *v);
                let late = matches!((due, &l.got), (Some(due), Ok(v)) if *v < due);
                if late {
                    let got = *l.got.as_ref().unwrap();
                    let acked = written.iter().find(|(_, v)| *v == got + 1).map(|(at, _)| at.duration_since(t0));
                    eprintln!(
                        "stale at {:?}: version {got} from {} (X-Chstorm-Stale {:?}); version {} was acked at {acked:?}",
                        l.sent.duration_since(t0),
                        l.replica,
                        l.stale,
                        got + 1
                    );
                }
                late
            })
            .count();
        eprintln!(
            "rolling restart with writes: {} versions written ({write_failures} writes failed), {} lookups, {} failed, {stale} stale",
            written.len(),
            seen.len(),
            failed.len()
        );
        let flagged = seen.iter().filter(|l| l.stale.is_some()).count();
        // Lookups sent when a version had been acknowledged for the whole bound: the ones the
        // check can fail. (Writes fail while a replica of their shard is down: the quorum.)
        let checked = seen.iter().filter(|l| written.iter().any(|(at, _)| *at + STALENESS_BOUND <= l.sent)).count();
        eprintln!("{flagged} answers carried X-Chstorm-Stale; {checked} lookups checked against a version");
        assert!(written.len() >= 4 && checked >= 50, "the writes and the checked lookups really ran");
        assert!(failed.is_empty(), "failed lookups: {failed:?}");
        assert_eq!(stale, 0, "answers older than {STALENESS_BOUND:?}");
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
