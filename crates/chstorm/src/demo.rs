//! `chstorm demo`: a local ClickHouse, small datasets, the storm and shopee suites in quick
//! mode, one report.

use chstorm_data::{load, DatasetName, LoadOptions, SqlClient};
use chstorm_load::StopHandle;
use chstorm_local::{LocalServer, ServerSpec};
use chstorm_proto::TlsOptions;
use chstorm_sweep::suite::{Dur, Levels, ProtocolVariant};
use chstorm_sweep::{Suite, SweepOptions, SweepPoint, Targets};
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long `chstorm demo` takes on the 2-core development machine, release build, server and
/// client sharing the cores (measured with `/usr/bin/time target/release/chstorm demo`; 92 s).
/// docs/SWEEP.md says the same (a test checks).
pub const DEMO_TIME: &str = "about 1.5 minutes";
/// How long `chstorm demo --quick` takes there (measured the same way: 9.2 and 9.7 s).
pub const QUICK_TIME: &str = "about 10 s";

#[derive(Args, Debug, Clone)]
#[command(after_long_help = "Takes about 1.5 minutes (--quick: about 10 s) on a 2-core machine, release build.")]
pub struct DemoArgs {
    /// Folder for the server, the results and the report.
    #[arg(long, default_value = "./chstorm-demo")]
    pub dir: PathBuf,
    /// Smoke size (about 10 s): fewer points, shorter points, smaller data. For CI.
    #[arg(long)]
    pub quick: bool,
    /// Leave the server running at the end (stop it with chstorm local down --dir DIR/server).
    #[arg(long)]
    pub keep: bool,
}

/// Rows of the items table the demo loads.
const DEMO_ITEMS_ROWS: u64 = 200_000;
const SMOKE_ITEMS_ROWS: u64 = 20_000;

fn smoke(suite: &mut Suite) {
    suite.quick.duration = Some(Dur(Duration::from_millis(400)));
    suite.quick.warmup = Some(Dur(Duration::from_millis(100)));
    suite.quick.concurrency = Some(Levels(vec![1, 8]));
    suite.quick.protocols = Some(vec![ProtocolVariant::Http, ProtocolVariant::Native]);
    // Keep every scenario, but only the first value of each settings list.
    for sc in &mut suite.scenarios {
        for values in sc.settings.values_mut() {
            values.truncate(1);
        }
    }
}

