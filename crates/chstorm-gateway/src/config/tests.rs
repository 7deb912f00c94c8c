//! `Config::parse` over the documented example and variants of it, one test per section.

use super::*;
use std::path::Path;
use std::time::Duration;

const EXAMPLE: &str = include_str!("../../../../docs/gateway.example.yaml");

#[test]
fn the_documented_example_is_valid() {
    let c = Config::parse(EXAMPLE, Path::new("gateway.yaml")).unwrap();
    assert_eq!(c.listen.port(), 8124);
    let storm = &c.clusters["storm"];
    assert_eq!(storm.shards.len(), 2);
    assert_eq!(storm.shards[1].replicas[0].base, "http://127.0.0.1:18125");
    assert_eq!(storm.routing.as_ref().unwrap().weights(), &[1, 1]);
    let routed = |db: Option<&str>| {
        storm
            .routing
            .as_ref()
            .unwrap()
            .route("SELECT * FROM items WHERE shop_id = 1", None, None, db, chstorm_sql::lexer::Grammar::V18_16)
            .is_ok()
    };
    assert!(routed(None) && routed(Some("default")) && !routed(Some("otherdb")));
    let u = &c.users["default"];
    assert!(u.password_sha256.is_none() && u.allowed_settings == AllowedSettings::Any);
    assert_eq!(u.max_execution_time, Some(Duration::from_secs(30)));
    assert_eq!(c.pool.idle_timeout, IdleTimeout::Auto);
}

#[test]
fn replica_delay_is_whole_seconds_or_off() {
    let c = Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap();
    assert_eq!((c.health.max_replica_delay.0, c.health.fallback_to_stale_replicas), (Duration::from_secs(300), true));
    let with = |v: &str| EXAMPLE.replace("max_replica_delay: 300s", &format!("max_replica_delay: {v}"));
    let c = Config::parse(&with("0s").replace("stale_replicas: true", "stale_replicas: false"), Path::new("g.yaml"));
    let c = c.unwrap();
    assert_eq!((c.health.max_replica_delay.0, c.health.fallback_to_stale_replicas), (Duration::ZERO, false));
    let e = bad(&with("1500ms"));
    assert!(e.contains("health.max_replica_delay: 1s 500ms is not whole seconds") && !e.contains('\n'), "{e}");
    let e = bad(&with("soon"));
    assert!(e.contains("health.max_replica_delay") && e.contains("'soon' is not a duration"), "{e}");
    let plain = EXAMPLE.lines().filter(|l| !l.contains("max_replica_delay") && !l.contains("stale_replicas"));
    let c = Config::parse(&plain.collect::<Vec<_>>().join("\n"), Path::new("g.yaml")).unwrap();
    assert_eq!(c.health.max_replica_delay.0, Duration::from_secs(300), "the default: the server's own");
}

fn bad(text: &str) -> String {
    Config::parse(text, Path::new("g.yaml")).unwrap_err().to_string()
}

#[test]
fn workers_are_auto_or_a_count() {
    let half = (std::thread::available_parallelism().unwrap().get() / 2).max(1);
    assert_eq!(Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap().workers, half);
    let with = |w: &str| format!("workers: {w}\n{EXAMPLE}");
    assert_eq!(Config::parse(&with("auto"), Path::new("g.yaml")).unwrap().workers, half);
    assert_eq!(Config::parse(&with("3"), Path::new("g.yaml")).unwrap().workers, 3);
    for w in ["0", "-1", "257", "many"] {
        let e = bad(&with(w));
        assert!(e.contains("is not `auto` or a thread count from 1 to 256"), "{w}: {e}");
    }
}

