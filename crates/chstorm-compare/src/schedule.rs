//! The run schedule of one query: a warm-up on each side, then measured runs in counterbalanced
//! pairs (left-right, right-left, ...) until the stopping rule decides, or a limit is reached.
//!
//! * Warm-up: one run on the left, one on the right; not measured.
//! * Measured runs go in pairs, so both sides see the same drift of the machine; the order within
//!   a pair alternates, so neither side always goes second.
//! * The minimum: at least [`Plan::runs`] runs on each side **and** each side's measured time (the
//!   sum of its runs' wall times) at least [`Plan::min_time`]. From there on the runs are judged
//!   at every look of [`crate::sequential`] (the first at the minimum, then each time the runs
//!   grew by a tenth); a judge that says "decided" ends them ([`Stop::Decided`]).
//! * Limits: a side's measured time reaching [`Plan::max_time`], or [`Plan::max_runs`] runs.
//! * The first error on a side ends the query's runs; the error is kept for that side. When a
//!   warm-up fails, the other side's warm-up still runs, so a failure on both sides is told apart
//!   from a failure on one.
//!
//! The schedule knows nothing of servers, clocks or statistics: an [`Executor`] runs one attempt
//! and says how long it took, and a judge looks at the values, which is what makes the schedule
//! testable with a fake (and the stopping rule simulated, in `sequential`'s tests).

use serde::Serialize;
use std::time::Duration;

/// Default measured runs per side, at least.
pub const DEFAULT_RUNS: usize = 7;
/// Default measured time per side, at least: 1 s.
pub const DEFAULT_MIN_TIME: Duration = Duration::from_secs(1);
/// Default measured time per side, at most: 12 s.
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(12);
/// Measured runs per side, at most.
pub const MAX_RUNS: usize = 500;

/// Old (left) or new (right).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Left,
    Right,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Left => "left",
            Side::Right => "right",
        }
    }
    /// `left (old)` / `right (new)`, for messages.
    pub fn long(self) -> &'static str {
        match self {
            Side::Left => "left (old)",
            Side::Right => "right (new)",
        }
    }
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.long())
    }
}

/// Which run of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    Warmup,
    /// The n-th measured run of this side, from 0.
    Measured(usize),
}

impl Attempt {
    /// 0 for the warm-up, n + 1 for measured run n: the index of the query text to send, the
    /// same on both sides.
    pub fn text_index(self) -> usize {
        match self {
            Attempt::Warmup => 0,
            Attempt::Measured(n) => n + 1,
        }
    }
}

/// One finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The query_ids the run sent, to find them in system.query_log: one, or every query of a
    /// window of concurrent clients.
    pub query_ids: Vec<String>,
    /// The run's value, seconds: its client (wall) time; for a window of concurrent clients, the
    /// window's wall time per query (1 / QPS).
    pub time_s: f64,
    /// The wall time the run took, seconds: what counts against --min-time and --max-time.
    pub wall_s: f64,
    /// The share of this host's CPU time stolen by the hypervisor during the run, when the host
    /// says (`/proc/stat`).
    pub steal: Option<f64>,
}

impl Run {
    /// A run of one query that took `time_s`.
    pub fn single(query_id: String, time_s: f64) -> Run {
        Run { query_ids: vec![query_id], time_s, wall_s: time_s, steal: None }
    }
}

/// Runs one attempt of the current query on one side.
pub trait Executor {
    fn execute(&mut self, side: Side, attempt: Attempt) -> Result<Run, String>;
}

/// How many runs to make.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Plan {
    /// Measured runs per side, at least. Default [`DEFAULT_RUNS`].
    pub runs: usize,
    /// Measured time per side, at least. Default 1 s.
    #[serde(rename = "min_time_s", serialize_with = "secs")]
    pub min_time: Duration,
    /// Measured time per side, at most. Default 12 s.
    #[serde(rename = "max_time_s", serialize_with = "secs")]
    pub max_time: Duration,
    /// Measured runs per side, at most. Default [`MAX_RUNS`].
    pub max_runs: usize,
}

/// Judges a query's runs at a look: the values of the left and right runs so far; true when the
/// verdict is decided and the runs stop.
pub type Judge<'a> = dyn FnMut(&[f64], &[f64]) -> bool + 'a;

