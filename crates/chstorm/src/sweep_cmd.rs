//! `chstorm sweep` and `chstorm report`.

use chstorm_load::StopHandle;
use chstorm_proto::TlsOptions;
use chstorm_sweep::{sweep, Suite, SweepOptions, Targets};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
#[command(
    after_long_help = "Built-in suites: storm, kv, shopee, threads (see suites/*.yaml; copy one to make your own).

Examples:
  chstorm sweep --suite storm --url http://127.0.0.1:8123 --url clickhouse://127.0.0.1:9000 --out storm-run
  chstorm dataset load items --url http://127.0.0.1:8123 && chstorm sweep --suite shopee --url http://127.0.0.1:8123 --out shopee-run --quick
  chstorm report storm-run      # rebuild storm-run/report.html

A re-run with the same --out skips the points already there, so an interrupted sweep resumes. A
finished point is reused only if it was measured as it would be now (same suite, URL, settings,
duration, warm-up, requests, concurrency, queries and seed); otherwise the sweep refuses and says
what differs, or with --restart moves the earlier results into OUT/replaced-<time>/ and starts over.

Exit status: 0 every point ran, 1 some points could not run or had no successful query (listed),
2 bad input, 130 Ctrl-C."
)]
pub struct SweepArgs {
    /// A built-in suite name or a suite YAML file.
    #[arg(long)]
    pub suite: String,
    /// The server, once per protocol: http://, https://, clickhouse://, clickhouses://.
    /// Protocols of the suite without a URL are skipped. [default: $CHSTORM_URL, else http://127.0.0.1:8123]
    #[arg(long = "url")]
    pub urls: Vec<String>,
    /// Folder for results.csv, results.jsonl and report.html.
    #[arg(long)]
    pub out: PathBuf,
    /// The suite's quick mode: short points, few concurrency levels.
    #[arg(long)]
    pub quick: bool,
    /// Concurrency levels for every scenario instead of the suite's, e.g.
    /// 1,2,4,8,16,32,64,128,256,512,1024,2048 (the storm article's high end).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub concurrency: Vec<u32>,
    /// Also write every point into chstorm.results on this ClickHouse (HTTP URL).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Seed for placeholders.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Per-query timeout (at most 1d); a query that times out is cancelled on the server.
    #[arg(long, default_value = "30s", value_parser = crate::cli::parse_timeout)]
    pub timeout: Duration,
    /// When --out holds points measured differently (another URL, duration, settings, ...),
    /// move them into OUT/replaced-<time>/ and measure every point again, instead of refusing.
    #[arg(long)]
    pub restart: bool,
    /// TLS: accept any server certificate.
    #[arg(long)]
    pub insecure: bool,
    /// TLS: trust the CA certificates in this PEM file.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// A sweep's --out folder.
    pub dir: PathBuf,
}

/// Runs a sweep and prints one line per point on stderr; returns the exit code.
pub fn run_sweep(args: SweepArgs, stop: &StopHandle) -> anyhow::Result<i32> {
    let mut suite = Suite::load(&args.suite)?;
    if !args.concurrency.is_empty() {
        let levels = chstorm_sweep::suite::Levels(args.concurrency.iter().map(|&c| c as usize).collect());
        suite.concurrency = Some(levels.clone());
        suite.quick.concurrency = Some(levels.clone());
        for sc in &mut suite.scenarios {
            sc.concurrency = Some(levels.clone());
        }
    }
    let mut urls = args.urls.clone();
    if urls.is_empty() {
        urls.push(std::env::var("CHSTORM_URL").unwrap_or_else(|_| crate::bench::DEFAULT_URL.to_string()));
    }
    let tls = TlsOptions { insecure: args.insecure, ca_file: args.cacert.clone() };
    let opts = SweepOptions {
        suite,
        targets: Targets::from_urls(&urls, tls)?,
        out: args.out.clone(),
        quick: args.quick,
        store: args.store.clone(),
        seed: args.seed,
        timeout: args.timeout,
        restart: args.restart,
    };
    let outcome = sweep(&opts, stop, &mut |line| eprintln!("{line}"))?;
    println!(
        "{}: {} points planned, {} run now, {} already done, {} failed{}",
        opts.suite.name,
        outcome.planned,
        outcome.ran,
        outcome.already_done,
        outcome.failed.len(),
        if outcome.interrupted { ", interrupted (re-run to resume)" } else { "" }
    );
    for (key, why) in &outcome.failed {
        println!("failed: {key}: {why}");
    }
    if let Some(dir) = &outcome.replaced {
        println!("restarted: the earlier results measured differently are in {}", dir.display());
    }
    println!("results: {}", args.out.join(chstorm_sweep::RESULTS_CSV).display());
    println!("report:  {}", args.out.join(chstorm_sweep::REPORT_HTML).display());
    Ok(if outcome.interrupted {
        crate::EXIT_INTERRUPTED
    } else if outcome.failed.is_empty() {
        0
    } else {
        1
    })
}

pub fn run_report(args: ReportArgs) -> anyhow::Result<i32> {
    let path = chstorm_sweep::report::write_report(&args.dir)?;
    println!("{}", path.display());
    Ok(0)
}
