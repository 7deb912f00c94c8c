//! Thresholds judged on a report: each one's value and verdict, and the report's verdict.
//!
//! A whole run's thresholds pass or fail on its figures. A segment's (`--segment I/N`) cannot:
//! its QPS, percentiles and error rate are a part of the run's. It records each as `pending`,
//! for `chstorm merge` to judge over the merged histogram, unless the part alone already
//! decides it ([`Threshold::lost`]: a max exceeded, an error budget spent), which fails.

use crate::report::{BenchReport, ThresholdVerdict, FAIL, PASS, PENDING};
use crate::OutputError;
use chstorm_load::{Figures, Threshold};
use chstorm_stats::LatencyHistogram;

/// How to judge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Judging {
    /// The report is the whole run: pass or fail.
    Whole,
    /// The report is one segment of a run that sends at most `planned` queries in all (when
    /// known): fail only what the segment alone decides, the rest is pending.
    Segment { planned: Option<u64> },
}

/// Judges `thresholds` on `r`, replacing its verdicts; then sets `r.verdict` over them and its
/// scenarios' verdicts.
pub fn judge(r: &mut BenchReport, thresholds: &[Threshold], how: Judging) -> Result<(), OutputError> {
    let hist = LatencyHistogram::from_base64(&r.histogram)
        .map_err(|e| OutputError::BadReport { path: "-".into(), reason: e.to_string() })?;
    let f = Figures { hist: &hist, queries: r.queries, errors: r.errors, qps: r.qps };
    r.thresholds = thresholds
        .iter()
        .map(|t| {
            let (value, verdict) = match how {
                Judging::Whole => {
                    let (v, ok) = t.judge(&f);
                    (v, if ok { PASS } else { FAIL })
                }
                Judging::Segment { planned } if t.lost(&f, planned) => (f.value(t.figure), FAIL),
                Judging::Segment { .. } => (None, PENDING),
            };
            ThresholdVerdict {
                threshold: t.text.clone(),
                abort_on_fail: t.abort_on_fail,
                value,
                verdict: verdict.into(),
            }
        })
        .collect();
    r.verdict = overall(r);
    Ok(())
}

/// Judges a merged report as the whole run: each scenario on the thresholds it records, the
/// total on its recorded ones and `extra` (`chstorm merge --threshold`).
pub fn judge_merged(r: &mut BenchReport, extra: &[Threshold]) -> Result<(), OutputError> {
    for sc in &mut r.scenarios {
        let own = recorded(sc)?;
        judge(sc, &own, Judging::Whole)?;
    }
    let mut all = recorded(r)?;
    union(&mut all, extra);
    judge(r, &all, Judging::Whole)
}

/// The thresholds a report records, parsed again (to judge a merge on them).
pub fn recorded(r: &BenchReport) -> Result<Vec<Threshold>, OutputError> {
    r.thresholds
        .iter()
        .map(|v| {
            let t =
                Threshold::parse(&v.threshold).map_err(|reason| OutputError::BadReport { path: "-".into(), reason })?;
            Ok(if v.abort_on_fail { t.aborting() } else { t })
        })
        .collect()
}

/// Adds `extra` to `into`, leaving out expressions already there.
pub fn union(into: &mut Vec<Threshold>, extra: &[Threshold]) {
    for t in extra {
        if !into.iter().any(|have| have.text == t.text) {
            into.push(t.clone());
        }
    }
}

/// `fail` when a threshold of `r` or of its scenarios failed, else `pending` when one is
/// pending, else `pass`; None without thresholds.
pub fn overall(r: &BenchReport) -> Option<String> {
    let words =
        r.thresholds.iter().map(|t| t.verdict.as_str()).chain(r.scenarios.iter().filter_map(|s| s.verdict.as_deref()));
    let mut seen = None;
    for w in words {
        seen = match (seen, w) {
            (_, FAIL) => return Some(FAIL.into()),
            (Some(PENDING), _) | (_, PENDING) => Some(PENDING),
            (_, _) => Some(PASS),
        };
    }
    seen.map(String::from)
}

