//! The bench JSON object, schema id `chstorm.bench.v1`.

use chstorm_load::RunResult;
use chstorm_stats::{Percentiles, SecondStats};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Schema id written into every report.
pub const SCHEMA_ID: &str = "chstorm.bench.v1";

/// What was run, as opposed to what was measured.
#[derive(Debug, Clone)]
pub struct RunMeta {
    /// Target URL without password.
    pub target: String,
    pub protocol: String,
    pub keepalive: bool,
    pub concurrency: usize,
    /// Open loop: the arrival rate in queries per second (a ramp's final, held rate); None for
    /// a closed loop.
    pub rate: Option<f64>,
    /// A ramp (`--rate A --ramp-to B --ramp-over D`): where it starts and ends, and its length.
    pub ramp: Option<Ramp>,
    pub settings: Vec<(String, String)>,
    /// `ping`, or the query texts as written.
    pub workload: Vec<String>,
    pub warmup_s: f64,
    pub label: Option<String>,
}

/// A linear ramp of the arrival rate, then a hold at `to_qps`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Ramp {
    /// Queries per second at the start of the run (`--rate`).
    pub from_qps: f64,
    /// Queries per second at the end of the ramp, held after it (`--ramp-to`).
    pub to_qps: f64,
    /// Length of the ramp in seconds (`--ramp-over`), counted from the start of the run
    /// (warm-up included).
    pub over_s: f64,
}

/// A threshold's verdict (`--threshold`), as the JSON records it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ThresholdVerdict {
    /// The expression as given, e.g. `p99<5ms`.
    pub threshold: String,
    /// Given with `--abort-on-fail`: the run stops as soon as it can no longer be met.
    pub abort_on_fail: bool,
    /// The figure's value (seconds for latencies, a fraction for `error_rate`); null when there
    /// is none (no successful query) or, in a segment, none judged yet.
    pub value: Option<f64>,
    /// `pass`, `fail`, or `pending`: a segment's threshold that `chstorm merge` judges over all
    /// segments together.
    pub verdict: String,
}

/// Which part of a run this file is (`--segment I/N`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SegmentInfo {
    /// From 0 to `count - 1`.
    pub index: u32,
    pub count: u32,
    /// The run's common start (`--start-at`), RFC 3339 UTC; null when it was not given.
    pub start_at: Option<String>,
}

/// Verdict words.
pub const PASS: &str = "pass";
pub const FAIL: &str = "fail";
pub const PENDING: &str = "pending";
/// The `mode` (and `protocol`) of a total over scenarios that differ in it.
pub const MIXED: &str = "mixed";

/// One run. Every latency is in seconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BenchReport {
    pub schema: String,
    pub chstorm_version: String,
    /// This run's id, also in every query_id it sent (`chstorm-<run_id>-<connection>-<n>`).
    /// `chstorm merge` refuses to count one run twice by it. Absent in files of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// A merge's inputs: the run ids it was made of (absent in a single run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<String>,
    /// RFC 3339, UTC: when measuring began.
    pub started_at: String,
    pub label: Option<String>,
    pub target: String,
    pub protocol: String,
    pub keepalive: bool,
    /// `closed` or `open`.
    pub mode: String,
    pub concurrency: u64,
    /// Open loop: queries per second; a ramp's final, held rate (see `ramp`).
    pub rate: Option<f64>,
    /// Open loop with `--ramp-to`: the ramp's start and end rates and length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Ramp>,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub settings: BTreeMap<String, String>,
    pub workload: Vec<String>,
    pub server_version: Option<String>,
    /// Why the run ended: `duration`, `requests`, `max_errors` or `interrupted`.
    pub stop_reason: String,
    pub qps: f64,
    /// Successful queries.
    pub queries: u64,
    /// Failed queries.
    pub errors: u64,
    pub bytes: u64,
    pub rows: u64,
    /// Open loop: sends that left more than 1 ms after their intended time.
    pub late: u64,
    /// Open loop: sends due in the measured window that never left.
    pub dropped: u64,
    pub latency_s: Percentiles,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// The first message of each error kind, e.g. the server's exception text (at most 500
    /// characters each). Absent when nothing failed, and in files of older versions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors_sample: BTreeMap<String, String>,
    pub per_second: Vec<SecondStats>,
    /// The HDR histogram (microseconds), V2-deflate, base64; `chstorm merge` adds these up.
    pub histogram: String,
    /// What the latencies include.
    pub latency_note: String,
    /// Set when `chstorm merge --correct-omission` re-weighted the latencies: the expected
    /// interval, in seconds. Absent in raw runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub co_correction_interval_s: Option<f64>,
    /// Within `scenarios`: the scenario's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Within `scenarios`: seconds from the common start to the scenario's own start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_offset_s: Option<f64>,
    /// `--segment I/N`: which part of the run this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<SegmentInfo>,
    /// Each threshold with its value and verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<ThresholdVerdict>,
    /// Over every threshold here and in `scenarios`: `fail` when one failed, else `pending`
    /// when one waits for merge, else `pass`. Absent without thresholds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// `--scenarios`: each scenario's own report; the figures around them are the total.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scenarios: Vec<BenchReport>,
}

