//! Axes: 1-2-5 linear ticks and power-of-two log2 ticks.

use super::YUnit;
use crate::format::{fmt_qps_tick, fmt_sig, fmt_tick, LatencyUnit};

/// An axis: its range (in display units), ticks and their labels.
pub(super) struct Axis {
    pub(super) lo: f64,
    pub(super) hi: f64,
    pub(super) log2: bool,
    pub(super) ticks: Vec<f64>,
    pub(super) labels: Vec<String>,
    /// For seconds: the unit values were scaled to (ticks and range are in it).
    pub(super) unit: Option<LatencyUnit>,
}

impl Axis {
    /// Position of `v` (in display units, or raw for log2) from 0 (low end) to 1 (high end).
    pub(super) fn frac(&self, v: f64) -> f64 {
        let (v, lo, hi) = if self.log2 {
            (v.max(f64::MIN_POSITIVE).log2(), self.lo.log2(), self.hi.log2())
        } else {
            (v, self.lo, self.hi)
        };
        if hi > lo && v.is_finite() {
            ((v - lo) / (hi - lo)).clamp(0.0, 1.0)
        } else {
            0.5
        }
    }

    /// A linear axis over finite `values`; with `from_zero` it always includes 0.
    /// For [`YUnit::Seconds`] the ticks are in the display unit.
    pub(super) fn linear(values: impl Iterator<Item = f64>, target: usize, from_zero: bool, unit: YUnit) -> Axis {
        let vals: Vec<f64> = values.filter(|v| v.is_finite()).collect();
        let lunit = (unit == YUnit::Seconds).then(|| LatencyUnit::for_values(vals.iter().map(|v| v.abs())));
        let f = lunit.map_or(1.0, LatencyUnit::factor);
        let mut lo = vals.iter().map(|v| v * f).fold(f64::INFINITY, f64::min);
        let mut hi = vals.iter().map(|v| v * f).fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() || !hi.is_finite() {
            (lo, hi) = (0.0, 1.0);
        }
        if from_zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if hi <= lo {
            let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.5 };
            if from_zero && lo >= 0.0 {
                hi = lo + d;
            } else {
                lo -= d;
                hi += d;
            }
        }
        let ticks = linear_ticks(lo, hi, target);
        let step = if ticks.len() > 1 { ticks[1] - ticks[0] } else { hi - lo };
        let (alo, ahi) = (ticks.first().copied().unwrap_or(lo), ticks.last().copied().unwrap_or(hi));
        let labels = ticks
            .iter()
            .map(|&t| match unit {
                YUnit::Seconds => fmt_tick(t, step),
                YUnit::Qps | YUnit::Plain => fmt_qps_tick(t, step),
            })
            .collect();
        Axis { lo: alo, hi: ahi, log2: false, ticks, labels, unit: lunit }
    }

    /// A log2 axis over the positive finite `values`, from the power of two at or below the least
    /// to the one at or above the greatest.
    pub(super) fn log2(values: impl Iterator<Item = f64>) -> Axis {
        let vals: Vec<f64> = values.filter(|v| v.is_finite() && *v > 0.0).collect();
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let ticks = if lo.is_finite() && hi.is_finite() { log2_ticks(lo, hi) } else { vec![1.0, 2.0] };
        let every = ticks.len().div_ceil(12).max(1);
        let labels =
            ticks.iter().enumerate().map(|(i, &t)| if i % every == 0 { fmt_pow2(t) } else { String::new() }).collect();
        let (alo, ahi) = (ticks.first().copied().unwrap_or(1.0), ticks.last().copied().unwrap_or(2.0));
        Axis { lo: alo, hi: ahi, log2: true, ticks, labels, unit: None }
    }
}

/// A 1-2-5 step (1, 2 or 5 times a power of ten) that cuts `range` into about `target` parts.
pub fn nice_step(range: f64, target: usize) -> f64 {
    let raw = range / target.max(1) as f64;
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 + 1e-9 {
        1.0
    } else if norm <= 2.0 + 1e-9 {
        2.0
    } else if norm <= 5.0 + 1e-9 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Ticks at a 1-2-5 step covering `[lo, hi]`: the first at or below `lo`, the last at or above `hi`.
/// About `target` intervals; never more than 100 ticks (falls back to `[lo, hi]`).
pub fn linear_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !lo.is_finite() || !hi.is_finite() || hi < lo {
        return vec![0.0, 1.0];
    }
    if hi == lo {
        return vec![lo];
    }
    let step = nice_step(hi - lo, target);
    let (a, b) = ((lo / step + 1e-9).floor(), (hi / step - 1e-9).ceil());
    if !(b - a).is_finite() || b - a > 100.0 || b <= a {
        return vec![lo, hi];
    }
    // Round each tick to the step's decimals, so that 3 × 0.2 is 0.6 and not 0.6000000000000001.
    let mut decimals = 0;
    while decimals < 15 && ((step * 10f64.powi(decimals)).round() - step * 10f64.powi(decimals)).abs() > 1e-6 {
        decimals += 1;
    }
    let p = 10f64.powi(decimals);
    (a as i64..=b as i64)
        .map(|k| {
            let v = (k as f64 * step * p).round() / p;
            if v == 0.0 {
                0.0
            } else {
                v
            }
        })
        .collect()
}

/// Powers of two from the one at or below `lo` to the one at or above `hi` (at least two ticks;
/// a single value gets a power of two on each side when it is 2 or more).
pub fn log2_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi > 0.0) {
        return vec![1.0, 2.0];
    }
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
    let mut a = (lo.log2() + 1e-9).floor().clamp(-60.0, 80.0) as i32;
    let mut b = (hi.log2() - 1e-9).ceil().clamp(-60.0, 80.0) as i32;
    if b <= a {
        if a >= 1 {
            a -= 1;
            b = a + 2;
        } else {
            b = a + 1;
        }
    }
    (a..=b).map(|k| 2f64.powi(k)).collect()
}

/// A power of two as a tick label: `1`, `2`, … `2048`, `65536`, or `0.5`, `0.25` below 1.
pub fn fmt_pow2(v: f64) -> String {
    if (1.0..1e15).contains(&v) {
        format!("{}", v.round() as u64)
    } else {
        fmt_sig(v, 6)
    }
}
