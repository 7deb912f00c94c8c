//! The load loop and its coordinator.
//!
//! ```text
//!   coordinator (caller's thread)          worker thread 1..T (current-thread runtime each)
//!   ─────────────────────────────          ─────────────────────────────────────────────────
//!   probe server version                   open its connections (keep-alive mode)
//!   wait until every connection is open ◄─ barrier
//!   set t0, open the start gate         ─► each connection runs `load_loop`:
//!   every second: merge intervals,             due = schedule(k) or now; wait until due
//!     report progress                          send, record latency = done - due
//!   at the deadline / Ctrl-C: cancel           every second: hand its Interval over
//!   merge the last intervals → RunResult   ◄─ final Interval when the loop ends
//! ```

use crate::executor::{Executor, QueryIds};
use crate::schedule::Schedule;
use crate::segment::CONNECT_LEAD;
use crate::spec::{LoadSpec, Work};
use crate::template::Renderer;
use crate::LoadError;
use chstorm_proto::native::append_settings_clause;
use chstorm_proto::stream::Connector;
use chstorm_proto::ProtoError;
use chstorm_stats::{Interval, SecondStats};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, Barrier};
use tokio_util::sync::CancellationToken;

/// An open-loop send that leaves later than this after its intended time counts as late.
pub const LATE_AFTER: Duration = Duration::from_millis(1);
/// Longest pause after consecutive connection failures, so a dead server does not spin a core.
const MAX_CONNECT_BACKOFF: Duration = Duration::from_millis(500);
/// When a run ends (its deadline, --requests, --max-errors or Ctrl-C), queries still in flight
/// get this long to finish before they are cancelled on the server. Short queries, the usual
/// case, finish within it and cost no KILL QUERY; their results are not recorded either way.
pub const END_GRACE: Duration = Duration::from_millis(200);

/// Lets another thread (a Ctrl-C handler, a threshold check) stop a run; what was measured is
/// kept.
#[derive(Clone, Default)]
pub struct StopHandle {
    token: CancellationToken,
    interrupted: Arc<AtomicBool>,
    aborted: Arc<AtomicBool>,
    /// A child handle also stops when its parent does.
    parent: Option<Box<StopHandle>>,
}

impl StopHandle {
    pub fn new() -> Self {
        Self::default()
    }
    /// A handle that stops with this one, and can be stopped alone (runs started together,
    /// stopped together when one of them cannot start).
    pub fn child(&self) -> StopHandle {
        StopHandle { token: self.token.child_token(), parent: Some(Box::new(self.clone())), ..Default::default() }
    }
    /// Stops the run as an interruption (Ctrl-C).
    pub fn interrupt(&self) {
        self.interrupted.store(true, Ordering::SeqCst);
        self.token.cancel();
    }
    pub fn is_interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst) || self.parent.as_ref().is_some_and(|p| p.is_interrupted())
    }
    /// Stops the run because a threshold can no longer be met (`--abort-on-fail`).
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        self.token.cancel();
    }
    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst) || self.parent.as_ref().is_some_and(|p| p.is_aborted())
    }
    /// Why this handle stopped a run, if it did.
    fn reason(&self) -> Option<StopReason> {
        if self.is_interrupted() {
            Some(StopReason::Interrupted)
        } else if self.is_aborted() {
            Some(StopReason::Threshold)
        } else {
            None
        }
    }
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    Requests,
    MaxErrors,
    Interrupted,
    /// A threshold with `--abort-on-fail` could no longer be met.
    Threshold,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Duration => "duration",
            StopReason::Requests => "requests",
            StopReason::MaxErrors => "max_errors",
            StopReason::Interrupted => "interrupted",
            StopReason::Threshold => "threshold",
        }
    }
}

/// A once-a-second view of a run in progress.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Seconds measured so far.
    pub elapsed: Duration,
    /// Queries completed in the last second.
    pub last_second: SecondStats,
    /// Totals so far (cumulative histogram).
    pub total: Interval,
    /// Planned measured length, when the run has one.
    pub planned: Option<Duration>,
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// All measured queries: histogram, counts, errors by kind, bytes.
    pub total: Interval,
    /// One point per second of the measured run.
    pub per_second: Vec<SecondStats>,
    /// Measured wall time.
    pub elapsed: Duration,
    /// Open loop: sends that were due in the measured window but never made (every connection
    /// was busy until the end).
    pub dropped: u64,
    pub stop_reason: StopReason,
    pub server_version: Option<String>,
    /// Wall-clock time at which measuring began.
    pub started_at: SystemTime,
    /// This run's id (12 hex digits), part of every query_id it sent:
    /// `chstorm-<run id>-<connection>-<n>`.
    pub run_id: String,
    /// Queries given up on (timed out, or in flight when the run ended) and cancelled on the
    /// server; and how many of those cancellations failed or timed out.
    pub cancelled: u64,
    pub cancel_failures: u64,
    /// With `start_at`: how long after it the clock started (the connections took longer to
    /// open than the lead they had, or the process came late). Zero when on time.
    pub late_start: Duration,
}

