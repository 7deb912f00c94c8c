//! Sweep, report, store and demo against real ClickHouse.

mod common;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SUITE: &str = "name: tiny
description: a tiny suite for tests
duration: 300ms
warmup: 100ms
concurrency: [1, 2, 4]
protocols: [http, native]
scenarios:
  - name: select1
    queries: ['SELECT 1']
  - name: threads
    queries: ['SELECT max(number) FROM numbers(1000)']
    settings:
      max_threads: [default, 1]
";

fn write_suite(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("tiny.yaml");
    std::fs::write(&p, SUITE).unwrap();
    p
}

fn sweep_cmd(suite: &std::path::Path, out: &std::path::Path, extra: &[&str]) -> Command {
    let s = chstorm_local::shared_server();
    let mut c = Command::new(env!("CARGO_BIN_EXE_chstorm"));
    c.args([
        "sweep",
        "--suite",
        suite.to_str().unwrap(),
        "--url",
        s.http_url(),
        "--url",
        s.native_url(),
        "--out",
        out.to_str().unwrap(),
    ])
    .args(extra)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

fn keys(out: &std::path::Path) -> Vec<String> {
    chstorm_sweep::read_points(out).unwrap().into_iter().map(|p| p.key).collect()
}

#[test]
fn a_sweep_resumes_after_a_kill_and_keeps_finished_points() {
    let dir = tempfile::tempdir().unwrap();
    let suite = write_suite(dir.path());
    let out = dir.path().join("out");
    // 2 protocols x (1 + 2 variants) x 3 levels = 18 points of ~0.4 s.
    let mut child = sweep_cmd(&suite, &out, &[]).spawn().unwrap();
    let t = Instant::now();
    while keys(&out).len() < 3 {
        assert!(t.elapsed() < Duration::from_secs(20), "no points written");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = keys(&out);
    assert!(before.len() >= 3 && before.len() < 18, "{}", before.len());
    let done = sweep_cmd(&suite, &out, &[]).output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(stdout.contains(&format!("{} already done", before.len())), "{stdout}");
    let after = keys(&out);
    assert_eq!(after.len(), 18, "every point once");
    let unique: std::collections::BTreeSet<_> = after.iter().collect();
    assert_eq!(unique.len(), 18, "no point measured twice");
    assert_eq!(&after[..before.len()], &before[..], "finished points were kept as they were");
    // results.csv: a header with the clickhouse-sts columns first, then one row per point.
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("test_name,test_subtype1,test_subtype2,test_subtype3,protocol,http_keepalive,concurrency,QPS,num_queries,MiBPS_result,latency_0percentile"));
    assert!(lines.len() >= 19, "header + 18 rows (a killed point may leave one extra row): {}", lines.len());
    assert!(out.join("report.html").exists());
}

#[test]
fn concurrency_levels_can_be_given_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("one.yaml");
    std::fs::write(&suite, "name: levels\nduration: 100ms\nwarmup: 0s\nconcurrency: [1]\nscenarios:\n  - name: ping\n    ping: true\n    concurrency: [2]\n").unwrap();
    let out = dir.path().join("out");
    let r = sweep_cmd(&suite, &out, &["--concurrency", "3,5"]).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let levels: Vec<u64> = chstorm_sweep::read_points(&out).unwrap().iter().map(|p| p.concurrency).collect();
    assert_eq!(levels, vec![3, 5], "the command line wins over the suite and the scenario");
}

#[test]
fn store_writes_every_point_into_clickhouse() {
    let s = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("one.yaml");
    std::fs::write(&suite, "name: store_test\nduration: 200ms\nwarmup: 0s\nconcurrency: [1, 2]\nscenarios:\n  - name: ping\n    ping: true\n").unwrap();
    let out = dir.path().join("out");
    let r = sweep_cmd(&suite, &out, &["--store", s.http_url()]).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let n = s.query("SELECT count() FROM chstorm.results WHERE suite = 'store_test' AND qps > 0").unwrap();
    assert_eq!(n.trim(), "2", "no protocols in the suite means http only; 2 levels");
}

