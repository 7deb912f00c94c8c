//! The gateway's own wall, as a hostile client tries it, against a real 2x2 cluster, over HTTP
//! and the native port: each class of escape with variants, and the servers checked unharmed
//! after each (every node alive, the guarded table's rows unchanged).
//!
//! * A `SETTINGS` clause hidden from a user's fixed settings: after an alias or a column named
//!   `format` or `values` in `INSERT ... SELECT`, after a `//` comment, in the rows of `VALUES`.
//! * Table functions and engines that reach outside the server (`url`, `remote`, `cluster`,
//!   `ENGINE = URL`), for a user with rules.
//! * The depth limit skipped: 1,000 brackets after `AS format`, in a `decompress=1` ZSTD body.
//! * Operators' statements: `SYSTEM SHUTDOWN` (also after `PARALLEL WITH`; after a `#` comment,
//!   which 18.16 does not read, the server's syntax error), `KILL`, users and grants, `DROP` of a shared table or a
//!   database; a tenant drops the tables of its own database.

use chstorm_testenv::{curl, post, start_shared_cluster, Env};
use std::sync::OnceLock;
use std::time::Duration;

const SECRET_SHA: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"; // sha256("secret")

/// The env, the gateway's HTTP URL and native address, with the users `app` (fixed
/// max_memory_usage and max_rows_to_read, may write), `tenant` (owns the database `tenant_db`,
/// no other rules) and `bob` (no rules, no operator statements).
fn env() -> &'static (Env, String, std::net::SocketAddr) {
    static ENV: OnceLock<(Env, String, std::net::SocketAddr)> = OnceLock::new();
    ENV.get_or_init(|| {
        let env = start_shared_cluster();
        for node in env.node_urls() {
            for sql in [
                "CREATE TABLE IF NOT EXISTS rules_t (x UInt64) ENGINE = Memory",
                "CREATE DATABASE IF NOT EXISTS tenant_db",
            ] {
                let (s, b) = post(&node, sql);
                assert_eq!(s, 200, "{b}");
            }
        }
        let users = format!(
            "users:\n  - name: app\n    password_sha256: \"{SECRET_SHA}\"\n    cluster: storm\n    settings: \
             {{max_memory_usage: 20000000000, max_rows_to_read: 100000000}}\n  - name: tenant\n    password_sha256: \
             \"{SECRET_SHA}\"\n    cluster: storm\n    own_databases: [tenant_db]\n  - name: bob\n    password_sha256: \
             \"{SECRET_SHA}\"\n    cluster: storm\n"
        );
        let path = env.gateway_config(|t| t.replace("users:\n", &users));
        let gw = env.rt.block_on(chstorm_gateway::Gateway::start(path)).unwrap();
        let (url, native) = (format!("http://{}", gw.addr), gw.native_addr.expect("listen_native"));
        std::mem::forget(gw); // serves for the whole test process
        (env, url, native)
    })
}

/// POSTs `sql` as `user` (password `secret`); (status, body).
fn as_user(user: &str, sql: &str) -> (u16, String) {
    let (url, auth) = (&env().1, format!("{user}:secret"));
    let (s, _, b) = curl(&["-u", &auth, "--data-binary", sql, &format!("{url}/")]);
    (s, b)
}

/// Runs `sql` over the native port as `user`: Ok, or the exception's (code, message).
fn native(user: &str, sql: &str) -> Result<(), (i32, String)> {
    let (env, _, addr) = env();
    let target = chstorm_proto::Target::parse(&format!("clickhouse://{user}:secret@{addr}")).unwrap();
    env.rt.block_on(async {
        let connector = chstorm_proto::stream::Connector::new(&target, &Default::default(), Duration::from_secs(5))
            .expect("connector");
        let mut c = chstorm_proto::native::NativeConn::connect(&connector, &target, Duration::from_secs(5))
            .await
            .expect("native login");
        match c.query("", sql, Duration::from_secs(60)).await {
            Ok(_) => Ok(()),
            Err(chstorm_proto::ProtoError::Server { code, message, .. }) => Err((code, message)),
            Err(e) => Err((0, e.to_string())),
        }
    })
}

