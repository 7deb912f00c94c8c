//! The gateway's HTTP side against a real 2x2 cluster: ClickHouse's paths and 401s, compared
//! with a node's answers; slow clients dropped and their slots freed; bounded metrics that
//! `promtool check metrics` accepts; `/metrics` on its own listener; small answers held whole,
//! long ones streamed.

use chstorm_testenv::{curl, start_shared_cluster, Env};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(start_shared_cluster)
}

/// A gateway on the env's cluster with `edit` applied to the generated config: (gateway, url).
fn gateway_with(env: &Env, edit: impl Fn(String) -> String) -> (chstorm_gateway::Gateway, String) {
    let gw = env.rt.block_on(chstorm_gateway::Gateway::start(env.gateway_config(edit))).unwrap();
    let url = format!("http://{}", gw.addr);
    (gw, url)
}

fn addr_of(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").trim_end_matches('/').parse().unwrap()
}

/// Sends `head` and `body` on a fresh connection and reads the whole answer (the connection is
/// closed by the server or after 20 s).
fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A metric's value from the text exposition (0 when the series is absent).
fn metric(text: &str, series: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
}

fn ro_text(url: &str) -> String {
    curl(&[&format!("{url}/metrics")]).2
}

/// Status, content type, whether the connection is closed, body.
fn answer(args: &[&str]) -> (u16, String, bool, String) {
    let (s, h, b) = curl(args);
    let content_type = h.lines().find_map(|l| l.strip_prefix("content-type: ")).unwrap_or("").trim().to_string();
    (s, content_type, h.contains("\nconnection: close"), b)
}

#[test]
fn paths_and_401s_answer_as_clickhouse_does() {
    let env = env();
    let (gw, url) =
        gateway_with(env, |t| t.replace("listen: 127.0.0.1:0\n", "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\n"));
    let node = env.node_url(1, 1);
    // (method, target, compare bodies). The same answer, byte for byte, from the gateway and a node.
    let cases: &[(&str, &str, bool)] = &[
        ("GET", "/", true),
        ("GET", "/ping", true),
        ("GET", "/replicas_status", true),
        ("GET", "/nope", true),
        ("GET", "//", true),
        ("GET", "/ping/", true),
        ("GET", "/favicon.ico", true),
        ("GET", "/a%20b/c", true),
        ("GET", "/metrics", true),
        ("GET", "/?query=SELECT%201", true),
        ("GET", "/ping?query=SELECT%202", true),
        ("GET", "/nope?query=SELECT%203", true),
        ("GET", "/?unknown_setting_x=1", true),
        ("HEAD", "/", true),
        ("HEAD", "/ping", true),
        ("HEAD", "/nope", true),
        ("POST", "/", true),
        ("POST", "/ping", true),
        ("POST", "/nope", true),
        ("POST", "/replicas_status", true),
        ("DELETE", "/?query=SELECT%205", true),
        // ClickHouse answers 501 with no body; the gateway says why in one line.
        ("PUT", "/nope", false),
        ("OPTIONS", "/", false),
    ];
    for &(method, target, same_body) in cases {
        let run = |base: &str| {
            let u = format!("{base}{target}");
            match method {
                "HEAD" => answer(&["-I", &u]),
                "POST" => answer(&["--data-binary", "SELECT 4", &u]),
                m => answer(&["-X", m, &u]),
            }
        };
        let (g, d) = (run(&url), run(&node));
        assert_ne!(d.0, 0, "{method} {target}: the node did not answer");
        assert_eq!(g.0, d.0, "{method} {target}: status");
        if same_body {
            assert_eq!(g.1, d.1, "{method} {target}: content type");
            assert_eq!(g.3, d.3, "{method} {target}");
        } else {
            assert!(g.2 && d.2, "{method} {target}: both close the connection");
            assert_eq!(g.3.lines().count(), 1, "{method} {target}: {}", g.3);
        }
    }
    // Every 401 carries ClickHouse's WWW-Authenticate.
    let realm = "www-authenticate: basic realm=\"clickhouse server http api\"";
    let (s, h, _) = curl(&["-u", "nobody:x", "--data-binary", "SELECT 1", &node]);
    assert!(s == 401 && h.contains(realm), "18.16 itself: {h}");
    for args in [
        vec!["-u", "nobody:x", "--data-binary", "SELECT 1"],
        vec!["-u", "default:wrong", "--data-binary", "SELECT 1"],
        vec!["-H", "X-ClickHouse-User: nobody", "--data-binary", "SELECT 1"],
    ] {
        let mut a = args.clone();
        a.push(&url);
        let (s, h, b) = curl(&a);
        assert_eq!(s, 401, "{args:?}: {b}");
        assert!(h.contains(realm), "{args:?}: {h}");
        // Worded as the cluster's 18.16 words its errors.
        assert_eq!(b, "Code: 193, e.displayText() = DB::Exception: chstorm gateway: unknown user or wrong password\n");
    }
    let (s, h, b) = curl(&[&format!("{url}/?user=nobody&query=SELECT%201")]);
    assert!(s == 401 && h.contains(realm), "{h}{b}");
    // An absurd user name: one line that says what is wrong.
    let long = "x".repeat(5000);
    let (s, h, b) = curl(&["-H", &format!("X-ClickHouse-User: {long}"), "--data-binary", "SELECT 1", &url]);
    assert_eq!(
        (s, b.as_str()),
        (401, "Code: 193, e.displayText() = DB::Exception: chstorm gateway: the user name is 5000 bytes long; at most 128\n")
    );
    assert!(h.contains(realm));
    // /metrics lives on metrics_listen only; that listener serves nothing else.
    let murl = format!("http://{}", gw.metrics_addr.expect("metrics_listen is set"));
    let (s, h, b) = curl(&[&format!("{murl}/metrics")]);
    assert_eq!(s, 200);
    assert!(h.contains("content-type: text/plain; version=0.0.4"), "{h}");
    assert!(b.contains("chstorm_gateway_requests_total{user=\"default\",status=\"200\""), "{b}");
    for target in ["/", "/ping", "/?query=SELECT%201"] {
        let (s, _, b) = curl(&[&format!("{murl}{target}")]);
        assert_eq!(s, 404, "{target}");
        assert!(b.contains("serves GET /metrics only") && b.lines().count() == 1, "{b}");
    }
    gw.stop();
}

