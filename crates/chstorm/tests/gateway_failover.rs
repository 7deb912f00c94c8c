//! Replica failures under load through the gateway: kill -9 of one replica, then a rolling
//! restart of all four, with bench sending point lookups in an open loop, over HTTP and over the
//! native port. No query may fail.

mod common;
use chstorm_testenv::{curl, start_cluster, Env, ROWS};

use std::time::{Duration, Instant};

/// A gateway on the env's cluster: (gateway, its HTTP url).
fn gateway(env: &Env) -> (chstorm_gateway::Gateway, String) {
    let gw = env.rt.block_on(chstorm_gateway::Gateway::start(env.gateway_config(|t| t))).unwrap();
    let url = format!("http://{}", gw.addr);
    (gw, url)
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
    // It comes back after a restart.
    env.cluster.restart(1, 1).unwrap();
    wait_for("replica 1.1 back up", Duration::from_secs(5), || replica_up(&gw, "1.1") == Some(true));

    // 2. A rolling restart of all four replicas, one at a time, under load (the load runs until
    // the last replica is back, at most 40 s).
    let (url, q2) = (target.clone(), q.clone());
    let stop_load = chstorm_load::StopHandle::new();
    let stop2 = stop_load.clone();
    let load = std::thread::spawn(move || {
        common::bench_with_stop(
            &["--url", &url, "-q", &q2, "--rate", RATE, "-c", "32", "-d", "40s", "--timeout", "5s"],
            &stop2,
        )
        .1
    });
    std::thread::sleep(Duration::from_secs(1));
    for (s, r) in [(1, 1), (1, 2), (2, 1), (2, 2)] {
        let label = format!("{s}.{r}");
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
    stop_load.interrupt();
    let r = load.join().unwrap();
    eprintln!(
        "rolling restart (native: {native}): queries {} errors {} max {:.4}",
        r.queries, r.errors, r.latency_s.max
    );
    assert_eq!(r.errors, 0, "failed queries across a rolling restart: {:?}", r.errors_by_kind);
    assert!(r.queries > 1000, "the load really ran: {} queries", r.queries);
    let m = curl(&[&format!("{gw}/metrics")]).2;
    assert!(
        m.lines().any(|l| l.starts_with("chstorm_gateway_retries_total") && !l.ends_with(" 0")),
        "retries were needed and made:\n{m}"
    );
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
