//! The gateway's user rules on every input path, against a real 2x2 cluster: multipart/form-data
//! bodies, `decompress=1` bodies (made by 18.16's `clickhouse-compressor`), a client's own
//! `readonly` (ClickHouse's stateless tests 00305 and 00474, compared with a node), and users
//! kept apart (`query_id`, `replace_running_query`, `session_id`). After each hostile case the
//! servers are checked unchanged (row counts, tables).

use chstorm_testenv::{curl, post, start_shared_cluster, Env};
use std::sync::OnceLock;

const SECRET_SHA: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"; // sha256("secret")
/// `app`'s fixed max_memory_usage.
const FIXED: &str = "20000000000";

/// The env and a gateway with the users `ro` (read-only, allows max_threads), `app` (fixed
/// max_memory_usage), `bob` (no rules) and `default` (no rules, max_execution_time 30 s) on the
/// 2x2 cluster, and `bob1`, `eve1` (no rules) and `ro1` (read-only) on a cluster `one` of node
/// 1.1 alone (so that their queries meet on one server).
fn env() -> &'static (Env, String) {
    static ENV: OnceLock<(Env, String)> = OnceLock::new();
    ENV.get_or_init(|| {
        let env = start_shared_cluster();
        for node in env.node_urls() {
            let (s, b) = post(&node, "CREATE TABLE IF NOT EXISTS iso_t (x UInt32) ENGINE = Memory");
            assert_eq!(s, 200, "{b}");
            let (s, b) = post(&node, "INSERT INTO iso_t VALUES (1)");
            assert_eq!(s, 200, "{b}");
        }
        let n11 = env.cluster.topology().node(1, 1).unwrap().clone();
        let native = n11.native_url.trim_start_matches("clickhouse://").to_string();
        let one = format!(
            "clusters:\n  one:\n    user: default\n    password: \"\"\n    shards:\n      - replicas: [{}]\n        native: [{native}]\n",
            n11.http_url
        );
        let users = format!(
            "users:\n  - name: ro\n    password_sha256: \"{SECRET_SHA}\"\n    cluster: storm\n    readonly: true\n    \
             allowed_settings: [max_threads]\n  - name: app\n    password_sha256: \"{SECRET_SHA}\"\n    cluster: storm\n    \
             settings: {{max_memory_usage: {FIXED}}}\n  - name: bob\n    password_sha256: \"{SECRET_SHA}\"\n    cluster: storm\n  \
             - name: bob1\n    password_sha256: \"{SECRET_SHA}\"\n    cluster: one\n  - name: eve1\n    password_sha256: \
             \"{SECRET_SHA}\"\n    cluster: one\n  - name: ro1\n    password_sha256: \"{SECRET_SHA}\"\n    cluster: one\n    \
             readonly: true\n"
        );
        let path = env.gateway_config(|t| t.replace("users:\n", &users).replace("clusters:\n", &one));
        let gw = env.rt.block_on(chstorm_gateway::Gateway::start(path)).unwrap();
        let url = format!("http://{}", gw.addr);
        std::mem::forget(gw); // serves for the whole test process
        (env, url)
    })
}

/// Every node's `iso_*` tables and their row counts: what a hostile request must not change.
fn servers(env: &Env) -> Vec<String> {
    env.node_urls()
        .iter()
        .map(|n| {
            let (s, b) = post(
                n,
                "SELECT name, total_rows FROM (SELECT name FROM system.tables WHERE database = 'default' AND name LIKE \
                 'iso%') ANY LEFT JOIN (SELECT 'iso_t' AS name, count() AS total_rows FROM iso_t) USING name ORDER BY name",
            );
            assert_eq!(s, 200, "{b}");
            b
        })
        .collect()
}

fn as_user(user: &str) -> String {
    format!("{user}:secret")
}

/// curl as `user` (the password `secret`; `default` has none).
fn req(user: &str, args: &[&str]) -> (u16, String, String) {
    let auth = if user == "default" { "default:".to_string() } else { as_user(user) };
    let mut all = vec!["-u", auth.as_str()];
    all.extend_from_slice(args);
    curl(&all)
}

