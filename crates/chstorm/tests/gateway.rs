//! The gateway against a real 2x2 cluster: compatibility, routing, auth, overload, KILL QUERY,
//! config reload.

use chstorm_testenv::{curl, post, start_shared_cluster, Env, ROWS};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A gateway on the env's cluster with `edit` applied to the generated config: (gateway, url).
fn gateway_with(env: &Env, edit: impl Fn(String) -> String) -> (chstorm_gateway::Gateway, String) {
    let gw = env.rt.block_on(chstorm_gateway::Gateway::start(env.gateway_config(edit))).unwrap();
    let url = format!("http://{}", gw.addr);
    (gw, url)
}

fn env() -> &'static (Env, String) {
    static ENV: OnceLock<(Env, String)> = OnceLock::new();
    ENV.get_or_init(|| {
        let env = start_shared_cluster();
        let (gw, url) = gateway_with(&env, |t| t);
        std::mem::forget(gw); // serves for the whole test process
        (env, url)
    })
}

#[test]
fn results_through_the_gateway_equal_direct_results_in_every_format() {
    let (env, gw) = env();
    let direct = env.node_url(1, 1);
    for fmt in ["TabSeparated", "JSONEachRow", "CSVWithNames", "JSON", "Pretty"] {
        let q = format!("SELECT shop_id, count() AS c, sum(stock) FROM items FINAL GROUP BY shop_id ORDER BY c DESC, shop_id LIMIT 20 FORMAT {fmt}");
        let (s1, a) = post(gw, &q);
        let (s2, b) = post(&direct, &q);
        assert_eq!((s1, s2), (200, 200), "{fmt}: {a}");
        // JSON carries timings; compare the data part.
        let strip = |s: &str| s.split("\"statistics\"").next().unwrap_or(s).to_string();
        assert_eq!(strip(&a), strip(&b), "{fmt}");
    }
    // GET with the query in the URL, default_format, database, a query_id, settings as params.
    let (s, h, body) = curl(&[&format!("{gw}/?query=SELECT%20count()%20FROM%20items%20FINAL&default_format=JSONEachRow&database=default&query_id=gw-test-1&max_threads=1")]);
    assert_eq!(s, 200, "{body}");
    assert_eq!(body.trim(), format!("{{\"count()\":\"{ROWS}\"}}"));
    assert!(h.contains("x-clickhouse-query-id: gw-test-1"), "{h}");
    // X-ClickHouse-User/Key headers and basic auth both authenticate.
    let (s, _, _) =
        curl(&["-H", "X-ClickHouse-User: default", "-H", "X-ClickHouse-Key: ", "--data-binary", "SELECT 1", gw]);
    assert_eq!(s, 200);
    let (s, _, _) = curl(&["-u", "default:", "--data-binary", "SELECT 1", gw]);
    assert_eq!(s, 200);
    // Compressed responses pass through.
    let (s, h, _) = curl(&[
        "-H",
        "Accept-Encoding: gzip",
        &format!("{gw}/?enable_http_compression=1&query=SELECT%20number%20FROM%20numbers(100000)"),
    ]);
    assert_eq!(s, 200);
    assert!(h.contains("content-encoding: gzip"), "{h}");
    // The gateway answers /ping itself.
    let (s, h, b) = curl(&[&format!("{gw}/ping")]);
    assert_eq!((s, b.as_str()), (200, "Ok.\n"));
    assert!(!h.contains("x-chstorm-replica"));
}

