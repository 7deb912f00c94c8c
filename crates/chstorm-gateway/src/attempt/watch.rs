//! The watch over silent attempts: when to look at them, the liveness ping of their replicas
//! sent ahead of each look, and its bounds. The attempt loop ([`super::machine`]) owns one
//! [`Watch`] per request and decides what a look or a ping's answer means.
//!
//! A look is due at the per-try deadline (one deadline after the attempt's last sign of work),
//! and again later while a read is left alone. Over HTTP an attempt shows nothing before its
//! answer, so a look needs a `GET /ping` on a fresh connection to tell a working replica from a
//! hung one. That ping starts *ahead* of the look, half a deadline before it ([`Watch::lead`]),
//! and only for a silent attempt (no byte nor progress for that half deadline); a sign of work
//! from the attempt after the ping started drops it. So at the deadline:
//! * the ping answered: the replica works (the read is left alone), or its listener is closed
//!   (looked at again [`DEAD_GRACE`] later, as before);
//! * the ping is still out: another healthy replica that could take a hedge (of the same
//!   shard; any for a fan-out) is pinged too. The read is hedged as soon as that replica answers
//!   while its own replica's ping is still out and its replica is *stalled* (no answer head to
//!   any request through this gateway for a whole deadline, `Replica::is_stalled`): hung, where
//!   the other is not; about the deadline plus one ping round trip to a working server. Only a
//!   read whose shape ran fine lately (`Quarantine::known_good`) is hedged so early: a new shape
//!   may be a query of death, and a crashing 18.16 keeps its connections open while it writes
//!   its stack trace (under load, past half a deadline: the real-cluster test of 1,000 nested
//!   parentheses killed both replicas once without this rule), so it waits for its ping's bound
//!   and the broken connection that shows the crash. With `limits.query_of_death_ttl: 0s` no
//!   shape is known good, and no read is hedged before its ping's bound;
//! * otherwise (the other replica is slow to answer its ping too, or its own replica answers
//!   other requests): the machine or the replica is loaded, not hung. The ping keeps its own
//!   bound, the deadline but at least [`MIN_PROBE`] (250 ms) from its start, and the replica is
//!   looked at again every half deadline meanwhile; the read is hedged if the ping goes
//!   unanswered for that bound.
//!
//! Why the ping's bound is not the half deadline: a working 18.16 answers a ping in well under
//! a millisecond, but on a loaded machine a ping took over 50 ms, against per-try deadlines of
//! 20 to 100 ms; a ping taken for silence starts the read a second time. So a late ping alone is
//! no proof: it is compared with the ping of a replica on the same footing (the same gateway,
//! the same network, the same moment), and with the replica's other answers. A gateway under
//! such load that every ping is late waits for the bound as it would without the early ping;
//! a cold cluster whose first reads are all slow (nothing answered yet: every replica stalled)
//! is not hedged unless another replica answers its ping where the read's own does not.

use crate::cluster::upstream::{BoxFuture, Probe};
use std::time::Duration;
use tokio::time::Instant;

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

/// The liveness ping of the silent attempts' replicas.
pub(super) enum Ping {
    /// None running.
    Idle,
    /// Sent `since`, no answer yet.
    Running { fut: BoxFuture<Probe>, since: tokio::time::Instant },
    /// Answered before the look it was sent ahead of.
    Found(Probe),
}

/// One request's watch: when to look at its attempts next, the ping sent ahead of that look,
/// and what earlier pings found.
pub(super) struct Watch {
    /// When the next look is due (None: no look due, no hedge possible).
    pub(super) timer: Option<Instant>,
    /// When the ping ahead of the next look starts: [`Watch::lead`] before it.
    pub(super) ping_at: Option<Instant>,
    pub(super) ping: Ping,
    /// A look found the ping still running: its answer is acted on when it comes.
    pub(super) awaiting: bool,
    /// The ping of another healthy replica, sent when a look finds the ping still out.
    pub(super) peer: Option<BoxFuture<Probe>>,
    /// That replica answered its ping.
    pub(super) peer_alive: bool,
    /// How far ahead of a look its ping starts: half the per-try deadline.
    pub(super) lead: Duration,
    /// When to ping a replica that answered its last ping again: one deadline, doubling up to
    /// [`MAX_RECHECK`], so a long read on a fast route does not ping every few milliseconds.
    recheck: Duration,
    /// A ping was refused once already (the replica's listener is closed).
    pub(super) refused_before: bool,
}

impl Watch {
    /// A watch with no look due; rechecks start at `window` (the per-try deadline).
    pub(super) fn new(window: Duration) -> Watch {
        Watch {
            timer: None,
            ping_at: None,
            ping: Ping::Idle,
            awaiting: false,
            peer: None,
            peer_alive: false,
            lead: window / 2,
            recheck: window,
            refused_before: false,
        }
    }

    /// Looks again `d` from now, with a fresh ping [`Watch::lead`] ahead of that look (at
    /// once when `d` is shorter); a ping running now is dropped.
    pub(super) fn look_in(&mut self, d: Duration) {
        self.timer = Some(after(d));
        self.ping_at = Some(after(d.saturating_sub(self.lead)));
        self.ping = Ping::Idle;
        self.awaiting = false;
        self.peer = None;
        self.peer_alive = false;
    }

    /// Looks again `d` from now, keeping the ping that runs.
    pub(super) fn look_again_in(&mut self, d: Duration) {
        self.timer = Some(after(d));
    }

    /// The earliest instant the watch waits for, if any (the request's one timer is set for it).
    pub(super) fn next(&self) -> Option<Instant> {
        match (self.timer, self.ping_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// No look due and no ping.
    pub(super) fn stop(&mut self) {
        self.timer = None;
        self.ping_at = None;
        self.ping = Ping::Idle;
        self.awaiting = false;
        self.peer = None;
        self.peer_alive = false;
    }

    /// Sends `fut`, the ping, now.
    pub(super) fn ping_now(&mut self, fut: BoxFuture<Probe>) {
        self.ping = Ping::Running { fut, since: tokio::time::Instant::now() };
    }

    /// A ping was answered: the next one waits longer (doubling, at least `window`, at most
    /// [`MAX_RECHECK`]); returns how long to wait before it.
    pub(super) fn next_recheck(&mut self, window: Duration) -> Duration {
        let now = self.recheck;
        self.recheck = (self.recheck * 2).min(MAX_RECHECK).max(window);
        now
    }
}

/// `d` from now, on tokio's clock (paused in tests); as `tokio::time::sleep` takes a wait too
/// long to add, about 30 years.
pub(super) fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d).unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
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
