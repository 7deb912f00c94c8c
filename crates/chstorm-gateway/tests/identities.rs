//! Each gateway user runs as its own ClickHouse user, against a real 2x2 cluster of 18.16 whose
//! nodes have the server users `chstorm local up` writes (`chstorm_writer` for the gateway user
//! `default`, `chstorm_viewer` with `readonly=1` for `viewer`): the servers see each query as
//! its user's login over HTTP and native, the gateway's pools never carry one login's query on
//! another's connection, the server refuses what a profile forbids even where the gateway's own
//! rule is off, KILL guards work as the query's login, and the gateway's own listings
//! (`/metrics`, the replicas' URLs) are for users allowed them.

use chstorm_gateway::Gateway;
use chstorm_testenv::{curl, post, start_shared_cluster, Env};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `echo -n secret | sha256sum`
const SECRET_SHA256: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

/// The env, and a gateway on the generated config plus `shared` (no `backend`: the cluster's
/// login, the server's `default`) and `bypass` (no rules at all, every operator statement
/// allowed, running as `chstorm_viewer`: the server's profile is the only wall).
fn env() -> &'static (Env, Gateway) {
    static ENV: OnceLock<(Env, Gateway)> = OnceLock::new();
    ENV.get_or_init(|| {
        let env = start_shared_cluster();
        let viewer = env.cluster.server_login("viewer").expect("the local cluster has viewer").clone();
        let extra = format!(
            "  - name: shared\n    cluster: storm\n  - name: bypass\n    cluster: storm\n    operator_statements: [\"*\"]\n    backend: {{user: {}, password: \"{}\"}}\n",
            viewer.user, viewer.password
        );
        let path = env.gateway_config(|t| format!("{t}{extra}"));
        let gw = env.rt.block_on(Gateway::start(path)).unwrap();
        (env, gw)
    })
}

fn http(gw: &Gateway) -> String {
    format!("http://{}", gw.addr)
}

/// curl as gateway user `user` (no password): (status, body).
fn as_user(gw: &Gateway, user: &str, sql: &str, params: &str) -> (u16, String) {
    let auth = format!("{user}:");
    let (s, _, b) = curl(&["-u", &auth, "--data-binary", sql, &format!("{}/?{params}", http(gw))]);
    (s, b)
}