/// Every node alive, and `rules_t`'s rows on each: what no hostile request may change.
fn unharmed() -> Vec<String> {
    env()
        .0
        .node_urls()
        .iter()
        .map(|n| {
            let (s, b) = post(n, "SELECT count() FROM rules_t");
            assert_eq!(s, 200, "{n} is not serving: {b}");
            b
        })
        .collect()
}

/// `sql` as `user` is refused over both protocols (HTTP `status`, native `code`) and harms nothing.
fn refused(user: &str, sql: &str, status: u16, code: i32) {
    let before = unharmed();
    let (s, b) = as_user(user, sql);
    assert_eq!(s, status, "{user} over HTTP: {sql:?}: {b}");
    assert!(b.contains("chstorm gateway") || status == 400, "the gateway refused it: {b}");
    match native(user, sql) {
        Err((c, _)) => assert_eq!(c, code, "{user} over native: {sql:?}"),
        Ok(()) => panic!("{user} over native ran {sql:?}"),
    }
    assert_eq!(unharmed(), before, "{sql:?} changed the servers");
}

#[test]
fn a_settings_clause_is_never_hidden_from_a_users_fixed_settings() {
    for alias in ["format", "values", "FORMAT", "`format`", "\"values\"", "Values"] {
        for tail in [" SETTINGS max_rows_to_read = 0", " SETTINGS max_memory_usage = 5, max_threads = 1"] {
            let sql = format!("INSERT INTO rules_t SELECT count() AS {alias} FROM numbers(10){tail}");
            refused("app", &sql, 403, 497);
            let sql = format!("INSERT INTO rules_t (x) SELECT 1 AS {alias}{tail}");
            refused("app", &sql, 403, 497);
        }
    }
    // A `//` comment, which 18.16 reads as one, before the clause; and a clause a `--` hides.
    refused(
        "app",
        "SELECT value FROM system.settings WHERE name = 'max_memory_usage' // '\nSETTINGS max_memory_usage = 12345 --'",
        403,
        497,
    );
    // The rows of VALUES are SQL the server parses: a subquery there with its own SETTINGS.
    refused(
        "app",
        "INSERT INTO rules_t VALUES ((SELECT toUInt64(value) FROM system.settings WHERE name = 'max_rows_to_read' SETTINGS max_rows_to_read = 0))",
        403,
        497,
    );
    // A current release's forms, read as this cluster's release (18.16) reads them: `#` starts
    // no comment (text the gateway cannot read is refused to a user with fixed settings), and
    // comments do not nest (the clause after `/* /* */` is read, and refused). Where releases
    // differ or are unknown, such text is refused as disputed (the plan's unit tests).
    for sql in
        ["# c\nSELECT 1 SETTINGS max_memory_usage = 5", "/* /* */ SELECT 1 SETTINGS max_memory_usage = 5 */ SELECT 1"]
    {
        refused("app", sql, 403, 497);
    }
    // Without such a clause the same statements run.
    let (s, b) = as_user("app", "INSERT INTO rules_t SELECT number AS format FROM numbers(1) WHERE number > 5");
    assert_eq!(s, 200, "{b}");
}

#[test]
fn what_reaches_outside_the_server_is_refused_for_a_user_with_rules() {
    let node = env().0.node_url(1, 1);
    let inner = format!("{node}/?query=SELECT+value+FROM+system.settings+WHERE+name%3D%27max_rows_to_read%27");
    for sql in [
        format!("SELECT * FROM url('{inner}', TSV, 'v String')"),
        "SELECT * FROM remote('127.0.0.1', system.one)".to_string(),
        "SELECT * FROM cluster('storm', system.one)".to_string(),
        "SELECT * FROM file('x.tsv', TSV, 'x UInt8')".to_string(),
        "SELECT 1 FROM system.one WHERE 1 IN (SELECT 1 FROM url('http://127.0.0.1:1/', TSV, 'x UInt8'))".to_string(),
        format!("CREATE TABLE rules_url (v String) ENGINE = URL('{inner}', TSV)"),
        "INSERT INTO FUNCTION url('http://127.0.0.1:1/', TSV, 'x UInt8') VALUES (1)".to_string(),
    ] {
        refused("app", &sql, 403, 497);
    }
    // Tables and table functions that stay inside the server run.
    assert_eq!(as_user("app", "SELECT count() FROM numbers(3)"), (200, "3\n".into()));
    assert_eq!(as_user("app", "SELECT count() FROM merge(system, '^one$')"), (200, "1\n".into()));
    // A user without rules calls them, as it would direct.
    assert_eq!(as_user("bob", "SELECT * FROM remote('127.0.0.1', system.one)").0, 200);
}

