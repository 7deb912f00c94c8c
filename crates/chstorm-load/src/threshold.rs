//! Pass/fail limits on a run's figures (`--threshold 'p99<5ms'`).
//!
//! A [`Threshold`] is `FIGURE OP VALUE`:
//!
//! | figure | value | example |
//! |---|---|---|
//! | `p50`, `p90`, `p99`, `p99.9`, any `pN` (also `p(99)`) | latency with a unit: `us`, `ms`, `s` | `p99<5ms` |
//! | `min`, `mean`, `max` | latency with a unit | `max<=250ms` |
//! | `qps` | successful queries per second | `qps>=20000` |
//! | `error_rate` | failed / all queries: a fraction or a percentage | `error_rate<0.1%` |
//! | `errors` | failed queries | `errors==0` is written `errors<1` |
//!
//! with `<`, `<=`, `>` or `>=`. Latencies are judged on the run's HDR histogram of successful
//! queries, so a merged run is judged on the exact sum of its parts.
//!
//! [`Threshold::lost`] tells, during a run, whether a limit can no longer be met whatever the
//! rest of the run does: the best case adds every query still to come as a success at the
//! lowest latency, and the limit is lost if even that fails. Only upper limits (`<`, `<=`) on
//! latency, `error_rate` and `errors` can be lost early; `max` and `errors` at once, the others
//! only when the number of queries the run will send is known (`--requests`, or an open loop's
//! rate and duration).

use chstorm_stats::LatencyHistogram;
use std::time::Duration;

/// What a threshold limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Figure {
    /// A latency percentile, 0 < p <= 100.
    Percentile(f64),
    Min,
    Mean,
    Max,
    Qps,
    ErrorRate,
    Errors,
}

impl Figure {
    fn is_latency(self) -> bool {
        matches!(self, Figure::Percentile(_) | Figure::Min | Figure::Mean | Figure::Max)
    }

    /// The figure's name as chstorm writes it: `p99`, `p99.9`, `max`, `error_rate`.
    pub fn name(self) -> String {
        match self {
            Figure::Percentile(p) => format!("p{p}"),
            Figure::Min => "min".into(),
            Figure::Mean => "mean".into(),
            Figure::Max => "max".into(),
            Figure::Qps => "qps".into(),
            Figure::ErrorRate => "error_rate".into(),
            Figure::Errors => "errors".into(),
        }
    }
}

/// The comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }

    fn holds(self, value: f64, limit: f64) -> bool {
        match self {
            Op::Lt => value < limit,
            Op::Le => value <= limit,
            Op::Gt => value > limit,
            Op::Ge => value >= limit,
        }
    }

    fn is_upper(self) -> bool {
        matches!(self, Op::Lt | Op::Le)
    }
}

/// One limit on a run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// The expression as written (trimmed).
    pub text: String,
    pub figure: Figure,
    pub op: Op,
    /// Seconds for latencies, a fraction for `error_rate`, a count for `errors`, queries per
    /// second for `qps`.
    pub limit: f64,
    /// Stop the run as soon as this limit can no longer be met (`--abort-on-fail`).
    pub abort_on_fail: bool,
}

/// The figures a threshold is judged on.
#[derive(Debug, Clone, Copy)]
pub struct Figures<'a> {
    /// Latencies of the successful queries.
    pub hist: &'a LatencyHistogram,
    pub queries: u64,
    pub errors: u64,
    pub qps: f64,
}

impl Figures<'_> {
    /// The value of `figure`; None for a latency when no query succeeded, and for `error_rate`
    /// when no query finished.
    pub fn value(&self, figure: Figure) -> Option<f64> {
        let s = self.hist.summary();
        if figure.is_latency() && self.hist.is_empty() {
            return None;
        }
        Some(match figure {
            Figure::Percentile(p) => self.hist.percentile_s(p),
            Figure::Min => s.min,
            Figure::Mean => s.mean,
            Figure::Max => s.max,
            Figure::Qps => self.qps,
            Figure::ErrorRate => match self.queries + self.errors {
                0 => return None,
                n => self.errors as f64 / n as f64,
            },
            Figure::Errors => self.errors as f64,
        })
    }
}

