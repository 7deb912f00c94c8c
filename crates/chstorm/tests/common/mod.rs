//! Helpers shared by the integration tests: run `chstorm bench` in-process and read its JSON.
#![allow(dead_code)]

use chstorm::cli::{Cli, Command};
use chstorm_load::StopHandle;
use chstorm_output::BenchReport;
use clap::Parser;
use std::path::Path;

/// Runs `chstorm bench ARGS --quiet --json TMP` in-process; returns the exit code and the report.
pub fn bench(args: &[&str]) -> (i32, BenchReport) {
    bench_with_stop(args, &StopHandle::new())
}

pub fn bench_with_stop(args: &[&str], stop: &StopHandle) -> (i32, BenchReport) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let mut argv = vec!["chstorm", "bench", "--quiet", "--json", json.to_str().unwrap()];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("bad test args {argv:?}: {e}"));
    let Command::Bench(b) = cli.command else { unreachable!() };
    let code = chstorm::bench::run(b, stop).unwrap_or_else(|e| panic!("bench {argv:?} failed: {e:#}"));
    (code, read_report(&json))
}

pub fn read_report(path: &Path) -> BenchReport {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A marker unique to this test process and call, to find a run's queries in system.query_log.
pub fn marker(name: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("chstorm_{name}_{}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Number of finished queries in system.query_log whose text contains `marker`, and the number
/// of distinct client ports they came from.
pub fn query_log_counts(server: &chstorm_local::LocalServer, marker: &str) -> (u64, u64) {
    server.query("SYSTEM FLUSH LOGS").unwrap();
    let out = server
        .query(&format!(
            "SELECT count(), uniqExact(port) FROM system.query_log WHERE type = 2 AND query LIKE '%{marker}%' AND query NOT LIKE '%system.query_log%'"
        ))
        .unwrap();
    let mut it = out.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}
