//! The run schedule of one query: a warm-up on each side, then measured runs that alternate
//! (in counterbalanced pairs: left-right, right-left, ...)
//! left and right until there are enough of them, or a limit is reached.
//!
//! * Warm-up: one run on the left, one on the right; not measured.
//! * Measured runs go in pairs, left then right, so both sides see the same drift of the machine.
//! * Enough: at least [`Plan::runs`] runs on each side **and** each side's measured time (the sum
//!   of its client times) at least [`Plan::min_time`].
//! * Limits: a side's measured time reaching [`Plan::max_time`], or [`Plan::max_runs`] runs.
//! * The first error on a side ends the query's runs; the error is kept for that side. When a
//!   warm-up fails, the other side's warm-up still runs, so a failure on both sides is told apart
//!   from a failure on one.
//!
//! The schedule knows nothing of servers or clocks: an [`Executor`] runs one attempt and says
//! how long it took, which is what makes the schedule testable with a fake.

use serde::Serialize;
use std::time::Duration;

/// Default measured runs per side, at least.
pub const DEFAULT_RUNS: usize = 7;
/// Default measured time per side, at least: 1 s.
pub const DEFAULT_MIN_TIME: Duration = Duration::from_secs(1);
/// Default measured time per side, at most: 8 s.
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(8);
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
    /// The query_id the run was sent with, to find it in system.query_log.
    pub query_id: String,
    /// Client (wall) time, seconds.
    pub time_s: f64,
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
    /// Measured time per side, at most. Default 8 s.
    #[serde(rename = "max_time_s", serialize_with = "secs")]
    pub max_time: Duration,
    /// Measured runs per side, at most. Default [`MAX_RUNS`].
    pub max_runs: usize,
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
        if self.min_time > self.max_time {
            return Err(format!("--min-time {:?} is longer than --max-time {:?}", self.min_time, self.max_time));
        }
        Ok(())
    }
}

/// Why a query's runs ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Enough runs and time on both sides.
    Enough,
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
    /// Sum of the measured client times, seconds.
    pub fn time_s(&self) -> f64 {
        self.runs.iter().map(|r| r.time_s).sum()
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

/// Runs one query by the schedule. `interrupted` is checked between pairs.
pub fn run_query(exec: &mut dyn Executor, plan: &Plan, interrupted: &dyn Fn() -> bool) -> QueryRuns {
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
    let stop = loop {
        let (lt, rt) = (left.time_s(), right.time_s());
        let (ln, rn) = (left.runs.len(), right.runs.len());
        if ln >= plan.runs && rn >= plan.runs && lt >= min && rt >= min {
            break Stop::Enough;
        }
        if lt >= max || rt >= max {
            break Stop::MaxTime;
        }
        if ln >= plan.max_runs || rn >= plan.max_runs {
            break Stop::MaxRuns;
        }
        if interrupted() {
            break Stop::Interrupted;
        }
        // Counterbalanced pairs (left-right, then right-left, ...): whichever run of a pair goes
        // second finds warmer caches, and on sub-millisecond queries that order effect alone
        // measured 6%; alternating the order spreads it evenly over both sides.
        let order = if ln % 2 == 0 { [Side::Left, Side::Right] } else { [Side::Right, Side::Left] };
        let mut failed = false;
        for side in order {
            let (runs, n) = match side {
                Side::Left => (&mut left, ln),
                Side::Right => (&mut right, rn),
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
            Ok(Run { query_id: format!("{}-{}", side.as_str(), self.calls.len()), time_s: self.time[i] })
        }
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
        let r = run_query(&mut f, &plan(3, 0.1, 8.0), &|| false);
        assert_eq!(r.stop, Stop::Enough);
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
        let r = run_query(&mut f, &plan(7, 1.0, 8.0), &|| false);
        assert_eq!(r.stop, Stop::Enough);
        assert_eq!(r.left.runs.len(), 16, "the faster side sets the count");
        assert_eq!(r.right.runs.len(), 16);
    }

    #[test]
    fn max_time_on_either_side_stops() {
        let mut f = Fake::new(0.1, 3.0);
        let r = run_query(&mut f, &plan(7, 1.0, 8.0), &|| false);
        assert_eq!(r.stop, Stop::MaxTime);
        assert_eq!(r.right.runs.len(), 3, "3 x 3 s passes 8 s");
        assert_eq!(r.left.runs.len(), 3);
    }

    #[test]
    fn at_most_500_runs() {
        let mut f = Fake::new(0.0001, 0.0001);
        let r = run_query(&mut f, &plan(7, 1.0, 8.0), &|| false);
        assert_eq!(r.stop, Stop::MaxRuns);
        assert_eq!((r.left.runs.len(), r.right.runs.len()), (500, 500));
    }

    #[test]
    fn errors_end_the_runs_and_name_the_side() {
        let mut f = Fake::new(0.1, 0.1);
        f.fail[1] = Some(Attempt::Warmup);
        let r = run_query(&mut f, &plan(7, 0.0, 8.0), &|| false);
        assert_eq!(r.stop, Stop::Error);
        assert!(r.left.error.is_none() && r.right.error.is_some());
        assert_eq!(f.calls.len(), 2, "no measured runs after a failed warm-up");

        let mut f = Fake::new(0.1, 0.1);
        f.fail = [Some(Attempt::Warmup), Some(Attempt::Warmup)];
        let r = run_query(&mut f, &plan(7, 0.0, 8.0), &|| false);
        assert!(r.left.error.is_some() && r.right.error.is_some(), "both warm-ups run");

        let mut f = Fake::new(0.1, 0.1);
        f.fail[0] = Some(Attempt::Measured(2));
        let r = run_query(&mut f, &plan(7, 0.0, 8.0), &|| false);
        assert_eq!(r.stop, Stop::Error);
        assert_eq!((r.left.runs.len(), r.right.runs.len()), (2, 2));
        assert!(r.left.error.as_deref().unwrap().contains("Measured(2)"));
    }

    #[test]
    fn interruption_is_checked_between_pairs() {
        let mut f = Fake::new(0.1, 0.1);
        let n = std::cell::Cell::new(0);
        let r = run_query(&mut f, &plan(7, 1.0, 8.0), &|| {
            n.set(n.get() + 1);
            n.get() > 2
        });
        assert_eq!(r.stop, Stop::Interrupted);
        assert_eq!(r.left.runs.len(), 2);
    }

    #[test]
    fn plans_are_checked() {
        assert!(Plan::default().validate().is_ok());
        assert!(plan(4, 0.0, 1.0).validate().unwrap_err().contains("--runs"));
        assert!(plan(7, 2.0, 1.0).validate().unwrap_err().contains("--min-time"));
        assert!(plan(501, 0.0, 1.0).validate().is_err());
    }
}
