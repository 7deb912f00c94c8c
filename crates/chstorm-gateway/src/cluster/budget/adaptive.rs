//! `threads.total: adaptive`: a controller that looks for a replica's best total while it runs.
//!
//! Pure: no I/O, no clock, no randomness. The budget feeds it what happens, each with a
//! timestamp (a [`Duration`] since any fixed origin): a grant made ([`Controller::on_grant`],
//! with whether the budget held the query back and how many queries were in flight), a grant
//! returned ([`Controller::on_release`], with how long it was held), and the server's own CPU
//! load when the server publishes it ([`Controller::on_server`]). It answers with the total to
//! use. Unit tests drive it with a simulated server (`adaptive/tests.rs`).
//!
//! # What it optimises
//!
//! Per measurement window (at least [`Tuning::window`] and [`Tuning::min_completions`]
//! completed queries): the throughput `X` (completed queries per second) and the mean time a
//! grant was held `S` (the query's time on the server, without its wait in the gateway's queue).
//! The figure of merit is Kleinrock's *power* `X / S`: it grows while a larger total buys
//! throughput without costing latency and falls once queries only wait for each other, so its
//! maximum is the knee that TCP Vegas and Netflix's concurrency-limits (Vegas, Gradient2) aim
//! for with their `min RTT / RTT` gradient. Power needs no "no-load" RTT, which a thread
//! budget cannot measure (a query's latency also depends on the threads it was granted). In a
//! closed loop (N clients) `X = N / S`, so power is `N / S^2` and the best total is the one
//! with the lowest latency; in an open loop `X` is the arrival rate and, again, the lowest `S`
//! wins; under overload the highest `X` wins.
//!
//! # How it moves (probe up, back off, hysteresis, bounds)
//!
//! * **Settle**: measure windows at the current total (its *base*). After `settle` windows,
//!   a probe cycle starts.
//! * **Probe**: windows alternate between a candidate (`total ± step`, `step = max(1, total/8)`)
//!   and the base: `C B C B C B` after a base window `B0`. Each candidate window is compared
//!   with the geometric mean of the base windows on either side (`C_i / sqrt(B_{i-1} B_i)`),
//!   which cancels a slow drift of the load; the median of the [`Tuning::pairs`] ratios must
//!   beat 1 by [`Tuning::tolerance`] for the move to be taken (hysteresis: noise alone does not
//!   move the total, and a flat region keeps the total where it is). A candidate window worse
//!   than `1 - 3 x tolerance` of `B0` ends the probe at once, so a bad probe costs one window.
//! * A cycle tries up first (down first when the last move was down); after a rejected probe
//!   it tries the other direction; a taken move keeps climbing in the same direction. A cycle
//!   that moved nothing doubles `settle` (up to [`Tuning::settle_max`]), so a converged
//!   controller probes rarely; any move or load change resets it.
//! * **Not up** when raising cannot help: no query in the last base window was held back by
//!   the budget (every grant was the query's full `want`, none queued), or the server reports
//!   its CPU at least [`Tuning::cpu_saturated`] busy.
//! * **Load changes**: the mean number of queries in flight (through this budget, plus the
//!   server's other queries as `observe` counts them) is tracked on base windows; when it moves
//!   by more than 2x (and by 2 queries), a probe in progress is dropped (its comparison is no
//!   longer like for like) and a new cycle starts at once with `settle` reset.
//! * **Transitions**: after the total changes, completions of grants made under the previous
//!   total are not measured (the window starts once they are back, or after one window length).
//!   Windows with an idle gap (nothing granted or returned for longer than
//!   `max(window, 4 x the recent hold time)`) are dropped: idle time is not slowness.
//! * **Bounds**: `min..=max` ([`Tuning::for_cores`]: 1 to 4 x the server's cores).
//!
//! Written here rather than taken from a crate: the limiters published for Rust (and
//! concurrency-limits itself) adapt a *count of requests* from RTT samples, while this adapts a
//! *count of threads* shared by queries whose latency depends on their own grant, and must be
//! driven deterministically by tests.

use std::time::Duration;