impl RunResult {
    /// Successful queries per second of measured time.
    pub fn qps(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.total.queries as f64 / s
        } else {
            0.0
        }
    }
}

struct Shared {
    spec: LoadSpec,
    cancel: CancellationToken,
    t0: OnceLock<Instant>,
    measure_start: OnceLock<Instant>,
    deadline: OnceLock<Option<Instant>>,
    next_tick: AtomicU64,
    budget_used: AtomicU64,
    sent_measured: AtomicU64,
    errors: AtomicU64,
    stop_reason: OnceLock<StopReason>,
    /// Cancelled by the coordinator once the clock is set: the start signal for every task.
    start_gate: CancellationToken,
    run_id: String,
    /// The user's own query_id (the `query_id` setting), sent with every query instead of ours.
    fixed_query_id: Option<String>,
    cancelled: AtomicU64,
    cancel_failures: AtomicU64,
}

impl Shared {
    fn stop(&self, why: StopReason) {
        let _ = self.stop_reason.set(why);
        self.cancel.cancel();
    }
}

/// Runs `spec` to completion and returns what was measured. `on_progress` is called about once a
/// second from the calling thread. Blocks the calling thread.
pub fn run(spec: LoadSpec, stop: &StopHandle, mut on_progress: impl FnMut(&Progress)) -> Result<RunResult, LoadError> {
    spec.validate().map_err(LoadError::Invalid)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut spec = spec;
    // A query_id is not a setting: it names each query (HTTP: a URL parameter; native: a field
    // of the Query packet). The user's own wins over chstorm's numbered ones.
    let fixed_query_id = [
        chstorm_proto::cancel::take_query_id_setting(&mut spec.target.settings),
        chstorm_proto::cancel::take_query_id_setting(&mut spec.settings),
    ]
    .into_iter()
    .flatten()
    .last();
    let run_id = chstorm_proto::cancel::new_run_id();
    if !spec.segment.is_whole() {
        if let Work::Queries { templates, .. } = &mut spec.work {
            for t in templates.iter_mut() {
                *t = t.for_segment(spec.segment).map_err(|e| LoadError::Invalid(e.to_string()))?;
            }
        }
    }
    // Native settings travel as a SETTINGS clause inside the query text (portable to every
    // server version); HTTP settings are URL parameters, see `RequestHead::query`.
    if !spec.target.protocol.is_http() {
        let all: Vec<(String, String)> = spec.target.settings.iter().chain(&spec.settings).cloned().collect();
        if let (false, Work::Queries { templates, .. }) = (all.is_empty(), &mut spec.work) {
            for t in templates.iter_mut() {
                let sql = append_settings_clause(t.source(), &all).into_owned();
                *t = t.with_source(&sql).map_err(|e| LoadError::Invalid(e.to_string()))?;
            }
        }
    }
    let server_version = rt.block_on(async {
        tokio::select! {
            v = crate::probe::server_version(&spec.target, &spec.tls, spec.timeout.min(Duration::from_secs(10))) => v,
            _ = stop.token.cancelled() => Err(ProtoError::Timeout(Duration::ZERO, "interrupted before the run")),
        }
    });
    let server_version = match server_version {
        Ok(v) => Some(v),
        Err(
            e @ (ProtoError::Connect { .. }
            | ProtoError::Timeout(..)
            | ProtoError::InvalidTarget(_)
            | ProtoError::TlsSetup(_)),
        ) => {
            return Err(LoadError::Server(e));
        }
        // The server answers but the probe query failed (e.g. a /ping-only endpoint): go on.
        Err(_) => None,
    };

    // With a start instant, the connections open shortly before it, so kept-alive ones are not
    // closed as idle by the server while they wait.
    if let Some(at) = spec.start_at {
        let wait = at.duration_since(SystemTime::now()).unwrap_or_default().saturating_sub(CONNECT_LEAD);
        rt.block_on(async {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.token.cancelled() => {}
            }
        });
    }
    let connector = Connector::new(&spec.target, &spec.tls, spec.timeout)?;
    let threads = spec.threads.min(spec.concurrency).max(1);
    let shared = Arc::new(Shared {
        cancel: stop.token.child_token(),
        spec,
        t0: OnceLock::new(),
        measure_start: OnceLock::new(),
        deadline: OnceLock::new(),
        next_tick: AtomicU64::new(0),
        budget_used: AtomicU64::new(0),
        sent_measured: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        stop_reason: OnceLock::new(),
        start_gate: CancellationToken::new(),
        run_id,
        fixed_query_id,
        cancelled: AtomicU64::new(0),
        cancel_failures: AtomicU64::new(0),
    });
    let ready = Arc::new(Barrier::new(shared.spec.concurrency + 1));
    let (tx, mut rx) = mpsc::unbounded_channel::<(u64, Interval)>();
    let target = Arc::new(shared.spec.target.clone());
    let head = Executor::http_head(&shared.spec, &target).map(Arc::new);

    let mut handles = Vec::with_capacity(threads);
    for th in 0..threads {
        let conns: Vec<usize> = (th..shared.spec.concurrency).step_by(threads).collect();
        let (shared, ready, tx) = (shared.clone(), ready.clone(), tx.clone());
        let (connector, target, head) = (connector.clone(), target.clone(), head.clone());
        let h = std::thread::Builder::new()
            .name(format!("chstorm-load-{th}"))
            .spawn(move || worker_thread(shared, conns, connector, target, head, ready, tx))?;
        handles.push(h);
    }
    drop(tx);

    let result = rt.block_on(async {
        // Every connection is open (or failed to open): start the clock, at the start instant
        // when there is one (in the past when the connections came late: an open loop's due
        // times still count from it, so segments on several machines stay one schedule).
        ready.wait().await;
        let (t0, late_start) = start_instant(shared.spec.start_at, &stop.token).await;
        let _ = shared.t0.set(t0);
        let measure_start = t0 + shared.spec.warmup;
        let _ = shared.measure_start.set(measure_start);
        let deadline = shared.spec.duration.map(|d| measure_start + d);
        let _ = shared.deadline.set(deadline);
        shared.start_gate.cancel();
        let started_at = shared.spec.start_at.unwrap_or_else(SystemTime::now) + shared.spec.warmup;

        let mut per_second: Vec<Option<Interval>> = Vec::new();
        let mut total = Interval::default();
        // Reports trail each second by 100 ms, so the workers' intervals for it have arrived.
        let mut next_report = measure_start + Duration::from_millis(1100);
        let far = t0 + Duration::from_secs(100 * 365 * 24 * 3600);
        loop {
            let dl = deadline.unwrap_or(far);
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some((t, iv)) => {
                        total.merge(&iv);
                        let idx = t.max(1) as usize - 1;
                        if per_second.len() <= idx {
                            per_second.resize(idx + 1, None);
                        }
                        match &mut per_second[idx] {
                            Some(p) => p.merge(&iv),
                            slot => *slot = Some(iv),
                        }
                    }
                    None => break,
                },
                _ = tokio::time::sleep_until(next_report.into()) => {
                    let secs = next_report.saturating_duration_since(measure_start).as_secs();
                    // Give the workers' second-ticks a moment to arrive before reporting.
                    if let Some(Some(last)) = per_second.get(secs.saturating_sub(1) as usize) {
                        on_progress(&Progress {
                            elapsed: Duration::from_secs(secs),
                            last_second: SecondStats::from_interval(secs, last),
                            total: total.clone(),
                            planned: shared.spec.duration,
                        });
                    }
                    next_report += Duration::from_secs(1);
                }
                _ = tokio::time::sleep_until(dl.into()), if !shared.cancel.is_cancelled() => {
                    shared.stop(StopReason::Duration);
                }
                _ = shared.cancel.cancelled(), if shared.stop_reason.get().is_none() && stop.reason().is_some() => {
                    if let Some(why) = stop.reason() {
                        let _ = shared.stop_reason.set(why);
                    }
                }
            }
        }
        let end = Instant::now();
        let end = deadline.map_or(end, |d| end.min(d));
        (total, per_second, end.saturating_duration_since(measure_start), started_at, t0, late_start)
    });
    for h in handles {
        let _ = h.join();
    }
    let (total, per_second, elapsed, started_at, t0, late_start) = result;
    let stop_reason = match stop.reason() {
        Some(StopReason::Interrupted) => StopReason::Interrupted,
        // Every stop sets its reason; a run whose loops all ended without one ran out of sends.
        why => shared.stop_reason.get().copied().or(why).unwrap_or(StopReason::Requests),
    };
    let spec = &shared.spec;
    let dropped = if spec.schedule.is_open() {
        let window_end = (shared.measure_start.get().copied().unwrap_or(t0) + elapsed).saturating_duration_since(t0);
        // This segment's share of the whole schedule's sends.
        let due_before = |t: Duration| spec.segment.share_of(spec.schedule.due_before(t));
        let due = due_before(window_end) - due_before(spec.warmup).min(due_before(window_end));
        let due = spec.requests.map_or(due, |n| due.min(n));
        due.saturating_sub(shared.sent_measured.load(Ordering::Relaxed))
    } else {
        0
    };
    let empty = Interval::default();
    let per_second = per_second
        .iter()
        .enumerate()
        .map(|(i, iv)| {
            // The last point covers only the part of its second before the run ended.
            let span = (elapsed.as_secs_f64() - i as f64).min(1.0);
            SecondStats::from_partial(i as u64 + 1, iv.as_ref().unwrap_or(&empty), span)
        })
        .collect();
    Ok(RunResult {
        total,
        per_second,
        elapsed,
        dropped,
        stop_reason,
        server_version,
        started_at,
        run_id: shared.run_id.clone(),
        cancelled: shared.cancelled.load(Ordering::Relaxed),
        cancel_failures: shared.cancel_failures.load(Ordering::Relaxed),
        late_start,
    })
}

