//! `chstorm bench` against a real ClickHouse started by the harness.

mod common;
use common::{bench, marker, query_log_counts};

fn server() -> &'static chstorm_local::LocalServer {
    chstorm_local::shared_server()
}

#[test]
fn http_keepalive_queries_reach_the_server_over_few_connections() {
    let s = server();
    let m = marker("ka");
    let (code, r) = bench(&["--url", s.http_url(), "-q", &format!("SELECT 1 AS {m}"), "-c", "4", "-n", "300"]);
    assert_eq!(code, 0);
    assert_eq!((r.queries, r.errors), (300, 0));
    assert_eq!(r.stop_reason, "requests");
    assert_eq!(r.server_version.as_deref().map(|v| v.chars().next().unwrap().is_ascii_digit()), Some(true));
    let (count, ports) = query_log_counts(s, &m, 300);
    assert_eq!(count, 300, "query_log must hold every query");
    assert!(ports <= 4, "keep-alive: 4 connections, saw {ports} client ports");
}

#[test]
fn http_without_keepalive_uses_a_connection_per_query() {
    let s = server();
    let m = marker("close");
    let (_, r) =
        bench(&["--url", s.http_url(), "-q", &format!("SELECT 1 AS {m}"), "-c", "2", "-n", "100", "--no-keepalive"]);
    assert_eq!((r.queries, r.errors), (100, 0));
    assert!(!r.keepalive);
    let (count, ports) = query_log_counts(s, &m, 100);
    assert_eq!(count, 100);
    assert!(ports >= 95, "one connection per query: saw only {ports} client ports for 100 queries");
}

#[test]
fn native_queries_reach_the_server() {
    let s = server();
    let m = marker("native");
    let (_, r) = bench(&[
        "--url",
        s.native_url(),
        "-q",
        &format!("SELECT number AS {m} FROM numbers(10)"),
        "-c",
        "3",
        "-n",
        "200",
    ]);
    assert_eq!((r.queries, r.errors), (200, 0));
    assert_eq!(r.protocol, "native");
    assert_eq!(r.rows, 2000, "10 rows per query");
    let (count, ports) = query_log_counts(s, &m, 200);
    assert_eq!(count, 200);
    assert!(ports <= 3);
}

const MAX_THREADS_IS_1: &str = "SELECT throwIf(value != '1') FROM system.settings WHERE name = 'max_threads'";

#[test]
fn settings_take_effect_over_http_and_native() {
    let s = server();
    for url in [s.http_url(), s.native_url()] {
        let (_, with) = bench(&["--url", url, "-q", MAX_THREADS_IS_1, "-n", "20", "--setting", "max_threads=1"]);
        assert_eq!((with.queries, with.errors), (20, 0), "{url}: {:?}", with.errors_by_kind);
        assert_eq!(with.settings.get("max_threads").map(String::as_str), Some("1"));
        let (_, without) = bench(&["--url", url, "-q", MAX_THREADS_IS_1, "-n", "20"]);
        assert_eq!(without.errors, 20, "{url}: without the setting throwIf must fire");
        // FUNCTION_THROW_IF_VALUE_IS_NON_ZERO is code 395.
        assert_eq!(without.errors_by_kind.get("clickhouse_395"), Some(&20), "{url}: {:?}", without.errors_by_kind);
    }
    // Settings in the URL query string apply too.
    let url = format!("{}/?max_threads=1", s.http_url());
    let (_, r) = bench(&["--url", &url, "-q", MAX_THREADS_IS_1, "-n", "10"]);
    assert_eq!(r.errors, 0);
    let url = format!("{}?max_threads=1", s.native_url());
    let (_, r) = bench(&["--url", &url, "-q", MAX_THREADS_IS_1, "-n", "10"]);
    assert_eq!(r.errors, 0, "{:?}", r.errors_by_kind);
}

#[test]
fn placeholders_reach_the_server_with_their_values() {
    let s = server();
    let m = marker("ph");
    let q = format!("SELECT {{k:uniform(1,5)}} AS {m}, {{z:zipf(10,1.5)}}, {{q:seq(100)}}");
    let (_, r) = bench(&["--url", s.http_url(), "-q", &q, "-n", "200", "-c", "2"]);
    assert_eq!(r.errors, 0);
    common::flush_logs_until(
        s,
        &format!("SELECT count() FROM system.query_log WHERE type = 2 AND query LIKE '%AS {m}%' AND query NOT LIKE '%system.query_log%'"),
        200,
    );
    let out = s
        .query(&format!(
            "SELECT min(k), max(k), uniqExact(k), uniqExact(q) FROM (SELECT toUInt64(extract(query, 'SELECT ([0-9]+) AS')) AS k, extract(query, ', ([0-9]+)$') AS q FROM system.query_log WHERE type = 2 AND query LIKE '%AS {m}%' AND query NOT LIKE '%system.query_log%')"
        ))
        .unwrap();
    let v: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(v, vec![1, 5, 5, 200], "uniform(1,5) covers 1..5 and seq gives 200 distinct values");
}

