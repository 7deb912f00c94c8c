//! One backend replica's runtime state, in one type: its address, the requests in flight on it
//! through this gateway (and how many of them are past their per-try deadline), its health (a
//! small state machine), its replication delay ([`crate::cluster::replication::State`]), an
//! error penalty that decays, and a *down signal* that every attempt waiting on the replica
//! listens to.
//!
//! Owns no I/O: probes ([`crate::cluster::health`]) and requests ([`crate::attempt`]) report what they
//! saw; selection ([`crate::cluster::balancer`]) reads the published snapshot.

use crate::cluster::replication::{self, Freshness};
use crate::config::ReplicaAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Time for an error penalty to halve: 5 s.
pub const PENALTY_HALF_LIFE: Duration = Duration::from_secs(5);
/// A replica is slow when more than 1 / `SLOW_SHARE` of its attempts in flight are overdue: 4.
/// In normal running few answers take longer than the per-try deadline (by default twice the
/// route's P95), so a quarter overdue is well outside it.
const SLOW_SHARE: usize = 4;
/// What one unit of error penalty weighs against one outstanding request in the P2C score.
const PENALTY_WEIGHT: f64 = 4.0;

/// A replica's health, as a state machine over probe results and request failures:
///
/// ```text
///   Up { failed probes in a row } --fall failed probes, or one failed request--> Down
///   Down { good probes in a row } --rise good probes--------------------------> Up
/// ```
///
/// Pure: [`HealthMachine::probe`] and [`HealthMachine::request_failed`] return the new state when
/// it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthMachine {
    Up { failed_probes: u32 },
    Down { good_probes: u32 },
}

impl Default for HealthMachine {
    /// Up: every replica starts healthy; the first probes or the first failed request correct it.
    fn default() -> Self {
        HealthMachine::Up { failed_probes: 0 }
    }
}

impl HealthMachine {
    pub fn is_up(&self) -> bool {
        matches!(self, HealthMachine::Up { .. })
    }

    /// A probe result. `fall` failed probes in a row mark an up replica down; `rise` good ones
    /// mark a down replica up. Returns `Some(up)` when the state changed.
    pub fn probe(&mut self, ok: bool, rise: u32, fall: u32) -> Option<bool> {
        let (next, changed) = match (*self, ok) {
            (HealthMachine::Up { .. }, true) => (HealthMachine::Up { failed_probes: 0 }, None),
            (HealthMachine::Up { failed_probes }, false) if failed_probes + 1 >= fall => {
                (HealthMachine::Down { good_probes: 0 }, Some(false))
            }
            (HealthMachine::Up { failed_probes }, false) => {
                (HealthMachine::Up { failed_probes: failed_probes + 1 }, None)
            }
            (HealthMachine::Down { good_probes }, true) if good_probes + 1 >= rise => {
                (HealthMachine::Up { failed_probes: 0 }, Some(true))
            }
            (HealthMachine::Down { good_probes }, true) => (HealthMachine::Down { good_probes: good_probes + 1 }, None),
            (HealthMachine::Down { .. }, false) => (HealthMachine::Down { good_probes: 0 }, None),
        };
        *self = next;
        changed
    }

    /// A request failed in a way that says the replica is in trouble (refused, reset, overloaded):
    /// down at once. Returns `Some(false)` when it was up.
    pub fn request_failed(&mut self) -> Option<bool> {
        let was_up = self.is_up();
        *self = HealthMachine::Down { good_probes: 0 };
        was_up.then_some(false)
    }
}

/// One backend replica and its live state.
#[derive(Debug)]
pub struct Replica {
    pub(crate) addr: ReplicaAddr,
    /// 0-based shard index.
    pub(crate) shard: usize,
    /// 0-based index within the shard.
    pub(crate) index: usize,
    /// `shard.replica`, 1-based, for logs and metrics.
    pub(crate) label: String,
    /// `label` as a header value (`X-Chstorm-Replica`), made once.
    label_value: http::HeaderValue,
    outstanding: AtomicUsize,
    /// Of those, attempts past their per-try deadline without an answer head ([`Overdue`]).
    overdue: AtomicUsize,
    /// When it was created (tokio's clock, so paused-time tests see their own time).
    created: tokio::time::Instant,
    /// Its last answer head, in µs since `created`; 0 = none yet.
    last_answer_us: AtomicU64,
    health: Mutex<HealthMachine>,
    /// Mirror of `health.is_up()`, for lock-free reads.
    healthy: AtomicBool,
    /// Cancelled when the replica is marked down; replaced by a fresh token then.
    down: Mutex<CancellationToken>,
    /// Error penalty and when it was last updated.
    penalty: Mutex<(f64, Instant)>,
    /// Its replication delay, as the health loop last read it.
    pub(crate) replication: replication::State,
    /// Its ClickHouse version, as detected (`crate::cluster::version`, which reads and writes
    /// it).
    pub(crate) detected: Detected,
}

