//! The command line.

use chstorm_load::spec::{
    describe_limit, MAX_CONCURRENCY, MAX_DURATION, MAX_RATE, MAX_REQUESTS, MAX_THREADS, MAX_TIMEOUT, MAX_WARMUP,
};
use chstorm_load::{Segment, Threshold};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// A storm of small queries against ClickHouse, measured honestly.
#[derive(Parser, Debug)]
#[command(name = "chstorm", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Load a ClickHouse server over HTTP(S) or the native protocol and measure QPS and latency.
    #[command(after_long_help = BENCH_EXAMPLES)]
    Bench(BenchArgs),
    /// Merge bench JSON files made at the same time on several machines into one result
    /// (or re-weight one closed-loop run for coordinated omission, as wrk does: --correct-omission).
    Merge(MergeArgs),
    /// Start, stop or inspect a local ClickHouse server for tests and demos.
    Local(LocalArgs),
    /// Load a synthetic dataset (items, kv, hits) into a server.
    Dataset(crate::dataset::DatasetArgs),
    /// Run a scenario suite over protocols, settings and concurrency; write CSV, JSONL and an HTML report.
    Sweep(crate::sweep_cmd::SweepArgs),
    /// Rebuild report.html of a sweep folder.
    Report(crate::sweep_cmd::ReportArgs),
    /// Start a local ClickHouse, load small datasets, run the storm and shopee suites, and report.
    Demo(crate::demo::DemoArgs),
    /// An HTTP gateway in front of a ClickHouse cluster: shard routing, health-checked replicas,
    /// safe retries, kept-alive pools, fast rejection under overload, Prometheus metrics.
    Gateway(crate::gateway_cmd::GatewayArgs),
    /// A/B two servers query by query: slower, faster or noise, with metrics, flamegraphs and a report.
    Compare(crate::compare::CompareArgs),
    /// Measure an online ClickHouse alone, beside an offline CPU load, and beside it isolated.
    #[command(after_long_help = crate::colocate::COLOCATE_HELP)]
    Colocate(crate::colocate::ColocateArgs),
    /// Put offline work (--pid, --cgroup or -- CMD) into the lowest CPU class; --undo restores it.
    #[command(after_long_help = crate::isolate::ISOLATE_HELP)]
    Isolate(crate::isolate::IsolateArgs),
    /// The CPU burner that colocate starts (internal).
    #[command(hide = true)]
    Burn(crate::colocate::BurnArgs),
}

const BENCH_EXAMPLES: &str = "\
Examples:
  chstorm bench --ping -c 16 -d 10s                       # the HTTP server alone
  chstorm bench -q 'SELECT 1' -c 8 -d 10s --json run.json
  chstorm bench --url clickhouse://127.0.0.1:9000 -q 'SELECT 1' -c 8
  chstorm bench -q 'SELECT * FROM items WHERE shop_id = {s:zipf(100000,1.1)} AND item_id = {i:uniform(1,1000000)}' \\
                --rate 500 -c 64 -d 1m --setting max_threads=1
  chstorm bench --queries lookups.sql --randomize -c 32 -n 100000 --csv results.csv

Placeholders (a fresh value per query, reproducible with --seed):
  {name:uniform(a,b)}   integer in [a,b] (decimals if a or b has a '.')
  {name:zipf(n,s)}      rank in [1,n] with P(k) ~ 1/k^s
  {name:seq(a)}         a, a+1, a+2, ... across all connections
  {name:choice(file)}   a random line of file, inserted verbatim
  {name}                the value name got earlier in the same query

Closed loop (-c only): each connection sends its next query when the last answer is complete;
latencies leave out queueing. Open loop (--rate): queries are due at a fixed rate and latency
runs from the due time, so a stalled server shows in the percentiles.

