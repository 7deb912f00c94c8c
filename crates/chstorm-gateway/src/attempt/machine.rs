//! The attempt loop as a small state machine: [`Machine`] holds one request's running attempts,
//! the replicas tried, its counters and its [`Watch`]; it waits for the next [`Event`] and hands
//! it to a named handler (`on_deadline`, `on_ping_due`, `on_look`, `on_probed`,
//! `on_replica_down`, `on_ended`, with `on_answer`, `on_error_answer` and `on_failure`), which
//! either goes on or ends the request with an [`Outcome`]. The decisions themselves come from
//! [`Policy`]; when a silent attempt is pinged and what its ping means: [`super::watch`].

use super::exits::{no_replica, query_of_death, stale_refused, timed_out, DEATH_PROBE};
use super::policy::{Decision, Failure, Policy};
use super::running::{excluded, start, want, AttemptEnd, Running};
use super::watch::{any_alive, Ping, Watch, DEAD_GRACE, MIN_PROBE};
use super::{Answered, Ctx, Judged, Outcome, Transport, Won};
use crate::cluster::balancer::Want;
use crate::cluster::replica::{Overdue, Replica};
use crate::cluster::replication::Tier;
use crate::cluster::upstream::{BackendError, Probe};
use crate::metrics::ReasonLabel;
use crate::out_of_line::boxed;
use crate::query::plan::Plan;
use chstorm_proto::rules::retry_safe_code;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use tokio::time::Instant;
use tower::retry::budget::Budget;

/// What a handler says: go on, or end the request with this outcome.
type Step<H, C = ()> = ControlFlow<Outcome<H>, C>;

/// What woke the loop.
enum Event<H> {
    /// The head deadline (`plan.head_timeout`) passed.
    Deadline,
    /// Time to ping the replicas of silent attempts, ahead of the next look.
    PingDue,
    /// The watch's timer: time to look at the running attempts.
    Look,
    /// The liveness probe of silent attempts' replicas answered.
    Probed(Probe),
    /// The ping of another replica, sent when a look found the first ping still out, answered.
    PeerProbed(Probe),
    /// Attempt `i` ended: an answer head or a failure.
    Ended(usize, AttemptEnd<H>),
    /// Attempt `i`'s replica was marked down.
    Down(usize),
}

/// What is counted once per request, however often it happens.
#[derive(Default)]
struct Counted {
    per_try_timeout: bool,
    budget_exhausted: bool,
    held: bool,
    spared: bool,
}

/// One request's attempts.
pub(super) struct Machine<'a, 'c, T: Transport> {
    plan: &'a Plan,
    transport: &'a mut T,
    ctx: &'a Ctx<'c>,
    policy: Policy,
    /// A held statement's shape (a read's, or a write's out of a session), for the quarantine
    /// of queries of death.
    shape: Option<u64>,
    /// A replica already died while running this request (a read of a known shape, resent
    /// once): a second death makes it a query of death.
    killed_one: bool,
    /// An attempt's query may have reached a server: its connection was made.
    sent_any: bool,
    running: Vec<Running<T::Head>>,
    /// Replicas not to pick again: one that refused a connection, went down or was busy; one
    /// whose (perhaps pooled, stale) connection broke a second time.
    tried: Vec<(usize, usize)>,
    lost_once: Vec<(usize, usize)>,
    attempts: usize,
    retries: u32,
    hedged: bool,
    counted: Counted,
    watch: Watch,
    /// When the head deadline (`plan.head_timeout`) passes.
    deadline: Instant,
    /// One timer for the request, set for the earliest of the head deadline and the watch's
    /// instants ([`Watch::next`]): one timer to register and deregister per request, not three.
    alarm: Pin<Box<tokio::time::Sleep>>,
}

impl<'a, 'c, T: Transport> Machine<'a, 'c, T> {
    pub(super) fn new(plan: &'a Plan, transport: &'a mut T, ctx: &'a Ctx<'c>, policy: Policy) -> Self {
        let shape = if plan.latitude.resend_unsent { transport.shape() } else { None };
        let window = policy.hedge_after.unwrap_or_default();
        let deadline = super::watch::after(plan.head_timeout);
        Machine {
            plan,
            transport,
            ctx,
            policy,
            shape,
            killed_one: false,
            sent_any: false,
            running: Vec::with_capacity(2),
            tried: Vec::new(),
            lost_once: Vec::new(),
            attempts: 0,
            retries: 0,
            hedged: false,
            counted: Counted::default(),
            watch: Watch::new(window),
            deadline,
            alarm: Box::pin(tokio::time::sleep_until(deadline)),
        }
    }

