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
//!   packets count), and no answer to a `GET /ping` ([`Backend::alive`]) within the deadline
//!   (at least 250 ms): 18.16's HTTP interface sends nothing before its answer (this
//!   build sends no `X-ClickHouse-Progress` headers even when asked), so over HTTP the ping is the
//!   only sign of a working replica. A replica that shows it is working is left alone however
//!   long its read takes (counted in `chstorm_gateway_hedges_spared_total`), so a read starts
//!   once on the cluster unless its replica fell silent. The first answer head wins, the other
//!   copy is cancelled (dropped, then `KILL QUERY` by query_id on its replica), and the slower
//!   replica is penalised so selection steers away from it;
//! * **re-issue on down**: an idempotent read waiting on a replica that gets marked down
//!   (probe or passive detection) is cancelled and sent elsewhere at once;
//! * **retry**: after a failure that proves the query did not run (connect refused, ClickHouse
//!   codes 202, 209, 210, 279) or, for reads, whose outcome is unknown (reset before the head);
//! * never for writes after they may have run, never in a session, never after the first byte
//!   of an answer went to the client (the loop ends at the first answer head);
//! * never for a read whose replica died while running it, unless reads of its shape succeeded
//!   lately: the read is held to be a *query of death*, its client gets a one-line error, and
//!   its shape is refused for `limits.query_of_death_ttl` ([`quarantine`]).
//!
//! Hedges and retries draw on one retry budget (tower's `TpsBudget`), so a sick cluster is not
//! stormed. One loop serves both protocols: a [`Transport`] sends a query to a replica and says
//! what its answer head is (an HTTP response head, [`Http`]; the first packet of a native
//! answer, `crate::native::query`). HTTP I/O goes through [`Backend`], so all of this runs in
//! unit tests against a fake backend in paused time.

pub mod hedge;
pub mod quarantine;

use crate::balancer::Balancer;
use crate::body::KillGuard;
use crate::budget::{ClusterBudget, Grant};
use crate::config::Hedging;
use crate::metrics::Metrics;
use crate::plan::{Latitude, Plan, Target};
use crate::replica::{InFlight, Overdue, Replica};
use crate::upstream::{full, Backend, BackendError, BoxFuture, GBody, Probe};
use bytes::Bytes;
use chstorm_proto::rules::{http_exception_code, may_run_elsewhere, retry_safe_code};
use hedge::{Activity, HeadTimes};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use quarantine::{fingerprint, Quarantine};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};
use tower::retry::budget::{Budget, TpsBudget};

/// Largest error answer read from a backend to find its exception code (64 KiB).
const MAX_ERROR_BODY: usize = 64 << 10;
/// Longest wait for the rest of an error answer once its head came: 10 s.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an attempt ended without an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The connection could not be made: the query never reached the server.
    Unsent(String),
    /// The connection broke before the answer head: the query's fate is unknown.
    Lost(String),
    /// ClickHouse answered with a code proving the query did not run there (202, 209, 210, 279;
    /// 216, the query id taken: [`chstorm_proto::rules::may_run_elsewhere`]).
    Busy(i32),
    /// The replica was marked down while the attempt waited.
    Down,
}

/// What to do after an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send the request to another replica (if the budget allows).
    Retry,
    /// Give the failure to the client.
    Stop,
}

/// The retry and hedge rules for one request, shaped like tower's `retry::Policy` (a decision
/// per failed attempt) and `hedge::Policy` (may this request be hedged).
#[derive(Debug, Clone)]
pub struct Policy {
    pub latitude: Latitude,
    /// At most this many attempts in all (replicas + 1).
    pub max_attempts: usize,
    /// At most this many extra copies in flight at once.
    pub max_extra: usize,
    /// The per-try deadline (None: no hedging).
    pub hedge_after: Option<Duration>,
}

