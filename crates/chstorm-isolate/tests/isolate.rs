//! [`chstorm_isolate::run`] (what `chstorm isolate` does) in-process on this machine: apply,
//! read the result back from `/proc` and the cgroup files, undo (all, or only the records of
//! given PIDs or a cgroup) and read again; a command started isolated; the errors. Tests that
//! need a writable cgroup v1 `cpu` hierarchy skip, saying why, without it. Coverage of every
//! thread of a multi-threaded process, and the exit codes and one-line errors of the binary,
//! are tested through `chstorm isolate` in `crates/chstorm/tests/isolate.rs`.

use chstorm_isolate::{state, Fault, IsolateError, IsolateOptions, Mechanism, Request};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;

/// The tests share the chstorm-offline cgroup: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Options that do nothing yet, with the state file `state`.
fn options(state: &Path) -> IsolateOptions {
    IsolateOptions {
        pids: Vec::new(),
        cgroup: None,
        command: Vec::new(),
        request: Request::Auto,
        undo: false,
        detect: false,
        state: Some(state.to_path_buf()),
    }
}

/// Runs `opts`; returns the result, what went to `out` and what went to `warn`.
fn run(opts: &IsolateOptions) -> (Result<i32, IsolateError>, String, String) {
    let (mut out, mut warn) = (Vec::new(), Vec::new());
    let r = chstorm_isolate::run(opts, &mut out, &mut warn);
    (r, String::from_utf8(out).unwrap(), String::from_utf8(warn).unwrap())
}

/// A child process killed and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sleeper() -> Proc {
    Proc(Command::new("sleep").arg("30").spawn().unwrap())
}

/// The `policy` line of /proc/PID/sched (0 SCHED_OTHER, 5 SCHED_IDLE).
fn policy(pid: u32) -> u32 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/sched")).unwrap();
    text.lines().find_map(|l| l.strip_prefix("policy")?.split(':').nth(1)?.trim().parse().ok()).unwrap()
}

/// The writable cgroup v1 cpu mount with cpu.idle, or None after printing why the test skips.
fn cgroup_v1_or_skip(test: &str) -> Option<PathBuf> {
    chstorm_isolate::v1_cpu_idle_mount().map_err(|why| eprintln!("SKIP {test}: {why}")).ok()
}

/// Where the cgroup v1 cpu controller is mounted.
fn v1_cpu_mount() -> Option<PathBuf> {
    chstorm_isolate::v1_cpu_mount().map(|m| m.mount)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).trim().to_string()
}

#[test]
fn detection_names_every_mechanism_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(&dir.path().join("s.json"));
    o.detect = true;
    let (r, out, _) = run(&o);
    assert_eq!(r.unwrap(), 0);
    let pos: Vec<usize> = ["1. qos-level", "2. cgroup-v2-idle", "3. cgroup-v1-idle", "4. sched-idle", "5. min-weight"]
        .iter()
        .map(|m| out.find(m).unwrap_or_else(|| panic!("{m} missing: {out}")))
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "{out}");
    let best = chstorm_isolate::detect_all().into_iter().find(|a| a.result.is_ok()).unwrap().mechanism;
    assert!(out.contains(&format!("auto picks {}", best.name())), "{out}");
    assert!(!dir.path().join("s.json").exists(), "detection records nothing");
}

#[test]
fn sched_idle_is_recorded_and_undo_restores_the_named_pid_first_then_the_rest() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("s.json");
    let (a, b) = (sleeper(), sleeper());
    for p in [&a, &b] {
        let mut o = options(&st);
        o.pids = vec![p.0.id()];
        o.request = Request::One(Mechanism::SchedIdle);
        let (r, out, _) = run(&o);
        assert_eq!(r.unwrap(), 0, "{out}");
        assert!(out.starts_with(&format!("applied sched-idle (SCHED_IDLE on every thread) to pid {}", p.0.id())));
        assert!(out.contains(&format!("pid {}: 1 threads: 1 SCHED_IDLE nice", p.0.id())), "read back: {out}");
        assert!(out.contains("not used:\n  qos-level: "), "says why not the others: {out}");
        let hint =
            format!("recorded in {}; undo with: chstorm isolate --undo --state {}\n", st.display(), st.display());
        assert!(out.ends_with(&hint), "{out}");
        assert_eq!(policy(p.0.id()), 5);
    }
    assert_eq!(state::load(&st).unwrap().len(), 2);

    let mut o = options(&st);
    o.undo = true;
    o.pids = vec![a.0.id()];
    let (r, out, warn) = run(&o);
    assert_eq!(r.unwrap(), 0, "{out}{warn}");
    let undid = format!("undid sched-idle on pid {}\n  tid {} back to SCHED_OTHER nice", a.0.id(), a.0.id());
    assert!(out.starts_with(&undid), "{out}");
    assert_eq!((policy(a.0.id()), policy(b.0.id())), (0, 5), "only the named pid is undone");
    let left = state::load(&st).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].target, chstorm_isolate::Target::Pids(vec![b.0.id()]));

    o.pids.clear();
    let (r, _, _) = run(&o);
    assert_eq!(r.unwrap(), 0);
    assert_eq!(policy(b.0.id()), 0);
    assert!(!st.exists(), "the state file goes with its last record");
    let (r, out, _) = run(&o);
    assert_eq!(r.unwrap(), 0);
    assert_eq!(out, format!("nothing to undo: {} records no isolation\n", st.display()));
}