    /// A read's shape refused by the quarantine, if it is.
    pub(super) fn refused_shape(&self) -> Option<super::quarantine::Refusal> {
        self.shape.and_then(|fp| self.ctx.quarantine.refused(fp))
    }

    /// Sends the first attempt, then handles events until the request ends.
    pub(super) async fn run(&mut self) -> Outcome<T::Head> {
        let Some(first) = start(self.plan, self.transport, self.ctx, &[], None).await else {
            if let Want::Read { view, fallback: false } = want(self.plan, self.ctx.balancer.rule().fallback) {
                if let Some(why) = self.ctx.balancer.stale_refusal(self.plan.target.shard(), view) {
                    return stale_refused(self.plan, self.ctx, why);
                }
            }
            return no_replica(self.plan, None, 0, 0);
        };
        self.attempts += 1;
        self.running.push(first);
        if let Some(d) = self.policy.hedge_after.filter(|_| self.policy.can_hedge(1, 1)) {
            self.watch.look_in(d);
        }
        loop {
            let step = match self.next_event().await {
                Event::Deadline => ControlFlow::Break(self.on_deadline()),
                Event::PingDue => self.on_ping_due(),
                // The rare events run out of line: the loop's poll keeps a small frame.
                Event::Look => boxed(|| self.on_look()).await,
                Event::Probed(found) if self.watch.awaiting => boxed(|| self.on_probed(found)).await,
                Event::Probed(found) => {
                    // Answered ahead of its look: the look reads it.
                    self.watch.ping = Ping::Found(found);
                    ControlFlow::Continue(())
                }
                Event::PeerProbed(found) => boxed(|| self.on_peer_probed(found)).await,
                Event::Down(i) => boxed(|| self.on_replica_down(i)).await,
                Event::Ended(i, end) => self.on_ended(i, end).await,
            };
            if let ControlFlow::Break(outcome) = step {
                return outcome;
            }
        }
    }

    async fn next_event(&mut self) -> Event<T::Head> {
        let (deadline, alarm, watch, running) = (self.deadline, &mut self.alarm, &mut self.watch, &mut self.running);
        std::future::poll_fn(|cx| {
            let next = watch.next().map_or(deadline, |t| t.min(deadline));
            if alarm.deadline() != next {
                alarm.as_mut().reset(next);
            }
            // The instant the alarm rang at, at the least: what was due by then is due.
            let rang = alarm.as_mut().poll(cx).is_ready().then(|| Instant::now().max(next));
            let due = |at: Option<Instant>| at.zip(rang).is_some_and(|(at, rang)| at <= rang);
            if due(Some(deadline)) {
                return Poll::Ready(Event::Deadline);
            }
            for (i, a) in running.iter_mut().enumerate() {
                if let Poll::Ready(end) = a.poll_end(cx) {
                    return Poll::Ready(Event::Ended(i, end));
                }
                if a.down.as_mut().is_some_and(|d| d.as_mut().poll(cx).is_ready()) {
                    return Poll::Ready(Event::Down(i));
                }
            }
            // The watch after the attempts: an answer or a sign of work at the very moment of a
            // look is seen first.
            if due(watch.ping_at) {
                watch.ping_at = None;
                return Poll::Ready(Event::PingDue);
            }
            if due(watch.timer) {
                watch.timer = None;
                return Poll::Ready(Event::Look);
            }
            // After the attempts: a crashed replica's broken connection is seen before the
            // refused ping that would otherwise send its read elsewhere; and a sign of work
            // since the ping started (polling an attempt reports it) makes the ping moot.
            if let Some(Poll::Ready(found)) = watch.peer.as_mut().map(|p| p.as_mut().poll(cx)) {
                watch.peer = None;
                return Poll::Ready(Event::PeerProbed(found));
            }
            if let Ping::Running { fut, since } = &mut watch.ping {
                let ran = since.elapsed();
                if running.iter().any(|a| a.activity.silent_for() < ran) {
                    watch.ping = Ping::Idle;
                } else if let Poll::Ready(found) = fut.as_mut().poll(cx) {
                    watch.ping = Ping::Idle;
                    return Poll::Ready(Event::Probed(found));
                }
            }
            Poll::Pending
        })
        .await
    }