impl Policy {
    /// tower's `retry::Policy::retry`: after `failure`, with `attempts` made so far.
    pub fn retry(&self, failure: &Failure, attempts: usize) -> Decision {
        if attempts >= self.max_attempts {
            return Decision::Stop;
        }
        let ok = match failure {
            Failure::Unsent(_) => self.latitude.resend_unsent,
            Failure::Lost(_) | Failure::Busy(_) => self.latitude.retry,
            Failure::Down => self.latitude.hedge,
        };
        if ok {
            Decision::Retry
        } else {
            Decision::Stop
        }
    }

    /// tower's `hedge::Policy::can_retry`: may another copy start now, with `running` attempts in
    /// flight and `attempts` made so far?
    pub fn can_hedge(&self, running: usize, attempts: usize) -> bool {
        self.latitude.hedge
            && self.hedge_after.is_some()
            && running < 1 + self.max_extra
            && attempts < self.max_attempts
    }
}

/// What the attempts share: the backends, the cluster's replicas and budgets, the metrics.
pub struct Ctx<'a> {
    pub backend: &'a Arc<dyn Backend>,
    pub balancer: &'a Balancer,
    pub threads: Option<&'a Arc<ClusterBudget>>,
    /// The backends' `Authorization` header value.
    pub auth: &'a str,
    pub retry_budget: &'a TpsBudget,
    pub metrics: &'a Arc<Metrics>,
    pub hedging: &'a Hedging,
    /// The route's recent answer-head times.
    pub head_times: &'a HeadTimes,
    /// Shapes of reads that killed a replica, and shapes known good.
    pub quarantine: &'a Quarantine,
}

/// What the loop hands an attempt's transport: where to report signs of work, and how long it
/// may hold a read's answer back before it must let it go (the per-try deadline; see
/// [`crate::native::transport`]).
#[derive(Debug, Clone)]
pub struct Live {
    pub activity: Arc<Activity>,
    pub hold: Duration,
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
    /// False when `head` was let go before the answer's head proper (a held answer released at
    /// the per-try deadline): its time says nothing about answer-head times.
    fn head_time_counts(_head: &Self::Head) -> bool {
        true
    }
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

/// The HTTP transport: one request per attempt through [`Backend`].
pub struct Http<'a> {
    plan: &'a Plan,
    body: SendBody,
    backend: Arc<dyn Backend>,
    auth: &'a str,
}

impl Transport for Http<'_> {
    type Head = Response<GBody>;

    fn send(
        &mut self,
        replica: &Arc<Replica>,
        threads: Option<usize>,
        _live: Live,
    ) -> Option<BoxFuture<Result<Self::Head, BackendError>>> {
        let plan = self.plan;
        let uri = format!("{}{}", replica.addr.base, plan.path_and_query(threads));
        // An empty body still says so: 18.16 answers a POST without Content-Length or
        // Transfer-Encoding with 411 (Code 381), and hyper writes neither for an empty body.
        let empty_post = plan.method == http::Method::POST
            && match &self.body {
                SendBody::Held(b) => plan.replace_body.as_ref().map_or(b.is_empty(), |t| t.is_empty()),
                SendBody::Once(_) => false,
            };
        let req_body = match &mut self.body {
            SendBody::Held(b) => match &plan.replace_body {
                // The rewritten statement, with the bytes it came with (invalid UTF-8 kept).
                Some(text) => full(Bytes::from(crate::request::encode_bytes(text))),
                None => full(b.clone()),
            },
            SendBody::Once(b) => b.take()?,
        };
        let mut req = Request::builder().method(plan.method.clone()).uri(uri).body(req_body).ok()?;
        *req.headers_mut() = plan.headers.clone();
        if empty_post {
            req.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from_static("0"));
        }
        req.headers_mut().insert(
            "authorization",
            http::HeaderValue::from_str(self.auth).unwrap_or(http::HeaderValue::from_static("")),
        );
        Some(self.backend.send(&replica.addr, req))
    }

    fn streamed(&self) -> bool {
        matches!(self.body, SendBody::Once(_))
    }

    fn is_success(head: &Self::Head) -> bool {
        head.status().is_success()
    }

    fn judge_error(head: Self::Head) -> BoxFuture<Judged<Self::Head>> {
        Box::pin(async move {
            // An error answer: small; read it to find the code.
            let (parts, rbody) = head.into_parts();
            let text =
                tokio::time::timeout(ERROR_BODY_TIMEOUT, read_limited(rbody, MAX_ERROR_BODY)).await.unwrap_or_default();
            let header = parts.headers.get("x-clickhouse-exception-code").and_then(|v| v.to_str().ok());
            match http_exception_code(header, &text) {
                Some(code) if may_run_elsewhere(code) => {
                    Judged::Busy(code, String::from_utf8_lossy(&text).trim().to_string())
                }
                _ => Judged::Answer(Response::from_parts(parts, full(text))),
            }
        })
    }

    fn went_down(&self, replica: &Replica) {
        self.backend.reset_pool(&replica.addr);
    }

    fn shape(&self) -> Option<u64> {
        // The text a read runs: its `query` parameter, then its body.
        let param = self.plan.params.iter().find(|(k, _)| k == "query").map_or("", |(_, v)| v.as_str());
        let body = match (&self.plan.replace_body, &self.body) {
            (Some(text), _) => text.as_str(),
            (None, SendBody::Held(b)) => std::str::from_utf8(b).ok()?,
            (None, SendBody::Once(_)) => return None,
        };
        Some(fingerprint(&format!("{param}\n{body}")))
    }
}

