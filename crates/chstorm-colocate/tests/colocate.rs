//! The colocate library against a real server, in-process: phases per mechanism and merged
//! rounds, the outputs (JSON valid against `schemas/chstorm.colocate.v1.json`, HTML, CSV, the
//! table), and the offline load stopped (its whole process group) after every phase, after an
//! error and after a stop. The offline load is a shell command here; the burner is chstorm's
//! `burn` sub-command, tested through the binary in `crates/chstorm/tests/colocate.rs`.

use chstorm_colocate::{ColocateError, ColocateOptions, ColocateReport, Observer, Offline, Silent};
use chstorm_isolate::{procfs, Request};
use chstorm_load::{LoadSpec, Schedule, StopHandle, Template, Work};
use chstorm_output::RunMeta;
use chstorm_proto::{Target, TlsOptions};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Offline loads compete for the same 2 cores: one colocate run at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A closed loop of `concurrency` connections sending `query` for `duration`.
fn bench(url: &str, query: &str, concurrency: usize, duration: Duration) -> (LoadSpec, RunMeta) {
    let target = Target::parse(url).unwrap();
    let spec = LoadSpec {
        target: target.clone(),
        tls: TlsOptions::default(),
        work: Work::Queries { templates: vec![Template::parse(query, Path::new(".")).unwrap()], randomize: false },
        settings: Vec::new(),
        concurrency,
        schedule: Schedule::Closed,
        duration: Some(duration),
        requests: None,
        warmup: Duration::ZERO,
        timeout: Duration::from_secs(10),
        keepalive: true,
        max_errors: None,
        seed: 1,
        threads: 1,
        segment: Default::default(),
        start_at: None,
    };
    let meta = RunMeta {
        target: target.to_string(),
        protocol: target.protocol.as_str().to_string(),
        keepalive: true,
        concurrency,
        rate: None,
        ramp: None,
        settings: Vec::new(),
        workload: vec![query.to_string()],
        warmup_s: 0.0,
        label: None,
    };
    (spec, meta)
}

fn options(url: &str, offline: &str, isolation: Option<Request>, duration: Duration) -> ColocateOptions {
    let (spec, meta) = bench(url, "SELECT 1", 1, duration);
    ColocateOptions {
        spec,
        meta,
        local_server: false,
        offline: Offline::Command(offline.to_string()),
        isolation,
        offline_warmup: Duration::from_millis(200),
        rounds: 1,
        json: None,
        csv: None,
        html: None,
    }
}

/// A spinning shell that only this test names: `marker` is in its command line.
fn spinner(marker: &str) -> String {
    format!("while :; do :; done # {marker}-{}", std::process::id())
}

/// Live processes whose command line contains `marker` (the test's offline loads).
fn loads_alive(marker: &str) -> Vec<u32> {
    let needle = format!("{marker}-{}", std::process::id());
    procfs::all_pids()
        .into_iter()
        .filter(|&p| procfs::pid_exists(p) && procfs::cmdline(p).is_some_and(|a| a.iter().any(|s| s.contains(&needle))))
        .collect()
}