#[test]
fn listen_native_needs_a_native_address_per_replica() {
    let c = Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap();
    assert_eq!(c.listen_native.map(|a| a.port()), Some(9001));
    assert_eq!(c.clusters["storm"].native["http://127.0.0.1:18126"], "127.0.0.1:19003");
    let e = bad(&EXAMPLE.replace("listen_native: 127.0.0.1:9001", "listen_native: nine"));
    assert!(e.contains("listen_native: 'nine' is not an address"), "{e}");
    let e = bad(&EXAMPLE.replace("listen_native: 127.0.0.1:9001", "listen_native: 127.0.0.1:8124"));
    assert!(e.contains("is also `listen`"), "{e}");
    let e = bad(&EXAMPLE.replace("native: [127.0.0.1:19002, 127.0.0.1:19003]", "native: [127.0.0.1:19002]"));
    assert!(e.contains("shards[1].native: 1 addresses for 2 replicas"), "{e}");
    let e = bad(&EXAMPLE.replace("127.0.0.1:19003]", "127.0.0.1]"));
    assert!(e.contains("'127.0.0.1' is not HOST:PORT"), "{e}");
    // Without listen_native, no list is needed.
    let text =
        EXAMPLE.replace("listen_native: 127.0.0.1:9001", "").replace("native: [127.0.0.1:19002, 127.0.0.1:19003]", "");
    let c = Config::parse(&text, Path::new("g.yaml")).unwrap();
    assert!(c.listen_native.is_none() && c.clusters["storm"].native.len() == 2);
}

#[test]
fn listen_native_secure_needs_tls_and_its_own_port() {
    let secure = |extra: &str| {
        EXAMPLE.replace("listen_native: 127.0.0.1:9001", &format!("listen_native: 127.0.0.1:9001\n{extra}"))
    };
    let tls = "tls:\n  cert: /c.pem\n  key: /k.pem\n";
    let c =
        Config::parse(&secure(&format!("listen_native_secure: 127.0.0.1:9440\n{tls}")), Path::new("g.yaml")).unwrap();
    assert_eq!(c.listen_native_secure, Some("127.0.0.1:9440".parse().unwrap()));
    assert_eq!(Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap().listen_native_secure, None, "off by default");
    let e = bad(&secure("listen_native_secure: 127.0.0.1:9440\n"));
    assert!(e.contains("listen_native_secure: needs a certificate; add a `tls:` section"), "{e}");
    assert!(e.contains("line 4") && !e.contains('\n'), "one line, with the key's line: {e}");
    let e = bad(&secure(&format!("listen_native_secure: 127.0.0.1:9001\n{tls}")));
    assert!(e.contains("listen_native_secure: 127.0.0.1:9001 is also `listen_native`"), "{e}");
    let e = bad(&secure(&format!("listen_native_secure: 0.0.0.0:8124\n{tls}")));
    assert!(e.contains("is also `listen`"), "every IP takes listen's port too: {e}");
    let e = bad(&secure(&format!("listen_native_secure: 127.0.0.1:9440\nmetrics_listen: 127.0.0.1:9440\n{tls}")));
    assert!(e.contains("metrics_listen: 127.0.0.1:9440 is also `listen_native_secure`"), "{e}");
    let e = bad(&secure(&format!("listen_native_secure: 9440\n{tls}")));
    assert!(e.contains("listen_native_secure: '9440' is not an address"), "{e}");
    // Port 0 (any free port) clashes with nothing.
    Config::parse(
        &EXAMPLE.replace(
            "listen_native: 127.0.0.1:9001",
            &format!("listen_native: 127.0.0.1:0\nlisten_native_secure: 127.0.0.1:0\n{tls}"),
        ),
        Path::new("g.yaml"),
    )
    .unwrap();
    // It needs the shards' native lists, as listen_native does.
    let text = secure(&format!("listen_native_secure: 127.0.0.1:9440\n{tls}"))
        .replace("listen_native: 127.0.0.1:9001\n", "")
        .replace("native: [127.0.0.1:19002, 127.0.0.1:19003]", "");
    assert!(bad(&text).contains("shards[1].native: 0 addresses for 2 replicas"), "{}", bad(&text));
}