/// True when `r` (or one of its scenarios) failed a threshold.
pub fn failed(r: &BenchReport) -> bool {
    r.verdict.as_deref() == Some(FAIL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RunMeta;
    use std::time::Duration;

    fn report(latencies_ms: &[u64], errors: u64) -> BenchReport {
        let meta = RunMeta {
            target: "http://127.0.0.1:8123/".into(),
            protocol: "http".into(),
            keepalive: true,
            concurrency: 1,
            rate: None,
            ramp: None,
            settings: vec![],
            workload: vec!["SELECT 1".into()],
            warmup_s: 0.0,
            label: None,
        };
        let mut total = chstorm_stats::Interval::default();
        for &ms in latencies_ms {
            total.record_ok(Duration::from_millis(ms), 1, 1);
        }
        for _ in 0..errors {
            total.record_error_with("timeout", || "timed out".into());
        }
        let result = chstorm_load::RunResult {
            total,
            per_second: vec![],
            elapsed: Duration::from_secs(1),
            dropped: 0,
            stop_reason: chstorm_load::StopReason::Requests,
            server_version: None,
            started_at: std::time::SystemTime::now(),
            run_id: "r".into(),
            cancelled: 0,
            cancel_failures: 0,
            late_start: Duration::ZERO,
        };
        BenchReport::new(&meta, &result)
    }

    fn t(s: &str) -> Threshold {
        Threshold::parse(s).unwrap()
    }

    #[test]
    fn a_whole_run_passes_or_fails_each_threshold() {
        let mut r = report(&[1, 1, 1, 30], 1);
        judge(&mut r, &[t("p50<2ms"), t("max<10ms"), t("qps>=4"), t("error_rate<25%")], Judging::Whole).unwrap();
        let got: Vec<(&str, &str)> = r.thresholds.iter().map(|v| (v.threshold.as_str(), v.verdict.as_str())).collect();
        assert_eq!(got, [("p50<2ms", PASS), ("max<10ms", FAIL), ("qps>=4", PASS), ("error_rate<25%", PASS)]);
        // The histogram's value, to its 3 significant digits.
        let max = r.thresholds[1].value.unwrap();
        assert!((max - 0.03).abs() < 0.03 * 1e-3, "{max}");
        assert_eq!(r.verdict.as_deref(), Some(FAIL));
        assert!(failed(&r));
        judge(&mut r, &[t("p50<2ms")], Judging::Whole).unwrap();
        assert_eq!(r.verdict.as_deref(), Some(PASS));
        judge(&mut r, &[], Judging::Whole).unwrap();
        assert_eq!(r.verdict, None);
    }

    #[test]
    fn a_segment_fails_only_what_it_decides_alone() {
        let mut r = report(&[1, 1, 1, 30], 1);
        judge(
            &mut r,
            &[t("qps>=100"), t("max<10ms"), t("p99<5ms"), t("errors<5")],
            Judging::Segment { planned: Some(1000) },
        )
        .unwrap();
        let got: Vec<&str> = r.thresholds.iter().map(|v| v.verdict.as_str()).collect();
        assert_eq!(got, [PENDING, FAIL, PENDING, PENDING]);
        assert_eq!(r.verdict.as_deref(), Some(FAIL));
        judge(&mut r, &[t("qps>=100")], Judging::Segment { planned: None }).unwrap();
        assert_eq!(r.verdict.as_deref(), Some(PENDING));
        // Recorded thresholds come back as they were given.
        judge(&mut r, &[t("p99<5ms").aborting()], Judging::Segment { planned: None }).unwrap();
        assert_eq!(recorded(&r).unwrap(), vec![t("p99<5ms").aborting()]);
    }

    #[test]
    fn scenarios_verdicts_count_in_the_total() {
        let mut a = report(&[1], 0);
        judge(&mut a, &[t("max<10ms")], Judging::Whole).unwrap();
        let mut b = report(&[50], 0);
        judge(&mut b, &[t("max<10ms")], Judging::Whole).unwrap();
        let mut total = report(&[1, 50], 0);
        total.scenarios = vec![a.clone(), b];
        judge(&mut total, &[], Judging::Whole).unwrap();
        assert_eq!(total.verdict.as_deref(), Some(FAIL), "a failed scenario fails the run");
        total.scenarios = vec![a];
        total.verdict = overall(&total);
        assert_eq!(total.verdict.as_deref(), Some(PASS));
        let mut list = vec![t("p99<1ms")];
        union(&mut list, &[t("p99<1ms"), t("qps>1")]);
        assert_eq!(list.len(), 2);
    }
}
