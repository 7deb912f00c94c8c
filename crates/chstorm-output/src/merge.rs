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
//! a file whose counts disagree with its own histogram (hand-edited or damaged), segments
//! (`--segment I/N`) that are not all the segments of one run once each, and runs whose
//! scenarios differ. Runs of several scenarios merge scenario by scenario.
//!
//! [`total`] adds up the scenarios of one run in one process: its QPS is over the run's wall
//! time, since scenarios may start and end at different times.

use crate::report::{BenchReport, SegmentInfo, MIXED};
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
        let names =
            |r: &BenchReport| r.scenarios.iter().map(|s| s.scenario.clone().unwrap_or_default()).collect::<Vec<_>>();
        if names(r) != names(first) {
            let list = |v: Vec<String>| if v.is_empty() { "none".to_string() } else { v.join(", ") };
            return Err(bad(format!(
                "its scenarios are {}, but {first_path}'s are {}: merge runs of one scenario file",
                list(names(r)),
                list(names(first))
            )));
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
    check_segments(reports)?;
    for (i, sc) in first.scenarios.iter().enumerate() {
        let name = sc.scenario.as_deref().unwrap_or("?");
        let part: Vec<(String, BenchReport)> =
            reports.iter().map(|(p, r)| (format!("{p} (scenario {name})"), r.scenarios[i].clone())).collect();
        check(&part, allow_mixed)?;
    }
    Ok(())
}

/// Segments must be all of one run's, each once: the same count and `--start-at`, every index
/// from 0 to N-1. Runs without segments pass.
fn check_segments(reports: &[(String, BenchReport)]) -> Result<(), OutputError> {
    let Some((first_path, first)) = reports.iter().find_map(|(p, r)| r.segment.as_ref().map(|s| (p, s))) else {
        return Ok(());
    };
    let err = |m: String| Err(OutputError::Segments(m));
    let start = |s: &SegmentInfo| s.start_at.clone().unwrap_or_else(|| "none".into());
    let mut seen: BTreeMap<u32, &str> = BTreeMap::new();
    for (path, r) in reports {
        let Some(s) = &r.segment else {
            return err(format!(
                "{path} is a whole run, but {first_path} is segment {}/{}: merge the segments of one run without other runs",
                first.index, first.count
            ));
        };
        if s.count != first.count {
            return err(format!(
                "{path} is segment {}/{}, but {first_path} is {}/{}: segments of one run share N",
                s.index, s.count, first.index, first.count
            ));
        }
        if s.start_at != first.start_at {
            return err(format!(
                "{path} started at {} (--start-at), but {first_path} at {}: segments of different runs; give the same --start-at to every segment of a run",
                start(s),
                start(first)
            ));
        }
        if let Some(other) = seen.insert(s.index, path) {
            return err(format!(
                "{path} and {other} are both segment {}/{}: give each segment of the run once",
                s.index, s.count
            ));
        }
    }
    let missing: Vec<String> =
        (0..first.count).filter(|i| !seen.contains_key(i)).map(|i| format!("{i}/{}", first.count)).collect();
    if !missing.is_empty() {
        return err(format!(
            "segment{} {} of the run {} missing: merge all {} segments (one file each), or none is counted",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", "),
            if missing.len() > 1 { "are" } else { "is" },
            first.count
        ));
    }
    Ok(())
}

/// Merges `reports` (at least one) into one report. Call [`check`] first.
pub fn merge(reports: &[(String, BenchReport)]) -> Result<BenchReport, OutputError> {
    let Some((_, first)) = reports.first() else {
        return Err(OutputError::BadReport { path: "-".into(), reason: "nothing to merge".into() });
    };
    let mut out = add_up(reports)?;
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
    // The segments make up the whole run again.
    out.segment = None;
    // Each input's thresholds, once; `judge` gives them their verdicts over the merged figures.
    for (_, r) in reports {
        for t in &r.thresholds {
            if !out.thresholds.iter().any(|have| have.threshold == t.threshold) {
                out.thresholds.push(t.clone());
            }
        }
    }
    for (i, sc) in first.scenarios.iter().enumerate() {
        let name = sc.scenario.as_deref().unwrap_or("?");
        let part: Vec<(String, BenchReport)> =
            reports.iter().map(|(p, r)| (format!("{p} (scenario {name})"), r.scenarios[i].clone())).collect();
        out.scenarios[i] = merge(&part)?;
    }
    Ok(out)
}