#[test]
fn routed_queries_equal_distributed_results_on_thousands_of_keys() {
    let (env, gw) = env();
    let direct = env.node_url(2, 2);
    let shops: Vec<u64> = post(&direct, "SELECT DISTINCT shop_id FROM items ORDER BY shop_id")
        .1
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(shops.len() > 100);
    let mut client_gw = chstorm_data::SqlClient::new(gw, &Default::default()).unwrap();
    let mut client_direct = chstorm_data::SqlClient::new(&direct, &Default::default()).unwrap();
    let mut checked = 0;
    // 2,000 keys: existing shops (round robin) and shops that do not exist.
    for i in 0..2000u64 {
        let shop = if i % 4 == 3 { 10_000_000 + i } else { shops[(i as usize * 7919) % shops.len()] };
        let q = format!("SELECT count(), sum(item_id), max(version) FROM items FINAL WHERE shop_id = {shop}");
        let a = client_gw.query(&q).unwrap();
        let b = client_direct.query(&q).unwrap();
        assert_eq!(a, b, "shop {shop}");
        checked += 1;
    }
    assert_eq!(checked, 2000);
    // Every one of them was routed to a single shard, and the rewritten query names items_local.
    let (_, h, body) =
        curl(&["--data-binary", &format!("SELECT count() FROM items FINAL WHERE shop_id = {}", shops[0]), gw]);
    assert!(h.contains("x-chstorm-route: routed"), "{h}");
    assert!(body.trim().parse::<u64>().unwrap() > 0);
    let metrics = curl(&[&format!("{gw}/metrics")]).2;
    let routed: u64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("chstorm_gateway_requests_total{")
                && l.contains("route=\"routed\"")
                && l.contains("status=\"200\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(routed >= 2000, "routed {routed}\n{metrics}");
    // The shard key from the URL parameter and the header route the same way.
    let q = "SELECT count() FROM items FINAL";
    let (_, h, b1) = curl(&["--data-binary", q, &format!("{gw}/?shard_key={}", shops[1])]);
    assert!(h.contains("x-chstorm-route: routed"));
    let (_, _, b2) = curl(&["-H", &format!("X-Chstorm-Shard-Key: {}", shops[1]), "--data-binary", q, gw]);
    assert_eq!(b1, b2);
    let expect = post(
        &direct,
        &format!(
            "SELECT count() FROM items FINAL WHERE cityHash64(shop_id) % 2 = cityHash64(toUInt64({})) % 2",
            shops[1]
        ),
    )
    .1;
    assert_eq!(b1, expect, "a routed query sees exactly its shard's rows");
}

#[test]
fn auth_networks_settings_and_readonly_are_enforced() {
    let (env, _) = env();
    let hash = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"; // sha256("secret")
    let (_gw, url) = gateway_with(env, |t| {
        t.replace(
            "users:\n",
            &format!("users:\n  - name: ro\n    password_sha256: \"{hash}\"\n    cluster: storm\n    readonly: true\n    allowed_settings: [max_threads]\n  - name: far\n    cluster: storm\n    networks: [10.0.0.0/8]\n"),
        )
    });
    let (s, _, b) = curl(&["-u", "ro:wrong", "--data-binary", "SELECT 1", &url]);
    assert_eq!(s, 401, "{b}");
    assert_eq!(b.lines().count(), 1);
    let (s, _, b) = curl(&["-u", "nobody:x", "--data-binary", "SELECT 1", &url]);
    assert_eq!(s, 401, "{b}");
    let (s, _, b) = curl(&["-u", "far:", "--data-binary", "SELECT 1", &url]);
    assert_eq!(s, 403, "{b}");
    assert!(b.contains("may not connect from 127.0.0.1"), "{b}");
    let (s, _, b) = curl(&["-u", "ro:secret", "--data-binary", "SELECT 1", &format!("{url}/?max_memory_usage=1000")]);
    assert_eq!(s, 403, "{b}");
    assert!(b.contains("setting 'max_memory_usage' is not allowed"), "{b}");
    let (s, _, b) = curl(&["-u", "ro:secret", "--data-binary", "CREATE TABLE t_ro (x UInt8) ENGINE = Memory", &url]);
    assert_eq!(s, 403, "{b}");
    assert!(b.contains("read-only"), "{b}");
    let (s, _, b) = curl(&[
        "-u",
        "ro:secret",
        "--data-binary",
        "SELECT value FROM system.settings WHERE name = 'max_threads'",
        &format!("{url}/?max_threads=1"),
    ]);
    assert_eq!((s, b.trim()), (200, "1"), "an allowed setting passes");
    // The backend enforces read-only too (readonly=1, sent last so the gateway's own settings
    // before it still apply), for anything the classifier let through.
    let (s, _, b) =
        curl(&["-u", "ro:secret", "--data-binary", "SELECT value FROM system.settings WHERE name = 'readonly'", &url]);
    assert_eq!((s, b.trim()), (200, "1"));
}

#[test]
fn overload_is_rejected_fast_and_accepted_queries_keep_their_latency() {
    let (env, _) = env();
    let (_gw, url) = gateway_with(env, |t| {
        let mut out = String::new();
        for l in t.lines() {
            let l = if l.trim_start().starts_with("max_concurrency:") && l.starts_with("    ") {
                "    max_concurrency: 2".to_string()
            } else if l.trim_start().starts_with("queue_size:") && l.starts_with("    ") {
                "    queue_size: 2".to_string()
            } else if l.trim_start().starts_with("queue_max_wait:") && l.starts_with("    ") {
                "    queue_max_wait: 50ms".to_string()
            } else {
                l.to_string()
            };
            out.push_str(&l);
            out.push('\n');
        }
        out
    });
    // 24 concurrent 300 ms queries against a user limit of 2 (+2 waiting for at most 50 ms).
    let handles: Vec<_> = (0..24)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                // curl's own clock (time_total), so process start-up on a busy machine is not counted.
                let (s, _, b) = curl(&["-w", "\n%{time_total}", "--data-binary", "SELECT sleep(0.3)", &url]);
                let (b, t) = b.rsplit_once('\n').unwrap_or((&b, "0"));
                (s, b.to_string(), Duration::from_secs_f64(t.trim().parse().unwrap_or(0.0)))
            })
        })
        .collect();
    let results: Vec<(u16, String, Duration)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok: Vec<_> = results.iter().filter(|r| r.0 == 200).collect();
    let rejected: Vec<_> = results.iter().filter(|r| r.0 == 429).collect();
    assert_eq!(ok.len() + rejected.len(), 24, "{results:?}");
    assert!(rejected.len() >= 16, "most are rejected: {} of 24", rejected.len());
    for r in &rejected {
        assert!(r.1.contains("queue is full") || r.1.contains("no slot free"), "{}", r.1);
        assert!(r.2 < Duration::from_millis(250), "a rejection took {:?}", r.2);
    }
    for r in &ok {
        assert!(r.2 < Duration::from_millis(1500), "accepted query took {:?}", r.2);
    }
}

