//! Running a sweep: every point with its warm-up, results appended as each point finishes, so
//! an interrupted sweep resumes where it stopped.

use crate::plan::{plan, PointPlan, Targets};
use crate::store::Store;
use crate::suite::Suite;
use crate::{PointIdentity, SuiteMeta, SweepError, SweepPoint};
use chstorm_load::{LoadSpec, Schedule, StopHandle, StopReason, Template, Work};
use chstorm_output::{BenchReport, RunMeta};
use chstorm_proto::Target;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Files of a sweep directory.
pub const RESULTS_JSONL: &str = "results.jsonl";
pub const RESULTS_CSV: &str = "results.csv";
pub const SUITE_JSON: &str = "suite.json";
pub const REPORT_HTML: &str = "report.html";

/// How to run a sweep.
pub struct SweepOptions {
    pub suite: Suite,
    pub targets: Targets,
    pub out: PathBuf,
    pub quick: bool,
    /// Also write every point into `chstorm.results` on this ClickHouse (HTTP URL).
    pub store: Option<String>,
    /// Placeholder seed (default 1).
    pub seed: u64,
    /// Per-query timeout (default 30 s).
    pub timeout: Duration,
    /// When `out` holds finished points measured differently (another URL, duration, settings,
    /// ...): false refuses with an error that names the difference; true moves the earlier
    /// results into `out/replaced-<time>/` and measures every point again.
    pub restart: bool,
}

/// What a sweep did.
#[derive(Debug, Default)]
pub struct SweepOutcome {
    pub planned: usize,
    pub ran: usize,
    /// Points found finished in the directory and not run again.
    pub already_done: usize,
    /// Points that could not run: (key, reason).
    pub failed: Vec<(String, String)>,
    pub interrupted: bool,
    pub notes: Vec<String>,
    /// With `restart`: where the earlier, differently measured results were moved.
    pub replaced: Option<PathBuf>,
}

/// Reads the finished points of a sweep directory (unreadable lines, such as a line cut by a
/// kill, are skipped).
pub fn read_points(dir: &Path) -> Result<Vec<SweepPoint>, SweepError> {
    let path = dir.join(RESULTS_JSONL);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SweepError::Io { path: path.display().to_string(), source: e }),
    };
    Ok(text.lines().filter_map(|l| serde_json::from_str::<SweepPoint>(l).ok()).collect())
}

/// Dataset parameters recorded by `chstorm dataset load` (`items.rows`, `items.shops`, ...).
fn dataset_vars(targets: &Targets) -> BTreeMap<String, String> {
    targets.http_any().map(|url| chstorm_data::dataset_vars(url, &targets.tls)).unwrap_or_default()
}

fn load_spec(p: &PointPlan, opts: &SweepOptions) -> Result<(LoadSpec, RunMeta, PointIdentity), SweepError> {
    let bad = |e: String| SweepError::Invalid(format!("{}: {e}", p.key));
    let target = Target::parse(&p.url).map_err(|e| bad(e.to_string()))?.with_env_credentials();
    let base = opts.suite.source.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    let work = if p.ping {
        Work::Ping
    } else {
        let templates = p.queries.iter().map(|q| Template::parse(q, &base)).collect::<Result<Vec<_>, _>>();
        Work::Queries { templates: templates.map_err(|e| bad(e.to_string()))?, randomize: false }
    };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let spec = LoadSpec {
        target: target.clone(),
        tls: opts.targets.tls.clone(),
        work,
        settings: p.settings.clone(),
        concurrency: p.concurrency,
        schedule: Schedule::Closed,
        duration: p.duration,
        requests: p.requests,
        warmup: p.warmup,
        timeout: opts.timeout,
        keepalive: p.protocol.keepalive(),
        max_errors: None,
        seed: opts.seed,
        threads: cores.min(p.concurrency),
        segment: Default::default(),
        start_at: None,
    };
    let mut settings = target.settings.clone();
    settings.extend(p.settings.iter().cloned());
    let meta = RunMeta {
        target: target.to_string(),
        protocol: target.protocol.as_str().to_string(),
        keepalive: spec.keepalive,
        concurrency: p.concurrency,
        rate: None,
        ramp: None,
        settings,
        workload: if p.ping { vec!["ping".into()] } else { p.queries.clone() },
        warmup_s: p.warmup.as_secs_f64(),
        label: Some(format!("{}/{}", p.scenario, p.variant.replace(' ', "/"))),
    };
    spec.validate().map_err(bad)?;
    let identity = PointIdentity {
        suite: opts.suite.name.clone(),
        target: meta.target.clone(),
        settings: meta.settings.clone(),
        duration_s: p.duration.map(|d| d.as_secs_f64()),
        requests: p.requests,
        warmup_s: p.warmup.as_secs_f64(),
        concurrency: p.concurrency as u64,
        keepalive: spec.keepalive,
        queries: meta.workload.clone(),
        seed: opts.seed,
    };
    Ok((spec, meta, identity))
}