#[test]
fn errors_name_field_and_reason() {
    let e = bad(&EXAMPLE.replace("  interval: 500ms", "  interval: soon"));
    assert!(e.contains("health.interval") && e.contains("'soon' is not a duration"), "{e}");
    let e = bad(&EXAMPLE.replace("  fall: 2", "  fal: 2"));
    assert!(e.contains("unknown field `fal`") && e.contains("line "), "{e}");
    let e = bad(&EXAMPLE.replace("cluster: storm\n", "cluster: nope\n"));
    assert!(e.contains("users[0].cluster: no cluster named 'nope'"), "{e}");
    let e = bad(&EXAMPLE.replace("password_sha256: \"\"", "password_sha256: \"abc\""));
    assert!(e.contains("password_sha256: not 64 hex digits"), "{e}");
    let e = bad(&EXAMPLE.replace("127.0.0.0/8", "localhost-ish"));
    assert!(e.contains("networks: 'localhost-ish'"), "{e}");
    let e = bad(&EXAMPLE.replace("cityHash64(shop_id)", "rand()"));
    assert!(e.contains("sharding_key"), "{e}");
    let e = bad(&EXAMPLE.replace("http://127.0.0.1:18126", "tcp://127.0.0.1:9000"));
    assert!(e.contains("use http:// or https://"), "{e}");
    let e = bad(&EXAMPLE.replace("      database: default ", "      database: a.b "));
    assert!(e.contains("routing: routing.database: 'a.b' is not a database name"), "{e}");
    let e = bad(&EXAMPLE.replace("listen: 127.0.0.1:8124", "listen: everywhere"));
    assert!(e.contains("listen: 'everywhere'") && e.contains("line 2"), "{e}");
}

#[test]
fn max_query_depth() {
    let c = Config::parse(EXAMPLE, Path::new("gateway.yaml")).unwrap();
    assert_eq!(c.limits.max_query_depth, DEFAULT_MAX_QUERY_DEPTH);
    assert_eq!(Limits::default().max_query_depth, 300, "the example states the default");
    let c = Config::parse(&EXAMPLE.replace("max_query_depth: 300", "max_query_depth: 50"), Path::new("g.yaml"));
    assert_eq!(c.unwrap().limits.max_query_depth, 50);
    let e = bad(&EXAMPLE.replace("max_query_depth: 300", "max_query_depth: 0"));
    assert!(e.contains("limits.max_query_depth: must be at least 1"), "{e}");
}

#[test]
fn client_buffer_limits_and_packet_timeout() {
    let c = Config::parse(EXAMPLE, Path::new("gateway.yaml")).unwrap();
    let d = Limits::default();
    let got = |l: &Limits| (l.max_client_buffer_mib, l.max_buffered_mib, l.client_packet_timeout.0);
    assert_eq!(got(&c.limits), (256, 1024, Duration::from_secs(30)));
    assert_eq!(got(&d), got(&c.limits), "the example states the defaults");
    let e = bad(&EXAMPLE.replace("max_buffered_mib: 1024", "max_buffered_mib: 0"));
    assert!(e.contains("must be at least 1"), "{e}");
    let e = bad(&EXAMPLE.replace("client_packet_timeout: 30s", "client_packet_timeout: 5ms"));
    assert!(e.contains("limits.client_packet_timeout: 5ms is too short"), "{e}");
}

