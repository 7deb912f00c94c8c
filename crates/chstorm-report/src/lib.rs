//! chstorm's HTML reports.
//!
//! [`render_sweep`] turns the points of a sweep (scenario × variant × concurrency, each one
//! [`chstorm_output::BenchReport`]) into one self-contained HTML document: inline SVG charts,
//! inline CSS, no scripts, no fonts, nothing fetched from the network. [`svg`] and [`html`] are
//! the building blocks, for other reports (compare, colocate) to reuse.
//!
//! Units: latencies in the inputs are in seconds (as in `chstorm.bench.v1`), QPS in queries per
//! second, memory in bytes. The output is a pure function of the input: the same input gives the
//! same bytes.
//!
//! # Boundaries
//!
//! This crate owns HTML and SVG rendering. It builds on `chstorm-output` and `chstorm-stats`
//! (the results it draws); it must not import the load engine, the transports, sweeps, compare,
//! colocate, the gateway or the CLI: those pass it data.

pub mod format;
pub mod html;
pub mod svg;
mod sweep;

pub use sweep::render_sweep;

use serde::{Deserialize, Serialize};

/// One measured point of a sweep: a scenario, a variant (protocol and/or settings, e.g.
/// "http keep-alive", "native", "max_threads=1"), a concurrency level, and the bench result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub scenario: String,
    pub variant: String,
    /// Concurrent connections (the chart's x value).
    pub concurrency: u64,
    pub result: chstorm_output::BenchReport,
}

/// Where and when the sweep ran.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Environment {
    /// The server's version; when None, the first one any point reports is shown.
    pub server_version: Option<String>,
    /// CPU cores of the machine that ran the server (0: unknown).
    pub cores: usize,
    /// Memory in bytes (0: unknown).
    pub memory_bytes: u64,
    pub chstorm_version: String,
    /// When the sweep ran, as the caller wants it shown (e.g. RFC 3339). The report adds no clock of its own.
    pub date: String,
    /// The target URL, without password.
    pub target: String,
    pub suite: String,
    /// Free-form lines shown under the environment.
    pub notes: Vec<String>,
}

/// An extra table a suite wants in its section (e.g. the threads table).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Table {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub note: Option<String>,
}

/// A scenario's section: its place in the page, its description and extra tables.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Section {
    pub scenario: String,
    pub description: String,
    pub extra_tables: Vec<Table>,
}

/// Everything a sweep report shows.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ReportInput {
    pub title: String,
    pub environment: Environment,
    pub points: Vec<Point>,
    /// Sections in page order, with their descriptions. Scenarios that have points but no section
    /// still get one, after these, in the order they first appear in `points`.
    pub sections: Vec<Section>,
}

/// Errors writing a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

/// Renders `input` with [`render_sweep`] and writes it to `path` (through a temporary file beside
/// it, renamed into place, so a reader never sees half a report).
pub fn write_sweep(path: &std::path::Path, input: &ReportInput) -> Result<(), ReportError> {
    let html = render_sweep(input);
    let tmp = path.with_extension("html.tmp");
    let io = |source| ReportError::Io { path: path.display().to_string(), source };
    std::fs::write(&tmp, html).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