/// The hostile statements a read-only user tries.
fn hostile() -> Vec<&'static str> {
    vec![
        "INSERT INTO iso_t VALUES (901)",
        "CREATE TABLE iso_new (x UInt8) ENGINE = Memory",
        "DROP TABLE iso_t",
        "SELECT count() FROM numbers(3)",
        "SELECT * FROM url('http://127.0.0.1:1/', TSV, 'x UInt8')",
        "INSERT INTO iso_t SELECT number FROM system.numbers LIMIT 5",
    ]
}

/// Multipart shapes around `stmt` for `url`: (label, curl args). Fields are sent in the order
/// given; 18.16 joins the `query` fields (after the URL's `query`) into the statement.
fn multipart_shapes(stmt: &str, url: &str, ext: &str) -> Vec<(String, Vec<String>)> {
    let half = stmt.len() / 2;
    let (a, b) = stmt.split_at(half);
    let enc = |s: &str| {
        s.replace('%', "%25").replace(' ', "%20").replace('\'', "%27").replace('(', "%28").replace(')', "%29")
    };
    let f = |k: &str, v: &str| vec!["-F".to_string(), format!("{k}={v}")];
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |label: &str, parts: Vec<Vec<String>>, u: String| {
        let mut args: Vec<String> = parts.into_iter().flatten().collect();
        args.push(u);
        out.push((label.to_string(), args));
    };
    add("query field", vec![f("query", stmt)], format!("{url}/"));
    add("readonly=0 first", vec![f("readonly", "0"), f("query", stmt)], format!("{url}/"));
    add("readonly=0 last", vec![f("query", stmt), f("readonly", "0")], format!("{url}/"));
    add("readonly=2 field", vec![f("readonly", "2"), f("query", stmt)], format!("{url}/"));
    add("split in two fields", vec![f("query", a), f("readonly", "0"), f("query", b)], format!("{url}/"));
    add("URL query + field", vec![f("query", b), f("readonly", "0")], format!("{url}/?query={}", enc(a)));
    add("URL readonly=1 + field 0", vec![f("readonly", "0"), f("query", stmt)], format!("{url}/?readonly=1"));
    add(
        "with an external table",
        vec![
            f("ext_structure", "x UInt32"),
            vec!["-F".into(), format!("ext=@{ext}")],
            f("readonly", "0"),
            f("query", stmt),
        ],
        format!("{url}/"),
    );
    add(
        "SELECT 1 in the URL, settings in fields",
        vec![f("readonly", "0"), f("max_threads", "1")],
        format!("{url}/?query=SELECT%201"),
    );
    out
}

/// A multipart/form-data body with the boundary `XX`: `preamble`, then the plain fields.
fn form(preamble: &str, fields: &[(&str, &str)]) -> String {
    let mut out = preamble.to_string();
    for (k, v) in fields {
        out.push_str(&format!("--XX\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"));
    }
    out.push_str("--XX--\r\n");
    out
}

/// Multipart shapes a user with rules may send, around `stmt`, for `url`: (label, curl args).
fn benign_shapes(stmt: &str, url: &str, ext: &str) -> Vec<(String, Vec<String>)> {
    let (a, b) = stmt.split_at(stmt.len() / 2);
    let enc = |s: &str| {
        s.replace('%', "%25").replace(' ', "%20").replace('\'', "%27").replace('(', "%28").replace(')', "%29")
    };
    let f = |k: &str, v: &str| ["-F".to_string(), format!("{k}={v}")];
    let shapes: Vec<(&str, Vec<[String; 2]>, String)> = vec![
        ("query field", vec![f("query", stmt)], format!("{url}/")),
        ("split, a setting between", vec![f("query", a), f("max_threads", "1"), f("query", b)], format!("{url}/")),
        ("URL query + field", vec![f("query", b)], format!("{url}/?query={}", enc(a))),
        (
            "preamble-free external table",
            vec![f("ext_structure", "x UInt32"), ["-F".into(), format!("ext=@{ext}")], f("query", stmt)],
            format!("{url}/"),
        ),
        (
            "settings and database fields",
            vec![f("max_threads", "1"), f("database", "default"), f("query", stmt)],
            format!("{url}/?database=system"),
        ),
    ];
    shapes.into_iter().map(|(l, p, u)| (l.to_string(), p.into_iter().flatten().chain([u]).collect())).collect()
}