/// A duration as the flags take it: `8s`, `1.5s`, `250ms`.
pub fn show(d: Duration) -> String {
    if d.subsec_millis() > 0 && d.as_secs() == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", crate::table::sig(d.as_secs_f64(), 4).trim_end_matches('0').trim_end_matches('.'))
    }
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for Plan {
    fn default() -> Plan {
        Plan { runs: DEFAULT_RUNS, min_time: DEFAULT_MIN_TIME, max_time: DEFAULT_MAX_TIME, max_runs: MAX_RUNS }
    }
}

impl Plan {
    /// Checks the plan; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.runs < crate::run::MIN_RUNS_FOR_VERDICT {
            return Err(format!(
                "--runs must be at least {}: with fewer, a 1% threshold cannot be had",
                crate::run::MIN_RUNS_FOR_VERDICT
            ));
        }
        if self.runs > self.max_runs {
            return Err(format!("--runs {} is more than the {} runs a side may make", self.runs, self.max_runs));
        }
        if self.max_time < self.min_time {
            return Err(format!(
                "--max-time {} is below --min-time {}: raise --max-time or lower --min-time",
                show(self.max_time),
                show(self.min_time)
            ));
        }
        Ok(())
    }
}

/// Why a query's runs ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The stopping rule decided the verdict.
    Decided,
    /// A side reached --max-time.
    MaxTime,
    /// A side reached the most runs allowed.
    MaxRuns,
    /// A run failed.
    Error,
    /// The user interrupted.
    Interrupted,
}

/// One side's runs of a query.
#[derive(Debug, Clone, Default)]
pub struct SideRuns {
    pub warmup: Option<Run>,
    pub runs: Vec<Run>,
    /// The first error; no runs are made after it.
    pub error: Option<String>,
}

impl SideRuns {
    /// Sum of the measured runs' wall times, seconds.
    pub fn time_s(&self) -> f64 {
        self.runs.iter().map(|r| r.wall_s).sum()
    }
    pub fn times(&self) -> Vec<f64> {
        self.runs.iter().map(|r| r.time_s).collect()
    }
}

/// Both sides' runs of a query.
#[derive(Debug, Clone)]
pub struct QueryRuns {
    pub left: SideRuns,
    pub right: SideRuns,
    pub stop: Stop,
}

