//! `attempts`: sends a planned request to replicas until one answers, and decides, through a
//! [`Policy`] shaped like tower's `retry::Policy` and `hedge::Policy`, when to retry, when to
//! hedge and when to stop.
//!
//! Each attempt owns, as RAII values, its replica's in-flight count ([`InFlight`]), its thread
//! grant ([`Grant`]) and its KILL guard ([`KillGuard`]); whatever ends an attempt (a faster copy
//! won, its replica went down, the client left, the deadline passed) drops them, which cancels
//! its query on the server. The winner's values go on with the answer's body.
//!
//! What may happen (the plan's [`Latitude`] says which apply):
//! * **hedge**: an idempotent read whose replica is *silent* for the per-try deadline
//!   ([`hedge`]) gets a copy on another healthy replica of the same shard. Silent means no
//!   answer byte and no progress report for the deadline ([`Activity`]: native Progress and Data
//!   packets count), and no answer to a `GET /ping` ([`Backend::alive`]) sent half a deadline
//!   ahead (`watch`: a hung replica, its ping still out where another replica's is answered, is
//!   hedged at the deadline; a late ping alone waits for its bound): 18.16's HTTP interface
//!   sends nothing before its answer (this
//!   build sends no `X-ClickHouse-Progress` headers even when asked), so over HTTP the ping is the
//!   only sign of a working replica. A replica that shows it is working is left alone however
//!   long its read takes (counted in `chstorm_gateway_hedges_spared_total`), so a read starts
//!   once on the cluster unless its replica fell silent. The first answer head wins, the other
//!   copy is cancelled (dropped, then `KILL QUERY` by query_id on its replica), and the slower
//!   replica is penalised so selection steers away from it;
//! * **re-issue on down**: an idempotent read waiting on a replica that gets marked down
//!   (probe or passive detection) is cancelled and sent elsewhere at once;
//! * **retry**: after a failure that proves the query did not run (connect refused, ClickHouse
//!   codes 202, 209, 210, 279, 745) or, for reads, whose outcome is unknown (reset before the head);
//! * never for writes after they may have run, never in a session, never after the first byte
//!   of an answer went to the client (the loop ends at the first answer head; over HTTP that
//!   head comes with its answer held, [`held`], so an answer cut before its end is retried
//!   like a reset before its head);
//! * never for a read whose replica died while running it, unless reads of its shape succeeded
//!   lately: the read is held to be a *query of death*, its client gets a one-line error, and
//!   its shape is refused for `limits.query_of_death_ttl` ([`quarantine`]).
//!
//! Hedges and retries draw on one retry budget (tower's `TpsBudget`), so a sick cluster is not
//! stormed. One loop serves both protocols: a [`Transport`] sends a query to a replica and says
//! what its answer head is (an HTTP response head, [`Http`]; the first packet of a native
//! answer, `crate::native::query`). HTTP I/O goes through [`Backend`], so all of this runs in
//! unit tests against a fake backend in paused time.
//!
//! The modules, in the order a request meets them:
//! * this one: the shared types ([`Ctx`], [`Transport`], [`Outcome`]) and the entry points
//!   ([`run`] over HTTP, [`attempts`] over any transport);
//! * `policy`: [`Policy`], the retry and hedge decisions, pure;
//! * `running`: one attempt in flight and how it starts (pick, grant, send, guard);
//! * `machine`: the loop, a state machine with one handler per event (the head deadline, a
//!   look at silent attempts, a ping's answer, a replica marked down, an attempt's end);
//! * `watch`: the look timer and the liveness ping of silent attempts, with their bounds;
//! * [`hedge`]: the per-try deadline (the route's window of answer-head times) and [`Activity`];
//! * [`quarantine`]: queries of death;
//! * `kill`: the KILL guard ([`KillGuard`]);
//! * `exits`: the client's one-line errors when no answer comes;
//! * `http_transport`: the HTTP [`Transport`] ([`Http`], [`HttpParts`], [`SendBody`]);
//! * [`held`]: the HTTP answer hold.

mod exits;
mod http_transport;
mod kill;
mod machine;
mod policy;
mod running;
mod watch;

pub mod hedge;
pub mod held;
pub mod quarantine;

pub use held::HttpHead;
pub(crate) use http_transport::read_limited;
pub use http_transport::{HttpParts, SendBody};
pub use kill::KillGuard;

use crate::cluster::balancer::Balancer;
use crate::cluster::budget::{ClusterBudget, Grant};
use crate::cluster::login::BackendLogin;
use crate::cluster::replica::{InFlight, Replica};
use crate::cluster::upstream::{Backend, BackendError, BoxFuture};
use crate::config::Hedging;
use crate::metrics::Metrics;
use crate::query::plan::Plan;
use ::http::StatusCode;
use hedge::{Activity, HeadTimes};
use http_transport::Http;
use policy::Policy;
use quarantine::Quarantine;
use std::sync::Arc;
use tower::retry::budget::{Budget, TpsBudget};

