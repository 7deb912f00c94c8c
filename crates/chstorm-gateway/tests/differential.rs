//! The gateway must never change an answer: a corpus of generated queries (fixed seed), each
//! sent straight to a node (through the Distributed table `items`, the ground truth) and
//! through the gateway, on a real 2x2 cluster with the `items` dataset. The status, the
//! ClickHouse error code and the rows (sorted) must be equal.
//!
//! The corpus: hand-written cases of every kind, then generated variants of WHERE shapes
//! (=, ==, IN, reversed, OR, NOT, BETWEEN, AND chains, parentheses), literal spellings (decimal,
//! hex, leading zeros = octal on 18.16, exponents, floats, `+`, negatives, strings, function
//! calls), comments (`--`, `/* */`, `#`, which 18.16 refuses), keyword case, white space and
//! newlines, subqueries, IN subqueries, UNION ALL, GLOBAL JOIN, PREWHERE, FINAL, SETTINGS,
//! FORMAT, other databases (`otherdb.items`, `?database=`, `X-ClickHouse-Database`), sessions,
//! table functions, gzip bodies, and splits of the query between `?query=` and the body; and two
//! generated classes: column qualifiers naming the routed table in every form (`db.t.col`,
//! `t.col`, `alias.col`, the table's name beside its alias, quoted parts, `t.*`), and settings
//! that change a Distributed query's answer (`distributed_group_by_no_merge`, ...) in a
//! `SETTINGS` clause or the URL, which must never be routed. Last, queries nested past
//! `limits.max_query_depth` must be refused with Code 167 over HTTP and native, every node up.
//!
//! The test checks its own power: enough answers must come back routed (else it would only
//! compare fan-out with fan-out), some octal literals must name another shard than their
//! decimal reading, and `otherdb.items_local` holds other rows than `otherdb.items`, so a wrong
//! rewrite gives a wrong answer rather than an error.

use chstorm_gateway::request::join_query;
use chstorm_gateway::{Config, Gateway};
use chstorm_sql::route::Router;
use chstorm_testenv::{post, start_cluster, Env};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The seed of the generated corpus.
const SEED: u64 = 0x1105_2026;
/// Generated cases on top of the hand-written ones.
const GENERATED: usize = 400;

#[derive(Clone, Debug, Default)]
struct Case {
    kind: String,
    /// URL parameters other than `query` (database, settings, session_id).
    params: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    /// The `?query=` part, if any.
    url_sql: Option<String>,
    body: String,
    gzip: bool,
    /// Statements run first in the same session (then `params` gets a session_id).
    setup: Vec<String>,
    /// Sent with an empty body and the query in the URL.
    empty_body: bool,
}