#[test]
fn replicas_status_reports_shards_without_a_healthy_replica() {
    let env = env();
    // Shard 2 made of two replicas that refuse connections.
    let (gw, url) = gateway_with(env, |t| {
        let second = t.match_indices("replicas: [").nth(1).unwrap().0;
        let end = second + t[second..].find(']').unwrap();
        format!("{}replicas: [http://127.0.0.1:1, http://127.0.0.1:2{}", &t[..second], &t[end..])
    });
    let t = Instant::now();
    let (status, body) = loop {
        let (s, _, b) = curl(&[&format!("{url}/replicas_status")]);
        if s != 200 || t.elapsed() > Duration::from_secs(10) {
            break (s, b);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("storm.2.1:\tdown. http://127.0.0.1:1 version unknown\n"), "{body}");
    assert!(body.ends_with("storm.2:\tno healthy replica.\n"), "{body}");
    assert!(body.contains("storm.1.1:\tup. ") && body.contains("storm.1.2:\tup. "), "{body}");
    // The replicas' detected version: 18.16.1 once probed (the first probe may still run).
    assert!(
        body.lines()
            .filter(|l| l.contains("\tup. "))
            .all(|l| l.ends_with(" version 18.16.1") || l.ends_with(" version unknown")),
        "{body}"
    );
    let (s, _, b) = curl(&["-I", &format!("{url}/replicas_status?verbose=1")]);
    assert_eq!(s, 503, "{b}");
    gw.stop();
}

/// Sends a request head one byte a second; returns (seconds until the gateway closed the
/// connection, bytes sent by then). Panics on an answer.
fn one_byte_a_second(addr: SocketAddr, head: &[u8]) -> (Duration, usize) {
    // The clock starts before the connection exists: the gateway's timer cannot start earlier,
    // whereas a test thread descheduled after connect() would start late and see it early.
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = [0u8; 512];
    for (sent, b) in head.iter().enumerate() {
        if s.write_all(&[*b]).is_err() {
            return (t.elapsed(), sent);
        }
        match s.read(&mut buf) {
            Ok(0) => return (t.elapsed(), sent + 1),
            Ok(n) => panic!("an answer to half a request: {}", String::from_utf8_lossy(&buf[..n])),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return (t.elapsed(), sent + 1),
        }
    }
    panic!("the whole head went through at one byte a second without the connection being closed");
}

#[test]
fn slow_clients_are_dropped_and_give_their_slots_back() {
    let env = env();
    for s in 1..=2 {
        for r in 1..=2 {
            let (st, b) = chstorm_testenv::post(
                &env.node_url(s, r),
                "CREATE TABLE IF NOT EXISTS default.gw_stall (x UInt32) ENGINE = Memory",
            );
            assert_eq!(st, 200, "{b}");
        }
    }
    let (gw, url) = gateway_with(env, |t| {
        t.replace("limits:\n", "limits:\n  client_header_timeout: 2s\n  client_body_idle_timeout: 1s\n").replace(
            "users:\n",
            "users:\n  - name: uploader\n    cluster: storm\n    max_concurrency: 2\n    queue_size: 0\n    queue_max_wait: 50ms\n",
        )
    });
    let addr = addr_of(&url);

    // A request head at one byte a second: closed after client_header_timeout (2 s), without an
    // answer, long before its 80 bytes are through.
    // Meanwhile a connection that sends nothing at all is closed after the same time.
    let silent = std::thread::spawn(move || {
        let t = Instant::now(); // before connect(), see one_byte_a_second
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        (n, t.elapsed())
    });
    let head = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-ClickHouse-User: uploader\r\nContent-Length: 8\r\n\r\n";
    let (after, sent) = one_byte_a_second(addr, head);
    assert!(after >= Duration::from_secs(2), "closed after {after:?}, before the timeout");
    assert!(sent < head.len() / 2, "{sent} of {} bytes went through", head.len());
    let (n, after) = silent.join().unwrap();
    assert_eq!(n, 0, "closed without an answer");
    assert!(after >= Duration::from_secs(2) && after < Duration::from_secs(20), "closed after {after:?}");

    // Two uploads of user `uploader` (max_concurrency 2) stall mid-body: one with its query in
    // the URL and the data streamed to a replica, one with its query in the body.
    let stalled = [
        "POST /?query=INSERT%20INTO%20gw_stall%20FORMAT%20TSV HTTP/1.1\r\nHost: x\r\nX-ClickHouse-User: uploader\r\nContent-Length: 1000\r\n\r\n1\n2\n3\n",
        "POST / HTTP/1.1\r\nHost: x\r\nX-ClickHouse-User: uploader\r\nContent-Length: 100\r\n\r\nSELECT count() FROM gw_stall WHERE x = ",
    ];
    let uploads: Vec<_> = stalled
        .iter()
        .map(|req| {
            let req = req.to_string();
            std::thread::spawn(move || {
                let t = Instant::now();
                let answer = raw(addr, req.as_bytes());
                (answer, t.elapsed())
            })
        })
        .collect();
    // While they stall they hold both of the user's slots: a third query is refused.
    let t = Instant::now();
    while metric(&ro_text(&url), "chstorm_gateway_in_flight") < 2.0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the uploads never got their slots");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (s, _, b) = curl(&["-H", "X-ClickHouse-User: uploader", "--data-binary", "SELECT 1", &url]);
    assert_eq!(s, 429, "{b}");
    // After client_body_idle_timeout (1 s) without a byte, each gets a 408 and a closed connection.
    for u in uploads {
        let (answer, took) = u.join().unwrap();
        assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer}");
        assert!(answer.contains("Connection: Close\r\n"), "{answer}");
        assert!(
            answer.ends_with("chstorm gateway: the client sent no request body byte for 1000 ms (limits.client_body_idle_timeout); the request was abandoned\n"),
            "{answer}"
        );
        assert!(took >= Duration::from_secs(1), "answered after {took:?}, before the timeout");
    }
    // The slots are back.
    let (s, _, b) = curl(&["-H", "X-ClickHouse-User: uploader", "--data-binary", "SELECT 1", &url]);
    assert_eq!((s, b.as_str()), (200, "1\n"));
    // The INSERT was abandoned on its replica: it stops running and leaves no row.
    let running = || {
        (1..=2).flat_map(|s| (1..=2).map(move |r| (s, r))).any(|(s, r)| {
            chstorm_testenv::post(
                &env.node_url(s, r),
                "SELECT count() FROM system.processes WHERE query LIKE 'INSERT INTO gw_stall%'",
            )
            .1
            .trim()
                != "0"
        })
    };
    let t = Instant::now();
    while running() {
        assert!(t.elapsed() < Duration::from_secs(5), "the abandoned INSERT still runs");
        std::thread::sleep(Duration::from_millis(100));
    }
    for s in 1..=2 {
        for r in 1..=2 {
            let rows = chstorm_testenv::post(&env.node_url(s, r), "SELECT count() FROM default.gw_stall").1;
            assert_eq!(rows.trim(), "0", "s{s}r{r}");
        }
    }
    let m = ro_text(&url);
    assert_eq!(metric(&m, "chstorm_gateway_client_timeouts_total{phase=\"header\"}"), 1.0, "{m}");
    assert!(metric(&m, "chstorm_gateway_client_timeouts_total{phase=\"idle\"}") >= 1.0, "{m}");
    assert_eq!(metric(&m, "chstorm_gateway_client_timeouts_total{phase=\"body\"}"), 2.0, "{m}");
    assert_eq!(metric(&m, "chstorm_gateway_requests_total{user=\"uploader\",status=\"408\",route=\"rejected\"}"), 2.0);

    // An upload that keeps sending, a chunk of 200 bytes every 250 ms for 3 s (longer than the
    // 1 s idle timeout, each gap well inside it, 800 B/s over the 500 B/s minimum rate), is not
    // dropped.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let chunks: Vec<String> = (0..12).map(|i| format!("{i}\n").repeat(200 / format!("{i}\n").len())).collect();
    let len: usize = chunks.iter().map(String::len).sum();
    s.write_all(format!("POST /?query=INSERT%20INTO%20gw_stall%20FORMAT%20TSV HTTP/1.1\r\nHost: x\r\nX-ClickHouse-User: uploader\r\nConnection: close\r\nContent-Length: {len}\r\n\r\n").as_bytes()).unwrap();
    for c in &chunks {
        std::thread::sleep(Duration::from_millis(250));
        s.write_all(c.as_bytes()).unwrap();
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    gw.stop();
}

#[test]
fn metrics_stay_bounded_and_promtool_accepts_them() {
    let env = env();
    let (gw, url) = gateway_with(env, |t| {
        t.replace("limits:\n", "limits:\n  client_header_timeout: 1s\n  client_body_idle_timeout: 1s\n")
            .replace("    routing:\n", "    threads:\n      total: 4\n    routing:\n")
            .replace("users:\n", "users:\n  - name: limited\n    cluster: storm\n    requests_per_second: 1\n")
    });
    let addr = addr_of(&url);
    // Traffic of every kind: routed and fanned-out reads, a server error, a rate-limited user, a
    // wrong password, unknown users, a stalled body, a slow head.
    for i in 0..10 {
        assert_eq!(
            curl(&["--data-binary", &format!("SELECT count() FROM items FINAL WHERE shop_id = {i}"), &url]).0,
            200
        );
    }
    assert_eq!(curl(&["--data-binary", "SELECT 1", &url]).0, 200);
    assert_ne!(curl(&["--data-binary", "SELECT no_such_column", &url]).0, 200);
    let limited: Vec<u16> = (0..5).map(|_| curl(&["-u", "limited:", "--data-binary", "SELECT 1", &url]).0).collect();
    assert!(limited.contains(&429), "{limited:?}");
    assert_eq!(curl(&["-u", "default:wrong", "--data-binary", "SELECT 1", &url]).0, 401);
    let answer = raw(addr, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nSELECT ");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(raw(addr, b"POST / HTTP/1.1\r\nHost"), "", "a head that stops: closed without an answer");
    let unknown = |name: &str| {
        let a = raw(
            addr,
            format!(
                "GET /?query=SELECT%201 HTTP/1.1\r\nHost: x\r\nX-ClickHouse-User: {name}\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        assert!(a.starts_with("HTTP/1.1 401"), "{a}");
    };
    unknown("stranger");
    let series = |m: &str| m.lines().filter(|l| !l.starts_with('#')).count();
    let before = ro_text(&url);
    // 300 made-up user names and one of 5,000 characters add no series.
    for i in 0..300 {
        unknown(&format!("made-up-{i}-{}", i * 7919));
    }
    unknown(&"y".repeat(5000));
    let after = ro_text(&url);
    assert_eq!(series(&after), series(&before), "made-up users grew /metrics:\n{after}");
    assert!(after.len() < before.len() + 64, "{} bytes, then {}", before.len(), after.len());
    let users: std::collections::BTreeSet<&str> =
        after.lines().filter_map(|l| l.split("user=\"").nth(1)?.split('"').next()).collect();
    assert_eq!(users.into_iter().collect::<Vec<_>>(), vec!["default", "limited", "unknown"], "{after}");
    assert_eq!(
        metric(&after, "chstorm_gateway_requests_total{user=\"unknown\",status=\"401\",route=\"rejected\"}"),
        303.0
    );
    for phase in ["body", "header"] {
        assert!(after.contains(&format!("chstorm_gateway_client_timeouts_total{{phase=\"{phase}\"}} 1\n")), "{after}");
    }
    assert!(after.contains("chstorm_gateway_threads_budget{cluster=\"storm\",replica=\"1.1\"} 4\n"), "{after}");

    // promtool (Debian's prometheus package, scripts/install-deps) finds nothing to complain about.
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("promtool: {e}; scripts/install-deps installs it (package prometheus)"));
    promtool.stdin.take().unwrap().write_all(after.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{after}");

    // Prometheus asks for OpenMetrics and gets it.
    let (s, h, b) =
        curl(&["-H", "Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5", &format!("{url}/metrics")]);
    assert_eq!(s, 200);
    assert!(h.contains("content-type: application/openmetrics-text; version=1.0.0"), "{h}");
    assert!(b.ends_with("# EOF\n") && b.contains("# TYPE chstorm_gateway_requests counter\n"), "{b}");
    gw.stop();
}

#[test]
fn a_tls_handshake_that_never_comes_is_dropped_after_the_header_timeout() {
    let s = chstorm_local::shared_tls_server();
    let info = s.info();
    let ca = info.ca_cert.clone().unwrap();
    let key = ca.with_file_name("server.key");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tls.yaml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:0\ntls:\n  cert: {}\n  key: {}\nlimits:\n  client_header_timeout: 1s\npool:\n  tls_ca: {}\nclusters:\n  one:\n    shards:\n      - replicas: [{}]\nusers:\n  - name: default\n    cluster: one\n    metrics: true\n",
            ca.display(),
            key.display(),
            ca.display(),
            info.https_url.as_deref().unwrap()
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let gw = rt.block_on(chstorm_gateway::Gateway::start(cfg)).unwrap();
    let t = Instant::now(); // before connect(), see one_byte_a_second
    let mut c = TcpStream::connect(gw.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0, "closed without a byte");
    let after = t.elapsed();
    assert!(after >= Duration::from_secs(1) && after < Duration::from_secs(20), "closed after {after:?}");
    // A client that does the handshake is served as before.
    let url = format!("https://127.0.0.1:{}/", gw.addr.port());
    let (status, _, body) = curl(&["--cacert", ca.to_str().unwrap(), "--data-binary", "SELECT 1", &url]);
    assert_eq!((status, body.as_str()), (200, "1\n"));
    let m = curl(&["--cacert", ca.to_str().unwrap(), &format!("{url}metrics")]).2;
    assert_eq!(metric(&m, "chstorm_gateway_client_timeouts_total{phase=\"tls\"}"), 1.0, "{m}");
    gw.stop();
}

/// The body of a raw HTTP/1.1 answer, de-chunked when it is chunked.
fn body_of(answer: &str) -> String {
    let (head, mut rest) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head: {answer:?}"));
    if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return rest.to_string();
    }
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or_else(|e| panic!("chunk size {size:?}: {e}"));
        if size == 0 {
            break;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    out
}

/// A small answer is held whole and leaves with its `Content-Length` (18.16 sends it chunked, in
/// three segments); one longer than 64 KiB streams chunked as the node sends it. Both are
/// byte-equal to the node's own answer (docs/GATEWAY.md, "A small answer is held whole").
#[test]
fn small_answers_leave_whole_and_long_ones_stream() {
    let env = env();
    let (gw, url) = gateway_with(env, |t| t);
    let node = addr_of(&env.node_url(1, 1));
    let ask = |addr: SocketAddr, query: &str| {
        let request = format!("GET /?query={query} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        raw(addr, request.as_bytes())
    };
    for (rows, held) in [(10, true), (1_000, true), (100_000, false)] {
        let query = format!("SELECT%20number%20FROM%20system.numbers%20LIMIT%20{rows}");
        let (through, direct) = (ask(addr_of(&url), &query), ask(node, &query));
        assert!(through.starts_with("HTTP/1.1 200"), "{through:.300}");
        assert!(direct.to_ascii_lowercase().contains("transfer-encoding: chunked"), "the node chunks: {direct:.300}");
        let head = through.split_once("\r\n\r\n").unwrap().0.to_ascii_lowercase();
        let body = body_of(&through);
        assert_eq!(body, body_of(&direct), "{rows} rows through the gateway differ from the node's");
        if held {
            assert!(head.contains(&format!("content-length: {}", body.len())), "{rows} rows not held whole: {head}");
        } else {
            assert!(body.len() > 64 * 1024 && head.contains("transfer-encoding: chunked"), "{rows} rows: {head}");
        }
    }
    gw.stop();
}

/// Whether a query with this query_id runs on any node.
fn running_anywhere(env: &Env, query_id: &str) -> bool {
    env.node_urls().iter().any(|n| {
        let sql = format!("SELECT count() FROM system.processes WHERE query_id = '{query_id}'");
        chstorm_testenv::post(n, &sql).1.trim() != "0"
    })
}

/// Opens a read of 300 million rows as `user` with `query_id` and never reads its answer.
fn open_unread(addr: SocketAddr, user: &str, query_id: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(
        format!(
            "GET /?query_id={query_id}&query=SELECT%20number%20FROM%20system.numbers%20LIMIT%20300000000 HTTP/1.1\r\nHost: x\r\nX-ClickHouse-User: {user}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    s
}

#[test]
fn a_client_that_stops_reading_is_dropped_and_its_query_killed() {
    let env = env();
    let (gw, url) = gateway_with(env, |t| {
        t.replace("limits:\n", "limits:\n  client_write_timeout: 2s\n").replace(
            "users:\n",
            "users:\n  - name: reader\n    cluster: storm\n    max_concurrency: 1\n    queue_size: 0\n    queue_max_wait: 50ms\n",
        )
    });
    let addr = addr_of(&url);
    // A client that asks for 300M rows and never reads: its query runs, and holds the user's one slot.
    let qid = format!("gw_noread_{}", std::process::id());
    let t = Instant::now();
    let unread = open_unread(addr, "reader", &qid);
    // On the backend the client's id lives in its user's namespace (`reader:<id>`).
    let backend_qid = format!("reader:{qid}");
    while !running_anywhere(env, &backend_qid) {
        assert!(t.elapsed() < Duration::from_secs(10), "the query never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (s, _, b) = curl(&["-H", "X-ClickHouse-User: reader", "--data-binary", "SELECT 1", &url]);
    assert_eq!(s, 429, "{b}");
    // The socket buffers fill within a moment; 2 s later the gateway drops the client, and the
    // KILL guard cancels the query.
    while running_anywhere(env, &backend_qid) {
        assert!(t.elapsed() < Duration::from_secs(10), "the unread query still runs after {:?}", t.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    let gone = t.elapsed();
    assert!(gone >= Duration::from_secs(2), "gone after {gone:?}, before the write timeout");
    // The slot is back.
    let (s, _, b) = curl(&["-H", "X-ClickHouse-User: reader", "--data-binary", "SELECT 1", &url]);
    assert_eq!((s, b.as_str()), (200, "1\n"));
    let m = ro_text(&url);
    assert_eq!(metric(&m, "chstorm_gateway_client_timeouts_total{phase=\"write\"}"), 1.0, "{m}");
    drop(unread);

    // A user's max_execution_time (3 s) kills the query at +1 s though the client reads nothing
    // (the write timeout, 2 s of no progress, would come later: the answer's first bytes fill
    // the buffers only after the server's first blocks, so compare against the deadline alone).
    let gw2 = {
        let (g, u2) = gateway_with(env, |t| {
            t.replace("limits:\n", "limits:\n  client_write_timeout: 60s\n")
                .replace("users:\n", "users:\n  - name: capped\n    cluster: storm\n    max_execution_time: 3s\n")
        });
        let qid = format!("gw_noread_capped_{}", std::process::id());
        let t = Instant::now();
        let _unread = open_unread(addr_of(&u2), "capped", &qid);
        let qid = format!("capped:{qid}");
        while !running_anywhere(env, &qid) {
            assert!(t.elapsed() < Duration::from_secs(10), "the query never started");
            std::thread::sleep(Duration::from_millis(50));
        }
        while running_anywhere(env, &qid) {
            assert!(t.elapsed() < Duration::from_secs(8), "the capped query still runs after {:?}", t.elapsed());
            std::thread::sleep(Duration::from_millis(100));
        }
        let m = ro_text(&u2);
        assert_eq!(metric(&m, "chstorm_gateway_killed_queries_total{reason=\"timeout\"}"), 1.0, "{m}");
        g
    };
    gw2.stop();
    gw.stop();
}

#[test]
fn a_trickled_body_is_cut_off_by_the_minimum_rate() {
    let env = env();
    let (gw, url) = gateway_with(env, |t| {
        t.replace("limits:\n", "limits:\n  client_body_idle_timeout: 1s\n  client_body_min_rate: 100\n")
    });
    let addr = addr_of(&url);
    for (query_in_url, every_ms) in [(true, 700u64), (false, 700), (true, 400)] {
        let head = if query_in_url {
            "POST /?query=SELECT%20count()%20FROM%20numbers(10)%20WHERE%20number%20IN HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n(1"
        } else {
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nSELECT count() FROM numbers(10) WHERE number IN (1"
        };
        let t = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(every_ms))).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut answer = Vec::new();
        // One byte every `every_ms` (each gap inside the 1 s idle timeout) until the gateway answers.
        loop {
            let mut buf = [0u8; 4096];
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    assert!(t.elapsed() < Duration::from_secs(20), "still open after {:?}", t.elapsed());
                    if s.write_all(b",1").is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let took = t.elapsed();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer}");
        assert!(answer.contains("too slowly") && answer.contains("(limits.client_body_min_rate)"), "{answer}");
        // 1 s, plus 10 ms for each of the few dozen bytes that came.
        assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(3), "cut off after {took:?}");
    }
    let m = ro_text(&url);
    assert_eq!(metric(&m, "chstorm_gateway_client_timeouts_total{phase=\"body\"}"), 3.0, "{m}");
    gw.stop();
}

/// Sends `request` on a fresh connection; reads until the peer closes or 1.5 s pass without a byte.
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if whole(&out) {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `out` holds a whole answer by its framing (a kept-alive connection stays open).
fn whole(out: &[u8]) -> bool {
    let text = String::from_utf8_lossy(out);
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return false };
    let head = head.to_ascii_lowercase();
    if head.contains("\r\ntransfer-encoding: chunked") {
        return body.ends_with("0\r\n\r\n");
    }
    head.lines()
        .find_map(|l| l.strip_prefix("content-length: ")?.trim().parse::<usize>().ok())
        .is_some_and(|n| body.len() >= n)
}

/// (status line, header lines with their names as spelled, body with any chunking undone).
fn parts_of(answer: &str) -> (String, Vec<(String, String)>, String) {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(": ").map(|(n, v)| (n.to_string(), v.to_string()))).collect();
    let chunked = headers.iter().any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v == "chunked");
    let body = if chunked { body_of(answer) } else { body.to_string() };
    (status, headers, body)
}

#[test]
fn header_names_connection_headers_and_411_as_the_node_sends_them() {
    let env = env();
    let (gw, url) = gateway_with(env, |t| t.replace("limits:\n", "limits:\n  client_header_timeout: 7s\n"));
    let node = addr_of(&env.node_url(1, 1));
    let gwa = addr_of(&url);
    let long = "SELECT%20number%20FROM%20system.numbers%20LIMIT%20100000";
    let mut requests: Vec<String> = Vec::new();
    for version in ["HTTP/1.1", "HTTP/1.0"] {
        for conn in ["", "Connection: close\r\n", "Connection: keep-alive\r\n", "Connection: Keep-Alive\r\n"] {
            for target in [
                "/?query=SELECT%201",
                &format!("/?query={long}"),
                "/?query=SELECT%20x",
                "/?query=SELECT%201&send_progress_in_http_headers=1&http_headers_progress_interval_ms=0",
            ] {
                requests.push(format!("GET {target} {version}\r\nHost: x\r\n{conn}\r\n"));
            }
            // No body and no length: 411 before anything else (the user does not exist).
            for extra in ["", "X-ClickHouse-User: nobody\r\n", "Transfer-Encoding: identity, chunked\r\n"] {
                if version == "HTTP/1.0" && extra.starts_with("Transfer") {
                    continue; // refused, below
                }
                let body = if extra.starts_with("Transfer") { "8\r\nSELECT 1\r\n0\r\n\r\n" } else { "" };
                for target in ["/", "/?query=SELECT%201"] {
                    requests.push(format!("POST {target} {version}\r\nHost: x\r\n{conn}{extra}\r\n{body}"));
                }
            }
            requests.push(format!("POST / {version}\r\nHost: x\r\n{conn}Content-Length: 8\r\n\r\nSELECT 1"));
            if version == "HTTP/1.1" {
                requests.push(format!(
                    "POST / {version}\r\nHost: x\r\n{conn}Transfer-Encoding: Chunked\r\n\r\n8\r\nSELECT 1\r\n0\r\n\r\n"
                ));
            }
        }
    }
    let skip = |n: &str| {
        // Framing (the gateway holds small answers whole), and the gateway's own headers.
        ["Content-Length", "Transfer-Encoding", "X-ClickHouse-Query-Id", "Date"].contains(&n)
            || n.starts_with("X-Chstorm-")
    };
    for r in &requests {
        let (a, b) = (exchange(node, r.as_bytes()), exchange(gwa, r.as_bytes()));
        let ((ns, nh, nb), (gs, gh, gb)) = (parts_of(&a), parts_of(&b));
        assert_eq!(gs, ns, "{r:?}\nnode:\n{a}\ngateway:\n{b}");
        assert_eq!(gb, nb, "{r:?}");
        let names = |h: &[(String, String)]| {
            let mut v: Vec<String> = h.iter().map(|(n, _)| n.clone()).filter(|n| !skip(n)).collect();
            v.dedup();
            v.sort();
            v
        };
        let (mut gn, mut nn) = (names(&gh), names(&nh));
        if gs.contains(" 411 ") {
            // The gateway's own answer: it is no server, it has no display name.
            nn.retain(|n| n != "X-ClickHouse-Server-Display-Name");
            gn.retain(|n| n != "X-ClickHouse-Server-Display-Name");
        }
        assert_eq!(gn, nn, "{r:?}\nnode:\n{a}\ngateway:\n{b}");
        let value = |h: &[(String, String)], name: &str| h.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        assert_eq!(value(&gh, "Connection"), value(&nh, "Connection"), "{r:?}");
        if value(&nh, "Keep-Alive").is_some() {
            assert_eq!(value(&gh, "Keep-Alive").as_deref(), Some("timeout=7"), "{r:?}");
        }
        let progress = |h: &[(String, String)]| h.iter().filter(|(n, _)| n == "X-ClickHouse-Progress").count();
        assert_eq!(progress(&gh) > 0, progress(&nh) > 0, "{r:?}");
        // Where the gateway names the query id, it spells it as ClickHouse does.
        assert!(
            !b.to_ascii_lowercase().contains("\r\nx-clickhouse-query-id") || b.contains("\r\nX-ClickHouse-Query-Id: "),
            "{b}"
        );
    }
    // Requests HTTP/1.1 does not allow, which 18.16 takes: the gateway refuses them (400, the
    // connection closed; hyper's parser), see GATEWAY.md.
    let refused = [
        "X-A: a\x00b\r\nContent-Length: 8\r\n",
        "X-A: a\r\n  b\r\nContent-Length: 8\r\n",
        "X-A: a\r\n\tb\r\nContent-Length: 8\r\n",
        "Content-Length: 8\r\nContent-Length: 9\r\n",
        "Content-Length: 9\r\nContent-Length: 8\r\n",
        "Content-Length: 8, 9\r\n",
        "Transfer-Encoding: gzip\r\nContent-Length: 8\r\n",
        "Transfer-Encoding: gzip\r\n",
    ];
    for (v, h) in refused.iter().map(|h| ("1.1", *h)).chain([("1.0", "Transfer-Encoding: chunked\r\n")]) {
        let body = if h.contains("chunked") { "8\r\nSELECT 1\r\n0\r\n\r\n" } else { "SELECT 1" };
        let r = format!("POST / HTTP/{v}\r\nHost: x\r\nConnection: close\r\n{h}\r\n{body}");
        let (a, b) = (exchange(node, r.as_bytes()), exchange(gwa, r.as_bytes()));
        assert!(b.starts_with("HTTP/1.1 400 Bad Request\r\n") && b.contains("\r\nConnection: close\r\n"), "{r:?}\n{b}");
        // The node takes it (200, or 411, or waits for a ninth byte), the gateway does not.
        assert!(!a.contains(" 400 Bad Request"), "{r:?}\n{a}");
    }
    gw.stop();
}

/// Sends `request`, shuts down the sending side (a half-close), reads the answer to the end.
fn half_closed(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The rows of `default.gw_half` with `x = v`, over every node.
fn half_rows(env: &Env, v: u32) -> u32 {
    let sql = format!("SELECT count() FROM default.gw_half WHERE x = {v}");
    env.node_urls().iter().map(|n| chstorm_testenv::post(n, &sql).1.trim().parse::<u32>().unwrap()).sum()
}

#[test]
fn a_half_closed_client_gets_its_write_run_and_its_read_abandoned() {
    let env = env();
    let (gw, url) = gateway_with(env, |t| t);
    let (node, gwa) = (addr_of(&env.node_url(1, 1)), addr_of(&url));
    for n in env.node_urls() {
        let ddl = "CREATE TABLE IF NOT EXISTS default.gw_half (x UInt32) ENGINE = Memory";
        assert_eq!(chstorm_testenv::post(&n, ddl).0, 200);
    }
    // Writes, in every shape a body can take: answered as direct, and the row lands once.
    let writes = [
        ("POST /?query=INSERT%20INTO%20default.gw_half%20VALUES HTTP/1.1", "", "(@)"),
        ("POST / HTTP/1.1", "", "INSERT INTO default.gw_half VALUES (@)"),
        ("POST /?query=INSERT%20INTO%20default.gw_half%20FORMAT%20TSV HTTP/1.1", "", "@\n"),
        ("POST / HTTP/1.0", "", "INSERT INTO default.gw_half FORMAT TSV\n@\n"),
        ("POST / HTTP/1.1", "Connection: close\r\n", "INSERT INTO default.gw_half SELECT @"),
        ("POST / HTTP/1.1", "Transfer-Encoding: chunked\r\n", "INSERT INTO default.gw_half VALUES (@)"),
    ];
    let mut v = 1000 + std::process::id() % 1000 * 100;
    for (line, extra, body) in writes {
        for addr in [node, gwa] {
            v += 1;
            let body = body.replace('@', &v.to_string());
            let line = line.replace('@', &v.to_string());
            let framed = if extra.contains("chunked") {
                format!("{extra}\r\n{:x}\r\n{body}\r\n0\r\n\r\n", body.len())
            } else {
                format!("{extra}Content-Length: {}\r\n\r\n{body}", body.len())
            };
            let answer = half_closed(addr, format!("{line}\r\nHost: x\r\n{framed}").as_bytes());
            let who = if addr == node { "node" } else { "gateway" };
            assert!(answer.contains(" 200 OK\r\n"), "{who}: {line} {body:?}\n{answer}");
            assert_eq!(half_rows(env, v), 1, "{who}: {line} {body:?}: the row did not land once");
        }
    }
    // A long read is killed on its replica at the FIN, before and after its answer head. Before
    // the short reads below: a short read abandoned at the FIN may be killed too, and its KILL is
    // counted whenever it comes back.
    let killed = |t: &str| metric(t, "chstorm_gateway_killed_queries_total{reason=\"client_gone\"}");
    let before = killed(&ro_text(&url));
    for (i, send_progress) in [0, 1].into_iter().enumerate() {
        let qid = format!("gw-half-{}-{i}", std::process::id());
        let sql = "SELECT%20count()%20FROM%20numbers(100000000000)%20WHERE%20NOT%20ignore(cityHash64(number))";
        let request = format!(
            "GET /?query_id={qid}&max_threads=1&send_progress_in_http_headers={send_progress}&query={sql} HTTP/1.1\r\nHost: x\r\n\r\n"
        );
        let mut s = TcpStream::connect(gwa).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let t = Instant::now();
        while !running_anywhere(env, &format!("default:{qid}")) {
            assert!(t.elapsed() < Duration::from_secs(3), "the query never started");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(1500)); // past the hold: the head may have gone out
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let t = Instant::now();
        while running_anywhere(env, &format!("default:{qid}")) {
            assert!(t.elapsed() < Duration::from_secs(5), "the read still runs 5 s after the client's FIN");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Each KILL is counted once its answer comes back, after the query has left the server.
    let t = Instant::now();
    while killed(&ro_text(&url)) - before < 2.0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(killed(&ro_text(&url)) - before, 2.0);
    // A short read: the node answers it; the gateway abandons it at the FIN (Code 394).
    for line in ["GET /?query=SELECT%20sleep(0.5) HTTP/1.1", "POST /?query=SELECT%20sleep(0.5)%20FORMAT%20TSV HTTP/1.1"]
    {
        let request = format!("{line}\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
        assert!(half_closed(node, request.as_bytes()).contains(" 200 OK\r\n"), "node: {line}");
        let answer = half_closed(gwa, request.as_bytes());
        assert!(answer.contains(" 500 Internal Server Error\r\n") && answer.contains("Code: 394"), "{line}\n{answer}");
    }
    gw.stop();
}

/// `%XX` for every byte of `b` (the tests' own encoder: any bytes, UTF-8 or not).
fn pct(b: &[u8]) -> String {
    b.iter().map(|x| format!("%{x:02X}")).collect()
}

#[test]
fn invalid_utf8_in_the_url_a_setting_and_the_body_reaches_the_server_unchanged() {
    let env = env();
    let (gw, url) = gateway_with(env, |t| t);
    let node = addr_of(&env.node_url(1, 1));
    let gwa = addr_of(&url);
    let sequences: &[&[u8]] = &[
        b"\xff",
        b"\xfe\xff",
        b"\xc3\x28",
        b"\xc3",
        b"\xe2\x82",
        b"\xe2\x28\xa1",
        b"\xf0\x9f\x98",
        b"\xf0\x28\x8c\x28",
        b"\xed\xa0\x80",
        b"\xc0\xaf",
        b"\x80\xbf",
        b"\xf8\x88\x80\x80\x80",
        b"\xf4\x8f\xbe\x80",
        "é€😀".as_bytes(),
    ];
    // The body of each request: (status line, body with chunks undone, route).
    let ask = |addr: SocketAddr, request: &[u8]| {
        let (status, headers, body) = parts_of(&exchange(addr, request));
        let route = headers.iter().find(|(n, _)| n == "X-Chstorm-Route").map(|(_, v)| v.clone());
        (status, body, route)
    };
    let mut routed = 0;
    for (i, s) in sequences.iter().enumerate() {
        let select = [b"SELECT length('".as_slice(), s, b"'), hex('", s, b"')"].concat();
        let routed_select =
            [b"SELECT count(), hex('".as_slice(), s, b"') FROM items WHERE shop_id = ", (i + 1).to_string().as_bytes()]
                .concat();
        let post = |target: &str, body: &[u8]| {
            [
                format!(
                    "POST {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
                body,
            ]
            .concat()
        };
        let get =
            |target: String| format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").into_bytes();
        let requests: Vec<(&str, Vec<u8>)> = vec![
            ("query in the URL", get(format!("/?query={}", pct(&select)))),
            ("routed query in the URL", get(format!("/?query={}", pct(&routed_select)))),
            ("query in the body", post("/", &select)),
            ("routed query in the body", post("/", &routed_select)),
            (
                "query split between URL and body",
                post(&format!("/?query={}", pct(b"SELECT hex('")), &[s, b"')".as_slice()].concat()),
            ),
            // A setting's value: the server's own error (or answer) for those bytes.
            ("setting value", get(format!("/?query=SELECT%201&max_threads={}", pct(s)))),
            ("setting value, routed", get(format!("/?query={}&max_threads=2{}", pct(&routed_select), pct(s)))),
            ("a query parameter", get(format!("/?query=SELECT%201&param_x={}", pct(s)))),
        ];
        for (what, r) in requests {
            let (direct, through) = (ask(node, &r), ask(gwa, &r));
            assert_eq!((&through.0, &through.1), (&direct.0, &direct.1), "{what}, bytes {s:x?}");
            if what.starts_with("routed") {
                assert_eq!(through.2.as_deref(), Some("routed"), "{what}");
                routed += 1;
            }
        }
    }
    assert_eq!(routed, 2 * sequences.len());
    gw.stop();
}
