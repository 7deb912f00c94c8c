//! Latency statistics for chstorm.
//!
//! A [`LatencyHistogram`] is an HDR histogram of latencies in microseconds (1 µs to 1 hour,
//! 3 significant digits: every percentile is within 0.1% of the true value). Its memory is fixed
//! (about 200 KiB) whatever the number of samples, so a run's memory is flat in its length. The
//! load engine keeps one per worker thread and per second, and merges them.
//!
//! # Boundaries
//!
//! This crate owns latency histograms and per-second series. It must not import any other
//! chstorm crate.

mod histogram;
mod series;

pub use histogram::{HistogramError, LatencyHistogram, Percentiles, PERCENTILES};
pub use series::{Interval, SecondStats, MAX_SAMPLE_CHARS};
