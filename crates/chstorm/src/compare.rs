//! `chstorm compare`: the flags, and the outputs of [`chstorm_compare::compare`].

use anyhow::Context;
use chstorm_compare::{queries, CompareOptions, Plan, QuerySpec, Rules};
use chstorm_load::StopHandle;
use chstorm_proto::{Target, TlsOptions};
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Duration;

const EXAMPLES: &str = "\
Examples:
  chstorm compare --left http://old:8123 --right http://new:8123 --queries perf.sql --out cmp
  chstorm compare --left http://127.0.0.1:8123 --right 'http://127.0.0.1:8123/?max_threads=1' --suite storm
  chstorm compare --left clickhouse://old:9000 --left-http http://old:8123 --right clickhouse://new:9000 \\
                  --right-http http://new:8123 --queries perf.sql --json cmp.json --store http://history:8123

  chstorm compare --left http://old:8123 --right http://new:8123 --queries perf.sql --concurrency 8

Per query: one warm-up run on each side, then runs in counterbalanced pairs (left-right,
right-left, ...). Once each side has --runs runs and --min-time of measured time, the runs are
judged, and again at every tenth more runs, until the verdict is decided (a change at least the
threshold and --min-change; or a threshold under --unstable with no change of --min-change in
reach) or a side reaches --max-time or 500 runs. An unstable verdict says why: runs, threshold,
the largest source of spread seen (a run far out, drift in time, CPU wait, CPU steal) and what to
change.

Verdicts (client time): slower/faster when |diff| > threshold and >= --min-change; else unstable
when the threshold >= --unstable; else not_significant when |diff| <= threshold; else too_small.
error_left / error_right / error_both when a query fails on one or both sides. The threshold is the
99.95th percentile of |median - median| over 20,000 random splits of both sides' runs, / old
median: one threshold for every look that keeps the false-positive rate at 1 % over all of them.
A change can be called from 12 runs a side: --max-time must fit 12 runs of a slow query.

--concurrency N: each run is a window (--window) of N clients per side sending the query back to
back, windows alternating between the sides; judged by each window's QPS the same way.

Server metrics (query_log) and flamegraphs (trace_log) are read over HTTP: a native side needs
--left-http / --right-http.

Exit status: 0 no more regressions (slower, or error_right) than --fail-on; 1 more; 2 the
comparison could not be made; 130 Ctrl-C. See docs/COMPARE.md.";

/// Longest --min-time and --max-time: 1 day per query and side.
const MAX_MEASURED_TIME: Duration = Duration::from_secs(24 * 3600);

fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::cli::parse_duration_at_most(s, MAX_MEASURED_TIME)
}

fn parse_concurrency(s: &str) -> Result<usize, String> {
    crate::cli::parse_count(s, 1, chstorm_compare::MAX_CONCURRENCY as u64).map(|n| n as usize)
}

fn parse_runs(s: &str) -> Result<usize, String> {
    crate::cli::parse_count(s, 1, chstorm_compare::schedule::MAX_RUNS as u64).map(|n| n as usize)
}

/// `5%` or `0.05`.
fn parse_fraction(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.trim().strip_suffix('%') {
        Some(p) => (p, 0.01),
        None => (s.trim(), 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * scale),
        _ => Err(format!("'{s}' is not a fraction; write e.g. 5% or 0.05")),
    }
}

#[derive(Args, Debug, Clone)]
#[command(after_long_help = EXAMPLES)]
pub struct CompareArgs {
    /// The old server: http://, https://, clickhouse:// or clickhouses://. ?name=value parameters
    /// are settings for every query, so one server under two settings is a valid A/B.
    #[arg(long, value_name = "URL")]
    pub left: String,

    /// The new server, as --left.
    #[arg(long, value_name = "URL")]
    pub right: String,

    /// File with one query per line ('-' reads stdin); blank lines and -- comments are skipped.
    /// Placeholders such as {k:uniform(1,100)} get the same values on both sides.
    #[arg(long = "queries", value_name = "FILE", required_unless_present = "suite", conflicts_with = "suite")]
    pub queries_file: Option<PathBuf>,

    /// Compare the queries of every scenario of a suite: a built-in name (storm, kv, shopee,
    /// threads) or a suite YAML file.
    #[arg(long, value_name = "NAME")]
    pub suite: Option<String>,

    /// Folder for report.html (and flamegraphs/).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Write the result as JSON (schema chstorm.compare.v1) to FILE ('-' for stdout). Opened
    /// before the runs: a folder or an unwritable path is refused at once.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Measured runs per side, at least (5 to 500).
    #[arg(long, default_value_t = chstorm_compare::schedule::DEFAULT_RUNS, value_parser = parse_runs)]
    pub runs: usize,

    /// Measured time per side, at least (at most 1d).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub min_time: Duration,

    /// Measured time per side, at most: the budget an undecided query may use (at most 1d; runs
    /// also stop at 500 per side).
    #[arg(long, default_value = "12s", value_parser = parse_duration)]
    pub max_time: Duration,

    /// Clients per side: 1 compares query by query (each run one query); N > 1 compares
    /// throughput, each run a window of N clients sending the query back to back (1 to 1000;
    /// refused before any run when a server will not run N queries at once).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = parse_concurrency)]
    pub concurrency: usize,

    /// With --concurrency: how long each window sends queries (its last answers are waited for).
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub window: Duration,