/// `clickhouse-client` on the gateway's native port as `user`: (success, stdout, stderr).
fn native(gw: &Gateway, user: &str, extra: &[&str], sql: &str) -> (bool, String, String) {
    let port = gw.native_addr.expect("listen_native is set").port().to_string();
    let out = Command::new("timeout")
        .args(["60", "clickhouse-client", "--host", "127.0.0.1", "--port", &port, "--user", user])
        .args(extra)
        .args(["--query", sql])
        .output()
        .expect("clickhouse-client (Debian's clickhouse-client package) must be installed");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// A marker unique to this process and call, to find queries in `system.query_log`.
fn marker(name: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("ids_{name}_{}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// (user, client port, interface) of every finished initial query on any node whose text holds
/// `marker`, once `expect` of them are logged (at most 10 s: a server writes its log a second
/// after a query at the latest).
fn logged(env: &Env, marker: &str, expect: usize) -> Vec<(String, u16, u8)> {
    let sql = format!(
        "SELECT user, port, interface FROM system.query_log WHERE type = 2 AND is_initial_query \
         AND query LIKE '%{marker}%' AND query NOT LIKE '%query_log%' FORMAT TSV"
    );
    let t = Instant::now();
    loop {
        let mut rows = Vec::new();
        for node in env.node_urls() {
            let (s, b) = post(&node, "SYSTEM FLUSH LOGS");
            assert_eq!(s, 200, "{b}");
            let (s, b) = post(&node, &sql);
            assert_eq!(s, 200, "{b}");
            for l in b.lines() {
                let f: Vec<&str> = l.split('\t').collect();
                rows.push((f[0].to_string(), f[1].parse().unwrap(), f[2].parse().unwrap()));
            }
        }
        if rows.len() >= expect || t.elapsed() > Duration::from_secs(10) {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn each_user_reaches_the_servers_as_its_own_clickhouse_user_over_both_protocols() {
    let (env, gw) = env();
    // The query finds itself in system.processes: its `user` is the login it runs as.
    let me =
        |m: &str| format!("SELECT user FROM system.processes WHERE query LIKE '%{m}%' AND query LIKE 'SELECT user%'");
    for (user, login) in [("default", "chstorm_writer"), ("viewer", "chstorm_viewer"), ("shared", "default")] {
        let m = marker("http");
        assert_eq!(as_user(gw, user, &me(&m), ""), (200, format!("{login}\n")), "{user} over HTTP");
        let m = marker("native");
        let (ok, out, err) = native(gw, user, &[], &me(&m));
        assert!(ok, "{user} over native: {err}");
        assert_eq!(out, format!("{login}\n"), "{user} over native");
    }
    // The servers' query log says the same, for HTTP (interface 2) and native (1).
    let m = marker("log");
    for user in ["default", "viewer"] {
        assert_eq!(as_user(gw, user, &format!("SELECT '{m}'"), "").0, 200);
        assert!(native(gw, user, &[], &format!("SELECT '{m}'")).0);
    }
    let mut seen: Vec<(String, u8)> = logged(env, &m, 4).into_iter().map(|(u, _, i)| (u, i)).collect();
    seen.sort();
    let want = [("chstorm_viewer", 1), ("chstorm_viewer", 2), ("chstorm_writer", 1), ("chstorm_writer", 2)];
    assert_eq!(seen, want.map(|(u, i)| (u.to_string(), i)));
    // What 18.16 shows every user, whatever its profile: every user's query texts, in
    // system.query_log (and system.processes). docs/GATEWAY.md says so.
    let viewer = env.cluster.server_login("viewer").unwrap();
    let auth = format!("{}:{}", viewer.user, viewer.password);
    let sql = format!("SELECT count() FROM system.query_log WHERE query LIKE '%{m}%' AND user = 'chstorm_writer'");
    let mut read = 0;
    for node in env.node_urls() {
        let (s, _, b) = curl(&["-u", &auth, "--data-binary", &sql, &node]);
        assert_eq!(s, 200, "{b}");
        read += b.trim().parse::<u32>().unwrap();
    }
    assert!(read >= 2, "18.16 lets a read-only user read another user's query texts: {read}");
}

#[test]
fn a_connection_opened_for_one_login_never_carries_another_logins_query() {
    let (env, gw) = env();
    let m = marker("pools");
    // Two users' queries at once, interleaved, over HTTP and native, 4 threads of each kind.
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (m, url) = (m.clone(), http(gw));
            let native_port = gw.native_addr.unwrap().port();
            std::thread::spawn(move || {
                let user = if t % 2 == 0 { "default" } else { "viewer" };
                for i in 0..15 {
                    let sql = format!("SELECT '{m}', {t}, {i}, sleep(0.01)");
                    if t < 4 {
                        let (s, _, b) = curl(&["-u", &format!("{user}:"), "--data-binary", &sql, &url]);
                        assert_eq!(s, 200, "{b}");
                    } else {
                        let port = native_port.to_string();
                        let out = Command::new("timeout")
                            .args(["60", "clickhouse-client", "--port", &port, "--user", user, "--query", &sql])
                            .output()
                            .unwrap();
                        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // A read slow to answer on a loaded machine may be hedged: its copy runs too, as the same
    // login, and is logged as well.
    let rows = logged(env, &m, 120);
    assert!(rows.len() >= 120, "{} of 120 logged", rows.len());
    // A client port is one of the gateway's connections to a node: it carried one login only.
    let mut by_conn: BTreeMap<(u16, u8), BTreeSet<String>> = BTreeMap::new();
    for (user, port, interface) in &rows {
        by_conn.entry((*port, *interface)).or_default().insert(user.clone());
    }
    for ((port, interface), users) in &by_conn {
        assert_eq!(users.len(), 1, "connection from port {port} (interface {interface}) carried {users:?}");
    }
    for interface in [1, 2] {
        let conns = by_conn.keys().filter(|(_, i)| *i == interface).count();
        let queries = rows.iter().filter(|r| r.2 == interface).count();
        assert!(conns < queries, "interface {interface}: {queries} queries on {conns} connections: pools were used");
    }
}

#[test]
fn the_server_refuses_what_the_profile_forbids_where_the_gateways_rule_is_off() {
    let (env, gw) = env();
    let before = post(&env.node_url(1, 1), "SELECT count() FROM system.tables WHERE database = 'default'");
    let node = env.node_url(1, 1);
    let url_fn = format!("SELECT * FROM url('{node}/?query=SELECT+1', TSV, 'x UInt8')");
    // `bypass` has no rules at the gateway; its login's profile has readonly=1.
    let cases: &[(&str, &str, &str)] = &[
        ("CREATE TABLE ids_bypass (x UInt8) ENGINE = Memory", "", "Cannot create table in readonly mode"),
        ("INSERT INTO items_local (shop_id) VALUES (1)", "", "readonly mode"),
        ("SYSTEM FLUSH LOGS", "", "Cannot execute query in readonly mode"),
        (&url_fn, "", "Table functions are forbidden in readonly mode"),
        (
            "SELECT count() FROM items_local SETTINGS max_rows_to_read = 1",
            "",
            "Cannot execute SET query in readonly mode",
        ),
        ("SELECT 1", "max_threads=1", "Cannot override setting (max_threads) in readonly mode"),
        ("SELECT 1", "readonly=0", "Cannot override setting (readonly) in readonly mode"),
    ];
    for (sql, params, want) in cases {
        let (s, b) = as_user(gw, "bypass", sql, params);
        assert_ne!(s, 200, "{sql} ?{params}: {b}");
        assert!(b.contains("Code: 164") && b.contains(want), "{sql} ?{params}: {b}");
    }
    // Over native, 18.16 ignores a readonly=1 user's settings (readonly=0 too) and refuses the
    // statement.
    let (ok, _, err) = native(gw, "bypass", &["--readonly=0"], "CREATE TABLE ids_bypass (x UInt8) ENGINE = Memory");
    assert!(!ok && err.contains("Code: 164"), "{err}");
    // The same statements as `default` (chstorm_writer) are the server's to run: the wall is
    // the profile's, not the gateway's.
    assert_eq!(as_user(gw, "default", "SELECT 1", "max_threads=1"), (200, "1\n".into()));
    assert_eq!(post(&env.node_url(1, 1), "SELECT count() FROM system.tables WHERE database = 'default'"), before);
}

/// The read `m` that `user` sends through `url` and abandons after 500 ms, as each node's query
/// log has it: (user, exception) of its rows that ended within 10 s (waits up to 10 s for one).
fn abandoned_read(env: &Env, url: &str, user: &str, m: &str) -> Vec<String> {
    let t = Instant::now();
    // A read that runs until cancelled (or the profile's 30 s), looking for a cancel between blocks.
    let sql = format!("SELECT count(), '{m}' FROM system.numbers WHERE number = 0 AND number = 1");
    let (s, _, _) = curl(&["-u", &format!("{user}:"), "--max-time", "0.5", "--data-binary", &sql, url]);
    assert_eq!(s, 0, "curl gave up");
    let sql = format!(
        "SELECT user, exception FROM system.query_log WHERE type = 4 AND query LIKE '%{m}%' \
         AND query NOT LIKE '%query_log%' AND query_duration_ms < 10000 FORMAT TSV"
    );
    loop {
        let mut found = Vec::new();
        for node in env.node_urls() {
            post(&node, "SYSTEM FLUSH LOGS");
            found.extend(post(&node, &sql).1.lines().map(str::to_string));
        }
        if !found.is_empty() || t.elapsed() > Duration::from_secs(10) {
            return found;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_abandoned_read_is_killed_on_the_server_as_the_login_that_runs_it() {
    let (env, gw) = env();
    // A read-only login may kill its own query only (18.16: `Readonly user ... attempts to
    // kill query created by ...`): the KILL of viewer's read goes as chstorm_viewer.
    let found = abandoned_read(env, &http(gw), "viewer", &marker("kill"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("chstorm_viewer\t") && found[0].contains("cancelled"), "{found:?}");
    // With the read-only login as the cluster's, a KILL sent as the cluster's login could not
    // stop chstorm_writer's query: it is stopped, so it went as chstorm_writer.
    let viewer = env.cluster.server_login("viewer").unwrap();
    let path = env.gateway_config(|t| {
        t.replace(
            "    user: default\n    password: \"\"\n",
            &format!("    user: {}\n    password: \"{}\"\n", viewer.user, viewer.password),
        )
    });
    let gw2 = env.rt.block_on(Gateway::start(path)).unwrap();
    let found = abandoned_read(env, &http(&gw2), "default", &marker("kill"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("chstorm_writer\t") && found[0].contains("cancelled"), "{found:?}");
}

#[test]
fn metrics_and_the_replicas_urls_are_for_users_allowed_them() {
    let (env, _) = env();
    // `default` may not here; `ops` (with a password) may.
    let path = env.gateway_config(|t| {
        format!(
            "{}  - name: ops\n    password_sha256: \"{SECRET_SHA256}\"\n    cluster: storm\n    metrics: true\n",
            t.replace("    metrics: true  # may read /metrics here\n", "")
        )
    });
    let gw = env.rt.block_on(Gateway::start(path)).unwrap();
    let url = http(&gw);
    let get = |args: &[&str], path: &str| {
        let mut all = args.to_vec();
        let target = format!("{url}{path}");
        all.push(&target);
        curl(&all)
    };
    // No credentials: ClickHouse's own 404, byte for byte as a node sends it.
    let (s, _, b) = get(&[], "/metrics");
    let (ns, _, nb) = curl(&[&format!("{}/metrics", env.node_url(1, 1))]);
    assert_eq!((s, b.as_str()), (ns, nb.as_str()));
    assert_eq!(s, 404);
    // A Prometheus scrape with basic auth.
    let (s, h, b) = get(&["-u", "ops:secret"], "/metrics");
    assert_eq!(s, 200, "{b}");
    assert!(h.contains("content-type: text/plain; version=0.0.4"), "{h}");
    assert!(b.contains("chstorm_gateway_requests_total"), "{b}");
    let (s, h, b) = get(&["-u", "ops:wrong"], "/metrics");
    // Worded as the cluster's release (18.16) words an exception.
    let wrong = "Code: 193, e.displayText() = DB::Exception: chstorm gateway: unknown user or wrong password\n";
    assert_eq!((s, b.as_str()), (401, wrong));
    assert!(h.contains("www-authenticate: basic realm=\"clickhouse server http api\""), "{h}");
    let (s, _, b) = get(&["-u", "viewer:"], "/metrics");
    assert_eq!(s, 403, "{b}");
    assert!(b.contains("user 'viewer' may not read the gateway's metrics"), "{b}");
    let (s, _, _) = get(&["-H", "X-ClickHouse-User: ops", "-H", "X-ClickHouse-Key: secret"], "/metrics");
    assert_eq!(s, 200, "ClickHouse's own credential headers");
    // /replicas_status answers everyone; the URLs only `ops`.
    let (s, _, b) = get(&[], "/replicas_status?verbose=1");
    assert_eq!(s, 200);
    assert_eq!(b.lines().count(), 4, "{b}");
    assert!(b.lines().all(|l| l.ends_with("up.")) && !b.contains("http"), "{b}");
    let (s, _, b) = get(&["-u", "ops:secret"], "/replicas_status?verbose=1");
    assert_eq!(s, 200);
    for node in env.node_urls() {
        assert!(b.contains(&node), "{node} in {b}");
    }
    let status = |args: &[&str]| {
        let (s, _, b) = get(args, "/replicas_status");
        (s, b)
    };
    assert_eq!(status(&[]), (200, "Ok.\n".to_string()), "Ok. for all");
    assert_eq!(status(&["-u", "ops:secret"]), (200, "Ok.\n".to_string()));
    // With metrics_listen, the client port has no /metrics for anyone.
    let path = env.gateway_config(|t| {
        format!(
            "{}  - name: ops\n    password_sha256: \"{SECRET_SHA256}\"\n    cluster: storm\n    metrics: true\n",
            t.replace("listen: 127.0.0.1:0\n", "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\n")
        )
    });
    let gw2 = env.rt.block_on(Gateway::start(path)).unwrap();
    let (s, _, _) = curl(&["-u", "ops:secret", &format!("http://{}/metrics", gw2.addr)]);
    assert_eq!(s, 404);
    let (s, _, _) = curl(&[&format!("http://{}/metrics", gw2.metrics_addr.unwrap())]);
    assert_eq!(s, 200, "metrics_listen serves whoever reaches it");
}
