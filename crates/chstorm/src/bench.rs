//! `chstorm bench`: build a [`LoadSpec`] from the flags, run it, judge its thresholds, write
//! the outputs. `--scenarios` runs several at once ([`crate::scenarios`]).

use crate::cli::BenchArgs;
use crate::progress::ProgressSink;
use anyhow::{bail, Context};
use chstorm_load::{
    LoadSpec, Progress, RunResult, Schedule, Segment, StopHandle, StopReason, Template, Threshold, Work,
};
use chstorm_output::csv::CsvFile;
use chstorm_output::file::JsonOut;
use chstorm_output::judge::{judge, Judging};
use chstorm_output::report::SegmentInfo;
use chstorm_output::{csv, text, BenchReport, RunMeta};
use chstorm_proto::{Target, TlsOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Target when neither --url nor CHSTORM_URL is given.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8123";

/// Default measured length when neither --duration nor --requests is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// Reads the queries of a `--queries` file: one per line; blank lines and `--` comments skipped.
pub fn read_queries_file(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("cannot read queries from stdin")?;
        s
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read query file {}", path.display()))?
    };
    let queries: Vec<String> =
        text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("--")).map(str::to_string).collect();
    if queries.is_empty() {
        bail!("query file {} has no queries: write one query per line", path.display());
    }
    Ok(queries)
}

/// Turns the flags into a run description and the metadata written beside the results.
pub fn build_spec(args: &BenchArgs) -> anyhow::Result<(LoadSpec, RunMeta)> {
    let target = Target::parse(args.url.as_deref().unwrap_or(DEFAULT_URL))?.with_env_credentials();
    let (work, workload) = if args.ping {
        (Work::Ping, vec!["ping".to_string()])
    } else {
        let mut texts = args.queries.clone();
        let mut base = PathBuf::from(".");
        if let Some(file) = &args.queries_file {
            texts.extend(read_queries_file(file)?);
            if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
                base = parent.to_path_buf();
            }
        }
        if texts.is_empty() {
            bail!("nothing to send: give --query SQL, --queries FILE or --ping");
        }
        let templates = texts.iter().map(|q| Template::parse(q, &base)).collect::<Result<Vec<_>, _>>()?;
        (Work::Queries { templates, randomize: args.randomize }, texts)
    };
    let schedule = match (args.rate, args.ramp_to, args.ramp_over) {
        (None, _, _) => Schedule::Closed,
        (Some(rate), None, _) => Schedule::Fixed { rate },
        (Some(from), Some(to), Some(over)) => Schedule::Ramp { from, to, over },
        (Some(_), Some(_), None) => bail!("--ramp-to needs --ramp-over DURATION"),
    };
    let duration = match (args.duration, args.requests) {
        (None, None) => Some(DEFAULT_DURATION),
        (d, _) => d,
    };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let spec = LoadSpec {
        tls: TlsOptions { insecure: args.insecure, ca_file: args.cacert.clone() },
        work,
        settings: args.settings.clone(),
        concurrency: args.concurrency,
        schedule,
        duration,
        requests: args.requests,
        warmup: args.warmup,
        timeout: args.timeout,
        keepalive: !args.no_keepalive,
        max_errors: args.max_errors,
        seed: args.seed,
        threads: args.threads.unwrap_or_else(|| cores.min(args.concurrency.max(1))),
        segment: Default::default(),
        start_at: None,
        target: target.clone(),
    };
    spec.validate().map_err(anyhow::Error::msg)?;
    let mut settings = target.settings.clone();
    settings.extend(args.settings.iter().cloned());
    let meta = RunMeta {
        target: target.to_string(),
        protocol: target.protocol.as_str().to_string(),
        keepalive: spec.keepalive,
        concurrency: spec.concurrency,
        rate: schedule.nominal_rate(),
        ramp: match schedule {
            Schedule::Ramp { from, to, over } => {
                Some(chstorm_output::report::Ramp { from_qps: from, to_qps: to, over_s: over.as_secs_f64() })
            }
            _ => None,
        },
        settings,
        workload,
        warmup_s: spec.warmup.as_secs_f64(),
        label: args.label.clone(),
    };
    Ok((spec, meta))
}

/// Exit status of a run in which no query succeeded (every one failed, or none finished).
pub const EXIT_NO_SUCCESS: i32 = 3;
/// Exit status of a run that failed a threshold, or stopped on one (`--abort-on-fail`).
pub const EXIT_THRESHOLD: i32 = 4;

