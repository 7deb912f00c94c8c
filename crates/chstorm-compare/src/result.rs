//! What a comparison found: the `chstorm.compare.v1` JSON document and what the report needs.
//!
//! Units: `old_s`, `new_s` and `times_s` are client (wall) times in seconds; `diff` and
//! `threshold` are fractions of the old median (0.05 is 5 %); `ratio` is new / old. Metric
//! values are medians in the metric's own unit (query_duration_ms in ms, memory_usage in bytes,
//! ProfileEvents as the server counts them).

use crate::flame::Folded;
use crate::metrics::ProfileEventsForm;
use crate::schedule::{Plan, Stop};
use crate::stats::{Rules, Verdict};
use serde::Serialize;
use std::collections::BTreeMap;

/// The schema id of the JSON document.
pub const SCHEMA: &str = "chstorm.compare.v1";

/// A value per side.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sides<T> {
    pub left: T,
    pub right: T,
}

/// One compared server.
#[derive(Debug, Clone, Serialize)]
pub struct SideInfo {
    /// The URL, without password.
    pub target: String,
    pub protocol: String,
    /// The server's version (`SELECT version()`).
    pub version: String,
    /// The http(s) URL server metrics were read from (no password), or null.
    pub metrics_url: Option<String>,
    /// Whether query_log rows were found for this side's runs.
    pub query_log: bool,
    pub profile_events: Option<ProfileEventsForm>,
    pub trace_log: bool,
    /// What this side could not provide, and why.
    pub notes: Vec<String>,
}

/// The options that shaped the result.
#[derive(Debug, Clone, Serialize)]
pub struct OptionsEcho {
    #[serde(flatten)]
    pub plan: Plan,
    #[serde(flatten)]
    pub rules: Rules,
    pub seed: u64,
    pub fail_on: usize,
    pub timeout_s: f64,
    /// Random splits per threshold.
    pub iterations: usize,
    /// The quantile of the randomization distribution used as the client-time threshold, at
    /// every look of the stopping rule.
    pub quantile: f64,
    /// Runs per side grow by this factor from one look to the next.
    pub look_growth: f64,
    /// The quantile of the server metrics' thresholds (one look, after the runs).
    pub metric_quantile: f64,
    /// Concurrent clients per side (1: query by query).
    pub concurrency: usize,
    /// With --concurrency above 1: each run's window, seconds.
    pub window_s: Option<f64>,
    /// Whether chstorm turned the query profiler on for the runs.
    pub profiler: bool,
}

/// One metric compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricResult {
    pub name: String,
    pub old: f64,
    pub new: f64,
    pub diff: Option<f64>,
    pub threshold: Option<f64>,
    /// The same decision as for client time ("slower" = the value grew).
    #[serde(skip)]
    pub verdict: Verdict,
}

/// Flamegraph data of one side of a changed query.
#[derive(Debug, Clone, Default)]
pub enum FlameSide {
    /// Not gathered: the query did not change.
    #[default]
    NotGathered,
    /// The server cannot give samples; the reason.
    Unavailable(String),
    /// Reading the samples failed.
    Failed(String),
    Samples(Folded),
}