/// The client's body, as the attempts send it.
pub enum SendBody {
    /// Held whole: every attempt sends a copy.
    Held(Bytes),
    /// Streamed: only the first attempt can send it.
    Once(Option<GBody>),
}

/// The attempt whose answer goes to the client, with what must live as long as its body.
pub struct Won {
    pub replica: Arc<Replica>,
    pub inflight: InFlight,
    pub grant: Option<Grant>,
    pub guard: KillGuard,
}

/// How the attempts ended.
// One per request, moved once into `respond`: boxing the answer would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Outcome<H = Response<GBody>> {
    /// An answer head (success, or an error answer to pass on, its body already read).
    Answer { head: H, won: Won, retries: u32, hedged: bool },
    /// No answer: the status and the one-line message for the client.
    Failed { status: StatusCode, message: String, replica: Option<Arc<Replica>>, retries: u32 },
}

enum AttemptEnd<H> {
    Head(H),
    Failed(BackendError),
}

struct Running<H> {
    hedge: bool,
    /// It carries the client's streamed body: a broken exchange may be the client's fault.
    streamed: bool,
    started: Instant,
    inflight: InFlight,
    /// Its replica was healthy when it was sent.
    sent_healthy: bool,
    /// Set when the per-try deadline passed without an answer head: counts it as overdue on its
    /// replica, which makes a replica with many such attempts *slow now* (no hedges go there).
    overdue: Option<Overdue>,
    grant: Option<Grant>,
    guard: KillGuard,
    /// Signs of work from its transport.
    activity: Arc<Activity>,
    fut: BoxFuture<AttemptEnd<H>>,
    /// Fires when the attempt's replica is marked down (idempotent reads only).
    down: Option<Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>>,
}

impl<H> Running<H> {
    fn id(&self) -> (usize, usize) {
        let r = self.inflight.replica();
        (r.shard, r.index)
    }
    /// Ends the attempt: its query is cancelled on the server for `reason`.
    fn cancel(mut self, reason: &'static str) {
        self.guard.reason = reason;
    }
}

enum Event<H> {
    Deadline,
    Hedge,
    /// The liveness probe of silent attempts' replicas answered.
    Probed(Probe),
    Ended(usize, AttemptEnd<H>),
    Down(usize),
}

/// Runs the attempts for `plan` over HTTP.
pub async fn run(plan: &Plan, body: SendBody, ctx: &Ctx<'_>) -> Outcome {
    let mut http = Http { plan, body, backend: ctx.backend.clone(), auth: ctx.auth };
    attempts(plan, &mut http, ctx).await
}

