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
pub fn summary(r: &BenchReport) -> String {
    let mut s = String::new();
    let mode = match (r.rate, r.ramp) {
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
    s
}