impl Case {
    fn body(kind: &str, sql: impl Into<String>) -> Case {
        Case { kind: kind.into(), body: sql.into(), ..Case::default() }
    }
    fn param(mut self, k: &str, v: &str) -> Case {
        self.params.push((k.into(), v.into()));
        self
    }
    /// The text the server runs.
    fn sql(&self) -> String {
        join_query(self.url_sql.as_deref().unwrap_or(""), self.body.as_bytes())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    /// The ClickHouse error code of an error answer.
    code: Option<u32>,
    /// Sorted lines of a successful answer.
    rows: Vec<String>,
    route: Option<String>,
    raw: String,
}

impl Answer {
    fn same(&self, other: &Answer) -> bool {
        self.status == other.status
            && if self.status == 200 { self.rows == other.rows } else { self.code == other.code }
    }
}

fn error_code(body: &str) -> Option<u32> {
    let at = body.find("Code: ")? + 6;
    body[at..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(None, |acc, d| Some(acc.unwrap_or(0) * 10 + u32::from(d - b'0')))
}

/// One HTTP/1.1 exchange on a fresh connection (`Connection: close`), 30 s at most.
fn http(base: &str, path_and_query: &str, headers: &[(String, String)], body: &[u8]) -> Answer {
    let addr = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "POST {path_and_query} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap_or_else(|e| panic!("read from {addr}: {e}"));
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no head from {addr}"));
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let mut payload = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        payload = dechunk(&payload);
    }
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let route = head.lines().find_map(|l| l.strip_prefix("x-chstorm-route: ")).map(str::to_string);
    let text = String::from_utf8_lossy(&payload).into_owned();
    let mut rows: Vec<String> = text.lines().map(str::to_string).collect();
    rows.sort();
    let code = if status == 200 { None } else { error_code(&text) };
    Answer { status, code, rows, route, raw: text }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else { return out };
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = eol + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
}

fn encode(params: &[(String, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| {
            format!("{}={}", utf8_percent_encode(k, NON_ALPHANUMERIC), utf8_percent_encode(v, NON_ALPHANUMERIC))
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut child = std::process::Command::new("gzip")
        .arg("-c")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}

/// Runs `case` against `base`, its session (if any) named `session`.
fn run(base: &str, case: &Case, session: &str) -> Answer {
    let mut params = case.params.clone();
    if !case.setup.is_empty() {
        params.push(("session_id".into(), session.into()));
        for stmt in &case.setup {
            let a = http(base, &format!("/?{}", encode(&params)), &[], stmt.as_bytes());
            assert_eq!(a.status, 200, "session setup `{stmt}` on {base}: {}", a.raw);
        }
    }
    if let Some(q) = &case.url_sql {
        params.push(("query".into(), q.clone()));
    }
    let mut headers = case.headers.clone();
    let body = if case.empty_body {
        Vec::new()
    } else if case.gzip {
        headers.push(("Content-Encoding".into(), "gzip".into()));
        gzip(case.body.as_bytes())
    } else {
        case.body.clone().into_bytes()
    };
    let path = if params.is_empty() { "/".to_string() } else { format!("/?{}", encode(&params)) };
    http(base, &path, &headers, &body)
}

/// The spellings of shop `k` as a literal, with what they are (see `crates/chstorm-sql/src/route/extract.rs`).
fn literal(k: u64, rng: &mut SmallRng) -> String {
    match rng.gen_range(0..20) {
        0..=8 => k.to_string(),
        9 => format!("0x{k:X}"),
        10 => format!("0x{k:x}"),
        11 => format!("0{k:o}"), // octal spelling: equals k on 18.16
        12 => format!("0{k}"),   // a leading zero: octal on 18.16, so another value
        13 => format!("{k}e0"),
        14 => format!("{k}.0"),
        15 => format!("+{k}"),
        16 => format!("-{k}"),
        17 => format!("'{k}'"),
        18 => format!("toUInt64({k})"),
        _ => format!("- 0x{k:X}"),
    }
}

/// WHERE shapes and query forms; `{L}` and `{M}` are literals, `{K}` the first shop in decimal.
///
/// Not here: a scalar subquery in the select list (`SELECT (SELECT count() FROM items WHERE
/// shop_id = 155) FROM items WHERE shop_id = 155`): 18.16 answers it on the nodes of the shard
/// that holds the key and fails on the others (Code 10, `Not found column _subquery...`), so
/// the direct answer itself depends on the node asked. The router does not route it
/// (`Unrouted::Subquery`).
const SHAPES: &[&str] = &[
    "SELECT count() FROM items FINAL WHERE shop_id = {L}",
    "SELECT count(), sum(item_id), max(version) FROM items WHERE shop_id = {L} AND item_id % 3 = 1",
    "SELECT item_id, version, stock FROM items FINAL WHERE shop_id = {L} AND item_id < 3000",
    "SELECT count() FROM items WHERE {L} = shop_id",
    "SELECT count() FROM items WHERE shop_id == {L}",
    "SELECT count() FROM items WHERE shop_id IN ({L})",
    "SELECT count() FROM items WHERE shop_id IN {L}",
    "SELECT count() FROM items FINAL WHERE shop_id = {L} OR shop_id = {M}",
    "SELECT count() FROM items WHERE NOT shop_id = {L}",
    "SELECT count() FROM items WHERE shop_id = {L} AND NOT (item_id > 5000)",
    "SELECT count() FROM items WHERE (shop_id = {L}) AND (is_active = 1)",
    "SELECT sum(stock) FROM items PREWHERE shop_id = {L} WHERE stock > 10",
    "SELECT count() FROM items WHERE shop_id IN ({L}, {M})",
    "SELECT count() FROM items WHERE shop_id = {L} AND shop_id = {M}",
    "SELECT count() FROM (SELECT * FROM items FINAL WHERE shop_id = {L})",
    "SELECT count() FROM (SELECT * FROM items WHERE shop_id = {L}) WHERE item_id > 100",
    "SELECT count() FROM items WHERE shop_id = {L} AND item_id IN (SELECT item_id FROM items WHERE shop_id = {L} AND version > 1)",
    "SELECT count() FROM items WHERE shop_id = {L} AND item_id GLOBAL IN (SELECT item_id FROM items WHERE shop_id = {L} AND version > 1)",
    "SELECT count() FROM items WHERE shop_id = {L} AND item_id NOT IN (SELECT item_id FROM items WHERE shop_id = {L})",
    "SELECT count() FROM items WHERE shop_id = {L} AND item_id = (SELECT max(item_id) FROM items WHERE shop_id = {L})",
    "SELECT count() FROM items WHERE shop_id = {L} AND item_id IN items",
    "SELECT count() FROM items WHERE shop_id = {L} UNION ALL SELECT count() FROM items WHERE shop_id = {M}",
    "SELECT count() FROM items WHERE shop_id = {L} UNION ALL SELECT count() FROM items WHERE shop_id = {L}",
    "SELECT count() FROM items AS a GLOBAL ANY INNER JOIN (SELECT shop_id, item_id FROM items WHERE shop_id = {L}) AS b USING (shop_id, item_id) WHERE a.shop_id = {L}",
    "SELECT count() FROM items AS i WHERE i.shop_id = {L}",
    "SELECT items.item_id FROM items FINAL WHERE items.shop_id = {L}",
    "SELECT count() FROM `items` WHERE `shop_id` = {L}",
    "SELECT count() FROM default.items WHERE \"shop_id\" = {L}",
    "SELECT count() FROM items WHERE shop_id = {L} SETTINGS max_threads = 1",
    "SELECT shop_id, count() FROM items FINAL WHERE shop_id = {L} GROUP BY shop_id WITH TOTALS",
    "SELECT count(), min(item_id) FROM items FINAL WHERE shop_id = {L} FORMAT CSV",
    "SELECT item_id, title FROM items FINAL WHERE shop_id = {L} AND item_id < 2000 FORMAT JSONEachRow",
    "SELECT item_id FROM items WHERE shop_id = {L} ORDER BY item_id LIMIT 3 BY shop_id",
    "SELECT count() FROM items WHERE shop_id = {L} AND title LIKE '%a%'",
    "SELECT count() FROM items WHERE shop_id != {L}",
    "SELECT count() FROM items WHERE shop_id = {L} AND item_id BETWEEN 10 AND 9000",
    "SELECT count() FROM items WHERE shop_id = {L} AND (item_id < 10 OR item_id > 100)",
    "SELECT count() FROM items WHERE shop_id = {L} AND shop_id = {L}",
    "WITH {L} AS k SELECT count() FROM items WHERE shop_id = k",
    "SELECT count() FROM items ARRAY JOIN tags AS tag WHERE shop_id = {L}",
    "SELECT count() FROM items WHERE shop_id = {L} AND item_id IN (SELECT item_id FROM items WHERE shop_id = {M})",
    "SELECT count() FROM items WHERE shop_id = {L};",
    "SELECT count() FROM items WHERE shop_id > {L} AND shop_id < {L} + 3",
    "SELECT count() FROM items FINAL PREWHERE shop_id = {L} WHERE shop_id = {L}",
    "SELECT count() FROM otherdb.items WHERE shop_id = {L}",
    "SELECT count() FROM items WHERE shop_id = {L} AND item_id IN (SELECT item_id FROM otherdb.items WHERE shop_id = {L})",
];

const KEYWORDS: &[&str] = &[
    "SELECT", "FROM", "WHERE", "AND", "OR", "NOT", "IN", "FINAL", "PREWHERE", "UNION", "ALL", "GROUP", "BY", "ORDER",
    "LIMIT", "SETTINGS", "FORMAT", "AS", "JOIN", "GLOBAL", "ANY", "INNER", "USING", "WITH", "TOTALS", "BETWEEN",
    "LIKE", "ARRAY",
];

/// Keyword case, white space, newlines and comments between the words of `sql` (which has no
/// spaces inside its string literals).
fn reshape(sql: &str, rng: &mut SmallRng) -> String {
    let mut out = String::new();
    for (i, word) in sql.split(' ').enumerate() {
        if i > 0 {
            out.push_str(match rng.gen_range(0..12) {
                0 => "\n",
                1 => "\t",
                2 => "  ",
                3 => " /* c */ ",
                4 => " -- c\n",
                5 => "\r\n ",
                6 => "/**/",
                _ => " ",
            });
        }
        if KEYWORDS.contains(&word) && rng.gen_bool(0.3) {
            let w: String = word.chars().map(|c| if rng.gen_bool(0.5) { c.to_ascii_lowercase() } else { c }).collect();
            out.push_str(&w);
        } else {
            out.push_str(word);
        }
    }
    out
}

/// `sql` split between `?query=` and the body: at a space (the server's newline replaces
/// nothing that matters), or anywhere.
fn split(kind: &str, sql: &str, router: &Router, db: Option<&str>, rng: &mut SmallRng) -> Case {
    let spaces: Vec<usize> = sql.match_indices(' ').map(|(i, _)| i).collect();
    let at = if rng.gen_bool(0.8) && !spaces.is_empty() {
        spaces[rng.gen_range(0..spaces.len())]
    } else {
        let mut at = rng.gen_range(1..sql.len());
        while !sql.is_char_boundary(at) {
            at -= 1;
        }
        at
    };
    split_at(kind, &sql[..at], &sql[at..], router, db)
}

fn split_at(kind: &str, url: &str, body: &str, router: &Router, db: Option<&str>) -> Case {
    // Today's proxy routes on the URL part alone: where that routes, the case waits for the plan.
    let routed_on_url = router.route(url, None, None, db, chstorm_sql::lexer::Grammar::V18_16).is_ok();
    let kind = if routed_on_url { "split-routed".to_string() } else { kind.to_string() };
    Case { kind, url_sql: Some(url.to_string()), body: body.to_string(), ..Case::default() }
}

fn corpus(env: &Env, router: &Router) -> Vec<Case> {
    let native11 =
        env.cluster.topology().node(1, 1).unwrap().native_url.trim_start_matches("clickhouse://").to_string();
    let http12 = env.node_url(1, 2);
    // The hand-written cases.
    let mut c: Vec<Case> = vec![
        Case::body("issue:octal", "SELECT count() FROM items FINAL WHERE shop_id = 010"),
        split_at(
            "issue:url+body",
            "SELECT count() FROM items FINAL WHERE shop_id = 42",
            " OR shop_id = 43",
            router,
            None,
        ),
        Case::body("issue:otherdb", "SELECT count(), sum(item_id) FROM otherdb.items WHERE shop_id = 42"),
        Case::body("issue:database", "SELECT count(), sum(item_id) FROM items WHERE shop_id = 42")
            .param("database", "otherdb"),
    ];
    let mut s = Case::body("session-routed", "SELECT item_id FROM items FINAL WHERE shop_id = 42");
    s.setup = vec!["SET max_result_rows = 1".into()];
    c.push(s);
    let mut s = Case::body(
        "session-routed",
        "SELECT count() FROM items FINAL WHERE shop_id = 42 AND item_id IN (SELECT x FROM tmp)",
    );
    s.setup = vec![
        "CREATE TEMPORARY TABLE tmp (x UInt64) ENGINE = Memory".into(),
        "INSERT INTO tmp SELECT item_id FROM items FINAL WHERE shop_id = 42 AND item_id % 2 = 0".into(),
    ];
    c.push(s.clone());
    s.kind = "session".into();
    s.body = "SELECT count() FROM tmp".into();
    c.push(s);
    c.push(Case::body(
        "issue:settings",
        "SELECT count() FROM items WHERE shop_id = 42 SETTINGS max_threads = 64, max_memory_usage = 0",
    ));
    c.push(Case::body("issue:table-function", "SELECT count() FROM numbers(10)"));
    c.push(Case::body(
        "issue:table-function",
        format!("SELECT count() FROM remote('{native11}', default.items) WHERE shop_id = 42"),
    ));
    c.push(Case::body(
        "issue:table-function",
        format!("SELECT * FROM url('{http12}/?query=SELECT+count()+FROM+items+WHERE+shop_id=42', TSV, 'c UInt64')"),
    ));
    c.push(Case::body("issue:table-function", "SELECT * FROM file('nope.tsv', TSV, 'x UInt8')"));
    let mut g = Case::body("issue:gzip", "SELECT count() FROM items FINAL WHERE shop_id = 42");
    g.gzip = true;
    c.push(g.clone());
    g.body = "SELECT count() FROM items FINAL WHERE shop_id = 010".into();
    c.push(g);
    c.push(Case {
        kind: "post-empty-body".into(),
        url_sql: Some("SELECT count() FROM items FINAL WHERE shop_id = 42".into()),
        empty_body: true,
        ..Case::default()
    });
    // Octal and other leading-zero literals, and the octal spelling of a shop.
    for lit in [
        "010", "011", "012", "013", "014", "015", "016", "017", "020", "021", "022", "023", "024", "025", "026", "027",
        "030", "042", "052", "0100", "00", "0", "08", "09", "019", "0010", "-010", "010.0", "0x0A", "0X2a", "-0x2A",
        "+42", "42e0", "4.2e1", "'42'", "'010'", "- 42", "-/**/42", "0x1e", "0x1E+2",
    ] {
        c.push(Case::body("literal", format!("SELECT count() FROM items FINAL WHERE shop_id = {lit}")));
    }
    // Splits between the URL and the body.
    let sp = |url: &str, body: &str| split_at("split", url, body, router, None);
    c.push(sp("SELECT count() FROM items FINAL WHERE shop_id = 42 -- note", " OR shop_id = 43"));
    c.push(sp("SELECT count() FROM items FINAL WHERE shop_id = 42 /*", "*/ OR shop_id = 43"));
    c.push(sp("SELECT count() FROM items FINAL WHERE shop_id = 4", "2"));
    c.push(sp("SELECT count() FROM items FINAL", " WHERE shop_id = 42"));
    c.push(sp("SELECT count() FROM items FINAL WHERE shop_id = 42", " AND item_id > 100"));
    c.push(sp("SELECT count() FROM items FINAL WHERE shop_id = 42", " UNION ALL SELECT count() FROM items"));
    c.push(sp("", "SELECT count() FROM items FINAL WHERE shop_id = 42"));
    c.push(sp("SELECT count() FROM items FINAL WHERE shop_id = 42", ""));
    c.push(sp("SELECT count() FROM items FINAL WHERE shop_id = 0", "10"));
    c.push(sp("SELECT count() FROM items FINAL WHERE shop_id = 42 SETTINGS max_threads = 1", ", max_result_rows = 1"));
    // Databases.
    for shop in ["42", "43", "8", "10", "1"] {
        let q = format!("SELECT count(), sum(item_id) FROM items WHERE shop_id = {shop}");
        c.push(Case::body("database", q.clone()).param("database", "otherdb"));
        c.push(Case::body("database", q.clone()).param("database", "default"));
        c.push(Case::body("database", q.clone()).param("database", ""));
        c.push(Case::body("database", q.clone()).param("database", "system"));
        c.push(Case::body("database", q.clone()).param("database", "otherdb").param("database", "default"));
        c.push(Case::body("database", q.clone()).param("database", "default").param("database", "otherdb"));
        let mut h = Case::body("database", q.clone());
        h.headers.push(("X-ClickHouse-Database".into(), "otherdb".into()));
        c.push(h);
        c.push(Case::body("database", q.replace("FROM items", "FROM default.items")).param("database", "otherdb"));
        c.push(Case::body("database", q.replace("FROM items", "FROM otherdb.items")));
        c.push(Case::body("database", q.replace("FROM items", "FROM `otherdb`.`items` FINAL")));
        c.push(Case::body("database", q.replace("FROM items", "FROM otherdb.items_local")));
        let mut sc = split_at("split", &q[..20], &q[20..], router, Some("otherdb"));
        sc.params.push(("database".into(), "otherdb".into()));
        c.push(sc);
    }
    // Odd texts.
    for sql in [
        "SELECT count() FROM items WHERE shop_id = 42 # c",
        "SELECT count() FROM items WHERE shop_id = 42; SELECT 1",
        "SELECT count() FROM items WHERE shop_id = 42 /* open",
        "SELECT count() FROM items WHERE shop_id = '42",
        "SELECT count() FROM ITEMS WHERE shop_id = 42",
        "SELECT count() FROM items WHERE SHOP_ID = 42",
        "select count() from items where shop_id = 42",
        "SELECT count() FROM items AS where WHERE shop_id = 42",
        "SELECT count() FROM items WHERE shop_id = 42 AND item_id = 42 -- OR shop_id = 43",
        "SELECT count() FROM items WHERE title = 'shop_id = 43' AND shop_id = 42",
        "SELECT count() FROM numbers(3) WHERE number = 1",
        "SELECT count() FROM items WHERE shop_id = 42 FORMAT TSVWithNames",
    ] {
        c.push(Case::body("odd", sql));
    }
    // Generated.
    let mut rng = SmallRng::seed_from_u64(SEED);
    let hand = c.len();
    while c.len() < hand + GENERATED {
        let k: u64 = match rng.gen_range(0..6) {
            0 => [0, 201, 5000, 18446744073709551615][rng.gen_range(0..4)],
            1 => rng.gen_range(1..10),
            _ => rng.gen_range(1..=200),
        };
        let m: u64 = if rng.gen_bool(0.3) { k } else { rng.gen_range(1..=200) };
        let shape = SHAPES[rng.gen_range(0..SHAPES.len())];
        let sql = shape
            .replace("{L}", &literal(k, &mut rng))
            .replace("{M}", &literal(m, &mut rng))
            .replace("{K}", &k.to_string());
        let sql = if rng.gen_bool(0.5) { reshape(&sql, &mut rng) } else { sql };
        let db = rng.gen_range(0..10);
        let mut case = if rng.gen_range(0..6) == 0 {
            split("split", &sql, router, if db == 0 { Some("otherdb") } else { None }, &mut rng)
        } else {
            Case::body("generated", sql)
        };
        if db == 0 {
            case.params.push(("database".into(), "otherdb".into()));
        }
        if rng.gen_range(0..12) == 0 {
            case.gzip = case.url_sql.is_none();
        }
        c.push(case);
    }
    c.extend(qualified_and_settings(&mut rng));
    c
}

/// Generated members of two classes: column qualifiers naming the routed table in every form
/// 18.16 takes (`db.table.col`, `table.col`, `alias.col`, the table's name beside its alias,
/// backquoted and double-quoted parts, `table.*`), and settings that change what a Distributed
/// query returns, in a `SETTINGS` clause (any spelling, beside other settings, in a subquery) or
/// as URL parameters.
fn qualified_and_settings(rng: &mut SmallRng) -> Vec<Case> {
    let mut c = Vec::new();
    // (FROM text, qualifiers that name the table there)
    let froms: &[(&str, &[&str])] = &[
        ("items", &["items", "`items`", "\"items\"", "default.items", "`default`.`items`", "default.`items`"]),
        ("default.items", &["items", "default.items", "`default`.items", "\"default\".\"items\""]),
        ("`items`", &["items", "`items`", "default.items"]),
        ("items AS i", &["i", "items", "`items`", "default.items", "`i`"]),
        ("items i", &["i", "items", "default.`items`"]),
        ("default.items AS i", &["i", "items", "default.items"]),
        ("`default`.`items` AS `i`", &["i", "`items`", "`default`.`items`"]),
    ];
    while c.len() < 150 {
        let (from, quals) = froms[rng.gen_range(0..froms.len())];
        let q = |rng: &mut SmallRng| quals[rng.gen_range(0..quals.len())];
        let k = rng.gen_range(1..=200u64);
        let select = match rng.gen_range(0..5) {
            0 => "count()".to_string(),
            1 => format!("{}.item_id, {}.version", q(rng), q(rng)),
            2 => format!("count(), sum({}.stock)", q(rng)),
            3 => format!("{}.*", q(rng)),
            _ => format!("{}.item_id", q(rng)),
        };
        let final_ = if rng.gen_bool(0.5) { " FINAL" } else { "" };
        let mut sql = format!("SELECT {select} FROM {from}{final_} WHERE {}.shop_id = {k}", q(rng));
        if rng.gen_bool(0.4) {
            sql.push_str(&format!(" AND {}.item_id < 3000", q(rng)));
        }
        if select.contains('*') || select.contains("item_id,") || select.ends_with("item_id") {
            sql.push_str(" AND item_id % 50 = 1");
        }
        c.push(Case::body("qualified", sql));
    }
    let fan_out: &[(&str, &[&str])] = &[
        ("distributed_group_by_no_merge", &["1", "0"]),
        ("distributed_product_mode", &["'allow'", "'local'", "'global'", "'deny'"]),
        ("skip_unavailable_shards", &["1"]),
        ("max_parallel_replicas", &["2", "1"]),
        ("parallel_replicas_count", &["2"]),
        ("parallel_replica_offset", &["0", "1"]),
    ];
    let bases = [
        "SELECT count() FROM items WHERE shop_id = {K}",
        "SELECT count(), sum(stock) FROM items FINAL WHERE shop_id = {K}",
        "SELECT shop_id, count() FROM items WHERE shop_id = {K} GROUP BY shop_id",
        "SELECT item_id FROM items FINAL WHERE shop_id = {K} AND item_id % 40 = 3",
        "SELECT count() FROM items WHERE shop_id = {K} AND item_id GLOBAL IN (SELECT item_id FROM items WHERE shop_id = {K})",
    ];
    while c.len() < 300 {
        let (name, values) = fan_out[rng.gen_range(0..fan_out.len())];
        let value = values[rng.gen_range(0..values.len())];
        let base = bases[rng.gen_range(0..bases.len())].replace("{K}", &rng.gen_range(1..=200u64).to_string());
        let spelled = match rng.gen_range(0..3) {
            0 => name.to_string(),
            1 => format!("`{name}`"),
            _ => format!("\"{name}\""),
        };
        let other = if rng.gen_bool(0.5) { "max_threads = 2, " } else { "" };
        let case = match rng.gen_range(0..4) {
            0 => Case::body("settings", format!("{base} SETTINGS {other}{spelled} = {value}")),
            1 => Case::body("settings", format!("{base} settings {spelled}=={value}, max_threads = 1")),
            2 => Case::body("settings", format!("SELECT * FROM ({base} SETTINGS {spelled} = {value})")),
            _ => Case::body("settings", base).param(name, value.trim_matches('\'')),
        };
        c.push(case);
    }
    c
}

/// `otherdb` on every node: a plain `items` and an `items_local` with other rows, the same on
/// all nodes (a query on a plain table answers from whichever node gets it, so only equal
/// copies make the comparison meaningful).
fn create_otherdb(env: &Env) {
    for url in env.node_urls() {
        for sql in [
            "CREATE DATABASE IF NOT EXISTS otherdb",
            "CREATE TABLE otherdb.items (shop_id UInt64, item_id UInt64, version UInt32) ENGINE = ReplacingMergeTree(version) ORDER BY (shop_id, item_id)",
            "INSERT INTO otherdb.items SELECT number % 97, number, 1 FROM numbers(3000)",
            "CREATE TABLE otherdb.items_local AS otherdb.items",
            "INSERT INTO otherdb.items_local SELECT number % 13, number * 7, 1 FROM numbers(500)",
            // One part per table on every node, so FINAL and not FINAL agree everywhere.
            "OPTIMIZE TABLE default.items_local FINAL",
        ] {
            let (s, b) = post(&url, sql);
            assert_eq!(s, 200, "{url}: {sql}: {b}");
        }
    }
}

#[test]
fn every_answer_through_the_gateway_equals_the_direct_answer() {
    let t = Instant::now();
    let env = start_cluster();
    create_otherdb(&env);
    let cfg_path = env.gateway_config(|t| t);
    let cfg = Config::load(&cfg_path).unwrap();
    let router = cfg.clusters["storm"].routing.clone().expect("the generated config routes");
    let gw = env.rt.block_on(Gateway::start(cfg_path)).unwrap();
    let gw_url = format!("http://{}", gw.addr);
    let direct = env.node_url(1, 1);
    eprintln!("cluster, data and gateway ready in {:?}", t.elapsed());

    // The corpus can see the defects it is about.
    let key = |v: u64| router.shard_of(&chstorm_sql::route::KeyValue::UInt(v)).unwrap();
    let octal_elsewhere = (8..64u64).filter(|&v| key(v) != key(format!("{v:o}").parse().unwrap())).count();
    assert!(octal_elsewhere > 10, "only {octal_elsewhere} octal literals name another shard than their decimal text");
    let count = |sql: &str| post(&direct, sql).1;
    assert_ne!(
        count("SELECT count() FROM otherdb.items WHERE shop_id = 3"),
        count("SELECT count() FROM otherdb.items_local WHERE shop_id = 3"),
        "otherdb.items_local must hold other rows than otherdb.items"
    );
    assert_ne!(
        count("SELECT count() FROM items FINAL WHERE shop_id = 42"),
        count("SELECT count() FROM items FINAL WHERE shop_id = 42 OR shop_id = 43")
    );

    let cases = corpus(&env, &router);
    assert!(cases.len() >= 300, "{} cases", cases.len());
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Answer, Answer)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { return };
                let session = format!("diff-{}-{i}", std::process::id());
                let a = run(&direct, case, &format!("{session}-d"));
                let b = run(&gw_url, case, &format!("{session}-g"));
                results.lock().unwrap().push((i, a, b));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);

    let mut failures = Vec::new();
    let mut routed = 0;
    let mut errors = 0;
    for (i, a, b) in &results {
        let case = &cases[*i];
        if b.route.as_deref() == Some("routed") && a.status == 200 {
            routed += 1;
        }
        if a.status != 200 {
            errors += 1;
        }
        if a.same(b) {
            continue;
        }
        let show = |x: &Answer| {
            let raw: String = x.raw.chars().take(300).collect();
            format!("status {} code {:?} route {:?}: {:?}", x.status, x.code, x.route, raw)
        };
        let text = format!(
            "#{i} [{}] params {:?} headers {:?} gzip {} sql {:?}\n    direct:  {}\n    gateway: {}",
            case.kind,
            case.params,
            case.headers,
            case.gzip,
            case.sql(),
            show(a),
            show(b)
        );
        failures.push(text);
    }
    eprintln!(
        "{} cases in {:?}: {routed} answered by a routed query, {errors} errors (compared by code)",
        cases.len(),
        t.elapsed()
    );
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("MISMATCH {f}");
        }
        panic!("{} of {} queries answered differently through the gateway", failures.len(), cases.len());
    }
    // The two generated classes: qualified names are routed (most), result-changing settings never.
    let count_of = |kind: &str, routed: bool| {
        let is = |r: &&(usize, Answer, Answer)| {
            cases[r.0].kind == kind && (!routed || r.2.route.as_deref() == Some("routed"))
        };
        results.iter().filter(is).count()
    };
    let qualified_routed = count_of("qualified", true);
    assert!(qualified_routed * 2 >= count_of("qualified", false), "only {qualified_routed} qualified cases routed");
    assert_eq!(count_of("settings", true), 0, "settings that change the answer must fan out");
    assert!(
        routed * 5 >= cases.len(),
        "only {routed} of {} answers were routed: the corpus would not see routing defects",
        cases.len()
    );
    too_deep_queries_are_refused(&env, &gw);
    gw.stop();
}

