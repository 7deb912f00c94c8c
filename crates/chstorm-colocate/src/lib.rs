//! `chstorm colocate` as a library: measure an online ClickHouse alone, beside an offline CPU
//! load, and beside the same load isolated, with identical bench settings; print the seed's
//! table, write JSON (`chstorm.colocate.v1`) and an HTML page.
//!
//! Phases, in order: `baseline` (no offline load), `offline` (the load, no isolation), then one
//! `isolated` phase per mechanism (one for a single [`Request`], one per available mechanism
//! for [`Request::All`], none when [`ColocateOptions::isolation`] is `None`). Each loaded phase
//! starts the load, isolates it, lets it run [`ColocateOptions::offline_warmup`], measures,
//! then kills and reaps it and undoes the isolation, on every path. With
//! [`ColocateOptions::rounds`] above 1 the whole sequence repeats, interleaved, and each
//! phase's runs are merged ([`rounds`](crate::rounds) module).
//!
//! Without a server URL ([`ColocateOptions::local_server`]) a local server is started through
//! the harness in a temporary directory, measured over the native protocol (as
//! clickhouse-benchmark does), and stopped at the end.
//!
//! The defaults of the `chstorm colocate` command line that differ from `chstorm bench` are
//! here as constants ([`SEED_QUERY`], [`DEFAULT_CONCURRENCY`], [`DEFAULT_HTML`]); applying
//! them is the CLI's job.
//!
//! # Boundaries
//!
//! This crate owns the colocate orchestration (phases, rounds, the server under test), the
//! `chstorm.colocate.v1` report, its text table and its HTML page. It is its own crate, not a
//! part of `chstorm-isolate`, because it needs the load engine, the local harness, the outputs
//! and the HTML blocks, while `chstorm-isolate` is only Linux isolation (cgroups, scheduling
//! policies, /proc) and must stay usable without any of them. It builds on `chstorm-isolate`,
//! `chstorm-load`, `chstorm-local`, `chstorm-output`, `chstorm-report`, `chstorm-proto` and
//! `chstorm-stats`; it must not import the gateway, the CLI (`chstorm`), clap or anyhow.

mod error;
pub mod html;
mod phase;
pub mod report;
mod rounds;
mod server;
pub mod table;

pub use error::ColocateError;
pub use report::{ColocateReport, PhaseReport, SCHEMA_ID};

use chstorm_isolate::offline::OfflineSpec;
use chstorm_isolate::{Mechanism, Request};
use chstorm_load::{LoadSpec, StopHandle};
use chstorm_output::RunMeta;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The seed's workload: the query of a colocate run that names none.
pub const SEED_QUERY: &str = "SELECT * FROM system.numbers LIMIT 10000000 OFFSET 10000000";
/// The seed's concurrency: the connections of a colocate run that names none.
pub const DEFAULT_CONCURRENCY: usize = 10;
/// HTML file name when neither an HTML path nor a JSON file is given.
pub const DEFAULT_HTML: &str = "colocate.html";

/// The offline load.
#[derive(Debug, Clone)]
pub enum Offline {
    /// The CPU burner: `exe burn --threads N` (chstorm's hidden `burn` sub-command, which runs
    /// [`chstorm_isolate::burn::run`]); `threads` None means one per CPU.
    Burner { exe: PathBuf, threads: Option<usize> },
    /// `sh -c COMMAND`, in its own process group; the whole group is killed after each loaded
    /// phase. It must keep running through a phase.
    Command(String),
}

/// One colocate run.
#[derive(Debug, Clone)]
pub struct ColocateOptions {
    /// The bench run of every phase (identical in all of them). Its target is replaced by the
    /// local server's native URL when `local_server` is true.
    pub spec: LoadSpec,
    /// The bench metadata written beside each phase's results; its label (default
    /// `colocate`) gets `/PHASE/MECHANISM` appended per phase.
    pub meta: RunMeta,
    /// Start a local server in a temporary folder and measure it instead of `spec.target`.
    pub local_server: bool,
    pub offline: Offline,
    /// How the isolated phase(s) isolate the load; None: no isolated phase.
    pub isolation: Option<Request>,
    /// How long the load runs before each loaded phase is measured.
    pub offline_warmup: Duration,
    /// Runs of the whole phase sequence, interleaved (at least 1).
    pub rounds: u32,
    /// The JSON report: a file, `-` for stdout (the table then goes to stderr), or none.
    pub json: Option<PathBuf>,
    /// A CSV file that gets one bench row per phase appended.
    pub csv: Option<PathBuf>,
    /// The HTML page, or none (see [`html_path`] for the command line's default).
    pub html: Option<PathBuf>,
}

