//! The final text summary, in the layout of clickhouse-benchmark.

use crate::report::BenchReport;
use std::fmt::Write;

/// Renders the summary. Example:
///
/// ```text
/// 127.0.0.1:8123 (http, keep-alive, closed loop, c=8), server 18.16.1, 10.00 s (duration)
/// queries 81234, errors 0, QPS: 8123.4, result MiB/s: 0.077.
///
/// 0.000%      0.000090 sec.
/// 50.000%     0.000950 sec.
/// ...
/// ```
///
/// A run of several scenarios (`--scenarios`) shows each scenario, then the total; thresholds
/// follow the figures they judge, and the run's verdict comes last.
pub fn summary(r: &BenchReport) -> String {
    let mut s = String::new();
    for sc in &r.scenarios {
        let offset = sc.start_offset_s.filter(|o| *o > 0.0).map(|o| format!(", started at +{o} s")).unwrap_or_default();
        let _ = writeln!(s, "== scenario {}{offset}", sc.scenario.as_deref().unwrap_or("?"));
        s.push_str(&one(sc));
        s.push('\n');
    }
    if !r.scenarios.is_empty() {
        let names: Vec<&str> = r.scenarios.iter().filter_map(|sc| sc.scenario.as_deref()).collect();
        let _ = writeln!(s, "== total of {} scenarios ({})", r.scenarios.len(), names.join(", "));
    }
    s.push_str(&one(r));
    if let Some(v) = &r.verdict {
        let all: Vec<&crate::report::ThresholdVerdict> = r.all().flat_map(|x| x.thresholds.iter()).collect();
        let failed = all.iter().filter(|t| t.verdict == crate::report::FAIL).count();
        let pending = all.iter().filter(|t| t.verdict == crate::report::PENDING).count();
        let _ = match v.as_str() {
            crate::report::FAIL => writeln!(s, "\nverdict: FAIL ({failed} of {} thresholds failed)", all.len()),
            crate::report::PENDING => writeln!(
                s,
                "\nverdict: pending ({pending} of {} thresholds are judged by chstorm merge over all segments)",
                all.len()
            ),
            _ => writeln!(s, "\nverdict: pass ({} thresholds met)", all.len()),
        };
    }
    s
}

/// How a figure's value reads: latencies in ms, an error rate in percent.
pub fn figure_value(figure: chstorm_load::threshold::Figure, v: f64) -> String {
    use chstorm_load::threshold::Figure;
    match figure {
        Figure::ErrorRate => format!("{:.4}%", v * 100.0),
        Figure::Errors => format!("{v}"),
        Figure::Qps => format!("{v:.1}"),
        _ => format!("{:.3} ms", v * 1e3),
    }
}

fn shown_value(threshold: &str, v: f64) -> String {
    match chstorm_load::Threshold::parse(threshold) {
        Ok(t) => figure_value(t.figure, v),
        Err(_) => format!("{v}"),
    }
}

/// One report's figures and thresholds.
fn one(r: &BenchReport) -> String {
    let mut s = String::new();
    let mode = match (r.rate, r.ramp) {
        _ if r.mode == crate::report::MIXED => {
            format!("open and closed loops, {} connections, {} QPS of open loops", r.concurrency, r.rate.unwrap_or(0.0))
        }
        (_, Some(ramp)) => format!(
            "open loop ramping from {} to {} QPS over {} s then holding, at most {} in flight",
            ramp.from_qps, ramp.to_qps, ramp.over_s, r.concurrency
        ),
        (Some(rate), None) => format!("open loop at {rate} QPS, at most {} in flight", r.concurrency),
        (None, None) => format!("closed loop, c={}", r.concurrency),
    };
    let _ = writeln!(
        s,
        "{} ({}, {}, {mode}), server {}, {:.2} s ({})",
        r.target,
        r.protocol,
        if r.keepalive { "keep-alive" } else { "new connection per query" },
        r.server_version.as_deref().unwrap_or("unknown"),
        r.duration_s,
        r.stop_reason
    );
    let mibs = if r.duration_s > 0.0 { r.bytes as f64 / r.duration_s / 1048576.0 } else { 0.0 };
    let _ = writeln!(s, "queries {}, errors {}, QPS: {:.1}, result MiB/s: {:.3}.", r.queries, r.errors, r.qps, mibs);
    if r.rate.is_some() {
        let _ = writeln!(s, "late sends (>1 ms): {}, dropped sends: {}.", r.late, r.dropped);
    }
    s.push('\n');
    let l = &r.latency_s;
    let percentiles = [
        ("0.000%", l.min),
        ("50.000%", l.p50),
        ("90.000%", l.p90),
        ("95.000%", l.p95),
        ("99.000%", l.p99),
        ("99.900%", l.p99_9),
        ("99.990%", l.p99_99),
        ("100.000%", l.max),
    ];
    if r.queries == 0 {
        // Zero percentiles would read as an impossibly fast server.
        let _ = writeln!(s, "no successful query: no latencies to show.");
    } else {
        for (p, v) in percentiles {
            let _ = writeln!(s, "{p:<10}\t{v:.6} sec.");
        }
    }
    if !r.errors_by_kind.is_empty() {
        let kinds: Vec<String> = r.errors_by_kind.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(s, "\nerrors by kind: {}", kinds.join(", "));
        for (k, m) in &r.errors_sample {
            let _ = writeln!(s, "  first {k}: {m}");
        }
    }
    let _ = writeln!(s, "\nnote: {}", r.latency_note);
    if !r.thresholds.is_empty() {
        let _ = writeln!(s, "\nthresholds:");
        let width = r.thresholds.iter().map(|t| t.threshold.len()).max().unwrap_or(0);
        for t in &r.thresholds {
            let value = match t.value {
                Some(v) => shown_value(&t.threshold, v),
                None if t.verdict == crate::report::PENDING => "judged by chstorm merge".into(),
                None => "no value (no query succeeded)".into(),
            };
            let abort = if t.abort_on_fail { "  (abort-on-fail)" } else { "" };
            let _ = writeln!(s, "  {:<7} {:<width$}  {value}{abort}", t.verdict.to_uppercase(), t.threshold);
        }
    }
    s
}