Mistakes are refused before the run: an unknown function ({x:unifrom(1,2)}), an unclosed
{x:uniform(1,2), a {y} never defined. ClickHouse query parameters name a type, which starts with a
capital letter ({id:UInt64}, {d:DateTime64(3)}): they are sent as written, and so is anything in
braces inside a string literal or a comment.

Limits: --duration and --ramp-over up to 7d, --warmup and --timeout up to 1d, -c up to 100000,
-n up to 10^12, --rate up to 10000000, --threads up to 1024. Every output (--json, --csv) is
opened before the run, so a bad path fails at once instead of after it.

Thresholds (CI): --threshold 'p99<5ms' --threshold 'error_rate<0.1%' --abort-on-fail 'max<1s'
judge the run; the summary and the JSON give each one's value and verdict.

One test from many machines: the same command on N machines with --segment I/N (I = 0..N-1)
and one --start-at, each writing --json; then `chstorm merge *.json --threshold ...` checks
that every segment is there once and judges the whole run (docs/BENCH.md, deploy/kubernetes/).
  chstorm bench -q 'SELECT {i:seq(1)}' --rate 20000 -c 64 -d 1m --segment 0/4 \
                --start-at 2030-01-01T12:00:00Z --json seg0.json

Exit status: 0 done, 1 stopped by --max-errors, 2 bad input or cannot start, 3 no query succeeded
(every one failed or none finished; the first error of each kind is printed), 4 a threshold
failed (or, with --abort-on-fail, could no longer be met), 130 Ctrl-C (the results measured so
far are still printed and written).";

/// Parses a duration such as `500ms`, `10s`, `2m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("'{s}' is not a duration ({e}); write e.g. 500ms, 10s, 2m"))
}

/// A duration of at most `max`.
pub fn parse_duration_at_most(s: &str, max: Duration) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > max {
        return Err(format!("'{s}' is longer than {}, the most chstorm accepts here", describe_limit(max)));
    }
    Ok(d)
}

fn parse_run_length(s: &str) -> Result<Duration, String> {
    parse_duration_at_most(s, MAX_DURATION)
}

fn parse_warmup(s: &str) -> Result<Duration, String> {
    parse_duration_at_most(s, MAX_WARMUP)
}

/// A per-query timeout: above 0, at most 1 day.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration_at_most(s, MAX_TIMEOUT)?;
    if d.is_zero() {
        return Err(format!("'{s}' is no time at all; write e.g. 30s"));
    }
    Ok(d)
}

fn parse_concurrency(s: &str) -> Result<usize, String> {
    parse_count(s, 1, MAX_CONCURRENCY as u64).map(|n| n as usize)
}

fn parse_threads(s: &str) -> Result<usize, String> {
    parse_count(s, 1, MAX_THREADS as u64).map(|n| n as usize)
}

fn parse_requests(s: &str) -> Result<u64, String> {
    parse_count(s, 1, MAX_REQUESTS)
}

/// A whole number in `[min, max]`.
pub fn parse_count(s: &str, min: u64, max: u64) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        Ok(n) if n < min => Err(format!("{n} is less than {min}")),
        Ok(n) => Err(format!("{n} is more than {max}, the most chstorm accepts")),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}

fn parse_threshold(s: &str) -> Result<Threshold, String> {
    Threshold::parse(s)
}

fn parse_abort_on_fail(s: &str) -> Result<Threshold, String> {
    Threshold::parse(s).map(Threshold::aborting)
}

fn parse_segment(s: &str) -> Result<Segment, String> {
    Segment::parse(s)
}

/// `--start-at`: RFC 3339 (`2030-01-01T12:00:00Z`, an offset such as `+02:00` too) or
/// `+DURATION` from now (`+30s`); at most a few seconds in the past and 1 day ahead.
pub fn parse_start_at(s: &str) -> Result<SystemTime, String> {
    let now = SystemTime::now();
    let at = match s.trim().strip_prefix('+') {
        Some(d) => now + parse_duration(d.trim())?,
        None => match chrono::DateTime::parse_from_rfc3339(s.trim()) {
            Ok(t) => SystemTime::from(t),
            Err(e) => {
                return Err(format!(
                    "'{s}' is not a time ({e}); write RFC 3339 such as 2030-01-01T12:00:00Z, or +30s from now"
                ))
            }
        },
    };
    chstorm_load::segment::check_start_at(at, now)?;
    Ok(at)
}

fn parse_setting(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("'{s}' is not name=value; write e.g. --setting max_threads=1")),
    }
}

