//! The per-try deadline of hedged reads: how long an attempt may go without an answer head
//! before a second copy of the query goes to another replica.
//!
//! With `hedging.delay: auto` the deadline follows the route's recent answers: the `quantile`
//! (default 0.95) of the last [`WINDOW`] answer-head times on that route (one shard, or fan-out),
//! times `factor` (default 2), within [`min_delay`, `max_delay`] (default 20 ms .. 1 s). Until
//! [`MIN_SAMPLES`] answers were seen on a route, the deadline is `max_delay.min(100 ms)`. A fixed
//! `delay` replaces all of that; `off` sends no hedges.
//!
//! Pure apart from a mutex around the window: fed durations, it answers durations.
//!
//! The deadline only says when to *look*: a hedge goes out for a silent replica alone (no
//! answer byte and no progress for the deadline, [`Activity`]; over HTTP, where 18.16 sends
//! nothing before its answer, a replica that does not answer a `/ping` sent half a deadline
//! ahead either: `super::watch`). A replica that shows it is working is left alone however long
//! its read takes.

use crate::config::{HedgeDelay, Hedging};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Answers remembered per route.
pub const WINDOW: usize = 256;
/// Answers needed before `auto` trusts the window.
pub const MIN_SAMPLES: usize = 20;
/// The deadline of `auto` before the window is trusted (capped by `max_delay`).
pub const COLD_DELAY: Duration = Duration::from_millis(100);
/// The quantile is recomputed every this many answers.
const RECOMPUTE_EVERY: usize = 16;

#[derive(Debug, Default)]
struct Window {
    /// Head times in microseconds, a ring.
    samples: Vec<u32>,
    next: usize,
    since_recompute: usize,
}

/// Recent answer-head times of one route, and the deadline derived from them.
#[derive(Debug, Default)]
pub struct HeadTimes {
    window: Mutex<Window>,
    /// The current quantile in microseconds; 0 until [`MIN_SAMPLES`] answers.
    quantile_us: AtomicU64,
}

/// `q` of `samples` (nearest rank), in microseconds.
fn quantile(samples: &[u32], q: f64) -> u64 {
    let mut v = samples.to_vec();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    *v.select_nth_unstable(rank - 1).1 as u64
}

impl HeadTimes {
    /// An answer head arrived `d` after its attempt was sent.
    pub fn record(&self, d: Duration, q: f64) {
        let us = d.as_micros().min(u32::MAX as u128) as u32;
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        if w.samples.len() < WINDOW {
            w.samples.push(us);
        } else {
            let i = w.next;
            w.samples[i] = us;
        }
        w.next = (w.next + 1) % WINDOW;
        w.since_recompute += 1;
        if w.samples.len() >= MIN_SAMPLES && (w.since_recompute >= RECOMPUTE_EVERY || w.samples.len() == MIN_SAMPLES) {
            w.since_recompute = 0;
            self.quantile_us.store(quantile(&w.samples, q), Ordering::Relaxed);
        }
    }

    /// The per-try deadline, or None when hedging is off.
    pub fn deadline(&self, cfg: &Hedging) -> Option<Duration> {
        match cfg.delay {
            HedgeDelay::Off => None,
            HedgeDelay::Fixed(d) => Some(d),
            HedgeDelay::Auto => {
                let q = self.quantile_us.load(Ordering::Relaxed);
                let d =
                    if q == 0 { COLD_DELAY.min(cfg.max_delay.0) } else { Duration::from_micros(q).mul_f64(cfg.factor) };
                Some(d.clamp(cfg.min_delay.0, cfg.max_delay.0.max(cfg.min_delay.0)))
            }
        }
    }
}

