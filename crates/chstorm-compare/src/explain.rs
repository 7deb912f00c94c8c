//! Why a query came out `unstable`, and what to change.
//!
//! An unstable query's threshold stayed at or above `--unstable` until its budget ran out. The
//! explanation says how many runs it got and what threshold it reached, looks for the largest
//! source of the runs' spread that compare can see, and says what to change. Each candidate
//! source is taken out of the runs and the threshold computed again, the same way (same seed,
//! same quantile); the source whose removal lowers it most is named when it lowers it by at least
//! a quarter ([`MATERIAL`]):
//!
//! * **outlier**: runs more than [`OUTLIER_Z`] robust standard deviations (1.4826 MAD) from their
//!   side's median, left out;
//! * **drift**: each side's runs in [`BLOCKS`] consecutive blocks, each block moved to the side's
//!   median (the slow trend of a host whose load changed while measuring);
//! * **cpu_wait**: each run shortened by the share of its time the server's threads were ready
//!   but waited for a CPU (`OSCPUWaitMicroseconds / RealTimeMicroseconds` of its query_log row,
//!   18.16 and later): other tasks competing for the server's cores;
//! * **steal**: each run shortened by the share of this host's CPU time the hypervisor stole
//!   during it (`/proc/stat`; the servers' host when they are local).
//!
//! The runs needed follow from the threshold falling as `1 / sqrt(runs)`
//! ([`crate::sequential::runs_for_threshold`]).

use crate::result::Sides;
use crate::schedule::{self, Plan, Side, Stop};
use crate::sequential;
use crate::stats::{median, Rules};
use crate::table::{pct, secs};
use serde::Serialize;

/// A removal that lowers the threshold by at least this share names its source.
pub const MATERIAL: f64 = 0.25;
/// Runs this many robust standard deviations from their side's median are outliers.
pub const OUTLIER_Z: f64 = 5.0;
/// Consecutive blocks per side for the drift.
pub const BLOCKS: usize = 4;

/// What compare can see of one query's runs, per side and run.
#[derive(Debug, Clone, Default)]
pub struct Runs {
    /// The judged value of each run (client time, or a window's time per query), seconds.
    pub values: Sides<Vec<f64>>,
    /// Each run's wall time, seconds.
    pub wall_s: Sides<Vec<f64>>,
    /// The share of each run's time the server's threads waited for a CPU.
    pub cpu_wait: Sides<Vec<Option<f64>>>,
    /// The share of this host's CPU time stolen during each run.
    pub steal: Sides<Vec<Option<f64>>>,
}

/// A source of spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    Outlier,
    Drift,
    CpuWait,
    Steal,
}

/// The largest source of spread found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Source {
    pub kind: SourceKind,
    /// What was seen, in words.
    pub detail: String,
    /// The threshold with this source taken out, a fraction of old.
    pub threshold_without: f64,
}

/// Why a query is unstable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// Measured runs per side it got (the fewer of the two).
    pub runs: usize,
    /// Why they ended.
    pub stop: Stop,
    /// The threshold reached, and the one a verdict needed (`--unstable`), fractions of old.
    pub threshold: f64,
    pub needed: f64,
    /// The largest source of spread compare can see; null when none stands out.
    pub source: Option<Source>,
    /// The median share of a run's time the server's threads waited for a CPU (query_log), and
    /// the median share of this host's CPU time stolen during a run (/proc/stat); null where
    /// compare cannot see it.
    pub cpu_wait: Option<f64>,
    pub steal: Option<f64>,
    /// Runs per side that would bring the threshold under `--unstable` at this spread, and the
    /// `--max-time` per side they would take, seconds; null beyond 500 runs.
    pub runs_needed: usize,
    pub max_time_needed_s: Option<f64>,
    /// What to change.
    pub advice: String,
    /// All of it in one paragraph, as the table's note shows it.
    pub text: String,
}