fn parse_positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > MAX_RATE => {
            Err(format!("'{s}' is more than {MAX_RATE} queries per second, the most chstorm accepts"))
        }
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a positive number of queries per second")),
    }
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Server URL: http://, https://, clickhouse:// (native TCP) or clickhouses:// (native TLS).
    /// user:password@ in the URL authenticates; ?name=value parameters are ClickHouse settings.
    /// [default: $CHSTORM_URL, else http://127.0.0.1:8123]
    #[arg(long, env = "CHSTORM_URL", hide_env_values = true)]
    pub url: Option<String>,

    /// A query to send; repeat for several (sent in turn, or at random with --randomize).
    #[arg(short = 'q', long = "query", value_name = "SQL")]
    pub queries: Vec<String>,

    /// File with one query per line ('-' reads stdin). Blank lines and lines starting with -- are skipped.
    #[arg(long = "queries", value_name = "FILE")]
    pub queries_file: Option<PathBuf>,

    /// Send GET /ping (HTTP) or a Ping packet (native) instead of queries: the server's network layer alone.
    #[arg(long, conflicts_with_all = ["queries", "queries_file"])]
    pub ping: bool,

    /// Pick each query at random instead of in turn.
    #[arg(long)]
    pub randomize: bool,

    /// Run the named workloads of a YAML scenario file at the same time in one process, each
    /// with its own queries, target, loop, start, length and thresholds (docs/BENCH.md,
    /// "Scenarios"); the report has each scenario and the total. --url and --seed are the
    /// scenarios' defaults, --threshold judges the total.
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "queries", "queries_file", "ping", "randomize", "settings", "concurrency", "rate", "ramp_to", "ramp_over",
        "no_keepalive", "duration", "requests", "warmup", "timeout", "max_errors", "threads"])]
    pub scenarios: Option<PathBuf>,

    /// Seed for placeholders and --randomize.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// A ClickHouse setting for every query, name=value; repeatable. HTTP: URL parameter;
    /// native: a SETTINGS clause appended to the query.
    #[arg(long = "setting", value_name = "NAME=VALUE", value_parser = parse_setting)]
    pub settings: Vec<(String, String)>,

    /// Connections (1 to 100000). Closed loop: queries in flight. With --rate: the ceiling on
    /// queries in flight.
    #[arg(short = 'c', long, default_value_t = 1, value_parser = parse_concurrency)]
    pub concurrency: usize,

    /// Open loop: send this many queries per second (at most 10000000), whatever the answers do;
    /// latency is measured from each query's intended send time.
    #[arg(long, value_name = "QPS", value_parser = parse_positive_f64)]
    pub rate: Option<f64>,

    /// With --rate: ramp linearly from --rate to this rate over --ramp-over, then hold.
    #[arg(long, value_name = "QPS", requires_all = ["rate", "ramp_over"], value_parser = parse_positive_f64)]
    pub ramp_to: Option<f64>,

    /// Length of the ramp (e.g. 30s; at most 7d).
    #[arg(long, value_name = "DURATION", requires = "ramp_to", value_parser = parse_run_length)]
    pub ramp_over: Option<Duration>,

    /// Open a new connection for every query (default: keep connections alive).
    #[arg(long)]
    pub no_keepalive: bool,

    /// Measured run length (e.g. 10s, 2m; at most 7d). Default 10s when --requests is not given.
    #[arg(short = 'd', long, value_parser = parse_run_length)]
    pub duration: Option<Duration>,

    /// Stop after this many measured queries (whichever of -d and -n comes first; at most 10^12).
    #[arg(short = 'n', long, value_parser = parse_requests)]
    pub requests: Option<u64>,

    /// Send queries for this long before measuring starts (at most 1d).
    #[arg(long, default_value = "0s", value_parser = parse_warmup)]
    pub warmup: Duration,

    /// Per-query timeout, connecting included (at most 1d). A query that times out, or is still
    /// running when the run ends, is cancelled on the server (native: Cancel packet; HTTP: KILL
    /// QUERY by the query_id chstorm set, chstorm-<run id>-<connection>-<n>).
    #[arg(long, default_value = "30s", value_parser = parse_timeout)]
    pub timeout: Duration,

    /// Stop the run once this many queries have failed.
    #[arg(long, value_name = "N")]
    pub max_errors: Option<u64>,

    /// A pass/fail limit on the run's figures, repeatable: FIGURE<VALUE with <, <=, > or >=;
    /// figures p50, p90, p99, p99.9 (any pN), min, mean, max (with us, ms or s), qps,
    /// error_rate (0.001 or 0.1%), errors. E.g. 'p99<5ms', 'qps>=20000', 'error_rate<0.1%'.
    /// A run that fails one exits 4.
    #[arg(long = "threshold", value_name = "EXPR", value_parser = parse_threshold)]
    pub thresholds: Vec<Threshold>,

    /// A threshold that also stops the run as soon as it can no longer be met (the run exits 4
    /// and says so): 'max<100ms' or 'errors<10' at once; a percentile or error_rate limit when
    /// the number of queries is known (-n, or --rate with -d). Repeatable.
    #[arg(long = "abort-on-fail", value_name = "EXPR", value_parser = parse_abort_on_fail)]
    pub abort_on_fail: Vec<Threshold>,

    /// Run the I-th of N equal parts of the workload (I from 0 to N-1, as Kubernetes'
    /// JOB_COMPLETION_INDEX): its share of the connections, of -n, of the open loop's sends and
    /// of seq values, so that N segments together send what one process would. Thresholds wait
    /// for `chstorm merge` of all segments, unless this segment alone fails one.
    #[arg(long, value_name = "I/N", value_parser = parse_segment)]
    pub segment: Option<Segment>,

    /// Start the clock at this instant, so segments on several machines begin together:
    /// RFC 3339 (2030-01-01T12:00:00Z) or +DURATION from now (+30s). Connections open 2 s
    /// before it. At most 5 s in the past (then the run starts at once, its schedule still
    /// counted from that instant) and 1 day ahead.
    #[arg(long, value_name = "TIME", value_parser = parse_start_at)]
    pub start_at: Option<SystemTime>,

    /// Client worker threads (1 to 1024). Default: the smaller of the CPU count and --concurrency.
    #[arg(long, value_parser = parse_threads)]
    pub threads: Option<usize>,

    /// No live progress on stderr.
    #[arg(long)]
    pub quiet: bool,

    /// Write the result as JSON (schema chstorm.bench.v1) to FILE ('-' for stdout). Opened
    /// before the run: a folder or an unwritable path is refused at once.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Append one result row to FILE (header written when the file is new). Checked before the
    /// run: an existing file must start with chstorm's header line.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// A name for this run in JSON and CSV (test_name; '/'-separated parts fill the CSV subtypes).
    #[arg(long)]
    pub label: Option<String>,

    /// TLS: accept any server certificate (self-signed test servers).
    #[arg(long)]
    pub insecure: bool,

    /// TLS: trust the CA certificates in this PEM file instead of the built-in roots.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// Bench JSON files (from --json) of runs made at the same time.
    #[arg(required = true, num_args = 1..)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the merged JSON ('-' for stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Re-weight closed-loop latencies for coordinated omission: every latency L above twice
    /// the interval I also counts L-I, L-2I, ... while above I. `auto` takes I = duration x
    /// concurrency / queries (the mean time per query per connection), which is what wrk 4 does
    /// to its --latency figures; use it to compare with wrk. Off by default: the raw samples are
    /// what was measured. Open-loop runs (--rate) are refused; they need no model.
    #[arg(long, value_name = "auto|DURATION", value_parser = parse_interval)]
    pub correct_omission: Option<Interval>,
    /// Merge runs that differ in workload, mode (closed/open loop), protocol, keep-alive or
    /// settings. Without it such runs are refused: their sum would be labelled as the first.
    #[arg(long)]
    pub allow_mixed: bool,
    /// A threshold judged on the merged run (the exact sum of the histograms), repeatable, as
    /// bench's --threshold; the inputs' own thresholds are judged on it too. Exit 4 if one fails.
    #[arg(long = "threshold", value_name = "EXPR", value_parser = parse_threshold)]
    pub thresholds: Vec<Threshold>,
}

