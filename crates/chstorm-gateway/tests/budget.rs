//! The thread budget against a real ClickHouse 18.16 server, through a real gateway.
//!
//! * The granted `max_threads` as the server saw it (read back from `system.processes` while
//!   the queries run and from `system.query_log` after), alone and under 2, 4, 8 concurrent
//!   queries: it falls from 4 to 1 as concurrency rises, and the grants never add up to more
//!   than the total plus the 1-thread floors.
//! * `observe`: queries sent to the server directly, and another gateway's queries, lower the
//!   grants.
//! * `auto` = the cores 18.16 reports, the defaults cap a lone query at the cores; a client
//!   that disconnects gives its threads back.
//! * `adaptive` starts where `auto` does, stays within its bounds under load, and finds that
//!   18.16 publishes no CPU figures.
//!
//! The scenarios share one server, and `observe` sees every query on it, so they run one at a
//! time.

use chstorm_gateway::Gateway;
use chstorm_local::{shared_server, LocalServer};
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

struct Gw {
    gw: Gateway,
    url: String,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A gateway in front of `server` with `threads` (YAML lines under `threads:`).
fn gateway(rt: &tokio::runtime::Runtime, dir: &std::path::Path, name: &str, server: &LocalServer, threads: &str) -> Gw {
    let yaml = format!(
        "listen: 127.0.0.1:0\nclusters:\n  one:\n    shards:\n      - replicas: [{}]\n    threads:\n{threads}users:\n  - name: default\n    cluster: one\n    metrics: true\n",
        server.http_url()
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    let gw = rt.block_on(Gateway::start(path)).unwrap();
    let url = format!("http://{}", gw.addr);
    Gw { gw, url }
}

/// POSTs `sql` to `url` with `params`; (status, lower-cased head, body).
fn curl(url: &str, params: &str, sql: &str, max_time: &str) -> (u16, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", max_time, "--data-binary", sql, &format!("{url}/?{params}")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).map(|v| v.trim().to_string()))
}

/// Runs `n` copies of `sql` at once through `url`, with query_ids `{tag}-{i}`; returns the
/// `x-chstorm-threads` of each.
fn burst(url: &str, tag: &str, n: usize, sql: &str) -> Vec<usize> {
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (url, sql, qid) = (url.to_string(), sql.to_string(), format!("{tag}-{i}"));
            std::thread::spawn(move || {
                let (status, head, body) = curl(&url, &format!("query_id={qid}"), &sql, "20");
                assert_eq!(status, 200, "{head}{body}");
                header(&head, "x-chstorm-threads").expect("x-chstorm-threads").parse::<usize>().unwrap()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// `max_threads` by query_id for the queries whose id starts with `tag`, as `table` shows them
/// (`system.processes` or `system.query_log`, finished queries).
fn server_max_threads(server: &LocalServer, table: &str, tag: &str) -> BTreeMap<String, usize> {
    let filter = if table == "system.query_log" { "AND type = 2" } else { "" };
    let out = server
        .query(&format!(
            "SELECT query_id, Settings.Values[indexOf(Settings.Names, 'max_threads')] FROM {table} \
             WHERE query_id LIKE 'default:{tag}-%' {filter} FORMAT TabSeparated"
        ))
        .unwrap();
    out.lines()
        .map(|l| {
            let (q, v) = l.split_once('\t').unwrap();
            (q.to_string(), v.parse().unwrap_or_else(|_| panic!("no max_threads for {q}: {l:?}")))
        })
        .collect()
}

/// The value of a metric line `name{cluster="one",replica="1.1"} V` in /metrics.
fn metric(url: &str, name: &str) -> f64 {
    let out = Command::new("curl").args(["-sS", "--max-time", "5", &format!("{url}/metrics")]).output().unwrap();
    let body = String::from_utf8_lossy(&out.stdout).into_owned();
    let prefix = format!("{name}{{cluster=\"one\",replica=\"1.1\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in /metrics:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn tag(name: &str) -> String {
    format!("tb{}{}", name, std::process::id())
}

#[test]
fn granted_max_threads_reaches_the_server_and_falls_with_concurrency() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = shared_server();
    let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
    let g = gateway(&rt, dir.path(), "grant", server, "      total: 4\n      max_per_query: 4\n      mode: grant\n");
    let sql = "SELECT sleep(1)";
    let mut mean = Vec::new();
    println!("concurrency  granted max_threads (server's query_log)");
    for c in [1usize, 2, 4, 8] {
        let t = tag(&format!("c{c}x"));
        let handle = {
            let (url, t) = (g.url.clone(), t.clone());
            std::thread::spawn(move || burst(&url, &t, c, sql))
        };
        if c == 8 {
            // While the 8 run, read their settings from system.processes.
            std::thread::sleep(Duration::from_millis(600));
            let running = server_max_threads(server, "system.processes", &t);
            assert_eq!(running.len(), 8, "all 8 run at once: {running:?}");
            let mut v: Vec<usize> = running.values().copied().collect();
            v.sort();
            assert_eq!(v, vec![1, 1, 1, 1, 1, 1, 1, 4], "system.processes shows the grants");
        }
        let headers = handle.join().unwrap();
        // The server may queue a query's finish record just after the answer: flush until all
        // are there (or 5 s pass).
        let mut logged = BTreeMap::new();
        wait_for("the queries in system.query_log", Duration::from_secs(5), || {
            server.query("SYSTEM FLUSH LOGS").unwrap();
            logged = server_max_threads(server, "system.query_log", &t);
            logged.len() >= c
        });
        assert_eq!(logged.len(), c, "{logged:?}");
        let mut grants: Vec<usize> = logged.values().copied().collect();
        grants.sort();
        let mut hs = headers.clone();
        hs.sort();
        assert_eq!(grants, hs, "what the gateway said it sent is what the server ran with");
        let floors = grants.iter().filter(|&&g| g == 1).count();
        let sum: usize = grants.iter().sum();
        assert!(sum <= 4 + floors, "grants {grants:?} over total + floors");
        let mut expected = vec![1; c - 1];
        expected.push(4);
        assert_eq!(grants, expected, "alone 4; with c at once, one 4 and c-1 floors");
        let m = sum as f64 / c as f64;
        println!("{c:>11}  {grants:?}  mean {m:.2}");
        mean.push(m);
    }
    assert!(mean.windows(2).all(|w| w[1] < w[0]), "the mean grant falls as concurrency rises: {mean:?}");
    assert_eq!(metric(&g.url, "chstorm_gateway_threads_in_use"), 0.0, "every grant came back");
    assert_eq!(metric(&g.url, "chstorm_gateway_threads_budget"), 4.0);
    g.gw.stop();
}

#[test]
fn observe_counts_direct_queries_and_other_gateways() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = shared_server();
    let default: usize =
        server.query("SELECT value FROM system.settings WHERE name = 'max_threads'").unwrap().trim().parse().unwrap();
    let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
    let threads = "      total: 8\n      max_per_query: 8\n      observe: true\n";
    let a = gateway(&rt, dir.path(), "a", server, threads);
    let b = gateway(&rt, dir.path(), "b", server, threads);

    // Alone: 8.
    let (_, head, _) = curl(&a.url, "", "SELECT 1", "10");
    assert_eq!(header(&head, "x-chstorm-threads").as_deref(), Some("8"));

    // Two queries straight to the server: one with max_threads=1, one with the server default.
    let direct: Vec<_> = ["max_threads=1", ""]
        .iter()
        .map(|p| {
            let (url, p) = (server.http_url().to_string(), p.to_string());
            std::thread::spawn(move || curl(&url, &p, "SELECT sleep(2)", "10"))
        })
        .collect();
    let external = 1 + default;
    wait_for("gateway a to see the direct queries", Duration::from_secs(5), || {
        metric(&a.url, "chstorm_gateway_threads_external") as usize == external
    });
    let (_, head, _) = curl(&a.url, "", "SELECT 1", "10");
    assert_eq!(header(&head, "x-chstorm-threads"), Some((8 - external).max(1).to_string()), "8 - {external} external");
    for d in direct {
        assert_eq!(d.join().unwrap().0, 200);
    }
    wait_for("the direct queries to leave", Duration::from_secs(5), || {
        metric(&a.url, "chstorm_gateway_threads_external") == 0.0
    });

    // A long query through gateway a takes all 8; gateway b sees it and grants the floor.
    let long = {
        let url = a.url.clone();
        std::thread::spawn(move || curl(&url, "", "SELECT sleep(2)", "10"))
    };
    wait_for("gateway b to see a's query", Duration::from_secs(5), || {
        metric(&b.url, "chstorm_gateway_threads_external") == 8.0
    });
    assert_eq!(metric(&a.url, "chstorm_gateway_threads_external"), 0.0, "a knows its own query");
    assert_eq!(metric(&a.url, "chstorm_gateway_threads_in_use"), 8.0);
    let (_, head, _) = curl(&b.url, "", "SELECT 1", "10");
    assert_eq!(header(&head, "x-chstorm-threads").as_deref(), Some("1"), "one budget shared by two gateways");
    let (_, head, _) = long.join().unwrap();
    assert_eq!(header(&head, "x-chstorm-threads").as_deref(), Some("8"));
    a.gw.stop();
    b.gw.stop();
}

#[test]
fn auto_is_the_servers_cores_and_a_gone_client_gives_its_threads_back() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = shared_server();
    let cores: usize = server
        .query("SELECT value FROM system.settings WHERE name = 'max_threads' AND changed = 0")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
    let g = gateway(&rt, dir.path(), "auto", server, "      total: auto\n      max_per_query: 64\n      mode: queue\n");
    assert_eq!(metric(&g.url, "chstorm_gateway_threads_budget"), cores as f64, "auto = the {cores} cores");
    let (_, head, _) = curl(&g.url, "", "SELECT 1", "10");
    assert_eq!(header(&head, "x-chstorm-threads"), Some(cores.to_string()), "max_per_query 64: the whole total");
    let (_, head, _) = curl(&g.url, "max_threads=1", "SELECT 1", "10");
    assert_eq!(
        header(&head, "x-chstorm-threads").as_deref(),
        Some("1"),
        "the client's own max_threads, under the grant"
    );
    // The defaults (`threads: {}`): auto, and a lone query gets the cores.
    let d = gateway(&rt, dir.path(), "defaults", server, "      {}\n");
    assert_eq!(metric(&d.url, "chstorm_gateway_threads_budget"), cores as f64);
    let (_, head, _) = curl(&d.url, "", "SELECT 1", "10");
    assert_eq!(header(&head, "x-chstorm-threads"), Some(cores.to_string()), "the {cores} cores");
    d.gw.stop();
    // A larger total without max_per_query: a lone query is still capped at the cores.
    let big = format!("      total: {}\n", 4 * cores);
    let d = gateway(&rt, dir.path(), "big", server, &big);
    assert_eq!(metric(&d.url, "chstorm_gateway_threads_budget"), (4 * cores) as f64);
    let (_, head, _) = curl(&d.url, "", "SELECT 1", "10");
    assert_eq!(header(&head, "x-chstorm-threads"), Some(cores.to_string()), "capped at the {cores} cores");
    d.gw.stop();

    // A client that gives up after 0.5 s on a 2 s query.
    let t = tag("gone");
    let gone = {
        let url = g.url.clone();
        let qid = format!("query_id={t}-0");
        std::thread::spawn(move || curl(&url, &qid, "SELECT sleep(2)", "0.5"))
    };
    wait_for("the grant to be held", Duration::from_secs(5), || {
        metric(&g.url, "chstorm_gateway_threads_in_use") == cores as f64
    });
    let (status, _, _) = gone.join().unwrap();
    assert_eq!(status, 0, "curl gave up");
    wait_for("the grant to come back", Duration::from_secs(3), || {
        metric(&g.url, "chstorm_gateway_threads_in_use") == 0.0
    });
    // And the query was killed.
    // (Counted, not read with its max_threads: 18.16 does not list a max_threads equal to its
    // default among a query's settings.)
    wait_for("the query to leave the server", Duration::from_secs(5), || {
        server
            .query(&format!("SELECT count() FROM system.processes WHERE query_id LIKE 'default:{t}-%'"))
            .unwrap()
            .trim()
            == "0"
    });
    g.gw.stop();
}

#[test]
fn adaptive_starts_where_auto_does_and_stays_within_its_bounds() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = shared_server();
    let cores: usize = server
        .query("SELECT value FROM system.settings WHERE name = 'max_threads' AND changed = 0")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (rt, dir) = (runtime(), tempfile::tempdir().unwrap());
    let g = gateway(&rt, dir.path(), "adaptive", server, "      total: adaptive\n");
    assert_eq!(metric(&g.url, "chstorm_gateway_threads_budget"), cores as f64, "starts at auto's {cores}");
    // 4 clients x 40 queries: every one answered, every grant within 1..=cores (max_per_query
    // not set), the total within 1..=4 x cores.
    let t = tag("adaptive");
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (url, t) = (g.url.clone(), t.clone());
            std::thread::spawn(move || {
                (0..40)
                    .map(|i| {
                        let (status, head, body) = curl(
                            &url,
                            &format!("query_id={t}-{c}-{i}"),
                            "SELECT count() FROM numbers(3000000) WHERE number % 7 = 1",
                            "20",
                        );
                        assert_eq!(status, 200, "{head}{body}");
                        assert_eq!(body.trim(), "428572");
                        header(&head, "x-chstorm-threads").unwrap().parse::<usize>().unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let grants: Vec<usize> = clients.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert_eq!(grants.len(), 160);
    assert!(grants.iter().all(|&n| (1..=cores).contains(&n)), "{grants:?}");
    let total = metric(&g.url, "chstorm_gateway_threads_budget") as usize;
    assert!((1..=4 * cores).contains(&total), "total {total} out of 1..={}", 4 * cores);
    assert_eq!(metric(&g.url, "chstorm_gateway_threads_in_use"), 0.0, "every grant came back");
    // 18.16 publishes no CPU figures: the gateway asked (its probe is in the query log), and
    // shows none.
    wait_for("the CPU probe in the query log", Duration::from_secs(5), || {
        server.query("SYSTEM FLUSH LOGS").unwrap();
        let n: usize = server
            .query(
                "SELECT count() FROM system.query_log WHERE query_id LIKE 'chgw-observe-%' \
                 AND query LIKE '%asynchronous_metrics%' AND type = 2",
            )
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        n >= 1
    });
    let body = String::from_utf8_lossy(
        &Command::new("curl").args(["-sS", "--max-time", "5", &format!("{}/metrics", g.url)]).output().unwrap().stdout,
    )
    .into_owned();
    assert!(!body.contains("chstorm_gateway_thread_server_cpu{"), "no CPU figure from 18.16:\n{body}");
    assert!(body.contains("chstorm_gateway_thread_total_probes_total{"), "{body}");
    g.gw.stop();
}
