//! The text summary: the seed's table (QPS, P50, P90, P99 and the change against the
//! baseline), with the server's and the offline load's CPU shares.

use crate::report::{ColocateReport, PhaseReport};
use chstorm_report::format::{fmt_qps_exact, fmt_seconds, NA};
use std::fmt::Write;

/// Column headers, in order.
pub const COLUMNS: [&str; 10] =
    ["phase", "mechanism", "QPS", "Δ QPS", "P50", "P90", "P99", "Δ P99", "server CPU", "offline CPU"];

/// `+12.3%`, `-4.0%`, or a dash.
pub fn pct_change(v: Option<f64>) -> String {
    v.filter(|x| x.is_finite()).map_or_else(|| NA.to_string(), |x| format!("{x:+.1}%"))
}

/// `43.2%`, or `n/a`.
pub fn pct(v: Option<f64>) -> String {
    v.filter(|x| x.is_finite()).map_or_else(|| "n/a".to_string(), |x| format!("{x:.1}%"))
}

/// The cells of one phase's row.
pub fn cells(p: &PhaseReport) -> Vec<String> {
    let l = &p.latency_s;
    vec![
        p.name.clone(),
        p.mechanism.clone(),
        fmt_qps_exact(p.qps),
        pct_change(p.qps_change_pct),
        fmt_seconds(l.p50),
        fmt_seconds(l.p90),
        fmt_seconds(l.p99),
        pct_change(p.p99_change_pct),
        pct(p.server_cpu_pct),
        if p.offline_cpu_pct.is_some() { pct(p.offline_cpu_pct) } else { NA.to_string() },
    ]
}

/// Renders the header lines, the table and the notes.
pub fn render(r: &ColocateReport) -> String {
    let mut s = String::new();
    let b = &r.bench;
    let _ = writeln!(
        s,
        "colocate: {} ({}), server {}, {} CPUs, kernel {}",
        r.target,
        r.protocol,
        r.server_version.as_deref().unwrap_or("unknown"),
        r.cores,
        r.kernel
    );
    let mut length = match (b.duration_s, b.requests) {
        (Some(d), _) => format!("{d:.1} s per phase"),
        (None, Some(n)) => format!("{n} queries per phase"),
        _ => String::new(),
    };
    if r.rounds > 1 {
        let _ = write!(length, " and round, {} rounds interleaved", r.rounds);
    }
    let mode = match b.rate {
        Some(rate) => format!("open loop at {rate} QPS, at most {} in flight", b.concurrency),
        None => format!("closed loop, c={}", b.concurrency),
    };
    let _ = writeln!(s, "workload: {} ({mode}, {length})", b.workload.join(" | "));
    let load = match (&r.offline.command, r.offline.threads) {
        (Some(c), _) => format!("sh -c '{c}'"),
        (None, Some(n)) => format!("{n} burner thread{}", if n == 1 { "" } else { "s" }),
        _ => "?".into(),
    };
    let _ = writeln!(
        s,
        "offline load: {load}, running {:.1} s before each loaded phase; server CPU from {}",
        r.offline.warmup_s, r.server_cpu_source
    );
    s.push('\n');
    let rows: Vec<Vec<String>> = r.phases.iter().map(cells).collect();
    let widths: Vec<usize> = (0..COLUMNS.len())
        .map(|c| rows.iter().map(|row| row[c].chars().count()).chain([COLUMNS[c].chars().count()]).max().unwrap_or(0))
        .collect();
    let line = |cells: &[String]| -> String {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(c, v)| {
                let pad = widths[c].saturating_sub(v.chars().count());
                if c < 2 {
                    format!("{v}{}", " ".repeat(pad))
                } else {
                    format!("{}{v}", " ".repeat(pad))
                }
            })
            .collect();
        parts.join("  ").trim_end().to_string()
    };
    let header: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    let _ = writeln!(s, "{}", line(&header));
    for row in &rows {
        let _ = writeln!(s, "{}", line(row));
    }
    s.push('\n');
    let errors: Vec<String> =
        r.phases.iter().filter(|p| p.errors > 0).map(|p| format!("{}/{}: {}", p.name, p.mechanism, p.errors)).collect();
    if !errors.is_empty() {
        let _ = writeln!(s, "failed queries: {}", errors.join(", "));
    }
    let missing: Vec<String> =
        r.mechanisms.iter().filter(|m| !m.available).map(|m| format!("{} ({})", m.name, m.detail)).collect();
    if !missing.is_empty() {
        let _ = writeln!(s, "not available here: {}", missing.join("; "));
    }
    let _ = writeln!(
        s,
        "Δ against the baseline; CPU shares are percent of all {} CPUs over each measured run; chstorm's own client used {}.",
        r.cores,
        r.phases.iter().map(|p| pct(Some(p.client_cpu_pct))).collect::<Vec<_>>().join(" / ")
    );
    if r.stop_reason == "interrupted" {
        let _ = writeln!(s, "interrupted: the phases above are all that was measured.");
    }
    s
}