/// The controller's bounds and pace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// The lowest total. Default 1.
    pub min: usize,
    /// The highest total. Default 4 x the server's cores.
    pub max: usize,
    /// The shortest measurement window. Default 200 ms.
    pub window: Duration,
    /// The fewest completed queries in a window. Default 16.
    pub min_completions: u32,
    /// The most completed queries a window may need. Default 400.
    pub max_completions: u32,
    /// The noise (standard deviation of one window's log-power) windows are sized for: a
    /// window needs `unit variance / target^2` completions, between `min_completions` and
    /// `max_completions`. Default 0.06.
    pub target_noise: f64,
    /// Candidate/base pairs a probe measures at least. Default 1.
    pub pairs: usize,
    /// ...and at most, while the verdict is unsure. Default 8.
    pub max_pairs: usize,
    /// The gain in power a move must show (relative). Default 0.05.
    pub tolerance: f64,
    /// Base windows before the first probe cycle, and after a move or a load change. Default 4.
    pub settle_min: usize,
    /// The longest pause between two probe cycles, in windows. Default 64.
    pub settle_max: usize,
    /// Server CPU busy share (0..1) at or over which raising the total is not tried. Default 0.97.
    pub cpu_saturated: f64,
}

impl Tuning {
    /// The defaults for a server with `cores` cores.
    pub fn for_cores(cores: usize) -> Tuning {
        Tuning {
            min: 1,
            max: (4 * cores).max(4),
            window: Duration::from_millis(200),
            min_completions: 16,
            max_completions: 400,
            target_noise: 0.06,
            pairs: 1,
            max_pairs: 8,
            tolerance: 0.05,
            settle_min: 4,
            settle_max: 64,
            cpu_saturated: 0.97,
        }
    }
}

/// What the server says of its load (`system.asynchronous_metrics`, where it has them).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerLoad {
    /// Busy share of the server's CPUs, 0..1.
    pub cpu_busy: Option<f64>,
}

/// A change of the total the controller made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub from: usize,
    pub to: usize,
    /// Why: a probe window, a return to the base after one, or a move the probe proved.
    pub reason: Reason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A probe tries a candidate total for one window.
    Probe,
    /// Back to the base total after a probe window.
    Back,
    /// The candidate won: the new base.
    Move,
}

/// What one window measured.
#[derive(Debug, Clone, Copy)]
struct Measure {
    total: usize,
    completions: u32,
    /// The hold times' spread: variance of the log-power per completion, if they were
    /// independent.
    within: f64,
    power: f64,
    /// Mean queries in flight (ours and, with observe, the server's others).
    load: f64,
    /// Share of grants held back by the budget (clamped below want, or queued).
    held_back: f64,
}

#[derive(Debug, Clone)]
struct Window {
    start: Duration,
    last_event: Duration,
    total: usize,
    completions: u32,
    held_sum: f64,
    held_sq: f64,
    grants: u32,
    held_back: u32,
    load_sum: f64,
    /// Time integral of the grants held (grant-seconds) since `start`, up to `mark`.
    area: f64,
    mark: Duration,
}

impl Window {
    fn new(now: Duration, total: usize) -> Window {
        Window {
            start: now,
            last_event: now,
            total,
            completions: 0,
            held_sum: 0.0,
            held_sq: 0.0,
            grants: 0,
            held_back: 0,
            load_sum: 0.0,
            area: 0.0,
            mark: now,
        }
    }
}

/// Directions still to try in the current probe cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cycle {
    up: bool,
    down: bool,
    /// Try down before up.
    down_first: bool,
}

#[derive(Debug, Clone)]
enum Plan {
    /// Measuring the base; a probe starts after `left` more windows.
    Settle { left: usize, cycle: Cycle },
    /// Comparing `cand` with `base`; `b0` is the base window before the first candidate window.
    Probe { base: usize, cand: usize, up: bool, b0: f64, bases: Vec<f64>, cands: Vec<f64>, cycle: Cycle },
}

/// The adaptive total of one replica.
#[derive(Debug, Clone)]
pub struct Controller {
    t: Tuning,
    total: usize,
    epoch: u64,
    /// Grants of the current epoch not yet returned.
    in_epoch: usize,
    /// Grants of earlier epochs not yet returned.
    old: usize,
    /// While set, the next window waits for the older grants (or this deadline).
    drain_until: Option<Duration>,
    win: Option<Window>,
    plan: Plan,
    settle: usize,
    /// The last window measured at the base total.
    last_base: Option<Measure>,
    reference_load: Option<f64>,
    /// (total, EWMA of the log-power of base windows at that total).
    reference_power: Option<(usize, f64)>,
    /// Moves in a row the same way (doubles the step).
    streak: u32,
    /// Recent hold time (EWMA, seconds), for the idle-gap rule.
    hold_ewma: Option<f64>,
    last_down: bool,
    /// The server's last CPU report at the base total: (when, busy share).
    cpu: Option<(Duration, f64)>,
    /// Variance of the log-power per completed query (a window of `n` completions has a
    /// log-power variance of `that / n`), from the spread of hold times in each window (EWMA).
    within_var: Option<f64>,
    /// The same, from base windows on either side of a probe's candidate window: what the
    /// comparison itself sees, slow drifts included (EWMA).
    between_var: Option<f64>,
    between_samples: u64,
    moves: u64,
    probes: u64,
}