#[test]
fn errors_are_counted_by_code_and_the_run_goes_on() {
    let s = server();
    let (code, r) = bench(&["--url", s.http_url(), "-q", "SELECT 1", "-q", "SELECT no_such_column", "-n", "40"]);
    assert_eq!(code, 0);
    assert_eq!((r.queries, r.errors), (20, 20));
    // 18.16 reports UNKNOWN_IDENTIFIER (47); current releases too.
    assert_eq!(r.errors_by_kind.get("clickhouse_47"), Some(&20), "{:?}", r.errors_by_kind);
    // A query that fails every time: the reason, no percentiles, and a failing exit status.
    for url in [s.http_url(), s.native_url()] {
        let (code, r) = bench(&["--url", url, "-q", "SELECT 1 FROM no_such_table_i14", "-n", "30", "-c", "2"]);
        assert_eq!(code, 3, "{url}: every query failed");
        assert_eq!((r.queries, r.errors), (0, 30));
        // UNKNOWN_TABLE (60), with the server's message.
        let sample = r.errors_sample.get("clickhouse_60").unwrap_or_else(|| panic!("{url}: {:?}", r.errors_sample));
        assert!(sample.contains("no_such_table_i14") && sample.contains("doesn't exist"), "{url}: {sample}");
        let text = chstorm_output::text::summary(&r);
        assert!(text.contains("no successful query") && !text.contains("0.000000 sec."), "{text}");
    }
    let (code, r) = bench(&["--url", s.native_url(), "-q", "SELECT no_such_column", "-d", "10s", "--max-errors", "5"]);
    assert_eq!(code, 1, "--max-errors exits 1");
    assert_eq!(r.stop_reason, "max_errors");
    assert!(r.errors >= 5 && r.duration_s < 5.0);
}

#[test]
fn tls_over_http_and_native() {
    let s = chstorm_local::shared_tls_server();
    let info = s.info();
    let ca = info.ca_cert.as_ref().unwrap().to_str().unwrap();
    for url in [info.https_url.as_deref().unwrap(), info.native_tls_url.as_deref().unwrap()] {
        let (_, r) = bench(&["--url", url, "--cacert", ca, "-q", "SELECT 1", "-n", "50", "-c", "2"]);
        assert_eq!((r.queries, r.errors), (50, 0), "{url}: {:?}", r.errors_by_kind);
        let (_, r) = bench(&["--url", url, "--insecure", "-q", "SELECT 1", "-n", "10", "--no-keepalive"]);
        assert_eq!((r.queries, r.errors), (10, 0), "{url} without keep-alive");
    }
}

#[test]
fn ping_works_on_both_protocols() {
    let s = server();
    for url in [s.http_url(), s.native_url()] {
        let (_, r) = bench(&["--url", url, "--ping", "-n", "100", "-c", "2"]);
        assert_eq!((r.queries, r.errors), (100, 0), "{url}");
        assert_eq!(r.workload, vec!["ping"]);
    }
}

/// How many queries whose text contains `marker` the server is running now; waits up to `within`
/// for the count to reach 0 and returns the last count.
fn running_after(s: &chstorm_local::LocalServer, marker: &str, within: std::time::Duration) -> u64 {
    let sql = format!(
        "SELECT count() FROM system.processes WHERE query LIKE '%{marker}%' AND query NOT LIKE '%system.processes%'"
    );
    let t = std::time::Instant::now();
    loop {
        let n: u64 = s.query(&sql).unwrap().trim().parse().unwrap();
        if n == 0 || t.elapsed() > within {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn queries_given_up_on_are_cancelled_on_the_server() {
    let s = server();
    for url in [s.http_url(), s.native_url()] {
        let m = marker("cancel");
        // Never finishes: the first query times out at 1 s, the second is in flight when -d ends
        // the run at 1.5 s. Both must be gone from system.processes soon after.
        let q = format!("SELECT count() AS {m} FROM system.numbers");
        let (code, r) =
            bench(&["--url", url, "-q", &q, "-d", "1500ms", "--timeout", "1s", "--setting", "max_threads=1"]);
        assert_eq!(r.errors_by_kind.get("timeout"), Some(&1), "{url}: {:?}", r.errors_by_kind);
        assert_eq!(r.queries, 0);
        assert_eq!(code, 3, "{url}: no query succeeded");
        let left = running_after(s, &m, std::time::Duration::from_secs(3));
        assert_eq!(left, 0, "{url}: {left} queries still running on the server 3 s after the run");
        // Every query carried chstorm's query_id.
        let started = format!(
            "SELECT count() FROM system.query_log WHERE type = 1 AND query LIKE '%{m}%' AND query_id LIKE 'chstorm-%' AND query NOT LIKE '%system.query_log%'"
        );
        common::flush_logs_until(s, &started, 2);
        assert_eq!(s.query(&started).unwrap().trim(), "2", "{url}: two queries, each with a chstorm-... query_id");
    }
}

#[test]
fn a_query_id_setting_names_every_query() {
    let s = server();
    for url in [s.http_url(), s.native_url()] {
        let m = marker("qid");
        let (_, r) =
            bench(&["--url", url, "-q", &format!("SELECT 1 AS {m}"), "-n", "3", "--setting", &format!("query_id={m}")]);
        assert_eq!((r.queries, r.errors), (3, 0), "{url}: {:?}", r.errors_sample);
        let sql = format!(
            "SELECT count() FROM system.query_log WHERE type = 2 AND query_id = '{m}' AND query NOT LIKE '%system.query_log%'"
        );
        common::flush_logs_until(s, &sql, 3);
        assert_eq!(s.query(&sql).unwrap().trim(), "3", "{url}: the user's query_id wins");
    }
}