/// Explains an unstable query whose runs gave `threshold` (at `seed`, as judged).
pub fn unstable(runs: &Runs, threshold: f64, seed: u64, rules: &Rules, plan: &Plan, stop: Stop) -> Explanation {
    let n = runs.values.left.len().min(runs.values.right.len());
    // The slower side's typical run sets how many fit in the budget.
    let per_run = [median(&runs.wall_s.left), median(&runs.wall_s.right)]
        .into_iter()
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max);
    let source = largest_source(runs, threshold, seed, rules);
    // The runs that bring the threshold under --unstable, and at least the ones a change needs.
    let runs_needed =
        sequential::runs_for_threshold(n.max(1), threshold, rules.unstable).max(sequential::MIN_RUNS_FOR_CHANGE);
    let max_time_needed_s =
        (runs_needed <= plan.max_runs && per_run > 0.0).then(|| (runs_needed as f64 * per_run).ceil().max(1.0));
    let ended = match stop {
        Stop::MaxTime => format!("--max-time {} reached", schedule::show(plan.max_time)),
        Stop::MaxRuns => format!("{} runs reached", plan.max_runs),
        Stop::Interrupted => "interrupted".into(),
        Stop::Decided | Stop::Error => "stopped".into(),
    };
    let advice = advice(source.as_ref(), n, runs_needed, max_time_needed_s, per_run, plan);
    let mut text = if n < sequential::MIN_RUNS_FOR_CHANGE {
        format!(
            "only {n} runs per side ({ended}): threshold {}; a change is told from noise from {} runs a side.",
            pct(Some(threshold)),
            sequential::MIN_RUNS_FOR_CHANGE
        )
    } else {
        format!(
            "unstable after {n} runs per side ({ended}): threshold {}, at or above --unstable {}.",
            pct(Some(threshold)),
            pct(Some(rules.unstable))
        )
    };
    match &source {
        Some(s) => text.push_str(&format!(
            " Largest source of spread: {}; without it the threshold would be {}.",
            s.detail,
            pct(Some(s.threshold_without))
        )),
        None if n >= crate::run::MIN_RUNS_FOR_VERDICT => {
            text.push_str(" No single run, trend in time, CPU wait or CPU steal stands out: the runs vary evenly.")
        }
        None => {}
    }
    text.push(' ');
    text.push_str(&advice);
    Explanation {
        runs: n,
        stop,
        threshold,
        needed: rules.unstable,
        source,
        cpu_wait: median_share(&runs.cpu_wait),
        steal: median_share(&runs.steal),
        runs_needed,
        max_time_needed_s,
        advice,
        text,
    }
}

fn advice(
    source: Option<&Source>,
    n: usize,
    runs_needed: usize,
    max_time: Option<f64>,
    per_run: f64,
    plan: &Plan,
) -> String {
    let cause = match source.map(|s| s.kind) {
        Some(SourceKind::CpuWait) => {
            "Other tasks compete for the server's cores: run with fewer concurrent tasks on the host, or give each \
             server cores of its own."
        }
        Some(SourceKind::Steal) => {
            "The hypervisor gave this machine's CPUs to other guests: measure on a dedicated host or instance."
        }
        Some(SourceKind::Drift) => {
            "The host's load changed while measuring: run with fewer concurrent tasks on the host (builds, \
             benchmarks, merges)."
        }
        Some(SourceKind::Outlier) => "Something paused the host or the server during a run: run on a quieter host.",
        None => "",
    };
    let few = if n < sequential::MIN_RUNS_FOR_CHANGE {
        format!(" and give the {} a change needs", sequential::MIN_RUNS_FOR_CHANGE)
    } else {
        String::new()
    };
    let more = match max_time {
        Some(t) if runs_needed > n => format!(
            "A run takes {} s; at this spread, about {runs_needed} runs per side would bring the threshold under \
             --unstable{few}: raise --max-time to about {t}s (now {}).",
            secs(Some(per_run)),
            schedule::show(plan.max_time)
        ),
        Some(_) => "Run it again: the threshold was just above --unstable.".into(),
        None => format!(
            "At this spread it would take about {runs_needed} runs per side, more than the {} a side may make: \
             the noise must come down.",
            plan.max_runs
        ),
    };
    if cause.is_empty() {
        more
    } else {
        format!("{cause} {more}")
    }
}

