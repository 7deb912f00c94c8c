//! The terminal table and number formats shared with the report.
//!
//! Columns: verdict, old (s), new (s), ratio, diff %, threshold %, runs (left/right), query
//! (truncated); with `--concurrency`, old QPS and new QPS in place of the times (ratio, diff and
//! threshold stay those of the time per query, so + is slower either way). Rows in report
//! order: slower, faster, unstable, errors, then the rest. Errors and notes (an unstable query's
//! explanation) are listed under the table.

use crate::result::{CompareResult, QueryResult};
use std::fmt::Write as _;

/// Widest query text in the table, in characters.
pub const QUERY_WIDTH: usize = 70;

/// `s` cut to `max` characters with an ellipsis, on one line.
pub fn truncate(s: &str, max: usize) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let mut t: String = one_line.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// The headers of the old and new columns: `old (s)`, `new (s)`; with `--concurrency`,
/// `old QPS`, `new QPS`.
pub fn value_headers(r: &CompareResult) -> [&'static str; 2] {
    if r.options.concurrency > 1 {
        ["old QPS", "new QPS"]
    } else {
        ["old (s)", "new (s)"]
    }
}

/// A query's figures as the table and the report show them: old and new medians (QPS with
/// `--concurrency`), ratio, diff, threshold, and runs (`left/right`).
pub fn figures(q: &QueryResult) -> [String; 6] {
    let (old, new) = match &q.qps {
        Some(qps) => (qps_text(qps.left), qps_text(qps.right)),
        None => (secs(q.old_s), secs(q.new_s)),
    };
    [old, new, ratio(q.ratio), pct_signed(q.diff), pct(q.threshold), format!("{}/{}", q.runs.left, q.runs.right)]
}

/// QPS with 4 significant digits.
pub fn qps_text(v: f64) -> String {
    if v.is_finite() {
        sig(v, 4)
    } else {
        "-".into()
    }
}

/// Seconds with 4 significant digits (`0.1021`, `1.234`, `12.35`); `-` for none.
pub fn secs(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => sig(v, 4),
        _ => "-".into(),
    }
}

/// `v` with `digits` significant digits, trailing zeros kept.
pub fn sig(v: f64, digits: i32) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v == 0.0 { "0".into() } else { "-".into() };
    }
    let mag = v.abs().log10().floor() as i32;
    let decimals = (digits - 1 - mag).clamp(0, 12) as usize;
    format!("{v:.decimals$}")
}

/// A signed percentage with one decimal: `+99.2%`, `-12.0%`.
pub fn pct_signed(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{:+.1}%", v * 100.0),
        _ => "-".into(),
    }
}

/// A percentage with one decimal: `3.1%`.
pub fn pct(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{:.1}%", v * 100.0),
        _ => "-".into(),
    }
}

/// A ratio: `1.992x`.
pub fn ratio(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.3}x"),
        _ => "-".into(),
    }
}

/// One line for the progress of a finished query.
pub fn progress_line(q: &QueryResult) -> String {
    let (old, new) = match &q.qps {
        Some(qps) => (format!("{} QPS", qps_text(qps.left)), format!("{} QPS", qps_text(qps.right))),
        None => (format!("{} s", secs(q.old_s)), format!("{} s", secs(q.new_s))),
    };
    let numbers = if q.verdict.is_error() {
        q.error.clone().unwrap_or_default()
    } else {
        format!(
            "{old} -> {new}, {} (threshold {}), {}/{} runs",
            pct_signed(q.diff),
            pct(q.threshold),
            q.runs.left,
            q.runs.right
        )
    };
    format!("{:<15} {}  {}", q.verdict.as_str(), truncate(&numbers, 110), truncate(&q.query, 60))
}

/// The whole table, a summary line, and the errors and notes under it.
pub fn render(r: &CompareResult) -> String {
    let [old, new] = value_headers(r);
    let header = ["verdict", old, new, "ratio", "diff %", "threshold %", "runs", "query"];
    let rows: Vec<[String; 8]> = r
        .sorted()
        .into_iter()
        .map(|q| {
            let [old, new, ratio, diff, threshold, runs] = figures(q);
            [q.verdict.as_str().to_string(), old, new, ratio, diff, threshold, runs, truncate(&q.query, QUERY_WIDTH)]
        })
        .collect();
    let mut width = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(c.chars().count());
            // Text columns left-aligned, numbers right-aligned.
            if i == 0 || i == 7 {
                out.push_str(c);
                if i != 7 {
                    out.push_str(&" ".repeat(pad));
                }
            } else {
                out.push_str(&" ".repeat(pad));
                out.push_str(c);
            }
            if i != 7 {
                out.push_str("  ");
            }
        }
        out.push('\n');
    };
    line(&mut out, &header.map(String::from));
    for row in &rows {
        line(&mut out, row);
    }
    let _ = writeln!(out, "{}", r.summary_line());
    for q in r.sorted() {
        if let Some(e) = &q.error {
            let _ = writeln!(out, "{}: {}: {}", q.verdict.as_str(), truncate(&q.query, 60), e);
        }
        if let Some(n) = &q.note {
            let _ = writeln!(out, "note: {}: {}", truncate(&q.query, 60), n);
        }
    }
    for (side, info) in [("left", &r.left), ("right", &r.right)] {
        for n in &info.notes {
            let _ = writeln!(out, "{side}: {n}");
        }
    }
    if r.interrupted {
        out.push_str("interrupted: the queries not run yet are left out\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(secs(Some(0.10213)), "0.1021");
        assert_eq!(secs(Some(12.3456)), "12.35");
        assert_eq!(secs(Some(0.000_345_67)), "0.0003457");
        assert_eq!(secs(None), "-");
        assert_eq!(pct_signed(Some(0.9921)), "+99.2%");
        assert_eq!(pct_signed(Some(-0.12)), "-12.0%");
        assert_eq!(pct(Some(0.031)), "3.1%");
        assert_eq!(ratio(Some(1.99234)), "1.992x");
        assert_eq!(truncate("SELECT\n  1,\t2", 20), "SELECT 1, 2");
        assert_eq!(truncate("abcdef", 4), "abc…");
    }
}
