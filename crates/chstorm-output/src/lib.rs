//! chstorm's outputs.
//!
//! * [`report::BenchReport`]: one run as JSON, schema id `chstorm.bench.v1`
//!   (`schemas/chstorm.bench.v1.json` in the repository).
//! * [`text`]: the final summary, laid out like clickhouse-benchmark's.
//! * [`csv`]: one row per run; the columns are Altinity clickhouse-sts's, then ours.
//! * [`merge`]: combines runs made at the same time from several machines (the segments of one
//!   run, checked to be all there once each), and the scenarios of one run into their total.
//! * [`judge`]: thresholds judged on a report, and its verdict.
//! * [`file`]: output files opened (and checked) before a run.
//!
//! # Boundaries
//!
//! This crate owns the bench result formats (`chstorm.bench.v1` JSON, text, CSV) and merging.
//! It builds on `chstorm-stats` and `chstorm-load` (the run result); it must not import the
//! transports, the HTML reports, sweeps, the gateway or the CLI.

pub mod csv;
pub mod file;
pub mod judge;
pub mod merge;
pub mod omission;
pub mod report;
pub mod text;

pub use report::{BenchReport, RunMeta};

/// Errors writing or reading outputs.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: not a chstorm.bench.v1 JSON object: {reason}")]
    BadReport { path: String, reason: String },
    #[error("{path}: existing CSV header differs from chstorm's; write to a new file")]
    CsvHeader { path: String },
    #[error("{path}: its latencies are corrected for coordinated omission unlike the first input's; merge the raw runs, then correct")]
    MixedCorrection { path: String },
    #[error("--correct-omission: {0}")]
    Correction(String),
    #[error("{path}: the same run as {other} (run id {run_id}); give each run once")]
    Duplicate { path: String, other: String, run_id: String },
    #[error("{path}: {field} is {value}, but {first_value} in {first}; merge runs of one workload, or give --allow-mixed to add them up anyway")]
    Mixed { path: String, first: String, field: &'static str, first_value: String, value: String },
    /// Segments of a run that do not make up the run (missing, twice, of different runs).
    #[error("{0}")]
    Segments(String),
}