/// A replica's detected ClickHouse version (read with `Replica::version`).
#[derive(Debug, Default)]
pub struct Detected(pub(crate) arc_swap::ArcSwapOption<chstorm_proto::versions::ServerVersion>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Replica {
    pub fn new(addr: ReplicaAddr, shard: usize, index: usize) -> Replica {
        let label = format!("{}.{}", shard + 1, index + 1);
        Replica {
            label_value: http::HeaderValue::from_str(&label).expect("digits and a dot"),
            addr,
            shard,
            index,
            label,
            outstanding: AtomicUsize::new(0),
            overdue: AtomicUsize::new(0),
            created: tokio::time::Instant::now(),
            last_answer_us: AtomicU64::new(0),
            health: Mutex::new(HealthMachine::default()),
            healthy: AtomicBool::new(true),
            down: Mutex::new(CancellationToken::new()),
            penalty: Mutex::new((0.0, Instant::now())),
            replication: replication::State::default(),
            detected: Default::default(),
        }
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// `shard.replica`, 1-based.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// [`Self::label`] as a header value.
    pub fn label_value(&self) -> http::HeaderValue {
        self.label_value.clone()
    }

    /// Requests in flight on it through this gateway.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// Attempts in flight on it past their per-try deadline without an answer head.
    pub fn overdue(&self) -> usize {
        self.overdue.load(Ordering::Relaxed)
    }

    /// Slow right now: more than a quarter of its attempts in flight are past their per-try
    /// deadline ([`SLOW_SHARE`]). A hedge sent to a slow replica would only add load where
    /// answers are already late: when every replica of a shard is slow the slowness is the
    /// machine's or the query's, not one replica's, and hedging cannot help.
    pub fn is_slow_now(&self) -> bool {
        let overdue = self.overdue();
        overdue > 0 && overdue * SLOW_SHARE > self.outstanding()
    }

    /// An answer head came from it (any status: an error answer also shows the server is alive).
    pub fn answered(&self) {
        self.answered_at(tokio::time::Instant::now());
    }

    /// [`Replica::answered`], at `now` (read once for several records of the same moment).
    pub fn answered_at(&self, now: tokio::time::Instant) {
        let us = now.saturating_duration_since(self.created).as_micros() as u64;
        self.last_answer_us.fetch_max(us, Ordering::Relaxed);
    }

    /// Stalled: it has attempts past their per-try deadline and has sent no answer head at all
    /// for `window` (the per-try deadline). A hung server (SIGSTOP, a frozen VM, a stalled disk)
    /// is stalled; a server that is only slow, even very slow, keeps answering something.
    pub fn is_stalled(&self, window: Duration) -> bool {
        if self.overdue() == 0 {
            return false;
        }
        let now = tokio::time::Instant::now().saturating_duration_since(self.created);
        now.saturating_sub(Duration::from_micros(self.last_answer_us.load(Ordering::Relaxed))) >= window
    }

    /// A token cancelled when this replica is next marked down: an attempt waiting on the
    /// replica takes it before sending and gives up (and is re-issued elsewhere) when it fires.
    pub fn down_signal(&self) -> CancellationToken {
        lock(&self.down).clone()
    }

    /// Applies a transition; on a change to down, fires the down signal. Returns the change.
    fn apply(&self, f: impl FnOnce(&mut HealthMachine) -> Option<bool>) -> Option<bool> {
        let changed = {
            let mut h = lock(&self.health);
            let c = f(&mut h);
            self.healthy.store(h.is_up(), Ordering::Release);
            c
        };
        if changed == Some(false) {
            let old = std::mem::replace(&mut *lock(&self.down), CancellationToken::new());
            old.cancel();
        }
        changed
    }

    /// A probe result; `Some(up)` when the health changed.
    pub fn probe_result(&self, ok: bool, rise: u32, fall: u32) -> Option<bool> {
        self.apply(|h| h.probe(ok, rise, fall))
    }

    /// A request failed on it (refused, reset, overloaded): penalised and marked down now.
    /// `Some(false)` when it was up.
    pub fn request_failed(&self) -> Option<bool> {
        self.add_penalty(Instant::now());
        self.apply(HealthMachine::request_failed)
    }

    /// It was slower than another replica that answered the same query (a hedge won): penalised,
    /// not marked down, so selection steers away from it until the penalty decays.
    pub fn lost_race(&self) {
        self.add_penalty(Instant::now());
    }

    /// Marks it up or down by hand (tests). Returns the change.
    #[cfg(test)]
    pub fn force_health(&self, up: bool) -> Option<bool> {
        self.apply(|h| {
            let was = h.is_up();
            *h = if up { HealthMachine::Up { failed_probes: 0 } } else { HealthMachine::Down { good_probes: 0 } };
            (was != up).then_some(up)
        })
    }

    fn penalty_now(&self, now: Instant) -> f64 {
        let (p, at) = *lock(&self.penalty);
        p * 0.5f64.powf(now.saturating_duration_since(at).as_secs_f64() / PENALTY_HALF_LIFE.as_secs_f64())
    }

    fn add_penalty(&self, now: Instant) {
        let mut g = lock(&self.penalty);
        let decayed =
            g.0 * 0.5f64.powf(now.saturating_duration_since(g.1).as_secs_f64() / PENALTY_HALF_LIFE.as_secs_f64());
        *g = (decayed + 1.0, now);
    }

    /// The P2C score: outstanding requests plus the weighted penalty rounded to whole requests.
    /// Lower is better.
    ///
    /// Rounded, because the penalty decays but never reaches zero: compared as a fraction, a
    /// replica that lost one hedge race minutes ago would lose every comparison with an equally
    /// loaded one, so at low concurrency (both idle at each pick) a shard's whole load would stay
    /// on the other replica until that one lost a race in turn, and the first replica's caches
    /// go cold. Rounded, a lost race steers load away while its weight is at least half a
    /// request (about 15 s for one race: 4, halved every 5 s); after that equal loads tie and the
    /// pick is random again.
    pub fn score(&self, now: Instant) -> f64 {
        self.outstanding() as f64 + (PENALTY_WEIGHT * self.penalty_now(now)).round()
    }

    #[cfg(test)]
    pub(crate) fn set_penalty(&self, p: f64, at: Instant) {
        *lock(&self.penalty) = (p, at);
    }
}

/// Holds a replica's outstanding count up while an attempt runs (RAII), and how the pick
/// judged its freshness.
#[derive(Debug)]
pub struct InFlight(Arc<Replica>, Freshness);

impl InFlight {
    pub fn new(r: Arc<Replica>) -> InFlight {
        InFlight::judged(r, Freshness::Fresh)
    }

    /// An attempt on `r`, picked with `freshness` (a stale one only when no fresher was there).
    pub fn judged(r: Arc<Replica>, freshness: Freshness) -> InFlight {
        r.outstanding.fetch_add(1, Ordering::Relaxed);
        InFlight(r, freshness)
    }

    pub fn replica(&self) -> &Arc<Replica> {
        &self.0
    }

    /// How the pick judged the replica's freshness.
    pub fn freshness(&self) -> Freshness {
        self.1
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts an attempt as overdue on its replica while it runs past its per-try deadline (RAII).
#[derive(Debug)]
pub struct Overdue(Arc<Replica>);

impl Overdue {
    pub fn new(r: Arc<Replica>) -> Overdue {
        r.overdue.fetch_add(1, Ordering::Relaxed);
        Overdue(r)
    }
}

impl Drop for Overdue {
    fn drop(&mut self) {
        self.0.overdue.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_health_machine() {
        let mut h = HealthMachine::default();
        assert_eq!(h.probe(false, 2, 2), None, "one failed probe is not enough with fall 2");
        assert_eq!(h.probe(true, 2, 2), None);
        assert_eq!(h.probe(false, 2, 2), None, "the streak restarted");
        assert_eq!(h.probe(false, 2, 2), Some(false));
        assert_eq!(h.probe(true, 2, 2), None);
        assert_eq!(h.probe(false, 2, 2), None, "a failure resets the rise streak");
        assert_eq!(h.probe(true, 2, 2), None);
        assert_eq!(h.probe(true, 2, 2), Some(true));
        assert_eq!(h.request_failed(), Some(false), "a failed request: down at once");
        assert_eq!(h.request_failed(), None, "already down");
        let mut h = HealthMachine::default();
        assert_eq!(h.probe(false, 1, 1), Some(false));
        assert_eq!(h.probe(true, 1, 1), Some(true));
    }

    #[tokio::test]
    async fn going_down_fires_the_signal_once_and_rearms() {
        let r = Replica::new(ReplicaAddr { base: "http://h:1".into(), https: false }, 0, 0);
        let first = r.down_signal();
        assert!(!first.is_cancelled());
        assert_eq!(r.probe_result(false, 2, 2), None);
        assert!(!first.is_cancelled(), "not down yet");
        assert_eq!(r.request_failed(), Some(false));
        assert!(first.is_cancelled() && !r.is_healthy());
        let second = r.down_signal();
        assert!(!second.is_cancelled(), "a fresh signal for the next time");
        assert_eq!(r.request_failed(), None);
        assert!(!second.is_cancelled(), "no change, no signal");
        assert_eq!(r.force_health(true), Some(true));
        assert!(r.is_healthy());
        assert_eq!(r.force_health(false), Some(false));
        assert!(second.is_cancelled());
    }

    #[test]
    fn in_flight_counts_and_penalties_decay() {
        let r = Arc::new(Replica::new(ReplicaAddr { base: "http://h:1".into(), https: false }, 1, 0));
        assert_eq!(r.label(), "2.1");
        let a = InFlight::new(r.clone());
        let b = InFlight::new(r.clone());
        assert_eq!(r.outstanding(), 2);
        drop((a, b));
        assert_eq!(r.outstanding(), 0);
        r.lost_race();
        assert!(r.score(Instant::now()) > 3.9);
        r.set_penalty(0.0, Instant::now());
        r.set_penalty(2.0, Instant::now() - PENALTY_HALF_LIFE * 20);
        assert!(r.penalty_now(Instant::now()) < 1e-5);
    }

    #[test]
    fn slow_now_means_more_than_a_quarter_of_its_attempts_overdue() {
        let r = Arc::new(Replica::new(ReplicaAddr { base: "http://h:1".into(), https: false }, 0, 0));
        assert!(!r.is_slow_now(), "idle");
        let inflight: Vec<_> = (0..4).map(|_| InFlight::new(r.clone())).collect();
        assert!(!r.is_slow_now(), "4 in flight, none overdue");
        let one = Overdue::new(r.clone());
        assert!(!r.is_slow_now(), "1 of 4 overdue: not more than a quarter");
        let two = Overdue::new(r.clone());
        assert!(r.is_slow_now(), "2 of 4 overdue");
        drop(two);
        assert!(!r.is_slow_now());
        drop(inflight);
        assert!(r.is_slow_now(), "its only attempt is overdue");
        drop(one);
        assert_eq!((r.overdue(), r.is_slow_now()), (0, false));
    }

    #[tokio::test(start_paused = true)]
    async fn stalled_means_overdue_attempts_and_no_answer_for_a_window() {
        let r = Arc::new(Replica::new(ReplicaAddr { base: "http://h:1".into(), https: false }, 0, 0));
        let w = Duration::from_millis(100);
        tokio::time::sleep(w * 2).await;
        assert!(!r.is_stalled(w), "nothing overdue: idle, not stalled");
        let _a = (InFlight::new(r.clone()), Overdue::new(r.clone()));
        assert!(r.is_stalled(w), "overdue, and no answer ever");
        r.answered();
        assert!(!r.is_stalled(w), "it just answered");
        tokio::time::sleep(w - Duration::from_millis(1)).await;
        assert!(!r.is_stalled(w));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(r.is_stalled(w), "a whole window without an answer");
    }
}