fn fresh_cycle(down_first: bool) -> Cycle {
    Cycle { up: true, down: true, down_first }
}

impl Controller {
    /// Starts at `initial` (clamped to the bounds).
    pub fn new(t: Tuning, initial: usize) -> Controller {
        let t = Tuning { min: t.min.max(1), max: t.max.max(t.min.max(1)), pairs: t.pairs.max(1), ..t };
        Controller {
            total: initial.clamp(t.min, t.max),
            epoch: 0,
            in_epoch: 0,
            old: 0,
            drain_until: None,
            win: None,
            plan: Plan::Settle { left: t.settle_min.max(1), cycle: fresh_cycle(false) },
            settle: t.settle_min.max(1),
            last_base: None,
            reference_load: None,
            reference_power: None,
            streak: 0,
            hold_ewma: None,
            last_down: false,
            cpu: None,
            within_var: None,
            between_var: None,
            between_samples: 0,
            moves: 0,
            probes: 0,
            t,
        }
    }

    /// The total to use now.
    pub fn total(&self) -> usize {
        self.total
    }

    #[cfg(test)]
    pub fn tuning(&self) -> Tuning {
        self.t
    }

    /// Starts over with new bounds at `initial` (the server's cores became known: what was
    /// learned from a guess of them is dropped). Grants out keep their accounting.
    pub fn retune(&mut self, now: Duration, t: Tuning, initial: usize) {
        let (epoch, in_epoch, old) = (self.epoch, self.in_epoch, self.old);
        *self = Controller::new(t, initial);
        (self.epoch, self.in_epoch, self.old) = (epoch, in_epoch, old);
        self.new_epoch(now);
    }

    /// Moves that a probe proved (not the probe windows themselves).
    #[cfg(test)]
    pub fn moves(&self) -> u64 {
        self.moves
    }

    /// Probes started.
    #[cfg(test)]
    pub fn probes(&self) -> u64 {
        self.probes
    }

    /// A query was granted threads. `held_back`: it got fewer than it wanted, or waited in the
    /// queue. `in_flight`: queries in flight or queued on this replica (with `observe`, plus
    /// the server's other queries). Returns the epoch to hand back to [`Self::on_release`].
    pub fn on_grant(&mut self, now: Duration, held_back: bool, in_flight: f64) -> u64 {
        self.accrue(now);
        self.in_epoch += 1;
        self.touch(now);
        if let Some(w) = self.win.as_mut() {
            w.grants += 1;
            w.held_back += held_back as u32;
            w.load_sum += in_flight;
        }
        self.epoch
    }

    /// The server's load, when it publishes it.
    pub fn on_server(&mut self, now: Duration, load: ServerLoad) {
        // Only reports taken at the base total say something of the base (not a probe's).
        let probing = matches!(&self.plan, Plan::Probe { cand, .. } if *cand == self.total);
        if let Some(c) = load.cpu_busy.filter(|c| c.is_finite() && !probing) {
            self.cpu = Some((now, c.clamp(0.0, 1.0)));
        }
    }