    /// Seed for the query order, placeholders and thresholds.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Smallest change reported as slower or faster (5% or 0.05).
    #[arg(long, default_value = "5%", value_parser = parse_fraction)]
    pub min_change: f64,

    /// A threshold this large makes a query unstable (10% or 0.1).
    #[arg(long, default_value = "10%", value_parser = parse_fraction)]
    pub unstable: f64,

    /// Regressions (slower or error_right queries) allowed before the exit status is 1.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub fail_on: usize,

    /// Bound on every wait: connect, each query, each log read (at most 1d). A run that times out
    /// is cancelled on the server before the next run (native: Cancel packet; HTTP: KILL QUERY
    /// by its query_id).
    #[arg(long, default_value = "60s", value_parser = crate::cli::parse_timeout)]
    pub timeout: Duration,

    /// Also write each query's metrics into chstorm.compare_results on this ClickHouse (HTTP URL).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,

    /// An http(s) URL of the left server, for server metrics and flamegraphs when --left is native.
    #[arg(long, value_name = "URL")]
    pub left_http: Option<String>,

    /// An http(s) URL of the right server, for server metrics and flamegraphs when --right is native.
    #[arg(long, value_name = "URL")]
    pub right_http: Option<String>,

    /// Do not turn on the query profiler (10 ms) for the runs, even where both servers have it.
    #[arg(long)]
    pub no_profiler: bool,

    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,

    /// TLS: accept any server certificate (self-signed test servers).
    #[arg(long)]
    pub insecure: bool,

    /// TLS: trust the CA certificates in this PEM file instead of the built-in roots.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
}

/// Runs a comparison and writes its outputs; returns the exit code.
pub fn run(args: CompareArgs, stop: &StopHandle) -> anyhow::Result<i32> {
    let tls = TlsOptions { insecure: args.insecure, ca_file: args.cacert.clone() };
    let (specs, base_dir, notes) = load_queries(&args, &tls)?;
    // Fail on unwritable outputs and an unreachable history table before the runs.
    let json_out = args.json.as_deref().map(chstorm_output::file::JsonOut::open).transpose()?;
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    }
    let mut store = args.store.as_deref().map(|u| chstorm_compare::store::Store::open(u, &tls)).transpose()?;

    let opts = CompareOptions {
        left: args.left.clone(),
        right: args.right.clone(),
        left_http: args.left_http.clone(),
        right_http: args.right_http.clone(),
        queries: specs,
        base_dir,
        plan: Plan {
            runs: args.runs,
            min_time: args.min_time,
            max_time: args.max_time,
            max_runs: chstorm_compare::schedule::MAX_RUNS,
        },
        rules: Rules { min_change: args.min_change, unstable: args.unstable },
        seed: args.seed,
        timeout: args.timeout,
        tls,
        profiler: !args.no_profiler,
        fail_on: args.fail_on,
        concurrency: args.concurrency,
        window: args.window,
    };
    let quiet = args.quiet;
    if !quiet {
        for n in &notes {
            eprintln!("chstorm: {n}");
        }
    }
    let result = chstorm_compare::compare(
        &opts,
        &mut |line| {
            if !quiet {
                eprintln!("{line}");
            }
        },
        &|| stop.is_interrupted(),
    )?;

    let table = chstorm_compare::table::render(&result);
    let json_to_stdout = json_out.as_ref().is_some_and(|j| j.is_stdout());
    if json_to_stdout {
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    if let Some(json) = json_out {
        json.write(&result.to_json())?;
    }
    if let Some(out) = &args.out {
        let path = chstorm_compare::report::write(out, &result)?;
        if !json_to_stdout {
            println!("report: {}", path.display());
        }
    }
    if let Some(store) = store.as_mut() {
        let n = store.insert(&result)?;
        if !quiet {
            eprintln!("chstorm: stored {n} rows in chstorm.compare_results");
        }
    }
    Ok(if result.interrupted { crate::EXIT_INTERRUPTED } else { result.exit_code() })
}

/// The queries, the folder their placeholders' files are relative to, and notes.
fn load_queries(args: &CompareArgs, tls: &TlsOptions) -> anyhow::Result<(Vec<QuerySpec>, PathBuf, Vec<String>)> {
    if let Some(file) = &args.queries_file {
        let specs = crate::bench::read_queries_file(file)?.into_iter().map(QuerySpec::plain).collect();
        let base = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        return Ok((specs, base, Vec::new()));
    }
    let name = args.suite.as_deref().unwrap_or_default();
    let suite = chstorm_sweep::Suite::load(name)?;
    // ${dataset.rows} and the like come from the datasets loaded on the left server.
    let http = args
        .left_http
        .clone()
        .or_else(|| Target::parse(&args.left).ok().filter(|t| t.protocol.is_http()).map(|_| args.left.clone()));
    let vars = http.map(|u| queries::dataset_vars(&u, tls)).unwrap_or_default();
    let (specs, notes) = queries::from_suite(&suite, &vars).map_err(anyhow::Error::msg)?;
    let base = suite.source.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    Ok((specs, base, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions() {
        assert_eq!(parse_fraction("5%").unwrap(), 0.05);
        assert_eq!(parse_fraction("0.1").unwrap(), 0.1);
        assert!(parse_fraction("-1").is_err());
        assert!(parse_fraction("five").unwrap_err().contains("5%"));
    }
}
