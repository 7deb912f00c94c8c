//! Merging runs made at the same time from several client machines.
//!
//! Counts add up; QPS adds up (the machines ran side by side); latency percentiles come from the
//! sum of the HDR histograms, so they are exact, not averages of percentiles. Per-second points
//! are matched by `t`: counts add up, and `p50`/`p99` are the highest of the inputs (an upper
//! bound; the inputs carry no per-second histograms).
//!
//! Before anything is added up, [`check`] refuses what would make the sum a lie: the same run
//! twice (by `run_id`, or for files without one by start time and histogram), runs of
//! different workloads, modes, protocols, keep-alive modes or settings (unless `allow_mixed`),
//! and a file whose counts disagree with its own histogram (hand-edited or damaged).

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

/// The run ids a report stands for: its own, or a merge's inputs.
fn ids(r: &BenchReport) -> Vec<String> {
    if !r.merged_from.is_empty() {
        r.merged_from.clone()
    } else if let Some(id) = &r.run_id {
        vec![id.clone()]
    } else {
        // Older files have no run id: the start time and the histogram tell a run apart.
        vec![format!("{}#{}", r.started_at, fnv(&r.histogram))]
    }
}

fn fnv(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// What must be equal for runs to be merged (without `allow_mixed`): name and value.
fn shape(r: &BenchReport) -> [(&'static str, String); 5] {
    let settings: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    [
        ("workload", r.workload.join(" | ")),
        ("mode", r.mode.clone()),
        ("protocol", r.protocol.clone()),
        ("keep-alive", r.keepalive.to_string()),
        ("settings", if settings.is_empty() { "none".into() } else { settings.join(",") }),
    ]
}

/// Checks that `reports` may be merged: each file's counts agree with its histogram and its
/// errors by kind, no run comes twice, and (unless `allow_mixed`) every run has the first
/// one's workload, mode, protocol, keep-alive mode and settings.
pub fn check(reports: &[(String, BenchReport)], allow_mixed: bool) -> Result<(), OutputError> {
    let Some((first_path, first)) = reports.first() else {
        return Err(OutputError::BadReport { path: "-".into(), reason: "nothing to merge".into() });
    };
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for (path, r) in reports {
        let bad = |reason: String| OutputError::BadReport { path: path.clone(), reason };
        let h = LatencyHistogram::from_base64(&r.histogram).map_err(|e| bad(e.to_string()))?;
        let recorded = h.len();
        let consistent = match r.co_correction_interval_s {
            None => recorded == r.queries,
            // A correction adds synthetic latencies: never fewer than the queries.
            Some(_) => recorded >= r.queries,
        };
        if !consistent {
            return Err(bad(format!(
                "\"queries\" says {} but its histogram holds {recorded} latencies: the file was edited or damaged; merge the file as chstorm wrote it",
                r.queries
            )));
        }
        let by_kind: u64 = r.errors_by_kind.values().sum();
        if by_kind != r.errors {
            return Err(bad(format!(
                "\"errors\" says {} but errors_by_kind adds up to {by_kind}: the file was edited or damaged",
                r.errors
            )));
        }
        for id in ids(r) {
            if let Some(other) = seen.insert(id.clone(), path) {
                return Err(OutputError::Duplicate { path: path.clone(), other: other.to_string(), run_id: id });
            }
        }
        if !allow_mixed {
            for ((field, a), (_, b)) in shape(first).iter().zip(shape(r).iter()) {
                if a != b {
                    return Err(OutputError::Mixed {
                        path: path.clone(),
                        first: first_path.clone(),
                        field,
                        first_value: a.clone(),
                        value: b.clone(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Merges `reports` (at least one) into one report. Call [`check`] first.
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
    for (_, r) in reports {
        for (k, m) in &r.errors_sample {
            out.errors_sample.entry(k.clone()).or_insert_with(|| m.clone());
        }
        for q in &r.workload {
            if !out.workload.contains(q) {
                out.workload.push(q.clone());
            }
        }
    }
    // Mixed runs (--allow-mixed) keep the first run's labels; the note says what differed.
    let mut mixed = Vec::new();
    for (i, (field, a)) in shape(first).iter().enumerate() {
        let mut values = vec![a.clone()];
        for (_, r) in reports {
            let v = shape(r)[i].1.clone();
            if !values.contains(&v) {
                values.push(v);
            }
        }
        if values.len() > 1 && *field != "workload" {
            mixed.push(format!("{field} ({})", values.join(" / ")));
        }
    }
    if !mixed.is_empty() {
        out.latency_note = format!(
            "{} Merged with --allow-mixed: the runs differ in {}; labels are the first run's.",
            out.latency_note,
            mixed.join(", ")
        );
    }
    if reports.len() > 1 {
        let merged_from: Vec<String> = reports.iter().flat_map(|(_, r)| ids(r)).collect();
        out.run_id = Some(format!("merge-{}", fnv(&merged_from.join(","))));
        out.merged_from = merged_from;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RunMeta;
    use std::time::Duration;

    fn run(id: &str, workload: &str, protocol: &str, rate: Option<f64>, latencies_us: &[u64]) -> BenchReport {
        let meta = RunMeta {
            target: "http://127.0.0.1:8123/".into(),
            protocol: protocol.into(),
            keepalive: true,
            concurrency: 2,
            rate,
            ramp: None,
            settings: vec![("max_threads".into(), "1".into())],
            workload: vec![workload.into()],
            warmup_s: 0.0,
            label: None,
        };
        let mut total = chstorm_stats::Interval::default();
        for &us in latencies_us {
            total.record_ok(Duration::from_micros(us), 10, 1);
        }
        total.record_error_with("clickhouse_60", || {
            "Code: 60, e.displayText() = DB::Exception: Table t doesn't exist".into()
        });
        let result = chstorm_load::RunResult {
            total,
            per_second: vec![],
            elapsed: Duration::from_secs(1),
            dropped: 0,
            stop_reason: chstorm_load::StopReason::Duration,
            server_version: None,
            started_at: std::time::SystemTime::now(),
            run_id: id.into(),
            cancelled: 0,
            cancel_failures: 0,
        };
        BenchReport::new(&meta, &result)
    }

    fn named(rs: &[BenchReport]) -> Vec<(String, BenchReport)> {
        rs.iter().enumerate().map(|(i, r)| (format!("{}.json", (b'a' + i as u8) as char), r.clone())).collect()
    }

    #[test]
    fn compatible_runs_merge_and_remember_their_ids() {
        let inputs =
            named(&[run("r1", "SELECT 1", "http", None, &[100, 200]), run("r2", "SELECT 1", "http", None, &[300])]);
        check(&inputs, false).unwrap();
        let m = merge(&inputs).unwrap();
        assert_eq!((m.queries, m.errors), (3, 2));
        assert_eq!(m.merged_from, vec!["r1", "r2"]);
        assert!(m.run_id.as_deref().unwrap().starts_with("merge-"));
        assert!(m.errors_sample["clickhouse_60"].contains("doesn't exist"));
        // A merge merged again with one of its inputs counts that input twice: refused.
        let again = vec![("m.json".to_string(), m), inputs[0].clone()];
        let e = check(&again, false).unwrap_err().to_string();
        assert!(e.starts_with("a.json: the same run as m.json (run id r1)"), "{e}");
    }

    #[test]
    fn the_same_file_twice_is_refused() {
        let r = run("r1", "SELECT 1", "http", None, &[100]);
        let e = check(&named(&[r.clone(), r.clone()]), false).unwrap_err().to_string();
        assert!(e.contains("the same run as a.json") && e.contains("give each run once"), "{e}");
        // Older files without a run id: told apart by start time and histogram.
        let mut old = r;
        old.run_id = None;
        assert!(check(&named(&[old.clone(), old.clone()]), true).is_err());
        let mut other = old.clone();
        other.started_at = "2020-01-01T00:00:00.000Z".into();
        check(&named(&[old, other]), false).unwrap();
    }

    #[test]
    fn incompatible_runs_are_refused_unless_allowed() {
        let base = run("r1", "SELECT 1", "http", None, &[100]);
        for (other, field) in [
            (run("r2", "SELECT 2", "http", None, &[100]), "workload"),
            (run("r2", "SELECT 1", "native", None, &[100]), "protocol"),
            (run("r2", "SELECT 1", "http", Some(100.0), &[100]), "mode"),
            (
                {
                    let mut r = run("r2", "SELECT 1", "http", None, &[100]);
                    r.settings.insert("max_threads".into(), "4".into());
                    r
                },
                "settings",
            ),
            (
                {
                    let mut r = run("r2", "SELECT 1", "http", None, &[100]);
                    r.keepalive = false;
                    r
                },
                "keep-alive",
            ),
        ] {
            let inputs = named(&[base.clone(), other]);
            let e = check(&inputs, false).unwrap_err().to_string();
            assert!(e.starts_with(&format!("b.json: {field} is ")) && e.contains("--allow-mixed"), "{e}");
            check(&inputs, true).unwrap();
            let m = merge(&inputs).unwrap();
            if field != "workload" {
                assert!(m.latency_note.contains(&format!("differ in {field}")), "{}", m.latency_note);
            } else {
                assert_eq!(m.workload.len(), 2);
            }
        }
    }

    #[test]
    fn counts_must_agree_with_the_histogram() {
        let mut edited = run("r1", "SELECT 1", "http", None, &[100, 200]);
        edited.queries = 2000;
        let e = check(&named(&[edited]), false).unwrap_err().to_string();
        assert!(e.contains("\"queries\" says 2000 but its histogram holds 2 latencies"), "{e}");
        let mut edited = run("r1", "SELECT 1", "http", None, &[100]);
        edited.errors = 5;
        let e = check(&named(&[edited]), false).unwrap_err().to_string();
        assert!(e.contains("errors_by_kind adds up to 1"), "{e}");
    }
}
