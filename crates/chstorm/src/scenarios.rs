//! `chstorm bench --scenarios FILE`: the file's workloads at the same time in one process, each
//! built as bench builds one (its keys in place of the flags), started together (at
//! `--start-at`, else as soon as every scenario can connect) plus each one's `start`, reported
//! apart and in total.

use crate::bench::{build_spec, cli_thresholds, exit_code, warn_after, Job, Outputs, Watch};
use crate::cli::BenchArgs;
use anyhow::{anyhow, Context};
use chstorm_load::scenario::{ScenarioDef, ScenarioFile};
use chstorm_load::segment::CONNECT_LEAD;
use chstorm_load::{StopHandle, StopReason};
use chstorm_output::judge::{judge, union, Judging};
use chstorm_stats::Interval;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// `base` with the scenario's keys in place of the workload flags.
fn scenario_args(base: &BenchArgs, d: &ScenarioDef) -> BenchArgs {
    let mut a = base.clone();
    a.scenarios = None;
    a.url = d.url.clone().or_else(|| base.url.clone());
    a.queries = d.queries.clone();
    a.queries_file = d.queries_file.clone();
    a.ping = d.ping;
    a.randomize = d.randomize;
    a.seed = d.seed.unwrap_or(base.seed);
    a.settings = d.settings.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
    a.concurrency = d.concurrency.unwrap_or(1);
    a.rate = d.rate;
    a.ramp_to = d.ramp_to;
    a.ramp_over = d.ramp_over.map(|x| x.0);
    a.no_keepalive = d.keepalive == Some(false);
    a.duration = d.duration.map(|x| x.0);
    a.requests = d.requests;
    a.warmup = d.warmup.map(|x| x.0).unwrap_or_default();
    a.timeout = d.timeout.map(|x| x.0).unwrap_or(base.timeout);
    a.max_errors = d.max_errors;
    a.threads = d.threads;
    a.thresholds = Vec::new();
    a.abort_on_fail = Vec::new();
    a
}

/// Runs the scenario file of `args` and writes its outputs; returns the exit code.
pub fn run(args: BenchArgs, stop: &StopHandle) -> anyhow::Result<i32> {
    let path = args.scenarios.clone().context("no scenario file")?;
    let file = ScenarioFile::load(&path)?;
    let where_ = |name: &str| {
        let line = file.line_of(name).map(|l| format!(": line {l}")).unwrap_or_default();
        format!("{}{line}: scenario {name}", path.display())
    };
    let start = args.start_at.unwrap_or_else(|| SystemTime::now() + CONNECT_LEAD);
    let mut jobs = Vec::with_capacity(file.scenarios.len());
    for sc in &file.scenarios {
        let name = sc.def.name.as_str();
        let offset = sc.def.start.map(|d| d.0).unwrap_or_default();
        let (spec, meta) = build_spec(&scenario_args(&args, &sc.def)).with_context(|| where_(name))?;
        let job = Job::new(spec, meta, sc.thresholds.clone(), args.segment, Some(start + offset))
            .with_context(|| where_(name))?;
        jobs.push((name, offset, job));
    }
    let mut total_thresholds = file.thresholds.clone();
    union(&mut total_thresholds, &cli_thresholds(&args));
    let planned: Option<u64> = jobs.iter().map(|(_, _, j)| j.planned).sum();
    for t in total_thresholds.iter().filter(|t| t.abort_on_fail) {
        t.check_abort(planned.is_some()).map_err(|e| anyhow!("{}: the total: {e}", path.display()))?;
    }
    let outputs = Outputs::open(&args)?;

    // Each second: the scenario's line, its own --abort-on-fail, and the total's on the
    // latest totals of every scenario.
    let watches = Mutex::new(jobs.iter().map(|(name, _, j)| j.watch(stop, Some(name))).collect::<Vec<_>>());
    let total_watch = Mutex::new(Watch::new(&total_thresholds, planned, stop, None));
    let latest: Mutex<Vec<Option<Interval>>> = Mutex::new(vec![None; jobs.len()]);
    let names: Vec<&str> = jobs.iter().map(|(n, _, _)| *n).collect();
    let on_progress = |i: usize, p: &chstorm_load::Progress| {
        if !args.quiet {
            eprintln!("[{:>4}s] {}: {}", p.elapsed.as_secs(), names[i], crate::progress::line(p));
        }
        if let Ok(mut w) = watches.lock() {
            w[i].check(p);
        }
        if let Ok(mut l) = latest.lock() {
            l[i] = Some(p.total.clone());
            let mut sum = Interval::default();
            l.iter().flatten().for_each(|iv| sum.merge(iv));
            let all = chstorm_load::Progress { total: sum, ..p.clone() };
            if let Ok(mut w) = total_watch.lock() {
                w.check(&all);
            }
        }
    };
    let specs = jobs.iter().map(|(_, _, j)| j.spec.clone()).collect();
    let results = chstorm_load::run_together(specs, stop, &on_progress);

    let mut reports = Vec::with_capacity(jobs.len());
    let mut finished = Vec::with_capacity(jobs.len());
    for ((name, offset, job), r) in jobs.iter().zip(results) {
        let r = r.with_context(|| format!("{}: cannot run against {}", where_(name), job.meta.target))?;
        warn_after(&r, job.start_at);
        let mut report = job.report(&r)?;
        report.scenario = Some(name.to_string());
        report.start_offset_s = Some(offset.as_secs_f64());
        reports.push(report);
        finished.push(r);
    }
    // The run's wall time: from the first measured start to the last end.
    let first = finished.iter().map(|r| r.started_at).min().unwrap_or(start);
    let last = finished.iter().map(|r| r.started_at + r.elapsed).max().unwrap_or(start);
    let window = last.duration_since(first).unwrap_or(Duration::ZERO).as_secs_f64();
    let mut total = chstorm_output::merge::total(&reports, window)?;
    total.started_at = chstorm_output::report::rfc3339(first);
    total.segment = reports[0].segment.clone();
    let how = match args.segment {
        Some(s) if !s.is_whole() => Judging::Segment { planned },
        _ => Judging::Whole,
    };
    judge(&mut total, &total_thresholds, how)?;
    outputs.write(&total)?;
    let reasons: Vec<StopReason> = finished.iter().map(|r| r.stop_reason).collect();
    let stop_reason = [StopReason::Interrupted, StopReason::MaxErrors, StopReason::Threshold]
        .into_iter()
        .find(|w| reasons.contains(w))
        .unwrap_or(StopReason::Duration);
    Ok(exit_code(stop_reason, &total))
}
