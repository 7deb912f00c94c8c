//! The attempt loop against a fake backend, in paused time: every decision is deterministic.

use super::watch::DEAD_GRACE;
use super::*;
use crate::cluster::replica::Overdue;
use crate::cluster::upstream::{full, GBody, Probe};
use crate::config::{Config, HedgeDelay, User};
use crate::metrics::ReasonLabel;
use crate::query::plan::plan;
use crate::query::plan::Target;
use crate::query::request::{BodyShape, QueryRequest};
use ::http::Response;
use bytes::Bytes;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

const EXAMPLE: &str = include_str!("../../../../docs/gateway.example.yaml");
const R11: &str = "http://127.0.0.1:18123";
const R12: &str = "http://127.0.0.1:18124";
const R21: &str = "http://127.0.0.1:18125";
const R22: &str = "http://127.0.0.1:18126";

/// What a fake replica does with a request.
#[derive(Clone, Copy, Debug)]
enum Behave {
    /// Answers after a delay with a status and a body.
    Answer(Duration, u16, &'static str),
    /// Accepts and never answers (a SIGSTOPped server).
    Hang,
    /// Refuses the connection.
    Refuse,
    /// Breaks the connection after a delay.
    Reset(Duration),
    /// Sends a 200 head and part of its answer after a delay, then breaks the connection (a
    /// server killed between its head and its last byte).
    BreakAfterHead(Duration, &'static str),
    /// Sends a 200 head and part of its answer after a delay, then nothing more (a server
    /// SIGSTOPped between its data and its last chunk).
    HangAfterHead(Duration, &'static str),
}

#[derive(Default)]
struct Fake {
    behave: Mutex<HashMap<&'static str, Behave>>,
    sent: Mutex<Vec<(String, String)>>,
    kills: Mutex<Vec<(String, String)>>,
    /// Each send's `Authorization` and pool slot, and each kill's `Authorization`.
    logins: Mutex<Vec<(String, usize)>>,
    kill_auths: Mutex<Vec<String>>,
    resets: Mutex<Vec<String>>,
    /// What a `/ping` finds, where it differs from what the replica's behaviour implies.
    probe: Mutex<HashMap<&'static str, Probe>>,
    pings: Mutex<Vec<String>>,
    /// When each ping was sent.
    ping_times: Mutex<Vec<tokio::time::Instant>>,
    /// How long a ping the replica answers takes (none: at once).
    ping_delay: Mutex<HashMap<&'static str, Duration>>,
    /// When pings were dropped before their answer.
    pings_dropped: Arc<Mutex<Vec<tokio::time::Instant>>>,
}

/// An answer body that yields its bytes, then breaks (`breaks`) or gives nothing more, ever.
struct PartThen {
    part: Option<Bytes>,
    breaks: bool,
}

impl http_body::Body for PartThen {
    type Data = Bytes;
    type Error = crate::cluster::upstream::BoxError;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match self.part.take() {
            Some(b) => std::task::Poll::Ready(Some(Ok(http_body::Frame::data(b)))),
            None if self.breaks => std::task::Poll::Ready(Some(Err("connection reset".into()))),
            None => std::task::Poll::Pending,
        }
    }
}

/// Notes when a ping is dropped before its answer.
struct DropNote(Option<Arc<Mutex<Vec<tokio::time::Instant>>>>);

impl DropNote {
    fn answered(&mut self) {
        self.0 = None;
    }
}

impl Drop for DropNote {
    fn drop(&mut self) {
        if let Some(n) = self.0.take() {
            n.lock().unwrap().push(tokio::time::Instant::now());
        }
    }
}

impl Fake {
    fn with(rules: &[(&'static str, Behave)]) -> Arc<Fake> {
        let f = Fake::default();
        f.behave.lock().unwrap().extend(rules.iter().copied());
        Arc::new(f)
    }
    fn sent_to(&self) -> Vec<String> {
        self.sent.lock().unwrap().iter().map(|(b, _)| b.clone()).collect()
    }
    /// Its `/ping` finds `p` (silent: a server too stuck to answer a ping, yet answering late).
    fn ping_finds(&self, r: &'static str, p: Probe) {
        self.probe.lock().unwrap().insert(r, p);
    }
    fn kills(&self) -> Vec<(String, String)> {
        self.kills.lock().unwrap().clone()
    }
}

impl Backend for Fake {
    fn send(
        &self,
        replica: &crate::config::ReplicaAddr,
        req: crate::cluster::upstream::BackendRequest,
    ) -> BoxFuture<Result<Response<GBody>, BackendError>> {
        self.sent.lock().unwrap().push((replica.base.clone(), req.target));
        let auth = req.auth.as_ref().map(|a| a.to_str().unwrap_or("?").to_string()).unwrap_or_default();
        self.logins.lock().unwrap().push((auth, req.pool));
        let b = self.behave.lock().unwrap().get(replica.base.as_str()).copied().unwrap_or(Behave::Hang);
        Box::pin(async move {
            match b {
                Behave::Answer(d, status, body) => {
                    tokio::time::sleep(d).await;
                    let mut r = Response::new(full(body));
                    *r.status_mut() = StatusCode::from_u16(status).unwrap();
                    Ok(r)
                }
                Behave::Hang => std::future::pending().await,
                Behave::Refuse => Err(BackendError { connect: true, message: "connection refused".into() }),
                Behave::Reset(d) => {
                    tokio::time::sleep(d).await;
                    Err(BackendError { connect: false, message: "connection reset".into() })
                }
                Behave::BreakAfterHead(d, part) | Behave::HangAfterHead(d, part) => {
                    tokio::time::sleep(d).await;
                    let breaks = matches!(b, Behave::BreakAfterHead(..));
                    let body = PartThen { part: Some(Bytes::from(part)), breaks };
                    Ok(Response::new(http_body_util::BodyExt::boxed_unsync(body)))
                }
            }
        })
    }
    fn kill(&self, replica: &crate::config::ReplicaAddr, auth: &str, query_id: &str) -> BoxFuture<bool> {
        self.kill_auths.lock().unwrap().push(auth.to_string());
        self.kills.lock().unwrap().push((replica.base.clone(), query_id.to_string()));
        Box::pin(async { true })
    }
    fn reset_pool(&self, replica: &crate::config::ReplicaAddr) {
        self.resets.lock().unwrap().push(replica.base.clone());
    }
    fn alive(&self, replica: &crate::config::ReplicaAddr, timeout: Duration) -> BoxFuture<Probe> {
        self.pings.lock().unwrap().push(replica.base.clone());
        self.ping_times.lock().unwrap().push(tokio::time::Instant::now());
        let delay = self.ping_delay.lock().unwrap().get(replica.base.as_str()).copied().unwrap_or_default();
        let mut note = DropNote(Some(self.pings_dropped.clone()));
        let set = self.probe.lock().unwrap().get(replica.base.as_str()).copied();
        let b = self.behave.lock().unwrap().get(replica.base.as_str()).copied().unwrap_or(Behave::Hang);
        let found = set.unwrap_or(match b {
            Behave::Hang | Behave::HangAfterHead(..) => Probe::Silent,
            Behave::Refuse => Probe::Dead,
            Behave::Answer(..) | Behave::Reset(_) | Behave::BreakAfterHead(..) => Probe::Alive,
        });
        Box::pin(async move {
            if found == Probe::Silent {
                tokio::time::sleep(timeout).await;
            } else {
                tokio::time::sleep(delay.min(timeout)).await;
            }
            note.answered();
            if delay >= timeout {
                return Probe::Silent;
            }
            found
        })
    }
}

/// The backends' credentials in these tests.
fn test_login() -> &'static Arc<BackendLogin> {
    static LOGIN: std::sync::LazyLock<Arc<BackendLogin>> = std::sync::LazyLock::new(|| {
        Arc::new(BackendLogin::new(&crate::config::Login { user: "x".into(), password: String::new() }, 0))
    });
    &LOGIN
}

struct World {
    cfg: Config,
    balancer: Balancer,
    metrics: Arc<Metrics>,
    backend: Arc<dyn Backend>,
    budget: TpsBudget,
    head_times: HeadTimes,
    quarantine: crate::attempt::quarantine::Quarantine,
}

impl World {
    fn new(fake: &Arc<Fake>) -> World {
        let cfg = Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap();
        let balancer = Balancer::with_seed(&cfg.clusters["storm"], 7);
        World {
            cfg,
            balancer,
            metrics: Arc::new(Metrics::default()),
            backend: fake.clone(),
            budget: TpsBudget::new(Duration::from_secs(10), 10, 0.1),
            head_times: HeadTimes::default(),
            quarantine: crate::attempt::quarantine::Quarantine::new(Duration::from_secs(300)),
        }
    }

    /// Marks the shape of `plan` (held, empty body) as having run fine lately.
    fn known_good(&self, plan: &Plan) {
        let backend = self.backend.clone();
        let auth = http::HeaderValue::from_static("Basic Og==");
        let http = Http { plan, parts: HttpParts::default(), body: held(), backend, auth, pool: 0, hold_for: None };
        self.quarantine.succeeded(http.shape().expect("a held read has a shape"));
    }

    fn user(&self) -> User {
        self.cfg.users["default"].clone()
    }

    fn plan(&self, sql: &str, shape: BodyShape) -> Plan {
        let input = QueryRequest { body: shape, ..QueryRequest::held(vec![], sql, 300) };
        plan(input, &self.user(), &self.cfg.clusters["storm"], None, || "qid-1".into()).unwrap()
    }

    async fn run(&self, plan: &Plan, body: SendBody) -> Outcome {
        self.run_as(plan, body, test_login()).await
    }

    /// [`World::run`] as `login`.
    async fn run_as(&self, plan: &Plan, body: SendBody, login: &Arc<BackendLogin>) -> Outcome {
        let ctx = Ctx {
            backend: &self.backend,
            balancer: &self.balancer,
            threads: None,
            login,
            retry_budget: &self.budget,
            metrics: &self.metrics,
            hedging: &self.cfg.hedging,
            head_times: &self.head_times,
            quarantine: &self.quarantine,
        };
        run(plan, HttpParts::default(), body, &ctx).await
    }
}

/// A routed read: shop 123 lives on shard 2 (replicas R21, R22).
const ROUTED_READ: &str = "SELECT * FROM items WHERE shop_id = 123";

/// The replica that answered and whether a hedge was sent; the answer counts as read to its
/// end (its KILL guard disarmed), as a client that got the whole answer.
fn answered(o: &mut Outcome) -> (String, bool) {
    match o {
        Outcome::Answer(a) => {
            a.won.guard.disarm();
            (a.won.replica.addr.base.clone(), a.hedged)
        }
        Outcome::Failed { status, message, .. } => panic!("failed: {status} {message}"),
    }
}

/// Lets spawned KILL tasks run.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

fn held() -> SendBody {
    SendBody::Held(Bytes::new())
}

/// Runs `run` (a read of shard 2, both replicas hanging) until its first attempt is out, then
/// makes the other replica answer in 5 ms: (the first replica, the other, the outcome).
async fn first_hangs_other_answers(
    fake: &Fake,
    run: impl std::future::Future<Output = Outcome>,
) -> (String, &'static str, Outcome) {
    tokio::pin!(run);
    tokio::select! { _ = &mut run => unreachable!("nothing answers yet"), _ = tokio::time::sleep(Duration::from_millis(1)) => {} }
    let first = fake.sent_to()[0].clone();
    let other = if first == R21 { R22 } else { R21 };
    fake.behave.lock().unwrap().insert(other, Behave::Answer(Duration::from_millis(5), 200, "1\n"));
    (first, other, run.await)
}

#[tokio::test(start_paused = true)]
async fn every_attempt_and_the_losers_kill_go_as_the_querys_login() {
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
    let w = World::new(&fake);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    w.known_good(&p);
    let tenant = Arc::new(BackendLogin::new(&crate::config::Login { user: "t".into(), password: "p".into() }, 2));
    let (_, other, mut o) = first_hangs_other_answers(&fake, w.run_as(&p, held(), &tenant)).await;
    assert_eq!(answered(&mut o), (other.to_string(), true), "hedged to the other replica");
    settle().await;
    let sent = fake.logins.lock().unwrap().clone();
    assert_eq!(sent, vec![("Basic dDpw".to_string(), 2); 2], "both attempts: the login's header, its pools");
    assert_eq!(fake.kills().len(), 1);
    assert_eq!(*fake.kill_auths.lock().unwrap(), ["Basic dDpw"], "the loser's KILL as the login that ran it");
}

#[tokio::test(start_paused = true)]
async fn a_slow_replica_is_hedged_the_first_answer_wins_and_the_loser_is_killed() {
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
    let w = World::new(&fake);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    w.known_good(&p);
    assert_eq!(p.target, Target::Shard(1));
    // Whichever replica is picked first hangs; the other answers in 5 ms.
    let t0 = tokio::time::Instant::now();
    let (first, other, mut o) = first_hangs_other_answers(&fake, w.run(&p, held())).await;
    let (winner, hedged) = answered(&mut o);
    assert_eq!((winner.as_str(), hedged), (other, true));
    // The cold per-try deadline is 100 ms; its ping, sent at 50 ms, is unanswered then and the
    // replica answered nothing at all: hung, hedged at the deadline. The hedge answered 5 ms later.
    assert_eq!(t0.elapsed(), crate::attempt::hedge::COLD_DELAY + Duration::from_millis(5));
    settle().await;
    assert_eq!(fake.kills(), vec![(first.clone(), "qid-1".to_string())], "the loser is killed by its query_id");
    assert_eq!((w.metrics.hedges.get(), w.metrics.hedge_wins.get(), w.metrics.per_try_timeouts.get()), (1, 1, 1));
    // The slow replica is penalised: the next pick goes to the fast one.
    let r = w.balancer.shards[1].iter().find(|r| r.addr.base == first).unwrap();
    assert!(r.score(std::time::Instant::now()) > 3.0);
}

#[tokio::test(start_paused = true)]
async fn a_replica_marked_down_re_issues_its_waiting_reads_at_once() {
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
    let mut w = World::new(&fake);
    w.cfg.hedging.delay = HedgeDelay::Off;
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let run = w.run(&p, held());
    tokio::pin!(run);
    tokio::select! { _ = &mut run => unreachable!(), _ = tokio::time::sleep(Duration::from_millis(1)) => {} }
    let first = fake.sent_to()[0].clone();
    let other = if first == R21 { R22 } else { R21 };
    fake.behave.lock().unwrap().insert(other, Behave::Answer(Duration::from_millis(2), 200, "1\n"));
    // 3 s later a probe marks the hung replica down.
    let t0 = tokio::time::Instant::now();
    let (mut o, _) = tokio::join!(&mut run, async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let r = w.balancer.replicas().find(|r| r.addr.base == first).unwrap().clone();
        assert!(w.balancer.set_health(&r, false));
    });
    assert_eq!(answered(&mut o).0, other);
    assert_eq!(t0.elapsed(), Duration::from_secs(3) + Duration::from_millis(2), "re-issued at once");
    settle().await;
    assert_eq!(fake.kills(), vec![(first, "qid-1".to_string())]);
    assert_eq!(w.metrics.killed.get_or_create(&crate::metrics::KillLabel { reason: "replica_down" }).get(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_budget_means_no_hedge() {
    let fake = Fake::with(&[
        (R21, Behave::Answer(Duration::from_millis(500), 200, "1\n")),
        (R22, Behave::Answer(Duration::from_millis(500), 200, "1\n")),
    ]);
    fake.ping_finds(R21, Probe::Silent);
    fake.ping_finds(R22, Probe::Silent);
    let mut w = World::new(&fake);
    w.budget = TpsBudget::new(Duration::from_secs(10), 0, 0.0);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let mut o = w.run(&p, held()).await;
    assert!(!answered(&mut o).1, "not hedged");
    assert_eq!(fake.sent_to().len(), 1);
    assert_eq!((w.metrics.per_try_timeouts.get(), w.metrics.hedges.get(), w.metrics.budget_exhausted.get()), (1, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_write_is_never_hedged_nor_re_issued() {
    let fake = Fake::with(&[
        (R11, Behave::Answer(Duration::from_secs(2), 200, "")),
        (R12, Behave::Answer(Duration::from_secs(2), 200, "")),
        (R21, Behave::Answer(Duration::from_secs(2), 200, "")),
        (R22, Behave::Answer(Duration::from_secs(2), 200, "")),
    ]);
    let w = World::new(&fake);
    let p = w.plan("INSERT INTO t VALUES (1)", BodyShape::Held);
    let run = w.run(&p, held());
    tokio::pin!(run);
    tokio::select! { _ = &mut run => unreachable!(), _ = tokio::time::sleep(Duration::from_millis(1)) => {} }
    let first = fake.sent_to()[0].clone();
    // Even its replica going down does not move it.
    let r = w.balancer.replicas().find(|r| r.addr.base == first).unwrap().clone();
    w.balancer.set_health(&r, false);
    let mut o = run.await;
    assert_eq!(answered(&mut o), (first, false));
    assert_eq!(fake.sent_to().len(), 1);
    assert_eq!(w.metrics.hedges.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_streamed_body_is_never_sent_twice() {
    let fake = Fake::with(&[
        (R11, Behave::Reset(Duration::from_millis(1))),
        (R12, Behave::Reset(Duration::from_millis(1))),
        (R21, Behave::Reset(Duration::from_millis(1))),
        (R22, Behave::Reset(Duration::from_millis(1))),
    ]);
    let w = World::new(&fake);
    let p = w.plan("INSERT INTO t FORMAT TSV\n1\n", BodyShape::Streamed);
    let o = w.run(&p, SendBody::Once(Some(full("1\n")))).await;
    match o {
        Outcome::Failed { status, message, retries, .. } => {
            assert_eq!((status, retries), (StatusCode::BAD_GATEWAY, 0));
            assert!(message.starts_with("Code: 210.") && message.contains("connection reset"), "{message}");
        }
        Outcome::Answer(_) => panic!("answered"),
    }
    assert_eq!(fake.sent_to().len(), 1);
    assert!(w.balancer.replicas().all(|r| r.is_healthy()), "a broken upload may be the client's fault");
}

#[tokio::test(start_paused = true)]
async fn refused_connections_are_resent_even_for_writes_and_busy_answers_retried_for_reads() {
    // A write whose first replica refuses the connection goes to another: it never ran.
    let fake = Fake::with(&[
        (R11, Behave::Refuse),
        (R12, Behave::Refuse),
        (R21, Behave::Refuse),
        (R22, Behave::Answer(Duration::from_millis(1), 200, "")),
    ]);
    let w = World::new(&fake);
    // R22 penalised: power of two choices never picks it first (it loses every comparison).
    w.balancer.shards[1][1].lost_race();
    let p = w.plan("INSERT INTO t VALUES (1)", BodyShape::Held);
    let mut o = w.run(&p, held()).await;
    assert_eq!(answered(&mut o).0, R22);
    assert!(w.metrics.retries.get() >= 1);
    // A read answered 202 (too many queries) by one replica goes to the other.
    let fake = Fake::with(&[
        (
            R21,
            Behave::Answer(
                Duration::ZERO,
                500,
                "Code: 202, e.displayText() = DB::Exception: Too many simultaneous queries",
            ),
        ),
        (
            R22,
            Behave::Answer(
                Duration::ZERO,
                500,
                "Code: 202, e.displayText() = DB::Exception: Too many simultaneous queries",
            ),
        ),
    ]);
    let w = World::new(&fake);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    match w.run(&p, held()).await {
        Outcome::Failed { status, message, retries, .. } => {
            assert_eq!((status, retries), (StatusCode::SERVICE_UNAVAILABLE, 1));
            assert!(message.starts_with("Code: 202"), "the server's own message: {message}");
        }
        Outcome::Answer(_) => panic!("answered"),
    }
    assert_eq!(fake.sent_to().len(), 2, "both replicas of the shard, then no replica left");
    // A read answered 216 (its query id still taken by a hedged copy being killed there) goes to
    // the other replica, and the first is not marked down: it is not in trouble.
    let fake = Fake::with(&[
        (
            R21,
            Behave::Answer(
                Duration::ZERO,
                500,
                "Code: 216, e.displayText() = DB::Exception: Query with id = q is already running.",
            ),
        ),
        (R22, Behave::Answer(Duration::ZERO, 200, "1\n")),
    ]);
    let w = World::new(&fake);
    w.balancer.shards[1][1].lost_race();
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let mut o = w.run(&p, held()).await;
    assert_eq!(answered(&mut o).0, R22);
    assert_eq!(fake.sent_to().len(), 2, "216 on the first replica, then the other");
    assert!(w.balancer.shards[1][0].is_healthy(), "216 marks no replica down");
    // A wrong query is wrong everywhere: its error answer is passed on at once.
    let fake = Fake::with(&[
        (R21, Behave::Answer(Duration::ZERO, 404, "Code: 60, e.displayText() = DB::Exception: Table x doesn't exist")),
        (R22, Behave::Answer(Duration::ZERO, 404, "Code: 60")),
    ]);
    let w = World::new(&fake);
    let o = w.run(&w.plan(ROUTED_READ, BodyShape::Held), held()).await;
    match o {
        Outcome::Answer(a) => assert_eq!((a.head.resp.status().as_u16(), a.retries), (404, 0)),
        Outcome::Failed { .. } => panic!("failed"),
    }
    assert_eq!(fake.sent_to().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_session_stays_on_its_replica() {
    let fake =
        Fake::with(&[(R11, Behave::Refuse), (R12, Behave::Refuse), (R21, Behave::Refuse), (R22, Behave::Refuse)]);
    let w = World::new(&fake);
    let input = QueryRequest::held(vec![("session_id".into(), "s1".into())], ROUTED_READ, 300);
    let p = plan(input, &w.user(), &w.cfg.clusters["storm"], None, || "q".into()).unwrap();
    assert!(matches!(w.run(&p, held()).await, Outcome::Failed { retries: 0, .. }));
    assert_eq!(fake.sent_to().len(), 1, "a session's state lives on one replica: no retry elsewhere");
}

#[tokio::test(start_paused = true)]
async fn the_head_deadline_kills_every_copy() {
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
    let mut w = World::new(&fake);
    let mut u = w.user();
    u.max_execution_time = Some(Duration::from_secs(2));
    w.cfg.users.insert("default".into(), u);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    assert_eq!(p.head_timeout, Duration::from_secs(3));
    let t0 = tokio::time::Instant::now();
    match w.run(&p, held()).await {
        Outcome::Failed { status, message, .. } => {
            assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
            assert!(message.starts_with("Code: 159."), "{message}");
        }
        Outcome::Answer(_) => panic!("answered"),
    }
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    settle().await;
    let mut killed: Vec<String> = fake.kills().into_iter().map(|(r, _)| r).collect();
    killed.sort();
    assert_eq!(killed, vec![R21.to_string(), R22.to_string()], "the first copy and its hedge");
}

#[tokio::test(start_paused = true)]
async fn a_hedge_waits_for_a_healthy_replica_and_spends_no_budget_meanwhile() {
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Answer(Duration::from_millis(2), 200, "1\n"))]);
    let w = World::new(&fake);
    let r22 = w.balancer.shards[1][1].clone();
    w.balancer.set_health(&r22, false);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let t0 = tokio::time::Instant::now();
    let (mut o, _) = tokio::join!(w.run(&p, held()), async {
        // R22 comes back 250 ms in; the hung R21's read, looked at every deadline (100, 200 and
        // 300 ms), finds no healthy replica before 300 ms: the hedge goes to R22 then.
        tokio::time::sleep(Duration::from_millis(250)).await;
        w.balancer.set_health(&r22, true);
    });
    assert_eq!(answered(&mut o), (R22.to_string(), true));
    assert_eq!(t0.elapsed(), crate::attempt::hedge::COLD_DELAY * 3 + Duration::from_millis(2));
    assert_eq!((w.metrics.per_try_timeouts.get(), w.metrics.hedges.get(), w.metrics.budget_exhausted.get()), (1, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_replica_marked_down_keeps_its_query_when_there_is_nowhere_to_move_it() {
    // Both replicas of the shard are slow (a loaded machine): probes mark them down, but the
    // query that was about to answer is not killed for nothing.
    let fake = Fake::with(&[
        (R21, Behave::Answer(Duration::from_secs(2), 200, "1\n")),
        (R22, Behave::Answer(Duration::from_secs(2), 200, "1\n")),
    ]);
    let mut w = World::new(&fake);
    w.cfg.hedging.delay = HedgeDelay::Off;
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let (mut o, _) = tokio::join!(w.run(&p, held()), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for r in w.balancer.shards[1].clone() {
            w.balancer.set_health(&r, false);
        }
    });
    let (_, hedged) = answered(&mut o);
    assert!(!hedged);
    assert_eq!(fake.sent_to().len(), 1, "not moved: no healthy replica to move it to");
    settle().await;
    assert!(fake.kills().is_empty(), "and not killed");
}

/// Eight routed reads at once on shard 2; returns how many were hedged.
async fn eight_at_once(w: &World, p: &Plan) -> usize {
    let r = || w.run(p, held());
    let (a, b, c, d, e, f, g, h) = tokio::join!(r(), r(), r(), r(), r(), r(), r(), r());
    [a, b, c, d, e, f, g, h].iter_mut().map(answered).filter(|(_, hedged)| *hedged).count()
}

#[tokio::test(start_paused = true)]
async fn when_every_replica_is_late_hedges_are_held() {
    // Both replicas of the shard answer in 500 ms (a loaded machine): once more than a quarter
    // of a replica's attempts are past their deadline, no hedge goes there, because a copy
    // would only add load where answers are already late.
    let fake = Fake::with(&[
        (R21, Behave::Answer(Duration::from_millis(500), 200, "1\n")),
        (R22, Behave::Answer(Duration::from_millis(500), 200, "1\n")),
    ]);
    fake.ping_finds(R21, Probe::Silent);
    fake.ping_finds(R22, Probe::Silent);
    let w = World::new(&fake);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let hedged = eight_at_once(&w, &p).await;
    let held = w.metrics.hedges_held.get() as usize;
    assert_eq!(w.metrics.per_try_timeouts.get(), 8, "every request passed its deadline");
    assert!(hedged + held >= 8, "each was hedged or held (or both, later): {hedged} hedged, {held} held");
    // Which requests get their copy depends on the order their deadlines are handled in; the
    // first ones do, before both replicas have overdue attempts. Without the rule all 8 are.
    assert!(held >= 3 && hedged <= 5, "{hedged} of 8 hedged, {held} held");
    assert_eq!(w.metrics.hedges.get() as usize, hedged);
    for r in w.balancer.replicas() {
        assert_eq!((r.overdue(), r.outstanding()), (0, 0), "every mark and count came back");
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_replica_beside_a_prompt_one_has_every_waiting_read_hedged() {
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Answer(Duration::from_millis(5), 200, "1\n"))]);
    let w = World::new(&fake);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let hedged = eight_at_once(&w, &p).await;
    let on_hung = fake.sent_to().iter().filter(|r| *r == R21).count();
    assert!(on_hung > 0, "P2C sent some to the hung replica");
    assert_eq!(hedged, on_hung, "every read waiting on the hung replica was hedged");
    assert_eq!(w.metrics.hedges_held.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_hung_replica_is_hedged_even_onto_a_late_replica_that_still_answers() {
    // R22 is late (two of its three attempts in flight are past their deadline) but alive: it
    // answered 10 ms before the deadline. R21 hangs: it has answered nothing at all. A read
    // waiting on R21 is hedged onto R22; held, it would wait for a probe to mark R21 down.
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Answer(Duration::from_millis(5), 200, "1\n"))]);
    let w = World::new(&fake);
    let r22 = w.balancer.shards[1][1].clone();
    let late: Vec<_> = (0..3).map(|_| InFlight::new(r22.clone())).collect();
    let overdue: Vec<_> = (0..2).map(|_| Overdue::new(r22.clone())).collect();
    assert!(r22.is_slow_now());
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    w.known_good(&p);
    let t0 = tokio::time::Instant::now();
    let (mut o, _) = tokio::join!(w.run(&p, held()), async {
        // 10 ms before the deadline (the moment the hedge is decided).
        tokio::time::sleep(crate::attempt::hedge::COLD_DELAY - Duration::from_millis(10)).await;
        r22.answered();
    });
    assert_eq!(fake.sent_to()[0], R21, "P2C sent it to the idle replica");
    assert_eq!(answered(&mut o), (R22.to_string(), true), "hedged onto the late but living replica");
    assert_eq!(t0.elapsed(), crate::attempt::hedge::COLD_DELAY + Duration::from_millis(5));
    assert_eq!(w.metrics.hedges_held.get(), 0);
    drop((late, overdue));
}

#[tokio::test(start_paused = true)]
async fn a_read_on_a_late_replica_is_held_while_the_other_is_late_too() {
    // Both alive and late: R21 answers in 600 ms, R22 is late with its own attempts. The read
    // waits on R21 (it will answer): no copy goes to R22.
    let fake = Fake::with(&[
        (R21, Behave::Answer(Duration::from_millis(600), 200, "1\n")),
        (R22, Behave::Answer(Duration::from_millis(5), 200, "1\n")),
    ]);
    fake.ping_finds(R21, Probe::Silent);
    let w = World::new(&fake);
    let r22 = w.balancer.shards[1][1].clone();
    let late: Vec<_> = (0..3).map(|_| InFlight::new(r22.clone())).collect();
    let overdue: Vec<_> = (0..2).map(|_| Overdue::new(r22.clone())).collect();
    let r21 = w.balancer.shards[1][0].clone();
    r21.answered();
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let (mut o, _) = tokio::join!(w.run(&p, held()), async {
        // R21 keeps answering other queries: it is late, not hung.
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            r21.answered();
        }
    });
    assert_eq!(answered(&mut o), (R21.to_string(), false), "not hedged");
    assert_eq!((w.metrics.per_try_timeouts.get(), w.metrics.hedges_held.get(), w.metrics.hedges.get()), (1, 1, 0));
    drop((late, overdue));
}

#[tokio::test(start_paused = true)]
async fn a_long_read_on_a_replica_that_answers_pings_is_never_hedged() {
    // A 9 s read over HTTP: nothing comes before its answer, but its replica answers a ping.
    let fake = Fake::with(&[
        (R21, Behave::Answer(Duration::from_secs(9), 200, "1\n")),
        (R22, Behave::Answer(Duration::from_secs(9), 200, "1\n")),
    ]);
    let w = World::new(&fake);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let t0 = tokio::time::Instant::now();
    let mut o = w.run(&p, held()).await;
    assert!(!answered(&mut o).1, "not hedged");
    assert_eq!(t0.elapsed(), Duration::from_secs(9));
    assert_eq!(fake.sent_to().len(), 1, "it started once");
    let m = &w.metrics;
    assert_eq!((m.per_try_timeouts.get(), m.attempt.hedges_spared.get(), m.hedges.get()), (1, 1, 0));
    // Pinged at 100 ms, then 100, 200, 400, 800 ms and every 1 s after each answer (plus the
    // pings' own 0 ms in paused time): 100, 200, 400, 800, 1600, 2600, ..., 8600 ms.
    assert_eq!(fake.pings.lock().unwrap().len(), 12, "looked again, less and less often");
}

/// A native-like transport in paused time: each attempt (its script by the order attempts are
/// sent, the last repeated) sends progress every 100 ms for a while, then its answer (or
/// nothing more). Its head is the replica that answered.
struct Scripted {
    scripts: Vec<Script>,
    sent: usize,
}

#[derive(Clone, Copy)]
struct Script {
    /// Progress reports every 100 ms for this long, then silence.
    progress_for: Duration,
    /// The answer's end, if it comes.
    ends_at: Option<Duration>,
    /// The reports come as 18.16's native Progress packets do, at a pace the transport knows.
    paced: bool,
}

impl Transport for Scripted {
    type Head = String;
    fn send(
        &mut self,
        replica: &Arc<Replica>,
        _threads: Option<usize>,
        live: Live,
    ) -> Option<BoxFuture<Result<String, BackendError>>> {
        let base = replica.addr.base.clone();
        let script = self.scripts[self.sent.min(self.scripts.len() - 1)];
        self.sent += 1;
        Some(Box::pin(async move {
            let t0 = tokio::time::Instant::now();
            let tick = Duration::from_millis(100);
            loop {
                let next = t0.elapsed() + tick;
                if script.ends_at.is_some_and(|e| next >= e) {
                    tokio::time::sleep_until(t0 + script.ends_at.unwrap()).await;
                    return Ok(base);
                }
                if next > script.progress_for {
                    return std::future::pending().await;
                }
                tokio::time::sleep(tick).await;
                if script.paced {
                    live.activity.set_pace(tick);
                }
                live.activity.bump_at(tokio::time::Instant::now());
            }
        }))
    }
    fn streamed(&self) -> bool {
        false
    }
    fn is_success(_: &String) -> bool {
        true
    }
    fn judge_error(head: String) -> BoxFuture<Judged<String>> {
        Box::pin(async move { Judged::Answer(head) })
    }
    fn went_down(&self, _: &Replica) {}
}

impl World {
    async fn run_scripted(&self, plan: &Plan, t: &mut Scripted) -> Outcome<String> {
        let ctx = Ctx {
            backend: &self.backend,
            balancer: &self.balancer,
            threads: None,
            login: test_login(),
            retry_budget: &self.budget,
            metrics: &self.metrics,
            hedging: &self.cfg.hedging,
            head_times: &self.head_times,
            quarantine: &self.quarantine,
        };
        attempts(plan, t, &ctx).await
    }
}

fn scripted_winner(o: &mut Outcome<String>) -> (String, bool) {
    match o {
        Outcome::Answer(a) => {
            a.won.guard.disarm();
            (a.head.clone(), a.hedged)
        }
        Outcome::Failed { message, .. } => panic!("failed: {message}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_long_read_with_steady_progress_is_never_hedged() {
    // Both replicas hang on a ping (as if too busy): only the progress reports show work.
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
    let mut w = World::new(&fake);
    w.cfg.hedging.delay = HedgeDelay::Fixed(Duration::from_millis(250));
    let long = Script { progress_for: Duration::from_secs(9), ends_at: Some(Duration::from_secs(9)), paced: false };
    let mut t = Scripted { scripts: vec![long], sent: 0 };
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let t0 = tokio::time::Instant::now();
    let mut o = w.run_scripted(&p, &mut t).await;
    let (_, hedged) = scripted_winner(&mut o);
    assert!(!hedged);
    assert_eq!(t0.elapsed(), Duration::from_secs(9), "held to its end");
    let m = &w.metrics;
    assert_eq!((m.hedges.get(), m.attempt.hedges_spared.get()), (0, 1));
    assert!(fake.pings.lock().unwrap().is_empty(), "progress alone showed it works");
}

#[tokio::test(start_paused = true)]
async fn progress_at_its_pace_is_no_silence_under_a_shorter_deadline() {
    // A 20 ms deadline against progress every 100 ms: a read that reports at its pace is
    // pinged only before its first report (its replica at 10 ms, half the deadline; another
    // replica at 20 ms, when its own ping is still out), never after, and not hedged; one whose
    // reports carry no pace looks silent between them and is pinged all along.
    for paced in [true, false] {
        let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
        let mut w = World::new(&fake);
        w.cfg.hedging.delay = HedgeDelay::Fixed(Duration::from_millis(20));
        let long = Script { progress_for: Duration::from_secs(3), ends_at: Some(Duration::from_secs(3)), paced };
        let mut t = Scripted { scripts: vec![long], sent: 0 };
        let p = w.plan(ROUTED_READ, BodyShape::Held);
        let mut o = w.run_scripted(&p, &mut t).await;
        scripted_winner(&mut o);
        let pings = fake.pings.lock().unwrap().len();
        match paced {
            true => assert_eq!(pings, 2),
            false => assert!(pings >= 20, "{pings} pings"),
        }
        assert_eq!(w.metrics.hedges.get(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_falls_silent_after_long_progress_is_hedged() {
    // Progress for 3 s, 12 deadlines, then silence (SIGSTOP before its answer's first byte to
    // the client): the read still moves.
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
    let (w, hedged, took) = silent_after(&fake, 250, 3000).await;
    assert!(hedged, "the replica that fell silent was hedged");
    // Silent from 3000 ms: pinged at 3125 ms (half a deadline), looked at 3250 ms with the
    // ping still out, hedged at its bound (3375 ms); the hedge ends 300 ms later.
    assert_eq!(took, Duration::from_millis(3375 + 300));
    assert_eq!(w.metrics.attempt.hedges_spared.get(), 1, "left alone while it progressed");
    settle().await;
    assert_eq!(fake.kills().len(), 1, "the silent copy is killed");
}

/// A routed read under a fixed per-try deadline of `deadline_ms`, whose first copy shows
/// progress for `progress_ms` and then falls silent; a hedge, if sent, shows progress for 9 s.
/// (the world it ran in, whether it was hedged, the time the attempts took).
async fn silent_after(fake: &Arc<Fake>, deadline_ms: u64, progress_ms: u64) -> (World, bool, Duration) {
    let mut w = World::new(fake);
    w.cfg.hedging.delay = HedgeDelay::Fixed(Duration::from_millis(deadline_ms));
    let first = Script { progress_for: Duration::from_millis(progress_ms), ends_at: None, paced: false };
    let hedge =
        Script { progress_for: Duration::from_secs(9), ends_at: Some(Duration::from_millis(300)), paced: false };
    let mut t = Scripted { scripts: vec![first, hedge], sent: 0 };
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let t0 = tokio::time::Instant::now();
    let mut o = w.run_scripted(&p, &mut t).await;
    let (_, hedged) = scripted_winner(&mut o);
    (w, hedged, t0.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_falls_silent_before_its_first_byte_to_the_client_is_hedged() {
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
    // The first copy: progress for 200 ms, then silence (SIGSTOP); the hedge progresses.
    // It falls silent at 200 ms, is pinged at 325 ms (silent for half the deadline), and its ping goes unanswered
    // for 250 ms (here no replica answers a ping, so none proves it hung sooner): hedged at
    // 575 ms.
    let (w, hedged, took) = silent_after(&fake, 250, 200).await;
    assert!(hedged, "the silent replica was hedged");
    assert_eq!(w.metrics.attempt.hedge_reasons.get_or_create(&ReasonLabel { reason: "silent" }).get(), 1);
    // The hedge itself ends 300 ms later.
    assert_eq!(took, Duration::from_millis(575 + 300));
    settle().await;
    assert_eq!(fake.kills().len(), 1, "the silent copy is killed");
}

#[tokio::test(start_paused = true)]
async fn a_read_whose_replica_died_running_it_is_not_resent_and_its_shape_is_refused() {
    // Whichever replica gets it is gone 10 ms in (a ping is refused): its connection broke
    // before the answer's head, or between the head and the last byte.
    let deaths = [
        (Behave::Reset(Duration::from_millis(10)), "connection reset"),
        (Behave::BreakAfterHead(Duration::from_millis(10), "1\n"), "the answer broke after 2 bytes"),
    ];
    for (death, how) in deaths {
        let fake = Fake::with(&[(R21, death), (R22, death)]);
        fake.ping_finds(R21, Probe::Dead);
        fake.ping_finds(R22, Probe::Dead);
        let w = World::new(&fake);
        let p = w.plan(ROUTED_READ, BodyShape::Held);
        match w.run(&p, held()).await {
            Outcome::Failed { status, message, .. } => {
                assert_eq!(status, StatusCode::BAD_GATEWAY);
                assert!(message.contains("died while running this query"), "{message}");
                assert!(message.contains(how), "{message}");
                assert!(message.contains("not sent to another replica"), "{message}");
                assert!(message.contains("refused for 300 s"), "{message}");
            }
            Outcome::Answer(_) => panic!("answered ({how})"),
        }
        assert_eq!(fake.sent_to().len(), 1, "sent once: not retried, not hedged");
        assert_eq!(w.metrics.attempt.query_deaths.get(), 1);
        // The same shape, another literal: refused without reaching any replica.
        let p2 = w.plan("SELECT * FROM items WHERE shop_id = 124", BodyShape::Held);
        match w.run(&p2, held()).await {
            Outcome::Failed { status, message, .. } => {
                assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
                assert!(message.contains("refused") && message.contains("limits.query_of_death_ttl"), "{message}");
            }
            Outcome::Answer(_) => panic!("answered"),
        }
        assert_eq!(fake.sent_to().len(), 1, "the refused read reached no replica");
        assert_eq!(w.metrics.attempt.quarantine_refusals.get(), 1);
    }
}

/// The failure's message, or a panic.
fn failed(o: Outcome) -> (StatusCode, String) {
    match o {
        Outcome::Failed { status, message, .. } => (status, message),
        Outcome::Answer(_) => panic!("answered"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_read_of_a_known_shape_that_kills_the_replica_it_is_resent_to_is_a_query_of_death() {
    // The shape ran fine; then a literal that kills any replica running it (its ping refused).
    let fake = Fake::with(&[
        (R21, Behave::Answer(Duration::from_millis(1), 200, "1\n")),
        (R22, Behave::Answer(Duration::from_millis(1), 200, "1\n")),
    ]);
    let w = World::new(&fake);
    answered(&mut w.run(&w.plan(ROUTED_READ, BodyShape::Held), held()).await);
    let death = Behave::Reset(Duration::from_millis(10));
    for r in [R21, R22] {
        fake.behave.lock().unwrap().insert(r, death);
        fake.ping_finds(r, Probe::Dead);
    }
    let before = fake.sent_to().len();
    let (status, message) =
        failed(w.run(&w.plan("SELECT * FROM items WHERE shop_id = 123", BodyShape::Held), held()).await);
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(message.contains("died while running this query"), "{message}");
    assert_eq!(fake.sent_to().len() - before, 2, "resent once, to the other replica, and no further");
    assert_eq!(w.metrics.attempt.query_deaths.get(), 1);
    // The shape is refused now, before any replica.
    let (status, _) = failed(w.run(&w.plan("SELECT * FROM items WHERE shop_id = 7", BodyShape::Held), held()).await);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(fake.sent_to().len() - before, 2);
}

#[tokio::test(start_paused = true)]
async fn writes_that_kill_their_replicas_are_queries_of_death_by_the_second() {
    const WRITE: &str = "INSERT INTO t VALUES (1)";
    let all = [R11, R12, R21, R22];
    // A new shape: the first death refuses it.
    let fake = Fake::with(&all.map(|r| (r, Behave::Reset(Duration::from_millis(10)))));
    all.iter().for_each(|r| fake.ping_finds(r, Probe::Dead));
    let w = World::new(&fake);
    let (_, message) = failed(w.run(&w.plan(WRITE, BodyShape::Held), held()).await);
    assert!(message.contains("died while running this query"), "{message}");
    let (status, _) = failed(w.run(&w.plan("INSERT INTO t VALUES (2)", BodyShape::Held), held()).await);
    assert_eq!((status, fake.sent_to().len()), (StatusCode::SERVICE_UNAVAILABLE, 1), "refused before any replica");

    // A known shape: the first death is a strike (and the write is not resent), the second of the
    // shape a query of death, the third refused: two replicas at most.
    let fake = Fake::with(&all.map(|r| (r, Behave::Answer(Duration::from_millis(1), 200, ""))));
    let w = World::new(&fake);
    let (_, ok) = answered_or(w.run(&w.plan(WRITE, BodyShape::Held), held()).await);
    assert!(ok);
    all.iter().for_each(|r| {
        fake.behave.lock().unwrap().insert(r, Behave::Reset(Duration::from_millis(10)));
        fake.ping_finds(r, Probe::Dead);
    });
    let (_, message) = failed(w.run(&w.plan("INSERT INTO t VALUES (2)", BodyShape::Held), held()).await);
    assert!(!message.contains("died while running this query"), "{message}");
    assert_eq!(w.metrics.attempt.query_deaths.get(), 0);
    let (_, message) = failed(w.run(&w.plan("INSERT INTO t VALUES (3)", BodyShape::Held), held()).await);
    assert!(message.contains("died while running this query"), "{message}");
    let (status, _) = failed(w.run(&w.plan("INSERT INTO t VALUES (4)", BodyShape::Held), held()).await);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(fake.sent_to().len(), 3, "one good write, then two replicas killed, then none reached");
}

/// Whether the outcome is an answer (its KILL guard disarmed).
fn answered_or(mut o: Outcome) -> (Outcome, bool) {
    let ok = matches!(o, Outcome::Answer(_));
    if let Outcome::Answer(a) = &mut o {
        a.won.guard.disarm();
    }
    (o, ok)
}

#[tokio::test(start_paused = true)]
async fn a_read_of_a_shape_known_good_is_resent_when_its_replica_dies() {
    // A replica killed by something else (kill -9) with lookups in flight: they go elsewhere.
    resent_past_a_death(Behave::Reset(Duration::from_millis(10)), "1\n").await;
}

#[tokio::test(start_paused = true)]
async fn a_read_whose_answer_breaks_after_its_head_is_resent_and_none_of_it_leaves() {
    // A replica killed (kill -9) between its answer's head and its last byte: the answer is
    // held, so the read goes elsewhere and the client gets the other replica's whole answer.
    resent_past_a_death(Behave::BreakAfterHead(Duration::from_millis(2), "1\t"), "1\t2\n").await;
}

#[tokio::test(start_paused = true)]
async fn a_read_whose_replica_hangs_after_its_head_is_hedged_and_none_of_it_leaves() {
    // A replica frozen between its answer's data and its last chunk: the answer is held on
    // through the stall, so the read is hedged and the client gets the other replica's whole
    // answer, soon; let go at the deadline, it would wait for the frozen replica.
    let hang = Behave::HangAfterHead(Duration::from_millis(1), "1\t");
    let (fake, _, hedged, took) = past_a_fault(hang, Probe::Silent, "1\t2\n").await;
    assert!(hedged, "hedged");
    assert!(took < Duration::from_secs(1), "answered after {took:?}");
    settle().await;
    assert_eq!(fake.kills().len(), 1, "the frozen copy is killed");
}

/// A read of a shape known good, on a shard whose replica it first went to then dies as `death`
/// (its ping refused) while the other answers `answer`: it is resent, not taken for a query of
/// death.
async fn resent_past_a_death(death: Behave, answer: &'static str) {
    let (_, w, _, _) = past_a_fault(death, Probe::Dead, answer).await;
    assert_eq!(w.metrics.retries.get(), 1, "retried on the other replica");
    assert_eq!(w.metrics.attempt.query_deaths.get(), 0);
}

/// A read on a shard whose replica it first went to then turns to `fault` (its ping finding
/// `ping`) while the other answers `answer`: reads are sent until one meets the fault (P2C, at
/// most 20), and each gets the other replica's whole answer, nothing of the faulty one's. The
/// world after the read that met the fault, whether it was hedged and how long it took.
async fn past_a_fault(fault: Behave, ping: Probe, answer: &'static str) -> (Arc<Fake>, World, bool, Duration) {
    let fake = Fake::with(&[
        (R21, Behave::Answer(Duration::from_millis(1), 200, "1\n")),
        (R22, Behave::Answer(Duration::from_millis(1), 200, "1\n")),
    ]);
    let w = World::new(&fake);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    answered(&mut w.run(&p, held()).await);
    let faulty = if fake.sent_to()[0] == R21 { R21 } else { R22 };
    let other = if faulty == R21 { R22 } else { R21 };
    fake.behave.lock().unwrap().insert(faulty, fault);
    fake.ping_finds(faulty, ping);
    fake.behave.lock().unwrap().insert(other, Behave::Answer(Duration::from_millis(1), 200, answer));
    for _ in 0..20 {
        let (before, t0) = (fake.sent_to().len(), tokio::time::Instant::now());
        let mut o = w.run(&p, held()).await;
        assert_eq!(answered(&mut o).0, other);
        let took = t0.elapsed();
        let Outcome::Answer(a) = o else { unreachable!() };
        let (head, hedged) = (a.head, a.hedged);
        assert_eq!(head.whole, Some(answer.len() as u64), "held whole");
        let body = http_body_util::BodyExt::collect(head.resp.into_body()).await.unwrap().to_bytes();
        assert_eq!(body, answer, "nothing of the faulty replica's answer");
        if fake.sent_to()[before] == faulty {
            return (fake, w, hedged, took);
        }
    }
    panic!("no read went to the faulty replica");
}

#[tokio::test(start_paused = true)]
async fn a_write_whose_answer_breaks_after_its_head_fails_in_one_line() {
    // A write is never sent twice; the client learns its outcome is unknown, not a cut answer.
    let cut = Behave::BreakAfterHead(Duration::from_millis(1), "");
    let fake = Fake::with(&[(R11, cut), (R12, cut), (R21, cut), (R22, cut)]);
    let w = World::new(&fake);
    let p = w.plan("INSERT INTO t VALUES (1)", BodyShape::Held);
    match w.run(&p, held()).await {
        Outcome::Failed { status, message, .. } => {
            assert_eq!(status, StatusCode::BAD_GATEWAY, "{message}");
            assert!(message.contains("the answer broke after 0 bytes"), "{message}");
        }
        Outcome::Answer(_) => panic!("a cut answer went to the client"),
    }
    assert_eq!(fake.sent_to().len(), 1, "a write is sent once");
}

#[tokio::test(start_paused = true)]
async fn a_broken_connection_to_a_living_replica_is_retried_as_before() {
    // A new shape, a reset, but the replica answers its ping: a stale connection, not a death.
    let fake =
        Fake::with(&[(R21, Behave::Reset(Duration::from_millis(10))), (R22, Behave::Reset(Duration::from_millis(10)))]);
    let w = World::new(&fake);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let o = w.run(&p, held()).await;
    assert!(matches!(o, Outcome::Failed { .. }));
    assert!(fake.sent_to().len() > 1, "retried");
    assert_eq!(w.metrics.attempt.query_deaths.get(), 0);
    assert!(w.quarantine.refused(crate::attempt::quarantine::fingerprint("\n".to_string().as_str())).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_replica_in_graceful_shutdown_is_hedged_a_crashing_one_is_not() {
    // Graceful shutdown: its listener is closed (the ping is refused) but it keeps our
    // connection open without answering. Hedged once a second ping, 100 ms later, is refused too.
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
    fake.ping_finds(R21, Probe::Dead);
    fake.ping_finds(R22, Probe::Dead);
    let w = World::new(&fake);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let t0 = tokio::time::Instant::now();
    let run = w.run(&p, held());
    tokio::pin!(run);
    tokio::select! { _ = &mut run => unreachable!(), _ = tokio::time::sleep(Duration::from_millis(1)) => {} }
    let first = fake.sent_to()[0].clone();
    let other = if first == R21 { R22 } else { R21 };
    fake.behave.lock().unwrap().insert(other, Behave::Answer(Duration::from_millis(5), 200, "1\n"));
    fake.ping_finds(other, Probe::Alive);
    let mut o = run.await;
    assert_eq!(answered(&mut o), (other.to_string(), true));
    assert_eq!(t0.elapsed(), crate::attempt::hedge::COLD_DELAY + DEAD_GRACE + Duration::from_millis(5));

    // Crashing: the ping is refused at 100 ms and its connection breaks 50 ms later: not hedged.
    let fake = Fake::with(&[
        (R21, Behave::Reset(Duration::from_millis(150))),
        (R22, Behave::Reset(Duration::from_millis(150))),
    ]);
    fake.ping_finds(R21, Probe::Dead);
    fake.ping_finds(R22, Probe::Dead);
    let w = World::new(&fake);
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let o = w.run(&p, held()).await;
    assert!(matches!(o, Outcome::Failed { status: StatusCode::BAD_GATEWAY, .. }));
    assert_eq!(fake.sent_to().len(), 1, "sent once: not hedged, not retried");
    assert_eq!(w.metrics.attempt.query_deaths.get(), 1);
}

/// Times since `t0`, in whole milliseconds.
fn ms_since(t0: tokio::time::Instant, times: &[tokio::time::Instant]) -> Vec<u64> {
    times.iter().map(|t| t.duration_since(t0).as_millis() as u64).collect()
}

#[tokio::test(start_paused = true)]
async fn a_hung_replica_is_hedged_at_the_deadline_its_ping_sent_half_a_deadline_before() {
    for deadline_ms in [20u64, 40, 100, 400] {
        let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
        let mut w = World::new(&fake);
        w.cfg.hedging.delay = HedgeDelay::Fixed(Duration::from_millis(deadline_ms));
        let p = w.plan(ROUTED_READ, BodyShape::Held);
        w.known_good(&p);
        let t0 = tokio::time::Instant::now();
        let run = w.run(&p, held());
        tokio::pin!(run);
        tokio::select! { _ = &mut run => unreachable!(), _ = tokio::time::sleep(Duration::from_millis(1)) => {} }
        let first = fake.sent_to()[0].clone();
        let other = if first == R21 { R22 } else { R21 };
        fake.behave.lock().unwrap().insert(other, Behave::Answer(Duration::from_millis(5), 200, "1\n"));
        let mut o = run.await;
        assert_eq!(answered(&mut o), (other.to_string(), true));
        // Pinged half a deadline in; at the deadline that ping is still out, the other replica
        // answers its own ping at once and the hung one answered nothing: hedged at the
        // deadline, not after the ping's own bound (250 ms at least).
        assert_eq!(t0.elapsed(), Duration::from_millis(deadline_ms + 5), "deadline {deadline_ms} ms");
        assert_eq!(ms_since(t0, &fake.ping_times.lock().unwrap()), vec![deadline_ms / 2, deadline_ms]);
        assert_eq!(*fake.pings.lock().unwrap(), vec![first.clone(), other.to_string()]);
        assert_eq!(w.metrics.attempt.hedge_reasons.get_or_create(&ReasonLabel { reason: "silent" }).get(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_silent_read_whose_replica_answers_its_ping_is_not_hedged() {
    // The ping answered at once, before the deadline.
    let fake = Fake::with(&[
        (R21, Behave::Answer(Duration::from_millis(300), 200, "1\n")),
        (R22, Behave::Answer(Duration::from_millis(300), 200, "1\n")),
    ]);
    let mut w = World::new(&fake);
    w.cfg.hedging.delay = HedgeDelay::Fixed(Duration::from_millis(40));
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    let t0 = tokio::time::Instant::now();
    let mut o = w.run(&p, held()).await;
    assert!(!answered(&mut o).1, "not hedged");
    assert_eq!(t0.elapsed(), Duration::from_millis(300));
    assert_eq!(fake.sent_to().len(), 1);
    let m = &w.metrics;
    assert_eq!((m.per_try_timeouts.get(), m.attempt.hedges_spared.get(), m.hedges.get()), (1, 1, 0));
    // Pinged at 20 ms, then half a deadline ahead of each recheck (40, 80, 160 ms after each
    // answer): 20, 60, 140, 300 ms; the read answered at 300 ms.
    assert_eq!(ms_since(t0, &fake.ping_times.lock().unwrap())[..3], [20, 60, 140]);
}

/// A 300 ms read on shard 2 with a 40 ms deadline, the replicas' pings taking `ping` (R21)
/// and `peer_ping` (R22); when `busy`, both replicas answer other requests every 10 ms.
/// Returns whether it was hedged.
async fn late_ping(ping: u64, peer_ping: u64, busy: bool, known_good: bool) -> bool {
    let fake = Fake::with(&[
        (R21, Behave::Answer(Duration::from_millis(300), 200, "1\n")),
        (R22, Behave::Answer(Duration::from_millis(300), 200, "1\n")),
    ]);
    fake.ping_delay
        .lock()
        .unwrap()
        .extend([(R21, Duration::from_millis(ping)), (R22, Duration::from_millis(peer_ping))]);
    let mut w = World::new(&fake);
    w.cfg.hedging.delay = HedgeDelay::Fixed(Duration::from_millis(40));
    // R22 penalised: R21 gets the read.
    w.balancer.shards[1][1].lost_race();
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    if known_good {
        w.known_good(&p);
    }
    let (mut o, _) = tokio::join!(w.run(&p, held()), async {
        for _ in 0..40 {
            if busy {
                w.balancer.shards[1].iter().for_each(|r| r.answered());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert_eq!(fake.sent_to()[0], R21);
    answered(&mut o).1
}

#[tokio::test(start_paused = true)]
async fn a_late_ping_alone_is_no_reason_to_hedge() {
    // Both pings take 80 ms (a loaded machine), nothing answered yet (a cold cluster): the read
    // waits for its ping (answered at 100 ms) and is left alone.
    assert!(!late_ping(80, 80, false, true).await, "every ping late: not hedged");
    // Its own ping takes 80 ms, the other replica's none, but its replica answers other
    // requests: loaded, not hung.
    assert!(!late_ping(80, 0, true, true).await, "a loaded replica that answers others: not hedged");
    // Its ping late, the other's prompt, and its replica answers nothing: hung, hedged.
    assert!(late_ping(80, 0, false, true).await, "hung: hedged");
    // The same for a shape not seen to succeed (a query of death may be crashing its server):
    // it waits for its ping (answered at 100 ms).
    assert!(!late_ping(80, 0, false, false).await, "a new shape: not hedged before its ping's bound");
}

#[tokio::test(start_paused = true)]
async fn a_sign_of_work_before_the_deadline_drops_the_ping() {
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Hang)]);
    // A 160 ms deadline: the ping goes at 80 ms; the first copy's one progress report comes at
    // 100 ms, then it falls silent; the hedge progresses.
    let t0 = tokio::time::Instant::now();
    let (w, hedged, took) = silent_after(&fake, 160, 100).await;
    assert!(hedged);
    // The ping sent at 80 ms is dropped at the progress report (100 ms). Silent from 100 ms,
    // the copy is pinged again at 180 ms; at 260 ms that ping is still out, and so is the other
    // replica's (no replica answers a ping here), so it is hedged when its ping's bound ends
    // (430 ms); the hedge ends 300 ms later.
    assert_eq!(ms_since(t0, &fake.pings_dropped.lock().unwrap()), vec![100, 430]);
    assert_eq!(ms_since(t0, &fake.ping_times.lock().unwrap()), vec![80, 180, 260]);
    assert_eq!(took, Duration::from_millis(730));
    assert_eq!(w.metrics.attempt.hedges_spared.get(), 1);
}

/// The world with replication delays tracked (300 s), R21 lagging `d21` s and R22 `d22` s
/// (None: unknown).
fn lagging_world(fake: &Arc<Fake>, d21: Option<u64>, d22: Option<u64>) -> World {
    use crate::cluster::replication::{Reading, Rule};
    let mut w = World::new(fake);
    w.balancer = Balancer::with_seed(&w.cfg.clusters["storm"], 7).with_rule(Rule::new(Duration::from_secs(300), true));
    for (base, d) in [(R21, d21), (R22, d22)] {
        let r = w.balancer.replicas().find(|r| r.addr.base == base).unwrap().clone();
        let read = d.map(|d| Reading { delay: d, routed_delay: d, tables: 1, ..Default::default() });
        w.balancer.record_replication(&r, read.ok_or_else(|| "no answer within 1000 ms".to_string()));
    }
    w
}

/// The answer's replica and how it was judged.
fn answered_freshness(o: &mut Outcome) -> (String, crate::cluster::replication::Freshness) {
    let f = match o {
        Outcome::Answer(a) => a.won.inflight.freshness(),
        Outcome::Failed { .. } => Default::default(),
    };
    (answered(o).0, f)
}

#[tokio::test(start_paused = true)]
async fn routed_reads_skip_a_lagging_replica_and_use_the_least_stale_when_all_lag() {
    use crate::cluster::replication::Freshness;
    let ok = Behave::Answer(Duration::from_millis(1), 200, "1\n");
    let fake = Fake::with(&[(R21, ok), (R22, ok)]);
    let w = lagging_world(&fake, Some(400), Some(0));
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    for _ in 0..20 {
        assert_eq!(answered_freshness(&mut w.run(&p, held()).await), (R22.to_string(), Freshness::Fresh));
    }
    let w = lagging_world(&fake, Some(400), Some(1000));
    assert_eq!(answered_freshness(&mut w.run(&p, held()).await), (R21.to_string(), Freshness::Stale(400)));
    let w = lagging_world(&fake, Some(400), None);
    assert_eq!(answered_freshness(&mut w.run(&p, held()).await), (R22.to_string(), Freshness::Unknown));
    let label = |reason| crate::metrics::ClusterReasonLabels { cluster: "storm".into(), reason };
    assert_eq!(w.metrics.replication.stale_reads.get_or_create(&label("unknown")).get(), 1);
}

#[tokio::test(start_paused = true)]
async fn with_falling_back_off_a_read_every_replica_lags_for_is_refused_with_369() {
    let ok = Behave::Answer(Duration::from_millis(1), 200, "1\n");
    let fake = Fake::with(&[(R21, ok), (R22, ok)]);
    let w = lagging_world(&fake, Some(400), Some(1000));
    let strict = vec![("fallback_to_stale_replicas_for_distributed_queries".to_string(), "0".to_string())];
    let input = QueryRequest::held(strict, ROUTED_READ, 300);
    let p = plan(input, &w.user(), &w.cfg.clusters["storm"], None, || "qid-1".into()).unwrap();
    match w.run(&p, held()).await {
        Outcome::Failed { status, message, .. } => {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert!(message.starts_with("Code: 369.") && message.contains("2.1 400 s, 2.2 1000 s"), "{message}");
        }
        Outcome::Answer(_) => panic!("a stale replica answered"),
    }
    assert!(fake.sent_to().is_empty(), "nothing was sent");
    let cluster = crate::metrics::ClusterLabel { cluster: "storm".into() };
    assert_eq!(w.metrics.replication.stale_refusals.get_or_create(&cluster).get(), 1);
}

/// A hedge is a copy of the same read: it goes to no staler replica than the one the read waits
/// on. The read waits on its hung fresh replica until that one is marked down; then it is
/// re-issued to the stale one, the only one left, and its answer says so.
#[tokio::test(start_paused = true)]
async fn a_hedge_goes_to_no_staler_replica_and_a_replica_down_falls_back_to_it() {
    use crate::cluster::replication::Freshness;
    let fake = Fake::with(&[(R21, Behave::Hang), (R22, Behave::Answer(Duration::from_millis(1), 200, "1\n"))]);
    let w = lagging_world(&fake, Some(0), Some(400));
    let p = w.plan(ROUTED_READ, BodyShape::Held);
    w.known_good(&p);
    let t0 = tokio::time::Instant::now();
    let (mut o, _) = tokio::join!(w.run(&p, held()), async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let r = w.balancer.replicas().find(|r| r.addr.base == R21).unwrap().clone();
        assert!(w.balancer.set_health(&r, false));
    });
    assert_eq!(answered_freshness(&mut o), (R22.to_string(), Freshness::Stale(400)));
    assert_eq!(t0.elapsed(), Duration::from_secs(2) + Duration::from_millis(1), "no hedge; re-issued at the down");
    assert_eq!(w.metrics.hedges.get(), 0);
    assert_eq!(fake.sent_to(), vec![R21.to_string(), R22.to_string()]);
}

#[tokio::test(start_paused = true)]
async fn writes_go_to_a_replica_that_is_not_read_only() {
    use crate::cluster::replication::{Reading, Rule};
    let ok = Behave::Answer(Duration::from_millis(1), 200, "");
    let fake = Fake::with(&[(R11, ok), (R12, ok), (R21, ok), (R22, ok)]);
    let mut w = World::new(&fake);
    w.balancer = Balancer::with_seed(&w.cfg.clusters["storm"], 7).with_rule(Rule::new(Duration::from_secs(300), true));
    let ro = Reading { read_only: true, session_expired: true, tables: 1, ..Default::default() };
    for r in w.balancer.replicas().filter(|r| r.addr.base != R12) {
        w.balancer.record_replication(r, Ok(ro));
    }
    let p = w.plan("INSERT INTO t VALUES (1)", BodyShape::Held);
    for _ in 0..12 {
        assert_eq!(answered(&mut w.run(&p, held()).await).0, R12);
    }
}
