//! The HTTP front against replicas that answer as current ClickHouse releases do, where no
//! current server can run: fake replicas written from ClickHouse's sources, each behaviour
//! beside the file it follows (`src/Server/HTTP/HTTP1/HTTP1ServerResponse.cpp`, ClickHouse
//! 25.11 and later, and the same file before 25.11).
//!
//! * An error after the 200 head (`WriteBufferFromHTTP1ServerResponse::cancelWithException`): the
//!   rows so far, then the exception block (`\r\n__exception__\r\n<tag>\r\n<text>\n<length>
//!   <tag>\r\n__exception__\r\n` from 25.11, tagged by the head's `X-ClickHouse-Exception-Tag`;
//!   `__exception__\r\n<text>\n` before), then the connection closed with no final chunk. The
//!   client gets that answer as the fake sent it, cut the same way; the query is not run again,
//!   and its replica stays up.
//! * Progress headers (`writeHeaderProgressImpl`: one `X-ClickHouse-Progress: {json}` line every
//!   `http_headers_progress_interval_ms` while the body has not started): 600 of them pass.
//! * SERVER_OVERLOADED (Code 745) before the head (`setExceptionCode`: `X-ClickHouse-Exception-Code`
//!   and the status of `exceptionCodeToHTTPStatus`, 503): the read moves to the other replica.
//!
//! Each answer is compared with what the same request gets straight from the fake.

use chstorm_testenv::curl;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The tag a 25.11 server draws per answer (`getRandomASCIIString(EXCEPTION_TAG_LENGTH)`, 16).
const TAG: &str = "kq3vzmw8rt1ydx5a";
const THROW: &str = "Code: 395. DB::Exception: Value passed to 'throwIf' function is non-zero: while executing 'FUNCTION throwIf(greater(number, 3_UInt8) :: 1) -> throwIf(greater(number, 3_UInt8)) UInt8 : 2'. (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO) (version 26.9.1.1)";

/// A chunk of a chunked body.
fn chunk(data: &str) -> String {
    format!("{:x}\r\n{data}\r\n", data.len())
}

/// The head a current server writes for a query's answer (`startSendHeaders`,
/// `finishSendHeaders`): its own headers, then `X-ClickHouse-Summary` last before the blank line.
fn head(extra: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\nConnection: Close\r\nContent-Type: text/tab-separated-values; charset=UTF-8\r\nTransfer-Encoding: chunked\r\nX-ClickHouse-Server-Display-Name: fake\r\nX-ClickHouse-Format: TabSeparated\r\nX-ClickHouse-Timezone: UTC\r\n{extra}X-ClickHouse-Summary: {{\"read_rows\":\"4\",\"read_bytes\":\"32\"}}\r\n\r\n"
    )
}

/// What the fake answers to a request whose head (lower-cased) is `req`, and what it counts.
fn answer(req: &str, n: &Counts) -> (Vec<u8>, bool) {
    if req.starts_with("get /ping") {
        return (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nKeep-Alive: timeout=10\r\n\r\nOk.\n".to_vec(), true);
    }
    if req.contains("version%28%29") {
        // The gateway's own `SELECT version()`, as 26.9 answers it; not one of the test's queries.
        return (format!("{}{}0\r\n\r\n", head(""), chunk("26.9.1.1\n")).into_bytes(), false);
    }
    if req.contains("query_id=chgw-observe-") {
        // The gateway's replication-delay probe (its SQL in the body), as a server without
        // replicated tables answers it: one row of zeros.
        return (format!("{}{}0\r\n\r\n", head(""), chunk("0\t0\t0\t0\t0\n")).into_bytes(), false);
    }
    if req.contains("from%20system.settings") || req.contains("from+system.settings") {
        // The gateway's own check of the settings its config names: not one of the test's queries.
        return (format!("{}{}0\r\n\r\n", head(""), chunk("max_memory_usage\nmax_threads\n")).into_bytes(), false);
    }
    n.queries.fetch_add(1, Ordering::SeqCst);
    let rows = chunk("0\n1\n2\n3\n");
    let tagged = |t: &str| format!("X-ClickHouse-Exception-Tag: {t}\r\n");
    let text = if req.contains("tagged") {
        // 25.11: the block (a chunk of its own after `next()`), then `cancel()`: no final chunk.
        let block = format!("\r\n__exception__\r\n{TAG}\r\n{THROW}\n{} {TAG}\r\n__exception__\r\n", THROW.len() + 1);
        format!("{}{rows}{}", head(&tagged(TAG)), chunk(&block))
    } else if req.contains("marker") {
        // 24.x to 25.10: the marker line and the text, then no final chunk.
        format!("{}{rows}{}", head(""), chunk(&format!("__exception__\r\n{THROW}\n")))
    } else if req.contains("progress") {
        // 600 progress headers (a minute at 100 ms), then the answer.
        let mut p = String::new();
        for i in 1..=600u64 {
            p.push_str(&format!("X-ClickHouse-Progress: {{\"read_rows\":\"{i}\",\"read_bytes\":\"{}\",\"total_rows_to_read\":\"600\",\"elapsed_ns\":\"{}\"}}\r\n", i * 8, i * 100_000_000));
        }
        format!("{}{rows}0\r\n\r\n", head(&p))
    } else if req.contains("overloaded") && n.overloads {
        n.overloaded.fetch_add(1, Ordering::SeqCst);
        // Refused before its head: the code's header and status (`setExceptionCode`), the text.
        let text = "Code: 745. DB::Exception: CPU is overloaded, CPU is waiting for execution way more than executing, ratio of wait time (os_cpu_wait_microseconds metric) to busy time (os_cpu_busy_microseconds metric) is 5. (SERVER_OVERLOADED) (version 26.9.1.1)\n";
        format!("HTTP/1.1 503 Service Unavailable\r\nConnection: Close\r\nContent-Type: text/plain; charset=UTF-8\r\nX-ClickHouse-Exception-Code: 745\r\nContent-Length: {}\r\n\r\n{text}", text.len())
    } else {
        format!("{}{rows}0\r\n\r\n", head(&tagged(TAG)))
    };
    (text.into_bytes(), false)
}

#[derive(Default)]
struct Counts {
    /// Refuses `overloaded` reads with Code 745.
    overloads: bool,
    queries: AtomicUsize,
    overloaded: AtomicUsize,
}

/// A fake current replica on a free port: (its address, its counts).
fn fake(overloads: bool) -> (std::net::SocketAddr, Arc<Counts>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(Counts { overloads, ..Counts::default() });
    let n2 = n.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let n = n2.clone();
            std::thread::spawn(move || serve(conn, &n));
        }
    });
    (addr, n)
}