/// Queries nested deeper than `limits.max_query_depth` (300) are refused with Code 167 through
/// the gateway, over HTTP and the native port, and no server goes down; at the limit they run.
/// (18.16 dies on 936 nested parentheses, 910 function calls, 758 scalar subqueries: sent
/// straight to a node, the first query here would kill it.)
fn too_deep_queries_are_refused(env: &Env, gw: &Gateway) {
    use chstorm_proto::native::NativeConn;
    use chstorm_proto::stream::Connector;
    use chstorm_proto::{Target, TlsOptions};
    let gw_url = format!("http://{}", gw.addr);
    let port = gw.native_addr.expect("the generated config has listen_native").port();
    let target = Target::parse(&format!("clickhouse://default@127.0.0.1:{port}")).unwrap();
    let connector = Connector::new(&target, &TlsOptions::default(), Duration::from_secs(2)).unwrap();
    let mut conn = env.rt.block_on(NativeConn::connect(&connector, &target, Duration::from_secs(10))).unwrap();
    let wrap =
        |open: &str, inner: &str, close: &str, n: usize| format!("SELECT {}{inner}{}", open.repeat(n), close.repeat(n));
    let deep = [
        wrap("(", "1", ")", 1000),
        wrap("abs(", "1", ")", 950),
        wrap("(SELECT ", "1", ")", 800),
        wrap("[", "1", "]", 200_000),
        format!("SELECT count() FROM items WHERE shop_id = 42 AND {}", wrap("(", "1", ")", 301).replace("SELECT ", "")),
    ];
    for sql in &deep {
        let t = Instant::now();
        let a = http(&gw_url, "/", &[], sql.as_bytes());
        assert_eq!((a.status, a.code), (400, Some(167)), "{}: {}", &sql[..40], a.raw);
        assert!(a.raw.contains("Query is too deep") && a.raw.contains("Maximum: 300"), "{}", a.raw);
        let e = env.rt.block_on(conn.query("", sql, Duration::from_secs(10))).unwrap_err().to_string();
        assert!(e.contains("167") && e.contains("Query is too deep"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }
    // At the limit: answered (300 parentheses are far from what crashes a server).
    let at_limit = wrap("(", "1", ")", 300);
    let a = http(&gw_url, "/", &[], at_limit.as_bytes());
    assert_eq!((a.status, a.raw.trim()), (200, "1"), "{}", a.raw);
    env.rt.block_on(conn.query("", &at_limit, Duration::from_secs(10))).unwrap();
    // Every server still up.
    for url in env.node_urls() {
        assert_eq!(post(&url, "SELECT 1"), (200, "1\n".to_string()), "{url}");
    }
    eprintln!("too deep queries: refused with Code 167 over HTTP and native, every node up");
}