/// What a closed loop's latencies leave out.
pub const CLOSED_LOOP_NOTE: &str = "closed loop: each latency runs from send to last byte of the answer; time a query \
would have waited for a free connection is not included (coordinated omission). Use --rate for an open loop.";
/// What an open loop's latencies include.
pub const OPEN_LOOP_NOTE: &str = "open loop: each latency runs from the query's intended send time to the last byte \
of the answer, so waiting for a free connection (a stall) is included.";

/// An instant as RFC 3339 in UTC with milliseconds, as every report writes times.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let t: chrono::DateTime<chrono::Utc> = t.into();
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl BenchReport {
    pub fn new(meta: &RunMeta, r: &RunResult) -> BenchReport {
        BenchReport {
            schema: SCHEMA_ID.into(),
            chstorm_version: env!("CARGO_PKG_VERSION").into(),
            run_id: Some(r.run_id.clone()).filter(|id| !id.is_empty()),
            merged_from: Vec::new(),
            started_at: rfc3339(r.started_at),
            label: meta.label.clone(),
            target: meta.target.clone(),
            protocol: meta.protocol.clone(),
            keepalive: meta.keepalive,
            mode: if meta.rate.is_some() { "open" } else { "closed" }.into(),
            concurrency: meta.concurrency as u64,
            rate: meta.rate,
            ramp: meta.ramp,
            duration_s: r.elapsed.as_secs_f64(),
            warmup_s: meta.warmup_s,
            settings: meta.settings.iter().cloned().collect(),
            workload: meta.workload.clone(),
            server_version: r.server_version.clone(),
            stop_reason: r.stop_reason.as_str().into(),
            qps: r.qps(),
            queries: r.total.queries,
            errors: r.total.errors,
            bytes: r.total.bytes,
            rows: r.total.rows,
            late: r.total.late,
            dropped: r.dropped,
            latency_s: r.total.hist.summary(),
            errors_by_kind: r.total.errors_by_kind.clone(),
            errors_sample: r.total.errors_sample.clone(),
            per_second: r.per_second.clone(),
            histogram: r.total.hist.to_base64(),
            latency_note: if meta.rate.is_some() { OPEN_LOOP_NOTE } else { CLOSED_LOOP_NOTE }.into(),
            co_correction_interval_s: None,
            scenario: None,
            start_offset_s: None,
            segment: None,
            thresholds: Vec::new(),
            verdict: None,
            scenarios: Vec::new(),
        }
    }

    /// Every report within this one: itself, then its scenarios.
    pub fn all(&self) -> impl Iterator<Item = &BenchReport> {
        std::iter::once(self).chain(self.scenarios.iter())
    }

    /// Pretty JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