#[test]
fn an_existing_cgroup_is_set_and_restored_and_nothing_moves() {
    let _s = serial();
    let Some(mount) = cgroup_v1_or_skip("existing_cgroup") else { return };
    let cg = mount.join(format!("chstorm-test-{}", std::process::id()));
    std::fs::create_dir(&cg).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("s.json");
    let mut o = options(&st);
    o.cgroup = Some(cg.clone());
    let (r, out, _) = run(&o);
    assert_eq!(r.unwrap(), 0, "{out}");
    assert_eq!(read(&cg.join("cpu.idle")), "1");
    assert!(!mount.join("chstorm-offline").exists(), "no child cgroup for --cgroup");
    o.undo = true;
    let (r, out, warn) = run(&o);
    assert_eq!(r.unwrap(), 0, "{out}{warn}");
    assert_eq!(read(&cg.join("cpu.idle")), "0");
    std::fs::remove_dir(&cg).unwrap();
}

#[test]
fn a_command_starts_isolated_its_status_passes_through_and_the_cgroup_goes_at_its_end() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let script =
        format!("grep -E ':cpu[,:]' /proc/self/cgroup > {0}; grep '^policy' /proc/self/sched >> {0}", seen.display());
    let command = |mechanism, script: &str| {
        let mut o = options(&dir.path().join("s.json"));
        o.request = Request::One(mechanism);
        o.command = vec!["sh".into(), "-c".into(), script.into()];
        let (r, out, warn) = run(&o);
        (r.unwrap(), out, warn)
    };
    if let Some(mount) = cgroup_v1_or_skip("command_cgroup") {
        let (code, out, warn) = command(Mechanism::CgroupV1Idle, &script);
        assert_eq!(code, 0, "{out}{warn}");
        assert!(out.contains("the command starts inside"), "{out}");
        assert!(read(&seen).contains(":cpu:/chstorm-offline"), "{}", read(&seen));
        assert!(!mount.join("chstorm-offline").exists(), "removed after the command");
    }
    let (code, out, warn) = command(Mechanism::SchedIdle, &script);
    assert_eq!(code, 0, "{out}{warn}");
    assert!(read(&seen).lines().any(|l| l.starts_with("policy") && l.trim_end().ends_with(" 5")), "{}", read(&seen));
    assert_eq!(command(Mechanism::SchedIdle, "exit 3").0, 3, "the command's exit status passes through");
    assert_eq!(command(Mechanism::SchedIdle, "kill -9 $$").0, 128 + 9, "killed by a signal: 128 + N");
    assert!(!dir.path().join("s.json").exists(), "a command's isolation is not recorded");
}

#[test]
fn bad_input_says_what_is_wrong_and_whose_fault_it_is() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("s.json");
    let err = |o: &IsolateOptions| {
        let (r, out, _) = run(o);
        let e = r.unwrap_err();
        assert!(out.is_empty(), "nothing is said before an error: {out}");
        (e.to_string(), e.fault())
    };
    let mut o = options(&st);
    assert_eq!(
        err(&o),
        ("say what to isolate: --pid PID, --cgroup PATH or -- CMD ARGS (or --undo, --detect)".into(), Fault::Client)
    );
    o.pids = vec![999_999];
    assert_eq!(err(&o), ("pid 999999 does not exist".into(), Fault::Client));
    o.pids = vec![1];
    let (e, fault) = err(&o);
    assert!(e.starts_with("refusing to isolate pid 1"), "{e}");
    assert_eq!(fault, Fault::Client);

    let mut o = options(&st);
    o.undo = true;
    o.pids = vec![4242];
    let want = format!("{} records no isolation of the given --pid/--cgroup", st.display());
    assert_eq!(err(&o), (want, Fault::Client));
    std::fs::write(&st, "not json").unwrap();
    let (e, _) = err(&o);
    assert!(e.contains("not a chstorm.isolate-state.v1 file"), "{e}");

    if !v1_cpu_mount().unwrap_or_default().join("cpu.qos_level").exists() {
        let p = sleeper();
        let mut o = options(&dir.path().join("q.json"));
        o.pids = vec![p.0.id()];
        o.request = Request::One(Mechanism::QosLevel);
        let (e, fault) = err(&o);
        assert!(e.contains("qos-level is not available here"), "{e}");
        assert_eq!(fault, Fault::Environment);
        assert_eq!(policy(p.0.id()), 0, "nothing was changed");
    }
}

#[test]
fn an_isolation_that_cannot_be_recorded_is_undone() {
    let _s = serial();
    let p = sleeper();
    let mut o = options(Path::new("/nonexistent/chstorm/s.json"));
    o.pids = vec![p.0.id()];
    o.request = Request::One(Mechanism::SchedIdle);
    let (r, out, _) = run(&o);
    let e = r.unwrap_err();
    assert!(matches!(e, IsolateError::NotRecorded(_)), "{e:?}");
    assert_eq!(e.to_string(), "the isolation was undone because it could not be recorded");
    let cause = std::error::Error::source(&e).unwrap().to_string();
    assert!(cause.starts_with("state file /nonexistent/chstorm/s.json"), "{cause}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(policy(p.0.id()), 0, "undone");
}