    /// A grant of `epoch` came back after `held`. Returns the change of total it caused.
    pub fn on_release(&mut self, now: Duration, epoch: u64, held: Duration) -> Option<Change> {
        self.accrue(now);
        if epoch == self.epoch {
            self.in_epoch = self.in_epoch.saturating_sub(1);
        } else {
            self.old = self.old.saturating_sub(1);
        }
        let h = held.as_secs_f64();
        self.hold_ewma = Some(match self.hold_ewma {
            Some(e) => 0.9 * e + 0.1 * h,
            None => h,
        });
        if let Some(until) = self.drain_until {
            if self.old == 0 || now >= until {
                self.drain_until = None;
                self.win = Some(Window::new(now, self.total));
            }
            return None;
        }
        self.touch(now);
        let Some(w) = self.win.as_mut() else {
            self.win = Some(Window::new(now, self.total));
            return None;
        };
        w.completions += 1;
        w.held_sum += h;
        w.held_sq += h * h;
        w.last_event = now;
        let elapsed = now.saturating_sub(w.start);
        let w = self.win.as_ref().expect("window");
        if elapsed < self.t.window || w.completions < self.t.min_completions.max(1) {
            return None;
        }
        let power = Self::power(w, elapsed);
        if w.completions < self.needed(Some(w)) && !self.clearly_worse_candidate(w, power) {
            return None;
        }
        let w = self.win.take().expect("window");
        let s = (w.held_sum / w.completions as f64).max(1e-9);
        let var = (w.held_sq / w.completions as f64 - s * s).max(0.0);
        let m = Measure {
            total: w.total,
            completions: w.completions,
            power,
            // ln(power) = ln L - 2 ln S: per completion, about 4 x the squared coefficient of
            // variation of the hold times.
            within: 4.0 * var / (s * s),
            load: if w.grants > 0 { w.load_sum / w.grants as f64 } else { 0.0 },
            held_back: if w.grants > 0 { w.held_back as f64 / w.grants as f64 } else { 0.0 },
        };
        self.within_var = Some(self.within_var.map_or(m.within, |v| 0.8 * v + 0.2 * m.within));
        self.win = Some(Window::new(now, self.total));
        self.decide(now, m)
    }

    /// A window's power `X / S`. Throughput by Little's law, `X = L / S`, with `L` the
    /// time-averaged grants held: counting completions would favour a window that starts right
    /// after a change of total, when the queries in flight are all part-done.
    fn power(w: &Window, elapsed: Duration) -> f64 {
        let s = (w.held_sum / w.completions.max(1) as f64).max(1e-9);
        let l = w.area / elapsed.as_secs_f64().max(1e-9);
        l / s / s
    }

    /// A probe's candidate window that is already far worse than the base (by 3 x tolerance
    /// and 3 standard deviations of its noise so far) ends early: a bad probe costs little even
    /// when windows are long.
    fn clearly_worse_candidate(&self, w: &Window, power: f64) -> bool {
        let Plan::Probe { cand, b0, .. } = &self.plan else { return false };
        if w.total != *cand {
            return false;
        }
        let cut = (3.0 * self.t.tolerance).max(3.0 * self.noise(w.completions));
        power < b0 * (-cut).exp()
    }

    /// Adds the grants held since the last event to the window's time integral.
    fn accrue(&mut self, now: Duration) {
        let held = (self.in_epoch + self.old) as f64;
        if let Some(w) = self.win.as_mut() {
            w.area += held * now.saturating_sub(w.mark).as_secs_f64();
            w.mark = now;
        }
    }

    /// Drops the window in progress when nothing happened for too long (idle is not slowness).
    fn touch(&mut self, now: Duration) {
        let gap = self.t.window.max(Duration::from_secs_f64(4.0 * self.hold_ewma.unwrap_or(0.0)));
        if let Some(w) = self.win.as_mut() {
            if now.saturating_sub(w.last_event) > gap {
                *w = Window::new(now, w.total);
            } else {
                w.last_event = now;
            }
        }
    }

    fn new_epoch(&mut self, now: Duration) {
        self.epoch += 1;
        self.old += self.in_epoch;
        self.in_epoch = 0;
        self.win = None;
        self.drain_until = Some(now + self.t.window);
    }

    fn set(&mut self, now: Duration, to: usize, reason: Reason) -> Option<Change> {
        let from = self.total;
        if from == to {
            return None;
        }
        self.total = to;
        self.new_epoch(now);
        Some(Change { from, to, reason })
    }

    /// The step of the next probe: `max(1, total / 8)`, doubled for each move in a row the same
    /// way (a far-off start is crossed in a few moves), at most half the total.
    fn step(&self) -> usize {
        let base = (self.total / 8).max(1);
        (base << self.streak.min(8)).min((self.total / 2).max(1))
    }

