//! `chstorm colocate`: the flags, their defaults, and the dispatch to
//! [`chstorm_colocate::run`], which measures the phases and writes the outputs.
//!
//! Defaults that differ from `chstorm bench`: the workload is the seed's
//! [`SEED_QUERY`](chstorm_colocate::SEED_QUERY) when no query, query file or `--ping` is given;
//! the concurrency is [`DEFAULT_CONCURRENCY`](chstorm_colocate::DEFAULT_CONCURRENCY) (10) unless
//! `-c` is on the command line (detected with clap's `value_source`); without `--url` (or
//! `CHSTORM_URL`) the library starts a local server. The burner is this binary's hidden `burn`
//! sub-command.

use crate::cli::BenchArgs;
use crate::isolate::MechanismArg;
use crate::progress::ProgressSink;
use anyhow::Context;
use chstorm_colocate::{ColocateOptions, Observer, Offline};
use chstorm_isolate::Request;
use chstorm_load::StopHandle;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, FromArgMatches, ValueEnum};
use std::path::Path;
use std::time::Duration;

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

/// colocate's own flags (the bench flags come flattened beside them).
#[derive(Args, Debug, Clone)]
pub struct ColocateFlags {
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
    pub html: Option<std::path::PathBuf>,

    /// Write no HTML page.
    #[arg(long, conflicts_with = "html")]
    pub no_html: bool,
}

/// `chstorm colocate`'s arguments: every bench option, colocate's own, and whether `-c` was
/// given (so that its default can be [`chstorm_colocate::DEFAULT_CONCURRENCY`] instead of
/// bench's 1).
#[derive(Debug, Clone)]
pub struct ColocateArgs {
    pub bench: BenchArgs,
    pub opts: ColocateFlags,
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
            opts: ColocateFlags::from_arg_matches_mut(m)?,
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
        ColocateFlags::augment_args(BenchArgs::augment_args(cmd))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        ColocateFlags::augment_args_for_update(BenchArgs::augment_args_for_update(cmd))
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
    crate::bench::refuse_bench_only(&args.bench, "chstorm colocate")?;
    let b = &mut args.bench;
    if b.queries.is_empty() && b.queries_file.is_none() && !b.ping {
        b.queries = vec![chstorm_colocate::SEED_QUERY.to_string()];
    }
    if !args.concurrency_given {
        b.concurrency = chstorm_colocate::DEFAULT_CONCURRENCY;
    }
    let (spec, meta) = crate::bench::build_spec(&args.bench)?;
    let offline = match &args.opts.offline_cmd {
        Some(c) => Offline::Command(c.clone()),
        None => Offline::Burner { exe: burner_exe.to_path_buf(), threads: args.opts.offline_cpus.map(|n| n as usize) },
    };
    let opts = ColocateOptions {
        spec,
        meta,
        local_server: args.bench.url.is_none(),
        offline,
        isolation: args.opts.isolation.request(),
        offline_warmup: args.opts.offline_warmup,
        rounds: args.opts.rounds,
        json: args.bench.json.clone(),
        csv: args.bench.csv.clone(),
        html: chstorm_colocate::html_path(args.opts.no_html, args.opts.html.as_deref(), args.bench.json.as_deref()),
    };
    let mut progress = Progress { quiet: args.bench.quiet, sink: None };
    let report = chstorm_colocate::run(opts, stop, &mut progress)?;
    Ok(if report.interrupted() { crate::EXIT_INTERRUPTED } else { report.exit_code() })
}

/// Progress on stderr: `chstorm colocate: ` lines and each phase's bar; nothing with --quiet.
struct Progress {
    quiet: bool,
    sink: Option<ProgressSink>,
}

impl Observer for Progress {
    fn note(&mut self, line: &str) {
        if !self.quiet {
            eprintln!("chstorm colocate: {line}");
        }
    }
    fn run_started(&mut self, planned: Option<Duration>) {
        self.sink = Some(ProgressSink::new(self.quiet, planned));
    }
    fn progress(&mut self, p: &chstorm_load::Progress) {
        if let Some(s) = self.sink.as_mut() {
            s.update(p);
        }
    }
    fn run_finished(&mut self) {
        if let Some(mut s) = self.sink.take() {
            s.finish();
        }
    }
}