    /// The head deadline passed: every copy is killed, the client gets a 504.
    fn on_deadline(&mut self) -> Outcome<T::Head> {
        let replica = self.running.first().map(|a| a.inflight.replica().clone());
        for a in self.running.drain(..) {
            a.cancel("timeout");
        }
        timed_out(self.plan, replica, self.retries)
    }

    /// Half a deadline before a look: the replicas of attempts silent for that long are pinged,
    /// so that the ping's answer (or its absence) is known at the look.
    fn on_ping_due(&mut self) -> Step<T::Head> {
        if self.quiet() >= self.watch.lead {
            self.ping();
        }
        ControlFlow::Continue(())
    }

    /// The watch's timer: the per-try deadline passed (or a recheck is due). A read that showed
    /// work within the deadline is left alone; for a silent one, its ping says.
    async fn on_look(&mut self) -> Step<T::Head> {
        if !self.counted.per_try_timeout {
            self.counted.per_try_timeout = true;
            self.ctx.metrics.per_try_timeouts.inc();
        }
        let window = self.window();
        // A byte or a progress report within the deadline: the replica is working.
        let quiet = self.quiet();
        if quiet < window {
            self.spare();
            self.watch.look_in(window - quiet);
            return ControlFlow::Continue(());
        }
        match std::mem::replace(&mut self.watch.ping, Ping::Idle) {
            Ping::Found(found) => return self.on_probed(found).await,
            Ping::Running { fut, since } => self.watch.ping = Ping::Running { fut, since },
            Ping::Idle => self.ping(),
        }
        // The ping is out: compare with another replica's ping, and wait for it, looking again
        // meanwhile.
        if !self.watch.awaiting {
            self.watch.awaiting = true;
            self.ping_peer();
        }
        self.watch.look_again_in(self.watch.lead.max(std::time::Duration::from_millis(1)));
        self.hedge_if_hung().await;
        ControlFlow::Continue(())
    }

    /// The other replica's ping answered: if it is alive where the read's own replica is not,
    /// the read is hedged now.
    async fn on_peer_probed(&mut self, found: Probe) -> Step<T::Head> {
        self.watch.peer_alive = found == Probe::Alive;
        self.hedge_if_hung().await;
        ControlFlow::Continue(())
    }

    /// Hedges now when the read's replica is hung: its ping out past the deadline, another
    /// replica's ping answered meanwhile, and no answer head from it for a whole deadline; and
    /// the read's shape ran fine lately (a new shape may be a query of death whose server is
    /// still dying: it waits for its ping's bound, and for its connection to break).
    async fn hedge_if_hung(&mut self) {
        let out = matches!(self.watch.ping, Ping::Running { .. });
        let known = self.shape.is_some_and(|fp| self.ctx.quarantine.known_good(fp));
        if self.watch.awaiting && out && self.watch.peer_alive && known && self.stalled() {
            self.watch.stop();
            self.on_silent().await;
        }
    }

    /// Pings one healthy replica, not running this read nor tried, that a hedge could go to;
    /// bounded as the read's own ping.
    fn ping_peer(&mut self) {
        let exclude = excluded(&self.tried, &self.running);
        let shard = self.plan.target.shard();
        let peer =
            self.ctx.balancer.replicas().find(|r| {
                shard.is_none_or(|s| s == r.shard) && r.is_healthy() && !exclude.contains(&(r.shard, r.index))
            });
        if let Some(r) = peer {
            self.watch.peer = Some(self.ctx.backend.alive_shared(&r.addr, self.window().max(MIN_PROBE)));
        }
    }

    /// Pings the replicas of the running attempts, bounded by the deadline but at least
    /// [`MIN_PROBE`].
    fn ping(&mut self) {
        let timeout = self.window().max(MIN_PROBE);
        let probes: Vec<_> =
            self.running.iter().map(|a| self.ctx.backend.alive_shared(&a.inflight.replica().addr, timeout)).collect();
        self.watch.ping_now(Box::pin(any_alive(probes)));
    }

    /// How long since the last sign of work of any running attempt, beyond its replica's
    /// reporting pace ([`super::hedge::Activity::overdue`]).
    fn quiet(&self) -> std::time::Duration {
        self.running.iter().map(|a| a.activity.overdue()).min().unwrap_or_default()
    }

