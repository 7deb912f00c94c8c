//! Per-interval counters and the per-second series.

use crate::LatencyHistogram;
use std::collections::BTreeMap;
use std::time::Duration;

/// Longest error message kept in [`Interval::errors_sample`], in characters.
pub const MAX_SAMPLE_CHARS: usize = 500;

/// What one worker thread measured during one interval (normally one second).
#[derive(Debug, Clone, Default)]
pub struct Interval {
    /// Latencies of successful queries.
    pub hist: LatencyHistogram,
    /// Successful queries.
    pub queries: u64,
    /// Failed queries, all kinds.
    pub errors: u64,
    /// Failed queries by kind (`connect`, `timeout`, `io`, `http_<status>`, `clickhouse_<code>`).
    pub errors_by_kind: BTreeMap<String, u64>,
    /// The first message of each error kind (the server's own text where there is one), at
    /// most [`MAX_SAMPLE_CHARS`] characters: why queries failed, not only how many.
    pub errors_sample: BTreeMap<String, String>,
    /// Result payload bytes received.
    pub bytes: u64,
    /// Result rows received, where the protocol reports them.
    pub rows: u64,
    /// Open loop: sends that left more than 1 ms after their intended time.
    pub late: u64,
}

impl Interval {
    #[inline]
    pub fn record_ok(&mut self, latency: Duration, bytes: u64, rows: u64) {
        self.hist.record(latency);
        self.queries += 1;
        self.bytes += bytes;
        self.rows += rows;
    }

    /// Counts a failure of `kind`; `message` is asked for only when this interval has no
    /// message of that kind yet (no formatting on the hot path of a failing run).
    pub fn record_error_with(&mut self, kind: &str, message: impl FnOnce() -> String) {
        if !self.errors_sample.contains_key(kind) {
            let m = message();
            let m = match m.char_indices().nth(MAX_SAMPLE_CHARS) {
                Some((i, _)) => format!("{}...", &m[..i]),
                None => m,
            };
            self.errors_sample.insert(kind.to_string(), m);
        }
        self.record_error(kind);
    }

    pub fn record_error(&mut self, kind: &str) {
        self.errors += 1;
        match self.errors_by_kind.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.errors_by_kind.insert(kind.to_string(), 1);
            }
        }
    }

    /// Adds everything in `other`.
    pub fn merge(&mut self, other: &Interval) {
        self.hist.merge(&other.hist);
        self.queries += other.queries;
        self.errors += other.errors;
        self.bytes += other.bytes;
        self.rows += other.rows;
        self.late += other.late;
        for (k, v) in &other.errors_by_kind {
            *self.errors_by_kind.entry(k.clone()).or_default() += v;
        }
        for (k, m) in &other.errors_sample {
            self.errors_sample.entry(k.clone()).or_insert_with(|| m.clone());
        }
    }

    /// Takes the contents, leaving an empty interval that keeps its histogram allocation.
    pub fn take(&mut self) -> Interval {
        let out = self.clone();
        self.hist.reset();
        self.queries = 0;
        self.errors = 0;
        self.bytes = 0;
        self.rows = 0;
        self.late = 0;
        self.errors_by_kind.clear();
        self.errors_sample.clear();
        out
    }
}

/// One point of the per-second series.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SecondStats {
    /// Seconds since the measured part of the run began; this point covers `[t-1, t)`.
    pub t: u64,
    pub queries: u64,
    pub errors: u64,
    /// Median latency of the queries that completed in this second, in seconds.
    pub p50: f64,
    /// 99th percentile of the same, in seconds.
    pub p99: f64,
    /// Length of the interval in seconds: 1, except for the last second of a run that ended
    /// between two ticks. Queries per second over this point are `queries / span_s`.
    #[serde(default = "one_second")]
    pub span_s: f64,
}

fn one_second() -> f64 {
    1.0
}

impl SecondStats {
    /// A full second's point.
    pub fn from_interval(t: u64, i: &Interval) -> SecondStats {
        SecondStats::from_partial(t, i, 1.0)
    }

    /// A point covering only `span_s` seconds (0 < span_s <= 1).
    pub fn from_partial(t: u64, i: &Interval, span_s: f64) -> SecondStats {
        SecondStats {
            t,
            queries: i.queries,
            errors: i.errors,
            p50: i.hist.percentile_s(50.0),
            p99: i.hist.percentile_s(99.0),
            span_s: span_s.clamp(1e-3, 1.0),
        }
    }

    /// Queries per second over this point.
    pub fn qps(&self) -> f64 {
        self.queries as f64 / self.span_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_and_take() {
        let mut a = Interval::default();
        a.record_ok(Duration::from_millis(2), 10, 1);
        a.record_error("timeout");
        let mut b = Interval::default();
        b.record_ok(Duration::from_millis(4), 5, 1);
        b.record_error_with("timeout", || "second".into());
        b.record_error_with("clickhouse_202", || "x".repeat(600));
        a.merge(&b);
        assert_eq!(a.errors_sample.get("timeout").map(String::as_str), Some("second"));
        assert_eq!(a.errors_sample["clickhouse_202"].chars().count(), MAX_SAMPLE_CHARS + 3);
        a.record_error_with("timeout", || unreachable!("only the first message of a kind is made"));
        assert_eq!((a.queries, a.errors, a.bytes, a.rows), (2, 4, 15, 2));
        assert_eq!(a.errors_by_kind["timeout"], 3);
        let taken = a.take();
        assert_eq!(taken.queries, 2);
        assert_eq!(a.queries, 0);
        assert!(a.hist.is_empty() && a.errors_by_kind.is_empty() && a.errors_sample.is_empty());
        let s = SecondStats::from_interval(3, &taken);
        assert_eq!((s.t, s.queries, s.errors), (3, 2, 4));
        assert!((s.p99 - 0.004).abs() < 1e-5);
    }
}
