//! One of N equal parts of a workload, and a common wall-clock start.
//!
//! A run split in N segments (`--segment I/N`, I counting from 0 as Kubernetes'
//! `JOB_COMPLETION_INDEX` does) sends, all segments together, what one process running the whole
//! workload would send:
//!
//! * connections and `--requests`: segment I takes the whole's items `I, I+N, I+2N, ...`, so
//!   `-c 10` in 4 segments is 3, 3, 2 and 2 connections;
//! * an open loop's sends: segment I makes the whole schedule's sends `I, I+N, I+2N, ...` at the
//!   whole schedule's due times, so the segments interleave into the one schedule (its share of
//!   the rate, and of a ramp, exactly);
//! * `seq(a)` placeholders: segment I sends `a+I, a+I+N, a+I+2N, ...`, so with `-n` the N
//!   segments together send `a, a+1, ..., a+n-1`, each value once, as one process would.
//!
//! `--start-at` starts the clock at a wall-clock instant, so segments on several machines begin
//! within their clocks' skew; an open loop's due times count from that instant.

use std::time::{Duration, SystemTime};

/// Most segments a run can be split in (`--segment I/N`).
pub const MAX_SEGMENTS: u32 = 10_000;
/// A `--start-at` this far in the past or less still starts the run at once, its clock anchored
/// at the instant given (an open loop sends what fell due meanwhile, counted as late).
pub const START_AT_GRACE: Duration = Duration::from_secs(5);
/// Furthest ahead a `--start-at` may be: 1 day.
pub const MAX_START_AHEAD: Duration = Duration::from_secs(24 * 3600);
/// How long before `--start-at` the connections are opened. Shorter than the 3 s after which
/// ClickHouse closes an idle HTTP connection, so kept-alive connections are still open at the start.
pub const CONNECT_LEAD: Duration = Duration::from_secs(2);

/// The I-th of N parts of a workload (`index` counts from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub index: u32,
    pub count: u32,
}

impl Default for Segment {
    fn default() -> Self {
        Segment::WHOLE
    }
}

impl std::fmt::Display for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Segment {
    /// The whole workload: segment 0 of 1.
    pub const WHOLE: Segment = Segment { index: 0, count: 1 };

    /// Parses `I/N`: `0/4` .. `3/4`.
    pub fn parse(s: &str) -> Result<Segment, String> {
        let usage =
            "write I/N with I from 0 to N-1, e.g. --segment 0/4 (Kubernetes' JOB_COMPLETION_INDEX counts from 0 too)";
        let Some((i, n)) = s.trim().split_once('/') else {
            return Err(format!("'{s}' is not a segment: {usage}"));
        };
        let (Ok(index), Ok(count)) = (i.trim().parse::<u32>(), n.trim().parse::<u32>()) else {
            return Err(format!("'{s}' is not a segment: {usage}"));
        };
        if count == 0 {
            return Err(format!("segment {s}: a run has at least 1 segment; {usage}"));
        }
        if count > MAX_SEGMENTS {
            return Err(format!("segment {s}: {count} segments is more than {MAX_SEGMENTS}, the most chstorm accepts"));
        }
        if index >= count {
            return Err(format!(
                "segment {s}: the index of one of {count} segments runs from 0 to {}; {usage}",
                count - 1
            ));
        }
        Ok(Segment { index, count })
    }

    pub fn is_whole(&self) -> bool {
        self.count == 1
    }

    /// The whole workload's number of this segment's `k`-th item (send, connection, value).
    pub fn global(&self, k: u64) -> u64 {
        u64::from(self.index) + u64::from(self.count) * k
    }

    /// How many of the whole workload's first `n` items are this segment's.
    pub fn share_of(&self, n: u64) -> u64 {
        let (i, c) = (u64::from(self.index), u64::from(self.count));
        if n > i {
            (n - i).div_ceil(c)
        } else {
            0
        }
    }
}

/// Checks a `--start-at` instant against `now`: at most [`START_AT_GRACE`] in the past and
/// [`MAX_START_AHEAD`] ahead.
pub fn check_start_at(at: SystemTime, now: SystemTime) -> Result<(), String> {
    let shown = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs().max(1))).to_string();
    match at.duration_since(now) {
        Ok(ahead) if ahead > MAX_START_AHEAD => Err(format!(
            "--start-at is {} ahead, more than {}, the furthest chstorm waits; give a nearer time or +DURATION",
            shown(ahead),
            crate::spec::describe_limit(MAX_START_AHEAD)
        )),
        Ok(_) => Ok(()),
        Err(e) if e.duration() > START_AT_GRACE => Err(format!(
            "--start-at was {} ago (more than {} in the past): give a time ahead, e.g. +30s, and the same one to every segment",
            shown(e.duration()),
            humantime::format_duration(START_AT_GRACE)
        )),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_with_the_fix() {
        assert_eq!(Segment::parse("2/4").unwrap(), Segment { index: 2, count: 4 });
        assert_eq!(Segment::parse(" 0/1 ").unwrap(), Segment::WHOLE);
        for (s, needle) in [
            ("3/2", "runs from 0 to 1"),
            ("4/4", "runs from 0 to 3"),
            ("0/0", "at least 1 segment"),
            ("1", "not a segment"),
            ("a/4", "not a segment"),
            ("-1/4", "not a segment"),
            ("0/20000", "10000"),
        ] {
            let e = Segment::parse(s).unwrap_err();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }

    #[test]
    fn shares_add_up_to_the_whole_and_interleave() {
        for n in [0u64, 1, 3, 4, 10, 101, 1000] {
            for count in [1u32, 2, 3, 4, 7] {
                let segs: Vec<Segment> = (0..count).map(|index| Segment { index, count }).collect();
                assert_eq!(segs.iter().map(|s| s.share_of(n)).sum::<u64>(), n, "n={n} count={count}");
                // Every one of the whole's first n items belongs to exactly one segment.
                let mut all: Vec<u64> =
                    segs.iter().flat_map(|s| (0..s.share_of(n)).map(move |k| s.global(k))).collect();
                all.sort_unstable();
                assert_eq!(all, (0..n).collect::<Vec<_>>());
            }
        }
        assert_eq!((0..4).map(|index| Segment { index, count: 4 }.share_of(10)).collect::<Vec<_>>(), [3, 3, 2, 2]);
    }

    #[test]
    fn start_at_must_be_near() {
        let now = SystemTime::now();
        assert!(check_start_at(now + Duration::from_secs(30), now).is_ok());
        assert!(check_start_at(now - Duration::from_secs(2), now).is_ok());
        let e = check_start_at(now - Duration::from_secs(60), now).unwrap_err();
        assert!(e.contains("1m ago") && e.contains("+30s"), "{e}");
        let e = check_start_at(now + Duration::from_secs(3 * 86_400), now).unwrap_err();
        assert!(e.contains("3days ahead") && e.contains("1 day"), "{e}");
    }
}