/// The candidate whose removal lowers the threshold most, when by at least [`MATERIAL`].
fn largest_source(runs: &Runs, threshold: f64, seed: u64, rules: &Rules) -> Option<Source> {
    let n = runs.values.left.len().min(runs.values.right.len());
    if n < crate::run::MIN_RUNS_FOR_VERDICT || threshold.is_nan() || threshold <= 0.0 {
        return None;
    }
    let t = |v: &Sides<Vec<f64>>| sequential::look(&v.left, &v.right, seed, rules).comparison.threshold;
    let candidates = [
        outliers(&runs.values),
        drift(&runs.values),
        scaled(runs, SourceKind::CpuWait),
        scaled(runs, SourceKind::Steal),
    ];
    candidates
        .into_iter()
        .flatten()
        .filter_map(|(kind, detail, values)| Some(Source { kind, detail, threshold_without: t(&values)? }))
        .filter(|s| s.threshold_without <= threshold * (1.0 - MATERIAL))
        .min_by(|a, b| a.threshold_without.total_cmp(&b.threshold_without))
}

type Candidate = (SourceKind, String, Sides<Vec<f64>>);

/// The median of the shares known, over both sides' runs.
fn median_share(s: &Sides<Vec<Option<f64>>>) -> Option<f64> {
    let known: Vec<f64> = s.left.iter().chain(&s.right).filter_map(|x| *x).collect();
    (!known.is_empty()).then(|| median(&known))
}

fn sides() -> [Side; 2] {
    [Side::Left, Side::Right]
}

fn of<T>(s: &Sides<T>, side: Side) -> &T {
    match side {
        Side::Left => &s.left,
        Side::Right => &s.right,
    }
}

/// Runs beyond [`OUTLIER_Z`] robust deviations, left out (each side keeps at least 5).
fn outliers(values: &Sides<Vec<f64>>) -> Option<Candidate> {
    let mut kept = Sides::<Vec<f64>>::default();
    let mut worst: Option<(f64, Side, usize, f64, f64)> = None;
    let mut count = 0;
    for side in sides() {
        let v = of(values, side);
        let m = median(v);
        let mad = median(&v.iter().map(|x| (x - m).abs()).collect::<Vec<_>>()) * 1.4826;
        let mut keep = Vec::with_capacity(v.len());
        for (i, &x) in v.iter().enumerate() {
            let z = if mad > 0.0 { (x - m).abs() / mad } else { 0.0 };
            if z > OUTLIER_Z {
                count += 1;
                if worst.is_none_or(|w| z > w.0) {
                    worst = Some((z, side, i, x, m));
                }
            } else {
                keep.push(x);
            }
        }
        if keep.len() < crate::run::MIN_RUNS_FOR_VERDICT {
            return None;
        }
        match side {
            Side::Left => kept.left = keep,
            Side::Right => kept.right = keep,
        }
    }
    let (_, side, i, x, m) = worst?;
    let others = if count > 1 {
        format!(", and {} more run{} as far out", count - 1, if count > 2 { "s" } else { "" })
    } else {
        String::new()
    };
    let detail = format!(
        "run {} of {} on the {side} took {} s, {:.1} times its side's median {} s{others}",
        i + 1,
        of(values, side).len(),
        secs(Some(x)),
        x / m,
        secs(Some(m)),
    );
    Some((SourceKind::Outlier, detail, kept))
}

/// Each side's runs in [`BLOCKS`] consecutive blocks, each block moved to the side's median.
fn drift(values: &Sides<Vec<f64>>) -> Option<Candidate> {
    let mut flat = Sides::<Vec<f64>>::default();
    let mut widest: Option<(f64, Side, Vec<f64>)> = None;
    for side in sides() {
        let v = of(values, side);
        if v.len() < 2 * BLOCKS {
            return None;
        }
        let m = median(v);
        let bounds: Vec<usize> = (0..=BLOCKS).map(|b| b * v.len() / BLOCKS).collect();
        let meds: Vec<f64> = bounds.windows(2).map(|w| median(&v[w[0]..w[1]])).collect();
        let mut out = Vec::with_capacity(v.len());
        for (b, w) in bounds.windows(2).enumerate() {
            out.extend(v[w[0]..w[1]].iter().map(|x| x - meds[b] + m));
        }
        let width = (meds.iter().copied().fold(f64::MIN, f64::max) - meds.iter().copied().fold(f64::MAX, f64::min)) / m;
        if widest.as_ref().is_none_or(|w| width > w.0) {
            widest = Some((width, side, meds));
        }
        match side {
            Side::Left => flat.left = out,
            Side::Right => flat.right = out,
        }
    }
    let (width, side, meds) = widest?;
    let by_quarter = meds.iter().map(|x| secs(Some(*x))).collect::<Vec<_>>().join(", ");
    let detail = format!(
        "the {side}'s runs drifted in time: medians {by_quarter} s over the four quarters of its runs ({} apart)",
        pct(Some(width))
    );
    Some((SourceKind::Drift, detail, flat))
}