    /// Is a running attempt's replica stalled (an attempt past its deadline, and no answer head
    /// from it for a whole deadline)? The running attempts count as overdue for the question
    /// (they are past their deadline), and are marked so for good only when they are hedged.
    fn stalled(&self) -> bool {
        let window = self.window();
        let marks: Vec<Overdue> = self
            .running
            .iter()
            .filter(|a| a.overdue.is_none())
            .map(|a| Overdue::new(a.inflight.replica().clone()))
            .collect();
        let stalled = self.running.iter().any(|a| a.inflight.replica().is_stalled(window));
        drop(marks);
        stalled
    }

    /// The ping of the silent attempts' replicas answered: spare, look again, or hedge.
    async fn on_probed(&mut self, found: Probe) -> Step<T::Head> {
        self.watch.stop();
        let window = self.window();
        match found {
            Probe::Alive => {
                // Working (or queued) on it.
                self.spare();
                let d = self.watch.next_recheck(window);
                self.watch.look_in(d);
                return ControlFlow::Continue(());
            }
            Probe::Dead if !self.watch.refused_before => {
                // Its listener is closed. A crashed server drops our connection at the same
                // moment (that failure is on its way, and a read that killed its replica must
                // not go to another one); a server in graceful shutdown keeps it open: look
                // again shortly, and hedge if it is still open.
                self.watch.refused_before = true;
                self.watch.look_in(DEAD_GRACE);
                return ControlFlow::Continue(());
            }
            // Silent, or refusing connections while it keeps ours open: hedge.
            _ => {}
        }
        self.on_silent().await;
        ControlFlow::Continue(())
    }

    /// The running attempts are silent: they are overdue on their replicas, and a copy goes to
    /// another replica that can help, if the policy and the budget allow.
    async fn on_silent(&mut self) {
        for a in self.running.iter_mut().filter(|a| a.overdue.is_none()) {
            a.overdue = Some(Overdue::new(a.inflight.replica().clone()));
        }
        if !self.policy.can_hedge(self.running.len(), self.attempts) {
            return;
        }
        self.on_hedge().await;
        if self.policy.can_hedge(self.running.len(), self.attempts) {
            if let Some(d) = self.policy.hedge_after {
                self.watch.look_in(d);
            }
        }
    }

    /// Sends a hedged copy. A hedge goes only to a healthy replica that can help: one that is
    /// not slow itself or, when this query waits on a stalled replica (no answer at all for a
    /// deadline: hung), one that is not stalled; and no staler than the replica the read waits
    /// on (a hedge is a copy of the same read: a stale answer is taken only when a replica is
    /// marked down and none fresher is left). None now (the others are down, busy with this
    /// query, or late like this one): the request is held, and looked at again one deadline
    /// later, budget untouched. When every replica is late the cause is not one replica, and a
    /// hedge would only add load where answers are already late.
    async fn on_hedge(&mut self) {
        let (ctx, window) = (self.ctx, self.window());
        let exclude = excluded(&self.tried, &self.running);
        let shard = self.plan.target.shard();
        let waits_on_stalled = self.running.iter().any(|a| a.inflight.replica().is_stalled(window));
        let floor = match want(self.plan, ctx.balancer.rule().fallback) {
            Want::Read { view, .. } => {
                let best = self.running.iter().map(|a| ctx.balancer.tier_of(a.inflight.replica(), view)).min();
                Some((view, best.unwrap_or(Tier::Fresh)))
            }
            Want::Write => None,
        };
        let fresh_enough = move |r: &Replica| floor.is_none_or(|(view, best)| ctx.balancer.tier_of(r, view) <= best);
        let helps =
            move |r: &Replica| (!r.is_slow_now() || (waits_on_stalled && !r.is_stalled(window))) && fresh_enough(r);
        if ctx.balancer.healthy_where(shard, &exclude, helps) {
            if !ctx.retry_budget.withdraw() {
                if !self.counted.budget_exhausted {
                    self.counted.budget_exhausted = true;
                    ctx.metrics.budget_exhausted.inc();
                }
            } else if let Some(a) = start(self.plan, self.transport, ctx, &exclude, Some(&helps)).await {
                self.attempts += 1;
                self.hedged = true;
                ctx.metrics.hedges.inc();
                ctx.metrics.attempt.hedge_reasons.get_or_create(&ReasonLabel { reason: "silent" }).inc();
                self.running.push(a);
            }
        } else if ctx.balancer.has_healthy(shard, &exclude) && !self.counted.held {
            self.counted.held = true;
            ctx.metrics.hedges_held.inc();
        }
    }