#[test]
fn client_timeouts_metrics_listen_and_user_names() {
    let c = Config::parse(EXAMPLE, Path::new("gateway.yaml")).unwrap();
    assert_eq!(c.limits.client_header_timeout.0, Duration::from_secs(10));
    assert_eq!(c.limits.client_body_idle_timeout.0, Duration::from_secs(30));
    assert_eq!(c.metrics_listen, None, "the example leaves metrics_listen commented out");
    let defaults = Limits::default();
    assert_eq!(
        (defaults.client_header_timeout.0, defaults.client_body_idle_timeout.0),
        (Duration::from_secs(10), Duration::from_secs(30)),
        "the example states the defaults"
    );
    let uncommented = EXAMPLE.replace("# metrics_listen: ", "metrics_listen: ");
    let c = Config::parse(&uncommented, Path::new("g.yaml")).unwrap();
    assert_eq!(c.metrics_listen, Some("127.0.0.1:9363".parse().unwrap()));
    let e = bad(&EXAMPLE.replace("# metrics_listen: 127.0.0.1:9363", "metrics_listen: somewhere"));
    assert!(e.contains("metrics_listen: 'somewhere' is not an address") && e.contains("line "), "{e}");
    let e = bad(&EXAMPLE.replace("# metrics_listen: 127.0.0.1:9363", "metrics_listen: 127.0.0.1:8124"));
    assert!(e.contains("is also `listen`"), "{e}");
    let e = bad(&EXAMPLE.replace("client_body_idle_timeout: 30s", "client_body_idle_timeout: 10ms"));
    assert!(
        e.contains("limits.client_body_idle_timeout: 10ms is too short; at least 100ms") && e.contains("line "),
        "{e}"
    );
    let e = bad(&EXAMPLE.replace("client_write_timeout: 30s", "client_write_timeout: 50ms"));
    assert!(e.contains("limits.client_write_timeout: 50ms is too short; at least 100ms"), "{e}");
    let e = bad(&EXAMPLE.replace("client_body_min_rate: 500", "client_body_min_rate: -1"));
    assert!(e.contains("client_body_min_rate"), "{e}");
    let e = bad(&EXAMPLE.replace("client_header_timeout: 10s", "client_header_timeout: 0s"));
    assert!(e.contains("limits.client_header_timeout: 0s is too short"), "{e}");
    let e = bad(&EXAMPLE.replace("client_header_timeout: 10s", "client_header_timeout: later"));
    assert!(e.contains("limits.client_header_timeout") && e.contains("'later' is not a duration"), "{e}");
    let e = bad(&EXAMPLE.replace("- name: default", "- name: unknown"));
    assert!(e.contains("users[0].name: 'unknown' is reserved"), "{e}");
    let long = "u".repeat(MAX_USER_NAME + 1);
    let e = bad(&EXAMPLE.replace("- name: default", &format!("- name: {long}")));
    assert!(e.contains("users[0].name: the user name is 129 bytes long; at most 128"), "{e}");
    assert!(check_user_name(&"u".repeat(MAX_USER_NAME)).is_ok());
    assert!(check_user_name("").is_err() && check_user_name("a\nb").is_err() && check_user_name("a\u{7f}").is_err());
    assert!(check_user_name("analyst-7").is_ok() && check_user_name("имя").is_ok());
}

#[test]
fn threads_section() {
    let c = Config::parse(EXAMPLE, Path::new("gateway.yaml")).unwrap();
    assert!(c.threads.is_empty(), "the example leaves the budget commented out");
    // The example's commented block, uncommented, is valid and means what it says.
    let uncommented = EXAMPLE.replace("    # threads:", "    threads:").replace("    #   ", "      ");
    let t = &Config::parse(&uncommented, Path::new("gateway.yaml")).unwrap().threads["storm"];
    assert_eq!(
        (t.total, t.max_per_query, t.mode, t.max_wait, t.observe),
        (ThreadTotal::Auto, 16, ThreadMode::Grant, Duration::from_millis(100), false)
    );
    assert_eq!(t.total_for("http://127.0.0.1:18126"), ThreadTotal::Fixed(8));
    let with = |t: &str| EXAMPLE.replace("    routing:\n", &format!("    threads:\n{t}    routing:\n"));
    let c = Config::parse(&with("      total: 8\n      max_per_query: 4\n      mode: queue\n      max_wait: 50ms\n      observe: true\n      per_replica:\n        http://127.0.0.1:18126: auto\n"), Path::new("g.yaml")).unwrap();
    let t = &c.threads["storm"];
    assert_eq!(
        (t.total, t.max_per_query, t.mode, t.max_wait, t.observe),
        (ThreadTotal::Fixed(8), 4, ThreadMode::Queue, Duration::from_millis(50), true)
    );
    assert!(!t.cap_at_cores, "max_per_query set: that is the cap");
    assert_eq!(t.total_for("http://127.0.0.1:18126"), ThreadTotal::Auto);
    assert_eq!(t.total_for("http://127.0.0.1:18123"), ThreadTotal::Fixed(8));
    let t = &Config::parse(&with("      total: auto\n"), Path::new("g.yaml")).unwrap().threads["storm"];
    assert_eq!(
        (t.total, t.max_per_query, t.mode, t.max_wait, t.observe),
        (ThreadTotal::Auto, 16, ThreadMode::Grant, Duration::from_millis(100), false)
    );
    // `threads: {}`: every default (what docs/GATEWAY.md and scripts/bench_threads.py call
    // the default budget).
    let t = &Config::parse(&EXAMPLE.replace("    routing:\n", "    threads: {}\n    routing:\n"), Path::new("g.yaml"))
        .unwrap()
        .threads["storm"];
    assert_eq!(
        (t.total, t.max_per_query, t.mode, t.max_wait, t.observe),
        (ThreadTotal::Auto, 16, ThreadMode::Grant, Duration::from_millis(100), false)
    );
    assert!(t.cap_at_cores, "max_per_query not set: grants are capped at the server's cores too");
    let t = &Config::parse(
        &with("      total: adaptive\n      per_replica:\n        http://127.0.0.1:18126: 3\n"),
        Path::new("g.yaml"),
    )
    .unwrap()
    .threads["storm"];
    assert_eq!(t.total_for("http://127.0.0.1:18123"), ThreadTotal::Adaptive);
    assert_eq!(t.total_for("http://127.0.0.1:18126"), ThreadTotal::Fixed(3));
    let e = bad(&with("      total: 0\n"));
    assert!(e.contains("clusters.storm.threads.total: must be at least 1, or auto") && e.contains("line "), "{e}");
    let e = bad(&with("      total: many\n"));
    assert!(e.contains("threads.total") && e.contains("expected a number of threads, auto or adaptive"), "{e}");
    let e = bad(&with("      mode: fast\n"));
    assert!(e.contains("threads.mode") && e.contains("unknown variant `fast`"), "{e}");
    let e = bad(&with("      max_per_query: 0\n"));
    assert!(e.contains("threads.max_per_query: must be at least 1"), "{e}");
    let e = bad(&with("      per_replica:\n        http://10.0.0.1:8123: 4\n"));
    assert!(e.contains("per_replica: 'http://10.0.0.1:8123' is not a replica of cluster 'storm'"), "{e}");
    let e = bad(&with("      totl: 4\n"));
    assert!(e.contains("unknown field `totl`"), "{e}");
}