#[test]
fn no_text_skips_the_depth_limit() {
    let deep = |n: usize| format!("{}1{}", "(".repeat(n), ")".repeat(n));
    for sql in [
        format!("INSERT INTO rules_t SELECT {} AS format", deep(1000)),
        format!("INSERT INTO rules_t SELECT 1 AS values FROM numbers({})", deep(1000)),
        format!("INSERT INTO rules_t VALUES ({})", deep(1000)),
        format!("SELECT {}", deep(1000)),
    ] {
        for user in ["bob", "app"] {
            refused(user, &sql, 400, 167);
        }
    }
    // In a decompress=1 body of ZSTD frames, as clickhouse-compressor writes them.
    let mut c = std::process::Command::new("clickhouse-compressor")
        .arg("--zstd")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin.take().unwrap().write_all(format!("SELECT {}", deep(1000)).as_bytes()).unwrap();
    let body = c.wait_with_output().unwrap().stdout;
    let file = env().0.dir.path().join("deep.zst");
    std::fs::write(&file, body).unwrap();
    let before = unharmed();
    for user in ["bob", "app"] {
        let (s, _, b) = curl(&[
            "-u",
            &format!("{user}:secret"),
            "--data-binary",
            &format!("@{}", file.display()),
            &format!("{}/?decompress=1", env().1),
        ]);
        assert_eq!(s, 400, "{user}: {b}");
        assert!(b.contains("Code: 167"), "{b}");
    }
    assert_eq!(unharmed(), before);
}

#[test]
fn operators_statements_are_refused_unless_the_user_may_send_them() {
    for user in ["bob", "app", "tenant"] {
        for sql in [
            "SYSTEM SHUTDOWN",
            "system shutdown",
            "SELECT 1 PARALLEL WITH SYSTEM SHUTDOWN",
            "SYSTEM DROP DNS CACHE",
            "KILL QUERY WHERE 1 SYNC",
            "CREATE USER chstorm_evil",
            "GRANT ALL ON *.* TO default",
            "DROP TABLE default.rules_t",
            "DROP TABLE IF EXISTS rules_t",
            "TRUNCATE TABLE default.rules_t",
            "RENAME TABLE default.rules_t TO default.rules_gone",
            "DETACH TABLE default.rules_t",
            "DROP DATABASE tenant_db",
            "CREATE OR REPLACE TABLE default.rules_t (x UInt8) ENGINE = Memory",
        ] {
            refused(user, sql, 403, 497);
        }
    }
    // A `#` comment only current releases read, before a statement: 18.16, this cluster's
    // release, reads no statement there, and its syntax error is the answer (a cluster of current
    // or unknown releases refuses it as an operator statement: the plan's unit tests).
    refused("bob", "# c\nSYSTEM SHUTDOWN", 400, 62);
    refused("bob", "# c\nKILL QUERY WHERE 1", 400, 62);
    // A tenant makes and drops the tables of its own database; not another's (in one session, so
    // that its DDL lands on one replica).
    let in_session = |sql: &str| {
        let (s, _, b) = curl(&["-u", "tenant:secret", "--data-binary", sql, &format!("{}/?session_id=t1", env().1)]);
        (s, b)
    };
    for (sql, ok) in [
        ("CREATE TABLE tenant_db.mine (x UInt8) ENGINE = Memory", true),
        ("RENAME TABLE tenant_db.mine TO tenant_db.mine2", true),
        ("DROP TABLE tenant_db.mine2", true),
        ("RENAME TABLE tenant_db.x TO default.x", false),
    ] {
        let (s, b) = in_session(sql);
        assert_eq!(s == 200, ok, "{sql}: {s} {b}");
    }
}