/// Each run shortened by its CPU wait or steal share; None when no run has one above 0.
fn scaled(runs: &Runs, kind: SourceKind) -> Option<Candidate> {
    let shares = match kind {
        SourceKind::CpuWait => &runs.cpu_wait,
        _ => &runs.steal,
    };
    let mut out = Sides::<Vec<f64>>::default();
    let mut all = Vec::new();
    let mut top: Option<(f64, Side, usize)> = None;
    for side in sides() {
        let v = of(&runs.values, side);
        let s = of(shares, side);
        let mut adjusted = Vec::with_capacity(v.len());
        for (i, &x) in v.iter().enumerate() {
            let share = s.get(i).copied().flatten().unwrap_or(0.0).clamp(0.0, 0.99);
            all.push(share);
            if top.is_none_or(|t| share > t.0) {
                top = Some((share, side, i));
            }
            adjusted.push(x * (1.0 - share));
        }
        match side {
            Side::Left => out.left = adjusted,
            Side::Right => out.right = adjusted,
        }
    }
    let (max, side, i) = top?;
    if max <= 0.0 {
        return None;
    }
    let typical = pct(Some(median(&all)));
    let detail = match kind {
        SourceKind::CpuWait => format!(
            "the server's threads waited for a CPU for {typical} of a run's time (median), up to {} in run {} on \
             the {side}, by query_log's OSCPUWaitMicroseconds",
            pct(Some(max)),
            i + 1
        ),
        _ => format!(
            "the hypervisor stole {typical} of this host's CPU time during a run (median), up to {} during run {} \
             on the {side}, by /proc/stat",
            pct(Some(max)),
            i + 1
        ),
    };
    Some((kind, detail, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;
    use rand_distr::{Distribution, LogNormal};

    fn noise(n: usize, seed: u64, sigma: f64) -> Vec<f64> {
        let d = LogNormal::new((0.2f64).ln(), sigma).unwrap();
        let mut r = SmallRng::seed_from_u64(seed);
        (0..n).map(|_| d.sample(&mut r)).collect()
    }

    fn runs(left: Vec<f64>, right: Vec<f64>) -> Runs {
        let n = [left.len(), right.len()];
        Runs {
            wall_s: Sides { left: left.clone(), right: right.clone() },
            values: Sides { left, right },
            cpu_wait: Sides { left: vec![None; n[0]], right: vec![None; n[1]] },
            steal: Sides { left: vec![None; n[0]], right: vec![None; n[1]] },
        }
    }

    fn explain(r: &Runs) -> Explanation {
        let rules = Rules::default();
        let t = sequential::look(&r.values.left, &r.values.right, 3, &rules).comparison.threshold.unwrap();
        unstable(r, t, 3, &rules, &Plan::default(), Stop::MaxTime)
    }

    #[test]
    fn even_noise_names_no_source_and_says_how_many_runs() {
        let r = runs(noise(40, 1, 0.15), noise(40, 2, 0.15));
        let e = explain(&r);
        assert!(e.threshold >= 0.10, "{e:?}");
        assert_eq!(e.source, None, "{}", e.text);
        assert!(e.runs_needed > 40 && e.max_time_needed_s.unwrap() > 8.0, "{e:?}");
        assert!(
            e.text.starts_with("unstable after 40 runs per side (--max-time 12s reached): threshold "),
            "{}",
            e.text
        );
        assert!(e.text.contains("the runs vary evenly") && e.text.contains("raise --max-time to about"), "{}", e.text);
    }

    #[test]
    fn a_drifting_host_is_named() {
        // One side slows down over the runs as the other speeds up (a load that moves from one
        // server to the other), with little noise of their own: the two runs of a pair grow
        // apart and together again, which no pairing cancels.
        let ramp = |v: Vec<f64>, to: f64| v.iter().enumerate().map(|(i, x)| x * (1.0 + to * i as f64 / 40.0)).collect();
        let fall = |v: Vec<f64>, from: f64| {
            v.iter().enumerate().map(|(i, x)| x * (1.0 + from * (40 - i) as f64 / 40.0)).collect()
        };
        let e = explain(&runs(fall(noise(40, 3, 0.02), 0.5), ramp(noise(40, 4, 0.02), 0.6)));
        let s = e.source.as_ref().unwrap_or_else(|| panic!("a source: {}", e.text));
        assert_eq!(s.kind, SourceKind::Drift, "{}", e.text);
        assert!(s.detail.starts_with("the right (new)'s runs drifted in time"), "{}", s.detail);
        assert!(s.threshold_without < e.threshold / 2.0, "{s:?}");
        assert!(e.advice.contains("load changed"), "{}", e.advice);
    }

    #[test]
    fn cpu_wait_explains_runs_that_waited() {
        // Runs of 0.2 s, a third of them stretched by 30-60 % of waiting for a CPU.
        let mut r = runs(noise(30, 5, 0.01), noise(30, 6, 0.01));
        for (side, values, waits) in
            [(0u64, &mut r.values.left, &mut r.cpu_wait.left), (1, &mut r.values.right, &mut r.cpu_wait.right)]
        {
            for i in 0..values.len() {
                if (i as u64 + side).is_multiple_of(3) {
                    let share = 0.3 + 0.3 * ((i % 4) as f64 / 3.0);
                    values[i] /= 1.0 - share;
                    waits[i] = Some(share);
                } else {
                    waits[i] = Some(0.005);
                }
            }
        }
        r.wall_s = r.values.clone();
        let e = explain(&r);
        let s = e.source.as_ref().expect("a source");
        assert_eq!(s.kind, SourceKind::CpuWait, "{}", e.text);
        assert!(s.threshold_without < 0.05, "{s:?}");
        assert!(e.advice.contains("fewer concurrent tasks"), "{}", e.advice);
        assert!(s.detail.contains("OSCPUWaitMicroseconds"), "{}", s.detail);
    }

    #[test]
    fn steal_and_outliers_are_seen() {
        let mut r = runs(noise(30, 7, 0.01), noise(30, 8, 0.01));
        for (i, x) in r.values.right.iter_mut().enumerate() {
            if i % 2 == 0 {
                *x *= 1.6;
                r.steal.right[i] = Some(0.375);
            } else {
                r.steal.right[i] = Some(0.0);
            }
        }
        r.steal.left = vec![Some(0.0); 30];
        let e = explain(&r);
        assert_eq!(e.source.as_ref().map(|s| s.kind), Some(SourceKind::Steal), "{}", e.text);
        assert!(e.advice.contains("hypervisor"), "{}", e.advice);
        // One run far out: an outlier (which a median barely feels, so the threshold hardly moves).
        let mut left = noise(30, 9, 0.2);
        left[4] = 5.0;
        let c = outliers(&Sides { left, right: noise(30, 10, 0.2) }).unwrap();
        assert!(c.1.starts_with("run 5 of 30 on the left (old) took 5.000 s"), "{}", c.1);
        assert_eq!(c.2.left.len(), 29);
    }

    #[test]
    fn too_few_runs_say_the_time_a_verdict_needs() {
        let r = runs(vec![3.0, 3.1, 2.9], vec![3.0, 3.2, 3.1]);
        let e = unstable(&r, 0.3, 1, &Rules::default(), &Plan::default(), Stop::MaxTime);
        assert_eq!(e.source, None);
        assert_eq!(
            e.text,
            "only 3 runs per side (--max-time 12s reached): threshold 30.0%; a change is told from noise from 12 runs \
             a side. A run takes 3.100 s; at this spread, about 27 runs per side would bring the threshold under \
             --unstable and give the 12 a change needs: raise --max-time to about 84s (now 12s)."
        );
        // A threshold that 12 runs would bring under --unstable: the 12 runs a change needs.
        let r = runs(vec![3.0, 3.1, 2.9, 3.0, 3.1, 3.0, 3.0, 3.1], vec![3.0, 3.2, 3.1, 3.0, 3.1, 3.0, 3.0, 3.1]);
        let e = unstable(&r, 0.11, 1, &Rules::default(), &Plan::default(), Stop::MaxTime);
        assert!(e.text.starts_with("only 8 runs per side (--max-time 12s reached): threshold 11.0%;"), "{}", e.text);
        assert!(
            e.advice.ends_with(
                "about 12 runs per side would bring the threshold under --unstable and give the 12 a \
             change needs: raise --max-time to about 37s (now 12s)."
            ),
            "{}",
            e.advice
        );
    }
}