    /// Takes in a window measured at the base total. True when the load or the server changed
    /// under it: the queries in flight moved by more than 2x (and 2 queries), or the power by
    /// more than 4 standard deviations of a window (and 20%) from its recent level.
    fn observe_base(&mut self, m: &Measure) -> bool {
        let load_moved = match self.reference_load {
            Some(r) => {
                let (lo, hi) = if m.load < r { (m.load, r) } else { (r, m.load) };
                hi > 2.0 * lo.max(1e-9) && hi - lo >= 2.0
            }
            None => false,
        };
        let lp = m.power.max(1e-12).ln();
        let power_moved = match self.reference_power {
            Some((total, r)) if total == m.total => {
                (lp - r).abs() > (4.0 * self.noise(m.completions)).max((1.2f64).ln())
            }
            _ => false,
        };
        if load_moved || power_moved {
            self.reference_load = Some(m.load);
            self.reference_power = Some((m.total, lp));
            self.last_base = Some(*m);
            return true;
        }
        self.reference_load = Some(self.reference_load.map_or(m.load, |r| 0.8 * r + 0.2 * m.load));
        self.reference_power = Some(match self.reference_power {
            Some((total, r)) if total == m.total => (total, 0.8 * r + 0.2 * lp),
            _ => (m.total, lp),
        });
        self.last_base = Some(*m);
        false
    }

    /// The load or the server changed: whatever was being compared is void; look again now.
    fn restart(&mut self, now: Duration) -> Option<Change> {
        self.settle = self.t.settle_min.max(1);
        self.streak = 0;
        self.start_cycle(now, fresh_cycle(self.last_down))
    }

    fn decide(&mut self, now: Duration, m: Measure) -> Option<Change> {
        match std::mem::replace(&mut self.plan, Plan::Settle { left: 1, cycle: fresh_cycle(false) }) {
            Plan::Settle { left, cycle } => {
                if m.total != self.total {
                    self.plan = Plan::Settle { left, cycle };
                    return None;
                }
                if self.observe_base(&m) {
                    return self.restart(now);
                }
                if left > 1 {
                    self.plan = Plan::Settle { left: left - 1, cycle };
                    return None;
                }
                self.start_cycle(now, cycle)
            }
            Plan::Probe { base, cand, up, b0, mut bases, mut cands, cycle } => {
                if m.total == cand {
                    cands.push(m.power);
                    self.plan = Plan::Probe { base, cand, up, b0, bases, cands, cycle };
                    return self.set(now, base, Reason::Back);
                }
                if m.total != base {
                    self.plan = Plan::Probe { base, cand, up, b0, bases, cands, cycle };
                    return None;
                }
                if self.observe_base(&m) {
                    return self.restart(now);
                }
                self.learn_noise(bases.last().copied().unwrap_or(b0), &m);
                bases.push(m.power);
                match self.verdict(b0, &bases, &cands) {
                    None => {
                        self.plan = Plan::Probe { base, cand, up, b0, bases, cands, cycle };
                        self.set(now, cand, Reason::Probe)
                    }
                    Some(true) => {
                        self.moves += 1;
                        self.streak = if self.last_down != up { self.streak + 1 } else { 1 };
                        self.last_down = !up;
                        self.settle = self.t.settle_min.max(1);
                        // Keep climbing the same way; a fresh base window first.
                        let cycle = Cycle { up, down: !up, down_first: !up };
                        self.plan = Plan::Settle { left: 1, cycle };
                        self.last_base = None;
                        self.reference_power = None;
                        self.set(now, cand, Reason::Move)
                    }
                    Some(false) => {
                        self.streak = 0;
                        self.start_cycle(now, cycle)
                    }
                }
            }
        }
    }