    /// Attempt `i`'s replica was marked down. The query moves only when it can go somewhere (a
    /// healthy replica, budget): a replica that is only slow may still answer, and killing a
    /// query with nowhere to send it would turn a slow answer into an error.
    async fn on_replica_down(&mut self, i: usize) -> Step<T::Head> {
        self.running[i].down = None;
        let id = self.running[i].id();
        let mut exclude = excluded(&self.tried, &self.running);
        exclude.push(id);
        let shard = self.plan.target.shard();
        if self.policy.retry(&Failure::Down, self.attempts) == Decision::Retry
            && self.ctx.balancer.has_healthy(shard, &exclude)
            && self.ctx.retry_budget.withdraw()
        {
            if let Some(b) = start(self.plan, self.transport, self.ctx, &exclude, None).await {
                let a = self.running.swap_remove(i);
                self.tried.push(id);
                a.cancel("replica_down");
                self.attempts += 1;
                self.retries += 1;
                self.ctx.metrics.retries.inc();
                self.running.push(b);
            }
        }
        ControlFlow::Continue(())
    }

    /// Attempt `i` ended: an answer ends the request; a failure waits for another copy still
    /// running, or retries, or gives up.
    async fn on_ended(&mut self, i: usize, end: AttemptEnd<T::Head>) -> Step<T::Head> {
        let a = self.running.swap_remove(i);
        let replica = a.inflight.replica().clone();
        if matches!(end, AttemptEnd::Head(_)) {
            replica.answered();
        }
        let (failure, detail) = match end {
            AttemptEnd::Head(head) if T::is_success(&head) => return ControlFlow::Break(self.on_answer(a, head)),
            AttemptEnd::Head(head) => boxed(|| self.on_error_answer(a, head)).await?,
            AttemptEnd::Failed(e) => boxed(|| self.on_failure(a, e)).await?,
        };
        if !self.running.is_empty() {
            // Another copy is still on its way: wait for it.
            return ControlFlow::Continue(());
        }
        boxed(|| self.retry_after(failure, detail, replica)).await
    }

    /// A successful answer head: it wins, every other copy is cancelled.
    fn on_answer(&mut self, a: Running<T::Head>, head: T::Head) -> Outcome<T::Head> {
        let ctx = self.ctx;
        if let Some(fp) = self.shape {
            ctx.quarantine.succeeded(fp);
        }
        ctx.head_times.record(a.started.elapsed(), ctx.hedging.quantile);
        if a.hedge {
            ctx.metrics.hedge_wins.inc();
        }
        for l in self.running.drain(..) {
            // A copy still without a head lost the race: its replica is slower.
            l.inflight.replica().lost_race();
            l.cancel("hedge_lost");
        }
        self.won(a, head)
    }

    fn won(&self, a: Running<T::Head>, head: T::Head) -> Outcome<T::Head> {
        let won = Won { replica: a.inflight.replica().clone(), inflight: a.inflight, grant: a.grant, guard: a.guard };
        Outcome::Answer(Box::new(Answered { head, won, retries: self.retries, hedged: self.hedged }))
    }

    /// An error answer head: a retry-safe refusal is a failure, any other error is the answer.
    async fn on_error_answer(&mut self, mut a: Running<T::Head>, head: T::Head) -> Step<T::Head, (Failure, String)> {
        // The server answered with an error: its query has ended.
        a.guard.disarm();
        let replica = a.inflight.replica().clone();
        match T::judge_error(head).await {
            Judged::Busy(code, text) => {
                // 216 (query id taken) is no sign of trouble on the replica.
                if retry_safe_code(code) && self.ctx.balancer.report_failure(&replica) {
                    self.went_down(&replica, &format!("ClickHouse code {code}"));
                }
                self.tried.push((replica.shard, replica.index));
                ControlFlow::Continue((Failure::Busy(code), text))
            }
            Judged::Answer(head) => {
                // A real answer (a wrong query is wrong everywhere): it wins.
                for l in self.running.drain(..) {
                    l.cancel("hedge_lost");
                }
                ControlFlow::Break(self.won(a, head))
            }
        }
    }

