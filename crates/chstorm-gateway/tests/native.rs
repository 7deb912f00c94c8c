//! The gateway's native port (`listen_native`, and over TLS `listen_native_secure`) against a
//! real 2x2 cluster of ClickHouse 18.16, driven by Debian's `clickhouse-client` and
//! `clickhouse-benchmark` and by chstorm's own native client (what `chstorm bench --url
//! clickhouse://` uses).
//!
//! One cluster serves every step of a test (starting one costs seconds of both cores), and the
//! tests take turns ([`TURN`]); each step says what it checks. The answers through the gateway are compared byte for byte with the same
//! client's answers straight from a node (through the Distributed table `items`), over
//! generated queries: reads that fan out, routed point lookups, formats, compressed and
//! uncompressed blocks, big results, and errors.

use chstorm_gateway::Gateway;
use chstorm_proto::native::NativeConn;
use chstorm_proto::stream::Connector;
use chstorm_proto::{Target, TlsOptions};
use chstorm_testenv::{post, start_cluster, Env};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The tests of this file take turns: each runs a 2x2 cluster, and two at once would only
/// measure the 2 cores' contention.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `echo -n secret | sha256sum`
const SECRET_SHA256: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

/// The generated gateway config plus a user with a password and a read-only user.
fn config(env: &Env) -> std::path::PathBuf {
    env.gateway_config(|t| {
        format!(
            "{t}  - name: pw\n    password_sha256: \"{SECRET_SHA256}\"\n    cluster: storm\n  - name: ro\n    cluster: storm\n    readonly: true\n"
        )
    })
}