    /// After each candidate/base pair: `Some(true)` when the candidate's gain in power beats
    /// `tolerance` with about 99% confidence per look, `Some(false)` when it surely does not (or
    /// `max_pairs` are spent), `None` to measure another pair. The noise of one window's
    /// log-power is learned from consecutive base windows ([`Self::learn_noise`]); the mean of
    /// `k` log ratios `ln C_i - (ln B_{i-1} + ln B_i) / 2` then has a standard error of about
    /// `noise x sqrt(1.5 / k)`.
    fn verdict(&self, b0: f64, bases: &[f64], cands: &[f64]) -> Option<bool> {
        let k = cands.len();
        if k < self.t.pairs.max(1) {
            return None;
        }
        let mean = cands
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let before = if i == 0 { b0 } else { bases[i - 1] };
                (c.max(1e-12) / (before * bases[i]).sqrt().max(1e-12)).ln()
            })
            .sum::<f64>()
            / k as f64;
        // One-sided 99% per look keeps the whole probe, which looks after every pair up to
        // `max_pairs` times, near 95%.
        let t = 2.33;
        // The windows of this probe are about as long as the last base window.
        let n = self.last_base.map_or(self.t.min_completions, |b| b.completions);
        let margin = t * self.noise(n) * (1.5 / k as f64).sqrt();
        let goal = (1.0 + self.t.tolerance).ln();
        // Never on one pair alone: one lucky window must not move the total.
        if mean - margin > goal && k >= 2 {
            Some(true)
        } else if mean + margin < goal || k >= self.t.max_pairs.max(self.t.pairs) {
            Some(false)
        } else {
            None
        }
    }

    /// The standard deviation of the log-power of a window of `n` completions (learned; until
    /// then 0.1 for a window of `min_completions`).
    fn noise(&self, n: u32) -> f64 {
        (self.unit_var() / n.max(1) as f64).sqrt()
    }

    /// Per-completion variance of the log-power: the larger of the two estimates (1.0 until
    /// a window was measured).
    fn unit_var(&self) -> f64 {
        match (self.within_var, self.between_var) {
            (None, None) => 1.0,
            (w, b) => w.unwrap_or(0.0).max(b.unwrap_or(0.0)),
        }
    }

    /// Completions a window needs for the target noise. Before any window was measured, the
    /// window in progress tells the spread of its hold times.
    fn needed(&self, w: Option<&Window>) -> u32 {
        let unit = match (self.within_var, w) {
            (None, Some(w)) if w.completions >= 2 => {
                let mean = w.held_sum / w.completions as f64;
                let var = (w.held_sq / w.completions as f64 - mean * mean).max(0.0);
                (4.0 * var / (mean * mean).max(1e-18)).max(self.between_var.unwrap_or(0.0))
            }
            _ => self.unit_var(),
        };
        let n = (unit / self.t.target_noise.max(1e-3).powi(2)).ceil();
        (n.min(u32::MAX as f64) as u32)
            .clamp(self.t.min_completions.max(1), self.t.max_completions.max(self.t.min_completions))
    }

    /// Learns the noise from two base windows of a probe, a candidate window apart.
    fn learn_noise(&mut self, prev_power: f64, m: &Measure) {
        if prev_power <= 0.0 || m.power <= 0.0 {
            return;
        }
        // Var(ln a - ln b) = 2 x the variance of one window; per completion, times n.
        let d = (m.power / prev_power).ln();
        let v = d * d / 2.0 * m.completions as f64;
        // A running mean over the first ten, then an EWMA: one unlucky pair (a chi-square of
        // one degree of freedom) must not size the windows.
        self.between_samples += 1;
        let weight = (1.0 / self.between_samples as f64).max(0.1);
        self.between_var = Some(self.between_var.map_or(v, |old| (1.0 - weight) * old + weight * v));
    }

    /// Starts the next probe of `cycle` from the base just measured, or settles when the
    /// cycle has nothing left to try.
    fn start_cycle(&mut self, now: Duration, mut cycle: Cycle) -> Option<Change> {
        let Some(base) = self.last_base else {
            self.plan = Plan::Settle { left: 1, cycle };
            return None;
        };
        // A report older than 3 s (or 10 windows) says nothing of now.
        let fresh = Duration::from_secs(3).max(10 * self.t.window);
        let saturated = self.cpu.is_some_and(|(at, c)| now.saturating_sub(at) <= fresh && c >= self.t.cpu_saturated);
        let can_up = self.total < self.t.max && base.held_back > 0.0 && !saturated;
        let can_down = self.total > self.t.min;
        let order = if cycle.down_first { [false, true] } else { [true, false] };
        for up in order {
            let wanted = if up { cycle.up } else { cycle.down };
            if !wanted {
                continue;
            }
            if up {
                cycle.up = false;
            } else {
                cycle.down = false;
            }
            if (up && !can_up) || (!up && !can_down) {
                continue;
            }
            let step = self.step();
            let cand =
                if up { (self.total + step).min(self.t.max) } else { self.total.saturating_sub(step).max(self.t.min) };
            self.probes += 1;
            self.plan =
                Plan::Probe { base: self.total, cand, up, b0: base.power, bases: Vec::new(), cands: Vec::new(), cycle };
            return self.set(now, cand, Reason::Probe);
        }
        // Nothing moved in this cycle: wait longer before the next one.
        let left = self.settle;
        self.settle = (self.settle * 2).min(self.t.settle_max.max(1));
        self.plan = Plan::Settle { left, cycle: fresh_cycle(self.last_down) };
        None
    }
}

#[cfg(test)]
mod tests;