/// Runs the attempts for `plan` over `transport`.
pub async fn attempts<T: Transport>(plan: &Plan, transport: &mut T, ctx: &Ctx<'_>) -> Outcome<T::Head> {
    let policy = Policy {
        latitude: plan.latitude,
        max_attempts: ctx.balancer.replicas().count() + 1,
        max_extra: ctx.hedging.max_extra,
        hedge_after: ctx.head_times.deadline(ctx.hedging),
    };
    // A read's shape, for the quarantine of queries of death.
    let shape = if plan.latitude.retry { transport.shape() } else { None };
    if let Some(r) = shape.and_then(|fp| ctx.quarantine.refused(fp)) {
        ctx.metrics.attempt.quarantine_refusals.inc();
        return refused_shape(plan, &r, ctx.quarantine.ttl());
    }
    ctx.retry_budget.deposit();
    let mut running: Vec<Running<T::Head>> = Vec::with_capacity(2);
    // Replicas not to pick again: one that refused a connection, went down or was busy; one
    // whose (perhaps pooled, stale) connection broke a second time.
    let mut tried: Vec<(usize, usize)> = Vec::new();
    let mut lost_once: Vec<(usize, usize)> = Vec::new();
    let (mut attempts, mut retries, mut hedged) = (0usize, 0u32, false);
    let (mut deadline_passed, mut refused_by_budget, mut held) = (false, false, false);
    let mut spared = false;
    let mut probe: Option<BoxFuture<Probe>> = None;
    // When to ping a replica that answered its last ping again: one deadline, doubling up to
    // [`MAX_RECHECK`], so a long read on a fast route does not ping every few milliseconds.
    let mut recheck = policy.hedge_after.unwrap_or_default();
    let mut refused_before = false;
    let mut deadline = Box::pin(tokio::time::sleep(plan.head_timeout));

    // The first attempt.
    let Some(first) = start(plan, transport, ctx, &[], None).await else {
        return no_replica(plan, None, 0, 0);
    };
    attempts += 1;
    running.push(first);
    let mut hedge_timer: Option<Pin<Box<tokio::time::Sleep>>> =
        policy.hedge_after.filter(|_| policy.can_hedge(1, 1)).map(|d| Box::pin(tokio::time::sleep(d)));

    loop {
        let event = std::future::poll_fn(|cx| {
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::Deadline);
            }
            if let Some(t) = hedge_timer.as_mut() {
                if t.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Event::Hedge);
                }
            }
            for (i, a) in running.iter_mut().enumerate() {
                if let Poll::Ready(end) = a.fut.as_mut().poll(cx) {
                    return Poll::Ready(Event::Ended(i, end));
                }
                if a.down.as_mut().is_some_and(|d| d.as_mut().poll(cx).is_ready()) {
                    return Poll::Ready(Event::Down(i));
                }
            }
            // After the attempts: a crashed replica's broken connection is seen before the
            // refused ping that would otherwise send its read elsewhere.
            if let Some(p) = probe.as_mut() {
                if let Poll::Ready(found) = p.as_mut().poll(cx) {
                    return Poll::Ready(Event::Probed(found));
                }
            }
            Poll::Pending
        })
        .await;
        match event {
            Event::Deadline => {
                let replica = running.first().map(|a| a.inflight.replica().clone());
                for a in running.drain(..) {
                    a.cancel("timeout");
                }
                return Outcome::Failed {
                    status: StatusCode::GATEWAY_TIMEOUT,
                    message: format!(
                        "Code: 159. chstorm gateway: no answer within {} s; the query was killed",
                        plan.head_timeout.as_secs()
                    ),
                    replica,
                    retries,
                };
            }
            Event::Hedge => {
                hedge_timer = None;
                // Counted once per request, however often the timer fires again.
                if !deadline_passed {
                    deadline_passed = true;
                    ctx.metrics.per_try_timeouts.inc();
                }
                let window = policy.hedge_after.unwrap_or_default();
                // A byte or a progress report within the deadline: the replica is working.
                let quiet = running.iter().map(|a| a.activity.silent_for()).min().unwrap_or_default();
                if quiet < window {
                    spare(&mut spared, ctx);
                    hedge_timer = Some(Box::pin(tokio::time::sleep(window - quiet)));
                    continue;
                }
                // Silent so far: does its replica answer at all?
                let timeout = window.max(MIN_PROBE);
                let probes: Vec<_> =
                    running.iter().map(|a| ctx.backend.alive(&a.inflight.replica().addr, timeout)).collect();
                probe = Some(Box::pin(any_alive(probes)));
            }
            Event::Probed(found) => {
                probe = None;
                let window = policy.hedge_after.unwrap_or_default();
                match found {
                    Probe::Alive => {
                        // Working (or queued) on it.
                        spare(&mut spared, ctx);
                        hedge_timer = Some(Box::pin(tokio::time::sleep(recheck)));
                        recheck = (recheck * 2).min(MAX_RECHECK).max(window);
                        continue;
                    }
                    Probe::Dead if !refused_before => {
                        // Its listener is closed. A crashed server drops our connection at the
                        // same moment (that failure is on its way, and a read that killed its
                        // replica must not go to another one); a server in graceful shutdown
                        // keeps it open: look again shortly, and hedge if it is still open.
                        refused_before = true;
                        hedge_timer = Some(Box::pin(tokio::time::sleep(DEAD_GRACE)));
                        continue;
                    }
                    // Silent, or refusing connections while it keeps ours open: hedge.
                    _ => {}
                }
                for a in running.iter_mut().filter(|a| a.overdue.is_none()) {
                    a.overdue = Some(Overdue::new(a.inflight.replica().clone()));
                }
                if policy.can_hedge(running.len(), attempts) {
                    let exclude = excluded(&tried, &running);
                    let shard = plan.target.shard();
                    // A hedge goes only to a healthy replica that can help: one that is not slow
                    // itself or, when this query waits on a stalled replica (no answer at all
                    // for a deadline: hung), one that is not stalled. None now (the others are
                    // down, busy with this query, or late like this one): look again one
                    // deadline later, budget untouched. When every replica is late the cause is
                    // not one replica, and a hedge would only add load where answers are
                    // already late.
                    let waits_on_stalled = running.iter().any(|a| a.inflight.replica().is_stalled(window));
                    let helps = move |r: &Replica| !r.is_slow_now() || (waits_on_stalled && !r.is_stalled(window));
                    if ctx.balancer.healthy_where(shard, &exclude, helps) {
                        if !ctx.retry_budget.withdraw() {
                            if !refused_by_budget {
                                refused_by_budget = true;
                                ctx.metrics.budget_exhausted.inc();
                            }
                        } else if let Some(a) = start(plan, transport, ctx, &exclude, Some(&helps)).await {
                            attempts += 1;
                            hedged = true;
                            ctx.metrics.hedges.inc();
                            ctx.metrics.attempt.hedge_reasons.get_or_create(&ReasonLabel { reason: "silent" }).inc();
                            running.push(a);
                        }
                    } else if ctx.balancer.has_healthy(shard, &exclude) && !held {
                        held = true;
                        ctx.metrics.hedges_held.inc();
                    }
                    if policy.can_hedge(running.len(), attempts) {
                        hedge_timer = policy.hedge_after.map(|d| Box::pin(tokio::time::sleep(d)));
                    }
                }
            }
            Event::Down(i) => {
                // Its replica was marked down. Move the query only when it can go somewhere
                // (a healthy replica, budget): a replica that is only slow may still answer, and
                // killing a query with nowhere to send it would turn a slow answer into an error.
                running[i].down = None;
                let id = running[i].id();
                let mut exclude = excluded(&tried, &running);
                exclude.push(id);
                let shard = plan.target.shard();
                if policy.retry(&Failure::Down, attempts) == Decision::Retry
                    && ctx.balancer.has_healthy(shard, &exclude)
                    && ctx.retry_budget.withdraw()
                {
                    if let Some(b) = start(plan, transport, ctx, &exclude, None).await {
                        let a = running.swap_remove(i);
                        tried.push(id);
                        a.cancel("replica_down");
                        attempts += 1;
                        retries += 1;
                        ctx.metrics.retries.inc();
                        running.push(b);
                    }
                }
            }
            Event::Ended(i, end) => {
                let mut a = running.swap_remove(i);
                let replica = a.inflight.replica().clone();
                if matches!(end, AttemptEnd::Head(_)) {
                    replica.answered();
                }
                let (failure, detail) = match end {
                    AttemptEnd::Head(head) if T::is_success(&head) => {
                        if let Some(fp) = shape {
                            ctx.quarantine.succeeded(fp);
                        }
                        if T::head_time_counts(&head) {
                            ctx.head_times.record(a.started.elapsed(), ctx.hedging.quantile);
                        }
                        if a.hedge {
                            ctx.metrics.hedge_wins.inc();
                        }
                        for l in running.drain(..) {
                            // A copy still without a head lost the race: its replica is slower.
                            l.inflight.replica().lost_race();
                            l.cancel("hedge_lost");
                        }
                        let won = Won { replica, inflight: a.inflight, grant: a.grant, guard: a.guard };
                        return Outcome::Answer { head, won, retries, hedged };
                    }
                    AttemptEnd::Head(head) => {
                        // The server answered with an error: its query has ended.
                        a.guard.disarm();
                        match T::judge_error(head).await {
                            Judged::Busy(code, text) => {
                                // 216 (query id taken) is no sign of trouble on the replica.
                                if retry_safe_code(code) && ctx.balancer.report_failure(&replica) {
                                    went_down(
                                        ctx,
                                        &*transport,
                                        &replica,
                                        &format!("ClickHouse code {code}"),
                                        &plan.query_id,
                                    );
                                }
                                tried.push((replica.shard, replica.index));
                                (Failure::Busy(code), text)
                            }
                            Judged::Answer(head) => {
                                // A real answer (a wrong query is wrong everywhere): it wins.
                                for l in running.drain(..) {
                                    l.cancel("hedge_lost");
                                }
                                let won = Won { replica, inflight: a.inflight, grant: a.grant, guard: a.guard };
                                return Outcome::Answer { head, won, retries, hedged };
                            }
                        }
                    }
                    AttemptEnd::Failed(e) => {
                        // Nothing came back: the query did not run (connect), or its connection
                        // broke and the server cancels it.
                        a.guard.disarm();
                        let id = (replica.shard, replica.index);
                        if e.connect || lost_once.contains(&id) {
                            tried.push(id);
                        } else {
                            lost_once.push(id);
                        }
                        // A streamed body that broke may be the client's doing (it left, or
                        // stalled past its idle timeout): only a refused connection blames the
                        // replica then.
                        if (e.connect || !a.streamed) && ctx.balancer.report_failure(&replica) {
                            went_down(ctx, &*transport, &replica, &e.message, &plan.query_id);
                        }
                        let detail = format!("replica {} ({}) failed: {}", replica.label(), replica.addr.base, e);
                        // Its replica died while running it: a query of death, unless its shape
                        // ran fine lately (then the replica died of something else).
                        if let Some(fp) = shape
                            .filter(|fp| !e.connect && !a.streamed && a.sent_healthy && !ctx.quarantine.known_good(*fp))
                        {
                            if ctx.backend.alive(&replica.addr, DEATH_PROBE).await == Probe::Dead {
                                for l in running.drain(..) {
                                    l.cancel("replica_down");
                                }
                                return query_of_death(plan, ctx, fp, &replica, &e.message, retries);
                            }
                        }
                        if e.connect {
                            (Failure::Unsent(e.message), detail)
                        } else {
                            (Failure::Lost(e.message), detail)
                        }
                    }
                };
                if !running.is_empty() {
                    // Another copy is still on its way: wait for it.
                    continue;
                }
                let status = match failure {
                    Failure::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
                    _ => StatusCode::BAD_GATEWAY,
                };
                let give_up =
                    |message: String| Outcome::Failed { status, message, replica: Some(replica.clone()), retries };
                if policy.retry(&failure, attempts) == Decision::Stop {
                    return give_up(failed_message(&failure, &detail));
                }
                if !ctx.retry_budget.withdraw() {
                    ctx.metrics.budget_exhausted.inc();
                    return give_up(failed_message(&failure, &detail));
                }
                match start(plan, transport, ctx, &excluded(&tried, &running), None).await {
                    Some(a) => {
                        attempts += 1;
                        retries += 1;
                        ctx.metrics.retries.inc();
                        running.push(a);
                        if policy.can_hedge(running.len(), attempts) {
                            hedge_timer = policy.hedge_after.map(|d| Box::pin(tokio::time::sleep(d)));
                        }
                    }
                    // No replica left: the last failure says more than "no replica".
                    None => return give_up(failed_message(&failure, &detail)),
                }
            }
        }
    }
}

