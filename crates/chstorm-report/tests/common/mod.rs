//! A synthetic sweep: 2 scenarios × 3 variants × concurrency 1..256, with per-second data.

#![allow(dead_code)]

use chstorm_output::report::{BenchReport, CLOSED_LOOP_NOTE, SCHEMA_ID};
use chstorm_report::{Environment, Point, ReportInput, Section, Table};
use chstorm_stats::{Percentiles, SecondStats};
use std::collections::BTreeMap;

pub const SELECT_QUERY: &str = "SELECT number FROM numbers(10) WHERE number < 5 AND 'a' <> 'b' & 1";

/// QPS of a variant at concurrency `c`: rises towards `peak`, then falls off past a few hundred.
pub fn model_qps(peak: f64, c: u64) -> f64 {
    let c = c as f64;
    peak * c / (c + 8.0) / (1.0 + (c / 400.0).powi(2))
}

pub fn bench(scenario: &str, variant: &str, c: u64, peak: f64, workload: &str) -> BenchReport {
    let qps = model_qps(peak, c);
    let mean = c as f64 / qps; // Little's law, seconds
    let latency_s = Percentiles {
        min: mean * 0.2,
        mean,
        p50: mean * 0.9,
        p90: mean * 1.6,
        p95: mean * 2.0,
        p99: mean * 3.0,
        p99_9: mean * 5.0,
        p99_99: mean * 8.0,
        max: mean * 12.0,
    };
    let per_second = (1..=15u64)
        .map(|t| {
            let wobble = 1.0 + 0.06 * ((t as f64 * 1.7 + c as f64).sin());
            SecondStats {
                t,
                queries: (qps * wobble).round() as u64,
                errors: 0,
                p50: latency_s.p50 * wobble,
                p99: latency_s.p99 / wobble,
                span_s: 1.0,
            }
        })
        .collect();
    let mut settings = BTreeMap::new();
    settings.insert("log_queries".to_string(), "0".to_string());
    if variant == "max_threads=1" {
        settings.insert("max_threads".to_string(), "1".to_string());
    }
    let (protocol, keepalive) = match variant {
        "native" => ("native", false),
        "http no keep-alive" => ("http", false),
        _ => ("http", true),
    };
    let errors = if c >= 256 { 3 } else { 0 };
    let mut errors_by_kind = BTreeMap::new();
    if errors > 0 {
        errors_by_kind.insert("connect".to_string(), errors);
    }
    BenchReport {
        schema: SCHEMA_ID.into(),
        chstorm_version: "0.1.0".into(),
        run_id: None,
        merged_from: Vec::new(),
        started_at: "2024-05-02T00:00:00.000Z".into(),
        label: Some(format!("{scenario}/{variant}/{c}")),
        target: "http://127.0.0.1:8123".into(),
        protocol: protocol.into(),
        keepalive,
        mode: "closed".into(),
        concurrency: c,
        rate: None,
        ramp: None,
        duration_s: 15.0,
        warmup_s: 2.0,
        settings,
        workload: vec![workload.to_string()],
        server_version: Some("24.3.2.23".into()),
        stop_reason: "duration".into(),
        qps,
        queries: (qps * 15.0).round() as u64,
        errors,
        bytes: 0,
        rows: 0,
        late: 0,
        dropped: 0,
        latency_s,
        errors_by_kind,
        errors_sample: BTreeMap::new(),
        per_second,
        histogram: String::new(),
        latency_note: CLOSED_LOOP_NOTE.into(),
        co_correction_interval_s: None,
        scenario: None,
        start_offset_s: None,
        segment: None,
        thresholds: Vec::new(),
        verdict: None,
        scenarios: Vec::new(),
    }
}

