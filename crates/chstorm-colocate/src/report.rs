//! The colocate JSON object, schema id `chstorm.colocate.v1`
//! (`schemas/chstorm.colocate.v1.json`). Latencies in seconds, CPU shares in percent of all
//! cores (100 = every core busy), changes in percent against the baseline phase.

use crate::phase::{Context, Outcome};
use crate::ColocateOptions;
use chstorm_isolate::offline::OfflineSpec;
use chstorm_isolate::{Availability, Request};
use chstorm_load::StopReason;
use chstorm_output::BenchReport;
use chstorm_stats::Percentiles;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Schema id written into every colocate report.
pub const SCHEMA_ID: &str = "chstorm.colocate.v1";

/// A whole colocate run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ColocateReport {
    pub schema: String,
    pub chstorm_version: String,
    /// RFC 3339, UTC: when the first phase began measuring.
    pub started_at: Option<String>,
    pub label: Option<String>,
    /// Server URL without password.
    pub target: String,
    pub protocol: String,
    /// chstorm started the server (no --url).
    pub local_server: bool,
    pub server_version: Option<String>,
    /// The server's process on this machine, whose CPU share is reported.
    pub server_pid: Option<u32>,
    /// How `server_pid` was found, or `n/a: why not`.
    pub server_cpu_source: String,
    /// CPUs this process may use; CPU shares are relative to all of them.
    pub cores: u64,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// The bench settings, identical in every phase.
    pub bench: BenchSettings,
    pub offline: OfflineSettings,
    /// `--isolation` as given: auto, none, all or a mechanism.
    pub isolation: String,
    /// `--rounds`: the phase sequence was run this many times, interleaved, and each phase's
    /// runs merged.
    pub rounds: u64,
    /// Every mechanism in detection order, with availability.
    pub mechanisms: Vec<MechanismStatus>,
    /// `completed`, `interrupted` (Ctrl-C) or `max_errors`.
    pub stop_reason: String,
    pub phases: Vec<PhaseReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchSettings {
    pub workload: Vec<String>,
    pub concurrency: u64,
    /// `closed` or `open`.
    pub mode: String,
    pub rate: Option<f64>,
    /// Planned measured length of each phase, seconds.
    pub duration_s: Option<f64>,
    pub requests: Option<u64>,
    pub warmup_s: f64,
    pub timeout_s: f64,
    pub keepalive: bool,
    pub threads: u64,
    pub settings: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OfflineSettings {
    /// `burner` or `command`.
    pub kind: String,
    /// Burner threads.
    pub threads: Option<u64>,
    pub command: Option<String>,
    /// How long the load ran before each loaded phase was measured, seconds.
    pub warmup_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MechanismStatus {
    pub name: String,
    /// 1 = tried first.
    pub rank: u64,
    pub available: bool,
    /// Where it acts, or why it is unavailable.
    pub detail: String,
}

/// One phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseReport {
    /// `baseline`, `offline` or `isolated`.
    pub name: String,
    /// The isolation mechanism, `none` for baseline and offline.
    pub mechanism: String,
    pub qps: f64,
    /// As in bench: min, mean, p50, p90, p95, p99, p99.9, p99.99, max, in seconds.
    pub latency_s: Percentiles,
    pub queries: u64,
    pub errors: u64,
    pub duration_s: f64,
    pub stop_reason: String,
    /// Changes against the baseline phase, percent (None for the baseline itself).
    pub qps_change_pct: Option<f64>,
    pub p50_change_pct: Option<f64>,
    pub p90_change_pct: Option<f64>,
    pub p99_change_pct: Option<f64>,
    /// The server's CPU share over the measured run, percent of all cores (None: server not found).
    pub server_cpu_pct: Option<f64>,
    /// The offline load's CPU share, percent of all cores (None: no load in this phase).
    pub offline_cpu_pct: Option<f64>,
    /// chstorm's own CPU share (the bench client), percent of all cores.
    pub client_cpu_pct: f64,
    /// How many runs (`--rounds`) this phase merges: counts add up, percentiles come from the
    /// summed histograms, CPU shares are time-weighted means.
    pub rounds: u64,
    /// The offline load's leader pid in each round.
    pub offline_pids: Vec<u32>,
    /// What the isolation did and read back.
    pub isolation: Vec<String>,
    /// The phase's full bench result (`chstorm.bench.v1`).
    pub bench: BenchReport,
}

fn change(v: f64, base: Option<f64>) -> Option<f64> {
    base.filter(|b| *b > 0.0 && b.is_finite()).map(|b| (v / b - 1.0) * 100.0)
}

impl ColocateReport {
    pub(crate) fn new(
        opts: &ColocateOptions,
        ctx: &Context,
        found: &[Availability],
        outcomes: Vec<Outcome>,
        interrupted: bool,
    ) -> Self {
        let baseline = outcomes.iter().find(|o| o.plan.name == "baseline").map(|o| o.report.clone());
        let phases: Vec<PhaseReport> = outcomes
            .into_iter()
            .map(|o| {
                let r = o.report;
                let base = baseline.as_ref().filter(|_| o.plan.name != "baseline");
                let l = &r.latency_s;
                PhaseReport {
                    name: o.plan.name.into(),
                    mechanism: o.plan.mechanism.map_or("none", |m| m.name()).into(),
                    qps: r.qps,
                    latency_s: *l,
                    queries: r.queries,
                    errors: r.errors,
                    duration_s: r.duration_s,
                    stop_reason: r.stop_reason.clone(),
                    qps_change_pct: change(r.qps, base.map(|b| b.qps)),
                    p50_change_pct: change(l.p50, base.map(|b| b.latency_s.p50)),
                    p90_change_pct: change(l.p90, base.map(|b| b.latency_s.p90)),
                    p99_change_pct: change(l.p99, base.map(|b| b.latency_s.p99)),
                    server_cpu_pct: o.server_cpu_pct,
                    offline_cpu_pct: o.offline_cpu_pct,
                    client_cpu_pct: o.client_cpu_pct,
                    rounds: o.rounds as u64,
                    offline_pids: o.offline_pids,
                    isolation: o.isolation,
                    bench: r,
                }
            })
            .collect();
        let stop_reason = if interrupted || phases.iter().any(|p| p.stop_reason == StopReason::Interrupted.as_str()) {
            "interrupted"
        } else if phases.iter().any(|p| p.stop_reason == StopReason::MaxErrors.as_str()) {
            "max_errors"
        } else {
            "completed"
        };
        let spec = &ctx.spec;
        let meta = &ctx.meta;
        let (kind, threads, command) = match &ctx.offline {
            OfflineSpec::Burner { threads, .. } => ("burner", Some(*threads as u64), None),
            OfflineSpec::Command(c) => ("command", None, Some(c.clone())),
        };
        ColocateReport {
            schema: SCHEMA_ID.into(),
            chstorm_version: env!("CARGO_PKG_VERSION").into(),
            started_at: phases.first().map(|p| p.bench.started_at.clone()),
            label: opts.meta.label.clone(),
            target: meta.target.clone(),
            protocol: meta.protocol.clone(),
            local_server: ctx.server.is_local(),
            server_version: phases.iter().find_map(|p| p.bench.server_version.clone()),
            server_pid: ctx.server.pid,
            server_cpu_source: ctx.server.cpu_source.clone(),
            cores: ctx.cores as u64,
            kernel: chstorm_isolate::procfs::kernel_release(),
            bench: BenchSettings {
                workload: meta.workload.clone(),
                concurrency: spec.concurrency as u64,
                mode: if meta.rate.is_some() { "open" } else { "closed" }.into(),
                rate: meta.rate,
                duration_s: spec.duration.map(|d| d.as_secs_f64()),
                requests: spec.requests,
                warmup_s: spec.warmup.as_secs_f64(),
                timeout_s: spec.timeout.as_secs_f64(),
                keepalive: spec.keepalive,
                threads: spec.threads as u64,
                settings: meta.settings.iter().cloned().collect(),
            },
            offline: OfflineSettings {
                kind: kind.into(),
                threads,
                command,
                warmup_s: ctx.offline_warmup.as_secs_f64(),
            },
            rounds: opts.rounds.max(1) as u64,
            isolation: opts.isolation.map_or("none", Request::name).into(),
            mechanisms: found
                .iter()
                .enumerate()
                .map(|(i, a)| MechanismStatus {
                    name: a.mechanism.name().into(),
                    rank: i as u64 + 1,
                    available: a.result.is_ok(),
                    detail: match &a.result {
                        Ok(d) => d.clone(),
                        Err(e) => e.reason(),
                    },
                })
                .collect(),
            stop_reason: stop_reason.into(),
            phases,
        }
    }

    /// True when the run was interrupted (Ctrl-C): the phases are all that was measured.
    pub fn interrupted(&self) -> bool {
        self.stop_reason == "interrupted"
    }

    /// 1 when a phase stopped on `max_errors`, else 0 (an interrupted run is the caller's to
    /// map; see [`interrupted`](Self::interrupted)).
    pub fn exit_code(&self) -> i32 {
        match self.stop_reason.as_str() {
            "max_errors" => 1,
            _ => 0,
        }
    }
}