/// What a run tells its caller while it runs. The CLI prints it on stderr (nothing with
/// `--quiet`); tests watch it to act at a given moment.
pub trait Observer {
    /// A line about what happens next: the local server starting, each phase, the page written.
    fn note(&mut self, line: &str);
    /// A measured run begins; `planned` is its length when fixed.
    fn run_started(&mut self, planned: Option<Duration>);
    /// Once a second during a measured run.
    fn progress(&mut self, p: &chstorm_load::Progress);
    /// The measured run has ended.
    fn run_finished(&mut self);
}

/// An [`Observer`] that ignores everything.
pub struct Silent;

impl Observer for Silent {
    fn note(&mut self, _: &str) {}
    fn run_started(&mut self, _: Option<Duration>) {}
    fn progress(&mut self, _: &chstorm_load::Progress) {}
    fn run_finished(&mut self) {}
}

/// The command line's HTML page: none with `no_html`, else `html` if given, else FILE.html
/// beside a JSON file, else [`DEFAULT_HTML`] in the working folder.
pub fn html_path(no_html: bool, html: Option<&Path>, json: Option<&Path>) -> Option<PathBuf> {
    if no_html {
        return None;
    }
    if let Some(p) = html {
        return Some(p.to_path_buf());
    }
    match json {
        Some(j) if j != Path::new("-") => Some(j.with_extension("html")),
        _ => Some(PathBuf::from(DEFAULT_HTML)),
    }
}

/// Runs every phase, writes the outputs (table on stdout, JSON, HTML, CSV) and returns the
/// report. A Ctrl-C (`stop`) ends the run early with what was measured: the report's
/// `stop_reason` is then `interrupted`.
pub fn run(
    opts: ColocateOptions,
    stop: &StopHandle,
    observer: &mut dyn Observer,
) -> Result<ColocateReport, ColocateError> {
    let found = chstorm_isolate::detect_all();
    let mechanisms: Vec<Mechanism> = match opts.isolation {
        Some(r) => chstorm_isolate::choose(r, &found).map_err(ColocateError::Isolation)?,
        None => Vec::new(),
    };
    let cores = chstorm_isolate::procfs::cores();
    let offline = match &opts.offline {
        Offline::Command(c) if c.trim().is_empty() => return Err(ColocateError::EmptyCommand),
        Offline::Command(c) => OfflineSpec::Command(c.clone()),
        Offline::Burner { exe, threads } => {
            let n = threads.unwrap_or(cores);
            let argv = vec!["burn".to_string(), "--threads".to_string(), n.to_string()];
            OfflineSpec::Burner { exe: exe.clone(), args: argv, threads: n }
        }
    };
    for p in [opts.json.as_deref(), opts.csv.as_deref(), opts.html.as_deref()].into_iter().flatten() {
        check_writable(p)?;
    }
    let (mut spec, mut meta) = (opts.spec.clone(), opts.meta.clone());
    let server = if opts.local_server {
        let server = server::Server::start_local(observer)?;
        retarget(&mut spec, &mut meta, server.url())?;
        server
    } else {
        server::Server::find(&spec.target)
    };
    let ctx = phase::Context { spec, meta, offline, offline_warmup: opts.offline_warmup, server: &server, cores };
    let plans = phase::plans(&mechanisms);
    let rounds = opts.rounds.max(1) as usize;
    let mut runs: Vec<Vec<phase::Outcome>> = plans.iter().map(|_| Vec::new()).collect();
    'rounds: for round in 1..=rounds {
        for (i, plan) in plans.iter().enumerate() {
            if stop.is_interrupted() {
                break 'rounds;
            }
            let r = if rounds > 1 { format!("round {round}/{rounds}, ") } else { String::new() };
            observer.note(&format!("{r}phase {}/{}: {}", i + 1, plans.len(), plan.describe(&ctx.offline)));
            match phase::run(plan, &ctx, stop, observer)? {
                Some(p) => runs[i].push(p),
                None => break 'rounds,
            }
        }
    }
    let phases =
        runs.into_iter().filter(|r| !r.is_empty()).map(rounds::merge).collect::<Result<Vec<_>, ColocateError>>()?;
    let report = ColocateReport::new(&opts, &ctx, &found, phases, stop.is_interrupted());
    write_outputs(&opts, &report, observer)?;
    Ok(report)
}

