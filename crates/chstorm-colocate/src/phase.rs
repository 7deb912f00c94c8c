//! One phase: start the offline load (if any), isolate it, let it warm up, run the bench,
//! sample CPU shares around the run, then stop the load and undo the isolation, on every path.

use crate::error::ColocateError;
use crate::server::Server;
use crate::Observer;
use chstorm_isolate::offline::{OfflineLoad, OfflineSpec};
use chstorm_isolate::{cpu, Mechanism, Record, Target};
use chstorm_load::{LoadSpec, StopHandle};
use chstorm_output::{BenchReport, RunMeta};
use std::time::{Duration, Instant};

/// What a colocate run shares between its phases.
pub(crate) struct Context<'a> {
    pub(crate) spec: LoadSpec,
    pub(crate) meta: RunMeta,
    pub(crate) offline: OfflineSpec,
    pub(crate) offline_warmup: Duration,
    pub(crate) server: &'a Server,
    pub(crate) cores: usize,
}

/// One planned phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// `baseline`, `offline` or `isolated`.
    pub(crate) name: &'static str,
    pub(crate) offline: bool,
    pub(crate) mechanism: Option<Mechanism>,
}

impl Plan {
    /// A line for the progress output.
    pub(crate) fn describe(&self, offline: &OfflineSpec) -> String {
        match (self.offline, self.mechanism) {
            (false, _) => format!("{} (no offline load)", self.name),
            (true, None) => format!("{} ({}, no isolation)", self.name, offline.describe()),
            (true, Some(m)) => format!("{} ({}, {})", self.name, offline.describe(), m.name()),
        }
    }
}

/// baseline, offline, then one isolated phase per mechanism.
pub(crate) fn plans(mechanisms: &[Mechanism]) -> Vec<Plan> {
    let mut p = vec![
        Plan { name: "baseline", offline: false, mechanism: None },
        Plan { name: "offline", offline: true, mechanism: None },
    ];
    p.extend(mechanisms.iter().map(|&m| Plan { name: "isolated", offline: true, mechanism: Some(m) }));
    p
}

/// What one phase measured.
pub(crate) struct Outcome {
    pub(crate) plan: Plan,
    pub(crate) report: BenchReport,
    /// Percent of all cores, over the bench run.
    pub(crate) server_cpu_pct: Option<f64>,
    pub(crate) offline_cpu_pct: Option<f64>,
    pub(crate) client_cpu_pct: f64,
    /// The offline load's leader pid in each round.
    pub(crate) offline_pids: Vec<u32>,
    /// Runs merged into this outcome (see `--rounds`).
    pub(crate) rounds: usize,
    /// What the isolation did, read back, and what undoing it could not restore.
    pub(crate) isolation: Vec<String>,
}

/// Stops the load, then undoes the isolation: on drop, so every exit path does it.
#[derive(Default)]
struct Guard {
    load: Option<OfflineLoad>,
    record: Option<Record>,
    problems: Vec<String>,
}

impl Guard {
    fn finish(&mut self) {
        if let Some(mut l) = self.load.take() {
            l.stop();
        }
        if let Some(r) = self.record.take() {
            self.problems.extend(r.undo().problems);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Runs `plan`. None when interrupted before the measurement began.
pub(crate) fn run(
    plan: &Plan,
    ctx: &Context,
    stop: &StopHandle,
    observer: &mut dyn Observer,
) -> Result<Option<Outcome>, ColocateError> {
    let mut guard = Guard::default();
    let mut isolation = Vec::new();
    if plan.offline {
        start_load(plan, ctx, &mut guard)?;
        if let Some(r) = &guard.record {
            isolation.extend(r.applied.iter().cloned());
            isolation.extend(r.read_back().into_iter().map(|l| format!("read back: {l}")));
        }
        if !sleep_unless_stopped(ctx.offline_warmup, stop) {
            return Ok(None);
        }
        if let Some(load) = guard.load.as_mut() {
            if !load.is_running() {
                return Err(ColocateError::LoadExited(ctx.offline.describe()));
            }
        }
    }
    let server_pids: Vec<u32> = ctx.server.pid.into_iter().collect();
    let me = [std::process::id()];
    let (s0, c0) = (cpu::sample(&server_pids), cpu::sample(&me));
    let o0 = guard.load.as_ref().map(OfflineLoad::cpu_sample);
    observer.run_started(ctx.spec.duration);
    let result = chstorm_load::run(ctx.spec.clone(), stop, |p| observer.progress(p))
        .map_err(|source| ColocateError::Run { target: ctx.meta.target.clone(), source })?;
    observer.run_finished();
    let (s1, c1) = (cpu::sample(&server_pids), cpu::sample(&me));
    let o1 = guard.load.as_ref().map(OfflineLoad::cpu_sample);
    let offline_pids: Vec<u32> = guard.load.as_ref().map(OfflineLoad::pid).into_iter().collect();
    guard.finish();
    isolation.extend(guard.problems.drain(..).map(|p| format!("undo: {p}")));
    let mut meta = ctx.meta.clone();
    let base = meta.label.clone().unwrap_or_else(|| "colocate".into());
    meta.label = Some(format!("{base}/{}/{}", plan.name, plan.mechanism.map_or("none", Mechanism::name)));
    let report = BenchReport::new(&meta, &result);
    Ok(Some(Outcome {
        plan: *plan,
        server_cpu_pct: ctx.server.pid.map(|_| cpu::share_pct(&s0, &s1, ctx.cores)),
        offline_cpu_pct: o0.zip(o1).map(|(a, b)| cpu::share_pct(&a, &b, ctx.cores)),
        client_cpu_pct: cpu::share_pct(&c0, &c1, ctx.cores),
        offline_pids,
        rounds: 1,
        isolation,
        report,
    }))
}

/// Starts the load into `guard`, isolated as the plan says: the burner after it is running
/// (every thread already started, as an operator's workload would be), a custom command from
/// its first instruction (so children it forks at once are covered too).
fn start_load(plan: &Plan, ctx: &Context, guard: &mut Guard) -> Result<(), ColocateError> {
    match (&ctx.offline, plan.mechanism) {
        (OfflineSpec::Command(c), Some(m)) => {
            let (record, pre) =
                chstorm_isolate::prepare_command_in(m, &["sh".into(), "-c".into(), c.clone()], &cgroup_name())?;
            guard.record = Some(record);
            guard.load = Some(OfflineLoad::start(&ctx.offline, Some(pre))?);
        }
        (_, m) => {
            let load = OfflineLoad::start(&ctx.offline, None)?;
            let pid = load.pid();
            guard.load = Some(load);
            if let Some(m) = m {
                guard.record = Some(chstorm_isolate::apply_in(m, &Target::Pids(vec![pid]), &cgroup_name())?);
            }
        }
    }
    Ok(())
}

/// The child cgroup colocate uses: `chstorm-colocate-PID`, its own, so that it never shares
/// settings with a `chstorm isolate` of the operator's (which uses `chstorm-offline`).
fn cgroup_name() -> String {
    format!("chstorm-colocate-{}", std::process::id())
}

/// Sleeps `d` in small steps; false if a stop was requested meanwhile.
fn sleep_unless_stopped(d: Duration, stop: &StopHandle) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.is_interrupted() {
            return false;
        }
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
    }
    !stop.is_interrupted()
}
