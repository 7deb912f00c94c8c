//! The innermost service: one request, read ([`crate::read`]), planned ([`crate::plan`]), sent
//! ([`crate::attempt`]) and answered ([`crate::respond`]). Nothing else happens here.

use crate::attempt::SendBody;
use crate::client_body::ClientBody as ClientBodyIn;
use crate::client_fin::ClientFin;
use crate::cluster::upstream::{BoxError, GBody};
use crate::config::User;
use crate::plan::{PlanInput, Refusal};
use crate::read::ClientBody;
use crate::respond::Exit;
use crate::state::State;
use chstorm_proto::rules::StatementKind;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Instant;

pub use crate::respond::reply;

/// A query_id for a query whose client set none: `chgw-` and 24 random hex digits.
pub(crate) fn new_query_id() -> String {
    format!("chgw-{:016x}{:08x}", rand::random::<u64>(), rand::random::<u32>())
}

/// Handles one authenticated, admitted request of user `u`.
pub async fn handle(state: Arc<State>, u: Arc<User>, req: Request<ClientBodyIn>) -> Response<GBody> {
    let exit = Exit { metrics: &state.metrics, user: &u.name, started: Instant::now() };
    let Some(cluster) = state.clusters.get(&u.cluster) else {
        let why = format!("user '{}' names cluster '{}', which is gone", u.name, u.cluster);
        return exit.refused(Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, why));
    };
    let (parts, body) = req.into_parts();
    let body = body.map_err(|e| Box::new(e) as BoxError).boxed_unsync();
    let read = match crate::read::read_within(&parts, body, crate::plan::restricted(&u), &state.client_mem()).await {
        Ok(r) => r,
        Err(refusal) => return exit.refused(refusal),
    };
    // The held body's room on the memory budget, until the attempts are done with it.
    let _held = read.charge;
    let input = PlanInput {
        method: &parts.method,
        path: parts.uri.path(),
        headers: &parts.headers,
        params: read.params,
        sql: read.sql.as_deref(),
        body: read.shape,
        form_read: read.form_read,
        max_depth: state.config.limits.max_query_depth,
    };
    let max_per_query = cluster.budget.as_ref().map(|b| b.cfg.max_per_query);
    let plan = match crate::plan::plan(input, &u, &cluster.cfg, max_per_query, new_query_id) {
        Ok(p) => p,
        Err(refusal) => return exit.refused(refusal),
    };
    let body = match read.body {
        ClientBody::Held(b) => SendBody::Held(b),
        ClientBody::Streamed { head, rest } => SendBody::Once(Some(crate::body::Prefixed::wrap(head, rest))),
        ClientBody::Opaque(b) => SendBody::Once(Some(b)),
    };
    let ctx = cluster.attempt_ctx(&state, cluster.head_times(plan.target));
    let hold_for = ctx.head_times.deadline(ctx.hedging).unwrap_or(ctx.hedging.max_delay.0);
    // A read is abandoned at the client's FIN (`crate::client_fin`); anything else runs to its end.
    let fin = parts.extensions.get::<ClientFin>().filter(|_| plan.kind == StatementKind::Read);
    let outcome = match fin {
        Some(fin) => tokio::select! {
            o = crate::attempt::run(&plan, body, &ctx) => o,
            _ = fin.came() => return exit.refused(Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, FIN_DURING_READ)),
        },
        None => crate::attempt::run(&plan, body, &ctx).await,
    };
    let mut resp = exit.outcome(outcome, plan.target.label(), &plan.client_query_id, plan.body_deadline);
    if let Some(fin) = fin {
        resp = resp.map(|b| fin.cut(b));
    }
    if parts.method == http::Method::HEAD {
        return resp;
    }
    crate::body::hold_small(resp, crate::body::HOLD_AT, hold_for).await
}

/// The answer to a read whose client sent its FIN before the answer came (ClickHouse's
/// QUERY_WAS_CANCELLED).
const FIN_DURING_READ: &str = "Code: 394, e.displayText() = DB::Exception: Query was cancelled: the client closed its \
side of the connection during a read (a read is abandoned at the client's FIN; other statements run to their end)";
