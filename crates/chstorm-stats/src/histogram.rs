//! The latency histogram and its serialisation.

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use std::time::Duration;

/// Highest trackable latency: one hour, in microseconds. Longer latencies are clamped to it.
const HIGHEST_US: u64 = 3_600_000_000;
/// Significant decimal digits kept (0.1% relative error).
const SIGFIG: u8 = 3;

/// The percentiles reported everywhere (text, JSON, CSV), as fractions of 100.
pub const PERCENTILES: [f64; 8] = [0.0, 20.0, 50.0, 80.0, 90.0, 95.0, 99.0, 99.9];

/// Errors decoding a serialised histogram.
#[derive(Debug, thiserror::Error)]
pub enum HistogramError {
    #[error("histogram is not valid base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("histogram bytes are not an HDR V2 histogram: {0}")]
    Decode(String),
    #[error("histograms cannot be merged: {0}")]
    Merge(String),
    #[error("{0}")]
    Correction(String),
}

/// The most synthetic-sample records [`LatencyHistogram::corrected_for_omission`] will make
/// (one per recorded bucket and interval step). A tiny interval against a long tail would
/// otherwise loop for minutes.
const MAX_CORRECTION_STEPS: u64 = 50_000_000;

/// HDR histogram of latencies, stored in microseconds.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    h: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The summary numbers of a histogram, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize, Default)]
pub struct Percentiles {
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    #[serde(rename = "p99.99")]
    pub p99_99: f64,
    pub max: f64,
}

impl LatencyHistogram {
    pub fn new() -> Self {
        // 1..=HIGHEST_US with 3 significant digits is always a valid configuration.
        let h = Histogram::new_with_bounds(1, HIGHEST_US, SIGFIG).expect("static histogram bounds are valid");
        LatencyHistogram { h }
    }

    /// Records one latency. Sub-microsecond values count as 1 µs; values over an hour as an hour.
    #[inline]
    pub fn record(&mut self, latency: Duration) {
        let us = (latency.as_micros() as u64).clamp(1, HIGHEST_US);
        self.h.saturating_record(us);
    }

    /// Records `count` samples of the same latency.
    pub fn record_n(&mut self, latency: Duration, count: u64) {
        let us = (latency.as_micros() as u64).clamp(1, HIGHEST_US);
        let _ = self.h.record_n(us, count);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both sides share the same bounds, so `add` cannot fail.
        let _ = self.h.add(&other.h);
    }

    pub fn reset(&mut self) {
        self.h.reset();
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.h.len()
    }

    pub fn is_empty(&self) -> bool {
        self.h.is_empty()
    }

    /// Number of samples at or above `latency`, to the histogram's resolution (3 significant
    /// digits): a sample in the same bucket as `latency` counts.
    pub fn count_at_or_above(&self, latency: Duration) -> u64 {
        let us = (latency.as_micros() as u64).clamp(1, HIGHEST_US);
        self.h.count_between(us, HIGHEST_US)
    }

    /// The latency at percentile `p` (0 to 100), in seconds; 0 for an empty histogram.
    pub fn percentile_s(&self, p: f64) -> f64 {
        if self.h.is_empty() {
            return 0.0;
        }
        if p <= 0.0 {
            return self.h.min() as f64 / 1e6;
        }
        self.h.value_at_percentile(p.min(100.0)) as f64 / 1e6
    }

    /// Mean latency in seconds; 0 for an empty histogram.
    pub fn mean_s(&self) -> f64 {
        if self.h.is_empty() {
            0.0
        } else {
            self.h.mean() / 1e6
        }
    }

    /// Min, mean, the usual percentiles and max, in seconds.
    pub fn summary(&self) -> Percentiles {
        Percentiles {
            min: self.percentile_s(0.0),
            mean: self.mean_s(),
            p50: self.percentile_s(50.0),
            p90: self.percentile_s(90.0),
            p95: self.percentile_s(95.0),
            p99: self.percentile_s(99.0),
            p99_9: self.percentile_s(99.9),
            p99_99: self.percentile_s(99.99),
            max: if self.h.is_empty() { 0.0 } else { self.h.max() as f64 / 1e6 },
        }
    }

    /// A copy re-weighted for coordinated omission, by the rule wrk 4 applies to its own
    /// `--latency` figures (`stats_correct`): every sample of `L` with `L > 2 × interval` also
    /// counts `L − interval`, `L − 2 × interval`, … while the value stays above `interval`.
    /// (HdrHistogram's `recordValueWithExpectedInterval` is the same rule, except that it also
    /// keeps a value equal to the interval.) `interval` is rounded down to whole microseconds.
    ///
    /// This estimates what a closed loop hid: the queries that would have been sent, one per
    /// `interval`, while a connection waited on a slow answer. The raw samples are what was
    /// measured; the corrected ones are a model.
    pub fn corrected_for_omission(&self, interval: Duration) -> Result<LatencyHistogram, HistogramError> {
        let e = interval.as_micros() as u64;
        if e == 0 {
            return Err(HistogramError::Correction(
                "the expected interval must be at least 1us; give a longer one".into(),
            ));
        }
        // Each bucket stands for its lowest value, which is the recorded one below 2,048 us.
        let low = |v: &hdrhistogram::iterators::IterationValue<u64>| self.h.lowest_equivalent(v.value_iterated_to());
        let steps: u64 = self.h.iter_recorded().map(|v| low(&v) / e).sum();
        if steps > MAX_CORRECTION_STEPS {
            return Err(HistogramError::Correction(format!(
                "an expected interval of {e}us is too small for latencies up to {}us; give a longer one",
                self.h.max()
            )));
        }
        let mut out = self.clone();
        for v in self.h.iter_recorded() {
            let (value, count) = (low(&v), v.count_at_value());
            let mut missing = value.saturating_sub(e);
            while missing > e {
                // Values below the original's maximum are always representable.
                let _ = out.h.record_n(missing, count);
                missing -= e;
            }
        }
        Ok(out)
    }