/// The shortest wait for a silent replica's `/ping` (250 ms): a working 18.16 answers one in
/// well under a millisecond, but on a loaded machine (2 cores, load average 16) it took over
/// 50 ms, and a ping taken for silence starts the read a second time.
const MIN_PROBE: Duration = Duration::from_millis(250);

/// How long a read whose replica refused a ping waits for its own connection to break before
/// it is hedged (100 ms): a crashed server's connections break at once, a server in graceful
/// shutdown keeps them open.
const DEAD_GRACE: Duration = Duration::from_millis(100);

/// The longest wait before a replica that answered its last ping is pinged again (1 s).
const MAX_RECHECK: Duration = Duration::from_secs(1);

/// Counts a read left alone past its deadline because it showed it is working (once a request).
fn spare(spared: &mut bool, ctx: &Ctx<'_>) {
    if !*spared {
        *spared = true;
        ctx.metrics.attempt.hedges_spared.inc();
    }
}

/// Alive if any replica answered; Dead if every one is gone; else Silent.
async fn any_alive(probes: Vec<BoxFuture<Probe>>) -> Probe {
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

/// The attempt policy's metrics (registered with the others in [`Metrics`]).
#[derive(Default)]
pub struct AttemptMetrics {
    /// Hedged copies sent, by reason (`silent`: no byte, progress or ping for the deadline).
    pub hedge_reasons:
        prometheus_client::metrics::family::Family<ReasonLabel, prometheus_client::metrics::counter::Counter>,
    /// Reads past their per-try deadline left alone because they showed they were working.
    pub hedges_spared: prometheus_client::metrics::counter::Counter,
    /// Reads held to have killed their replica (not resent; their shape refused).
    pub query_deaths: prometheus_client::metrics::counter::Counter,
    /// Reads refused because their shape killed a replica within `limits.query_of_death_ttl`.
    pub quarantine_refusals: prometheus_client::metrics::counter::Counter,
}

/// The `reason` label of a hedge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

impl AttemptMetrics {
    /// Registers them in `r`.
    pub fn register(&self, r: &mut prometheus_client::registry::Registry) {
        r.register("chstorm_gateway_hedge_reasons", "Hedged copies sent, by reason", self.hedge_reasons.clone());
        r.register(
            "chstorm_gateway_hedges_spared",
            "Reads past their per-try deadline not hedged because they showed progress",
            self.hedges_spared.clone(),
        );
        r.register(
            "chstorm_gateway_query_deaths",
            "Reads whose replica died while running them (not resent; their shape refused)",
            self.query_deaths.clone(),
        );
        r.register(
            "chstorm_gateway_quarantine_refusals",
            "Reads refused because a read of their shape killed a replica",
            self.quarantine_refusals.clone(),
        );
    }
}

/// How long the check that a replica died waits for its `/ping` (1 s): a dead server refuses
/// the connection at once.
const DEATH_PROBE: Duration = Duration::from_secs(1);

/// The read of shape `fp` killed `replica`: refuse the shape, count, log, and tell the client.
fn query_of_death<H>(
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
        serde_json::json!({"query_id": plan.query_id, "replica": replica.label(), "url": replica.addr.base,
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
    }
}

/// A read whose shape is refused: the client's one-line error.
fn refused_shape<H>(plan: &Plan, r: &quarantine::Refusal, ttl: Duration) -> Outcome<H> {
    crate::log::log(
        "info",
        "query of death refused",
        serde_json::json!({"query_id": plan.query_id, "replica": r.replica, "refused_for_s": r.left.as_secs()}),
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
    }
}

/// Reads at most `limit` bytes of `body` (what came before an error, if one comes).
async fn read_limited(mut body: GBody, limit: usize) -> Bytes {
    let mut buf = bytes::BytesMut::new();
    while buf.len() < limit {
        match body.frame().await {
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    buf.extend_from_slice(&d[..d.len().min(limit - buf.len())]);
                }
            }
            _ => break,
        }
    }
    buf.freeze()
}