/// Name, workload, and (variant, peak QPS) of each variant.
type Scenario = (&'static str, &'static str, [(&'static str, f64); 3]);

pub fn synthetic_input() -> ReportInput {
    let scenarios: [Scenario; 2] = [
        ("ping", "ping", [("http keep-alive", 97_000.0), ("http no keep-alive", 18_500.0), ("native", 30_000.0)]),
        (
            "select 1 <filter>",
            SELECT_QUERY,
            [("http keep-alive", 14_000.0), ("native", 10_100.0), ("max_threads=1", 12_000.0)],
        ),
    ];
    let mut points = Vec::new();
    for (scenario, workload, variants) in scenarios {
        for (variant, peak) in variants {
            for k in 0..=8 {
                let c = 1u64 << k;
                points.push(Point {
                    scenario: scenario.into(),
                    variant: variant.into(),
                    concurrency: c,
                    result: bench(scenario, variant, c, peak, workload),
                });
            }
        }
    }
    ReportInput {
        title: "ClickHouse in the storm: connectivity".into(),
        environment: Environment {
            server_version: Some("24.3.2.23".into()),
            cores: 4,
            memory_bytes: 8 * 1024 * 1024 * 1024,
            chstorm_version: "0.1.0".into(),
            date: "2024-05-02T00:00:00Z".into(),
            target: "http://127.0.0.1:8123".into(),
            suite: "storm".into(),
            notes: vec!["synthetic data for tests & screenshots".into()],
        },
        points,
        sections: vec![
            Section {
                scenario: "select 1 <filter>".into(),
                description: "A trivial SELECT: network, authorisation, parser and formatting, nothing else.".into(),
                extra_tables: vec![Table {
                    title: "Threads".into(),
                    columns: vec!["max_threads".into(), "best QPS".into(), "at concurrency".into()],
                    rows: vec![
                        vec!["default".into(), "14,000".into(), "256".into()],
                        vec!["1".into(), "12,000".into(), "256".into()],
                    ],
                    note: Some("max_threads=1 helps at high concurrency".into()),
                }],
            },
            Section {
                scenario: "ping".into(),
                description: "The HTTP server's /ping: the most a server can answer.".into(),
                extra_tables: vec![],
            },
        ],
    }
}

/// The `data-points` value of every `<svg class="chart"`.
pub fn chart_points(html: &str) -> Vec<usize> {
    html.split("<svg class=\"chart\"")
        .skip(1)
        .map(|rest| {
            let tag = rest.split('>').next().unwrap_or("");
            let i = tag.find("data-points=\"").expect("every chart has data-points") + 13;
            tag[i..].split('"').next().unwrap().parse().expect("data-points is a number")
        })
        .collect()
}

/// A sweep shaped like `chstorm demo`'s: the storm suite's three scenarios over three protocols
/// (max_rand with and without max_threads=1) and the shopee suite's two point lookups over eight
/// settings, each scenario at its own order of magnitude of QPS (from about 100k down to about
/// 300), at concurrency 1, 8 and 32.
pub fn demo_like_input() -> ReportInput {
    let protocols = [("http", 1.0), ("http-close", 0.2), ("native", 0.35)];
    let mut scenarios: Vec<(&str, Vec<(String, f64)>)> = Vec::new();
    for (name, peak) in [("ping", 97_000.0), ("select1", 14_000.0)] {
        scenarios.push((name, protocols.iter().map(|(p, f)| (p.to_string(), peak * f)).collect()));
    }
    let mut max_rand = Vec::new();
    for (p, f) in protocols {
        max_rand.push((p.to_string(), 2_400.0 * f));
        max_rand.push((format!("{p} max_threads=1"), 3_100.0 * f));
    }
    scenarios.push(("max_rand", max_rand));
    for (name, peak) in [("point_select", 310.0), ("point_count", 420.0)] {
        let mut variants = Vec::new();
        for (i, threads) in [32, 16, 8, 4].into_iter().enumerate() {
            for cache in [0, 1] {
                let v = format!("http max_threads={threads} use_uncompressed_cache={cache}");
                variants.push((v, peak * (1.0 + i as f64) * (1.0 + 0.1 * cache as f64)));
            }
        }
        scenarios.push((name, variants));
    }
    let mut points = Vec::new();
    for (scenario, variants) in &scenarios {
        for (variant, peak) in variants {
            for c in [1u64, 8, 32] {
                points.push(Point {
                    scenario: scenario.to_string(),
                    variant: variant.clone(),
                    concurrency: c,
                    result: bench(scenario, variant, c, *peak, "SELECT 1"),
                });
            }
        }
    }
    let mut input = synthetic_input();
    input.title = "chstorm demo: storm and shopee".into();
    input.environment.suite = "storm + shopee".into();
    input.points = points;
    input.sections = scenarios
        .iter()
        .map(|(name, _)| Section { scenario: name.to_string(), description: String::new(), extra_tables: vec![] })
        .collect();
    input
}
