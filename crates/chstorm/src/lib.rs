//! chstorm as a library: [`run`] executes a parsed command line, so tests drive the whole
//! program in-process.
//!
//! Exit codes: 0 the command did its job; 1 the run ended early on `--max-errors`;
//! 2 bad input or the run could not start; 3 (bench) no query succeeded; 4 (bench, merge) a
//! threshold failed or stopped the run; 130 interrupted by Ctrl-C (results still written).
//!
//! # Boundaries
//!
//! This crate owns the command line: the flags and their help (clap), turning flags into each
//! library's options, progress on stderr, Ctrl-C, exit codes and the one-line error (anyhow).
//! The work is in the library crates: `chstorm-load` and `chstorm-output` (bench, merge),
//! `chstorm-sweep` and `chstorm-report` (sweep, report, demo), `chstorm-compare`,
//! `chstorm-gateway`, `chstorm-colocate`, `chstorm-isolate`, `chstorm-local` and
//! `chstorm-data`. No library crate may import this one; it imports `chstorm-testenv` only in
//! its tests.

pub mod bench;
pub mod cli;
pub mod colocate;
pub mod compare;
pub mod dataset;
pub mod demo;
pub mod gateway_cmd;
pub mod isolate;
mod local;
mod merge;
mod progress;
mod scenarios;
pub mod sweep_cmd;

use chstorm_load::StopHandle;
use cli::{Cli, Command};
use std::sync::OnceLock;

/// Exit status for a run interrupted by Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Runs one command. Returns the process exit code; errors are bad input or failures to start.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    raise_open_files_limit();
    match cli.command {
        Command::Bench(args) => bench::run(args, &global_stop()),
        Command::Merge(args) => merge::run(args),
        Command::Local(args) => local::run(args),
        Command::Dataset(args) => dataset::run(args),
        Command::Sweep(args) => sweep_cmd::run_sweep(args, &global_stop()),
        Command::Report(args) => sweep_cmd::run_report(args),
        Command::Demo(args) => demo::run(args, &global_stop()),
        Command::Gateway(args) => gateway_cmd::run(args),
        Command::Compare(args) => compare::run(args, &global_stop()),
        Command::Colocate(args) => colocate::run(args, &global_stop()),
        Command::Isolate(args) => isolate::run(args),
        Command::Burn(args) => colocate::burn(args),
    }
}

/// The process-wide stop handle, wired to Ctrl-C on first use: the first Ctrl-C stops the run and
/// keeps what was measured, a second one exits at once.
pub fn global_stop() -> StopHandle {
    static STOP: OnceLock<StopHandle> = OnceLock::new();
    STOP.get_or_init(|| {
        let stop = StopHandle::new();
        let s = stop.clone();
        let _ = ctrlc::set_handler(move || {
            if s.is_interrupted() {
                std::process::exit(EXIT_INTERRUPTED);
            }
            eprintln!("\nchstorm: interrupted; stopping and writing what was measured (Ctrl-C again to quit now)");
            s.interrupt();
        });
        stop
    })
    .clone()
}

/// Raises the soft limit on open files to the hard limit: a run with thousands of connections
/// needs a descriptor per connection, and the common soft default (1024) is far too low.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a local struct; failure leaves the limit as it was.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// An error and its causes on one line.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let s = cause.to_string().replace('\n', " ");
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    parts.join(": ")
}
