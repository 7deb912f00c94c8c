//! Merging a phase's runs from several rounds (`--rounds`): the phase sequence is repeated, so
//! slow drifts of the machine (other work, thermal limits) spread evenly over the phases.
//!
//! Counts and measured time add up and QPS is queries over the summed time; latency
//! percentiles come from the summed HDR histograms (exact, not averages); CPU shares are
//! means weighted by each run's measured time; per-second points are laid end to end.

use crate::error::ColocateError;
use crate::phase::Outcome;
use chstorm_load::StopReason;

/// Merges the runs of one phase (at least one), in round order.
pub(crate) fn merge(mut runs: Vec<Outcome>) -> Result<Outcome, ColocateError> {
    if runs.len() <= 1 {
        return runs.pop().ok_or_else(|| ColocateError::Internal("a phase without runs".into()));
    }
    let named: Vec<(String, chstorm_output::BenchReport)> =
        runs.iter().enumerate().map(|(i, o)| (format!("round {}", i + 1), o.report.clone())).collect();
    let mut report = chstorm_output::merge::merge(&named)?;
    let first = &runs[0].report;
    report.concurrency = first.concurrency;
    report.rate = first.rate;
    report.duration_s = runs.iter().map(|o| o.report.duration_s).sum();
    report.qps = if report.duration_s > 0.0 { report.queries as f64 / report.duration_s } else { 0.0 };
    let mut offset = 0;
    report.per_second = Vec::new();
    for o in &runs {
        let last = o.report.per_second.iter().map(|p| p.t).max().unwrap_or(0);
        report
            .per_second
            .extend(o.report.per_second.iter().map(|p| chstorm_stats::SecondStats { t: p.t + offset, ..*p }));
        offset += last;
    }
    let reasons: Vec<&str> = runs.iter().map(|o| o.report.stop_reason.as_str()).collect();
    report.stop_reason = [StopReason::Interrupted, StopReason::MaxErrors]
        .iter()
        .map(|r| r.as_str())
        .find(|r| reasons.contains(r))
        .unwrap_or(reasons[0])
        .to_string();
    let weights: Vec<f64> = runs.iter().map(|o| o.report.duration_s).collect();
    let mean = |f: &dyn Fn(&Outcome) -> Option<f64>| -> Option<f64> {
        let pairs: Vec<(f64, f64)> = runs.iter().zip(&weights).filter_map(|(o, w)| f(o).map(|v| (v, *w))).collect();
        let total: f64 = pairs.iter().map(|p| p.1).sum();
        (total > 0.0).then(|| pairs.iter().map(|(v, w)| v * w).sum::<f64>() / total)
    };
    let server_cpu_pct = mean(&|o| o.server_cpu_pct);
    let offline_cpu_pct = mean(&|o| o.offline_cpu_pct);
    let client_cpu_pct = mean(&|o| Some(o.client_cpu_pct)).unwrap_or(0.0);
    let mut isolation = runs[0].isolation.clone();
    for o in &runs[1..] {
        isolation.extend(o.isolation.iter().filter(|l| l.starts_with("undo:")).cloned());
    }
    Ok(Outcome {
        plan: runs[0].plan,
        report,
        server_cpu_pct,
        offline_cpu_pct,
        client_cpu_pct,
        offline_pids: runs.iter().flat_map(|o| o.offline_pids.iter().copied()).collect(),
        rounds: runs.len(),
        isolation,
    })
}