#[test]
fn a_bad_suite_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("bad.yaml");
    std::fs::write(&suite, "name: bad\nconcurrency: [1]\nscenarios:\n  - name: a\n    queries: ['SELECT 1']\n    setings: {max_threads: [1]}\n").unwrap();
    let r = sweep_cmd(&suite, &dir.path().join("out"), &[]).output().unwrap();
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bad.yaml: line 6") && err.contains("setings"), "{err}");
}

/// Every chart of a report has data.
fn assert_charts_have_data(html: &str) {
    let charts: Vec<&str> = html.split("<svg").skip(1).filter(|s| s.contains("class=\"chart")).collect();
    assert!(!charts.is_empty(), "no charts");
    for c in &charts {
        let n: u64 = c
            .split("data-points=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(n > 0, "a chart without data: {}", &c[..c.len().min(200)]);
    }
    assert!(!html.contains("<script src") && !html.contains("@import"), "self-contained");
}

#[test]
fn demo_quick_runs_end_to_end_and_its_report_renders() {
    let dir = tempfile::tempdir().unwrap();
    let demo_dir = dir.path().join("demo");
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_chstorm"))
        .args(["demo", "--quick", "--dir", demo_dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{}", stdout, String::from_utf8_lossy(&out.stderr));
    assert!(t.elapsed() < Duration::from_secs(180), "demo --quick took {:?}", t.elapsed());
    for scenario in ["ping", "select1", "max_rand", "point_select", "point_count"] {
        assert!(stdout.contains(scenario), "summary lacks {scenario}:\n{stdout}");
    }
    // The server was stopped.
    assert!(chstorm_local::status(&demo_dir.join("server")).unwrap().is_none());
    let report = demo_dir.join("report.html");
    assert!(stdout.contains(&report.display().to_string()));
    let html = std::fs::read_to_string(&report).unwrap();
    assert_charts_have_data(&html);
    // The point lookups hit: FINAL rows came back.
    let shopee = chstorm_sweep::read_points(&demo_dir.join("shopee")).unwrap();
    let select = shopee.iter().find(|p| p.scenario == "point_select").unwrap();
    assert_eq!(select.result.errors, 0);
    assert!(select.result.bytes > select.result.queries * 50, "each lookup returned a row");
    common::screenshot_is_not_blank(&report);
    // The summary: one panel per scenario, each with a bar per variant, told apart by colour
    // within the panel (two suites give more variants than the palette has colours).
    let summary = &html[html.find("id=\"summary\"").unwrap()..];
    let summary = &summary[..summary.find("</section>").unwrap()];
    let panels: Vec<(&str, Vec<&str>)> = summary
        .split("<figure class=\"summary-panel\" data-scenario=\"")
        .skip(1)
        .map(|p| {
            let name = p.split('"').next().unwrap();
            let panel = &p[..p.find("</figure>").unwrap()];
            let fills = panel
                .split("<rect class=\"bar\"")
                .skip(1)
                .map(|r| r.split("fill=\"").nth(1).unwrap().split('"').next().unwrap())
                .collect();
            (name, fills)
        })
        .collect();
    let names: Vec<&str> = panels.iter().map(|(n, _)| *n).collect();
    for scenario in ["ping", "select1", "max_rand", "point_select", "point_count"] {
        assert_eq!(names.iter().filter(|n| **n == scenario).count(), 1, "one summary panel for {scenario}: {names:?}");
    }
    for (name, fills) in &panels {
        let distinct: std::collections::BTreeSet<&&str> = fills.iter().collect();
        assert!(!fills.is_empty() && distinct.len() == fills.len(), "{name}'s panel: {fills:?}");
    }
    // At 1400 px the best-of table shows every column.
    if let Some(cut) = common::tables_cut_at(&report, 1400) {
        assert!(!cut.iter().any(|c| c.starts_with("Best QPS")), "tables cut at 1400 px: {cut:?}");
    }
}

#[test]
fn resume_refuses_points_measured_differently_or_restarts() {
    let s = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("fp.yaml");
    let write = |duration: &str| {
        std::fs::write(&suite, format!("name: fp\nduration: {duration}\nwarmup: 0s\nconcurrency: [1]\nscenarios:\n  - name: ping\n    ping: true\n")).unwrap()
    };
    write("100ms");
    let out = dir.path().join("out");
    let run = |url: &str, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_chstorm"))
            .args(["sweep", "--suite", suite.to_str().unwrap(), "--url", url, "--out", out.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap()
    };
    let first = run(s.http_url(), &[]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    // The same sweep again: the point is reused.
    let again = run(s.http_url(), &[]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("1 already done"));
    // Another duration, another URL: refused, saying what differs, nothing lost.
    write("200ms");
    let r = run(s.http_url(), &[]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("measured differently") && err.contains("duration 0.1s (now 0.2s)"), "{err}");
    assert!(err.contains("--restart"), "{err}");
    write("100ms");
    let other_url = format!("{}/?max_threads=1", s.http_url());
    let err = String::from_utf8_lossy(&run(&other_url, &[]).stderr).to_string();
    assert!(err.contains("target") && err.contains("max_threads=1"), "{err}");
    assert_eq!(keys(&out).len(), 1, "the finished point is still there");
    // --restart measures again and keeps the earlier results aside.
    let r = run(&other_url, &["--restart"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(stdout.contains("1 run now") && stdout.contains("restarted"), "{stdout}");
    let points = chstorm_sweep::read_points(&out).unwrap();
    assert_eq!(points.len(), 1);
    assert!(points[0].result.target.contains("max_threads=1"), "{}", points[0].result.target);
    let moved: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("replaced-"))
        .collect();
    assert_eq!(moved.len(), 1);
    assert!(moved[0].path().join("results.jsonl").exists());
}

/// The Shopee suite (suites/shopee.yaml, quick mode cut to 4 queries a point at one client)
/// through a gateway on the tests' replicated 2x2 cluster: every point runs and no query fails.
/// (Its shop is an expression of the item id, not a literal, so its lookups go through the
/// Distributed table: fan-outs.)
#[test]
fn the_shopee_suite_runs_through_a_gateway_on_a_replicated_cluster() {
    let env = chstorm_testenv::start_cluster();
    assert!(env.cluster.topology().replicated());
    let gw = env.rt.block_on(chstorm_gateway::Gateway::start(env.gateway_config(|t| t))).unwrap();
    let url = format!("http://{}", gw.addr);
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../suites/shopee.yaml")).unwrap();
    let quick = "quick:\n  duration: 1s\n  warmup: 300ms\n  concurrency: [1, 16]\n";
    assert!(text.contains(quick), "the suite's quick mode changed; update this test");
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("shopee.yaml");
    std::fs::write(&suite, text.replace(quick, "quick:\n  requests: 4\n  warmup: 0s\n  concurrency: [1]\n")).unwrap();
    let out = dir.path().join("out");
    let run = Command::new(env!("CARGO_BIN_EXE_chstorm"))
        .args(["sweep", "--suite", suite.to_str().unwrap(), "--quick", "--url", &url, "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("shopee: 16 points planned, 16 run now, 0 already done, 0 failed"), "{stdout}");
    let m = chstorm_testenv::curl(&[&format!("{url}/metrics")]).2;
    let answered = |ok: bool| -> f64 {
        m.lines()
            .filter(|l| l.starts_with("chstorm_gateway_requests_total{") && l.contains("status=\"200\"") == ok)
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(answered(true) >= 64.0 && answered(false) == 0.0, "{m}");
}