/// Replicas a new attempt must not go to: those tried, and those with an attempt running.
fn excluded<H>(tried: &[(usize, usize)], running: &[Running<H>]) -> Vec<(usize, usize)> {
    tried.iter().copied().chain(running.iter().map(Running::id)).collect()
}

/// The client's message when the attempts give up: a busy server's own exception text, else a
/// ClickHouse-style NETWORK_ERROR line.
fn failed_message(failure: &Failure, detail: &str) -> String {
    match failure {
        Failure::Busy(_) => detail.to_string(),
        _ => format!("Code: 210. chstorm gateway: {detail}"),
    }
}

fn no_replica<H>(plan: &Plan, replica: Option<Arc<Replica>>, attempts: usize, retries: u32) -> Outcome<H> {
    let shard = match plan.target {
        Target::Shard(s) => format!(" for shard {}", s + 1),
        _ => String::new(),
    };
    Outcome::Failed {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: format!("Code: 279. chstorm gateway: no replica left to try{shard} after {attempts} attempts"),
        replica,
        retries,
    }
}

/// A replica was just marked down by a failed request: forget its pooled connections and log.
fn went_down<T: Transport>(ctx: &Ctx<'_>, transport: &T, replica: &Replica, why: &str, query_id: &str) {
    ctx.backend.reset_pool(&replica.addr);
    transport.went_down(replica);
    crate::log::log(
        "warn",
        "replica down (request failed)",
        serde_json::json!({"replica": replica.label(), "url": replica.addr.base, "error": why, "query_id": query_id}),
    );
}