/// When an attempt last showed it is working: the query was sent, or a byte or a progress
/// report came back. Shared between the attempt loop and the transport that reads the answer.
///
/// A transport whose replica reports progress at a known pace says so ([`Activity::paced`]): a
/// silence shorter than that pace proves nothing (18.16 sends a native Progress packet every
/// `interactive_delay`, 100 ms, against per-try deadlines from 20 ms), so it does not count
/// toward the deadline ([`Activity::overdue`]).
#[derive(Debug)]
pub struct Activity {
    origin: tokio::time::Instant,
    /// Microseconds from `origin` to the last sign of work.
    last_us: AtomicU64,
    /// Microseconds of silence expected between two reports (0 until one came).
    pace_us: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity { origin: tokio::time::Instant::now(), last_us: AtomicU64::new(0), pace_us: AtomicU64::new(0) }
    }
}

impl Activity {
    /// A sign of work at `now` (read once for several records of the same moment).
    pub fn bump_at(&self, now: tokio::time::Instant) {
        let us = now.saturating_duration_since(self.origin).as_micros().min(u64::MAX as u128) as u64;
        self.last_us.fetch_max(us, Ordering::Relaxed);
    }

    /// The replica sends a progress report every `pace` while it works (its silence counts from
    /// then on beyond that pace); its reports are signs of work ([`Activity::bump_at`]) too.
    pub fn set_pace(&self, pace: Duration) {
        self.pace_us.store(pace.as_micros().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// How long since the last sign of work.
    pub fn silent_for(&self) -> Duration {
        self.origin.elapsed().saturating_sub(Duration::from_micros(self.last_us.load(Ordering::Relaxed)))
    }

    /// How much of that silence counts toward the per-try deadline: what goes beyond the
    /// replica's reporting pace.
    pub fn overdue(&self) -> Duration {
        self.silent_for().saturating_sub(Duration::from_micros(self.pace_us.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto() -> Hedging {
        Hedging::default()
    }

    #[test]
    fn quantile_is_the_nearest_rank_of_the_sorted_samples() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for n in 1..=WINDOW {
            let v: Vec<u32> = (0..n).map(|_| (next() % 1000) as u32).collect();
            let mut sorted = v.clone();
            sorted.sort_unstable();
            for q in [0.0, 0.5, 0.9, 0.95, 0.99, 1.0] {
                let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
                assert_eq!(quantile(&v, q), sorted[rank - 1] as u64, "n {n} q {q}");
            }
        }
    }

    #[test]
    fn cold_then_follows_the_quantile_within_bounds() {
        let h = HeadTimes::default();
        let cfg = auto();
        assert_eq!(h.deadline(&cfg), Some(COLD_DELAY), "no answers yet");
        // 98% of answers at 5 ms, 2% at 30 ms: p95 = 5 ms, x2 = 10 ms, floored at 20 ms.
        for i in 0..200 {
            h.record(Duration::from_millis(if i % 50 == 0 { 30 } else { 5 }), cfg.quantile);
        }
        assert_eq!(h.deadline(&cfg), Some(Duration::from_millis(20)));
        // Slower answers: p95 = 80 ms -> 160 ms.
        for _ in 0..WINDOW {
            h.record(Duration::from_millis(80), cfg.quantile);
        }
        assert_eq!(h.deadline(&cfg), Some(Duration::from_millis(160)));
        // Very slow answers: capped at max_delay.
        for _ in 0..WINDOW {
            h.record(Duration::from_secs(5), cfg.quantile);
        }
        assert_eq!(h.deadline(&cfg), Some(Duration::from_secs(1)));
    }

    #[test]
    fn fixed_and_off() {
        let h = HeadTimes::default();
        let mut cfg = auto();
        cfg.delay = HedgeDelay::Fixed(Duration::from_millis(7));
        assert_eq!(h.deadline(&cfg), Some(Duration::from_millis(7)));
        cfg.delay = HedgeDelay::Off;
        assert_eq!(h.deadline(&cfg), None);
    }

    #[test]
    fn quantile_by_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.95), 95);
        assert_eq!(quantile(&v, 1.0), 100);
        assert_eq!(quantile(&[7], 0.5), 7);
    }
}
