//! The chstorm load engine.
//!
//! One load loop ([`engine`]) serves every mode; a [`Schedule`] value decides when each query is
//! due (closed loop, fixed rate, ramp). Each worker thread runs a single-threaded tokio runtime
//! with its share of the connections and one [`chstorm_stats::Interval`] (an HDR histogram plus
//! counters) that it hands to the coordinator every second, so memory stays flat however long
//! the run. The coordinator merges those into the per-second series and the run's totals.
//!
//! # Boundaries
//!
//! This crate owns the load loop, schedules, segments and the common start, query templates,
//! thresholds on a run's figures, and the run's statistics. It builds
//! on `chstorm-proto` and `chstorm-stats`; it must not import the outputs, reports, sweeps, the
//! gateway or the CLI, and uses the local harness only in its tests.

pub mod engine;
mod executor;
pub mod probe;
pub mod scenario;
pub mod schedule;
pub mod segment;
pub mod spec;
pub mod template;
pub mod threshold;
mod timer;
pub mod together;

pub use engine::{run, Progress, RunResult, StopHandle, StopReason};
pub use schedule::Schedule;
pub use segment::Segment;
pub use spec::{LoadSpec, Work};
pub use template::{Renderer, Template, TemplateError};
pub use threshold::{Figures, Threshold};
pub use together::run_together;

/// Errors that prevent a run from starting.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The spec is inconsistent (the caller's fault).
    #[error("{0}")]
    Invalid(String),
    /// The server could not be reached or refused the probe query before the run.
    #[error("{0}")]
    Server(#[from] chstorm_proto::ProtoError),
    /// A thread or runtime could not be created on this machine.
    #[error("cannot start load threads: {0}")]
    Runtime(#[from] std::io::Error),
}