#[test]
fn multipart_bodies_obey_the_users_rules() {
    let (env, gw) = env();
    let ext = env.dir.path().join("ext.tsv");
    std::fs::write(&ext, "1\n2\n").unwrap();
    let ext = ext.to_str().unwrap();
    let before = servers(env);
    let mut cases = 0;
    // A read-only user: no write, no table function, no readonly=0 gets through, in any shape.
    for stmt in hostile() {
        for (label, args) in multipart_shapes(stmt, gw, ext) {
            if label.starts_with("SELECT 1 in the URL") {
                continue;
            }
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let (s, _, body) = req("ro", &a);
            assert_ne!(s, 200, "ro, {label}: {stmt}: {body}");
            assert!(!body.contains("901"), "{body}");
            cases += 1;
        }
    }
    // Written by hand: a preamble that reads as a SELECT before the first boundary (the hostile
    // case: 18.16 skips it), and the Content-Type written otherwise (18.16 matches it
    // case-sensitively, newer releases may not).
    for stmt in hostile() {
        let (a, b) = stmt.split_at(stmt.len() / 2);
        for preamble in ["", "SELECT 1\r\n", "SELECT 1 -- "] {
            for fields in [
                vec![("readonly", "0"), ("query", stmt)],
                vec![("query", stmt), ("readonly", "0")],
                vec![("query", a), ("readonly", "2"), ("query", b)],
            ] {
                let body = form(preamble, &fields);
                for (ct, u) in [
                    ("multipart/form-data; boundary=XX", format!("{gw}/?readonly=1")),
                    ("Multipart/Form-Data; boundary=XX", format!("{gw}/")),
                    (" multipart/form-data;boundary=XX", format!("{gw}/?query=")),
                ] {
                    let (s, _, r) = req("ro", &["-H", &format!("Content-Type: {ct}"), "--data-binary", &body, &u]);
                    assert_ne!(s, 200, "ro, {ct}, {preamble:?}, {fields:?}: {r}");
                    cases += 1;
                }
            }
        }
    }
    // A user with a fixed setting: a field never beats it.
    let q = "SELECT value FROM system.settings WHERE name = 'max_memory_usage'";
    for (label, args) in [
        ("field after query", vec!["-F".to_string(), format!("query={q}"), "-F".into(), "max_memory_usage=5".into()]),
        ("field before query", vec!["-F".into(), "max_memory_usage=5".into(), "-F".into(), format!("query={q}")]),
        ("SETTINGS in a field", vec!["-F".into(), format!("query={q} SETTINGS max_memory_usage = 5")]),
        ("in URL and field", vec!["-F".into(), "max_memory_usage=6".into(), "-F".into(), format!("query={q}")]),
    ] {
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        let u = if label == "in URL and field" { format!("{gw}/?max_memory_usage=7") } else { format!("{gw}/") };
        a.push(&u);
        let (s, _, b) = req("app", &a);
        assert!(s == 403 || (s == 200 && b.trim() == FIXED), "app, {label}: {s} {b}");
        cases += 1;
    }
    // A user without rules gets what the server gives.
    let direct = env.node_url(1, 1);
    for stmt in ["SELECT 42", "SELECT sum(x) FROM ext", "SELECT value FROM system.settings WHERE name = 'max_threads'"]
    {
        for (label, args) in multipart_shapes(stmt, "URL", ext) {
            let a = |u: &str| -> Vec<String> { args.iter().map(|x| x.replacen("URL", u, 1)).collect() };
            let (via_gw, via_node) = (a(gw), a(&direct));
            let g: Vec<&str> = via_gw.iter().map(String::as_str).collect();
            let d: Vec<&str> = via_node.iter().map(String::as_str).collect();
            let (s1, _, b1) = req("bob", &g);
            let (s2, _, b2) = curl(&d);
            assert_eq!((s1, b1.clone()), (s2, b2), "bob, {label}: {stmt}");
            cases += 1;
        }
    }
    // Users with rules get what the server gives for what they may do.
    for user in ["ro", "app"] {
        for stmt in [
            "SELECT 42",
            "SELECT sum(x) FROM ext",
            "SELECT value FROM system.settings WHERE name = 'max_threads'",
            "SELECT currentDatabase()",
        ] {
            for (label, args) in benign_shapes(stmt, "URL", ext) {
                if label.contains("external") != stmt.contains("ext") {
                    continue;
                }
                let a = |u: &str| -> Vec<String> { args.iter().map(|x| x.replacen("URL", u, 1)).collect() };
                let (via_gw, via_node) = (a(gw), a(&direct));
                let g: Vec<&str> = via_gw.iter().map(String::as_str).collect();
                let d: Vec<&str> = via_node.iter().map(String::as_str).collect();
                let (s1, _, b1) = req(user, &g);
                let (s2, _, b2) = curl(&d);
                assert_eq!((s1, b1.clone()), (s2, b2.clone()), "{user}, {label}: {stmt}");
                assert_eq!(s1, 200, "{user}, {label}: {stmt}: {b1}");
                cases += 1;
            }
        }
    }
    assert!(cases > 200, "{cases}");
    assert_eq!(servers(env), before, "a hostile multipart body changed a server");
}