fn serve(conn: TcpStream, n: &Counts) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    chstorm_testenv::serve_http(conn, |req| answer(req, n));
}

/// What curl gets for `GET /?query=<sql>` (the fake reads only heads): (its exit code, the head's
/// status, the body it read, its error line).
fn fetch(url: &str, sql: &str) -> (i32, u16, String, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "20", "-G", "--data-urlencode", &format!("query={sql}"), url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (out.status.code().unwrap_or(-1), status, body.to_string(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn current_servers_framings_pass_as_the_servers_own_answers() {
    let (a, na) = fake(true);
    let (b, nb) = fake(false);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gw.yaml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:0\nhealth:\n  interval: 200ms\nclusters:\n  c:\n    shards:\n      - replicas: [http://{a}, http://{b}]\nusers:\n  - name: default\n    networks: [127.0.0.0/8]\n    cluster: c\n    metrics: true\n"
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let gw = rt.block_on(chstorm_gateway::Gateway::start(cfg)).unwrap();
    let url = format!("http://{}", gw.addr);
    let queries = || na.queries.load(Ordering::SeqCst) + nb.queries.load(Ordering::SeqCst);

    for kind in ["tagged", "marker"] {
        let sql = format!("SELECT number, throwIf(number > 3) FROM numbers(10) /* {kind} */");
        let direct = fetch(&format!("http://{a}"), &sql);
        let before = queries();
        let through = fetch(&url, &sql);
        // The rows and the exception block as the server wrote them, then the same cut (curl:
        // exit 18, the transfer closed with data outstanding).
        assert_eq!((through.0, through.1, &through.2), (direct.0, direct.1, &direct.2), "{kind}: {through:?}");
        assert_eq!(direct.0, 18, "{kind}: {direct:?}");
        assert!(through.2.contains(THROW), "{kind}: {through:?}");
        assert_eq!(queries() - before, 1, "{kind}: run once, not again elsewhere");
    }
    // No replica was marked down by the servers' own errors; each one's version is known (shown
    // to a user with `metrics: true`).
    let (s, _, body) = curl(&[&format!("{url}/replicas_status?verbose=1")]);
    assert_eq!(s, 200, "{body}");
    assert_eq!(body.matches("up. ").count(), 2, "{body}");
    assert_eq!(body.matches(" version 26.9.1\n").count(), 2, "{body}");

    // 600 progress headers: the answer, with every one of them.
    let sql = "SELECT 1 /* progress */";
    let q = format!("query={sql}");
    let (direct_status, direct_head, direct_body) = curl(&["-G", "--data-urlencode", &q, &format!("http://{a}")]);
    let (status, head, body) = curl(&["-G", "--data-urlencode", &q, &url]);
    assert_eq!((status, body.as_str()), (direct_status, direct_body.as_str()));
    let progress = |h: &str| h.lines().filter(|l| l.starts_with("x-clickhouse-progress:")).count();
    assert_eq!((progress(&head), progress(&direct_head)), (600, 600));

    // SERVER_OVERLOADED on one replica: the read runs on the other one. Reads go on until the
    // balancer (two random choices) has sent one to the overloaded replica: every one answered.
    for i in 0..200 {
        let q = format!("query=SELECT {i} /* overloaded */");
        let (status, _, body) = curl(&["-G", "--data-urlencode", &q, &url]);
        assert_eq!((status, body.as_str()), (200, "0\n1\n2\n3\n"), "read {i}");
        if na.overloaded.load(Ordering::SeqCst) > 0 {
            break;
        }
    }
    assert!(na.overloaded.load(Ordering::SeqCst) > 0, "the overloaded replica was tried");
    drop(gw);
}

/// What ClickHouse 26.9's `url()` (chdb-core, installed by `scripts/install-deps`) reads from
/// `base` for `sql`, or the code of its error.
fn chdb_url(python: &std::path::Path, base: &str, sql: &str) -> String {
    let q: String = sql
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    let script = format!(
        "import chdb\ntry:\n    print(chdb.query(\"SELECT * FROM url('{base}/?query={q}', TSV, 'x String') SETTINGS http_max_tries = 1\", 'TSV'), end='')\nexcept Exception as e:\n    print('ERROR', str(e).split('. ')[0])\n"
    );
    let out = std::process::Command::new("timeout").arg("120").arg(python).args(["-c", &script]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn clickhouse_26_9_s_url_through_the_gateway_as_straight_at_a_current_replica() {
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-clients/py/bin/python");
    if !python.exists() {
        eprintln!("skipped: chdb-core is not installed (scripts/install-deps installs it)");
        return;
    }
    let (a, _) = fake(false);
    let (b, _) = fake(false);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gw.yaml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:0\nclusters:\n  c:\n    shards:\n      - replicas: [http://{a}, http://{b}]\nusers:\n  - name: default\n    networks: [127.0.0.0/8]\n    cluster: c\n"
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let gw = rt.block_on(chstorm_gateway::Gateway::start(cfg)).unwrap();
    for sql in ["SELECT 1 /* rows */", "SELECT throwIf(number > 3) FROM numbers(10) /* tagged */"] {
        let direct = chdb_url(&python, &format!("http://{a}"), sql);
        let through = chdb_url(&python, &format!("http://{}", gw.addr), sql);
        eprintln!("{sql}: direct {direct:?}, through the gateway {through:?}");
        assert_eq!(through, direct, "{sql}");
        assert!(!direct.is_empty());
    }
    drop(gw);
}

/// In front of replicas that all answer `SELECT version()` as 26.9 does, every rule reads with the
/// current grammar alone: a `#` comment before a KILL is read as one (so the KILL is refused),
/// and forms only current releases read (`0b11`, `1_000`, a heredoc) reach the replica for a
/// user with rules, where both grammars would refuse them as read apart.
#[test]
fn in_front_of_current_releases_the_current_grammar_reads() {
    let (a, na) = fake(false);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gw.yaml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:0\nhealth:\n  interval: 200ms\nclusters:\n  c:\n    shards:\n      - replicas: [http://{a}]\nusers:\n  - name: default\n    networks: [127.0.0.0/8]\n    cluster: c\n  - name: app\n    networks: [127.0.0.0/8]\n    cluster: c\n    settings: {{max_memory_usage: 1000000000}}\n"
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let gw = rt.block_on(chstorm_gateway::Gateway::start(cfg)).unwrap();
    let url = format!("http://{}", gw.addr);
    let queries = || na.queries.load(Ordering::SeqCst);
    let send = |user: &str, sql: &str| {
        let (s, _, b) = curl(&["-u", &format!("{user}:"), "--data-binary", sql, &format!("{url}/")]);
        (s, b)
    };
    let before = queries();
    let (s, b) = send("default", "# c\nKILL QUERY WHERE 1");
    assert_eq!(s, 403, "{b}");
    assert!(b.contains("KILL"), "{b}");
    let (s, b) = send("app", "# c\nSELECT 1 SETTINGS max_memory_usage = 5");
    assert_eq!(s, 403, "a settings clause after a # comment is seen: {b}");
    assert!(b.contains("max_memory_usage"), "{b}");
    assert_eq!(queries(), before, "refused before any replica");
    for sql in ["SELECT 0b11, 1_000", "SELECT $$x$$", "# c\nSELECT 1", "SELECT 1 /* a /* b */ c */"] {
        let (s, b) = send("app", sql);
        assert_eq!(s, 200, "{sql:?} reaches the replica: {b}");
    }
    assert_eq!(queries() - before, 4);
    drop(gw);
}
