//! `chstorm colocate`: measure an online ClickHouse alone, beside an offline CPU load, and
//! beside the same load isolated, with identical bench settings; print the seed's table, write
//! JSON (`chstorm.colocate.v1`) and an HTML page.
//!
//! Phases, in order: `baseline` (no offline load), `offline` (the load, no isolation), then one
//! `isolated` phase per mechanism (one for `--isolation auto` or a named mechanism, one per
//! available mechanism for `all`, none for `none`). Each loaded phase starts the load, isolates
//! it, lets it run `--offline-warmup` (default 1 s), measures, then kills and reaps it and
//! undoes the isolation.
//!
//! Defaults that differ from `chstorm bench`: the workload is the seed's
//! [`SEED_QUERY`] when no query, query file or `--ping` is given; the concurrency is
//! [`DEFAULT_CONCURRENCY`] (10) unless `-c` is on the command line (detected with clap's
//! `value_source`); without `--url` (or `CHSTORM_URL`) a local server is started through the
//! harness in a temporary directory, measured over the native protocol (as clickhouse-benchmark
//! does), and stopped at the end.

mod html;
mod phase;
mod report;
mod rounds;
mod server;
mod table;

use crate::cli::BenchArgs;
use crate::isolate::MechanismArg;
use anyhow::{bail, Context};
use chstorm_isolate::offline::OfflineSpec;
use chstorm_isolate::{Mechanism, Request};
use chstorm_load::StopHandle;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, FromArgMatches, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use report::{ColocateReport, PhaseReport, SCHEMA_ID};

/// The seed's workload.
pub const SEED_QUERY: &str = "SELECT * FROM system.numbers LIMIT 10000000 OFFSET 10000000";
/// The seed's concurrency, used when `-c` is not given.
pub const DEFAULT_CONCURRENCY: usize = 10;
/// HTML file name when neither `--html` nor `--json FILE` is given.
pub const DEFAULT_HTML: &str = "colocate.html";

/// How the isolated phase isolates the offline load.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsolationArg {
    /// The best available, in the detection order of `chstorm isolate`.
    Auto,
    /// No isolated phase: baseline and offline only.
    None,
    /// One isolated phase per mechanism this machine offers.
    All,
    /// openEuler cpu.qos_level=-1.
    QosLevel,
    /// cgroup cpu.idle=1 (v2 if it has the cpu controller, else v1).
    CgroupIdle,
    /// cgroup v2 cpu.idle=1.
    CgroupV2Idle,
    /// cgroup v1 cpu.idle=1.
    CgroupV1Idle,
    /// SCHED_IDLE on every thread of the load.
    SchedIdle,
    /// Minimum cpu.shares / cpu.weight plus nice 19.
    MinWeight,
}

impl IsolationArg {
    fn request(self) -> Option<Request> {
        let m = |a: MechanismArg| Some(a.request());
        match self {
            IsolationArg::None => None,
            IsolationArg::All => Some(Request::All),
            IsolationArg::Auto => m(MechanismArg::Auto),
            IsolationArg::QosLevel => m(MechanismArg::QosLevel),
            IsolationArg::CgroupIdle => m(MechanismArg::CgroupIdle),
            IsolationArg::CgroupV2Idle => m(MechanismArg::CgroupV2Idle),
            IsolationArg::CgroupV1Idle => m(MechanismArg::CgroupV1Idle),
            IsolationArg::SchedIdle => m(MechanismArg::SchedIdle),
            IsolationArg::MinWeight => m(MechanismArg::MinWeight),
        }
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("'{s}' is not a duration ({e}); write e.g. 500ms, 1s"))
}

/// colocate's own options (the bench options come flattened beside them).
#[derive(Args, Debug, Clone)]
pub struct ColocateOptions {
    /// Offline load: this many spinning burner threads, like `stress --cpu N`.
    /// [default: the number of CPUs]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub offline_cpus: Option<u32>,

    /// Offline load: this shell command (sh -c, own process group) instead of the burner; the
    /// whole group is killed after each loaded phase. It must keep running through a phase.
    #[arg(long, value_name = "CMD", conflicts_with = "offline_cpus")]
    pub offline_cmd: Option<String>,