/// `sql` in ClickHouse's compressed frames, as 18.16's `clickhouse-compressor` writes it with
/// `flags`.
fn compress(sql: &str, flags: &[&str]) -> Vec<u8> {
    use std::io::Write;
    let mut c = std::process::Command::new("clickhouse-compressor")
        .args(flags)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}

#[test]
fn decompress_bodies_obey_the_users_rules() {
    let (env, gw) = env();
    let before = servers(env);
    let methods: [&[&str]; 5] = [&[], &["--hc"], &["--none"], &["-b", "7"], &["--zstd"]];
    let file = env.dir.path().join("body.bin");
    let send = |user: &str, body: &[u8], query: &str| {
        std::fs::write(&file, body).unwrap();
        req(user, &["--data-binary", &format!("@{}", file.display()), &format!("{gw}/?decompress=1{query}")])
    };
    let mut cases = 0;
    for flags in methods {
        // A read-only user.
        for stmt in hostile() {
            let (s, _, b) = send("ro", &compress(stmt, flags), "");
            assert_ne!(s, 200, "ro {flags:?}: {stmt}: {b}");
            cases += 1;
        }
        let (s, _, b) = send("ro", &compress(" SETTINGS readonly = 0", flags), "&query=SELECT%201");
        assert_ne!(s, 200, "ro {flags:?}: {b}");
        // A fixed setting (a hostile case: `SETTINGS max_memory_usage = 5` must not run with 5).
        let q = "SELECT value FROM system.settings WHERE name = 'max_memory_usage' SETTINGS max_memory_usage = 5";
        let (s, _, b) = send("app", &compress(q, flags), "");
        assert_eq!(s, 403, "app {flags:?}: {b}");
        // A harmless query passes (LZ4, ZSTD and uncompressed frames are read).
        let (s, _, b) = send("app", &compress("SELECT 42", flags), "");
        assert_eq!((s, b.as_str()), (200, "42\n"), "app {flags:?}");
        // A user without rules gets what the server gives, ZSTD too, and bad frames alike.
        for (body, query) in [
            (compress("SELECT 43", flags), ""),
            (compress(" + 1", flags), "&query=SELECT%201"),
            (compress("SELECT 1 SETTINGS max_memory_usage = 5", flags), ""),
        ] {
            let (s1, _, b1) = send("bob", &body, query);
            let (s2, _, b2) = curl(&[
                "--data-binary",
                &format!("@{}", file.display()),
                &format!("{}/?decompress=1{query}", env.node_url(2, 1)),
            ]);
            assert_eq!((s1, b1), (s2, b2), "bob {flags:?}");
            cases += 1;
        }
        cases += 3;
    }
    // decompress as 18.16 reads it: the first one, true unless it starts with 0.
    let q = "SELECT value FROM system.settings WHERE name = 'max_memory_usage' SETTINGS max_memory_usage = 5";
    for (v, body) in [
        ("01", q.as_bytes().to_vec()),
        ("00&decompress=1", q.as_bytes().to_vec()),
        ("false", compress(q, &[])),
        ("2", compress(q, &["--none"])),
        ("1&decompress=0", compress(q, &[])),
    ] {
        std::fs::write(&file, &body).unwrap();
        let u = format!("{gw}/?decompress={v}");
        let (s, _, b) = req("app", &["--data-binary", &format!("@{}", file.display()), &u]);
        assert_eq!(s, 403, "decompress={v}: {b}");
        cases += 1;
    }
    assert!(cases > 40);
    assert_eq!(servers(env), before, "a hostile decompress=1 body changed a server");
}