/// Starts an attempt on a replica not tried and not running: picks it, takes its thread grant,
/// and sends the query. None when no replica is left (or a streamed body is gone).
async fn start<T: Transport>(
    plan: &Plan,
    transport: &mut T,
    ctx: &Ctx<'_>,
    exclude: &[(usize, usize)],
    hedge_to: Option<&(dyn Fn(&Replica) -> bool + Sync)>,
) -> Option<Running<T::Head>> {
    let hedge = hedge_to.is_some();
    let inflight = match (plan.target, hedge_to) {
        (Target::Session(h), _) => ctx.balancer.pick_sticky(h, exclude),
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
    let hold = ctx.head_times.deadline(ctx.hedging).unwrap_or(ctx.hedging.max_delay.0);
    let live = Live { activity: activity.clone(), hold };
    let send = transport.send(&replica, grant.as_ref().map(Grant::threads), live)?;
    // The query may start running as soon as it is sent: guard it from here on.
    let guard = KillGuard {
        armed: true,
        reason: "client_gone",
        query_id: plan.query_id.clone(),
        replica: replica.addr.clone(),
        auth: ctx.auth.to_string(),
        backend: ctx.backend.clone(),
        metrics: ctx.metrics.clone(),
    };
    // Only attempts that may move listen to the replica going down.
    let down = plan.latitude.hedge.then(|| Box::pin(replica.down_signal().cancelled_owned()));
    let fut: BoxFuture<AttemptEnd<T::Head>> = Box::pin(async move {
        match send.await {
            Ok(head) => AttemptEnd::Head(head),
            Err(e) => AttemptEnd::Failed(e),
        }
    });
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
        fut,
        down,
    })
}

#[cfg(test)]
mod tests;