const FIGURES_HELP: &str =
    "use p50, p90, p99, p99.9 (any pN), min, mean, max, qps, error_rate or errors, e.g. p99<5ms, qps>=20000, error_rate<0.1%";

fn bad(text: &str, why: impl std::fmt::Display) -> String {
    format!("threshold '{text}': {why}")
}

/// A latency such as `5ms`, `250us`, `1.5s`, in seconds.
fn parse_latency(text: &str, v: &str) -> Result<f64, String> {
    let at = v.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(v.len());
    let (num, unit) = (&v[..at], v[at..].trim());
    let scale = match unit {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "" => return Err(bad(text, format!("give '{v}' a unit: us, ms or s, e.g. {v}ms"))),
        u => return Err(bad(text, format!("'{u}' is not a latency unit: use us, ms or s"))),
    };
    match num.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x * scale),
        _ => Err(bad(text, format!("'{v}' is not a latency; write e.g. 5ms"))),
    }
}

fn parse_number(text: &str, v: &str, what: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(bad(text, format!("'{v}' is not {what}"))),
    }
}

fn parse_figure(text: &str, name: &str) -> Result<Figure, String> {
    let name = name.trim().to_ascii_lowercase();
    let named = match name.as_str() {
        "min" => Some(Figure::Min),
        "mean" | "avg" => Some(Figure::Mean),
        "max" => Some(Figure::Max),
        "qps" => Some(Figure::Qps),
        "error_rate" => Some(Figure::ErrorRate),
        "errors" => Some(Figure::Errors),
        _ => None,
    };
    if let Some(f) = named {
        return Ok(f);
    }
    let p = name.strip_prefix("p(").and_then(|r| r.strip_suffix(')')).or_else(|| name.strip_prefix('p'));
    match p.map(|p| p.parse::<f64>()) {
        Some(Ok(p)) if p > 0.0 && p <= 100.0 => Ok(Figure::Percentile(p)),
        Some(Ok(_)) => Err(bad(text, "a percentile runs from above 0 to 100, e.g. p99 or p99.9")),
        _ => Err(bad(text, format!("unknown figure '{name}'; {FIGURES_HELP}"))),
    }
}

impl Threshold {
    /// Parses `FIGURE OP VALUE`, e.g. `p99<5ms`, `qps >= 20000`, `error_rate<0.1%`.
    pub fn parse(text: &str) -> Result<Threshold, String> {
        let text = text.trim();
        let Some(at) = text.find(['<', '>', '=']) else {
            return Err(bad(text, format!("no comparison: write FIGURE<VALUE with <, <=, > or >=; {FIGURES_HELP}")));
        };
        let rest = &text[at..];
        let (op, len) = match rest.as_bytes() {
            [b'<', b'=', ..] => (Op::Le, 2),
            [b'>', b'=', ..] => (Op::Ge, 2),
            [b'<', ..] => (Op::Lt, 1),
            [b'>', ..] => (Op::Gt, 1),
            _ => {
                return Err(bad(text, "'=' is not a comparison chstorm judges: use <, <=, > or >= (errors<1 for none)"))
            }
        };
        let value = rest[len..].trim();
        if value.is_empty() || value.starts_with(['<', '>', '=']) {
            return Err(bad(text, "expected a value after the comparison, e.g. p99<5ms"));
        }
        let figure = parse_figure(text, &text[..at])?;
        let limit = match figure {
            f if f.is_latency() => parse_latency(text, value)?,
            Figure::Qps => parse_number(text, value, "a number of queries per second, e.g. qps>=20000")?,
            Figure::Errors => match value.parse::<u64>() {
                Ok(n) => n as f64,
                Err(_) => return Err(bad(text, format!("'{value}' is not a whole number of failed queries"))),
            },
            _ => {
                let (num, scale) = match value.strip_suffix('%') {
                    Some(n) => (n.trim(), 0.01),
                    None => (value, 1.0),
                };
                let rate = parse_number(text, num, "a fraction or a percentage, e.g. error_rate<0.1%")? * scale;
                if rate > 1.0 {
                    return Err(bad(text, "an error rate is at most 1 (100%): write 0.001 or 0.1%"));
                }
                rate
            }
        };
        Ok(Threshold { text: text.to_string(), figure, op, limit, abort_on_fail: false })
    }