/// The output of `clickhouse-client` (60 s at most): (success, stdout, stderr).
fn client(
    port: u16,
    user: &str,
    password: &str,
    extra: &[&str],
    query: &str,
    stdin: Option<&[u8]>,
) -> (bool, Vec<u8>, String) {
    let mut cmd = Command::new("timeout");
    cmd.args(["60", "clickhouse-client", "--host", "127.0.0.1", "--port", &port.to_string(), "--user", user]);
    if !password.is_empty() {
        cmd.args(["--password", password]);
    }
    cmd.args(extra).args(["--query", query]);
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("clickhouse-client (Debian's clickhouse-client package) must be installed");
    if let Some(data) = stdin {
        let mut si = child.stdin.take().unwrap();
        si.write_all(data).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), out.stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The ClickHouse error code in a client's stderr (`Code: N.`).
fn code(stderr: &str) -> Option<u32> {
    let at = stderr.find("Code: ")? + 6;
    stderr[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Generated reads: fan-out aggregates, routed lookups, every column type of `items`,
/// formats, LIMITs, and some that fail on the server.
fn corpus() -> Vec<String> {
    let mut rng = SmallRng::seed_from_u64(0x1515);
    let mut c = vec![
        "SELECT 1".to_string(),
        "SELECT count() FROM items FINAL".into(),
        "SELECT * FROM items FINAL WHERE shop_id = 42 ORDER BY item_id".into(),
        "SELECT * FROM items FINAL WHERE shop_id = 010 ORDER BY item_id FORMAT TSVWithNamesAndTypes".into(),
        "SELECT shop_id, count(), sum(price), max(created), min(updated), groupArray(ship_from) FROM items FINAL \
         GROUP BY shop_id ORDER BY shop_id LIMIT 20"
            .into(),
        "SELECT status, count() FROM items FINAL GROUP BY status WITH TOTALS ORDER BY status".into(),
        "SELECT tags, rating, stock FROM items FINAL WHERE shop_id IN (1, 2, 3) ORDER BY item_id, shop_id".into(),
        "SELECT number, toString(number) FROM system.numbers LIMIT 300000".into(),
        "SELECT toNullable(number), [number, number] FROM numbers(1000)".into(),
        "SELECT no_such_column FROM items".into(),
        "SELECT * FROM no_such_table".into(),
        "SELECT 1 +".into(),
        // Reads past 100 ms with small answers: their Progress goes to the client apart.
        "SELECT sleep(0.3) AS s, 1 AS one".into(),
        "SELECT count(), sum(sipHash64(number) % 7) FROM numbers(20000000)".into(),
    ];
    for _ in 0..60 {
        let shop = rng.gen_range(0..200u64);
        let q = match rng.gen_range(0..6) {
            0 => format!("SELECT item_id, title, price FROM items FINAL WHERE shop_id = {shop} ORDER BY item_id"),
            1 => format!("SELECT count(), sum(sold) FROM items FINAL WHERE shop_id = {shop}"),
            2 => format!(
                "SELECT * FROM items FINAL WHERE shop_id = {shop} AND item_id < {} ORDER BY item_id FORMAT CSVWithNames",
                rng.gen_range(1..500)
            ),
            3 => format!("SELECT brand, count() FROM items FINAL WHERE category = {} GROUP BY brand ORDER BY brand", shop % 500),
            4 => format!("SELECT item_id FROM items FINAL WHERE shop_id = {shop} OR shop_id = {} ORDER BY item_id", shop + 1),
            _ => format!("SELECT sum(number) FROM numbers({})", rng.gen_range(1..1_000_000)),
        };
        c.push(q);
    }
    c
}

fn native_conn(env: &Env, port: u16, user: &str) -> NativeConn {
    let target = Target::parse(&format!("clickhouse://{user}@127.0.0.1:{port}")).unwrap();
    let connector = Connector::new(&target, &TlsOptions::default(), Duration::from_secs(2)).unwrap();
    env.rt.block_on(NativeConn::connect(&connector, &target, Duration::from_secs(10))).unwrap()
}

#[test]
fn native_port_end_to_end() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let t = Instant::now();
    let env = start_cluster();
    let gw = env.rt.block_on(Gateway::start(config(&env))).unwrap();
    let gp = gw.native_addr.expect("the generated config has listen_native").port();
    let dp = env.cluster.topology().node(1, 1).unwrap().tcp_port;
    eprintln!("cluster, data and gateway ready in {:?}; gateway native port {gp}, direct {dp}", t.elapsed());

    // 1. Every generated read: the same bytes (or the same error code) through the gateway as
    //    straight from a node, with compression on (the client's default) and off.
    let queries = corpus();
    let mut failures = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let extra: &[&str] = if i % 2 == 0 { &[] } else { &["--compression", "0"] };
        let a = client(dp, "default", "", extra, q, None);
        let b = client(gp, "default", "", extra, q, None);
        let same = a.0 == b.0 && if a.0 { a.1 == b.1 } else { code(&a.2) == code(&b.2) && code(&a.2).is_some() };
        if !same {
            failures.push(format!(
                "{q}\n  direct:  ok {} {} bytes {:?}\n  gateway: ok {} {} bytes {:?}",
                a.0,
                a.1.len(),
                a.2.lines().next(),
                b.0,
                b.1.len(),
                b.2.lines().next()
            ));
        }
    }
    assert!(failures.is_empty(), "{} of {} differ:\n{}", failures.len(), queries.len(), failures.join("\n"));
    eprintln!("1. {} reads equal byte for byte ({:?})", queries.len(), t.elapsed());

    // 2. Routed lookups went to one shard: the gateway counted them as routed.
    let metrics = chstorm_testenv::curl(&[&format!("http://{}/metrics", gw.addr)]).2;
    let routed: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("chstorm_gateway_requests_total{") && l.contains("route=\"routed\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(routed >= 20.0, "routed native queries: {routed}\n{metrics}");
    eprintln!("2. {routed} native queries were routed to one shard");

    // 3. INSERT with data, compressed and not, into a Distributed table written synchronously
    //    over replicated local tables (the cluster has internal_replication: the Distributed
    //    table writes one replica of each shard); once every replica fetched, the rows are
    //    there, as the node sees them.
    let ddl = [
        "CREATE TABLE IF NOT EXISTS nat_local ON CLUSTER storm (k UInt64, s String) \
         ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/default.nat_local', '{replica}') ORDER BY k",
        "CREATE TABLE IF NOT EXISTS nat ON CLUSTER storm AS nat_local ENGINE = Distributed(storm, default, nat_local, k)",
    ];
    for q in ddl {
        let (s, b) = post(&env.node_url(1, 1), q);
        assert_eq!(s, 200, "{q}: {b}");
    }
    // Two batches of other keys: a replicated table drops a block identical to one it has.
    for (batch, extra) in
        [&["--insert_distributed_sync", "1"][..], &["--insert_distributed_sync", "1", "--compression", "0"][..]]
            .into_iter()
            .enumerate()
    {
        let data: String = (batch * 50_000..(batch + 1) * 50_000).map(|i| format!("{i}\tvalue {i}\n")).collect();
        let (ok, _, err) = client(gp, "default", "", extra, "INSERT INTO nat FORMAT TSV", Some(data.as_bytes()));
        assert!(ok, "insert: {err}");
    }
    for u in env.node_urls() {
        assert_eq!(post(&u, "SYSTEM SYNC REPLICA nat_local").0, 200);
    }
    let count = |port| client(port, "default", "", &[], "SELECT count(), sum(k) FROM nat", None).1;
    let through = count(gp);
    assert!(String::from_utf8_lossy(&through).starts_with("100000\t"), "{}", String::from_utf8_lossy(&through));
    assert_eq!(count(dp), through);
    eprintln!("3. INSERT ... FORMAT TSV of 2 x 50000 rows through the gateway");

    // 4. An exception mid-stream reaches the client after the rows before it.
    let q = "SELECT throwIf(number = 100000) FROM numbers(1000000)";
    let a = client(dp, "default", "", &[], q, None);
    let b = client(gp, "default", "", &[], q, None);
    assert!(!a.0 && !b.0);
    assert_eq!(code(&a.2), Some(395), "{}", a.2);
    assert_eq!(code(&b.2), Some(395), "{}", b.2);
    assert!(b.1.len() > 1000, "rows came before the exception: {} bytes", b.1.len());
    eprintln!("4. mid-stream exception: code 395 after {} bytes", b.1.len());

    // 5. A large result streams whole.
    let q = "SELECT number, toString(number), [number] FROM numbers(3000000)";
    let (a, b) = (client(dp, "default", "", &[], q, None), client(gp, "default", "", &[], q, None));
    assert!(a.0 && b.0, "{} / {}", a.2, b.2);
    assert_eq!(a.1.len(), b.1.len());
    assert!(a.1 == b.1, "3M rows differ");
    eprintln!("5. {} bytes of a large result equal", b.1.len());

    // 5b. Aggregate function states, a column type the gateway cannot delimit: streamed through
    //     as the node sends them (a small answer, one past the hold, compressed and not, and a
    //     session's next query after one), and no replica is marked down for them.
    let retries_before = metric(gw.addr, "chstorm_gateway_retries_total");
    let states = [
        "SELECT sumState(number) FROM numbers(10)",
        "SELECT uniqState(number), anyState(toString(number)) FROM numbers(1000)",
        "SELECT number % 1000 AS k, sumState(number), groupArrayState(number) FROM numbers(200000) GROUP BY k ORDER BY k",
        "SELECT sumState(number) FROM numbers(10); SELECT 'next'; SELECT uniqState(1); SELECT 2",
    ];
    for (i, q) in states.iter().enumerate() {
        let extra: &[&str] = if i % 2 == 0 { &["--multiquery"] } else { &["--multiquery", "--compression", "0"] };
        let (a, b) = (client(dp, "default", "", extra, q, None), client(gp, "default", "", extra, q, None));
        assert!(a.0 && b.0, "{q}: direct {} / gateway {}", a.2, b.2);
        assert!(a.1 == b.1, "{q}: {} bytes direct, {} through the gateway", a.1.len(), b.1.len());
    }
    let (s, _, body) = chstorm_testenv::curl(&[&format!("http://{}/replicas_status", gw.addr)]);
    assert_eq!(s, 200, "{body}");
    assert_eq!(metric(gw.addr, "chstorm_gateway_retries_total"), retries_before, "none was run again");
    assert_eq!(metric(gw.addr, "chstorm_gateway_replica_up"), 4.0, "no replica marked down");
    eprintln!("5b. {} reads of aggregate states streamed through, every replica up", states.len());

    // 5c. clickhouse-go v2 (native at the revision 18.16 speaks, and HTTP): the same rows or the
    //     same error code through the gateway as straight from a node.
    let chgo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-clients/chgo");
    if chgo.exists() {
        let dh = env.cluster.topology().node(1, 1).unwrap().http_url.trim_start_matches("http://").to_string();
        let go = |protocol: &str, addr: &str, sql: &str| {
            let out = Command::new("timeout")
                .arg("60")
                .arg(&chgo)
                .args(["-protocol", protocol, "-addr", addr, "-query", sql])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let (gn, gh) = (format!("127.0.0.1:{gp}"), gw.addr.to_string());
        let dn = format!("127.0.0.1:{dp}");
        for sql in [
            "SELECT number, toString(number), [number] FROM numbers(5)",
            "SELECT count() FROM items",
            "SELECT sum(item_id) FROM items WHERE shop_id = 7",
            "SELECT * FROM no_such_table",
        ] {
            for (protocol, direct, through) in [("native", &dn, &gn), ("http", &dh, &gh)] {
                let (a, b) = (go(protocol, direct, sql), go(protocol, through, sql));
                assert!(!a.is_empty() && a == b, "clickhouse-go {protocol} {sql}:\n direct {a}\n gateway {b}");
            }
        }
        eprintln!("5c. clickhouse-go native and HTTP: the same answers through the gateway");
    } else {
        eprintln!("5c. skipped: clickhouse-go's test client is not built (scripts/install-deps builds it)");
    }

    // 6. Wrong password and unknown user refused as 18.16 refuses them; the right one works.
    let (ok, _, direct) = client(dp, "default", "wrong", &[], "SELECT 1", None);
    assert!(!ok, "{direct}");
    let (ok, _, err) = client(gp, "pw", "wrong", &[], "SELECT 1", None);
    assert!(!ok && code(&err) == Some(193) && code(&err) == code(&direct), "gateway: {err}\ndirect: {direct}");
    let (ok, _, err) = client(gp, "nobody", "", &[], "SELECT 1", None);
    assert!(!ok && code(&err) == Some(193), "{err}");
    let (ok, out, err) = client(gp, "pw", "secret", &[], "SELECT 'in'", None);
    assert!(ok && out == b"in\n", "{err}");
    eprintln!("6. wrong password refused (193), right password served");

    // 7. A read-only user may read but not write, and may not use a table function.
    let (ok, out, err) = client(gp, "ro", "", &[], "SELECT count() FROM nat", None);
    assert!(ok && out == b"100000\n", "{err}");
    let (ok, _, err) = client(gp, "ro", "", &[], "INSERT INTO nat FORMAT TSV", Some(b"1\tx\n"));
    assert!(!ok && code(&err) == Some(164) && err.contains("read-only"), "{err}");
    let (ok, _, err) = client(gp, "ro", "", &[], "SELECT * FROM numbers(3)", None);
    assert!(!ok && err.contains("table function"), "{err}");
    // The read-only query really ran with readonly = 1 on the server.
    let (ok, out, err) = client(gp, "ro", "", &[], "SELECT value FROM system.settings WHERE name = 'readonly'", None);
    assert!(ok && out == b"1\n", "{err}");
    assert_eq!(count(dp), through, "nothing more was written");
    eprintln!("7. read-only user: reads served, INSERT refused (164), readonly = 1 on the server");

    // 8. Settings from the client arrive as settings; SET is kept for the session.
    let (ok, out, err) = client(
        gp,
        "default",
        "",
        &["--max_block_size", "4321"],
        "SELECT value FROM system.settings WHERE name = 'max_block_size'",
        None,
    );
    assert!(ok && out == b"4321\n", "{err}");
    let q = "SET max_block_size = 77; SELECT value FROM system.settings WHERE name = 'max_block_size'";
    let (ok, out, err) = client(gp, "default", "", &["--multiquery"], q, None);
    assert!(ok && out == b"77\n", "{err}");
    // With send_logs_level the server sends Log packets (never compressed) among the answer's;
    // they pass (18.16's clickhouse-client drops them with --query, so only the answer shows).
    let logs = ["--send_logs_level", "trace"];
    let q = "SELECT value FROM system.settings WHERE name = 'send_logs_level'";
    let (ok, out, err) = client(gp, "default", "", &logs, q, None);
    assert!(ok && out == b"trace\n", "{err}");
    let q = "SELECT count(), sum(price) FROM items FINAL WHERE shop_id = 3";
    let (ok, out, err) = client(gp, "default", "", &logs, q, None);
    assert!(ok && out == client(dp, "default", "", &logs, q, None).1, "{err}");
    eprintln!("8. client settings passed as settings; server logs relayed; SET kept");

    // 9. chstorm's own native client (chstorm bench --url clickhouse://): queries, rows, ping.
    let mut c = native_conn(&env, gp, "default");
    env.rt.block_on(c.ping(Duration::from_secs(5))).unwrap();
    for i in 0..200 {
        let s = env.rt.block_on(c.query(&format!("nq-{i}"), "SELECT 1", Duration::from_secs(10))).unwrap();
        assert_eq!(s.rows, 1);
    }
    let rows = env.rt.block_on(c.query_rows("", "SELECT count() FROM items FINAL", Duration::from_secs(10))).unwrap();
    assert_eq!(rows, vec![vec![chstorm_testenv::ROWS.to_string()]]);
    let e = env.rt.block_on(c.query("", "SELECT 1 +", Duration::from_secs(10))).unwrap_err();
    assert!(e.to_string().contains("62"), "{e}");
    env.rt.block_on(c.query("", "SELECT 2", Duration::from_secs(10))).unwrap();
    eprintln!("9. chstorm's native client: 200 queries, rows, an error, and on");

    // 10. clickhouse-benchmark: 200 queries at concurrency 4, no error; it exits as it does
    //     straight on a node.
    let bench = |port: u16| {
        let out = Command::new("timeout")
            .args([
                "120",
                "clickhouse-benchmark",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "-c",
                "4",
                "-i",
                "200",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut ch| {
                ch.stdin.take().unwrap().write_all(b"SELECT count() FROM items WHERE shop_id = 7\nSELECT 1\n")?;
                ch.wait_with_output()
            })
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.code(), text)
    };
    let (direct_status, direct_text) = bench(dp);
    let (status, text) = bench(gp);
    assert_eq!(status, direct_status, "gateway:\n{text}\ndirect:\n{direct_text}");
    assert!(text.contains("Queries executed: 200 "), "{text}");
    assert!(!text.contains("Exception") && !text.contains("Code:"), "{text}");
    let qps = |t: &str| t.split("QPS: ").nth(1).and_then(|r| r.split(',').next()).unwrap_or("?").to_string();
    eprintln!(
        "10. clickhouse-benchmark -c 4 -i 200: no error, exit {status:?} as direct; QPS {} (direct {})",
        qps(&text),
        qps(&direct_text)
    );

    // 11. A client killed mid-query (SIGINT) leaves no query running on any node.
    let mut child = Command::new("clickhouse-client")
        .args(["--host", "127.0.0.1", "--port", &gp.to_string(), "--query_id", "nat-cancel-1"])
        .args(["--query", "SELECT sleep(1) FROM numbers(30) SETTINGS max_block_size = 1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = |qid: &str| {
        env.node_urls()
            .iter()
            .map(|u| post(u, &format!("SELECT count() FROM system.processes WHERE query_id = 'default:{qid}'")).1)
            .map(|b| b.trim().parse::<u64>().unwrap_or(0))
            .sum::<u64>()
    };
    let t0 = Instant::now();
    while running("nat-cancel-1") == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the query never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t1 = Instant::now();
    while running("nat-cancel-1") > 0 {
        assert!(t1.elapsed() < Duration::from_secs(5), "the query still runs 5 s after the client's SIGINT");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("11. SIGINT: the query left system.processes in {:?}", t1.elapsed());

    // 12. The same with the client killed outright (no Cancel packet): KILL QUERY.
    let mut child = Command::new("clickhouse-client")
        .args(["--host", "127.0.0.1", "--port", &gp.to_string(), "--query_id", "nat-cancel-2"])
        .args(["--query", "SELECT sleep(1) FROM numbers(30) SETTINGS max_block_size = 1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while running("nat-cancel-2") == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the query never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    let _ = child.wait();
    let t1 = Instant::now();
    while running("nat-cancel-2") > 0 {
        assert!(t1.elapsed() < Duration::from_secs(6), "the query still runs 6 s after the client died");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("12. SIGKILL: the query left system.processes in {:?}", t1.elapsed());
    gw.stop();

    // 13. Failover: a gateway whose first replica of each shard refuses native connections
    //     (a closed port) moves every read there to the other replica before answering; the
    //     answers are the direct ones and the retries are counted.
    let cfg = env.gateway_config(|t| {
        let mut out = String::new();
        for l in t.lines() {
            match l.trim_start().strip_prefix("native: [") {
                Some(rest) => {
                    let second = rest.split_once(", ").map(|(_, b)| b).unwrap_or(rest);
                    out.push_str(&format!("        native: [127.0.0.1:1, {second}\n"));
                }
                None => {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        out
    });
    let gw2 = env.rt.block_on(Gateway::start(cfg)).unwrap();
    let gp2 = gw2.native_addr.unwrap().port();
    for shop in 0..30 {
        let q = format!("SELECT count(), sum(item_id) FROM items FINAL WHERE shop_id = {shop}");
        let (a, b) = (client(dp, "default", "", &[], &q, None), client(gp2, "default", "", &[], &q, None));
        assert!(b.0 && a.1 == b.1, "{q}: {}", b.2);
    }
    let metrics = chstorm_testenv::curl(&[&format!("http://{}/metrics", gw2.addr)]).2;
    let retries: f64 = metrics
        .lines()
        .find(|l| l.starts_with("chstorm_gateway_retries_total "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0);
    assert!(retries >= 1.0, "no retry counted:\n{metrics}");
    eprintln!("13. 30 reads with a refusing replica per shard: all answered, {retries} retries");
    gw2.stop();

    // 14. Failover: a replica killed (-9) while the gateway holds pooled connections to it;
    //     every read of its shard still gets the direct answer (a stale pooled connection
    //     breaks before any answer packet, a new one is refused: both move to the other
    //     replica). Last, as it leaves the cluster one node short.
    let cfg = config(&env);
    let router = chstorm_gateway::Config::load(&cfg).unwrap().clusters["storm"].routing.clone().unwrap();
    let gw3 = env.rt.block_on(Gateway::start(cfg)).unwrap();
    let gp3 = gw3.native_addr.unwrap().port();
    let shard2: Vec<u64> = (0..200u64)
        .filter(|v| router.shard_of(&chstorm_sql::route::KeyValue::UInt(*v)).unwrap() == 1)
        .take(30)
        .collect();
    let q = |shop: u64| format!("SELECT count(), sum(item_id) FROM items FINAL WHERE shop_id = {shop}");
    let mut conns: Vec<NativeConn> = (0..4).map(|_| native_conn(&env, gp3, "default")).collect();
    for (i, shop) in shard2.iter().enumerate() {
        // Several connections at once, so the pool keeps several connections to each replica.
        env.rt.block_on(conns[i % 4].query("", &q(*shop), Duration::from_secs(10))).unwrap();
    }
    let victim = env.cluster.topology().node(2, 2).unwrap().pid;
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(200));
    for shop in &shard2 {
        let (a, b) =
            (client(dp, "default", "", &[], &q(*shop), None), client(gp3, "default", "", &[], &q(*shop), None));
        assert!(b.0 && a.1 == b.1, "{}: {}", q(*shop), b.2);
    }
    eprintln!("14. s2r2 killed: {} reads of shard 2 all answered as direct", shard2.len());
    gw3.stop();
    eprintln!("all steps in {:?}", t.elapsed());
}

/// A self-signed certificate for `127.0.0.1` and `localhost` in `dir`: (cert.pem, key.pem).
fn self_signed(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let (cert, key) = (dir.join("native-tls.crt"), dir.join("native-tls.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    (cert, key)
}

/// A `clickhouse-client` config (`--config-file`) whose TLS client trusts `ca` only, and
/// checks the certificate (Poco's `relaxed`: the server's certificate must verify).
fn client_tls_config(dir: &std::path::Path, ca: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("client-tls.xml");
    std::fs::write(
        &path,
        format!(
            "<config><openSSL><client><loadDefaultCAFile>false</loadDefaultCAFile><caConfig>{}</caConfig>\
             <verificationMode>relaxed</verificationMode><invalidCertificateHandler><name>RejectCertificateHandler</name>\
             </invalidCertificateHandler></client></openSSL></config>",
            ca.display()
        ),
    )
    .unwrap();
    path
}

/// Queries `system.processes` on every node: how many run `query_id`.
fn running(env: &Env, query_id: &str) -> u64 {
    env.node_urls()
        .iter()
        .map(|u| post(u, &format!("SELECT count() FROM system.processes WHERE query_id = 'default:{query_id}'")).1)
        .map(|b| b.trim().parse::<u64>().unwrap_or(0))
        .sum()
}

/// Waits (10 s at most) until `query_id` runs on some node.
fn wait_running(env: &Env, query_id: &str) {
    let t0 = Instant::now();
    while running(env, query_id) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "{query_id} never started");
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// A query that streams `blocks` one-row blocks, one each 0.2 s.
fn slow_query(blocks: u32) -> String {
    format!("SELECT number, sleep(0.2) FROM numbers({blocks}) SETTINGS max_block_size = 1")
}

/// The whole answer of [`slow_query`] in clickhouse-client's TSV.
fn slow_answer(blocks: u32) -> String {
    (0..blocks).map(|i| format!("{i}\t0\n")).collect()
}

/// `clickhouse-client` running `query` on `port` as `query_id`, in the background.
fn slow_client(port: u16, query_id: &str, extra: &[&str], query: &str) -> std::process::Child {
    Command::new("timeout")
        .args(["60", "clickhouse-client", "--host", "127.0.0.1", "--port", &port.to_string(), "--query_id", query_id])
        .args(extra)
        .args(["--query", query])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The answer of a finished [`slow_client`]: (success, stdout, stderr).
fn finished(child: std::process::Child) -> (bool, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The sum of a metric's samples on a gateway's `/metrics` (0 when nothing answers).
fn metric(http: std::net::SocketAddr, name: &str) -> f64 {
    chstorm_testenv::curl(&[&format!("http://{http}/metrics")])
        .2
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn native_tls_and_graceful_stop() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let t = Instant::now();
    let env = start_cluster();
    let dp = env.cluster.topology().node(1, 1).unwrap().tcp_port;

    // 1. listen_native_secure: clickhouse-client --secure through the gateway, trusting the
    //    gateway's self-signed certificate: the same bytes as the plain client straight from a
    //    node, compressed and not, a large result and an error included.
    let (cert, key) = self_signed(env.dir.path());
    let cfg = env.gateway_config(|t| {
        t.replace(
            "listen_native: 127.0.0.1:0",
            &format!(
                "listen_native: 127.0.0.1:0\nlisten_native_secure: 127.0.0.1:0\ntls:\n  cert: {}\n  key: {}",
                cert.display(),
                key.display()
            ),
        )
    });
    let gw = env.rt.block_on(Gateway::start(cfg)).unwrap();
    let sp = gw.native_secure_addr.expect("listen_native_secure is set").port();
    let client_cfg = client_tls_config(env.dir.path(), &cert);
    let client_cfg = client_cfg.to_str().unwrap();
    let secure = ["--secure", "--config-file", client_cfg];
    let queries = [
        "SELECT 1",
        "SELECT * FROM items FINAL WHERE shop_id = 42 ORDER BY item_id",
        "SELECT status, count() FROM items FINAL GROUP BY status WITH TOTALS ORDER BY status",
        "SELECT number, toString(number), [number] FROM numbers(1000000)",
        "SELECT throwIf(number = 100000) FROM numbers(1000000)",
        "SELECT * FROM no_such_table",
    ];
    for (i, q) in queries.iter().enumerate() {
        let plain: &[&str] = if i % 2 == 0 { &[] } else { &["--compression", "0"] };
        let over_tls: Vec<&str> = secure.iter().chain(plain).copied().collect();
        let a = client(dp, "default", "", plain, q, None);
        let b = client(sp, "default", "", &over_tls, q, None);
        assert_eq!(a.0, b.0, "{q}\ndirect: {}\nthrough TLS: {}", a.2, b.2);
        if a.0 {
            assert!(a.1 == b.1, "{q}: {} bytes direct, {} through TLS", a.1.len(), b.1.len());
        } else {
            assert_eq!(code(&a.2), code(&b.2), "{q}\ndirect: {}\nthrough TLS: {}", a.2, b.2);
            assert!(code(&b.2).is_some(), "{}", b.2);
        }
    }
    let (ok, _, err) =
        client(sp, "default", "", &secure, "INSERT INTO items_local SELECT * FROM items_local LIMIT 0", None);
    assert!(ok, "{err}");
    eprintln!("1. clickhouse-client --secure: {} queries as direct ({:?})", queries.len(), t.elapsed());

    // 2. The TLS is real: a client that does not trust the certificate (Debian's default client
    //    config) is refused, and so is a plain client on the TLS port; neither hangs.
    let (ok, _, err) = client(sp, "default", "", &["--secure"], "SELECT 1", None);
    assert!(!ok && !err.is_empty(), "an untrusted certificate was accepted");
    let (ok, _, err2) = client(sp, "default", "", &[], "SELECT 1", None);
    assert!(!ok, "a plain client on the TLS port got an answer");
    eprintln!(
        "2. untrusted certificate refused ({}); plain client on the TLS port refused ({})",
        err.lines().next().unwrap_or(""),
        err2.lines().next().unwrap_or("")
    );

    // 3. chstorm's own native client over TLS (clickhouses://), with the certificate as its CA.
    let target = Target::parse(&format!("clickhouses://default@127.0.0.1:{sp}")).unwrap();
    let tls = TlsOptions { insecure: false, ca_file: Some(cert.clone()) };
    let connector = Connector::new(&target, &tls, Duration::from_secs(2)).unwrap();
    let mut c = env.rt.block_on(NativeConn::connect(&connector, &target, Duration::from_secs(10))).unwrap();
    env.rt.block_on(c.ping(Duration::from_secs(5))).unwrap();
    for i in 0..100 {
        let s = env.rt.block_on(c.query(&format!("tls-{i}"), "SELECT 1", Duration::from_secs(10))).unwrap();
        assert_eq!(s.rows, 1);
    }
    let s =
        env.rt.block_on(c.query("", "SELECT toString(number) FROM numbers(200000)", Duration::from_secs(20))).unwrap();
    assert_eq!(s.rows, 200_000);
    let rows = env.rt.block_on(c.query_rows("", "SELECT count() FROM items FINAL", Duration::from_secs(10))).unwrap();
    assert_eq!(rows, vec![vec![chstorm_testenv::ROWS.to_string()]]);
    eprintln!("3. chstorm's native client over TLS: ping, 100 queries, 200000 rows, a count");

    // 4. A graceful stop of that gateway: a query running over TLS finishes with its whole
    //    answer; the idle TLS session (the chstorm client's) is closed after the drain's grace.
    let slow = slow_client(sp, "nat-drain-tls", &secure, &slow_query(10));
    wait_running(&env, "nat-drain-tls");
    // The running and the idle session are counted: the stop waits for them.
    assert!(gw.open_connections() >= 2, "native sessions open: {}", gw.open_connections());
    let t0 = Instant::now();
    let cut_off = env.rt.block_on(gw.shutdown());
    let stopped_in = t0.elapsed();
    assert_eq!((cut_off, gw.open_connections()), (0, 0), "every native session drained");
    let (ok, out, err) = finished(slow);
    assert!(ok && out == slow_answer(10), "the query over TLS was cut: {out:?} {err}");
    assert!(env.rt.block_on(c.query("", "SELECT 1", Duration::from_secs(5))).is_err(), "the idle session is closed");
    eprintln!("4. TLS drain: the running query answered whole; stopped in {stopped_in:?}");

    // 5. The restart of a gateway with reuse_port: a second instance starts on the same ports
    //    while the first runs a query; the first drains: its query answers whole, its idle
    //    session closes after the grace, and new connections go to the second instance.
    // The first takes free ports itself (a port picked beforehand and let go can be taken by a
    // connection's source port before the bind); the second is given the first's.
    let first = env
        .rt
        .block_on(Gateway::start(
            env.gateway_config(|t| t.replace("listen: 127.0.0.1:0\n", "listen: 127.0.0.1:0\nreuse_port: true\n")),
        ))
        .unwrap();
    let (hp, np) = (first.addr.port(), first.native_addr.expect("listen_native").port());
    let cfg = env.gateway_config(|t| {
        t.replace("listen: 127.0.0.1:0\n", &format!("listen: 127.0.0.1:{hp}\nreuse_port: true\n"))
            .replace("listen_native: 127.0.0.1:0", &format!("listen_native: 127.0.0.1:{np}"))
    });
    let mut idle = native_conn(&env, np, "default");
    env.rt.block_on(idle.query("", "SELECT 1", Duration::from_secs(5))).unwrap();
    // Two queries on one connection: the second comes after the first gateway closed the
    // session (it was draining), and clickhouse-client's Ping before it finds that out and
    // reconnects, to the second gateway.
    let two = format!("{}; SELECT 'after'", slow_query(15));
    let slow = slow_client(np, "nat-drain-1", &["--multiquery"], &two);
    wait_running(&env, "nat-drain-1");
    let second = env.rt.block_on(Gateway::start(cfg)).unwrap();
    assert!(first.open_connections() >= 2, "native sessions open: {}", first.open_connections());
    let t1 = Instant::now();
    let stopping = env.rt.spawn(async move { first.shutdown().await });
    // While the first drains (its query has about 3 s to go), new connections reach the second,
    // and a Ping on the first's idle session closes it (a client reconnects) instead of a Pong.
    std::thread::sleep(Duration::from_millis(200));
    assert!(env.rt.block_on(idle.ping(Duration::from_secs(5))).is_err(), "a Ping while draining closes");
    let (ok, out, err) = client(np, "default", "", &[], "SELECT 'new'", None);
    assert!(ok && out == b"new\n", "a new connection during the drain: {err}");
    for _ in 0..4 {
        let mut c = native_conn(&env, np, "default");
        assert_eq!(env.rt.block_on(c.query("", "SELECT 1", Duration::from_secs(5))).unwrap().rows, 1);
    }
    assert!(running(&env, "nat-drain-1") > 0, "the checks ran while the first gateway drained");
    let cut_off = env.rt.block_on(stopping).unwrap();
    let stopped_in = t1.elapsed();
    assert_eq!(cut_off, 0, "every native session drained (the idle one closed after the grace)");
    let (ok, out, err) = finished(slow);
    assert!(ok && out == slow_answer(15) + "after\n", "the restart cut a query: {out:?} {err}");
    // The second instance answered the new connections (the first's listeners are closed).
    let served = metric(second.addr, "chstorm_gateway_requests_total");
    assert!(served >= 6.0, "the second gateway served {served} queries");
    eprintln!(
        "5. restart with reuse_port: query answered whole, the client's next query and 5 new connections \
         served by the second ({served} queries); first stopped in {stopped_in:?}"
    );

    // 6. Without a second instance, the native listener closes at once: new connections are
    //    refused while the running query still answers whole.
    let slow = slow_client(np, "nat-drain-2", &[], &slow_query(10));
    wait_running(&env, "nat-drain-2");
    let stopping = env.rt.spawn(async move { second.shutdown().await });
    let t2 = Instant::now();
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", np)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            _ => {
                assert!(t2.elapsed() < Duration::from_secs(1), "the native port still accepts 1 s into the stop");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let refused_in = t2.elapsed();
    assert!(running(&env, "nat-drain-2") > 0, "refused while the query still ran");
    assert_eq!(env.rt.block_on(stopping).unwrap(), 0);
    let (ok, out, err) = finished(slow);
    assert!(ok && out == slow_answer(10), "the query was cut by the stop: {out:?} {err}");
    eprintln!("6. stop: new native connections refused after {refused_in:?}, the running query answered whole");
    eprintln!("all steps in {:?}", t.elapsed());
}
