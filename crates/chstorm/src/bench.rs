//! `chstorm bench`: build a [`LoadSpec`] from the flags, run it, write the outputs.

use crate::cli::BenchArgs;
use crate::progress::ProgressSink;
use anyhow::{bail, Context};
use chstorm_load::{LoadSpec, RunResult, Schedule, StopHandle, StopReason, Template, Work};
use chstorm_output::csv::CsvFile;
use chstorm_output::file::JsonOut;
use chstorm_output::{csv, text, BenchReport, RunMeta};
use chstorm_proto::{Target, TlsOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

    /// Prints the text summary (stdout, or stderr when JSON goes to stdout) and writes JSON and CSV.
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
            csv.append(&csv::row(report))?;
        }
        Ok(())
    }
}

/// Runs one bench and writes its outputs; returns the exit code.
pub fn run(args: BenchArgs, stop: &StopHandle) -> anyhow::Result<i32> {
    let (spec, meta) = build_spec(&args)?;
    // Open every output before spending minutes on a run.
    let outputs = Outputs::open(&args)?;
    let planned = spec.duration;
    let mut sink = ProgressSink::new(args.quiet, planned);
    let result = chstorm_load::run(spec, stop, |p| sink.update(p))
        .with_context(|| format!("cannot run against {}", meta.target))?;
    sink.finish();
    if result.cancel_failures > 0 {
        eprintln!(
            "chstorm: warning: {} of the {} queries given up on could not be cancelled on the server; \
             they may still be running there (see system.processes, query_id LIKE 'chstorm-{}-%')",
            result.cancel_failures, result.cancelled, result.run_id
        );
    }
    let report = BenchReport::new(&meta, &result);
    outputs.write(&report)?;
    Ok(exit_code(&result))
}

/// The exit code for a finished run: 130 interrupted, 1 stopped by --max-errors, 3 no query
/// succeeded, else 0.
pub fn exit_code(r: &RunResult) -> i32 {
    match r.stop_reason {
        StopReason::Interrupted => crate::EXIT_INTERRUPTED,
        StopReason::MaxErrors => 1,
        _ if r.total.queries == 0 => EXIT_NO_SUCCESS,
        _ => 0,
    }
}