    /// The same threshold, stopping the run once it can no longer be met.
    pub fn aborting(mut self) -> Threshold {
        self.abort_on_fail = true;
        self
    }

    /// Whether `value` meets the limit.
    pub fn holds(&self, value: f64) -> bool {
        self.op.holds(value, self.limit)
    }

    /// The verdict on finished figures: Some(true) met, Some(false) not; a latency limit on a
    /// run without a successful query fails, and so does any limit on a run that sent nothing.
    pub fn judge(&self, f: &Figures) -> (Option<f64>, bool) {
        let v = f.value(self.figure);
        (v, v.is_some_and(|v| self.holds(v)))
    }

    /// Checks that `--abort-on-fail` can ever act on this threshold: `planned_known` says whether
    /// the number of queries the run will send is known in advance.
    pub fn check_abort(&self, planned_known: bool) -> Result<(), String> {
        if self.figure == Figure::Qps {
            return Err(format!(
                "--abort-on-fail '{}': QPS is known only when the run ends; give it as --threshold",
                self.text
            ));
        }
        if !self.op.is_upper() {
            return Err(format!(
                "--abort-on-fail '{}': a lower limit can still be met by the queries to come; only < and <= limits stop a run",
                self.text
            ));
        }
        let needs_plan = !matches!(self.figure, Figure::Max | Figure::Errors);
        if needs_plan && !planned_known {
            return Err(format!(
                "--abort-on-fail '{}': {} can be known lost early only when the number of queries is known; give -n N, or an open loop with --rate and -d",
                self.text,
                self.figure.name()
            ));
        }
        Ok(())
    }