/// The thresholds of the command line: `--threshold`, then `--abort-on-fail`.
pub fn cli_thresholds(args: &BenchArgs) -> Vec<Threshold> {
    args.thresholds.iter().chain(&args.abort_on_fail).cloned().collect()
}

/// One workload made ready to run: its spec cut to the segment and timed to the start, what
/// its report says of it, and the thresholds it is judged on.
pub struct Job {
    pub spec: LoadSpec,
    pub meta: RunMeta,
    pub thresholds: Vec<Threshold>,
    /// The most queries the whole workload (every segment) sends, when known.
    pub planned: Option<u64>,
    pub segment: Option<Segment>,
    pub start_at: Option<SystemTime>,
}

impl Job {
    /// Checks `--abort-on-fail` against what is known before the run, then takes this
    /// segment's share of `spec` and sets its start.
    pub fn new(
        spec: LoadSpec,
        mut meta: RunMeta,
        thresholds: Vec<Threshold>,
        segment: Option<Segment>,
        start_at: Option<SystemTime>,
    ) -> anyhow::Result<Job> {
        let planned = spec.planned_sends();
        for t in thresholds.iter().filter(|t| t.abort_on_fail) {
            t.check_abort(planned.is_some()).map_err(anyhow::Error::msg)?;
        }
        let part = segment.unwrap_or(Segment::WHOLE);
        let mut spec = spec.segmented(part).map_err(anyhow::Error::msg)?;
        spec.start_at = start_at;
        spec.validate().map_err(anyhow::Error::msg)?;
        // The report shows this segment's share of the load.
        let n = f64::from(part.count);
        meta.concurrency = spec.concurrency;
        meta.rate = meta.rate.map(|r| r / n);
        if let Some(ramp) = &mut meta.ramp {
            ramp.from_qps /= n;
            ramp.to_qps /= n;
        }
        Ok(Job { spec, meta, thresholds, planned, segment, start_at })
    }

    /// The report of a finished run, with its segment and its thresholds judged.
    pub fn report(&self, r: &RunResult) -> anyhow::Result<BenchReport> {
        let mut report = BenchReport::new(&self.meta, r);
        report.segment = self.segment.map(|s| SegmentInfo {
            index: s.index,
            count: s.count,
            start_at: self.start_at.map(chstorm_output::report::rfc3339),
        });
        let how = match self.segment {
            Some(s) if !s.is_whole() => Judging::Segment { planned: self.planned },
            _ => Judging::Whole,
        };
        judge(&mut report, &self.thresholds, how)?;
        Ok(report)
    }

    /// Stops the run through `stop` once one of this job's `--abort-on-fail` thresholds can no
    /// longer be met; `name` prefixes what it says (a scenario's name).
    pub fn watch(&self, stop: &StopHandle, name: Option<&str>) -> Watch {
        Watch::new(&self.thresholds, self.planned, stop, name)
    }
}

/// Checks `--abort-on-fail` thresholds on each second's totals.
pub struct Watch {
    aborting: Vec<Threshold>,
    planned: Option<u64>,
    stop: StopHandle,
    name: String,
    fired: bool,
}

impl Watch {
    /// Watches the `--abort-on-fail` ones of `thresholds`, for a workload of at most `planned`
    /// queries in all (when known).
    pub fn new(thresholds: &[Threshold], planned: Option<u64>, stop: &StopHandle, name: Option<&str>) -> Watch {
        Watch {
            aborting: thresholds.iter().filter(|t| t.abort_on_fail).cloned().collect(),
            planned,
            stop: stop.clone(),
            name: name.map(|n| format!("scenario {n}: ")).unwrap_or_default(),
            fired: false,
        }
    }

    /// Judges the totals so far; stops the run (once) when a threshold is lost.
    pub fn check(&mut self, p: &Progress) {
        if self.fired || self.aborting.is_empty() {
            return;
        }
        let t = &p.total;
        let f = chstorm_load::Figures { hist: &t.hist, queries: t.queries, errors: t.errors, qps: 0.0 };
        if let Some(lost) = self.aborting.iter().find(|th| th.lost(&f, self.planned)) {
            let value =
                f.value(lost.figure).map(|v| text::figure_value(lost.figure, v)).unwrap_or_else(|| "none".into());
            eprintln!(
                "chstorm: {}threshold '{}' can no longer be met ({} {value} after {} s, {} queries): stopping the run (--abort-on-fail)",
                self.name,
                lost.text,
                lost.figure.name(),
                p.elapsed.as_secs(),
                t.queries + t.errors
            );
            self.fired = true;
            self.stop.abort();
        }
    }
}

