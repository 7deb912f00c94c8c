//! `chstorm bench` for CI and for one test from many machines, against a real ClickHouse:
//! thresholds and their exit status, `--abort-on-fail`, several scenarios in one run, and four
//! segments started together, merged and compared with one process doing the whole workload.
//! Bad input is refused in one line before any query is sent.

mod common;
use common::{bench, marker, read_report};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

fn server() -> &'static chstorm_local::LocalServer {
    chstorm_local::shared_server()
}

fn chstorm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chstorm")).args(args).env_remove("CHSTORM_URL").output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn thresholds_pass_or_fail_with_their_exit_status() {
    let s = server();
    // Every query succeeds: no error, and a median far under a minute.
    let (code, r) = bench(&[
        "--url",
        s.http_url(),
        "-q",
        "SELECT 1",
        "-n",
        "200",
        "--threshold",
        "errors<1",
        "--threshold",
        "error_rate<0.1%",
        "--threshold",
        "p50<60s",
    ]);
    assert_eq!(code, 0);
    assert_eq!(r.verdict.as_deref(), Some("pass"));
    let got: Vec<(&str, &str)> = r.thresholds.iter().map(|t| (t.threshold.as_str(), t.verdict.as_str())).collect();
    assert_eq!(got, [("errors<1", "pass"), ("error_rate<0.1%", "pass"), ("p50<60s", "pass")]);
    assert_eq!(r.thresholds[0].value, Some(0.0));
    assert_eq!(r.thresholds[2].value, Some(r.latency_s.p50), "the value is the report's own figure");
    // Half the queries fail (UNKNOWN_IDENTIFIER): the error limits fail, the run exits 4.
    for url in [s.http_url(), s.native_url()] {
        let (code, r) = bench(&[
            "--url",
            url,
            "-q",
            "SELECT 1",
            "-q",
            "SELECT no_such_column",
            "-n",
            "100",
            "--threshold",
            "error_rate<10%",
            "--threshold",
            "errors<=50",
            "--threshold",
            "qps>0",
        ]);
        assert_eq!(code, 4, "{url}: a failed threshold exits 4");
        assert_eq!((r.queries, r.errors), (50, 50));
        let got: Vec<&str> = r.thresholds.iter().map(|t| t.verdict.as_str()).collect();
        assert_eq!(got, ["fail", "pass", "pass"], "{url}");
        assert_eq!(r.thresholds[0].value, Some(0.5));
        assert_eq!(r.verdict.as_deref(), Some("fail"));
        let text = chstorm_output::text::summary(&r);
        assert!(text.contains("FAIL    error_rate<10%  50.0000%"), "{text}");
        assert!(text.contains("verdict: FAIL (1 of 3 thresholds failed)"), "{text}");
    }
    // No successful query: a latency limit has no value and fails.
    let (code, r) = bench(&["--url", s.http_url(), "-q", "SELECT no_such_column", "-n", "5", "--threshold", "p99<1s"]);
    assert_eq!((code, r.thresholds[0].value, r.thresholds[0].verdict.as_str()), (4, None, "fail"));
}

#[test]
fn abort_on_fail_stops_the_run_once_a_limit_is_lost() {
    let s = server();
    // An error budget: the 5th error spends it; the run would otherwise last 60 s.
    let t = std::time::Instant::now();
    let (code, r) =
        bench(&["--url", s.http_url(), "-q", "SELECT no_such_column", "-d", "60s", "--abort-on-fail", "errors<5"]);
    assert_eq!(code, 4);
    assert_eq!(r.stop_reason, "threshold");
    assert!(r.errors >= 5 && r.duration_s < 30.0 && t.elapsed().as_secs() < 40, "{} s", r.duration_s);
    assert_eq!(r.thresholds[0].verdict, "fail");
    assert!(r.thresholds[0].abort_on_fail);
    // An error rate with a known number of queries: half of them fail, so 10% of 20000 is
    // spent after about 4000 queries, long before the 20000.
    let (code, r) = bench(&[
        "--url",
        s.native_url(),
        "-q",
        "SELECT 1",
        "-q",
        "SELECT no_such_column",
        "-n",
        "20000",
        "--abort-on-fail",
        "error_rate<10%",
    ]);
    assert_eq!((code, r.stop_reason.as_str()), (4, "threshold"));
    assert!(r.errors >= 2000 && r.queries + r.errors < 20000, "{} + {}", r.queries, r.errors);
    // A limit that holds never stops the run.
    let (code, r) = bench(&["--url", s.http_url(), "-q", "SELECT 1", "-n", "300", "--abort-on-fail", "errors<1"]);
    assert_eq!((code, r.stop_reason.as_str(), r.queries), (0, "requests", 300));
}

