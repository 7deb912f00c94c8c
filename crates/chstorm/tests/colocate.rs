//! `chstorm colocate` end to end, through the binary: a short run with the command line's
//! defaults (local server, seed query, -c 10, the burner) gives the three phases, the table,
//! JSON that matches `schemas/chstorm.colocate.v1.json` and an HTML page; the burner is reaped,
//! with no orphan, after a normal end, a SIGINT and a SIGKILL of chstorm; bad input is one line
//! and exit 2. Phases per mechanism, rounds, offline commands and errors mid-run are tested
//! in-process in `crates/chstorm-colocate/tests`.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Burners compete for the same 2 cores: one colocate run at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn chstorm() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_chstorm"));
    c.env_remove("CHSTORM_URL");
    c
}

fn run(args: &[&str]) -> Output {
    chstorm().args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// True if `pid` is alive and not a zombie.
fn alive(pid: u32) -> bool {
    chstorm_isolate::procfs::pid_exists(pid)
}

/// Burner processes (`chstorm burn`) whose parent is `parent`.
fn burners_of(parent: u32) -> Vec<u32> {
    chstorm_isolate::procfs::all_pids()
        .into_iter()
        .filter(|&p| chstorm_isolate::procfs::parent_of(p) == Some(parent) && alive(p))
        .filter(|&p| chstorm_isolate::procfs::cmdline(p).is_some_and(|a| a.get(1).map(String::as_str) == Some("burn")))
        .collect()
}

/// Waits until `child` has started a burner; returns its pid.
fn wait_for_burner(child: &mut Child, within: Duration) -> u32 {
    let t = Instant::now();
    loop {
        if let Some(&p) = burners_of(child.id()).first() {
            return p;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("chstorm exited ({st}) before starting a burner");
        }
        assert!(t.elapsed() < within, "no burner within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        assert!(t.elapsed() < within, "chstorm did not exit within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts the burner `pid` is gone (not even a zombie) within a second.
fn assert_reaped(pid: u32) {
    let t = Instant::now();
    while alive(pid) && t.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!alive(pid), "burner {pid} survived");
    let stray: Vec<u32> = chstorm_isolate::procfs::all_pids()
        .into_iter()
        .filter(|&p| {
            alive(p)
                && chstorm_isolate::procfs::cmdline(p)
                    .is_some_and(|a| a.get(1).map(String::as_str) == Some("burn") && a[0].ends_with("chstorm"))
        })
        .collect();
    assert!(stray.is_empty(), "orphan burners: {stray:?}");
}

fn schema_validator() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas/chstorm.colocate.v1.json");
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

fn bench_validator() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas/chstorm.bench.v1.json");
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

fn assert_valid(v: &serde_json::Value) {
    let errors: Vec<String> =
        schema_validator().iter_errors(v).map(|e| format!("{e} at {}", e.instance_path)).collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
    let bench = bench_validator();
    for p in v["phases"].as_array().unwrap() {
        let errors: Vec<String> =
            bench.iter_errors(&p["bench"]).map(|e| format!("{e} at {}", e.instance_path)).collect();
        assert!(errors.is_empty(), "bench schema violations: {errors:#?}");
    }
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

#[test]
fn a_short_run_with_defaults_gives_three_phases_the_table_json_and_html() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("co.json");
    // No --url: a local server; no query: the seed's; no -c: 10.
    let out = run(&[
        "colocate",
        "-d",
        "2s",
        "--offline-cpus",
        "2",
        "--offline-warmup",
        "300ms",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let header = stdout.lines().find(|l| l.starts_with("phase ")).unwrap_or_else(|| panic!("no table: {stdout}"));
    for col in ["mechanism", "QPS", "Δ QPS", "P50", "P90", "P99", "Δ P99", "server CPU", "offline CPU"] {
        assert!(header.contains(col), "{header}");
    }
    let rows: Vec<&str> =
        stdout.lines().skip_while(|l| !l.starts_with("phase ")).skip(1).take_while(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    let first: Vec<&str> = rows.iter().map(|r| r.split_whitespace().next().unwrap()).collect();
    assert_eq!(first, ["baseline", "offline", "isolated"], "{stdout}");
    assert!(rows[1].contains('%'), "{stdout}");

    let v = read_json(&json);
    assert_valid(&v);
    assert_eq!(v["schema"], "chstorm.colocate.v1");
    assert_eq!(v["local_server"], true);
    assert_eq!(v["bench"]["concurrency"], 10, "-c defaults to 10");
    assert_eq!(v["bench"]["workload"][0], "SELECT * FROM system.numbers LIMIT 10000000 OFFSET 10000000");
    assert_eq!(v["protocol"], "native");
    let phases = v["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["baseline", "offline", "isolated"]);
    assert_eq!(
        phases[2]["mechanism"],
        v["mechanisms"].as_array().unwrap().iter().find(|m| m["available"] == true).unwrap()["name"]
    );
    for p in phases {
        assert!(p["queries"].as_u64().unwrap() > 0, "{p}");
        assert!(p["server_cpu_pct"].as_f64().unwrap() > 0.0, "server CPU is measured");
    }
    assert!(phases[1]["offline_cpu_pct"].as_f64().unwrap() > 5.0, "the burner burns: {}", phases[1]["offline_cpu_pct"]);
    assert!(phases[2]["isolation"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().starts_with("read back")));
    // The burners are gone, the local server too, and the isolation is undone.
    for p in &phases[1..] {
        assert_reaped(p["offline_pids"][0].as_u64().unwrap() as u32);
    }
    assert!(!alive(v["server_pid"].as_u64().unwrap() as u32), "the local server is stopped");
    let left: Vec<_> = std::fs::read_dir("/sys/fs/cgroup/cpu")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("chstorm-colocate-"))
        .collect();
    assert!(left.is_empty(), "the cgroup is removed: {left:?}");

    let html = std::fs::read_to_string(json.with_extension("html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<svg") && html.contains("QPS per phase"));
    assert!(!html.contains("http://") || !html.contains("src=\"http"), "no external resources");
}

#[test]
fn sigint_mid_phase_reaps_the_burner_exits_130_and_writes_what_was_measured() {
    let _s = serial();
    let s = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("int.json");
    let mut child = chstorm()
        .args(["colocate", "--url", s.native_url(), "-q", "SELECT 1", "-c", "2", "-d", "1s", "--offline-cpus", "2"])
        .args(["--offline-warmup", "200ms", "--isolation", "sched-idle", "--quiet", "--json", json.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    let first = wait_for_burner(&mut child, Duration::from_secs(20));
    seen.push(first);
    // Measuring of the offline phase is under way 200 ms after its burner started.
    std::thread::sleep(Duration::from_millis(600));
    seen.extend(burners_of(child.id()));
    unsafe { kill(child.id() as i32, 2) };
    let status = wait_exit(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(130));
    for b in seen {
        assert_reaped(b);
    }
    let v = read_json(&json);
    assert_valid(&v);
    assert_eq!(v["stop_reason"], "interrupted");
    let phases = v["phases"].as_array().unwrap();
    assert!(!phases.is_empty() && phases.len() < 3, "{} phases", phases.len());
    assert_eq!(phases[0]["name"], "baseline");
    assert_eq!(phases.last().unwrap()["stop_reason"], "interrupted");
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(out.contains("baseline") && out.contains("interrupted"), "{out}");
    assert!(json.with_extension("html").exists());
}

#[test]
fn sigkill_of_chstorm_takes_the_burner_with_it() {
    let _s = serial();
    let s = chstorm_local::shared_server();
    let mut child = chstorm()
        .args(["colocate", "--url", s.native_url(), "-q", "SELECT 1", "-c", "1", "-d", "5s", "--offline-cpus", "1"])
        .args(["--isolation", "none", "--quiet", "--no-html"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let burner = wait_for_burner(&mut child, Duration::from_secs(20));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_reaped(burner);
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let one_line = |args: &[&str], needle: &str| {
        let out = run(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("chstorm: error: ") && err.contains(needle), "{args:?}: '{err}' lacks '{needle}'");
    };
    one_line(&["colocate", "--offline-cpus", "0"], "offline-cpus");
    one_line(&["colocate", "--isolation", "fastest"], "fastest");
    one_line(&["colocate", "--offline-cpus", "2", "--offline-cmd", "stress"], "cannot be used with");
    one_line(&["colocate", "--url", "http://127.0.0.1:1", "--json", "/nonexistent/x.json"], "does not exist");
    one_line(&["colocate", "--url", "http://127.0.0.1:1", "--offline-cmd", " "], "--offline-cmd is empty");
    if !Path::new("/sys/fs/cgroup/cpu/cpu.qos_level").exists() {
        one_line(
            &["colocate", "--url", "http://127.0.0.1:1", "--isolation", "qos-level"],
            "qos-level is not available here",
        );
    }
    let out = run(&["colocate", "--url", "http://127.0.0.1:1", "-d", "1s", "--isolation", "none", "--no-html"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot run against"), "{}", text(&out.stderr));
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