/// The outputs of one bench, opened before the run.
pub struct Outputs {
    json: Option<JsonOut>,
    csv: Option<CsvFile>,
}

impl Outputs {
    /// Opens `--json` and `--csv` now, so a folder, a missing folder, an unwritable file or a
    /// CSV with another header fails before the run instead of after it.
    pub fn open(args: &BenchArgs) -> anyhow::Result<Outputs> {
        let json = args.json.as_deref().map(JsonOut::open).transpose()?;
        let csv = args.csv.as_deref().map(CsvFile::open).transpose()?;
        Ok(Outputs { json, csv })
    }

    /// Prints the text summary (stdout, or stderr when JSON goes to stdout) and writes JSON and
    /// CSV (a row per scenario and the total's, for a run of scenarios).
    pub fn write(self, report: &BenchReport) -> anyhow::Result<()> {
        let summary = text::summary(report);
        if self.json.as_ref().is_some_and(JsonOut::is_stdout) {
            eprint!("{summary}");
        } else {
            print!("{summary}");
        }
        if let Some(json) = self.json {
            json.write(&report.to_json())?;
        }
        if let Some(mut csv) = self.csv {
            for row in csv::rows(report) {
                csv.append(&row)?;
            }
        }
        Ok(())
    }
}

/// Refuses the flags that only `chstorm bench` acts on, for commands that reuse bench's flags.
pub fn refuse_bench_only(args: &BenchArgs, command: &str) -> anyhow::Result<()> {
    let given = [
        ("--scenarios", args.scenarios.is_some()),
        ("--threshold", !args.thresholds.is_empty()),
        ("--abort-on-fail", !args.abort_on_fail.is_empty()),
        ("--segment", args.segment.is_some()),
        ("--start-at", args.start_at.is_some()),
    ];
    if let Some((flag, _)) = given.iter().find(|(_, on)| *on) {
        bail!("{command} does not take {flag}: it is chstorm bench's (run chstorm bench for it)");
    }
    Ok(())
}

/// Runs one bench (or a scenario file) and writes its outputs; returns the exit code.
pub fn run(args: BenchArgs, stop: &StopHandle) -> anyhow::Result<i32> {
    if args.scenarios.is_some() {
        return crate::scenarios::run(args, stop);
    }
    let (spec, meta) = build_spec(&args)?;
    let job = Job::new(spec, meta, cli_thresholds(&args), args.segment, args.start_at)?;
    // Open every output before spending minutes on a run.
    let outputs = Outputs::open(&args)?;
    let mut sink = ProgressSink::new(args.quiet, job.spec.duration);
    let mut watch = job.watch(stop, None);
    let result = chstorm_load::run(job.spec.clone(), stop, |p| {
        sink.update(p);
        watch.check(p);
    })
    .with_context(|| format!("cannot run against {}", job.meta.target))?;
    sink.finish();
    warn_after(&result, job.start_at);
    let report = job.report(&result)?;
    outputs.write(&report)?;
    Ok(exit_code(result.stop_reason, &report))
}

/// Warnings about a finished run: queries that may still run on the server, a late start.
pub fn warn_after(result: &RunResult, start_at: Option<SystemTime>) {
    if result.cancel_failures > 0 {
        eprintln!(
            "chstorm: warning: {} of the {} queries given up on could not be cancelled on the server; \
             they may still be running there (see system.processes, query_id LIKE 'chstorm-{}-%')",
            result.cancel_failures, result.cancelled, result.run_id
        );
    }
    if start_at.is_some() && result.late_start > Duration::from_millis(100) {
        eprintln!(
            "chstorm: warning: the clock started {:.3} s after --start-at (the connections opened late, or the process \
             started late); the schedule still counts from --start-at, so an open loop sent what fell due meanwhile at once",
            result.late_start.as_secs_f64()
        );
    }
}

/// The exit code for a finished run (the first that applies): 130 interrupted, 1 stopped by
/// --max-errors, 4 a threshold failed or stopped the run, 3 no query succeeded, else 0.
pub fn exit_code(stop: StopReason, report: &BenchReport) -> i32 {
    match stop {
        StopReason::Interrupted => crate::EXIT_INTERRUPTED,
        StopReason::MaxErrors => 1,
        StopReason::Threshold => EXIT_THRESHOLD,
        _ if chstorm_output::judge::failed(report) => EXIT_THRESHOLD,
        _ if report.queries == 0 => EXIT_NO_SUCCESS,
        _ => 0,
    }
}