    /// Isolation of the isolated phase(s).
    #[arg(long, value_enum, default_value_t = IsolationArg::Auto)]
    pub isolation: IsolationArg,

    /// How long the offline load runs before each loaded phase is measured.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub offline_warmup: Duration,

    /// Run the whole phase sequence this many times, interleaved, and merge each phase's runs
    /// (so drifts of a shared machine spread evenly over the phases); -d is per run.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,

    /// The HTML page. [default: FILE.html beside --json FILE, else ./colocate.html]
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// Write no HTML page.
    #[arg(long, conflicts_with = "html")]
    pub no_html: bool,
}

/// `chstorm colocate`'s arguments: every bench option, colocate's own, and whether `-c` was
/// given (so that its default can be [`DEFAULT_CONCURRENCY`] instead of bench's 1).
#[derive(Debug, Clone)]
pub struct ColocateArgs {
    pub bench: BenchArgs,
    pub opts: ColocateOptions,
    /// `-c/--concurrency` was on the command line.
    pub concurrency_given: bool,
}

fn concurrency_given(m: &ArgMatches) -> bool {
    m.value_source("concurrency") == Some(ValueSource::CommandLine)
}

impl FromArgMatches for ColocateArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut m.clone())
    }
    fn from_arg_matches_mut(m: &mut ArgMatches) -> Result<Self, clap::Error> {
        let given = concurrency_given(m);
        Ok(ColocateArgs {
            bench: BenchArgs::from_arg_matches_mut(m)?,
            opts: ColocateOptions::from_arg_matches_mut(m)?,
            concurrency_given: given,
        })
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.concurrency_given |= concurrency_given(m);
        self.bench.update_from_arg_matches(m)?;
        self.opts.update_from_arg_matches(m)
    }
}

impl Args for ColocateArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        ColocateOptions::augment_args(BenchArgs::augment_args(cmd))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        ColocateOptions::augment_args_for_update(BenchArgs::augment_args_for_update(cmd))
    }
}

pub const COLOCATE_HELP: &str = "\
Phases (identical bench settings): baseline; offline load, no isolation; offline load isolated
(one row per mechanism with --isolation all). Each loaded phase runs the load --offline-warmup
first, and the load is killed and reaped after every phase, on errors and on Ctrl-C. --rounds N
repeats the whole sequence N times, interleaved, and merges each phase's runs (for shared machines).

Defaults: the seed's query 'SELECT * FROM system.numbers LIMIT 10000000 OFFSET 10000000' when no
query is given; -c 10 when -c is not given; without --url, a local server started in a temporary
directory and measured over the native protocol; 10 s per phase (-d).

Examples:
  chstorm colocate --offline-cpus 2                               # local server, seed workload
  chstorm colocate --offline-cpus 2 --isolation all -d 15s --json colocate.json
  chstorm colocate --url clickhouse://127.0.0.1:9000 --offline-cmd 'stress --cpu 8' \\
                   --isolation sched-idle

--json writes schema chstorm.colocate.v1 (phases: name, mechanism, qps, latency_s as in bench,
server and offline CPU shares); --csv appends one bench row per phase (label colocate/PHASE/MECHANISM).

Exit status: 0 done, 1 a phase stopped on --max-errors, 2 bad input, unavailable isolation or
cannot start, 130 Ctrl-C (the phases measured so far are printed and written).";