fn validate(schema: &str, v: &serde_json::Value) {
    let path = format!("{}/../../schemas/{schema}", env!("CARGO_MANIFEST_DIR"));
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(v).map(|e| format!("{e} at {}", e.instance_path)).collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

/// Validates the colocate JSON and each phase's bench object.
fn assert_valid(v: &serde_json::Value) {
    validate("chstorm.colocate.v1.json", v);
    for p in v["phases"].as_array().unwrap() {
        validate("chstorm.bench.v1.json", &p["bench"]);
    }
}

#[test]
fn every_available_mechanism_gets_an_isolated_phase_and_rounds_merge() {
    let _s = serial();
    let server = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(server.native_url(), &spinner("all"), Some(Request::All), Duration::from_millis(500));
    opts.rounds = 2;
    opts.json = Some(dir.path().join("all.json"));
    opts.html = Some(dir.path().join("all.html"));
    opts.csv = Some(dir.path().join("all.csv"));
    let report = chstorm_colocate::run(opts, &StopHandle::new(), &mut Silent).unwrap();

    let text = std::fs::read_to_string(dir.path().join("all.json")).unwrap();
    assert_eq!(text, serde_json::to_string_pretty(&report).unwrap() + "\n", "the file is the returned report");
    assert_valid(&serde_json::from_str(&text).unwrap());
    assert_eq!(report.schema, chstorm_colocate::SCHEMA_ID);
    assert_eq!((report.isolation.as_str(), report.rounds, report.stop_reason.as_str()), ("all", 2, "completed"));
    assert_eq!(report.server_pid, Some(server.pid()), "found through its port: {}", report.server_cpu_source);
    assert!(!report.local_server);
    let available: Vec<&str> = report.mechanisms.iter().filter(|m| m.available).map(|m| m.name.as_str()).collect();
    let isolated: Vec<&str> =
        report.phases.iter().filter(|p| p.name == "isolated").map(|p| p.mechanism.as_str()).collect();
    assert_eq!(isolated, available);
    assert_eq!(report.phases[..2].iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["baseline", "offline"]);
    for p in &report.phases {
        assert_eq!(p.rounds, 2, "{}", p.name);
        assert!(p.queries > 0 && p.queries == p.bench.queries, "{}: {} queries", p.name, p.queries);
        assert!((p.bench.duration_s - 1.0).abs() < 0.1, "two runs of 500 ms: {}", p.bench.duration_s);
        assert_eq!(p.offline_pids.len(), if p.name == "baseline" { 0 } else { 2 }, "{}", p.name);
        assert_eq!(p.qps_change_pct.is_none(), p.name == "baseline");
        for &pgid in &p.offline_pids {
            assert!(procfs::process_group_members(pgid).is_empty(), "load {pgid} of {} left processes", p.name);
        }
    }
    assert!(loads_alive("all").is_empty());

    let table = chstorm_colocate::table::render(&report);
    let rows: Vec<&str> =
        table.lines().skip_while(|l| !l.starts_with("phase ")).skip(1).take_while(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), report.phases.len(), "{table}");
    assert!(table.contains("2 rounds interleaved"), "{table}");
    let html = std::fs::read_to_string(dir.path().join("all.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("QPS per phase") && html.contains("<svg"));
    let csv = std::fs::read_to_string(dir.path().join("all.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + report.phases.len(), "a header and a row per phase: {csv}");
    let labels: Vec<String> = csv.lines().skip(1).map(|l| l.split(',').take(3).collect::<Vec<_>>().join("/")).collect();
    let want: Vec<String> = report.phases.iter().map(|p| format!("colocate/{}/{}", p.name, p.mechanism)).collect();
    assert_eq!(labels, want, "the label colocate/PHASE/MECHANISM, split as clickhouse-sts's columns");
}

#[test]
fn an_offline_command_runs_in_its_own_group_and_is_killed_whole() {
    let _s = serial();
    let server = chstorm_local::shared_server();
    // A shell that forks a spinning child: both must be isolated and killed.
    let cmd = format!("while :; do :; done & {}", spinner("group"));
    let mut opts = options(server.native_url(), &cmd, Some(Request::CgroupIdle), Duration::from_millis(500));
    opts.offline_warmup = Duration::from_millis(300);
    let report = match chstorm_colocate::run(opts, &StopHandle::new(), &mut Silent) {
        Err(ColocateError::Isolation(e)) => {
            eprintln!("SKIP offline command with cgroup-idle: {e}");
            return;
        }
        r => r.unwrap(),
    };
    assert_eq!(report.offline.kind, "command");
    assert!(report.phases[1].offline_cpu_pct.unwrap() > 5.0, "the load burns: {:?}", report.phases[1]);
    for p in &report.phases[1..] {
        let pgid = p.offline_pids[0];
        assert!(procfs::process_group_members(pgid).is_empty(), "group {pgid} left processes");
    }
    assert!(report.phases[2].isolation.iter().any(|l| l.contains("starts inside")), "{:?}", report.phases[2]);
    assert!(loads_alive("group").is_empty());
}

/// An observer that runs `at` once, when a note starts with `prefix`, and records the offline
/// loads alive when each measured run starts.
struct At<F: FnMut()> {
    prefix: &'static str,
    at: Option<F>,
    marker: &'static str,
    seen: Vec<u32>,
}

impl<F: FnMut()> Observer for At<F> {
    fn note(&mut self, line: &str) {
        if line.starts_with(self.prefix) {
            if let Some(mut f) = self.at.take() {
                f();
            }
        }
    }
    fn run_started(&mut self, _: Option<Duration>) {
        self.seen.extend(loads_alive(self.marker));
    }
    fn progress(&mut self, _: &chstorm_load::Progress) {}
    fn run_finished(&mut self) {}
}

/// A fake HTTP server that answers every request with `1`, until `gone` is set; the thread
/// ends (dropping the listener) once it sees that.
fn fake_server(gone: Arc<AtomicBool>) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let thread = std::thread::spawn(move || {
        while !gone.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((conn, _)) => {
                    std::thread::spawn(move || chstorm_testenv::answer_ones(conn, || {}));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    (url, thread)
}

#[test]
fn an_error_after_the_load_started_still_stops_it() {
    let _s = serial();
    let gone = Arc::new(AtomicBool::new(false));
    let (url, server) = fake_server(gone.clone());
    let mut server = Some(server);
    let opts = options(&url, &spinner("error"), None, Duration::from_millis(500));
    // The baseline is done and the offline phase begins: take the server away, so the offline
    // phase cannot start measuring once its load has warmed up.
    let mut observer = At {
        prefix: "phase 2/2",
        at: Some(|| {
            gone.store(true, Ordering::SeqCst);
            server.take().unwrap().join().unwrap();
        }),
        marker: "error",
        seen: Vec::new(),
    };
    let err = chstorm_colocate::run(opts, &StopHandle::new(), &mut observer).unwrap_err();
    assert!(matches!(err, ColocateError::Run { .. }), "{err:?}");
    assert!(err.to_string().starts_with("cannot run against http://127.0.0.1:"), "{err}");
    assert!(observer.at.is_none(), "the offline phase began");
    assert!(!observer.seen.is_empty(), "the load was running when the bench began");
    assert!(loads_alive("error").is_empty(), "the load is stopped");
}

#[test]
fn a_stop_during_the_warm_up_ends_the_run_with_what_was_measured() {
    let _s = serial();
    let server = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    let stop = StopHandle::new();
    let mut opts = options(server.native_url(), &spinner("stop"), None, Duration::from_millis(300));
    opts.json = Some(dir.path().join("stop.json"));
    opts.offline_warmup = Duration::from_secs(5);
    let mut observer = At { prefix: "phase 2/2", at: Some(|| stop.interrupt()), marker: "stop", seen: Vec::new() };
    let report: ColocateReport = chstorm_colocate::run(opts, &stop, &mut observer).unwrap();
    assert!(observer.seen.is_empty(), "the offline phase never measured: {:?}", observer.seen);
    assert!(report.interrupted() && report.stop_reason == "interrupted");
    assert_eq!(report.phases.len(), 1, "only the baseline was measured");
    assert_eq!(report.phases[0].name, "baseline");
    assert!(report.phases[0].queries > 0);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("stop.json")).unwrap())
        .expect("the JSON is written");
    assert_valid(&v);
    assert!(loads_alive("stop").is_empty(), "the load is stopped");
}