    /// True when the limit can no longer be met: even if every query still to come (of
    /// `planned` in all, when known) succeeded at the lowest latency, the verdict would fail.
    pub fn lost(&self, f: &Figures, planned: Option<u64>) -> bool {
        if !self.op.is_upper() || self.figure == Figure::Qps {
            return false;
        }
        let done = f.queries + f.errors;
        let known_now = matches!(self.figure, Figure::Max | Figure::Errors);
        let remaining = match planned {
            _ if known_now => 0,
            Some(p) => p.saturating_sub(done),
            None => return false,
        };
        let best = if remaining > 0 && self.figure.is_latency() {
            let mut h = f.hist.clone();
            h.record_n(Duration::from_micros(1), remaining);
            Figures { hist: &h, queries: f.queries + remaining, ..*f }.value(self.figure)
        } else {
            Figures { queries: f.queries + remaining, ..*f }.value(self.figure)
        };
        best.is_some_and(|v| !self.holds(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(h: &LatencyHistogram, errors: u64) -> Figures<'_> {
        Figures { hist: h, queries: h.len(), errors, qps: 100.0 }
    }

    #[test]
    fn parses_figures_units_and_comparisons() {
        for (text, figure, op, limit) in [
            ("p99<5ms", Figure::Percentile(99.0), Op::Lt, 0.005),
            (" p99.9 <= 250us ", Figure::Percentile(99.9), Op::Le, 0.00025),
            ("p(95)<1.5s", Figure::Percentile(95.0), Op::Lt, 1.5),
            ("max<100ms", Figure::Max, Op::Lt, 0.1),
            ("mean<2ms", Figure::Mean, Op::Lt, 0.002),
            ("qps>=20000", Figure::Qps, Op::Ge, 20000.0),
            ("qps > 1.5", Figure::Qps, Op::Gt, 1.5),
            ("error_rate<0.1%", Figure::ErrorRate, Op::Lt, 0.001),
            ("error_rate<=0.02", Figure::ErrorRate, Op::Le, 0.02),
            ("errors<1", Figure::Errors, Op::Lt, 1.0),
        ] {
            let t = Threshold::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((t.figure, t.op), (figure, op), "{text}");
            assert!((t.limit - limit).abs() < 1e-12, "{text}: {}", t.limit);
            assert_eq!(t.text, text.trim());
        }
    }

    #[test]
    fn mistakes_say_what_to_write() {
        for (text, needle) in [
            ("p99x<5ms", "unknown figure 'p99x'; use p50"),
            ("latency<5ms", "unknown figure 'latency'"),
            ("p0<5ms", "from above 0 to 100"),
            ("p101<5ms", "from above 0 to 100"),
            ("p99<5", "give '5' a unit: us, ms or s, e.g. 5ms"),
            ("p99<5min", "'min' is not a latency unit"),
            ("p99 5ms", "no comparison"),
            ("p99=5ms", "'=' is not a comparison"),
            ("p99<", "expected a value"),
            ("p99<<5ms", "expected a value"),
            ("qps>=lots", "not a number of queries per second"),
            ("error_rate<150%", "at most 1 (100%)"),
            ("errors<1.5", "whole number"),
        ] {
            let e = Threshold::parse(text).unwrap_err();
            assert!(e.starts_with(&format!("threshold '{}': ", text.trim())) && e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn judges_on_the_histogram_and_counts() {
        let mut h = LatencyHistogram::new();
        h.record_n(Duration::from_millis(1), 99);
        h.record(Duration::from_millis(50));
        let f = figures(&h, 1);
        let pass = |t: &str| Threshold::parse(t).unwrap().judge(&f).1;
        assert!(pass("p99<2ms") && !pass("p99.9<2ms") && pass("max<=51ms") && !pass("max<50ms"));
        assert!(pass("qps>=100") && !pass("qps>100"));
        assert!(pass("error_rate<1%") && !pass("error_rate<0.99%") && pass("errors<2") && !pass("errors<1"));
        // No successful query: a latency limit fails, there is no value.
        let empty = LatencyHistogram::new();
        assert_eq!(Threshold::parse("p99<1s").unwrap().judge(&figures(&empty, 5)), (None, false));
    }

    #[test]
    fn lost_only_when_even_the_best_case_fails() {
        let mut h = LatencyHistogram::new();
        h.record_n(Duration::from_millis(1), 10);
        h.record_n(Duration::from_millis(20), 2);
        let f = figures(&h, 3);
        let t = |s: &str| Threshold::parse(s).unwrap();
        // A max over the limit is lost at once; an error count at the limit too.
        assert!(t("max<10ms").lost(&f, None) && !t("max<30ms").lost(&f, None));
        assert!(t("errors<3").lost(&f, None) && !t("errors<4").lost(&f, None));
        // p99 < 10ms with 1000 queries planned: 2 of 1000 above it is 0.2%, still possible.
        assert!(!t("p99<10ms").lost(&f, Some(1000)));
        // With 100 planned, 2 of 100 are above: p99 >= 20 ms for sure.
        assert!(t("p99<10ms").lost(&f, Some(100)));
        // Unknown plan: a percentile can't be known lost.
        assert!(!t("p99<10ms").lost(&f, None));
        // error_rate: 3 errors of at most 100 queries is at least 3%.
        assert!(t("error_rate<2%").lost(&f, Some(100)) && !t("error_rate<4%").lost(&f, Some(100)));
        // Lower limits and QPS are never lost early, and refuse --abort-on-fail.
        assert!(!t("p50>1s").lost(&f, Some(15)) && !t("qps<1").lost(&f, Some(15)));
        assert!(t("qps>=1").check_abort(true).unwrap_err().contains("only when the run ends"));
        assert!(t("p50>1ms").check_abort(true).unwrap_err().contains("lower limit"));
        assert!(t("p99<1ms").check_abort(false).unwrap_err().contains("give -n N"));
        t("max<1ms").check_abort(false).unwrap();
        t("errors<5").check_abort(false).unwrap();
    }
}
