//! The watch over silent attempts: when to look at them again, the liveness ping of their
//! replicas, and its bounds. The attempt loop ([`super::machine`]) owns one [`Watch`] per
//! request and decides what a look or a ping's answer means.

use crate::upstream::{BoxFuture, Probe};
use std::pin::Pin;
use std::time::Duration;

/// The shortest wait for a silent replica's `/ping` (250 ms): a working 18.16 answers one in
/// well under a millisecond, but on a loaded machine (2 cores, load average 16) it took over
/// 50 ms, and a ping taken for silence starts the read a second time.
pub(super) const MIN_PROBE: Duration = Duration::from_millis(250);

/// How long a read whose replica refused a ping waits for its own connection to break before
/// it is hedged (100 ms): a crashed server's connections break at once, a server in graceful
/// shutdown keeps them open.
pub(super) const DEAD_GRACE: Duration = Duration::from_millis(100);

/// The longest wait before a replica that answered its last ping is pinged again (1 s).
pub(super) const MAX_RECHECK: Duration = Duration::from_secs(1);

/// One request's watch: the timer of its next look, the ping in flight, and what earlier
/// pings found.
pub(super) struct Watch {
    /// When to look at the running attempts again (None: no look due, no hedge possible).
    pub(super) timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The liveness ping of the silent attempts' replicas, while it runs.
    pub(super) probe: Option<BoxFuture<Probe>>,
    /// When to ping a replica that answered its last ping again: one deadline, doubling up to
    /// [`MAX_RECHECK`], so a long read on a fast route does not ping every few milliseconds.
    pub(super) recheck: Duration,
    /// A ping was refused once already (the replica's listener is closed).
    pub(super) refused_before: bool,
}

impl Watch {
    /// A watch whose first look is `first` from now; rechecks start at `window`.
    pub(super) fn new(first: Option<Duration>, window: Duration) -> Watch {
        Watch { timer: first.map(sleep), probe: None, recheck: window, refused_before: false }
    }

    /// Looks again `d` from now.
    pub(super) fn look_in(&mut self, d: Duration) {
        self.timer = Some(sleep(d));
    }

    /// A ping was answered: the next one waits longer (doubling, at least `window`, at most
    /// [`MAX_RECHECK`]); returns how long to wait before it.
    pub(super) fn next_recheck(&mut self, window: Duration) -> Duration {
        let now = self.recheck;
        self.recheck = (self.recheck * 2).min(MAX_RECHECK).max(window);
        now
    }
}

fn sleep(d: Duration) -> Pin<Box<tokio::time::Sleep>> {
    Box::pin(tokio::time::sleep(d))
}

/// Alive if any replica answered; Dead if every one is gone; else Silent.
pub(super) async fn any_alive(probes: Vec<BoxFuture<Probe>>) -> Probe {
    let mut found = Vec::with_capacity(probes.len());
    for p in probes {
        found.push(p.await);
    }
    if found.contains(&Probe::Alive) {
        Probe::Alive
    } else if !found.is_empty() && found.iter().all(|p| *p == Probe::Dead) {
        Probe::Dead
    } else {
        Probe::Silent
    }
}
