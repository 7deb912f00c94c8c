//! Merging runs made at the same time from several client machines.
//!
//! Counts add up; QPS adds up (the machines ran side by side); latency percentiles come from the
//! sum of the HDR histograms, so they are exact, not averages of percentiles. Per-second points
//! are matched by `t`: counts add up, and `p50`/`p99` are the highest of the inputs (an upper
//! bound; the inputs carry no per-second histograms).

use crate::report::BenchReport;
use crate::OutputError;
use chstorm_stats::LatencyHistogram;
use std::collections::BTreeMap;

/// Reads a report written with `--json`.
pub fn read_report(path: &str) -> Result<BenchReport, OutputError> {
    let text = std::fs::read_to_string(path).map_err(|e| OutputError::Io { path: path.into(), source: e })?;
    let r: BenchReport =
        serde_json::from_str(&text).map_err(|e| OutputError::BadReport { path: path.into(), reason: e.to_string() })?;
    if r.schema != crate::report::SCHEMA_ID {
        return Err(OutputError::BadReport { path: path.into(), reason: format!("schema is '{}'", r.schema) });
    }
    Ok(r)
}

/// Merges `reports` (at least one) into one report.
pub fn merge(reports: &[(String, BenchReport)]) -> Result<BenchReport, OutputError> {
    let Some((_, first)) = reports.first() else {
        return Err(OutputError::BadReport { path: "-".into(), reason: "nothing to merge".into() });
    };
    let mut out = first.clone();
    let mut hist = LatencyHistogram::new();
    let mut per_second: BTreeMap<u64, chstorm_stats::SecondStats> = BTreeMap::new();
    let (mut qps, mut queries, mut errors, mut bytes, mut rows, mut late, mut dropped, mut conc) =
        (0.0, 0, 0, 0, 0, 0, 0, 0);
    let mut rate: Option<f64> = None;
    let mut duration: f64 = 0.0;
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for (path, r) in reports {
        if r.co_correction_interval_s != first.co_correction_interval_s {
            return Err(OutputError::MixedCorrection { path: path.clone() });
        }
        let h = LatencyHistogram::from_base64(&r.histogram)
            .map_err(|e| OutputError::BadReport { path: path.clone(), reason: e.to_string() })?;
        hist.merge(&h);
        qps += r.qps;
        queries += r.queries;
        errors += r.errors;
        bytes += r.bytes;
        rows += r.rows;
        late += r.late;
        dropped += r.dropped;
        conc += r.concurrency;
        duration = duration.max(r.duration_s);
        if let Some(x) = r.rate {
            rate = Some(rate.unwrap_or(0.0) + x);
        }
        for (k, v) in &r.errors_by_kind {
            *kinds.entry(k.clone()).or_default() += v;
        }
        for p in &r.per_second {
            let e = per_second.entry(p.t).or_insert(chstorm_stats::SecondStats {
                t: p.t,
                queries: 0,
                errors: 0,
                p50: 0.0,
                p99: 0.0,
                span_s: p.span_s,
            });
            e.queries += p.queries;
            e.errors += p.errors;
            e.p50 = e.p50.max(p.p50);
            e.p99 = e.p99.max(p.p99);
        }
    }
    out.qps = qps;
    out.queries = queries;
    out.errors = errors;
    out.bytes = bytes;
    out.rows = rows;
    out.late = late;
    out.dropped = dropped;
    out.concurrency = conc;
    out.rate = rate;
    out.duration_s = duration;
    out.errors_by_kind = kinds;
    out.latency_s = hist.summary();
    out.histogram = hist.to_base64();
    out.per_second = per_second.into_values().collect();
    let targets: Vec<&str> = reports.iter().map(|(_, r)| r.target.as_str()).collect();
    if targets.iter().any(|t| *t != first.target) {
        out.target = targets.join(" + ");
    }
    Ok(out)
}