/// An expected interval: `auto` (from the run) or a fixed duration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Interval {
    Auto,
    Fixed(Duration),
}

fn parse_interval(s: &str) -> Result<Interval, String> {
    if s == "auto" {
        return Ok(Interval::Auto);
    }
    match parse_duration(s) {
        Ok(d) if d > Duration::from_secs(3600) => Err(format!("'{s}' is longer than 1h, the longest latency recorded")),
        Ok(d) if d >= Duration::from_micros(1) => Ok(Interval::Fixed(d)),
        Ok(_) => Err(format!("'{s}' is shorter than 1us; write auto or e.g. 1ms")),
        Err(_) => Err(format!("'{s}' is neither auto nor a duration; write auto or e.g. 1ms")),
    }
}

#[derive(Args, Debug, Clone)]
pub struct LocalArgs {
    #[command(subcommand)]
    pub action: LocalAction,
}

#[derive(Subcommand, Debug, Clone)]
pub enum LocalAction {
    /// Start clickhouse-server with a generated config in DIR, on loopback ports, and leave it running.
    Up(LocalUpArgs),
    /// Stop the server started in DIR.
    Down(LocalDirArg),
    /// Say whether the server in DIR is running, and its URLs.
    Status(LocalDirArg),
}

#[derive(Args, Debug, Clone)]
pub struct LocalDirArg {
    /// The server's folder (config, data, logs, pid file), or the cluster's (cluster.json, gateway.yaml, s<S>r<R>/).
    #[arg(long, default_value = "./chstorm-local")]
    pub dir: PathBuf,
    /// Print the server's details (a cluster's topology) as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct LocalUpArgs {
    #[command(flatten)]
    pub dir: LocalDirArg,
    /// Also open HTTPS and native TLS ports, with a generated self-signed certificate.
    #[arg(long)]
    pub tls: bool,
    /// HTTP port (default: a free port).
    #[arg(long)]
    pub http_port: Option<u16>,
    /// Native TCP port (default: a free port).
    #[arg(long)]
    pub tcp_port: Option<u16>,
    /// Start a local cluster 'storm' of this many shards, each replica its own server in
    /// DIR/s<shard>r<replica>/ (default 1). 1 shard x 1 replica is the single server above.
    #[arg(long, value_name = "S", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub shards: Option<usize>,
    /// Replicas per shard of the local cluster (default 1); replicas of a shard hold the same data.
    #[arg(long, value_name = "R", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub replicas: Option<usize>,
    /// Cluster only: the port DIR/gateway.yaml tells the gateway to listen on (default: a free port).
    #[arg(long, value_name = "PORT")]
    pub gateway_port: Option<u16>,
    /// Cluster only: replicate as a production cluster does. A ZooKeeper (Debian's zookeeper
    /// package) starts in DIR/zookeeper/ on a free loopback port and stops with the cluster;
    /// every node gets <zookeeper>, {shard} and {replica} macros and internal_replication, so
    /// `dataset load --cluster` makes Replicated*MergeTree tables and ON CLUSTER DDL works.
    /// Without it the replicas of a shard are separate tables written by the Distributed table.
    #[arg(long)]
    pub replicated: bool,
}

