//! Number formatting for charts and tables.
//!
//! Latencies are always passed in **seconds** (as in `chstorm.bench.v1`); QPS in queries per
//! second. Nothing here panics: a non-finite value formats as an en dash.

/// What a non-finite value prints as.
pub const NA: &str = "–";

/// The unit a set of latencies is shown in. Values in seconds are multiplied by [`LatencyUnit::factor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyUnit {
    Micros,
    Millis,
    Seconds,
}

impl LatencyUnit {
    /// The unit for an axis or table column whose largest value is `max_s` seconds:
    /// µs when every value is under 1 ms, s when the largest is 10 s or more, otherwise ms.
    pub fn for_max(max_s: f64) -> LatencyUnit {
        if !max_s.is_finite() {
            LatencyUnit::Millis
        } else if max_s < 1e-3 {
            LatencyUnit::Micros
        } else if max_s >= 10.0 {
            LatencyUnit::Seconds
        } else {
            LatencyUnit::Millis
        }
    }

    /// The unit for a set of values in seconds (non-finite ones ignored).
    pub fn for_values<I: IntoIterator<Item = f64>>(values: I) -> LatencyUnit {
        let max = values.into_iter().filter(|v| v.is_finite()).fold(0.0f64, f64::max);
        LatencyUnit::for_max(max)
    }

    /// Multiplier from seconds to this unit.
    pub fn factor(self) -> f64 {
        match self {
            LatencyUnit::Micros => 1e6,
            LatencyUnit::Millis => 1e3,
            LatencyUnit::Seconds => 1.0,
        }
    }

    /// The unit's symbol: `µs`, `ms` or `s`.
    pub fn suffix(self) -> &'static str {
        match self {
            LatencyUnit::Micros => "µs",
            LatencyUnit::Millis => "ms",
            LatencyUnit::Seconds => "s",
        }
    }
}

/// `v` with `sig` significant digits, trailing zeros after the point removed: `fmt_sig(12.50, 3)` is `12.5`.
pub fn fmt_sig(v: f64, sig: u32) -> String {
    trim_zeros(fmt_sig_fixed(v, sig))
}

/// `v` with `sig` significant digits, trailing zeros kept (for aligned table columns): `1.20`.
pub fn fmt_sig_fixed(v: f64, sig: u32) -> String {
    if !v.is_finite() {
        return NA.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let mag = v.abs().log10().floor() as i32;
    let decimals = (sig.max(1) as i32 - 1 - mag).clamp(0, 12) as usize;
    let s = format!("{v:.decimals$}");
    if s.starts_with("-0") && s.trim_start_matches(['-', '0', '.']).is_empty() {
        return s[1..].to_string();
    }
    s
}

fn trim_zeros(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A short QPS (queries per second) for axes and legends: `950`, `12.3k`, `1.2M`.
pub fn fmt_qps(v: f64) -> String {
    if !v.is_finite() {
        return NA.into();
    }
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", fmt_sig(v / 1e6, 3))
    } else if a >= 1e3 {
        format!("{}k", fmt_sig(v / 1e3, 3))
    } else {
        fmt_sig(v, 3)
    }
}

/// A QPS for tables: a whole number with thousands separators from 100 up (`97,123`),
/// one decimal from 1 up (`12.5`), three significant digits below.
pub fn fmt_qps_exact(v: f64) -> String {
    if !v.is_finite() {
        return NA.into();
    }
    let a = v.abs();
    if (100.0..9.0e18).contains(&a) {
        let s = fmt_int(a.round() as u64);
        if v < 0.0 {
            format!("-{s}")
        } else {
            s
        }
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        fmt_sig(v, 3)
    }
}

/// A latency given in seconds, in the unit that suits it, 3 significant digits: `850 µs`, `12.3 ms`, `1.5 s`.
pub fn fmt_seconds(v: f64) -> String {
    fmt_seconds_sig(v, 3)
}

/// As [`fmt_seconds`], with `sig` significant digits (tooltips use 4).
pub fn fmt_seconds_sig(v: f64, sig: u32) -> String {
    if !v.is_finite() {
        return NA.into();
    }
    if v == 0.0 {
        return "0 ms".into();
    }
    let unit = if v.abs() < 1e-3 {
        LatencyUnit::Micros
    } else if v.abs() < 1.0 {
        LatencyUnit::Millis
    } else {
        LatencyUnit::Seconds
    };
    format!("{} {}", fmt_sig(v * unit.factor(), sig), unit.suffix())
}

/// A latency given in seconds as a bare number in `unit`, for a table column headed with the unit.
/// Three significant digits, at least one decimal below 1000 (`0.412`, `12.3`, `1250`).
pub fn fmt_in_unit(v_s: f64, unit: LatencyUnit) -> String {
    if !v_s.is_finite() {
        return NA.into();
    }
    let v = v_s * unit.factor();
    if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        fmt_sig_fixed(v, 3)
    }
}

/// An integer with thousands separators: `1,234,567`.
pub fn fmt_int(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && i % 3 == s.len() % 3 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A size in bytes with binary prefixes: `512 B`, `1.5 KiB`, `15.6 GiB`.
pub fn fmt_bytes(v: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = v as f64;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < UNITS.len() {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v} B")
    } else {
        format!("{x:.1} {}", UNITS[i])
    }
}

/// A duration in seconds: `15.0 s`, `0.50 s`, `2m 05s` from 100 s up.
pub fn fmt_duration(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return NA.into();
    }
    if s >= 100.0 {
        let t = s.round() as u64;
        format!("{}m {:02}s", t / 60, t % 60)
    } else if s >= 1.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.2} s")
    }
}

