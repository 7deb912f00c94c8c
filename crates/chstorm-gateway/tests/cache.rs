//! The result cache and the merging of identical reads (`users[*].cache`), against a real 2x2
//! cluster: the answers of a cached user equal a plain user's byte for byte over generated
//! queries, formats and request shapes, and a kept answer equals the one it was kept from; N
//! identical reads at once make as many server queries as they got `X-Cache: MISS` (fewer than
//! N; counted in `system.query_log`), each with its own query id; an answer lives no longer
//! than its TTL; two users whose settings differ never get each other's answer; a client that
//! leaves leaves the others their answer; an error goes to the reads merged into it and is
//! never kept; what must not be shared is not; and a flood of distinct large answers stays
//! within `cache.max_size_mib`.

use chstorm_testenv::{post, start_shared_cluster, Env};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

/// The seed of the generated queries.
const SEED: u64 = 0x0054_2026;

/// Any setting may be set.
const ANY: &str = "    allowed_settings: [\"*\"]\n";

/// The gateway users: `plain` (no cache), `cached` (60 s), `extremes` (60 s, a fixed
/// `extremes = 1`), `guarded` (60 s, read-only), `brief` (1 s), `merger` (0 s: merging only)
/// and `native` (60 s, the native port's test's alone).
fn users() -> String {
    let user = |name: &str, extra: &str| {
        format!("  - name: {name}\n    password_sha256: \"\"\n    cluster: storm\n    metrics: true\n{extra}")
    };
    [
        user("plain", ANY),
        user("cached", &format!("{ANY}    cache: {{ttl: 60s, max_entry_size_kib: 512}}\n")),
        user("extremes", &format!("{ANY}    cache: {{ttl: 60s}}\n    settings: {{extremes: 1}}\n")),
        user("guarded", "    cache: {ttl: 60s}\n    readonly: true\n    allowed_settings: []\n"),
        user("brief", &format!("{ANY}    cache: {{ttl: 1s}}\n")),
        user("merger", &format!("{ANY}    cache: {{ttl: 0s}}\n")),
        user("native", &format!("{ANY}    cache: {{ttl: 60s}}\n")),
    ]
    .concat()
}

/// The HTTP address of a gateway with `users` (and `top`, top-level config lines).
fn start_gateway(env: &Env, top: &str, users: &str) -> SocketAddr {
    start_gateway_both(env, top, users).0
}

/// The HTTP and native addresses of a gateway with `users` (and `top`).
fn start_gateway_both(env: &Env, top: &str, users: &str) -> (SocketAddr, SocketAddr) {
    let (top, users) = (top.to_string(), users.to_string());
    let path = env.gateway_config(move |t| format!("{top}{}", t.replace("users:\n", &format!("users:\n{users}"))));
    let gw = env.rt.block_on(chstorm_gateway::Gateway::start(path)).unwrap();
    let addrs = (gw.addr, gw.native_addr.expect("the native port"));
    std::mem::forget(gw); // serves for the whole test process
    addrs
}

/// The cluster, and the HTTP and native addresses of a gateway with [`users`].
fn env() -> &'static (Env, SocketAddr, SocketAddr) {
    static ENV: OnceLock<(Env, SocketAddr, SocketAddr)> = OnceLock::new();
    ENV.get_or_init(|| {
        let env = start_shared_cluster();
        // No hedged copies: each client read is one server query, or none when merged or kept.
        let (addr, native) = start_gateway_both(&env, "hedging:\n  delay: off\n", &users());
        (env, addr, native)
    })
}

/// One HTTP answer: status, headers (names lower-cased) and the body's bytes (de-chunked).
#[derive(Debug, Clone)]
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
    fn cache(&self) -> Option<&str> {
        self.header("x-cache")
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A request: method, path and query, headers, body.
#[derive(Debug, Clone)]
struct Req {
    method: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Req {
    fn post(sql: &str) -> Req {
        Req { method: "POST", path: "/".into(), headers: Vec::new(), body: sql.as_bytes().to_vec() }
    }
    fn param(mut self, k: &str, v: &str) -> Req {
        let sep = if self.path.contains('?') { '&' } else { '?' };
        let v: String = percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string();
        self.path = format!("{}{sep}{k}={v}", self.path);
        self
    }
    fn header(mut self, k: &str, v: &str) -> Req {
        self.headers.push((k.into(), v.into()));
        self
    }
}

/// Sends `req` as `user` to `addr` over a connection of its own (read to its close), within
/// `timeout`; None when the connection broke or the time passed first.
fn send_within(addr: SocketAddr, user: &str, req: &Req, timeout: Duration) -> Option<Got> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(timeout)).unwrap();
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-ClickHouse-User: {user}\r\nContent-Length: {}\r\n",
        req.method,
        req.path,
        req.body.len()
    );
    for (k, v) in &req.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(&req.body).unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).ok()?;
    let at = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let text = String::from_utf8_lossy(&raw[..at]).into_owned();
    let mut lines = text.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(&raw[at + 4..])? } else { raw[at + 4..].to_vec() };
    Some(Got { status, headers, body })
}

