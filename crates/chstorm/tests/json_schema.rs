//! The JSON output against its committed schema, and `chstorm merge`.

mod common;
use chstorm_stats::LatencyHistogram;
use common::bench;

fn schema() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas/chstorm.bench.v1.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn assert_valid(v: &serde_json::Value) {
    let validator = jsonschema::validator_for(&schema()).unwrap();
    let errors: Vec<String> = validator.iter_errors(v).map(|e| format!("{} at {}", e, e.instance_path)).collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

#[test]
fn real_runs_match_the_schema() {
    let s = chstorm_local::shared_server();
    let url_with_password = s.http_url().replace("http://", "http://default:@");
    let (_, closed) = bench(&[
        "--url",
        &url_with_password,
        "-q",
        "SELECT 1",
        "-q",
        "SELECT bad",
        "-d",
        "2s",
        "-c",
        "2",
        "--label",
        "t/a",
    ]);
    let (_, open) = bench(&[
        "--url",
        s.native_url(),
        "--ping",
        "--rate",
        "100",
        "--ramp-to",
        "200",
        "--ramp-over",
        "1s",
        "-n",
        "150",
    ]);
    for r in [&closed, &open] {
        assert_valid(&serde_json::to_value(r).unwrap());
        assert_eq!(r.run_id.as_deref().map(str::len), Some(12), "every run has an id");
    }
    assert!(open.ramp.is_some());
    assert!(closed.per_second.len() >= 2);
    assert!(closed.errors_by_kind.contains_key("clickhouse_47"));
    // Why they failed: the server's own message, in the JSON and the text summary.
    let sample = &closed.errors_sample["clickhouse_47"];
    assert!(sample.contains("Code: 47") && sample.contains("bad"), "{sample}");
    assert!(chstorm_output::text::summary(&closed).contains(&format!("first clickhouse_47: {sample}")));
    // The schema really constrains: a report with a bad field fails it.
    let mut bad = serde_json::to_value(&closed).unwrap();
    bad["latency_s"]["p99.9"] = serde_json::json!("fast");
    let validator = jsonschema::validator_for(&schema()).unwrap();
    assert!(!validator.is_valid(&bad));
    let mut bad = serde_json::to_value(&closed).unwrap();
    bad.as_object_mut().unwrap().remove("histogram");
    assert!(!validator.is_valid(&bad));
}

#[test]
fn thresholds_segments_and_scenarios_match_the_schema() {
    let s = chstorm_local::shared_server();
    let (_, seg) = bench(&[
        "--url",
        s.http_url(),
        "-q",
        "SELECT {i:seq(1)}",
        "--rate",
        "100",
        "-c",
        "2",
        "-n",
        "20",
        "--segment",
        "1/2",
        "--start-at",
        "+1s",
        "--threshold",
        "p99<1s",
        "--abort-on-fail",
        "max<60s",
    ]);
    let v = serde_json::to_value(&seg).unwrap();
    assert_valid(&v);
    assert_eq!(v["segment"]["count"], 2);
    assert_eq!(v["thresholds"][1]["abort_on_fail"], true);
    assert_eq!(v["verdict"], "pending");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.yaml");
    std::fs::write(
        &file,
        "thresholds: [\"errors<1\"]\nscenarios:\n  - name: a\n    ping: true\n    requests: 20\n  - name: b\n    queries: [\"SELECT 1\"]\n    rate: 50\n    requests: 10\n    thresholds: [\"error_rate<50%\"]\n",
    )
    .unwrap();
    let (_, both) = bench(&["--url", s.native_url(), "--scenarios", file.to_str().unwrap()]);
    let v = serde_json::to_value(&both).unwrap();
    assert_valid(&v);
    assert_eq!((v["mode"].as_str(), v["scenarios"][1]["scenario"].as_str()), (Some("mixed"), Some("b")));
    // A scenario's report is checked as strictly as the total.
    let mut bad = v.clone();
    bad["scenarios"][0]["latency_s"]["p99"] = serde_json::json!("fast");
    assert!(!jsonschema::validator_for(&schema()).unwrap().is_valid(&bad));
}

#[test]
fn merge_adds_counts_and_merges_histograms() {
    let s = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    let mut reports = Vec::new();
    // Two client machines, as the same command on each (merge refuses different workloads,
    // protocols or settings).
    for i in 0..2 {
        let (_, r) = bench(&["--url", s.http_url(), "-q", "SELECT 1", "-n", &format!("{}", 200 + i * 100), "-c", "2"]);
        let p = dir.path().join(format!("r{i}.json"));
        std::fs::write(&p, r.to_json()).unwrap();
        paths.push(p.to_str().unwrap().to_string());
        reports.push(r);
    }
    let out = dir.path().join("merged.json");
    let cli = <chstorm::cli::Cli as clap::Parser>::try_parse_from(
        ["chstorm", "merge"]
            .into_iter()
            .chain(paths.iter().map(String::as_str))
            .chain(["--json", out.to_str().unwrap()]),
    )
    .unwrap();
    assert_eq!(chstorm::run(cli).unwrap(), 0);
    let merged = common::read_report(&out);
    assert_valid(&serde_json::to_value(&merged).unwrap());
    assert_eq!(merged.queries, 500);
    assert_eq!(merged.queries, reports.iter().map(|r| r.queries).sum::<u64>());
    assert!((merged.qps - reports.iter().map(|r| r.qps).sum::<f64>()).abs() < 1e-6);
    assert_eq!(merged.concurrency, 4);
    let ids: Vec<String> = reports.iter().map(|r| r.run_id.clone().unwrap()).collect();
    assert_eq!(merged.merged_from, ids, "the merge names its inputs");
    // Percentiles come from the summed histograms.
    let mut h = LatencyHistogram::new();
    for r in &reports {
        h.merge(&LatencyHistogram::from_base64(&r.histogram).unwrap());
    }
    assert_eq!(h.len(), 500);
    // Percentiles are whole microseconds, so they match exactly; the mean is a float sum whose
    // last bit may differ with the order of the additions.
    let (got, want) = (merged.latency_s, h.summary());
    assert_eq!(
        (got.min, got.p50, got.p90, got.p95, got.p99, got.p99_9, got.p99_99, got.max),
        (want.min, want.p50, want.p90, want.p95, want.p99, want.p99_9, want.p99_99, want.max)
    );
    assert!((got.mean - want.mean).abs() <= want.mean * 1e-12, "{} vs {}", got.mean, want.mean);
    assert!(merged.latency_s.p50 >= reports.iter().map(|r| r.latency_s.p50).fold(f64::MAX, f64::min));
    assert!(merged.latency_s.p50 <= reports.iter().map(|r| r.latency_s.p50).fold(0.0, f64::max));
}

fn merge_cli(args: &[&str]) -> anyhow::Result<i32> {
    let cli = <chstorm::cli::Cli as clap::Parser>::try_parse_from(["chstorm", "merge"].iter().chain(args)).unwrap();
    chstorm::run(cli)
}

#[test]
fn correct_omission_reweights_a_real_closed_loop_and_refuses_an_open_one() {
    let s = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    // One query in ten sleeps 20 ms, far above the mean interval: a tail to re-weight.
    let mut args = vec!["--url", s.http_url(), "-n", "400", "-c", "2"];
    for _ in 0..9 {
        args.extend(["-q", "SELECT 1"]);
    }
    args.extend(["-q", "SELECT sleep(0.02)"]);
    let (_, raw) = bench(&args);
    let input = dir.path().join("raw.json");
    std::fs::write(&input, raw.to_json()).unwrap();
    let out = dir.path().join("corrected.json");
    assert_eq!(
        merge_cli(&[input.to_str().unwrap(), "--correct-omission", "auto", "--json", out.to_str().unwrap()]).unwrap(),
        0
    );
    let c = common::read_report(&out);
    assert_valid(&serde_json::to_value(&c).unwrap());
    let want_interval = raw.duration_s / (raw.queries / raw.concurrency) as f64;
    let got_interval = c.co_correction_interval_s.expect("interval recorded");
    assert!((got_interval - want_interval).abs() < 2e-6, "{got_interval} vs {want_interval}");
    assert_eq!(c.queries, raw.queries, "counts stay as measured");
    let corrected = LatencyHistogram::from_base64(&c.histogram).unwrap();
    let measured = LatencyHistogram::from_base64(&raw.histogram).unwrap();
    assert!(corrected.len() > raw.queries, "the 20 ms answers add hidden samples: {}", corrected.len());
    // Every hidden sample lies above the interval, so the share of samples at or above it rises.
    // (A percentile need not rise: P90 sits on the edge of the slow tenth, and samples added
    // between the interval and 20 ms can pull it down.)
    let interval = std::time::Duration::from_secs_f64(got_interval);
    let share = |h: &LatencyHistogram| h.count_at_or_above(interval) as f64 / h.len() as f64;
    assert!(
        share(&corrected) > share(&measured),
        "share at or above {got_interval}s: corrected {} vs raw {}",
        share(&corrected),
        share(&measured)
    );
    assert_eq!(c.latency_s.max, raw.latency_s.max);
    assert!(c.latency_note.contains("coordinated omission") && c.latency_note.contains("wrk"));
    // The raw file is untouched, and a corrected file is not corrected twice.
    assert_eq!(common::read_report(&input).histogram, raw.histogram);
    let again = merge_cli(&[out.to_str().unwrap(), "--correct-omission", "auto"]).unwrap_err().to_string();
    assert!(again.contains("already corrected"), "{again}");
    let (_, open) = bench(&["--url", s.http_url(), "-q", "SELECT 1", "--rate", "200", "-n", "50"]);
    let open_path = dir.path().join("open.json");
    std::fs::write(&open_path, open.to_json()).unwrap();
    let e = merge_cli(&[open_path.to_str().unwrap(), "--correct-omission", "1ms"]).unwrap_err().to_string();
    assert!(e.contains("open-loop"), "{e}");
}

#[test]
fn csv_rows_carry_the_clickhouse_sts_columns_first() {
    let s = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("r.csv");
    for _ in 0..2 {
        let (_, r) = bench(&["--url", s.http_url(), "-q", "SELECT 1", "-n", "50", "--label", "select1/http"]);
        chstorm_output::csv::append(&csv, &chstorm_output::csv::row(&r)).unwrap();
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "header written once");
    let sts = "test_name,test_subtype1,test_subtype2,test_subtype3,protocol,http_keepalive,concurrency,QPS,num_queries,MiBPS_result,latency_0percentile,latency_20percentile,latency_50percentile,latency_80percentile,latency_90percentile,latency_95percentile,latency_99percentile,latency_999percentile";
    assert!(lines[0].starts_with(sts));
    let header: Vec<&str> = lines[0].split(',').collect();
    let row: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(header.len(), row.len());
    assert_eq!(&row[..2], &["select1", "http"]);
    assert_eq!(row[8], "50");
}