/// A listener nobody should connect to: bad input must be refused before any query is sent.
fn untouched_url() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    (l, url)
}

fn assert_refused(args: &[&str], needle: &str) {
    let o = chstorm(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line, got:\n{err}");
    assert!(err.starts_with("chstorm: error: ") && err.contains(needle), "{args:?}: '{err}' lacks '{needle}'");
}

#[test]
fn bad_input_is_one_line_before_any_query() {
    let (listener, url) = untouched_url();
    let u = url.as_str();
    assert_refused(
        &["bench", "--url", u, "-q", "SELECT 1", "--threshold", "p99x<5ms"],
        "unknown figure 'p99x'; use p50",
    );
    assert_refused(&["bench", "--url", u, "-q", "SELECT 1", "--threshold", "p99<5"], "give '5' a unit");
    assert_refused(&["bench", "--url", u, "-q", "SELECT 1", "--abort-on-fail", "qps>=10"], "only when the run ends");
    assert_refused(&["bench", "--url", u, "-q", "SELECT 1", "-d", "5s", "--abort-on-fail", "p99<5ms"], "give -n N");
    assert_refused(&["bench", "--url", u, "-q", "SELECT 1", "--segment", "3/2"], "runs from 0 to 1");
    assert_refused(&["bench", "--url", u, "-q", "SELECT 1", "-c", "2", "--segment", "3/4"], "give -c of at least 4");
    assert_refused(&["bench", "--url", u, "-q", "SELECT 1", "--start-at", "2020-01-01T00:00:00Z"], "in the past");
    assert_refused(&["bench", "--url", u, "-q", "SELECT 1", "--start-at", "+3d"], "1 day");
    assert_refused(&["bench", "--url", u, "-q", "SELECT 1", "--start-at", "noon"], "RFC 3339");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.yaml");
    std::fs::write(&file, "scenarios:\n  - name: a\n    queries: [\"SELECT 1\"]\n    concurency: 4\n").unwrap();
    let f = file.to_str().unwrap();
    assert_refused(&["bench", "--url", u, "--scenarios", f], "s.yaml: line 4: scenarios[0].concurency: unknown field");
    std::fs::write(&file, "scenarios:\n  - name: a\n    queries: [\"SELECT {x:unifrom(1,2)}\"]\n").unwrap();
    assert_refused(&["bench", "--url", u, "--scenarios", f], "s.yaml: line 2: scenario a: ");
    assert_refused(&["bench", "--url", u, "--scenarios", f, "-c", "4"], "cannot be used with");
    // Commands that take bench's flags refuse the ones only bench acts on.
    assert_refused(&["colocate", "--url", u, "--threshold", "p99<1s"], "chstorm colocate does not take --threshold");
    assert!(listener.accept().is_err(), "a connection reached the server");
}

/// Two workloads at once, each with its own loop, figures and thresholds, and their total.
#[test]
fn two_scenarios_run_together_each_with_its_own_figures() {
    let s = server();
    let (look, scan) = (marker("look"), marker("scan"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("scans.sql"),
        format!("SELECT count() AS {scan} FROM numbers(100000) GROUP BY number % 10\n"),
    )
    .unwrap();
    let file = dir.path().join("mixed.yaml");
    std::fs::write(
        &file,
        format!(
            "thresholds: [\"errors<1\"]
scenarios:
  - name: lookups
    queries: [\"SELECT {{i:uniform(1,1000)}} AS {look}\"]
    rate: 100
    concurrency: 4
    requests: 150
    thresholds: [\"error_rate<1%\"]
  - name: scans
    queries_file: scans.sql
    concurrency: 2
    requests: 40
    start: 200ms
    settings: {{max_threads: 1}}
    thresholds: [\"qps>1000000000\"]
"
        ),
    )
    .unwrap();
    let (json, csv) = (dir.path().join("run.json"), dir.path().join("run.csv"));
    let o = chstorm(&[
        "bench",
        "--url",
        s.http_url(),
        "--scenarios",
        file.to_str().unwrap(),
        "--quiet",
        "--json",
        json.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(4), "the scans' QPS limit fails: {}", stderr(&o));
    let r = read_report(&json);
    let (a, b) = (&r.scenarios[0], &r.scenarios[1]);
    assert_eq!((a.scenario.as_deref(), b.scenario.as_deref()), (Some("lookups"), Some("scans")));
    assert_eq!((a.queries, a.mode.as_str(), a.rate, a.concurrency), (150, "open", Some(100.0), 4));
    assert_eq!((b.queries, b.mode.as_str(), b.rate, b.concurrency), (40, "closed", None, 2));
    assert_eq!(b.settings.get("max_threads").map(String::as_str), Some("1"));
    assert_eq!((r.queries, r.errors, r.mode.as_str(), r.concurrency), (190, 0, "mixed", 6));
    assert_eq!(
        (a.verdict.as_deref(), b.verdict.as_deref(), r.verdict.as_deref()),
        (Some("pass"), Some("fail"), Some("fail"))
    );
    assert_eq!(r.thresholds[0].verdict, "pass", "the total's own threshold");
    // Both started from one instant, the scans 200 ms after it.
    let t = |x: &str| chrono::DateTime::parse_from_rfc3339(x).unwrap();
    assert_eq!((t(&b.started_at) - t(&a.started_at)).num_milliseconds(), 200);
    assert_eq!(b.start_offset_s, Some(0.2));
    // Each scenario's own queries reached the server, as many as it counts.
    assert_eq!(common::query_log_counts(s, &look, 150).0, 150);
    assert_eq!(common::query_log_counts(s, &scan, 40).0, 40);
    // The total's histogram is the sum of the scenarios'.
    let h = |r: &chstorm_output::BenchReport| chstorm_stats::LatencyHistogram::from_base64(&r.histogram).unwrap();
    let mut sum = h(a);
    sum.merge(&h(b));
    assert_eq!(h(&r).len(), sum.len());
    assert_eq!(r.latency_s.max, sum.summary().max);
    // Text and CSV show each scenario and the total.
    let text = String::from_utf8_lossy(&o.stdout);
    for needle in
        ["== scenario lookups", "== scenario scans, started at +0.2 s", "== total of 2 scenarios (lookups, scans)"]
    {
        assert!(text.contains(needle), "{text}");
    }
    let rows: Vec<String> = std::fs::read_to_string(&csv).unwrap().lines().skip(1).map(String::from).collect();
    let tails: Vec<String> = rows.iter().map(|l| l.rsplitn(3, ',').take(2).collect::<Vec<_>>().join(",")).collect();
    assert_eq!(tails, ["pass,lookups", "fail,scans", "fail,total"]);
}

fn rfc3339_in(seconds: u64) -> String {
    let t = chrono::Utc::now() + chrono::Duration::seconds(seconds as i64);
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The values one run's `seq(1)` placeholder sent, by the tag of the run: count, distinct, min,
/// max, sum.
fn seq_values(s: &chstorm_local::LocalServer, table: &str, tag: &str) -> Vec<u64> {
    let out = s
        .query(&format!("SELECT count(), uniqExact(x), min(x), max(x), sum(x) FROM {table} WHERE run = '{tag}'"))
        .unwrap();
    out.split_whitespace().map(|v| v.parse().unwrap()).collect()
}

/// Four segments of one open-loop workload, started together as four processes, merged, and
/// compared with one process doing the whole workload.
#[test]
fn four_segments_merged_match_one_process() {
    let s = server();
    let table = marker("seq");
    s.query(&format!("CREATE TABLE {table} (run String, x Int64) ENGINE = Memory")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = |tag: &str| format!("INSERT INTO {table} VALUES ('{tag}', {{i:seq(1)}})");
    // 800 inserts at 200 a second: 4 s of schedule, the same for both runs.
    let common: Vec<String> =
        ["--rate", "200", "-c", "8", "-n", "800", "--quiet", "--threshold", "errors<1", "--threshold", "qps>=100"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let start = rfc3339_in(4);
    let seg_q = workload("seg");
    let children: Vec<_> = (0..4)
        .map(|i| {
            let json = dir.path().join(format!("seg{i}.json"));
            let mut args: Vec<String> =
                vec!["bench".into(), "--url".into(), s.http_url().into(), "-q".into(), seg_q.clone()];
            args.extend(common.iter().cloned());
            args.extend(["--segment".into(), format!("{i}/4"), "--start-at".into(), start.clone()]);
            args.extend(["--json".into(), json.to_str().unwrap().into()]);
            Command::new(env!("CARGO_BIN_EXE_chstorm"))
                .args(&args)
                .env_remove("CHSTORM_URL")
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a segment failed");
    }
    let paths: Vec<String> =
        (0..4).map(|i| dir.path().join(format!("seg{i}.json")).to_str().unwrap().to_string()).collect();
    let segs: Vec<_> = paths.iter().map(|p| read_report(Path::new(p))).collect();
    for (i, r) in segs.iter().enumerate() {
        let seg = r.segment.as_ref().unwrap();
        assert_eq!((seg.index, seg.count, seg.start_at.clone()), (i as u32, 4, Some(start.replace('Z', ".000Z"))));
        assert_eq!(r.started_at, start.replace('Z', ".000Z"), "every segment's clock starts at --start-at");
        assert_eq!((r.queries, r.concurrency, r.rate), (200, 2, Some(50.0)));
        // A segment's QPS is a quarter of the run's: its qps>=100 waits for the merge.
        assert_eq!(r.verdict.as_deref(), Some("pending"));
    }
    // The merge: all four segments, one verdict on the whole.
    let merged_path = dir.path().join("merged.json");
    let mut args: Vec<&str> = vec!["merge"];
    args.extend(paths.iter().map(String::as_str));
    args.extend(["--json", merged_path.to_str().unwrap(), "--threshold", "error_rate<1%"]);
    let o = chstorm(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let merged = read_report(&merged_path);
    let verdicts: Vec<(&str, &str)> =
        merged.thresholds.iter().map(|t| (t.threshold.as_str(), t.verdict.as_str())).collect();
    assert_eq!(verdicts, [("errors<1", "pass"), ("qps>=100", "pass"), ("error_rate<1%", "pass")]);
    // Three of four segments, or one twice, are refused.
    let o = chstorm(&["merge", &paths[0], &paths[1], &paths[3]]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("segment 2/4 of the run is missing"), "{}", stderr(&o));
    let o = chstorm(&["merge", &paths[0], &paths[1], &paths[2], &paths[3], &paths[1]]);
    assert!(o.status.code() == Some(2) && stderr(&o).contains("the same run"), "{}", stderr(&o));

    // One process, the whole workload.
    let one_path = dir.path().join("one.json");
    let one_q = workload("one");
    let mut args: Vec<&str> = vec!["bench", "--url", s.http_url(), "-q", &one_q];
    args.extend(common.iter().map(String::as_str));
    args.extend(["--json", one_path.to_str().unwrap()]);
    let o = chstorm(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let one = read_report(&one_path);
    assert_eq!(one.verdict.as_deref(), Some("pass"));
    // The same queries sent, connections and rate...
    assert_eq!((merged.queries, merged.errors), (one.queries, one.errors));
    assert_eq!((merged.queries, merged.concurrency, merged.rate), (800, 8, Some(200.0)));
    assert_eq!(merged.concurrency, one.concurrency);
    assert_eq!(merged.rate, one.rate);
    // ... the same seq values, each once: 1..=800 ...
    let want = vec![800, 800, 1, 800, 800 * 801 / 2];
    assert_eq!(seq_values(s, &table, "seg"), want, "the four segments together");
    assert_eq!(seq_values(s, &table, "one"), want, "one process");
    // ... and the same QPS within 30%: both follow one schedule of 200 sends a second, so
    // either QPS is the schedule's (about 200) unless the machine stalls a run for over a second.
    let ratio = merged.qps / one.qps;
    assert!((0.7..=1.3).contains(&ratio), "merged {} vs one {} QPS", merged.qps, one.qps);
    s.query(&format!("DROP TABLE {table}")).unwrap();
}
