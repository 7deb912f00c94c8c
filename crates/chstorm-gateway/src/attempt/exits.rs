//! How the attempts end without an answer: the client's one-line errors (no replica left, the
//! head deadline, a query of death and a refused shape), with their logs and counts.

use super::quarantine::Refusal;
use super::{Ctx, Outcome};
use crate::cluster::replica::Replica;
use crate::query::plan::{Plan, Target};
use http::StatusCode;
use std::sync::Arc;
use std::time::Duration;

/// How long the check that a replica died waits for its `/ping` (1 s): a dead server refuses
/// the connection at once.
pub(super) const DEATH_PROBE: Duration = Duration::from_secs(1);

/// The read of shape `fp` killed `replica`: refuse the shape, count, log, and tell the client.
pub(super) fn query_of_death<H>(
    plan: &Plan,
    ctx: &Ctx<'_>,
    fp: u64,
    replica: &Arc<Replica>,
    why: &str,
    retries: u32,
) -> Outcome<H> {
    let ttl = ctx.quarantine.ttl();
    ctx.quarantine.refuse(fp, replica.label());
    ctx.metrics.attempt.query_deaths.inc();
    crate::log::log(
        "warn",
        "query of death: its replica died while running it; not resent, its shape refused",
        serde_json::json!({"query_id": &*plan.query_id, "replica": replica.label(), "url": replica.addr.base,
            "shape": format!("{fp:016x}"), "refused_for_s": ttl.as_secs(), "error": why}),
    );
    let refused = if ttl.is_zero() {
        String::new()
    } else {
        format!(", and queries of its shape are refused for {} s (limits.query_of_death_ttl)", ttl.as_secs())
    };
    Outcome::Failed {
        status: StatusCode::BAD_GATEWAY,
        message: format!(
            "Code: 210. chstorm gateway: replica {} ({}) died while running this query (its connection broke: \
             {why}); the query is not sent to another replica{refused}",
            replica.label(),
            replica.addr.base
        ),
        replica: Some(replica.clone()),
        retries,
        unsent: false,
    }
}

/// A read whose shape is refused: the client's one-line error.
pub(super) fn refused_shape<H>(plan: &Plan, r: &Refusal, ttl: Duration) -> Outcome<H> {
    crate::log::log(
        "info",
        "query of death refused",
        serde_json::json!({"query_id": &*plan.query_id, "replica": r.replica, "refused_for_s": r.left.as_secs()}),
    );
    Outcome::Failed {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: format!(
            "Code: 1002. chstorm gateway: refused: a query of this shape (literals aside) killed replica {} \
             within the last {} s; it is refused for {} s more (limits.query_of_death_ttl)",
            r.replica,
            ttl.as_secs(),
            r.left.as_secs().max(1)
        ),
        replica: None,
        retries: 0,
        unsent: true,
    }
}

/// No replica left to try (none at all for the first attempt).
pub(super) fn no_replica<H>(plan: &Plan, replica: Option<Arc<Replica>>, attempts: usize, retries: u32) -> Outcome<H> {
    let shard = match plan.target {
        Target::Shard(s) => format!(" for shard {}", s + 1),
        _ => String::new(),
    };
    Outcome::Failed {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: format!("Code: 279. chstorm gateway: no replica left to try{shard} after {attempts} attempts"),
        replica,
        retries,
        unsent: attempts == 0,
    }
}

/// A read that no replica may serve: every healthy replica of its shard lags and falling back
/// is off (`why`: [`crate::cluster::balancer::Balancer::stale_refusal`]). 503, counted, logged.
pub(super) fn stale_refused<H>(plan: &Plan, ctx: &Ctx<'_>, why: String) -> Outcome<H> {
    let cluster = crate::metrics::ClusterLabel { cluster: ctx.balancer.cluster.clone() };
    ctx.metrics.replication.stale_refusals.get_or_create(&cluster).inc();
    crate::log::log(
        "info",
        "read refused: every replica lags",
        serde_json::json!({"query_id": &*plan.query_id, "error": why}),
    );
    Outcome::Failed { status: StatusCode::SERVICE_UNAVAILABLE, message: why, replica: None, retries: 0, unsent: true }
}

/// The head deadline (`plan.head_timeout`) passed: every copy is cancelled.
pub(super) fn timed_out<H>(plan: &Plan, replica: Option<Arc<Replica>>, retries: u32) -> Outcome<H> {
    Outcome::Failed {
        status: StatusCode::GATEWAY_TIMEOUT,
        message: format!(
            "Code: 159. chstorm gateway: no answer within {} s; the query was killed",
            plan.head_timeout.as_secs()
        ),
        replica,
        retries,
        unsent: false,
    }
}