    /// Nothing came back: the query did not run (connect), or its connection broke and the
    /// server cancels it; or its replica died running it (a query of death: the request ends).
    async fn on_failure(&mut self, mut a: Running<T::Head>, e: BackendError) -> Step<T::Head, (Failure, String)> {
        a.guard.disarm();
        let replica = a.inflight.replica().clone();
        let id = (replica.shard, replica.index);
        self.sent_any |= !e.connect;
        if e.connect || self.lost_once.contains(&id) {
            self.tried.push(id);
        } else {
            self.lost_once.push(id);
        }
        // A streamed body that broke may be the client's doing (it left, or stalled past its
        // idle timeout): only a refused connection blames the replica then.
        if (e.connect || !a.streamed) && self.ctx.balancer.report_failure(&replica) {
            self.went_down(&replica, &e.message);
        }
        let detail = format!("replica {} ({}) failed: {}", replica.label(), replica.addr.base, e);
        let ctx = self.ctx;
        if let Some(fp) = self.shape.filter(|_| !e.connect && !a.streamed && a.sent_healthy) {
            // Its replica died while running it ([`super::quarantine`] has the rule).
            if self.died_of(fp, &replica).await {
                for l in self.running.drain(..) {
                    l.cancel("replica_down");
                }
                return ControlFlow::Break(query_of_death(self.plan, ctx, fp, &replica, &e.message, self.retries));
            }
        }
        let failure = if e.connect { Failure::Unsent(e.message) } else { Failure::Lost(e.message) };
        ControlFlow::Continue((failure, detail))
    }

    /// The request's connection to `replica` broke after it was sent: is it a query of death?
    /// Only when the replica is gone (a ping right after finds it dead); then yes for a shape
    /// that has not run fine within the TTL, for a read that a replica already died running
    /// (it was resent once), and for a write of a shape struck before; a read of a known shape
    /// is resent once, and a write's known shape takes a strike.
    async fn died_of(&mut self, fp: u64, replica: &Replica) -> bool {
        let q = &self.ctx.quarantine;
        if self.ctx.backend.alive(&replica.addr, DEATH_PROBE).await != Probe::Dead {
            return false;
        }
        let read = self.plan.kind == chstorm_sql::statement::StatementKind::Read;
        if !q.known_good(fp) || self.killed_one || (!read && q.struck(fp)) {
            return true;
        }
        self.killed_one = true;
        if !read {
            q.strike(fp);
        }
        false
    }

    /// The last running attempt failed: retry elsewhere if the policy, the budget and the
    /// replicas allow, else give the failure to the client.
    async fn retry_after(&mut self, failure: Failure, detail: String, replica: Arc<Replica>) -> Step<T::Head> {
        let (status, retries) = (failure.status(), self.retries);
        let unsent = !self.sent_any;
        let give_up =
            |message: String| Outcome::Failed { status, message, replica: Some(replica.clone()), retries, unsent };
        if self.policy.retry(&failure, self.attempts) == Decision::Stop {
            return ControlFlow::Break(give_up(failure.message(&detail)));
        }
        if !self.ctx.retry_budget.withdraw() {
            self.ctx.metrics.budget_exhausted.inc();
            return ControlFlow::Break(give_up(failure.message(&detail)));
        }
        let exclude = excluded(&self.tried, &self.running);
        match start(self.plan, self.transport, self.ctx, &exclude, None).await {
            Some(a) => {
                self.attempts += 1;
                self.retries += 1;
                self.ctx.metrics.retries.inc();
                self.running.push(a);
                if self.policy.can_hedge(self.running.len(), self.attempts) {
                    if let Some(d) = self.policy.hedge_after {
                        self.watch.look_in(d);
                    }
                }
                ControlFlow::Continue(())
            }
            // No replica left: the last failure says more than "no replica".
            None => ControlFlow::Break(give_up(failure.message(&detail))),
        }
    }

    /// The per-try deadline (zero without hedging).
    fn window(&self) -> std::time::Duration {
        self.policy.hedge_after.unwrap_or_default()
    }

    /// Counts a read left alone past its deadline because it showed it is working (once a
    /// request).
    fn spare(&mut self) {
        if !self.counted.spared {
            self.counted.spared = true;
            self.ctx.metrics.attempt.hedges_spared.inc();
        }
    }

    /// `replica` was just marked down by a failed request: forget its pooled connections, log.
    fn went_down(&self, replica: &Replica, why: &str) {
        self.ctx.backend.reset_pool(&replica.addr);
        self.transport.went_down(replica);
        crate::log::log(
            "warn",
            "replica down (request failed)",
            serde_json::json!({"replica": replica.label(), "url": replica.addr.base, "error": why,
                "query_id": &*self.plan.query_id}),
        );
    }
}