/// One query's comparison.
#[derive(Debug, Clone, Serialize)]
pub struct QueryResult {
    /// Position in the query file (or suite), from 0.
    pub index: usize,
    /// The suite scenario (and params) the query came from; null for a query file.
    pub name: Option<String>,
    /// The query as written (placeholders unrendered).
    pub query: String,
    pub verdict: Verdict,
    /// Median client time of the old (left) side, seconds.
    pub old_s: Option<f64>,
    /// Median client time of the new (right) side, seconds.
    pub new_s: Option<f64>,
    /// new_s / old_s.
    pub ratio: Option<f64>,
    /// (new_s - old_s) / old_s.
    pub diff: Option<f64>,
    /// The randomization threshold as a fraction of old_s.
    pub threshold: Option<f64>,
    /// Measured runs per side.
    pub runs: Sides<usize>,
    /// Why the runs ended.
    pub stop: Stop,
    /// Server metrics that moved (|diff| >= threshold and >= --min-change), largest |diff| first.
    pub metrics: Vec<MetricResult>,
    /// For error verdicts: what failed, naming the side.
    pub error: Option<String>,
    /// Why the verdict is not what the numbers alone say (e.g. too few runs within --max-time).
    pub note: Option<String>,
    /// Every measured run's value, in run order, seconds: its client time; with --concurrency,
    /// its window's wall time per query (1 / QPS).
    pub times_s: Sides<Vec<f64>>,
    /// With --concurrency: the median QPS of each side's windows (1 / old_s, 1 / new_s).
    pub qps: Option<Sides<f64>>,
    /// For an unstable query: why, and what to change.
    pub explanation: Option<crate::explain::Explanation>,
    /// Every metric compared, client_time first (for `--store`).
    #[serde(skip)]
    pub all_metrics: Vec<MetricResult>,
    /// The measured runs' query_ids.
    #[serde(skip)]
    pub ids: Sides<Vec<String>>,
    #[serde(skip)]
    pub flames: Sides<FlameSide>,
}

/// Verdict counts.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub queries: usize,
    /// Per verdict, every verdict present (0 when none).
    pub verdicts: BTreeMap<&'static str, usize>,
    /// Queries that count against --fail-on: slower, and error_right (works on old, fails on new).
    pub regressions: usize,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct CompareResult {
    pub schema: &'static str,
    pub chstorm_version: String,
    /// Part of every query_id of this comparison: `chstorm-cmp-<run_id>-<n>`.
    pub run_id: String,
    /// When the comparison started (RFC 3339, UTC).
    pub date: String,
    pub left: SideInfo,
    pub right: SideInfo,
    pub options: OptionsEcho,
    pub summary: Summary,
    /// True when Ctrl-C stopped the comparison; queries not run are missing.
    pub interrupted: bool,
    /// In query-file order.
    pub queries: Vec<QueryResult>,
}

impl Summary {
    pub fn of(queries: &[QueryResult]) -> Summary {
        let mut verdicts: BTreeMap<&'static str, usize> = Verdict::ALL.iter().map(|v| (v.as_str(), 0)).collect();
        for q in queries {
            *verdicts.entry(q.verdict.as_str()).or_insert(0) += 1;
        }
        Summary {
            queries: queries.len(),
            verdicts,
            regressions: queries.iter().filter(|q| q.verdict.is_regression()).count(),
        }
    }

    pub fn count(&self, v: Verdict) -> usize {
        self.verdicts.get(v.as_str()).copied().unwrap_or(0)
    }
}

impl CompareResult {
    /// 0 when regressions are at most `fail_on`, 1 when more.
    pub fn exit_code(&self) -> i32 {
        if self.summary.regressions > self.options.fail_on {
            1
        } else {
            0
        }
    }

    /// The JSON document, pretty-printed.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Queries in report order: slower, faster, unstable, errors, too small, not significant;
    /// within a group the largest |diff| first, then file order.
    pub fn sorted(&self) -> Vec<&QueryResult> {
        let mut v: Vec<&QueryResult> = self.queries.iter().collect();
        v.sort_by(|a, b| {
            a.verdict
                .rank()
                .cmp(&b.verdict.rank())
                .then(b.diff.unwrap_or(0.0).abs().total_cmp(&a.diff.unwrap_or(0.0).abs()))
                .then(a.index.cmp(&b.index))
        });
        v
    }

    /// One line: `10 queries: 1 slower, 0 faster, ...`.
    pub fn summary_line(&self) -> String {
        let parts: Vec<String> = Verdict::ALL
            .iter()
            .filter(|v| self.summary.count(**v) > 0 || matches!(v, Verdict::Slower | Verdict::Faster))
            .map(|v| format!("{} {}", self.summary.count(*v), v.as_str()))
            .collect();
        format!("{} queries: {}", self.summary.queries, parts.join(", "))
    }
}