/// (status, body) with the names in `names` replaced by `T`, to compare a node's answer with
/// the gateway's.
fn norm((s, _, b): (u16, String, String), names: &[&str]) -> (u16, String) {
    let mut b = b;
    for n in names {
        b = b.replace(n, "T");
    }
    (s, b)
}

#[test]
fn a_clients_own_readonly_is_relayed_as_the_server_takes_it() {
    let (env, gw) = env();
    let direct = env.node_url(1, 2);
    let mut n = 0;
    // ClickHouse's 00305_http_and_readonly, and its neighbours: every readonly value, every kind
    // of statement, POST and GET.
    for readonly in ["0", "1", "2"] {
        for stmt in [
            "CREATE TABLE {T} (x UInt8) ENGINE = Memory",
            "INSERT INTO iso_t SELECT 1 WHERE 0",
            "SELECT count() FROM numbers(3)",
            "SELECT value FROM system.settings WHERE name = 'readonly'",
            "SELECT 1 SETTINGS max_threads = 3",
        ] {
            for get in [false, true] {
                n += 1;
                let (t_gw, t_node) = (format!("rorel_gw_{n}"), format!("rorel_node_{n}"));
                let ask = |url: &str, t: &str| {
                    let sql = stmt.replace("{T}", t);
                    let u = format!("{url}/?readonly={readonly}");
                    if get {
                        req("default", &["-G", "--data-urlencode", &format!("query={sql}"), &u])
                    } else {
                        req("default", &["--data-binary", &sql, &u])
                    }
                };
                let g = norm(ask(gw, &t_gw), &[&t_gw]);
                let d = norm(ask(&direct, &t_node), &[&t_node]);
                assert_eq!(g, d, "readonly={readonly} get={get}: {stmt}");
            }
        }
    }
    // A read-only user's own readonly=2 (or 0) never loosens the gateway's readonly=1; asking
    // for 2 is allowed whatever its allow-list.
    for v in ["2", "1"] {
        let (s, _, b) = req(
            "ro",
            &[
                "--data-binary",
                "SELECT value FROM system.settings WHERE name = 'readonly'",
                &format!("{gw}/?readonly={v}"),
            ],
        );
        assert_eq!((s, b.trim()), (200, "1"), "ro readonly={v}");
    }
    let (s, _, _) = req("ro", &["--data-binary", "SELECT 1", &format!("{gw}/?readonly=0")]);
    assert_eq!(s, 403);
}

#[test]
fn a_session_the_client_made_read_only_keeps_working() {
    let (env, gw) = env();
    let direct = env.node_url(2, 2);
    // ClickHouse's 00474_readonly_settings over HTTP, for a user whose max_execution_time the
    // gateway caps and one with a fixed setting as well.
    for (user, sid) in [("default", "s474a"), ("app", "s474b")] {
        let steps: Vec<(String, &str)> = vec![
            ("SET readonly = 1".into(), ""),
            ("SELECT 1".into(), ""),
            (
                "SELECT toUInt64(pow(2, 63)) AS value FORMAT JSONEachRow".into(),
                "&output_format_json_quote_64bit_integers=1",
            ),
            (
                "SELECT toUInt64(pow(2, 63)) AS value FORMAT JSONEachRow".into(),
                "&output_format_json_quote_64bit_integers=0",
            ),
            ("SELECT value FROM system.settings WHERE name = 'readonly'".into(), ""),
            ("CREATE TABLE iso_s474 (x UInt8) ENGINE = Memory".into(), ""),
            ("SET readonly = 0".into(), ""),
            ("SELECT 2".into(), ""),
        ];
        for (i, (sql, extra)) in steps.iter().enumerate() {
            let g = req(user, &["--data-binary", sql, &format!("{gw}/?session_id={sid}{extra}")]);
            let d = curl(&["--data-binary", sql, &format!("{direct}/?session_id={user}-{sid}{extra}")]);
            assert_eq!(norm(g, &[]), norm(d, &[]), "{user} step {i}: {sql}");
        }
    }
    // The session keeps the fixed setting.
    let (s, _, b) = req(
        "app",
        &[
            "--data-binary",
            "SELECT value FROM system.settings WHERE name = 'max_memory_usage'",
            &format!("{gw}/?session_id=s474b"),
        ],
    );
    assert_eq!((s, b.trim()), (200, FIXED));
}