fn send(addr: SocketAddr, user: &str, req: &Req) -> Got {
    send_within(addr, user, req, Duration::from_secs(30)).unwrap_or_else(|| panic!("no answer to {req:?}"))
}

fn gw(user: &str, req: &Req) -> Got {
    send(env().1, user, req)
}

/// A chunked body's data; None when it is cut.
fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&b[..eol]).ok()?.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(eol + 2..eol + 2 + size)?);
        b = b.get(eol + 4 + size..)?;
    }
}

/// Queries whose text contains `marker` that clients started on the servers (not a Distributed
/// table's queries to the other shard; `QueryStart`, or `ExceptionBeforeStart` for those that
/// failed before they started; not the test's own looks at `system.query_log` and
/// `system.processes`) (every node's
/// `system.query_log`, after `SYSTEM FLUSH LOGS`).
fn server_queries(marker: &str) -> u64 {
    // 18.16's SYSTEM FLUSH LOGS writes what its log thread took off the log's queue, which can
    // miss the last entries; the thread writes everything every `flush_interval_milliseconds`
    // (1 s in the local cluster's config), so once that has passed the flush has them all.
    std::thread::sleep(Duration::from_millis(1500));
    env()
        .0
        .node_urls()
        .iter()
        .map(|n| {
            let (s, b) = post(n, "SYSTEM FLUSH LOGS");
            assert_eq!(s, 200, "{b}");
            let sql = format!(
                "SELECT count() FROM system.query_log WHERE type IN (1, 3) AND is_initial_query AND query LIKE '%{marker}%' AND query NOT LIKE \
                 '%query_log%' AND query NOT LIKE '%system.processes%'"
            );
            let (s, b) = post(n, &sql);
            assert_eq!(s, 200, "{b}");
            b.trim().parse::<u64>().unwrap()
        })
        .sum()
}

/// A JSON answer without its `statistics` (the time and rows read, which change every run).
fn without_statistics(body: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(body);
    match text.find("\"statistics\"") {
        Some(at) => text[..at].as_bytes().to_vec(),
        None => body.to_vec(),
    }
}

/// A generated read: its request, and whether its answer changes between runs (JSON's
/// statistics).
fn generated(rng: &mut SmallRng, i: usize) -> (Req, bool) {
    const FORMATS: &[&str] = &[
        "TabSeparated",
        "TabSeparatedWithNamesAndTypes",
        "CSVWithNames",
        "JSONEachRow",
        "Values",
        "RowBinary",
        "Native",
        "PrettyCompact",
        "JSON",
        "JSONCompact",
    ];
    let format = FORMATS[rng.gen_range(0..FORMATS.len())];
    let k = rng.gen_range(1..5000u64);
    let sql = match rng.gen_range(0..4) {
        0 => format!("SELECT shop_id, item_id, title, price, tags FROM items FINAL WHERE shop_id = {k} ORDER BY item_id"),
        1 => format!(
            "SELECT category, count() AS n, sum(sold) FROM items FINAL WHERE shop_id IN ({k}, {}, {}) GROUP BY category \
             ORDER BY category",
            k + 1,
            k * 7
        ),
        2 => format!("SELECT number, toString(number * {k}) AS s, [number, {i}] FROM numbers({})", k % 3000),
        _ => format!("SELECT {i} AS case_no, count() FROM items FINAL WHERE shop_id > {k}"),
    };
    let changes = format.starts_with("JSON") && !format.contains("EachRow");
    let mut req = match rng.gen_range(0..4) {
        0 => Req::post(&format!("{sql} FORMAT {format}")),
        1 => Req::post(&sql).param("default_format", format),
        2 => Req { method: "GET", path: "/".into(), headers: Vec::new(), body: Vec::new() }
            .param("query", &format!("{sql} FORMAT {format}")),
        _ => Req::post(&format!("{sql} FORMAT {format}")).param("database", "default"),
    };
    if !changes && rng.gen_bool(0.3) {
        req = req.param("enable_http_compression", "1").header("Accept-Encoding", "gzip");
    }
    if rng.gen_bool(0.2) {
        req = req.param("max_block_size", "100");
    }
    (req, changes)
}

