//! One attempt in flight: what it holds (its replica's in-flight count, its thread grant, its
//! KILL guard, its signs of work) and how it starts ([`start`]: pick a replica, take a grant,
//! send, guard).

use super::hedge::Activity;
use super::kill::KillGuard;
use super::{Ctx, Live, Transport};
use crate::cluster::budget::Grant;
use crate::cluster::replica::{InFlight, Overdue, Replica};
use crate::cluster::upstream::{BackendError, BoxFuture};
use crate::query::plan::{Plan, Target};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

pub(super) enum AttemptEnd<H> {
    Head(H),
    Failed(BackendError),
}

pub(super) struct Running<H> {
    pub(super) hedge: bool,
    /// It carries the client's streamed body: a broken exchange may be the client's fault.
    pub(super) streamed: bool,
    pub(super) started: Instant,
    pub(super) inflight: InFlight,
    /// Its replica was healthy when it was sent.
    pub(super) sent_healthy: bool,
    /// Set when the per-try deadline passed without an answer head: counts it as overdue on its
    /// replica, which makes a replica with many such attempts *slow now* (no hedges go there).
    pub(super) overdue: Option<Overdue>,
    pub(super) grant: Option<Grant>,
    pub(super) guard: KillGuard,
    /// Signs of work from its transport.
    pub(super) activity: Arc<Activity>,
    /// The exchange, as the transport sent it (polled through [`Running::poll_end`]).
    fut: BoxFuture<Result<H, BackendError>>,
    /// Fires when the attempt's replica is marked down (idempotent reads only).
    pub(super) down: Option<Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>>,
}

impl<H> Running<H> {
    /// Polls the exchange: its answer head or its failure, once it has one.
    pub(super) fn poll_end(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<AttemptEnd<H>> {
        self.fut.as_mut().poll(cx).map(|r| match r {
            Ok(head) => AttemptEnd::Head(head),
            Err(e) => AttemptEnd::Failed(e),
        })
    }

    pub(super) fn id(&self) -> (usize, usize) {
        let r = self.inflight.replica();
        (r.shard, r.index)
    }
    /// Ends the attempt: its query is cancelled on the server for `reason`.
    pub(super) fn cancel(mut self, reason: &'static str) {
        self.guard.reason = reason;
    }
}

/// Starts an attempt on a replica not tried and not running: picks it, takes its thread grant,
/// and sends the query. None when no replica is left (or a streamed body is gone).
pub(super) async fn start<T: Transport>(
    plan: &Plan,
    transport: &mut T,
    ctx: &Ctx<'_>,
    exclude: &[(usize, usize)],
    hedge_to: Option<&(dyn Fn(&Replica) -> bool + Sync)>,
) -> Option<Running<T::Head>> {
    let hedge = hedge_to.is_some();
    let inflight = match (plan.target, hedge_to) {
        (Target::Session(h), _) => match plan.pinned {
            Some(at) => ctx.balancer.pick_at(at, exclude),
            None => ctx.balancer.pick_sticky(h, exclude),
        },
        (t, Some(ok)) => ctx.balancer.pick_healthy_where(t.shard(), exclude, ok),
        (t, None) => ctx.balancer.pick(t.shard(), exclude),
    }?;
    let replica = inflight.replica().clone();
    let sent_healthy = replica.is_healthy();
    if hedge && !sent_healthy {
        // A hedge goes only to a healthy replica (pick_healthy_where never gives another; a
        // session's sticky pick may).
        return None;
    }
    let grant = match (ctx.threads, plan.want_threads) {
        (Some(b), Some(want)) => b.acquire(&replica, want, &plan.query_id).await,
        _ => None,
    };
    let streamed = transport.streamed();
    let activity = Arc::new(Activity::default());
    let live = Live { activity: activity.clone() };
    let send = transport.send(&replica, grant.as_ref().map(Grant::threads), live)?;
    // The query may start running as soon as it is sent: guard it from here on.
    let guard = KillGuard {
        armed: true,
        reason: "client_gone",
        query_id: plan.query_id.clone(),
        replica: replica.clone(),
        auth: ctx.login.auth.clone(),
        backend: ctx.backend.clone(),
        metrics: ctx.metrics.clone(),
    };
    // Only attempts that may move listen to the replica going down.
    let down = plan.latitude.hedge.then(|| Box::pin(replica.down_signal().cancelled_owned()));
    Some(Running {
        hedge,
        streamed,
        started: Instant::now(),
        inflight,
        sent_healthy,
        overdue: None,
        grant,
        guard,
        activity,
        fut: send,
        down,
    })
}

/// Replicas a new attempt must not go to: those tried, and those with an attempt running.
pub(super) fn excluded<H>(tried: &[(usize, usize)], running: &[Running<H>]) -> Vec<(usize, usize)> {
    tried.iter().copied().chain(running.iter().map(Running::id)).collect()
}
