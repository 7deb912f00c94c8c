//! A native client connection through the gateway behaves as a session on one server, against
//! a real 2x2 cluster of ClickHouse 18.16, driven by Python's clickhouse-driver (0.2.11, in
//! `target/test-clients/py`, installed by `scripts/install-deps`): the same calls straight to
//! a node and through the gateway give the same answers. The checks are in
//! `tests/py/native_session.py`: a bad database (Code 81, no replica marked down), ZSTD and LZ4
//! both ways, `SET` and `USE` over several queries, a temporary table over three statements and
//! the pinned-session gauge, a script's CREATE TABLE / INSERT / SELECT, two gateway users who
//! cannot see each other's temporary table, the client's own `readonly`, and old revisions
//! refused at once; then a pinned session whose replica is killed gets Code 210. Skips, saying why, when clickhouse-driver is not installed.

use chstorm_gateway::Gateway;
use chstorm_testenv::start_cluster;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn native_session_with_clickhouse_driver() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let py = root.join("../../target/test-clients/py/bin/python");
    let has_driver = Command::new(&py).args(["-c", "import clickhouse_driver, zstd, clickhouse_cityhash"]).output();
    if !has_driver.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIP clickhouse-driver: run scripts/install-deps to install it into target/test-clients/py");
        return;
    }
    let t = Instant::now();
    let mut env = start_cluster();
    let config =
        env.gateway_config(|t| format!("{t}  - name: u1\n    cluster: storm\n  - name: u2\n    cluster: storm\n"));
    let gw = env.rt.block_on(Gateway::start(config)).unwrap();
    let gp = gw.native_addr.expect("the generated config has listen_native").port();
    let dp = env.cluster.topology().node(1, 1).unwrap().tcp_port;
    eprintln!("cluster and gateway ready in {:?}", t.elapsed());
    let out = Command::new("timeout")
        .arg("300")
        .arg(&py)
        .arg(root.join("tests/py/native_session.py"))
        .args([dp.to_string(), gp.to_string(), gw.addr.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}checks done in {:?}", t.elapsed());
    assert!(out.status.success(), "{stdout}\n{stderr}");

    // Refusals inside one session leave it as it was: clickhouse-client goes on after an error
    // (--ignore-error) on the same connection. stdout and the error codes as direct.
    let scripts = [
        "SET readonly = 1; CREATE TABLE ro_x (x UInt8) ENGINE = Memory; SET max_block_size = 5; \
         SELECT name, value FROM system.settings WHERE name IN ('readonly', 'max_block_size') ORDER BY name",
        "USE system; USE no_such_db; SELECT currentDatabase(); SET no_such_setting = 1; SET max_block_size = 7; \
         SELECT currentDatabase(), value FROM system.settings WHERE name = 'max_block_size'",
        "SET readonly = 2; SET max_block_size = 9; SET readonly = 0; CREATE TABLE ro_y (x UInt8) ENGINE = Memory; \
         SELECT name, value FROM system.settings WHERE name IN ('readonly', 'max_block_size') ORDER BY name",
        "CREATE TEMPORARY TABLE tt (x UInt8); INSERT INTO tt SELECT 1; SELECT * FROM no_such_table; \
         INSERT INTO tt SELECT 2; SELECT sum(x) FROM tt",
    ];
    for script in scripts {
        let a = multiquery(dp, script);
        let b = multiquery(gp, script);
        eprintln!("{script}\n  direct {a:?}\n  gateway {b:?}");
        assert_eq!(a, b, "{script}");
    }

    // A pinned session whose replica dies gets the connection-lost error (Code 210) at once,
    // not a silent move to another replica.
    let script = "from clickhouse_driver import Client\n\
        from clickhouse_driver.errors import ServerException\n\
        import sys, time\n\
        c = Client('127.0.0.1', port=int(sys.argv[1]))\n\
        c.execute('CREATE TEMPORARY TABLE pinned_t (x UInt8)')\n\
        print(*[v for _, v in c.execute('SELECT macro, substitution FROM system.macros ORDER BY macro')], flush=True)\n\
        sys.stdin.readline()\n\
        t = time.monotonic()\n\
        try:\n    c.execute('SELECT count() FROM pinned_t'); print('answered')\n\
        except ServerException as e:\n    print(e.code, round(time.monotonic() - t, 1))\n";
    let mut child = Command::new("timeout")
        .arg("60")
        .arg(&py)
        .args(["-c", script, &gp.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The pinned server, by its macros (replica, shard: in macro order).
    let at = lines.next().unwrap().unwrap();
    let (r, s) = at.split_once(' ').unwrap();
    let (s, r): (usize, usize) = (s.parse().unwrap(), r.parse().unwrap());
    env.cluster.kill9(s, r);
    std::thread::sleep(Duration::from_millis(300));
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let answer = lines.next().unwrap().unwrap();
    eprintln!("pinned to replica {s}.{r}, killed: {answer}");
    let (code, secs) = answer.split_once(' ').unwrap_or((&answer, "0"));
    assert_eq!(code, "210", "{answer}");
    assert!(secs.parse::<f64>().unwrap() < 5.0, "{answer}");
    let _ = child.wait();
}

/// `clickhouse-client --multiquery --ignore-error` on `port`: (stdout, the error codes in stderr).
fn multiquery(port: u16, script: &str) -> (String, Vec<u32>) {
    let out = Command::new("timeout")
        .args(["60", "clickhouse-client", "--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--multiquery", "--ignore-error", "--query", script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let codes = stderr
        .match_indices("Code: ")
        .filter_map(|(at, _)| stderr[at + 6..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect();
    (String::from_utf8_lossy(&out.stdout).into_owned(), codes)
}