#[test]
fn idle_connections_per_pool_are_auto_or_a_count() {
    let c = Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap();
    assert_eq!(c.pool.max_idle_per_replica, MaxIdle::Auto);
    assert_eq!(c.pool.max_idle(c.limits.max_concurrency), c.limits.max_concurrency, "auto: what can be in use at once");
    let with = |v: &str| EXAMPLE.replace("max_idle_per_replica: auto", &format!("max_idle_per_replica: {v}"));
    let c = Config::parse(&with("8"), Path::new("g.yaml")).unwrap();
    assert_eq!(c.pool.max_idle(256), 8);
    for v in ["many", "-1"] {
        let e = bad(&with(v));
        assert!(e.contains("max_idle_per_replica") || e.contains("not auto or a number of connections"), "{v}: {e}");
    }
}

#[test]
fn each_user_may_run_as_its_own_clickhouse_user() {
    let env = |name: &str| (name == "READER_PW").then(|| "from-env".to_string());
    let with = |user: &str| {
        EXAMPLE.replace(
            "    settings: {}                  # fixed settings, win over the client's\n",
            &format!("    settings: {{}}\n{user}"),
        )
    };
    let parse = |text: &str| Config::parse_with_env(text, Path::new("g.yaml"), &env);
    let c = parse(&with("    backend: {user: chstorm_reader, password_env: READER_PW}\n    metrics: true\n")).unwrap();
    let u = &c.users["default"];
    assert_eq!(u.backend, Some(Login { user: "chstorm_reader".into(), password: "from-env".into() }));
    assert!(u.metrics);
    assert!(!format!("{u:?}").contains("from-env"), "Debug hides the password");
    let c = parse(&with("    backend:\n      user: w\n      password: inline\n")).unwrap();
    assert_eq!(c.users["default"].backend.as_ref().map(|l| l.password.as_str()), Some("inline"));
    let c = parse(EXAMPLE).unwrap();
    assert!(
        c.users["default"].backend.is_none() && !c.users["default"].metrics,
        "the defaults: the cluster's login, no metrics"
    );
    assert_eq!(c.clusters["storm"].login(), Login { user: "default".into(), password: String::new() });
    let err = |text: &str| parse(text).unwrap_err().to_string();
    // The line of `- name: default`, where the errors of users[0] point.
    let line = 1 + EXAMPLE.lines().position(|l| l == "  - name: default").unwrap();
    let e = err(&with("    backend: {user: w, password: a, password_env: READER_PW}\n"));
    assert_eq!(e, format!("g.yaml: line {line}: users[0].backend: both password and password_env are set; keep one"));
    let e = err(&with("    backend: {user: w, password_env: NOT_THERE}\n"));
    assert!(
        e.starts_with(&format!(
            "g.yaml: line {line}: users[0].backend.password_env: the environment variable NOT_THERE is not set"
        )),
        "{e}"
    );
    let e = err(&with("    backend: {user: \"\"}\n"));
    assert_eq!(e, format!("g.yaml: line {line}: users[0].backend.user: the user name is empty"));
    let e = err(&with("    backend: {user: w, pasword: x}\n"));
    assert!(e.contains("unknown field `pasword`"), "{e}");
    let e = err(&with("    backend: {user: w, password_env: \"\"}\n"));
    assert!(e.contains("users[0].backend.password_env: '' is not a variable name"), "{e}");
    // The example's commented keys, uncommented, are valid.
    let open = EXAMPLE.replace("    # metrics: false", "    metrics: true").replace("    # backend:", "    backend:");
    let env_app = |name: &str| (name == "CHSTORM_APP_PASSWORD").then(|| "p".to_string());
    let c = Config::parse_with_env(&open, Path::new("g.yaml"), &env_app).unwrap();
    assert_eq!(c.users["default"].backend, Some(Login { user: "chstorm_app".into(), password: "p".into() }));
    assert!(c.users["default"].metrics);
    // The cluster's own password may come from the environment too.
    let cluster_password = "    password: \"\"                  #";
    assert!(EXAMPLE.contains(cluster_password));
    let text = EXAMPLE.replace(cluster_password, "    password_env: READER_PW #");
    assert_eq!(parse(&text).unwrap().clusters["storm"].password, "from-env");
    let e = err(&EXAMPLE.replace(cluster_password, "    password_env: X\n    password: \"\" #"));
    assert!(e.contains("clusters.storm: both password and password_env are set"), "{e}");
}

