//! Coordinated-omission correction of a closed-loop run, as wrk 4 does to its own figures.
//!
//! A closed loop sends a connection's next query only after the last answer, so a slow answer
//! hides the queries that would have been sent meanwhile. wrk 4 silently re-weights its
//! `--latency` percentiles for this after every run (`stats_correct`), with the expected
//! interval set to the run's mean time per query per connection. chstorm keeps the raw samples
//! in `bench --json`; `chstorm merge --correct-omission` applies the same model on request, so
//! the two tools can be compared like for like (docs/BENCH.md, "chstorm and wrk disagree").
//! An open loop (`--rate`) measures from the intended send time and needs no model.

use crate::report::BenchReport;
use crate::OutputError;
use chstorm_stats::LatencyHistogram;
use std::time::Duration;

/// The expected interval between a connection's queries: `duration × concurrency / queries`,
/// the mean time per query per connection (wrk's `runtime / (requests / connections)`).
pub fn auto_interval(r: &BenchReport) -> Result<Duration, OutputError> {
    if r.queries == 0 || r.duration_s <= 0.0 || r.concurrency == 0 {
        return Err(OutputError::Correction(
            "the run has no successful queries, so it has no mean interval; give one, e.g. --correct-omission 1ms"
                .into(),
        ));
    }
    let per_connection = (r.queries / r.concurrency).max(1);
    Ok(Duration::from_secs_f64(r.duration_s / per_connection as f64))
}

/// Re-weights `r`'s latencies for coordinated omission with `interval` (None: [`auto_interval`]).
/// Updates `latency_s`, `histogram`, `latency_note` and `co_correction_interval_s`; counts,
/// QPS and the per-second points stay as measured.
pub fn correct_omission(r: &mut BenchReport, interval: Option<Duration>) -> Result<(), OutputError> {
    if r.mode == "open" {
        return Err(OutputError::Correction(
            "this is an open-loop run (--rate), whose latencies already include queueing; drop the flag".into(),
        ));
    }
    if r.co_correction_interval_s.is_some() {
        return Err(OutputError::Correction("the input is already corrected; give the raw run".into()));
    }
    let interval = match interval {
        Some(i) => i,
        None => auto_interval(r)?,
    };
    let raw = LatencyHistogram::from_base64(&r.histogram).map_err(|e| OutputError::Correction(e.to_string()))?;
    let corrected = raw.corrected_for_omission(interval).map_err(|e| OutputError::Correction(e.to_string()))?;
    r.latency_s = corrected.summary();
    r.histogram = corrected.to_base64();
    r.co_correction_interval_s = Some(interval.as_micros() as f64 / 1e6);
    r.latency_note = format!(
        "closed loop, corrected for coordinated omission with an expected interval of {:.3} ms (the model wrk 4 \
         applies to its --latency figures): {} measured latencies, {} counted after correction; counts and QPS are \
         as measured.",
        interval.as_secs_f64() * 1e3,
        raw.len(),
        corrected.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{RunMeta, CLOSED_LOOP_NOTE};

    fn report(
        samples: &[(u64, u64)],
        queries: u64,
        concurrency: usize,
        duration_s: f64,
        rate: Option<f64>,
    ) -> BenchReport {
        let mut h = LatencyHistogram::new();
        for &(us, n) in samples {
            h.record_n(Duration::from_micros(us), n);
        }
        let meta = RunMeta {
            target: "http://127.0.0.1:8123".into(),
            protocol: "http".into(),
            keepalive: true,
            concurrency,
            rate,
            ramp: None,
            settings: vec![],
            workload: vec!["SELECT 1".into()],
            warmup_s: 0.0,
            label: None,
        };
        let run = chstorm_load::RunResult {
            total: Default::default(),
            per_second: vec![],
            elapsed: Duration::from_secs_f64(duration_s),
            dropped: 0,
            stop_reason: chstorm_load::StopReason::Duration,
            server_version: None,
            started_at: std::time::SystemTime::now(),
            run_id: String::new(),
            cancelled: 0,
            cancel_failures: 0,
            late_start: Duration::ZERO,
        };
        let mut r = BenchReport::new(&meta, &run);
        r.queries = queries;
        r.duration_s = duration_s;
        r.latency_s = h.summary();
        r.histogram = h.to_base64();
        r
    }

    #[test]
    fn auto_interval_is_the_mean_time_per_query_per_connection() {
        // 8 connections, 80,000 queries in 8 s: 10,000 each, one per 0.8 ms.
        let r = report(&[(500, 80_000)], 80_000, 8, 8.0, None);
        assert_eq!(auto_interval(&r).unwrap(), Duration::from_micros(800));
    }

    #[test]
    fn a_slow_tail_grows_and_the_raw_counts_stay() {
        // 990 fast answers and 10 of 10 ms, interval 1 ms: each slow one adds 9..2 ms (8 values).
        let mut r = report(&[(500, 990), (10_000, 10)], 1000, 1, 1.0, None);
        let raw_p99 = r.latency_s.p99;
        correct_omission(&mut r, Some(Duration::from_millis(1))).unwrap();
        assert_eq!(r.queries, 1000);
        assert_eq!(LatencyHistogram::from_base64(&r.histogram).unwrap().len(), 1000 + 80);
        assert!(r.latency_s.p99 > raw_p99 * 10.0, "{} vs {}", r.latency_s.p99, raw_p99);
        assert_eq!(r.co_correction_interval_s, Some(0.001));
        assert!(r.latency_note.contains("1000 measured latencies, 1080 counted"), "{}", r.latency_note);
        assert_ne!(r.latency_note, CLOSED_LOOP_NOTE);
        // Twice is refused: the input must be raw.
        assert!(correct_omission(&mut r, None).unwrap_err().to_string().contains("already corrected"));
    }

    #[test]
    fn merge_refuses_to_mix_corrected_and_raw_runs() {
        let raw = report(&[(500, 10), (10_000, 1)], 11, 1, 1.0, None);
        let mut corrected = raw.clone();
        correct_omission(&mut corrected, Some(Duration::from_millis(1))).unwrap();
        let inputs = [("raw.json".to_string(), raw.clone()), ("c.json".to_string(), corrected)];
        let e = crate::merge::merge(&inputs).unwrap_err().to_string();
        assert!(e.starts_with("c.json:") && e.contains("merge the raw runs, then correct"), "{e}");
        assert!(crate::merge::merge(&[("a".to_string(), raw.clone()), ("b".to_string(), raw)]).is_ok());
    }

    #[test]
    fn open_loops_and_empty_runs_are_refused_with_the_fix() {
        let mut open = report(&[(500, 10)], 10, 1, 1.0, Some(10.0));
        let e = correct_omission(&mut open, None).unwrap_err().to_string();
        assert!(e.contains("open-loop") && e.contains("drop the flag"), "{e}");
        let mut empty = report(&[], 0, 4, 1.0, None);
        let e = correct_omission(&mut empty, None).unwrap_err().to_string();
        assert!(e.contains("--correct-omission 1ms"), "{e}");
    }
}