/// The environment variable that makes `chstorm` check its command line and do nothing else.
///
/// With `CHSTORM_PARSE_ONLY=1`, a command line is parsed as always (flag names, values and their
/// ranges, conflicts and requirements: a mistake gets the same one-line error and exit status 2)
/// and chstorm then exits 0, before it reads a file, starts a server, opens an output or connects
/// anywhere. What only a run can find (a query file that is missing, a placeholder spelt wrong,
/// a server that is down) is not checked. The docs test runs every command line of README.md and
/// docs/ this way (crates/chstorm/tests/docs.rs); a script may do the same with its own.
pub const PARSE_ONLY_ENV: &str = "CHSTORM_PARSE_ONLY";

/// Whether [`PARSE_ONLY_ENV`] is set to `1`.
pub fn parse_only() -> bool {
    std::env::var_os(PARSE_ONLY_ENV).is_some_and(|v| v == "1")
}

/// Prints a clap error as one line (help and version print in full) and returns the exit code.
pub fn report_parse_error(e: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                2
            } else {
                0
            }
        }
        _ => {
            eprintln!("chstorm: error: {}", one_line_parse_error(&e.render().to_string()));
            2
        }
    }
}

/// A clap error on one line: its message with the lines that continue it (clap puts the names
/// of missing arguments on the lines after "the following required arguments were not
/// provided:"), and its tip; the usage and the help pointer give way to one short pointer.
pub fn one_line_parse_error(rendered: &str) -> String {
    let mut message: Vec<String> = Vec::new();
    let mut tip = String::new();
    for line in rendered.lines() {
        let t = line.trim();
        if t.is_empty() {
            if message.is_empty() {
                continue;
            }
            break;
        }
        if let Some(rest) = t.strip_prefix("tip: ") {
            tip = format!(" ({rest})");
            break;
        }
        if t.starts_with("Usage:") || t.starts_with("For more information") {
            break;
        }
        message.push(t.trim_start_matches("error: ").to_string());
    }
    if tip.is_empty() {
        if let Some(t) = rendered.lines().find_map(|l| l.trim().strip_prefix("tip: ")) {
            tip = format!(" ({t})");
        }
    }
    let mut text = String::new();
    for (i, part) in message.iter().enumerate() {
        if i > 0 {
            text.push_str(if text.ends_with(':') { " " } else { ", " });
        }
        text.push_str(part);
    }
    if text.is_empty() {
        text.push_str("bad arguments");
    }
    let subcommand = rendered
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: chstorm "))
        .and_then(|u| u.split_whitespace().next())
        .filter(|w| !w.starts_with('[') && !w.starts_with('<') && !w.starts_with('-'))
        .map(|w| format!(" {w}"))
        .unwrap_or_default();
    format!("{text}{tip}; see 'chstorm{subcommand} --help'")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn error_of(args: &[&str]) -> String {
        let e = Cli::try_parse_from(args).expect_err("these arguments are wrong");
        one_line_parse_error(&e.render().to_string())
    }

    #[test]
    fn missing_arguments_are_named() {
        for (args, needle) in [
            (&["chstorm", "bench", "-q", "SELECT 1", "--rate", "5", "--ramp-to", "10"][..], "--ramp-over <DURATION>"),
            (&["chstorm", "merge"][..], "<INPUTS>..."),
            (&["chstorm", "sweep", "--out", "x"][..], "--suite <SUITE>"),
            (&["chstorm", "compare", "--left", "http://a", "--queries", "q.sql"][..], "--right <URL>"),
        ] {
            let e = error_of(args);
            assert!(e.contains(needle), "{args:?}: {e}");
            assert!(e.starts_with("the following required arguments were not provided: "), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let e = error_of(&["chstorm", "bench", "--bogus"]);
        assert!(e.contains("--bogus") && e.ends_with("see 'chstorm bench --help'"), "{e}");
    }

    #[test]
    fn absurd_values_are_refused_with_the_limit() {
        for (args, needle) in [
            (&["chstorm", "bench", "-q", "SELECT 1", "-d", "1y"][..], "7 days"),
            (&["chstorm", "bench", "-q", "SELECT 1", "-d", "100y"][..], "7 days"),
            (&["chstorm", "bench", "-q", "SELECT 1", "--timeout", "2d"][..], "1 day"),
            (&["chstorm", "bench", "-q", "SELECT 1", "--timeout", "0s"][..], "no time"),
            (&["chstorm", "bench", "-q", "SELECT 1", "--warmup", "30d"][..], "1 day"),
            (&["chstorm", "bench", "-q", "SELECT 1", "-c", "1000000"][..], "100000"),
            (&["chstorm", "bench", "-q", "SELECT 1", "-n", "10000000000000"][..], "1000000000000"),
            (&["chstorm", "bench", "-q", "SELECT 1", "--rate", "1e9"][..], "10000000"),
            (&["chstorm", "bench", "-q", "SELECT 1", "--threads", "5000"][..], "1024"),
            (&["chstorm", "merge", "a.json", "--correct-omission", "2h"][..], "1h"),
        ] {
            let e = error_of(args);
            assert!(e.contains(needle), "{args:?}: {e}");
            assert!(e.starts_with("invalid value") && e.contains(" for '-"), "the flag is named: {e}");
        }
        assert!(Cli::try_parse_from(["chstorm", "bench", "-q", "SELECT 1", "-d", "7d", "-c", "100000"]).is_ok());
    }
}
