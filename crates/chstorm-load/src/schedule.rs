//! When each query should be sent.
//!
//! A [`Schedule`] is a value that the one load loop consults: for the k-th send of the run
//! (k = 0, 1, 2, ...) it gives the intended send time as an offset from the start of the run, or
//! `None` in a closed loop, where a connection sends as soon as its last answer is complete.
//! Open-loop latency is measured from the intended time, so time spent waiting for a free
//! connection (a stalled server) is part of the latency, not hidden (coordinated omission).

use std::time::Duration;

/// The arrival process of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// Each connection sends its next query when the previous answer is complete.
    Closed,
    /// Constant arrival rate, in queries per second.
    Fixed { rate: f64 },
    /// Rate rising (or falling) linearly from `from` to `to` queries per second over `over`,
    /// then holding at `to`.
    Ramp { from: f64, to: f64, over: Duration },
}

impl Schedule {
    /// True for the open-loop schedules.
    pub fn is_open(&self) -> bool {
        !matches!(self, Schedule::Closed)
    }

    /// The rate the run settles at (a ramp's final, held rate), for display; None for a closed loop.
    pub fn nominal_rate(&self) -> Option<f64> {
        match *self {
            Schedule::Closed => None,
            Schedule::Fixed { rate } => Some(rate),
            Schedule::Ramp { to, .. } => Some(to),
        }
    }

    /// Intended send time of the k-th query, as an offset from the run's start.
    pub fn offset_of(&self, k: u64) -> Option<Duration> {
        let k = k as f64;
        let secs = match *self {
            Schedule::Closed => return None,
            Schedule::Fixed { rate } => k / rate,
            Schedule::Ramp { from, to, over } => {
                let t_end = over.as_secs_f64();
                let n_end = (from + to) / 2.0 * t_end;
                if k >= n_end {
                    t_end + (k - n_end) / to
                } else {
                    // Solve a t^2 + b t = k with a = (to - from) / (2 T), b = from.
                    let a = (to - from) / (2.0 * t_end);
                    let b = from;
                    if a.abs() < 1e-12 {
                        k / b
                    } else {
                        (-b + (b * b + 4.0 * a * k).max(0.0).sqrt()) / (2.0 * a)
                    }
                }
            }
        };
        Some(Duration::from_secs_f64(secs.max(0.0)))
    }

    /// How many sends are due strictly before `t` (the k with `offset_of(k) < t`); 0 for a
    /// closed loop. Used to count sends that never happened (dropped).
    pub fn due_before(&self, t: Duration) -> u64 {
        let t = t.as_secs_f64();
        let n = match *self {
            Schedule::Closed => return 0,
            Schedule::Fixed { rate } => rate * t,
            Schedule::Ramp { from, to, over } => {
                let t_end = over.as_secs_f64();
                if t <= t_end {
                    from * t + (to - from) * t * t / (2.0 * t_end)
                } else {
                    (from + to) / 2.0 * t_end + to * (t - t_end)
                }
            }
        };
        n.ceil().max(0.0) as u64
    }

    /// Checks the numbers: rates must be finite and positive, a ramp's length positive.
    pub fn validate(&self) -> Result<(), String> {
        let ok = |r: f64| r.is_finite() && r > 0.0;
        match *self {
            Schedule::Closed => Ok(()),
            Schedule::Fixed { rate } if ok(rate) && rate <= crate::spec::MAX_RATE => Ok(()),
            Schedule::Fixed { rate } if ok(rate) => {
                Err(format!("--rate {rate} is more than {}, the most chstorm accepts", crate::spec::MAX_RATE))
            }
            Schedule::Fixed { rate } => {
                Err(format!("--rate must be a positive number of queries per second, got {rate}"))
            }
            Schedule::Ramp { from, to, .. } if from.max(to) > crate::spec::MAX_RATE => Err(format!(
                "a ramp to {} queries per second is more than {}, the most chstorm accepts",
                from.max(to),
                crate::spec::MAX_RATE
            )),
            Schedule::Ramp { over, .. } if over > crate::spec::MAX_DURATION => Err(format!(
                "--ramp-over is longer than {}, the most chstorm accepts",
                crate::spec::describe_limit(crate::spec::MAX_DURATION)
            )),
            Schedule::Ramp { from, to, over } if ok(from) && ok(to) && !over.is_zero() => Ok(()),
            Schedule::Ramp { .. } => Err("a ramp needs positive rates and a non-zero length".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(d: Option<Duration>) -> f64 {
        d.unwrap().as_secs_f64()
    }

    #[test]
    fn closed_loop_has_no_intended_times() {
        assert_eq!(Schedule::Closed.offset_of(5), None);
        assert_eq!(Schedule::Closed.due_before(Duration::from_secs(10)), 0);
    }

    #[test]
    fn fixed_rate_spaces_sends_evenly() {
        let sch = Schedule::Fixed { rate: 200.0 };
        assert_eq!(s(sch.offset_of(0)), 0.0);
        assert!((s(sch.offset_of(200)) - 1.0).abs() < 1e-9);
        assert!((s(sch.offset_of(1)) - 0.005).abs() < 1e-9);
        assert_eq!(sch.due_before(Duration::from_secs(2)), 400);
        assert_eq!(sch.due_before(Duration::from_millis(2501)), 501);
    }

    #[test]
    fn ramp_inverts_its_cumulative_count() {
        let sch = Schedule::Ramp { from: 100.0, to: 300.0, over: Duration::from_secs(10) };
        // Sends due by 10 s: average rate 200 * 10 s.
        assert_eq!(sch.due_before(Duration::from_secs(10)), 2000);
        for k in [0u64, 1, 50, 999, 1999, 2000, 2500] {
            let t = sch.offset_of(k).unwrap();
            // offset_of is the inverse of the cumulative count.
            let n = sch.due_before(t + Duration::from_nanos(1));
            assert!(n == k + 1 || n == k, "k={k} t={t:?} n={n}");
        }
        // After the ramp the rate holds at 300/s.
        let gap = s(sch.offset_of(2301)) - s(sch.offset_of(2300));
        assert!((gap - 1.0 / 300.0).abs() < 1e-9);
        // Early in the ramp the gaps are about 1/100 s.
        let gap0 = s(sch.offset_of(1)) - s(sch.offset_of(0));
        assert!((gap0 - 0.01).abs() < 0.0002, "{gap0}");
    }

    #[test]
    fn falling_ramp_and_validation() {
        let sch = Schedule::Ramp { from: 300.0, to: 100.0, over: Duration::from_secs(10) };
        let t = s(sch.offset_of(1000));
        assert!(t > 3.0 && t < 4.0, "{t}");
        assert!(Schedule::Fixed { rate: 0.0 }.validate().is_err());
        assert!(Schedule::Fixed { rate: f64::NAN }.validate().is_err());
        assert!(Schedule::Ramp { from: 1.0, to: 2.0, over: Duration::ZERO }.validate().is_err());
        assert!(Schedule::Fixed { rate: 10.0 }.validate().is_ok());
    }
}
