//! `chstorm compare`: is the new server faster or slower than the old one, query by query?
//!
//! The method is the one ClickHouse's own performance tests use (see docs/COMPARE.md): run each
//! query on both servers in turn, take the median of each side, and judge the difference of
//! medians against a threshold from a randomization distribution of the same runs.
//!
//! * [`schedule`]: warm-up, counterbalanced measured runs, looks at them.
//! * [`sequential`]: the stopping rule: when a look decides, and the threshold of every look.
//! * [`runner`]: a fresh connection per run, a query_id per query, wall time; windows of
//!   concurrent clients for `--concurrency`.
//! * [`explain`]: why a query is unstable, and what to change.
//! * [`metrics`]: query_log rows of the runs (query_duration_ms, read_rows, memory_usage,
//!   ProfileEvents), with the server's capabilities detected.
//! * [`stats`]: median, randomization threshold, verdict.
//! * [`flame`]: trace_log samples → folded stacks → flamegraphs (inferno).
//! * [`report`], [`table`], [`store`]: the HTML report, the terminal table, the history table.
//! * [`compare`]: all of it, for the CLI.
//!
//! # Boundaries
//!
//! This crate owns the A/B comparison: its schedule, runner, statistics, flamegraphs, report and
//! history table. It builds on `chstorm-proto`, `chstorm-load`, `chstorm-data`, `chstorm-sweep`
//! (suites) and `chstorm-report`; it must not import the gateway, the isolation or colocate
//! crates, the local harness or the CLI (`chstorm`).

pub mod explain;
pub mod flame;
pub mod metrics;
pub mod queries;
pub mod report;
pub mod result;
pub mod runner;
pub mod schedule;
pub mod sequential;
pub mod stats;
pub mod store;
pub mod table;

mod run;

pub use queries::QuerySpec;
pub use result::{CompareResult, MetricResult, QueryResult, SideInfo, Sides, Summary, SCHEMA};
pub use run::{compare, MAX_CONCURRENCY, MIN_RUNS_FOR_VERDICT};
pub use schedule::{Plan, Side};
pub use stats::{Rules, Verdict};

use chstorm_proto::{Fault, ProtoError, TlsOptions};
use std::path::PathBuf;
use std::time::Duration;

/// Default window of `--concurrency` runs: 0.5 s (the default `--max-time` fits 23 of them a side).
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(500);

/// Everything a comparison needs.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// The old server's URL (any scheme; settings in the query string apply to every query).
    pub left: String,
    /// The new server's URL.
    pub right: String,
    /// An http(s) URL of the left server, for server metrics when `left` is native. When `left` is
    /// http(s), its own address is used (without its settings).
    pub left_http: Option<String>,
    /// The same for the right server.
    pub right_http: Option<String>,
    pub queries: Vec<QuerySpec>,
    /// The folder `choice(file)` placeholders are relative to.
    pub base_dir: PathBuf,
    pub plan: Plan,
    pub rules: Rules,
    /// Seeds the query order, the placeholders and every threshold. Default 1.
    pub seed: u64,
    /// Bound on every wait (connect, query, log read). Default 60 s.
    pub timeout: Duration,
    pub tls: TlsOptions,
    /// Turn the query profiler on (10 ms real-time period) when both servers have it, for
    /// flamegraphs. Default true.
    pub profiler: bool,
    /// Regressions allowed before the exit status is 1. Default 0.
    pub fail_on: usize,
    /// Concurrent clients per side. 1 (default): query by query, each run one query; more: each
    /// run is a window of this many clients, judged by its QPS.
    pub concurrency: usize,
    /// With `concurrency` above 1, how long each window sends queries. Default 0.5 s.
    pub window: Duration,
}

impl CompareOptions {
    /// Options with the defaults, for these servers and queries.
    pub fn new(left: impl Into<String>, right: impl Into<String>, queries: Vec<QuerySpec>) -> CompareOptions {
        CompareOptions {
            left: left.into(),
            right: right.into(),
            left_http: None,
            right_http: None,
            queries,
            base_dir: PathBuf::from("."),
            plan: Plan::default(),
            rules: Rules::default(),
            seed: 1,
            timeout: runner::DEFAULT_TIMEOUT,
            tls: TlsOptions::default(),
            profiler: true,
            fail_on: 0,
            concurrency: 1,
            window: DEFAULT_WINDOW,
        }
    }
}

/// Why a comparison could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// Bad options or query text: the caller's fault.
    #[error("{0}")]
    Invalid(String),
    /// A server could not be reached, or rejected the first query (e.g. an unknown setting in its
    /// URL).
    #[error("{side} server {target}: {source}")]
    Server { side: Side, target: String, source: ProtoError },
    /// The history table could not be written.
    #[error("--store {target}: {source}")]
    Store { target: String, source: ProtoError },
    /// An output file could not be written.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// The client's own runtime could not start.
    #[error("cannot start the client runtime: {0}")]
    Runtime(std::io::Error),
}

impl CompareError {
    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            CompareError::Invalid(_) => Fault::Client,
            CompareError::Server { source, .. } | CompareError::Store { source, .. } => source.fault(),
            CompareError::Io { .. } | CompareError::Runtime(_) => Fault::Us,
        }
    }
}