pub fn run(args: DemoArgs, stop: &StopHandle) -> anyhow::Result<i32> {
    let started = Instant::now();
    std::fs::create_dir_all(&args.dir)?;
    let server_dir = args.dir.join("server");
    if let Some(info) = chstorm_local::status(&server_dir)? {
        anyhow::bail!(
            "a demo server is already running in {} (pid {}); stop it with: chstorm local down --dir {}",
            server_dir.display(),
            info.pid,
            server_dir.display()
        );
    }
    eprintln!("demo: starting ClickHouse in {}", server_dir.display());
    let mut spec = ServerSpec::new(&server_dir);
    spec.tls = true;
    let server = LocalServer::start(spec)?;
    let info = server.info().clone();
    eprintln!("demo: {} {} (server {})", info.http_url, info.native_url, server.query("SELECT version()")?.trim());
    // Keep the server alive past this function only with --keep; otherwise Drop stops it.
    let result = run_suites(&args, &info, stop);
    if args.keep {
        let info = server.detach();
        println!("server left running: {}  (stop: chstorm local down --dir {})", info.http_url, server_dir.display());
    } else {
        drop(server);
    }
    let code = result?;
    eprintln!("demo: done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(code)
}

fn run_suites(args: &DemoArgs, info: &chstorm_local::ServerInfo, stop: &StopHandle) -> anyhow::Result<i32> {
    let mut client = SqlClient::new(&info.http_url, &TlsOptions::default())?;
    let rows = if args.quick { SMOKE_ITEMS_ROWS } else { DEMO_ITEMS_ROWS };
    load(
        &mut client,
        DatasetName::Items,
        &LoadOptions { rows: Some(rows), index_granularity: 256, drop: false },
        &mut |l| eprintln!("demo: {l}"),
    )?;
    let tls = TlsOptions { insecure: false, ca_file: info.ca_cert.clone() };
    let mut urls = vec![info.http_url.clone(), info.native_url.clone()];
    urls.extend(info.https_url.clone());
    urls.extend(info.native_tls_url.clone());
    let targets = Targets::from_urls(&urls, tls)?;
    let mut all_points: Vec<SweepPoint> = Vec::new();
    let mut inputs = Vec::new();
    let mut interrupted = false;
    for name in ["storm", "shopee"] {
        let mut suite = Suite::load(name)?;
        if args.quick {
            smoke(&mut suite);
        }
        let out = args.dir.join(name);
        let opts = SweepOptions {
            suite,
            targets: targets.clone(),
            out: out.clone(),
            quick: true,
            store: None,
            seed: 1,
            timeout: Duration::from_secs(30),
            // Each demo starts its own server (new ports): earlier results in DIR are of another
            // server, so they are moved aside rather than reused.
            restart: true,
        };
        eprintln!("demo: sweeping {name} (quick) into {}", out.display());
        let outcome = chstorm_sweep::sweep(&opts, stop, &mut |l| eprintln!("  {l}"))?;
        let points = chstorm_sweep::read_points(&out)?;
        let meta: chstorm_sweep::SuiteMeta =
            serde_json::from_str(&std::fs::read_to_string(out.join(chstorm_sweep::SUITE_JSON))?)?;
        inputs.push(chstorm_sweep::report::build_input(&meta, &points));
        all_points.extend(points);
        if outcome.interrupted {
            interrupted = true;
            break;
        }
    }
    let report = write_combined(&args.dir, inputs)?;
    print_summary(&all_points);
    println!("\nreport: {}", report.display());
    Ok(if interrupted { crate::EXIT_INTERRUPTED } else { 0 })
}

/// One report for both suites: sections of each, in order.
fn write_combined(dir: &Path, inputs: Vec<chstorm_report::ReportInput>) -> anyhow::Result<PathBuf> {
    let mut combined =
        chstorm_report::ReportInput { title: "chstorm demo: storm and shopee".into(), ..Default::default() };
    for (i, input) in inputs.into_iter().enumerate() {
        if i == 0 {
            combined.environment = input.environment.clone();
            combined.environment.suite = "storm + shopee".into();
        }
        combined.points.extend(input.points);
        combined.sections.extend(input.sections);
    }
    let path = dir.join("report.html");
    chstorm_report::write_sweep(&path, &combined)?;
    Ok(path)
}

/// The best point of each scenario and variant: a table that pastes well into a ticket.
fn print_summary(points: &[SweepPoint]) {
    println!(
        "\n{:<14} {:<48} {:>5} {:>10} {:>10} {:>10} {:>7}",
        "scenario", "variant", "c", "QPS", "p50 ms", "p99 ms", "errors"
    );
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for p in points {
        if seen.contains(&(p.scenario.as_str(), p.variant.as_str())) {
            continue;
        }
        seen.push((&p.scenario, &p.variant));
        let best = points
            .iter()
            .filter(|q| q.scenario == p.scenario && q.variant == p.variant)
            .max_by(|a, b| a.result.qps.total_cmp(&b.result.qps))
            .unwrap_or(p);
        println!(
            "{:<14} {:<48} {:>5} {:>10.0} {:>10.3} {:>10.3} {:>7}",
            best.scenario,
            best.variant,
            best.concurrency,
            best.result.qps,
            best.result.latency_s.p50 * 1e3,
            best.result.latency_s.p99 * 1e3,
            best.result.errors
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// --help and docs/SWEEP.md give the demo's measured times, and the same ones.
    #[test]
    fn help_and_docs_agree_on_the_demo_time() {
        let mut cmd = crate::cli::Cli::command();
        let demo = cmd.find_subcommand_mut("demo").unwrap();
        let help = demo.render_long_help().to_string();
        let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/SWEEP.md")).unwrap();
        let docs = docs.replace('\n', " ");
        for time in [DEMO_TIME, QUICK_TIME] {
            assert!(help.contains(time), "--help lacks {time}: {help}");
            assert!(docs.contains(time), "docs/SWEEP.md lacks {time}");
        }
        assert!(!help.contains("about a minute") && !docs.contains("about 15 s"), "old figures");
    }

    /// README says how to get the binary every example runs, before the first example, and the
    /// Makefile does what it says.
    #[test]
    fn readme_says_how_to_get_the_binary() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
        let start = readme.find("## Install and build").expect("a section on getting the binary");
        let install = &readme[start..];
        let install = &install[..install[3..].find("\n## ").map_or(install.len(), |i| i + 3)];
        for needle in ["make release", "target/release/chstorm", "cargo install --path crates/chstorm", "target/demo"] {
            assert!(install.contains(needle), "README's install section lacks {needle}");
        }
        let first_example = readme.find("$ chstorm ").expect("an example");
        let pointer = readme.find("(`make release`, below)").expect("the tour says where the binary comes from");
        assert!(pointer < first_example, "README points to the build before its first example");
        let makefile = std::fs::read_to_string(format!("{root}/Makefile")).unwrap();
        assert!(makefile.contains("build --release -p chstorm"), "make release builds target/release/chstorm");
        assert_eq!(env!("CARGO_PKG_NAME"), "chstorm", "cargo install --path crates/chstorm installs chstorm");
    }
}