/// What the attempts share: the backends, the cluster's replicas and budgets, the metrics.
pub struct Ctx<'a> {
    pub backend: &'a Arc<dyn Backend>,
    pub balancer: &'a Balancer,
    pub threads: Option<&'a Arc<ClusterBudget>>,
    /// The login the query runs as ([`crate::state::State::login`]): its attempts' and their
    /// kills' `Authorization`, and its pools.
    pub login: &'a Arc<BackendLogin>,
    pub retry_budget: &'a TpsBudget,
    pub metrics: &'a Arc<Metrics>,
    pub hedging: &'a Hedging,
    /// The route's recent answer-head times.
    pub head_times: &'a HeadTimes,
    /// Shapes of reads that killed a replica, and shapes known good.
    pub quarantine: &'a Quarantine,
}

/// What the loop hands an attempt's transport: where to report signs of work (a native read's
/// packets, Progress among them; see [`crate::native::transport`]).
#[derive(Debug, Clone)]
pub struct Live {
    pub activity: Arc<Activity>,
}

/// How the attempts reach a replica. The attempt loop ([`attempts`]) is the same for every
/// transport: it picks replicas, takes thread grants, guards each query with a KILL, hedges,
/// retries and stops; a transport only sends and judges what came back.
pub trait Transport: Send {
    /// What an attempt resolves to when its replica answers: the answer head.
    type Head: Send + 'static;
    /// Sends the query to `replica`, with `threads` granted by the thread budget; the future
    /// resolves at the answer head, and reports what it reads before it to `live`. None when the
    /// query can no longer be sent (a streamed body already went with an earlier attempt).
    fn send(
        &mut self,
        replica: &Arc<Replica>,
        threads: Option<usize>,
        live: Live,
    ) -> Option<BoxFuture<Result<Self::Head, BackendError>>>;
    /// True when attempts carry a streamed client body: a broken exchange may be the client's fault.
    fn streamed(&self) -> bool;
    /// True when `head` starts a successful answer (else [`Transport::judge_error`] reads it).
    fn is_success(head: &Self::Head) -> bool;
    /// An error answer's head: a retry-safe refusal ([`Judged::Busy`]) or an answer to pass on.
    fn judge_error(head: Self::Head) -> BoxFuture<Judged<Self::Head>>;
    /// `replica` was just marked down by a failed attempt: forget its idle connections.
    fn went_down(&self, replica: &Replica);
    /// The query's shape ([`quarantine::fingerprint`]), when its text is at hand.
    fn shape(&self) -> Option<u64> {
        None
    }
}

/// What an error answer is.
pub enum Judged<H> {
    /// A real answer (a wrong query is wrong everywhere): it goes to the client.
    Answer(H),
    /// ClickHouse refused with a code proving the query did not run; the exception's text.
    Busy(i32, String),
}

/// An answer head and the attempt that won it.
pub struct Answered<H> {
    pub head: H,
    pub won: Won,
    pub retries: u32,
    pub hedged: bool,
}

/// The attempt whose answer goes to the client, with what must live as long as its body.
pub struct Won {
    pub replica: Arc<Replica>,
    pub inflight: InFlight,
    pub grant: Option<Grant>,
    pub guard: KillGuard,
}

/// How the attempts ended.
pub enum Outcome<H = HttpHead> {
    /// An answer head (success, or an error answer to pass on, its body already read). Boxed: the
    /// outcome is handed up through the attempt loop and its callers, and each hand-over of an
    /// unboxed answer (about 350 bytes) was a copy into memory not touched since the
    /// connection's last query.
    Answer(Box<Answered<H>>),
    /// No answer: the status and the one-line message for the client.
    /// `unsent`: no attempt reached a server (each connection was refused, or none was made), so
    /// the query surely did not run.
    Failed { status: StatusCode, message: String, replica: Option<Arc<Replica>>, retries: u32, unsent: bool },
}

/// Runs the attempts for `plan` over HTTP, each a `parts` request carrying `body`.
pub async fn run(plan: &Plan, parts: HttpParts, body: SendBody, ctx: &Ctx<'_>) -> Outcome {
    // A successful answer is held for at most the per-try deadline after its head.
    let hold_for = (parts.method != ::http::Method::HEAD)
        .then(|| ctx.head_times.deadline(ctx.hedging).unwrap_or(ctx.hedging.max_delay.0));
    // The login's credentials and pools, the same for every attempt.
    let (auth, pool) = (ctx.login.header.clone(), ctx.login.slot);
    let mut http = Http { plan, parts, body, backend: ctx.backend.clone(), auth, pool, hold_for };
    attempts(plan, &mut http, ctx).await
}

/// Runs the attempts for `plan` over `transport`: a read whose shape is refused reaches no
/// replica; else the first attempt goes out and [`machine::Machine`] takes it from there.
pub async fn attempts<T: Transport>(plan: &Plan, transport: &mut T, ctx: &Ctx<'_>) -> Outcome<T::Head> {
    let policy = Policy {
        latitude: plan.latitude,
        max_attempts: ctx.balancer.replicas().count() + 1,
        max_extra: ctx.hedging.max_extra,
        hedge_after: ctx.head_times.deadline(ctx.hedging),
    };
    let mut machine = machine::Machine::new(plan, transport, ctx, policy);
    if let Some(r) = machine.refused_shape() {
        ctx.metrics.attempt.quarantine_refusals.inc();
        return exits::refused_shape(plan, &r, ctx.quarantine.ttl());
    }
    ctx.retry_budget.deposit();
    machine.run().await
}

#[cfg(test)]
mod tests;