    /// Serialises as HDR V2 (deflate) in standard base64, the format `chstorm merge` reads.
    pub fn to_base64(&self) -> String {
        let mut bytes = Vec::new();
        // Serialising into a Vec only fails on an internal encoder error.
        if V2DeflateSerializer::new().serialize(&self.h, &mut bytes).is_err() {
            return String::new();
        }
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// Reads what [`LatencyHistogram::to_base64`] wrote.
    pub fn from_base64(s: &str) -> Result<LatencyHistogram, HistogramError> {
        let bytes = base64::engine::general_purpose::STANDARD.decode(s.trim())?;
        let decoded: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| HistogramError::Decode(format!("{e:?}")))?;
        let mut out = LatencyHistogram::new();
        out.h.add(&decoded).map_err(|e| HistogramError::Merge(format!("{e:?}")))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn percentiles_of_a_uniform_sample_are_within_a_tenth_of_a_percent() {
        let mut h = LatencyHistogram::new();
        for v in 1..=10_000u64 {
            h.record(Duration::from_micros(v * 100)); // 0.1 ms .. 1 s
        }
        let s = h.summary();
        for (got, want) in [(s.p50, 0.5), (s.p90, 0.9), (s.p99, 0.99), (s.max, 1.0)] {
            assert!((got - want).abs() / want < 0.001, "got {got}, want {want}");
        }
        assert!((s.min - 0.0001).abs() < 1e-7);
        assert!((s.mean - 0.50005).abs() / 0.50005 < 0.001);
    }

    #[test]
    fn counts_samples_at_or_above_a_latency() {
        let mut h = LatencyHistogram::new();
        h.record_n(ms(1), 90);
        h.record_n(ms(20), 10);
        assert_eq!(h.count_at_or_above(ms(20)), 10);
        assert_eq!(h.count_at_or_above(ms(2)), 10);
        assert_eq!(h.count_at_or_above(ms(1)), 100);
        assert_eq!(h.count_at_or_above(ms(21)), 0);
        assert_eq!(LatencyHistogram::new().count_at_or_above(ms(1)), 0);
    }

    #[test]
    fn round_trips_through_base64_and_merges() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        for _ in 0..900 {
            a.record(ms(1));
        }
        for _ in 0..100 {
            b.record(ms(100));
        }
        let a2 = LatencyHistogram::from_base64(&a.to_base64()).unwrap();
        let b2 = LatencyHistogram::from_base64(&b.to_base64()).unwrap();
        let mut m = a2.clone();
        m.merge(&b2);
        assert_eq!(m.len(), 1000);
        assert!((m.percentile_s(50.0) - 0.001).abs() < 1e-5);
        assert!((m.percentile_s(95.0) - 0.1).abs() < 1e-3);
        assert!(LatencyHistogram::from_base64("not base64!").is_err());
        assert!(LatencyHistogram::from_base64("AAAA").is_err());
    }

    #[test]
    fn omission_correction_follows_wrk_rule() {
        // 1 ms interval: 2 ms is at the boundary (wrk adds nothing), 5 ms adds 4, 3 and 2 ms.
        let mut h = LatencyHistogram::new();
        h.record_n(Duration::from_micros(900), 10);
        h.record(ms(2));
        h.record_n(ms(5), 2);
        let c = h.corrected_for_omission(ms(1)).unwrap();
        assert_eq!(c.len(), 10 + 1 + 2 + 2 * 3);
        let mut want = LatencyHistogram::new();
        want.record_n(Duration::from_micros(900), 10);
        want.record(ms(2));
        for v in [5, 4, 3, 2] {
            want.record_n(ms(v), 2);
        }
        for p in [10.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0] {
            assert_eq!(c.percentile_s(p), want.percentile_s(p), "p{p}");
        }
        // The original is left as it was.
        assert_eq!(h.len(), 13);
    }

    #[test]
    fn omission_correction_refuses_intervals_that_would_not_finish() {
        let mut h = LatencyHistogram::new();
        h.record(Duration::from_secs(3000));
        assert!(h.corrected_for_omission(Duration::ZERO).is_err());
        let err = h.corrected_for_omission(Duration::from_micros(1)).unwrap_err().to_string();
        assert!(err.contains("too small"), "{err}");
        // 3000 s lands in a bucket about 2 s wide, whose lowest value stands for it.
        let n = h.corrected_for_omission(Duration::from_secs(1)).unwrap().len();
        assert!((1 + 2995..=1 + 2998).contains(&n), "{n}");
    }

    #[test]
    fn extreme_values_are_clamped_not_lost() {
        let mut h = LatencyHistogram::new();
        h.record(Duration::from_nanos(10));
        h.record(Duration::from_secs(10_000));
        assert_eq!(h.len(), 2);
        assert!(h.summary().max >= 3599.0);
        assert_eq!(LatencyHistogram::new().summary(), Percentiles::default());
    }
}