#[test]
fn cache_bound_and_each_users_cache() {
    let c = Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap();
    assert_eq!((c.cache.max_size_mib, c.users["default"].cache.as_ref()), (256, None), "off unless asked");
    let with = |v: &str| EXAMPLE.replace("    # cache: {ttl: 2s, max_entry_size_kib: 512, max_waiters: 256}", v);
    let c =
        Config::parse(&with("    cache: {ttl: 2s, max_entry_size_kib: 512, max_waiters: 256}"), Path::new("g.yaml"));
    let u = c.unwrap().users["default"].cache.clone().unwrap();
    assert_eq!((u.ttl, u.max_entry_size, u.max_waiters), (Duration::from_secs(2), 512 << 10, 256));
    let u = Config::parse(&with("    cache: {ttl: 0s}"), Path::new("g.yaml")).unwrap().users["default"].cache.clone();
    let u = u.unwrap();
    assert!(!u.keeps(), "ttl 0s merges only");
    assert_eq!((u.max_entry_size, u.max_waiters), (512 << 10, 256), "the defaults");
    for (v, want) in [
        ("    cache: {ttl: 2h}", "users[0].cache.ttl: 2h is too long; at most 1h"),
        ("    cache: {ttl: 1s, max_entry_size_kib: 0}", "users[0].cache.max_entry_size_kib: 0 is out of bounds"),
        (
            "    cache: {ttl: 1s, max_entry_size_kib: 70000}",
            "users[0].cache.max_entry_size_kib: 70000 is out of bounds",
        ),
        ("    cache: {ttl: 1s, max_waiters: 0}", "users[0].cache.max_waiters: must be at least 1"),
        ("    cache: {max_waiters: 3}", "missing field `ttl`"),
        ("    cache: {ttl: 1s, size: 3}", "unknown field `size`"),
    ] {
        let e = bad(&with(v));
        assert!(e.contains(want), "{v}: {e}");
    }
    let e = bad(&EXAMPLE.replace("  max_size_mib: 256", "  max_size_mib: 0"));
    assert!(e.contains("cache.max_size_mib: must be at least 1"), "{e}");
}