/// When the clock starts: now, or at `start_at` (waited for; an interruption starts it at once,
/// and the loops then end before sending). Also how late the start is against `start_at`.
async fn start_instant(start_at: Option<SystemTime>, stop: &CancellationToken) -> (Instant, Duration) {
    let now = Instant::now();
    let Some(at) = start_at else { return (now, Duration::ZERO) };
    match at.duration_since(SystemTime::now()) {
        Ok(ahead) => {
            tokio::select! {
                _ = tokio::time::sleep_until((now + ahead).into()) => (now + ahead, Duration::ZERO),
                _ = stop.cancelled() => (Instant::now(), Duration::ZERO),
            }
        }
        Err(late) => (now.checked_sub(late.duration()).unwrap_or(now), late.duration()),
    }
}

#[allow(clippy::too_many_arguments)]
fn worker_thread(
    shared: Arc<Shared>,
    conns: Vec<usize>,
    connector: Connector,
    target: Arc<chstorm_proto::Target>,
    head: Option<Arc<chstorm_proto::http::RequestHead>>,
    ready: Arc<Barrier>,
    tx: mpsc::UnboundedSender<(u64, Interval)>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(_) => {
            shared.cancel.cancel();
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    let stats = Rc::new(RefCell::new(Interval::default()));
    local.block_on(&rt, async {
        let mut tasks = Vec::with_capacity(conns.len());
        for id in &conns {
            let ids = QueryIds::new(&shared.run_id, *id, shared.fixed_query_id.as_deref());
            let exec = Executor::new(&shared.spec, connector.clone(), target.clone(), head.clone(), ids);
            let rng = SmallRng::seed_from_u64(shared.spec.seed ^ (*id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let (shared, stats, ready) = (shared.clone(), stats.clone(), ready.clone());
            let id = *id;
            tasks.push(tokio::task::spawn_local(async move {
                let mut exec = exec;
                let _ = tokio::select! {
                    r = exec.preconnect() => r,
                    _ = shared.cancel.cancelled() => Ok(()),
                };
                ready.wait().await;
                shared.start_gate.cancelled().await;
                load_loop(id, &shared, &stats, exec, Renderer::new(rng)).await;
            }));
        }
        shared.start_gate.cancelled().await;
        let measure_start = *shared.measure_start.get().expect("set before the gate opens");
        let last_second = shared.spec.duration.map(|d| d.as_secs_f64().ceil() as u64);
        // Hand the interval over once a second, aligned to the measured start. The ticker has
        // its own token: this thread's connections ending must not cancel other threads'.
        let ticker_stop = CancellationToken::new();
        let ticker = {
            let (stats, tx, cancel) = (stats.clone(), tx.clone(), ticker_stop.clone());
            tokio::task::spawn_local(async move {
                let mut k = 1u64;
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep_until((measure_start + Duration::from_secs(k)).into()) => {
                            let iv = stats.borrow_mut().take();
                            let _ = tx.send((k, iv));
                            k += 1;
                        }
                        _ = cancel.cancelled() => break,
                    }
                }
            })
        };
        for t in tasks {
            if let Err(e) = t.await {
                // A panicking connection task is a bug in chstorm: say so, and stop the run.
                eprintln!("chstorm: internal error in a load task: {e}");
                shared.cancel.cancel();
            }
        }
        ticker_stop.cancel();
        let _ = ticker.await;
        let last = Instant::now().saturating_duration_since(measure_start);
        let k = (last.as_secs() + 1).min(last_second.unwrap_or(u64::MAX)).max(1);
        let iv = stats.borrow_mut().take();
        let _ = tx.send((k, iv));
    });
}

/// The one load loop: every mode goes through here.
async fn load_loop(id: usize, shared: &Shared, stats: &RefCell<Interval>, mut exec: Executor, mut renderer: Renderer) {
    let spec = &shared.spec;
    // Waiting at the gate guarantees these are set.
    let (Some(&t0), Some(&measure_start), Some(&deadline)) =
        (shared.t0.get(), shared.measure_start.get(), shared.deadline.get())
    else {
        return;
    };
    let (templates, randomize): (&[Arc<crate::Template>], bool) = match &spec.work {
        Work::Ping => (&[], false),
        Work::Queries { templates, randomize } => (templates, *randomize),
    };
    let mut next_query = id;
    let mut buf = Vec::with_capacity(256);
    let mut connect_failures = 0u32;
    let mut timer = if spec.schedule.is_open() { crate::timer::PreciseTimer::new().ok() } else { None };
    loop {
        if shared.cancel.is_cancelled() {
            break;
        }
        // When is this send due?
        let due = match spec.schedule {
            Schedule::Closed => Instant::now(),
            _ => {
                // This segment's k-th send is the whole schedule's send I + N k.
                let k = shared.next_tick.fetch_add(1, Ordering::Relaxed);
                let Some(off) = spec.schedule.offset_of(spec.segment.global(k)) else { break };
                let due = t0 + off;
                if deadline.is_some_and(|d| due >= d) {
                    // The next send falls after the deadline: -d ends this run.
                    let _ = shared.stop_reason.set(StopReason::Duration);
                    break;
                }
                if due > Instant::now() {
                    tokio::select! {
                        _ = crate::timer::sleep_until(timer.as_mut(), due) => {}
                        _ = shared.cancel.cancelled() => break,
                    }
                }
                due
            }
        };
        let measured = due >= measure_start;
        if measured {
            if let Some(n) = spec.requests {
                if shared.budget_used.fetch_add(1, Ordering::Relaxed) >= n {
                    let _ = shared.stop_reason.set(StopReason::Requests);
                    break;
                }
            }
            shared.sent_measured.fetch_add(1, Ordering::Relaxed);
        }
        if !templates.is_empty() {
            let t = if randomize {
                &templates[renderer.rng().gen_range(0..templates.len())]
            } else {
                next_query = (next_query + 1) % templates.len();
                &templates[next_query]
            };
            t.render(&mut renderer, &mut buf);
        }
        let late = spec.schedule.is_open() && Instant::now().saturating_duration_since(due) > LATE_AFTER;
        let res = {
            let call = exec.exec(&buf);
            tokio::pin!(call);
            tokio::select! {
                r = &mut call => Some(r),
                _ = shared.cancel.cancelled() => {
                    // The run is over: let the query finish briefly, unrecorded, then give up.
                    let _ = tokio::time::timeout(END_GRACE, &mut call).await;
                    None
                }
            }
        };
        let Some(res) = res else {
            exec.abandon().await;
            break;
        };
        let done = Instant::now();
        let connect_failed = matches!(res, Err(ProtoError::Connect { .. }));
        if measured && deadline.is_none_or(|d| done <= d) {
            let mut s = stats.borrow_mut();
            if late {
                s.late += 1;
            }
            match &res {
                Ok(q) => s.record_ok(done - due, q.bytes, q.rows),
                Err(e) => {
                    s.record_error_with(&e.kind_key(), || e.to_string());
                    let n = shared.errors.fetch_add(1, Ordering::Relaxed) + 1;
                    if spec.max_errors.is_some_and(|m| n >= m) {
                        drop(s);
                        shared.stop(StopReason::MaxErrors);
                        break;
                    }
                }
            }
        }
        if connect_failed {
            // Back off so a dead server does not turn the client into a busy loop.
            connect_failures += 1;
            let pause = Duration::from_millis(1u64 << connect_failures.min(9)).min(MAX_CONNECT_BACKOFF);
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shared.cancel.cancelled() => break,
            }
        } else {
            connect_failures = 0;
        }
    }
    shared.cancelled.fetch_add(exec.cancelled, Ordering::Relaxed);
    shared.cancel_failures.fetch_add(exec.cancel_failures, Ordering::Relaxed);
}