/// Runs one query by the schedule; `judge` is asked at every look. `interrupted` is checked
/// between pairs.
pub fn run_query(
    exec: &mut dyn Executor,
    plan: &Plan,
    judge: &mut Judge<'_>,
    interrupted: &dyn Fn() -> bool,
) -> QueryRuns {
    let mut left = SideRuns::default();
    let mut right = SideRuns::default();
    match exec.execute(Side::Left, Attempt::Warmup) {
        Ok(r) => left.warmup = Some(r),
        Err(e) => left.error = Some(e),
    }
    match exec.execute(Side::Right, Attempt::Warmup) {
        Ok(r) => right.warmup = Some(r),
        Err(e) => right.error = Some(e),
    }
    if left.error.is_some() || right.error.is_some() {
        return QueryRuns { left, right, stop: Stop::Error };
    }
    let (min, max) = (plan.min_time.as_secs_f64(), plan.max_time.as_secs_f64());
    // Runs per side at the next look; 0 until the minimum is met.
    let mut next = 0;
    let stop = loop {
        let (lt, rt) = (left.time_s(), right.time_s());
        let n = left.runs.len();
        if n >= plan.runs && lt >= min && rt >= min && n >= next {
            if judge(&left.times(), &right.times()) {
                break Stop::Decided;
            }
            next = crate::sequential::next_look(n);
        }
        if lt >= max || rt >= max {
            break Stop::MaxTime;
        }
        if n >= plan.max_runs {
            break Stop::MaxRuns;
        }
        if interrupted() {
            break Stop::Interrupted;
        }
        // Counterbalanced pairs (left-right, then right-left, ...): whichever run of a pair goes
        // second finds warmer caches, and on sub-millisecond queries that order effect alone
        // measured 6%; alternating the order spreads it evenly over both sides.
        let order = if n % 2 == 0 { [Side::Left, Side::Right] } else { [Side::Right, Side::Left] };
        let mut failed = false;
        for side in order {
            let runs = match side {
                Side::Left => &mut left,
                Side::Right => &mut right,
            };
            match exec.execute(side, Attempt::Measured(n)) {
                Ok(r) => runs.runs.push(r),
                Err(e) => {
                    runs.error = Some(e);
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            break Stop::Error;
        }
    };
    QueryRuns { left, right, stop }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake server: each side takes a fixed time per run (seconds), and may fail at a given
    /// attempt. Records the order of calls.
    struct Fake {
        time: [f64; 2],
        fail: [Option<Attempt>; 2],
        calls: Vec<(Side, Attempt)>,
    }

    impl Fake {
        fn new(left_s: f64, right_s: f64) -> Fake {
            Fake { time: [left_s, right_s], fail: [None, None], calls: Vec::new() }
        }
    }

    impl Executor for Fake {
        fn execute(&mut self, side: Side, attempt: Attempt) -> Result<Run, String> {
            self.calls.push((side, attempt));
            let i = side as usize;
            if self.fail[i] == Some(attempt) {
                return Err(format!("{side} failed at {attempt:?}"));
            }
            Ok(Run::single(format!("{}-{}", side.as_str(), self.calls.len()), self.time[i]))
        }
    }

    /// A judge that decides at the first look.
    fn at_once(_: &[f64], _: &[f64]) -> bool {
        true
    }

    /// A judge that never decides.
    fn never(_: &[f64], _: &[f64]) -> bool {
        false
    }

    fn plan(runs: usize, min_s: f64, max_s: f64) -> Plan {
        Plan {
            runs,
            min_time: Duration::from_secs_f64(min_s),
            max_time: Duration::from_secs_f64(max_s),
            max_runs: MAX_RUNS,
        }
    }

    #[test]
    fn warm_up_then_alternate() {
        let mut f = Fake::new(0.5, 0.5);
        let r = run_query(&mut f, &plan(3, 0.1, 8.0), &mut at_once, &|| false);
        assert_eq!(r.stop, Stop::Decided);
        let expect = [
            (Side::Left, Attempt::Warmup),
            (Side::Right, Attempt::Warmup),
            (Side::Left, Attempt::Measured(0)),
            (Side::Right, Attempt::Measured(0)),
            (Side::Right, Attempt::Measured(1)),
            (Side::Left, Attempt::Measured(1)),
            (Side::Left, Attempt::Measured(2)),
            (Side::Right, Attempt::Measured(2)),
        ];
        assert_eq!(f.calls, expect);
        assert_eq!((r.left.runs.len(), r.right.runs.len()), (3, 3));
        assert!(r.left.warmup.is_some() && r.right.warmup.is_some());
        // Warm-up time does not count.
        assert_eq!(r.left.time_s(), 1.5);
    }

    #[test]
    fn min_time_on_each_side_keeps_it_going() {
        // 7 runs of 1/16 s is short of 1 s: go on to 16 runs.
        let mut f = Fake::new(0.0625, 0.125);
        let r = run_query(&mut f, &plan(7, 1.0, 8.0), &mut at_once, &|| false);
        assert_eq!(r.stop, Stop::Decided);
        assert_eq!(r.left.runs.len(), 16, "the faster side sets the count");
        assert_eq!(r.right.runs.len(), 16);
    }

    #[test]
    fn max_time_on_either_side_stops() {
        let mut f = Fake::new(0.1, 3.0);
        let r = run_query(&mut f, &plan(7, 1.0, 8.0), &mut at_once, &|| false);
        assert_eq!(r.stop, Stop::MaxTime);
        assert_eq!(r.right.runs.len(), 3, "3 x 3 s passes 8 s");
        assert_eq!(r.left.runs.len(), 3);
    }

    #[test]
    fn at_most_500_runs() {
        let mut f = Fake::new(0.0001, 0.0001);
        let r = run_query(&mut f, &plan(7, 1.0, 8.0), &mut never, &|| false);
        assert_eq!(r.stop, Stop::MaxRuns);
        assert_eq!((r.left.runs.len(), r.right.runs.len()), (500, 500));
    }

    #[test]
    fn errors_end_the_runs_and_name_the_side() {
        let mut f = Fake::new(0.1, 0.1);
        f.fail[1] = Some(Attempt::Warmup);
        let r = run_query(&mut f, &plan(7, 0.0, 8.0), &mut never, &|| false);
        assert_eq!(r.stop, Stop::Error);
        assert!(r.left.error.is_none() && r.right.error.is_some());
        assert_eq!(f.calls.len(), 2, "no measured runs after a failed warm-up");

        let mut f = Fake::new(0.1, 0.1);
        f.fail = [Some(Attempt::Warmup), Some(Attempt::Warmup)];
        let r = run_query(&mut f, &plan(7, 0.0, 8.0), &mut never, &|| false);
        assert!(r.left.error.is_some() && r.right.error.is_some(), "both warm-ups run");

        let mut f = Fake::new(0.1, 0.1);
        f.fail[0] = Some(Attempt::Measured(2));
        let r = run_query(&mut f, &plan(7, 0.0, 8.0), &mut never, &|| false);
        assert_eq!(r.stop, Stop::Error);
        assert_eq!((r.left.runs.len(), r.right.runs.len()), (2, 2));
        assert!(r.left.error.as_deref().unwrap().contains("Measured(2)"));
    }

    #[test]
    fn interruption_is_checked_between_pairs() {
        let mut f = Fake::new(0.1, 0.1);
        let n = std::cell::Cell::new(0);
        let r = run_query(&mut f, &plan(7, 1.0, 8.0), &mut never, &|| {
            n.set(n.get() + 1);
            n.get() > 2
        });
        assert_eq!(r.stop, Stop::Interrupted);
        assert_eq!(r.left.runs.len(), 2);
    }

    #[test]
    fn undecided_runs_go_on_with_a_look_at_every_tenth_more() {
        // Decides once each side has 20 runs: the looks come at 7 (the minimum), 8, 9, ..., 19,
        // 21, so it stops at 21, the first look at or past 20.
        let mut f = Fake::new(0.01, 0.01);
        let mut looks = Vec::new();
        let mut judge = |l: &[f64], r: &[f64]| {
            assert_eq!(l.len(), r.len());
            looks.push(l.len());
            l.len() >= 20
        };
        let r = run_query(&mut f, &plan(7, 0.0, 8.0), &mut judge, &|| false);
        assert_eq!(r.stop, Stop::Decided);
        assert_eq!(looks, vec![7, 8, 9, 10, 11, 13, 15, 17, 19, 21]);
        assert_eq!(r.left.runs.len(), 21);
        // Undecided, the budget ends it: 8 s of 0.125 s runs, and no look before the minimum.
        let mut f = Fake::new(0.125, 0.125);
        let mut looks = Vec::new();
        let mut judge = |l: &[f64], _: &[f64]| {
            looks.push(l.len());
            false
        };
        let r = run_query(&mut f, &plan(7, 1.0, 8.0), &mut judge, &|| false);
        assert_eq!(r.stop, Stop::MaxTime);
        assert_eq!(looks[0], 8, "the minimum: 1 s of 0.125 s runs");
        assert_eq!(r.left.runs.len(), 64);
    }

    #[test]
    fn a_window_counts_its_wall_time_against_the_budget() {
        struct Windows;
        impl Executor for Windows {
            fn execute(&mut self, _: Side, _: Attempt) -> Result<Run, String> {
                Ok(Run { query_ids: vec!["a".into(), "b".into()], time_s: 0.01, wall_s: 1.0, steal: None })
            }
        }
        let r = run_query(&mut Windows, &plan(3, 0.0, 5.0), &mut never, &|| false);
        assert_eq!(r.stop, Stop::MaxTime);
        assert_eq!(r.left.runs.len(), 5, "5 windows of 1 s fill 5 s");
        assert_eq!(r.left.times(), vec![0.01; 5]);
    }

    #[test]
    fn plans_are_checked() {
        assert!(Plan::default().validate().is_ok());
        assert!(plan(4, 0.0, 1.0).validate().unwrap_err().contains("--runs"));
        let e = plan(7, 2.0, 1.0).validate().unwrap_err();
        assert_eq!(e, "--max-time 1s is below --min-time 2s: raise --max-time or lower --min-time");
        assert_eq!(show(Duration::from_millis(250)), "250ms");
        assert_eq!(show(Duration::from_millis(1500)), "1.5s");
        assert!(plan(501, 0.0, 1.0).validate().is_err());
    }
}