/// A tick label for value `v` on an axis whose ticks are `step` apart: just enough decimals
/// to tell neighbouring ticks apart (`0`, `0.5`, `1`, `1.5`).
pub fn fmt_tick(v: f64, step: f64) -> String {
    if !v.is_finite() {
        return NA.into();
    }
    if v == 0.0 || (step.is_finite() && step > 0.0 && (v / step).abs() < 1e-9) {
        return "0".into();
    }
    let mut decimals = 0usize;
    if step.is_finite() && step > 0.0 {
        while decimals < 12 && !is_near_int(step * 10f64.powi(decimals as i32)) {
            decimals += 1;
        }
    }
    let s = format!("{v:.decimals$}");
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s[1..].to_string()
    } else {
        s
    }
}

fn is_near_int(x: f64) -> bool {
    (x - x.round()).abs() < 1e-6
}

/// A QPS tick label: thousands as `k` and millions as `M` (`0`, `500`, `1k`, `2.5k`, `1.2M`).
pub fn fmt_qps_tick(v: f64, step: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        trim_zeros(fmt_tick(v / 1e6, step / 1e6)) + "M"
    } else if a >= 1e3 {
        trim_zeros(fmt_tick(v / 1e3, step / 1e3)) + "k"
    } else {
        fmt_tick(v, step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn significant_digits() {
        assert_eq!(fmt_sig(12.5, 3), "12.5");
        assert_eq!(fmt_sig(12.0, 3), "12");
        assert_eq!(fmt_sig(0.0123456, 3), "0.0123");
        assert_eq!(fmt_sig(123456.0, 3), "123456");
        assert_eq!(fmt_sig_fixed(1.2, 3), "1.20");
        assert_eq!(fmt_sig(f64::NAN, 3), NA);
        assert_eq!(fmt_sig(0.0, 3), "0");
    }

    #[test]
    fn latencies_pick_their_unit() {
        assert_eq!(fmt_seconds(0.000_850), "850 µs");
        assert_eq!(fmt_seconds(0.012_34), "12.3 ms");
        assert_eq!(fmt_seconds(1.5), "1.5 s");
        assert_eq!(fmt_seconds(0.0), "0 ms");
        assert_eq!(fmt_seconds(f64::INFINITY), NA);
        assert_eq!(fmt_seconds_sig(0.001_234_6, 4), "1.235 ms");
        assert_eq!(LatencyUnit::for_max(0.000_9), LatencyUnit::Micros);
        assert_eq!(LatencyUnit::for_max(0.001), LatencyUnit::Millis);
        assert_eq!(LatencyUnit::for_max(5.0), LatencyUnit::Millis);
        assert_eq!(LatencyUnit::for_max(12.0), LatencyUnit::Seconds);
        assert_eq!(LatencyUnit::for_values([0.0001, f64::NAN, 0.0002]), LatencyUnit::Micros);
        assert_eq!(fmt_in_unit(0.000_412, LatencyUnit::Millis), "0.412");
        assert_eq!(fmt_in_unit(0.0123, LatencyUnit::Millis), "12.3");
        assert_eq!(fmt_in_unit(0.000_250, LatencyUnit::Micros), "250.0");
        assert_eq!(fmt_in_unit(1.25, LatencyUnit::Millis), "1250");
    }

    #[test]
    fn qps_with_k() {
        assert_eq!(fmt_qps(950.0), "950");
        assert_eq!(fmt_qps(12_345.0), "12.3k");
        assert_eq!(fmt_qps(97_000.0), "97k");
        assert_eq!(fmt_qps(1_250_000.0), "1.25M");
        assert_eq!(fmt_qps(0.5), "0.5");
        assert_eq!(fmt_qps_exact(97_123.4), "97,123");
        assert_eq!(fmt_qps_exact(12.46), "12.5");
        assert_eq!(fmt_qps_exact(0.123), "0.123");
        assert_eq!(fmt_qps_exact(f64::NAN), NA);
    }

    #[test]
    fn ints_bytes_durations() {
        assert_eq!(fmt_int(0), "0");
        assert_eq!(fmt_int(999), "999");
        assert_eq!(fmt_int(1_234_567), "1,234,567");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(16 * 1024 * 1024 * 1024), "16.0 GiB");
        assert_eq!(fmt_duration(15.0), "15.0 s");
        assert_eq!(fmt_duration(125.0), "2m 05s");
    }

    #[test]
    fn tick_labels() {
        assert_eq!(fmt_tick(0.0, 0.5), "0");
        assert_eq!(fmt_tick(1.5, 0.5), "1.5");
        assert_eq!(fmt_tick(0.30000000000000004, 0.1), "0.3");
        assert_eq!(fmt_tick(0.25, 0.25), "0.25");
        assert_eq!(fmt_tick(20.0, 5.0), "20");
        assert_eq!(fmt_tick(-0.0, 0.2), "0");
        assert_eq!(fmt_qps_tick(20_000.0, 20_000.0), "20k");
        assert_eq!(fmt_qps_tick(2_500.0, 500.0), "2.5k");
        assert_eq!(fmt_qps_tick(0.0, 500.0), "0");
        assert_eq!(fmt_qps_tick(400.0, 100.0), "400");
        assert_eq!(fmt_qps_tick(500.0, 500.0), "500");
        assert_eq!(fmt_qps_tick(1_000.0, 500.0), "1k");
        assert_eq!(fmt_qps_tick(1_500.0, 500.0), "1.5k");
        assert_eq!(fmt_qps_tick(1_200_000.0, 200_000.0), "1.2M");
    }
}