/// Points the run at `url` (the local server), as the command line would have with `--url`:
/// the target, its credentials from the environment, and the settings written beside results.
fn retarget(spec: &mut LoadSpec, meta: &mut RunMeta, url: &str) -> Result<(), ColocateError> {
    let target = chstorm_proto::Target::parse(url)?.with_env_credentials();
    meta.target = target.to_string();
    meta.protocol = target.protocol.as_str().to_string();
    meta.settings = target.settings.clone();
    meta.settings.extend(spec.settings.iter().cloned());
    spec.target = target;
    Ok(())
}

/// Fails early, before a long run, when an output file's folder does not exist.
fn check_writable(path: &Path) -> Result<(), ColocateError> {
    if path == Path::new("-") {
        return Ok(());
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(ColocateError::NoFolder { path: path.to_path_buf(), dir: dir.to_path_buf() });
    }
    Ok(())
}

fn write_outputs(
    opts: &ColocateOptions,
    report: &ColocateReport,
    observer: &mut dyn Observer,
) -> Result<(), ColocateError> {
    let text = table::render(report);
    let json = serde_json::to_string_pretty(report).map_err(|e| ColocateError::Internal(e.to_string()))? + "\n";
    if opts.json.as_deref() == Some(Path::new("-")) {
        eprint!("{text}");
        print!("{json}");
    } else {
        print!("{text}");
    }
    let write = |path: &Path, content: &str| {
        std::fs::write(path, content).map_err(|source| ColocateError::Write { path: path.to_path_buf(), source })
    };
    if let Some(path) = opts.json.as_deref().filter(|p| *p != Path::new("-")) {
        write(path, &json)?;
    }
    if let Some(path) = &opts.html {
        write(path, &html::render(report))?;
        observer.note(&format!("wrote {}", path.display()));
    }
    if let Some(path) = &opts.csv {
        for p in &report.phases {
            chstorm_output::csv::append(path, &chstorm_output::csv::row(&p.bench))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_html_page_goes_beside_the_json() {
        let p = |no, html: Option<&str>, json: Option<&str>| {
            html_path(no, html.map(Path::new), json.map(Path::new)).map(|p| p.display().to_string())
        };
        assert_eq!(p(true, None, Some("a.json")), None);
        assert_eq!(p(false, Some("x.html"), Some("a.json")).as_deref(), Some("x.html"));
        assert_eq!(p(false, None, Some("out/a.json")).as_deref(), Some("out/a.html"));
        assert_eq!(p(false, None, Some("-")).as_deref(), Some(DEFAULT_HTML));
        assert_eq!(p(false, None, None).as_deref(), Some(DEFAULT_HTML));
    }

    #[test]
    fn the_local_server_replaces_the_target_and_keeps_the_settings() {
        let placeholder = chstorm_proto::Target::parse("http://127.0.0.1:8123").unwrap();
        let settings = vec![("max_threads".to_string(), "1".to_string())];
        let mut spec = LoadSpec {
            target: placeholder.clone(),
            tls: Default::default(),
            work: chstorm_load::Work::Ping,
            settings: settings.clone(),
            concurrency: 1,
            schedule: chstorm_load::Schedule::Closed,
            duration: Some(Duration::from_secs(1)),
            requests: None,
            warmup: Duration::ZERO,
            timeout: Duration::from_secs(1),
            keepalive: true,
            max_errors: None,
            seed: 1,
            threads: 1,
            segment: Default::default(),
            start_at: None,
        };
        let mut meta = RunMeta {
            target: placeholder.to_string(),
            protocol: "http".into(),
            keepalive: true,
            concurrency: 1,
            rate: None,
            ramp: None,
            settings: settings.clone(),
            workload: vec!["ping".into()],
            warmup_s: 0.0,
            label: None,
        };
        retarget(&mut spec, &mut meta, "clickhouse://127.0.0.1:19000").unwrap();
        assert_eq!((spec.target.port, spec.target.protocol.as_str()), (19000, "native"));
        assert_eq!(meta.protocol, "native");
        assert!(meta.target.starts_with("clickhouse://127.0.0.1:19000"), "{}", meta.target);
        assert_eq!(meta.settings, settings);
        assert_eq!(spec.settings, settings);
    }

    #[test]
    fn a_missing_folder_is_refused_before_the_run() {
        let e = check_writable(Path::new("/nonexistent/x.json")).unwrap_err().to_string();
        assert_eq!(e, "cannot write /nonexistent/x.json: folder /nonexistent does not exist");
        assert!(check_writable(Path::new("-")).is_ok());
        assert!(check_writable(Path::new("x.json")).is_ok());
    }
}