#[test]
fn a_client_that_disconnects_has_its_query_killed() {
    let (env, gw) = env();
    let qid = format!("gw-kill-{}", std::process::id());
    let mut child = std::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "1",
            "--data-binary",
            "SELECT count() FROM numbers(100000000000) WHERE NOT ignore(cityHash64(number))",
        ])
        .arg(format!("{gw}/?query_id={qid}&max_threads=1"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let running = |env: &Env| -> bool {
        (1..=2).any(|s| {
            (1..=2).any(|r| {
                post(
                    &env.node_url(s, r),
                    &format!("SELECT count() FROM system.processes WHERE query_id = 'default:{qid}'"),
                )
                .1
                .trim()
                    != "0"
            })
        })
    };
    let t = Instant::now();
    while !running(env) {
        assert!(t.elapsed() < Duration::from_secs(3), "the query never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.wait(); // curl gives up after 1 s and closes the connection
    let t = Instant::now();
    while running(env) {
        assert!(t.elapsed() < Duration::from_secs(5), "the query still runs 5 s after the client left");
        std::thread::sleep(Duration::from_millis(100));
    }
    let metrics = curl(&[&format!("{gw}/metrics")]).2;
    assert!(metrics.contains("chstorm_gateway_killed_queries_total{reason=\"client_gone\"}"), "{metrics}");
}

#[test]
fn a_bad_config_is_rejected_and_a_reload_swaps_the_config() {
    let (env, _) = env();
    let (gw, url) = gateway_with(env, |t| t);
    let path = env.dir.path().join("reload.yaml");
    let base = std::fs::read_to_string(&env.cluster.topology().gateway_config).unwrap();
    let listen = base.lines().find(|l| l.starts_with("listen:")).unwrap().to_string();
    let base = base.replace(&listen, "listen: 127.0.0.1:0");
    // A bad file: one line naming the field.
    std::fs::write(&path, base.replace("fall: 2", "fall: two")).unwrap();
    let e = chstorm_gateway::Config::load(&path).unwrap_err().to_string();
    assert!(e.contains("health.fall") && e.contains("line "), "{e}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_chstorm"))
        .args(["gateway", "--check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    // Reload: `gw` was started from another file; point a reload at ours by rewriting its source.
    let (s, _, _) = curl(&["-u", "extra:", "--data-binary", "SELECT 1", &url]);
    assert_eq!(s, 401, "no such user yet");
    let gw_path = gw_source(&gw, env);
    std::fs::write(&gw_path, base.replace("users:\n", "users:\n  - name: extra\n    cluster: storm\n")).unwrap();
    env.rt.block_on(gw.reload()).unwrap();
    let (s, _, b) = curl(&["-u", "extra:", "--data-binary", "SELECT 1", &url]);
    assert_eq!((s, b.trim()), (200, "1"));
    // A bad file keeps the running config.
    std::fs::write(&gw_path, "listen: [").unwrap();
    assert!(env.rt.block_on(gw.reload()).is_err());
    let (s, _, _) = curl(&["-u", "extra:", "--data-binary", "SELECT 1", &url]);
    assert_eq!(s, 200, "the old config still serves");
}

/// The file a test gateway was started from (the newest gw-*.yaml in the env's dir).
fn gw_source(gw: &chstorm_gateway::Gateway, env: &Env) -> std::path::PathBuf {
    gw.config_path().to_path_buf().canonicalize().unwrap_or_else(|_| env.dir.path().to_path_buf())
}

#[test]
fn real_clients_work_unchanged_through_the_gateway() {
    let (_, gw) = env();
    // curl: GET and POST, query in the URL and in the body.
    let (s, _, b) = curl(&[&format!("{gw}/?query=SELECT%201")]);
    assert_eq!((s, b.as_str()), (200, "1\n"));
    let (s, _, b) = curl(&["--data-binary", "SELECT 2", gw]);
    assert_eq!((s, b.as_str()), (200, "2\n"));
    // INSERT data streamed in the body with the query in the URL, through Distributed.
    // A session sticks to one replica: a Memory table made in it is found by the next statements.
    let sess = format!("{gw}/?session_id=gw-sess-{}", std::process::id());
    let (s, _, b) = curl(&["--data-binary", "CREATE TABLE IF NOT EXISTS gw_ins (x UInt32) ENGINE = Memory", &sess]);
    assert_eq!(s, 200, "{b}");
    let (s, _, b) =
        curl(&["--data-binary", "1\n2\n3\n", &format!("{sess}&query=INSERT%20INTO%20gw_ins%20FORMAT%20TSV")]);
    assert_eq!(s, 200, "{b}");
    let (s, _, b) = curl(&["--data-binary", "SELECT sum(x) FROM gw_ins", &sess]);
    assert_eq!((s, b.as_str()), (200, "6\n"));
    // Node's official client, when node and the package are installed (scripts/install-deps).
    let node_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-clients/node");
    if node_dir.join("node_modules/@clickhouse/client").exists() {
        let script = format!(
            "import {{ createClient }} from '@clickhouse/client';\
             const c = createClient({{ url: '{gw}' }});\
             const rs = await c.query({{ query: 'SELECT number AS n, toString(number) AS s FROM numbers(3)', format: 'JSONEachRow' }});\
             console.log(JSON.stringify(await rs.json()));\
             await c.command({{ query: 'SELECT 1' }});\
             console.log((await c.ping()).success);\
             await c.close();"
        );
        let f = node_dir.join("gw_test.mjs");
        std::fs::write(&f, script).unwrap();
        let out = std::process::Command::new("node").arg(&f).current_dir(&node_dir).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            vec![r#"[{"n":"0","s":"0"},{"n":"1","s":"1"},{"n":"2","s":"2"}]"#, "true"]
        );
    } else {
        eprintln!("SKIP @clickhouse/client: run scripts/install-deps to install it into target/test-clients/node");
    }
    // Python's clickhouse-connect (0.5.25: the last that speaks to 18.16), likewise.
    // Installed means importable: the venv stays when its package's install fails, and
    // install-deps then says this test is skipped.
    let py = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-clients/py/bin/python");
    let has_connect = std::process::Command::new(&py).args(["-c", "import clickhouse_connect"]).output();
    if has_connect.is_ok_and(|o| o.status.success()) {
        let (host, port) = gw.trim_start_matches("http://").split_once(':').unwrap();
        let script = format!(
            "import clickhouse_connect\n\
             c = clickhouse_connect.get_client(host='{host}', port={port})\n\
             print(c.server_version)\n\
             print(c.query('SELECT number, toString(number) FROM numbers(3)').result_rows)\n\
             print(c.command('SELECT count() FROM items FINAL WHERE shop_id = 1'))\n"
        );
        let out = std::process::Command::new(&py).args(["-c", &script]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("18.") || lines[0].chars().next().is_some_and(|c| c.is_ascii_digit()), "{text}");
        assert_eq!(lines[1], "[(0, '0'), (1, '1'), (2, '2')]");
        assert!(lines[2].parse::<u64>().unwrap() > 0, "a routed count through clickhouse-connect");
    } else {
        eprintln!("SKIP clickhouse-connect: run scripts/install-deps to install it into target/test-clients/py");
    }
}

#[test]
fn https_on_the_listen_side_and_to_the_backends() {
    let s = chstorm_local::shared_tls_server();
    let info = s.info();
    let ca = info.ca_cert.clone().unwrap();
    let key = ca.with_file_name("server.key");
    assert!(key.exists(), "{}", key.display());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tls.yaml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:0\ntls:\n  cert: {}\n  key: {}\npool:\n  tls_ca: {}\nclusters:\n  one:\n    shards:\n      - replicas: [{}]\nusers:\n  - name: default\n    cluster: one\n",
            ca.display(),
            key.display(),
            ca.display(),
            info.https_url.as_deref().unwrap()
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let gw = rt.block_on(chstorm_gateway::Gateway::start(cfg)).unwrap();
    let url = format!("https://127.0.0.1:{}/", gw.addr.port());
    let (status, h, body) = curl(&["--cacert", ca.to_str().unwrap(), "--data-binary", "SELECT 1", &url]);
    assert_eq!((status, body.as_str()), (200, "1\n"), "{h}");
    // Without trusting the certificate, the client refuses the gateway.
    let (status, _, _) = curl(&["--data-binary", "SELECT 1", &url]);
    assert_eq!(status, 0, "an untrusted certificate must fail the handshake");
    gw.stop();
}

#[test]
fn a_users_rate_limit_answers_429_and_max_execution_time_kills_the_query() {
    let (env, _) = env();
    let (_gw, url) = gateway_with(env, |t| {
        t.replace(
            "users:\n",
            "users:\n  - name: slowpoke\n    cluster: storm\n    requests_per_second: 5\n  - name: hasty\n    cluster: storm\n    max_execution_time: 1s\n",
        )
    });
    // 20 requests at once against 5 a second: the first 5 pass, the rest get 429 with a reason.
    let statuses: Vec<u16> = (0..20)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || curl(&["-u", "slowpoke:", "--data-binary", "SELECT 1", &url]).0)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!(ok + limited, 20, "{statuses:?}");
    // 5 pass at once, plus what refills (5 a second) while the 20 curl processes start.
    assert!(ok >= 5 && limited >= 8, "the limit let {ok} of 20 through: {statuses:?}");
    let (_, _, b) = curl(&["-u", "slowpoke:", "--data-binary", "SELECT 1", &url]);
    assert!(b.contains("over the limit of 5 requests per second") || b.trim() == "1", "{b}");
    // max_execution_time: the user's cap reaches the server, which stops the query.
    let t = Instant::now();
    let (s, _, b) = curl(&[
        "-u",
        "hasty:",
        "--data-binary",
        "SELECT count() FROM numbers(100000000000) WHERE NOT ignore(cityHash64(number))",
        &url,
    ]);
    assert_eq!(s, 500, "{b}");
    assert!(b.starts_with("Code: 159, e.displayText() = DB::Exception: Timeout exceeded"), "{b}");
    // The limit is the gateway's, and its answer says which key sets it.
    let note = "this user's max_execution_time is capped at 1 s by the gateway's users[].max_execution_time";
    assert!(b.contains(note) && b.ends_with("for longer queries)\n"), "{b}");
    assert!(t.elapsed() < Duration::from_secs(6), "took {:?}", t.elapsed());
    // A lower limit the client set itself (`default` is capped at 30 s) is the server's text.
    let endless = "SELECT count() FROM numbers(100000000000) WHERE NOT ignore(cityHash64(number))";
    let (s, _, b) = curl(&["--data-binary", endless, &format!("{url}/?max_execution_time=1")]);
    assert_eq!(s, 500, "{b}");
    assert!(b.contains("Timeout exceeded") && !b.contains("chstorm gateway"), "{b}");
    // A client's own larger max_execution_time is capped by the user's.
    let (s, _, b) = curl(&[
        "-u",
        "hasty:",
        "--data-binary",
        "SELECT value FROM system.settings WHERE name = 'max_execution_time'",
        &format!("{url}/?max_execution_time=100"),
    ]);
    assert_eq!((s, b.trim()), (200, "1"));
}

/// The real binary: SIGHUP reloads the file, the pool's idle timeout is learned from the
/// servers' `Keep-Alive: timeout=3` (minus 500 ms), gzip request bodies pass through, and the
/// JSON logs carry query_ids but never a password.
#[test]
fn the_binary_reloads_on_sighup_learns_keepalive_and_keeps_passwords_out_of_logs() {
    let (env, _) = env();
    let (dir, cfg, text) = config_file(env);
    let log = dir.path().join("gw.log");
    let mut child = gateway_process(&cfg, std::fs::File::create(&log).unwrap().into());
    let url = format!("http://{}", chstorm_testenv::listening_addr(&log, &mut child.0, Duration::from_secs(10)));
    let logs = || std::fs::read_to_string(&log).unwrap();
    assert!(logs().contains("\"pool_idle_timeout_ms\":2500"), "learned from Keep-Alive: timeout=3: {}", logs());
    // gzip request body: the gateway reads it decompressed (to classify and route it) and forwards it.
    let gz = dir.path().join("q.gz");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("printf 'SELECT 42' | gzip > {}", gz.display()))
        .status()
        .unwrap();
    assert!(out.success());
    let (s, _, b) = curl(&["-H", "Content-Encoding: gzip", "--data-binary", &format!("@{}", gz.display()), &url]);
    assert_eq!((s, b.as_str()), (200, "42\n"));
    // A wrong password is rejected, and never logged; a failing query logs its query_id.
    let (s, _, _) = curl(&["-u", "default:hunter2-secret", "--data-binary", "SELECT 1", &url]);
    assert_eq!(s, 401);
    let (s, _, _) = curl(&["--data-binary", "SELECT no_such_column", &format!("{url}/?query_id=gw-log-test")]);
    assert_ne!(s, 200);
    // SIGHUP: a new user appears; the old config served until then.
    let (s, _, _) = curl(&["-u", "late:", "--data-binary", "SELECT 1", &url]);
    assert_eq!(s, 401);
    std::fs::write(&cfg, text.replace("users:\n", "users:\n  - name: late\n    cluster: storm\n")).unwrap();
    unsafe { libc_kill(child.0.id() as i32, 1) };
    let t = Instant::now();
    while curl(&["-u", "late:", "--data-binary", "SELECT 1", &url]).0 != 200 {
        assert!(t.elapsed() < Duration::from_secs(10), "SIGHUP did not reload: {}", logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(logs().contains("config reloaded"));
    unsafe { libc_kill(child.0.id() as i32, 15) };
    let _ = child.0.wait();
    let all = logs();
    assert!(all.contains("gw-log-test"), "the failing query's log line has its query_id: {all}");
    assert!(!all.contains("hunter2"), "a password reached the logs: {all}");
    for line in all.lines().filter(|l| l.starts_with('{')) {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    }
}

/// A gateway whose log pipe loses its reader (a log collector that exits or restarts) loses its
/// log lines and nothing else: it keeps serving, reloading and logging errors.
#[test]
fn a_gateway_whose_log_pipe_breaks_keeps_serving() {
    use std::io::BufRead;
    let (env, _) = env();
    let (_dir, cfg, _) = config_file(env);
    let mut child = gateway_process(&cfg, std::process::Stdio::piped());
    // The address from the listening line; then the pipe's read end closes with the reader.
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let line = std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .find(|l| chstorm_testenv::is_listening_line(l));
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(10)).unwrap().expect("the gateway exited before listening");
    let url = format!("http://{}", chstorm_testenv::listening_field(&line, "addr"));
    // The reader's thread has ended with the listening line: the pipe has no reader left. Each
    // of these logs a line into it, and the first SIGHUP comes as soon as the gateway listens.
    for _ in 0..3 {
        unsafe { libc_kill(child.0.id() as i32, 1) };
        let (s, _, _) = curl(&["--data-binary", "SELECT no_such_column", &url]);
        assert_ne!(s, 200);
    }
    std::thread::sleep(Duration::from_millis(300));
    let ended = child.0.try_wait().unwrap();
    assert!(ended.is_none(), "the gateway ended ({}) with its log pipe broken", ended.unwrap());
    assert_eq!(curl(&["--data-binary", "SELECT 42", &url]).2, "42\n");
    assert_eq!(curl(&[&format!("{url}/ping")]).0, 200);
}

/// The cluster's gateway config in a new temporary folder: (the folder, the file, its text).
fn config_file(env: &Env) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let text = chstorm_testenv::gateway_config_text(&env.cluster);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gw.yaml");
    std::fs::write(&cfg, &text).unwrap();
    (dir, cfg, text)
}

/// `chstorm gateway --config cfg` as a process, its stderr to `stderr`.
fn gateway_process(cfg: &std::path::Path, stderr: std::process::Stdio) -> ChildGuard {
    let cmd = std::process::Command::new(env!("CARGO_BIN_EXE_chstorm"))
        .args(["gateway", "--config", cfg.to_str().unwrap()])
        .stderr(stderr)
        .spawn()
        .unwrap();
    ChildGuard(cmd)
}

/// Kills the child when the test ends, passed or failed (a failed assertion must not leave a
/// gateway running, holding the test's output pipe open).
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// `INSERT ... FORMAT TSV` followed by its data in one body, as `cat data | curl --data-binary @-`
/// sends it: streamed through whatever its size (the gateway reads only the statement's head),
/// plain and gzip-compressed, every row arriving; and a POST with the query in the URL and an
/// empty body.
#[test]
fn statement_and_data_bodies_of_any_size_stream_through() {
    let (env, gw) = env();
    // The same table on every node: the gateway may send the INSERT to any replica.
    for node in env.node_urls() {
        let (s, b) = post(&node, "CREATE TABLE IF NOT EXISTS default.gw_big (n UInt64, s String) ENGINE = Memory");
        assert_eq!(s, 200, "{b}");
    }
    let total = || -> u64 {
        env.node_urls()
            .iter()
            .map(|n| post(n, "SELECT count() FROM default.gw_big").1.trim().parse::<u64>().unwrap())
            .sum()
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("insert.tsv");
    let mut body = String::from("INSERT INTO default.gw_big FORMAT TSV\n");
    let rows = 120_000u64;
    for n in 0..rows {
        body.push_str(&format!("{n}\tsome text to make the body bigger {n}\n"));
    }
    assert!(body.len() > 3 << 20, "over 3 MiB: {}", body.len());
    std::fs::write(&data, &body).unwrap();
    let before = total();
    // (`Expect:` off: curl's 100-continue would be the first status line of the answer.)
    let (s, _, b) = curl(&["-H", "Expect:", "--data-binary", &format!("@{}", data.display()), gw]);
    assert_eq!(s, 200, "a big INSERT body is streamed, not refused: {b}");
    assert_eq!(total(), before + rows, "every row arrived");
    // gzip: classified from the decompressed head, forwarded compressed.
    let gz = dir.path().join("insert.tsv.gz");
    let zipped = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -c {} > {}", data.display(), gz.display()))
        .status()
        .unwrap();
    assert!(zipped.success());
    let (s, _, b) =
        curl(&["-H", "Expect:", "-H", "Content-Encoding: gzip", "--data-binary", &format!("@{}", gz.display()), gw]);
    assert_eq!(s, 200, "{b}");
    assert_eq!(total(), before + 2 * rows, "every row arrived");
    // Query in the URL, empty body: answered as ClickHouse answers it.
    let (s, _, b) = curl(&["-X", "POST", "--data-binary", "", &format!("{gw}/?query=SELECT%2042")]);
    assert_eq!((s, b.trim()), (200, "42"));
}