#[test]
fn users_cannot_reach_each_others_queries_or_sessions() {
    let (env, gw) = env();
    let before = servers(env);
    // bob's query under his own query_id.
    let gw2 = gw.clone();
    let bob = std::thread::spawn(move || {
        req("bob1", &["--data-binary", "SELECT sleep(3)", &format!("{gw2}/?query_id=shared-1")])
    });
    std::thread::sleep(std::time::Duration::from_millis(800));
    // Everyone still sees it in system.processes (18.16 shows every query to every user).
    let (s, _, b) = req("ro1", &["--data-binary", "SELECT query_id FROM system.processes", gw]);
    assert_eq!(s, 200, "{b}");
    let seen = b.lines().find(|l| l.ends_with("shared-1")).expect("bob's query runs").to_string();
    // Other users reuse the id, with replace_running_query, bare or as seen: their own queries.
    for (user, id) in [("eve1", "shared-1"), ("ro1", "shared-1"), ("ro1", seen.as_str()), ("eve1", seen.as_str())] {
        let (s, h, b) =
            req(user, &["--data-binary", "SELECT 7", &format!("{gw}/?query_id={id}&replace_running_query=1")]);
        assert_eq!((s, b.as_str()), (200, "7\n"), "{user} {id}");
        assert!(h.contains(&format!("x-clickhouse-query-id: {}", id.to_ascii_lowercase())), "{h}");
        let (s, _, b) = req(user, &["--data-binary", "SELECT 8", &format!("{gw}/?query_id={id}")]);
        assert_eq!((s, b.as_str()), (200, "8\n"), "{user} {id}: not 216, the id is theirs");
    }
    for kill in [format!("KILL QUERY WHERE query_id = '{seen}'"), "KILL QUERY WHERE user = 'default' SYNC".into()] {
        let (s, _, b) = req("eve1", &["--data-binary", &kill, gw]);
        assert_eq!(s, 403, "{b}");
    }
    let (s, h, b) = bob.join().unwrap();
    assert_eq!((s, b.as_str()), (200, "0\n"), "bob's query ran to its end: {b}");
    assert!(h.contains("x-clickhouse-query-id: shared-1"), "{h}");
    // bob's session: a temporary table and a setting, out of everyone else's reach.
    let sid = "bob-session";
    for sql in ["CREATE TEMPORARY TABLE tmp_b (x UInt8)", "INSERT INTO tmp_b VALUES (5)", "SET max_block_size = 77"] {
        let (s, _, b) = req("bob1", &["--data-binary", sql, &format!("{gw}/?session_id={sid}")]);
        assert_eq!(s, 200, "{sql}: {b}");
    }
    let (s, _, b) = req("bob1", &["--data-binary", "SELECT x FROM tmp_b", &format!("{gw}/?session_id={sid}")]);
    assert_eq!((s, b.as_str()), (200, "5\n"));
    for (user, id) in [
        ("ro1", sid.to_string()),
        ("eve1", sid.to_string()),
        ("ro1", format!("bob1:{sid}")),
        ("eve1", format!("bob1%3A{sid}")),
    ] {
        let (s, _, b) = req(user, &["--data-binary", "SELECT x FROM tmp_b", &format!("{gw}/?session_id={id}")]);
        assert_ne!(s, 200, "{user} read bob's temporary table with session_id={id}: {b}");
        let (s, _, b) = req(
            user,
            &[
                "--data-binary",
                "SELECT value FROM system.settings WHERE name = 'max_block_size'",
                &format!("{gw}/?session_id={id}"),
            ],
        );
        assert_eq!((s, b.trim()), (200, "65536"), "{user} saw bob's settings with session_id={id}");
    }
    assert_eq!(servers(env), before);
}