/// Moves the results files of `out` into a new `out/replaced-<time>/`; returns that folder.
fn move_aside(out: &Path) -> Result<PathBuf, SweepError> {
    let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S");
    let dir = out.join(format!("replaced-{stamp}"));
    let io = |p: &Path, e| SweepError::Io { path: p.display().to_string(), source: e };
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    for name in [RESULTS_JSONL, RESULTS_CSV, REPORT_HTML] {
        let from = out.join(name);
        if from.exists() {
            std::fs::rename(&from, dir.join(name)).map_err(|e| io(&from, e))?;
        }
    }
    Ok(dir)
}

fn append_line(path: &Path, line: &str) -> Result<(), SweepError> {
    let io = |e| SweepError::Io { path: path.display().to_string(), source: e };
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(io)?;
    f.write_all(format!("{line}\n").as_bytes()).map_err(io)?;
    f.sync_data().map_err(io)
}

/// Runs every point of the suite that `out` does not already hold. `progress` gets one line per
/// point.
pub fn sweep(
    opts: &SweepOptions,
    stop: &StopHandle,
    progress: &mut dyn FnMut(&str),
) -> Result<SweepOutcome, SweepError> {
    std::fs::create_dir_all(&opts.out)
        .map_err(|e| SweepError::Io { path: opts.out.display().to_string(), source: e })?;
    let vars = dataset_vars(&opts.targets);
    let (points, notes) = plan(&opts.suite, opts.quick, &opts.targets, &vars)?;
    let meta = SuiteMeta::new(&opts.suite, opts.quick, &opts.targets);
    let meta_path = opts.out.join(SUITE_JSON);
    if let Ok(old) = std::fs::read_to_string(&meta_path) {
        if let Ok(old) = serde_json::from_str::<SuiteMeta>(&old) {
            if old.suite != meta.suite {
                return Err(SweepError::Invalid(format!(
                    "{} holds results of suite '{}', not '{}'; use another --out",
                    opts.out.display(),
                    old.suite,
                    meta.suite
                )));
            }
        }
    }
    std::fs::write(&meta_path, serde_json::to_string_pretty(&meta).unwrap_or_default())
        .map_err(|e| SweepError::Io { path: meta_path.display().to_string(), source: e })?;
    // Every point's queries and numbers are checked before the first one runs.
    let specs = points.iter().map(|p| load_spec(p, opts)).collect::<Result<Vec<_>, _>>()?;
    // A finished point is reused only when it was measured as it would be now.
    let finished: BTreeMap<String, SweepPoint> =
        read_points(&opts.out)?.into_iter().map(|p| (p.key.clone(), p)).collect();
    let mut stale: Vec<String> = Vec::new();
    for (p, (_, _, identity)) in points.iter().zip(&specs) {
        let Some(old) = finished.get(&p.key) else { continue };
        if old.fingerprint.as_deref() == Some(identity.fingerprint().as_str()) {
            continue;
        }
        stale.push(match &old.identity {
            Some(o) => format!("{}: {}", p.key, o.differences(identity).join(", ")),
            None => format!("{}: no fingerprint (written by an older chstorm)", p.key),
        });
    }
    let mut replaced = None;
    if !stale.is_empty() {
        if !opts.restart {
            return Err(SweepError::Invalid(format!(
                "{} holds {} finished point{} measured differently from this sweep, first {}; refusing to mix them: \
                 use another --out, or --restart to measure every point again (the earlier results are moved into \
                 {}/replaced-<time>/)",
                opts.out.display(),
                stale.len(),
                if stale.len() == 1 { "" } else { "s" },
                stale[0],
                opts.out.display()
            )));
        }
        let dir = move_aside(&opts.out)?;
        progress(&format!(
            "restarting: {} finished point{} measured differently (first {}); earlier results moved to {}",
            stale.len(),
            if stale.len() == 1 { "" } else { "s" },
            stale[0],
            dir.display()
        ));
        replaced = Some(dir);
    }
    let done: BTreeSet<String> = if replaced.is_some() { BTreeSet::new() } else { finished.into_keys().collect() };
    let mut store = match &opts.store {
        Some(url) => Some(Store::open(url, &opts.targets.tls)?),
        None => None,
    };
    let mut out = SweepOutcome { planned: points.len(), notes, replaced, ..Default::default() };
    for n in &out.notes {
        progress(&format!("note: {n}"));
    }
    for (i, (p, (spec, meta, identity))) in points.iter().zip(specs).enumerate() {
        if done.contains(&p.key) {
            out.already_done += 1;
            continue;
        }
        if stop.is_interrupted() {
            out.interrupted = true;
            break;
        }
        let result = match chstorm_load::run(spec, stop, |_| {}) {
            Ok(r) => r,
            Err(e) => {
                progress(&format!("[{}/{}] {}: FAILED: {e}", i + 1, points.len(), p.key));
                out.failed.push((p.key.clone(), e.to_string()));
                continue;
            }
        };
        if result.stop_reason == StopReason::Interrupted {
            // A point cut short is not kept: a re-run measures it whole.
            out.interrupted = true;
            break;
        }
        let report = BenchReport::new(&meta, &result);
        if report.queries == 0 {
            // Kept in the results (it was measured), but the sweep did not do its job here.
            let why = match report.errors_sample.iter().next() {
                Some((kind, message)) => format!("no successful query; first {kind}: {message}"),
                None => "no successful query (none finished)".to_string(),
            };
            progress(&format!("[{}/{}] {}: {why}, errors {}", i + 1, points.len(), p.key, report.errors));
            out.failed.push((p.key.clone(), why));
        } else {
            progress(&format!(
                "[{}/{}] {}: {:.0} QPS, p50 {:.3} ms, p99 {:.3} ms, errors {}",
                i + 1,
                points.len(),
                p.key,
                report.qps,
                report.latency_s.p50 * 1e3,
                report.latency_s.p99 * 1e3,
                report.errors
            ));
        }
        let fingerprint = Some(identity.fingerprint());
        let point = SweepPoint {
            key: p.key.clone(),
            scenario: p.scenario.clone(),
            variant: p.variant.clone(),
            protocol: p.protocol.as_str().to_string(),
            params: p.params.iter().cloned().collect(),
            concurrency: p.concurrency as u64,
            result: report,
            identity: Some(identity),
            fingerprint,
        };
        chstorm_output::csv::append(&opts.out.join(RESULTS_CSV), &chstorm_output::csv::row(&point.result))
            .map_err(|e| SweepError::Invalid(e.to_string()))?;
        append_line(&opts.out.join(RESULTS_JSONL), &serde_json::to_string(&point).unwrap_or_default())?;
        if let Some(s) = store.as_mut() {
            if let Err(e) = s.insert(&meta_suite_name(opts), &point) {
                progress(&format!("warning: could not store {} in chstorm.results: {e}", p.key));
            }
        }
        out.ran += 1;
    }
    crate::report::write_report(&opts.out)?;
    Ok(out)
}

fn meta_suite_name(opts: &SweepOptions) -> String {
    opts.suite.name.clone()
}
