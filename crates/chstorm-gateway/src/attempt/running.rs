//! One attempt in flight: what it holds (its replica's in-flight count, its thread grant, its
//! KILL guard, its signs of work) and how it starts ([`start`]: pick a replica, take a grant,
//! send, guard).

use super::hedge::Activity;
use super::kill::KillGuard;
use super::{Ctx, Live, Transport};
use crate::cluster::balancer::Want;
use crate::cluster::budget::Grant;
use crate::cluster::replica::{InFlight, Overdue, Replica};
use crate::cluster::replication::{Freshness, View};
use crate::cluster::upstream::{BackendError, BoxFuture};
use crate::metrics::ClusterReasonLabels;
use crate::query::plan::{Plan, Target};
use chstorm_sql::statement::StatementKind;
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
    let inflight = match plan.target {
        Target::Session(h) => match plan.pinned {
            Some(at) => ctx.balancer.pick_at(at, exclude),
            None => ctx.balancer.pick_sticky(h, exclude),
        },
        t => ctx.balancer.pick_for(want(plan, ctx.balancer.rule().fallback), t.shard(), exclude, hedge_to),
    }?;
    if inflight.freshness() != Freshness::Fresh {
        let labels =
            ClusterReasonLabels { cluster: ctx.balancer.cluster.clone(), reason: inflight.freshness().reason() };
        ctx.metrics.replication.stale_reads.get_or_create(&labels).inc();
    }
    let replica = inflight.replica().clone();
    let sent_healthy = replica.is_healthy();
    if hedge && !sent_healthy {
        // A hedge goes only to a healthy replica (pick_for with a rule never gives another; a
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

/// What `plan`'s picks are for: a read judged by the routed tables' delay (routed) or by every
/// table's (anything else), falling back to a stale replica as the query's own
/// `fallback_to_stale_replicas_for_distributed_queries` says, else as `fallback` (the config's);
/// or a write.
pub(super) fn want(plan: &Plan, fallback: bool) -> Want {
    if plan.kind != StatementKind::Read {
        return Want::Write;
    }
    let view = if plan.target.shard().is_some() { View::Routed } else { View::Any };
    let asked = plan.params.iter().rev().find(|(k, _)| k == "fallback_to_stale_replicas_for_distributed_queries");
    let fallback = asked.map_or(fallback, |(_, v)| !matches!(v.trim(), "0" | "false"));
    Want::Read { view, fallback }
}

/// Replicas a new attempt must not go to: those tried, and those with an attempt running.
pub(super) fn excluded<H>(tried: &[(usize, usize)], running: &[Running<H>]) -> Vec<(usize, usize)> {
    tried.iter().copied().chain(running.iter().map(Running::id)).collect()
}