#[test]
fn cached_answers_equal_the_plain_ones_byte_for_byte() {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut seen = std::collections::HashSet::new();
    let (mut hits, mut gzipped) = (0, 0);
    for i in 0..150 {
        let (req, changes) = generated(&mut rng, i);
        if !seen.insert((req.path.clone(), req.body.clone(), req.headers.clone())) {
            continue;
        }
        let plain = gw("plain", &req);
        let first = gw("cached", &req);
        let second = gw("cached", &req);
        assert_eq!(plain.status, 200, "{req:?}: {}", plain.text());
        assert_eq!(plain.cache(), None, "a user without a cache gets no X-Cache");
        assert_eq!(first.cache(), Some("MISS"), "{req:?}");
        assert_eq!(second.cache(), Some("HIT"), "{req:?}");
        hits += 1;
        assert!(first.body == second.body, "a kept answer is the answer it was kept from: {req:?}");
        let norm = |g: &Got| if changes { without_statistics(&g.body) } else { g.body.clone() };
        let (a, b) = (norm(&plain), norm(&first));
        let at = a.iter().zip(&b).position(|(x, y)| x != y);
        assert!(a == b, "{req:?}: {} and {} bytes, first difference at {at:?}", a.len(), b.len());
        assert_eq!(first.status, plain.status);
        for h in ["content-type", "content-encoding", "x-clickhouse-format"] {
            assert_eq!(first.header(h), plain.header(h), "{h} of {req:?}");
            assert_eq!(second.header(h), plain.header(h), "{h} of {req:?}");
        }
        gzipped += usize::from(plain.header("content-encoding") == Some("gzip"));
        let age: u64 = second.header("age").expect("a hit carries its age").parse().unwrap();
        assert!(age <= 60);
    }
    assert!(hits > 100 && gzipped > 5, "the corpus has power: {hits} hits, {gzipped} compressed");
}