/// The total of one run's scenarios (`--scenarios`), which ran side by side in one process for
/// `window_s` seconds of wall time in all: counts and histograms add up, QPS is over the
/// window, and each scenario's per-second points move by its start offset.
pub fn total(scenarios: &[BenchReport], window_s: f64) -> Result<BenchReport, OutputError> {
    let named: Vec<(String, BenchReport)> = scenarios
        .iter()
        .map(|r| {
            let shift = r.start_offset_s.unwrap_or(0.0).round() as u64;
            let mut r = r.clone();
            r.per_second.iter_mut().for_each(|p| p.t += shift);
            (r.scenario.clone().unwrap_or_default(), r)
        })
        .collect();
    let mut out = add_up(&named)?;
    let all_same = |f: fn(&BenchReport) -> String| scenarios.iter().all(|r| f(r) == f(&scenarios[0]));
    if !all_same(|r| r.mode.clone()) {
        out.mode = MIXED.into();
    }
    if !all_same(|r| r.protocol.clone()) {
        out.protocol = MIXED.into();
    }
    if !all_same(|r| format!("{:?}", r.settings)) {
        out.settings.clear();
    }
    out.ramp = None;
    out.duration_s = window_s;
    out.qps = if window_s > 0.0 { out.queries as f64 / window_s } else { 0.0 };
    let names: Vec<&str> = scenarios.iter().filter_map(|r| r.scenario.as_deref()).collect();
    out.latency_note = format!(
        "total of the scenarios {}: percentiles over all their queries (the sum of their histograms), QPS over the run's {window_s:.2} s of wall time; each scenario's note says what its latencies include.",
        names.join(", ")
    );
    for why in ["interrupted", "threshold", "max_errors"] {
        if scenarios.iter().any(|r| r.stop_reason == why) {
            out.stop_reason = why.into();
            break;
        }
    }
    let ids: Vec<String> = scenarios.iter().flat_map(ids).collect();
    out.run_id = Some(format!("scenarios-{}", fnv(&ids.join(","))));
    out.scenario = None;
    out.start_offset_s = None;
    out.thresholds.clear();
    out.verdict = None;
    out.scenarios = scenarios.to_vec();
    Ok(out)
}

/// Counts, histograms, rates and connections of `reports` added up; labels are the first's.
fn add_up(reports: &[(String, BenchReport)]) -> Result<BenchReport, OutputError> {
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
            late_start: Duration::ZERO,
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

    fn segment(id: &str, index: u32, count: u32, start: &str) -> BenchReport {
        let mut r = run(id, "SELECT 1", "http", Some(100.0), &[100 + u64::from(index)]);
        r.segment = Some(SegmentInfo { index, count, start_at: Some(start.into()) });
        r
    }

    #[test]
    fn segments_must_be_all_of_one_run_once_each() {
        let t = "2030-01-01T00:00:00.000Z";
        let all = named(&[segment("a", 0, 3, t), segment("b", 1, 3, t), segment("c", 2, 3, t)]);
        check(&all, false).unwrap();
        let m = merge(&all).unwrap();
        assert_eq!((m.queries, m.segment.clone(), m.rate), (3, None, Some(300.0)));
        for (inputs, needle) in [
            (vec![segment("a", 0, 3, t), segment("c", 2, 3, t)], "segment 1/3 of the run is missing: merge all 3"),
            (vec![segment("a", 0, 4, t)], "segments 1/4, 2/4, 3/4 of the run are missing"),
            (
                vec![segment("a", 0, 2, t), segment("b", 0, 2, t), segment("c", 1, 2, t)],
                "b.json and a.json are both segment 0/2: give each segment of the run once",
            ),
            (vec![segment("a", 0, 2, t), segment("b", 1, 3, t)], "b.json is segment 1/3, but a.json is 0/2"),
            (
                vec![segment("a", 0, 2, t), segment("b", 1, 2, "2030-01-01T00:05:00.000Z")],
                "segments of different runs; give the same --start-at",
            ),
            (vec![segment("a", 0, 2, t), run("b", "SELECT 1", "http", Some(100.0), &[1])], "b.json is a whole run"),
        ] {
            let e = check(&named(&inputs), false).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn scenarios_merge_by_name_and_add_up_in_a_total() {
        let scen = |id: &str, name: &str, us: &[u64]| {
            let mut r = run(id, name, "http", None, us);
            r.scenario = Some(name.into());
            r
        };
        let total_a = total(&[scen("a1", "look", &[100, 100]), scen("a2", "scan", &[5000])], 2.0).unwrap();
        assert_eq!((total_a.queries, total_a.errors), (3, 2));
        assert!((total_a.qps - 1.5).abs() < 1e-9, "QPS over the wall time: {}", total_a.qps);
        assert_eq!(total_a.scenarios.len(), 2);
        let total_b = total(&[scen("b1", "look", &[200]), scen("b2", "scan", &[6000])], 2.0).unwrap();
        let both = named(&[total_a.clone(), total_b]);
        check(&both, false).unwrap();
        let m = merge(&both).unwrap();
        assert_eq!((m.queries, m.scenarios[0].queries, m.scenarios[1].queries), (5, 3, 2));
        assert_eq!(m.scenarios[0].merged_from, vec!["a1", "b1"]);
        let other = total(&[scen("c1", "look", &[1])], 1.0).unwrap();
        let e = check(&named(&[total_a, other]), false).unwrap_err().to_string();
        assert!(e.contains("its scenarios are look, but a.json's are look, scan"), "{e}");
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