/// The hidden `chstorm burn` sub-command that is the burner.
#[derive(Args, Debug, Clone)]
pub struct BurnArgs {
    /// Spinning threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

/// Runs the burner; never returns.
pub fn burn(args: BurnArgs) -> anyhow::Result<i32> {
    chstorm_isolate::burn::run(args.threads)
}

/// Runs `chstorm colocate`, re-executing this binary as the burner.
pub fn run(args: ColocateArgs, stop: &StopHandle) -> anyhow::Result<i32> {
    let exe = std::env::current_exe().context("cannot find the chstorm binary to start the burner")?;
    run_with(args, stop, &exe)
}

/// Runs `chstorm colocate` with `burner_exe` as the chstorm binary that runs `burn` (tests that
/// run in-process pass the real binary here).
pub fn run_with(mut args: ColocateArgs, stop: &StopHandle, burner_exe: &Path) -> anyhow::Result<i32> {
    let b = &mut args.bench;
    if b.queries.is_empty() && b.queries_file.is_none() && !b.ping {
        b.queries = vec![SEED_QUERY.to_string()];
    }
    if !args.concurrency_given {
        b.concurrency = DEFAULT_CONCURRENCY;
    }
    let found = chstorm_isolate::detect_all();
    let mechanisms: Vec<Mechanism> = match args.opts.isolation.request() {
        Some(r) => chstorm_isolate::choose(r, &found).map_err(|e| anyhow::anyhow!("--isolation: {e}"))?,
        None => Vec::new(),
    };
    let cores = chstorm_isolate::procfs::cores();
    let offline = match &args.opts.offline_cmd {
        Some(c) if c.trim().is_empty() => bail!("--offline-cmd is empty; give a command that keeps the CPU busy"),
        Some(c) => OfflineSpec::Command(c.clone()),
        None => {
            let n = args.opts.offline_cpus.map(|n| n as usize).unwrap_or(cores);
            let argv = vec!["burn".to_string(), "--threads".to_string(), n.to_string()];
            OfflineSpec::Burner { exe: burner_exe.to_path_buf(), args: argv, threads: n }
        }
    };
    let html_path = html_path(&args);
    for p in [args.bench.json.as_deref(), args.bench.csv.as_deref(), html_path.as_deref()].into_iter().flatten() {
        crate::bench::check_writable(p)?;
    }
    let server = server::Server::resolve(&mut args.bench)?;
    let (spec, meta) = crate::bench::build_spec(&args.bench)?;
    let ctx = phase::Context {
        spec,
        meta,
        offline,
        offline_warmup: args.opts.offline_warmup,
        server: &server,
        cores,
        quiet: args.bench.quiet,
    };
    let plans = phase::plans(&mechanisms);
    let rounds = args.opts.rounds as usize;
    let mut runs: Vec<Vec<phase::Outcome>> = plans.iter().map(|_| Vec::new()).collect();
    'rounds: for round in 1..=rounds {
        for (i, plan) in plans.iter().enumerate() {
            if stop.is_interrupted() {
                break 'rounds;
            }
            if !args.bench.quiet {
                let r = if rounds > 1 { format!("round {round}/{rounds}, ") } else { String::new() };
                eprintln!("chstorm colocate: {r}phase {}/{}: {}", i + 1, plans.len(), plan.describe(&ctx.offline));
            }
            match phase::run(plan, &ctx, stop)? {
                Some(p) => runs[i].push(p),
                None => break 'rounds,
            }
        }
    }
    let phases = runs.into_iter().filter(|r| !r.is_empty()).map(rounds::merge).collect::<anyhow::Result<Vec<_>>>()?;
    let report = ColocateReport::new(&args, &ctx, &found, phases, stop.is_interrupted());
    write_outputs(&args, &report, html_path.as_deref())?;
    Ok(report.exit_code())
}

fn html_path(args: &ColocateArgs) -> Option<PathBuf> {
    if args.opts.no_html {
        return None;
    }
    if let Some(p) = &args.opts.html {
        return Some(p.clone());
    }
    match args.bench.json.as_deref() {
        Some(j) if j != Path::new("-") => Some(j.with_extension("html")),
        _ => Some(PathBuf::from(DEFAULT_HTML)),
    }
}

fn write_outputs(args: &ColocateArgs, report: &ColocateReport, html_path: Option<&Path>) -> anyhow::Result<()> {
    let text = table::render(report);
    let json = serde_json::to_string_pretty(report)? + "\n";
    if args.bench.json.as_deref() == Some(Path::new("-")) {
        eprint!("{text}");
        print!("{json}");
    } else {
        print!("{text}");
    }
    if let Some(path) = args.bench.json.as_deref().filter(|p| *p != Path::new("-")) {
        std::fs::write(path, &json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = html_path {
        std::fs::write(path, html::render(report)).with_context(|| format!("cannot write {}", path.display()))?;
        if !args.bench.quiet {
            eprintln!("chstorm colocate: wrote {}", path.display());
        }
    }
    if let Some(path) = &args.bench.csv {
        for p in &report.phases {
            chstorm_output::csv::append(path, &chstorm_output::csv::row(&p.bench))?;
        }
    }
    Ok(())
}