/// Sends `n` copies of `req` (each with a query_id of its own) at once as `user`.
fn at_once(user: &str, req: &Req, n: usize) -> Vec<Got> {
    let barrier = std::sync::Barrier::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (req, barrier) = (req.clone().param("query_id", &format!("q{i}-{}", std::process::id())), &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let got = gw(user, &req);
                    let want = format!("q{i}-{}", std::process::id());
                    assert_eq!(got.header("x-clickhouse-query-id"), Some(want.as_str()), "each its own query id");
                    got
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn count(got: &[Got], how: &str) -> u64 {
    got.iter().filter(|g| g.cache() == Some(how)).count() as u64
}

#[test]
fn identical_reads_at_once_make_one_server_query_each_miss() {
    for (user, marker) in [("cached", "mk_at_once_c"), ("merger", "mk_at_once_m")] {
        let req = Req::post(&format!("SELECT sleep(2), '{marker}', number FROM numbers(3)"));
        let got = at_once(user, &req, 12);
        for g in &got {
            assert_eq!((g.status, g.body.clone()), (200, got[0].body.clone()), "the same answer to all");
        }
        assert_eq!(got[0].text(), format!("0\t{marker}\t0\n0\t{marker}\t1\n0\t{marker}\t2\n"));
        let (miss, merged, hit) = (count(&got, "MISS"), count(&got, "MERGED"), count(&got, "HIT"));
        assert_eq!(miss + merged + hit, 12, "{user}");
        assert!(merged > 0 && miss < 12, "{user}: {miss} misses, {merged} merged");
        assert_eq!(server_queries(marker), miss, "{user}: one server query for each MISS");
        // Merging alone keeps nothing: the next read runs again.
        let next = gw(user, &req);
        let want = if user == "merger" { "MISS" } else { "HIT" };
        assert_eq!(next.cache(), Some(want), "{user}");
        assert_eq!(server_queries(marker), miss + u64::from(user == "merger"), "{user}");
    }
}

#[test]
fn no_answer_outlives_its_ttl() {
    let req = Req::post("SELECT 'mk_ttl', count() FROM items FINAL");
    let first = gw("brief", &req);
    assert_eq!(first.cache(), Some("MISS"));
    std::thread::sleep(Duration::from_millis(1200));
    let again = gw("brief", &req);
    assert_eq!(again.cache(), Some("MISS"), "past its 1 s TTL the answer is asked again");
    assert_eq!(again.body, first.body);
    assert_eq!(server_queries("mk_ttl"), 2);
}

#[test]
fn users_whose_rules_differ_never_share_an_answer() {
    let sql =
        "SELECT shop_id, 'mk_users', count() FROM items FINAL WHERE shop_id IN (1, 2, 3) GROUP BY shop_id ORDER BY \
               shop_id FORMAT TabSeparated";
    let req = Req::post(sql);
    let cached = gw("cached", &req);
    assert_eq!(cached.cache(), Some("MISS"));
    assert_eq!((cached.status, cached.text().lines().count()), (200, 3), "{}", cached.text());
    assert_eq!(cached.body, gw("plain", &req).body);
    assert_eq!(gw("cached", &req).cache(), Some("HIT"));
    // `extremes` runs as the same login with a fixed `extremes = 1`: its own answer, kept apart.
    let ext = gw("extremes", &req);
    assert_eq!(ext.cache(), Some("MISS"), "never the other user's answer");
    assert_eq!(ext.body, gw("plain", &req.clone().param("extremes", "1")).body);
    assert_ne!(ext.body, cached.body);
    let ext2 = gw("extremes", &req);
    assert_eq!((ext2.cache(), ext2.body.clone()), (Some("HIT"), ext.body.clone()));
    assert_eq!(gw("cached", &req).body, cached.body, "and the first keeps its own");
    // `guarded` is read-only (the gateway adds readonly=1): the same rows, a key of its own.
    let ro = gw("guarded", &req);
    assert_eq!((ro.cache(), ro.body.clone()), (Some("MISS"), cached.body.clone()), "{}", ro.text());
    assert_eq!(server_queries("mk_users"), 5, "3 kept answers, 2 plain reads");
}

#[test]
fn a_client_that_leaves_leaves_the_others_their_answer() {
    let req = Req::post("SELECT sleep(2), 'mk_leave'");
    let addr = env().1;
    std::thread::scope(|s| {
        let first = s.spawn(|| send_within(addr, "cached", &req, Duration::from_millis(500)));
        std::thread::sleep(Duration::from_millis(200));
        let second = s.spawn(|| gw("cached", &req));
        assert!(first.join().unwrap().is_none(), "the first client left before the answer");
        let second = second.join().unwrap();
        assert_eq!((second.status, second.text()), (200, "0\tmk_leave\n".to_string()));
        assert_eq!(second.cache(), Some("MERGED"), "it waited for the first one's query");
    });
    assert_eq!(server_queries("mk_leave"), 1);
    assert_eq!(gw("cached", &req).cache(), Some("HIT"), "the answer was whole, and kept");
}

#[test]
fn an_error_goes_to_its_merged_reads_and_is_never_kept() {
    let req = Req::post("SELECT sleep(2), 'mk_error', throwIf(1)");
    let got = at_once("cached", &req, 8);
    for g in &got {
        assert_eq!(g.status, 500, "{}", g.text());
        assert!(g.text().contains("Code: 395"), "{}", g.text());
    }
    let miss = count(&got, "MISS");
    assert!(count(&got, "MERGED") > 0 && count(&got, "HIT") == 0);
    assert_eq!(server_queries("mk_error"), miss);
    let later = gw("cached", &req);
    assert_eq!((later.status, later.cache()), (500, Some("MISS")), "a later read runs anew");
    assert_eq!(server_queries("mk_error"), miss + 1);
}

#[test]
fn what_must_not_be_shared_is_neither_merged_nor_kept() {
    let req = Req::post("SELECT 'mk_skip', count() FROM items FINAL");
    assert_eq!(gw("cached", &req).cache(), Some("MISS"));
    assert_eq!(gw("cached", &req).cache(), Some("HIT"));
    let asked = gw("cached", &req.clone().param("no_cache", "1"));
    assert_eq!((asked.status, asked.cache()), (200, None), "no_cache=1: {}", asked.text());
    let asked = gw("cached", &req.clone().header("Cache-Control", "no-cache"));
    assert_eq!((asked.status, asked.cache()), (200, None));
    assert_eq!(server_queries("mk_skip"), 3);
    for sql in [
        "SELECT now(), 'mk_volatile'",
        "SELECT rand(), 'mk_volatile'",
        "SELECT today(), 'mk_volatile'",
        "SELECT count(), 'mk_volatile' FROM system.one",
        "SELECT 'mk_volatile'; SELECT 2",
    ] {
        let g = gw("cached", &Req::post(sql));
        assert_eq!(g.cache(), None, "{sql}");
    }
    let session = gw("cached", &Req::post("SELECT 'mk_session'").param("session_id", "cache-test"));
    assert_eq!((session.status, session.cache()), (200, None));
    let metrics = gw("cached", &Req { method: "GET", path: "/metrics".into(), headers: vec![], body: vec![] }).text();
    for reason in ["asked", "function", "system_table", "not_select", "session"] {
        let line = format!("chstorm_gateway_cache_skipped_total{{user=\"cached\",reason=\"{reason}\"}}");
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
}

/// The value of the metric line starting with `name{labels}`.
fn metric(metrics: &str, line: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(line))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {line} in\n{metrics}"))
}

#[test]
fn a_flood_of_distinct_large_answers_stays_within_the_bound() {
    let env = &env().0;
    let users =
        "  - name: flood\n    password_sha256: \"\"\n    cluster: storm\n    metrics: true\n    cache: {ttl: 60s, \
                 max_entry_size_kib: 200}\n";
    let addr = start_gateway(env, "cache:\n  max_size_mib: 1\n", users);
    let mut kept = 0;
    for i in 0..30 {
        // 187 KB each: within the entry limit; 5 fill the store.
        let req = Req::post(&format!("SELECT number, 'mk_flood_{i:02}' FROM numbers(11000)"));
        let got = send(addr, "flood", &req);
        assert_eq!((got.status, got.cache()), (200, Some("MISS")));
        kept += got.body.len();
    }
    let metrics =
        send(addr, "flood", &Req { method: "GET", path: "/metrics".into(), headers: vec![], body: vec![] }).text();
    let held = metric(&metrics, "chstorm_gateway_cache_bytes{user=\"flood\"}");
    assert!(held > 0.0 && held <= (1 << 20) as f64, "{held} bytes held of {kept} sent");
    assert!(metric(&metrics, "chstorm_gateway_cache_evictions_total{user=\"flood\"}") >= 20.0);
    // The last ones are kept; the first were evicted.
    let last = send(addr, "flood", &Req::post("SELECT number, 'mk_flood_29' FROM numbers(11000)"));
    assert_eq!(last.cache(), Some("HIT"));
    let first = send(addr, "flood", &Req::post("SELECT number, 'mk_flood_00' FROM numbers(11000)"));
    assert_eq!(first.cache(), Some("MISS"));
    // An answer past the entry limit streams through, whole, and is not kept.
    let big = Req::post("SELECT number, 'mk_flood_big' FROM numbers(40000)");
    let a = send(addr, "flood", &big);
    let b = send(addr, "flood", &big);
    assert_eq!((a.cache(), b.cache()), (Some("MISS"), Some("MISS")));
    assert!(a.body.len() > 200 << 10 && a.body == b.body);
    assert!(a.body == gw("plain", &big).body);
    let held = metric(
        &send(addr, "flood", &Req { method: "GET", path: "/metrics".into(), headers: vec![], body: vec![] }).text(),
        "chstorm_gateway_cache_bytes{user=\"flood\"}",
    );
    assert!(held <= (1 << 20) as f64);
}

/// Rows of `system.processes` on any node whose query contains `marker`.
fn running(marker: &str) -> u64 {
    let sql =
        format!("SELECT count() FROM system.processes WHERE query LIKE '%{marker}%' AND query NOT LIKE '%processes%'");
    env().0.node_urls().iter().map(|n| post(n, &sql).1.trim().parse::<u64>().unwrap()).sum()
}

#[test]
fn a_read_every_client_left_is_cancelled_on_the_server() {
    // Seconds of work that the server checks for cancellation between blocks.
    let req = Req::post("SELECT count(), 'mk_abandon' FROM numbers(100000000000)");
    assert!(send_within(env().1, "cached", &req, Duration::from_millis(700)).is_none(), "the client left first");
    let started = std::time::Instant::now();
    while running("mk_abandon") > 0 {
        assert!(started.elapsed() < Duration::from_secs(20), "the abandoned query still runs");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server_queries("mk_abandon"), 1);
    let sql = "SYSTEM FLUSH LOGS";
    env().0.node_urls().iter().for_each(|n| assert_eq!(post(n, sql).0, 200));
    let ended: u64 = env()
        .0
        .node_urls()
        .iter()
        .map(|n| {
            let sql = "SELECT count() FROM system.query_log WHERE type = 4 AND is_initial_query AND query LIKE \
                       '%mk_abandon%' AND query NOT LIKE '%query_log%'";
            post(n, sql).1.trim().parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(ended, 1, "it ended in an exception (cancelled), not with an answer");
    assert_eq!(gw("cached", &Req::post("SELECT 'mk_abandon_after'")).cache(), Some("MISS"), "the gateway serves on");
}

/// `clickhouse-client` as `user` against the native port `at`: (exit status, stdout, stderr).
fn client(at: SocketAddr, user: &str, sql: &str, args: &[&str]) -> (bool, Vec<u8>, String) {
    let port = at.port().to_string();
    let out = std::process::Command::new("clickhouse-client")
        .args(["--host", "127.0.0.1", "--port", &port, "--user", user, "--query", sql])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("clickhouse-client runs");
    (out.status.success(), out.stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The gateway's `chstorm_gateway_cache_{what}_total` of `user`, or 0.
fn cache_count(addr: SocketAddr, user: &str, what: &str) -> f64 {
    let text = send(addr, user, &Req { method: "GET", path: "/metrics".into(), headers: vec![], body: vec![] }).text();
    let line = format!("chstorm_gateway_cache_{what}_total{{user=\"{user}\"}}");
    text.lines().find(|l| l.starts_with(&line)).and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0)
}

#[test]
fn the_native_port_serves_kept_answers_as_the_server_sent_them() {
    let (_, http, native) = *env();
    let formats = ["TabSeparated", "TabSeparatedWithNamesAndTypes", "CSV", "JSONEachRow", "Values", "PrettyCompact"];
    let mut rng = SmallRng::seed_from_u64(SEED ^ 0x4e);
    let hits_before = cache_count(http, "native", "hits");
    let n = 24;
    for i in 0..n {
        let k = rng.gen_range(1..5000u64);
        let format = formats[i % formats.len()];
        let sql = match i % 3 {
            0 => format!("SELECT shop_id, item_id, title, price, 'mk_nat_{i}' FROM items FINAL WHERE shop_id = {k} ORDER BY item_id"),
            1 => format!("SELECT number, toString(number * {k}), 'mk_nat_{i}' FROM numbers({})", k % 4000),
            _ => format!("SELECT category, count(), 'mk_nat_{i}' FROM items FINAL WHERE shop_id < {k} GROUP BY category ORDER BY category"),
        };
        let sql = format!("{sql} FORMAT {format}");
        let plain = client(native, "plain", &sql, &[]);
        let first = client(native, "native", &sql, &[]);
        let second = client(native, "native", &sql, &[]);
        assert!(plain.0 && first.0 && second.0, "{sql}: {} / {} / {}", plain.2, first.2, second.2);
        assert!(plain.1 == first.1 && first.1 == second.1, "{sql}: the same bytes, kept or not");
    }
    assert_eq!(cache_count(http, "native", "hits") - hits_before, n as f64, "every second read a hit");
    // One server query for the plain user's read and one for the cached user's first: none for a hit.
    assert_eq!(server_queries("mk_nat_"), 2 * n as u64);
    // What the replica reads makes another key: a setting, the port (HTTP is keyed apart).
    let sql = "SELECT number, 'mk_nat_key' FROM numbers(300)";
    let a = client(native, "native", sql, &[]);
    let b = client(native, "native", sql, &["--max_block_size=100"]);
    let c = client(native, "native", sql, &[]);
    assert!(a.0 && b.0 && c.0 && a.1 == b.1 && b.1 == c.1);
    let over_http = gw("native", &Req::post(sql));
    assert_eq!(over_http.cache(), Some("MISS"));
    assert_eq!(server_queries("mk_nat_key"), 3, "a kept answer per key, the HTTP one apart");
    // An error is not kept.
    // An answer past the entry limit (512 KiB) goes whole, and is not kept.
    let big = "SELECT number, toString(cityHash64(number)), 'mk_nat_big' FROM numbers(100000)";
    let (x, y) = (client(native, "native", big, &[]), client(native, "native", big, &[]));
    assert!(x.0 && y.0 && x.1.len() > 2 << 20 && x.1 == y.1 && x.1 == client(native, "plain", big, &[]).1);
    assert_eq!(server_queries("mk_nat_big"), 3);
    // An error, after blocks of rows, is not kept.
    let bad = "SELECT throwIf(number = 5), 'mk_nat_err' FROM numbers(10)";
    let (ok1, out1, e1) = client(native, "native", bad, &["--max_block_size=1"]);
    let (ok2, _, e2) = client(native, "native", bad, &["--max_block_size=1"]);
    assert!(!ok1 && !ok2 && e1.contains("Code: 395") && e2.contains("Code: 395"), "{e1} / {e2}");
    assert!(String::from_utf8_lossy(&out1).contains("mk_nat_err"), "rows came before the error");
    assert_eq!(server_queries("mk_nat_err"), 2);
    // A query the plan refuses (nested past limits.max_query_depth, 300) is refused as for a
    // user without a cache, and reaches no server.
    let deep = format!("SELECT 'mk_nat_deep', {}1{}", "(SELECT ".repeat(301), ")".repeat(301));
    let (ok_p, _, e_p) = client(native, "plain", &deep, &[]);
    let (ok_n, _, e_n) = client(native, "native", &deep, &[]);
    let too_deep = |e: &str| e.contains("Code: 167") && e.contains("limits.max_query_depth");
    assert!(!ok_p && !ok_n && too_deep(&e_p) && too_deep(&e_n), "{e_p} / {e_n}");
    assert!(client(native, "native", "SELECT 'mk_nat_after'", &[]).0, "the port answers after a refusal");
    assert_eq!(server_queries("mk_nat_deep"), 0);
}

#[test]
fn kept_and_merged_answers_wait_in_no_queue() {
    // One query of the user's at a time and no queue: a second query that needs a server is
    // refused at once, while a read answered from the cache needs none.
    let env = &env().0;
    let users = "  - name: narrow\n    password_sha256: \"\"\n    cluster: storm\n    metrics: true\n    \
                 max_concurrency: 1\n    queue_size: 0\n    cache: {ttl: 60s}\n";
    let (http, native) = start_gateway_both(env, "hedging:\n  delay: off\n", users);
    let kept = "SELECT 'mk_queue_kept', count() FROM items FINAL";
    let first = send(http, "narrow", &Req::post(kept));
    assert_eq!((first.status, first.cache()), (200, Some("MISS")), "{}", first.text());
    assert!(client(native, "narrow", kept, &[]).0);
    let slow_read = &Req::post("SELECT sleep(3), 'mk_queue_slow'");
    std::thread::scope(|s| {
        // The one slot, held by a slow read; an identical one is merged into it.
        let slow = s.spawn(move || send(http, "narrow", slow_read));
        let started = std::time::Instant::now();
        while running("mk_queue_slow") == 0 {
            assert!(started.elapsed() < Duration::from_secs(10), "the slow query never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let merged = s.spawn(move || send(http, "narrow", slow_read));
        let hit = send(http, "narrow", &Req::post(kept));
        assert_eq!((hit.status, hit.cache(), hit.body.clone()), (200, Some("HIT"), first.body.clone()));
        let native_hit = client(native, "narrow", kept, &[]);
        assert!(native_hit.0 && native_hit.1 == first.body, "{}", native_hit.2);
        let other = send(http, "narrow", &Req::post("SELECT 'mk_queue_other'"));
        assert_eq!(other.status, 429, "a read that needs a server waits for the slot: {}", other.text());
        let native_other = client(native, "narrow", "SELECT 'mk_queue_other'", &[]);
        assert!(!native_other.0 && native_other.2.contains("202"), "{}", native_other.2);
        let (slow, merged) = (slow.join().unwrap(), merged.join().unwrap());
        assert_eq!((slow.status, slow.cache()), (200, Some("MISS")));
        assert_eq!((merged.status, merged.cache()), (200, Some("MERGED")));
        assert_eq!(merged.body, slow.body);
    });
    assert_eq!(server_queries("mk_queue_kept"), 2, "one server query for each port's kept answer");
    assert_eq!(server_queries("mk_queue_slow"), 1);
}
