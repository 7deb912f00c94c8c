//! `chstorm isolate` through the binary on this machine: every thread of a multi-threaded
//! process (`chstorm burn`) isolated, read back from `/proc/PID/task/*/cgroup`,
//! `/proc/PID/task/*/sched`, `/proc/PID/task/*/stat` and the cgroup files, then `--undo` and
//! read again; an unprivileged user; exit codes and one-line errors. The library's own logic
//! (undo selection, commands, each error) is tested in `crates/chstorm-isolate/tests`. Tests
//! that need a writable cgroup v1 `cpu` hierarchy skip, saying why, without it.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests share the chstorm-offline cgroup: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn chstorm(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_chstorm")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A child process killed and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

/// `chstorm burn --threads N`, once all its threads run (N + 1 tasks).
fn burner(threads: usize) -> Proc {
    let mut c = Command::new(env!("CARGO_BIN_EXE_chstorm"))
        .args(["burn", "--threads", &threads.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "chstorm-burn ready");
    Proc(c)
}

/// The writable cgroup v1 cpu mount with cpu.idle, or None after printing why the test skips.
fn cgroup_v1_or_skip(test: &str) -> Option<PathBuf> {
    chstorm_isolate::v1_cpu_idle_mount().map_err(|why| eprintln!("SKIP {test}: {why}")).ok()
}

/// Where the cgroup v1 cpu controller is mounted.
fn v1_cpu_mount() -> Option<PathBuf> {
    chstorm_isolate::v1_cpu_mount().map(|m| m.mount)
}

/// The cpu-controller cgroup of task `tid` of `pid`, as /proc writes it.
fn cpu_cgroup(pid: u32, tid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/cgroup")).unwrap();
    text.lines()
        .find_map(|l| {
            let mut p = l.splitn(3, ':');
            let (_, ctrls, path) = (p.next()?, p.next()?, p.next()?);
            ctrls.split(',').any(|c| c == "cpu").then(|| path.to_string())
        })
        .unwrap()
}

fn tids(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect()
}

/// The `policy` line of /proc/PID/task/TID/sched.
fn policy(pid: u32, tid: u32) -> u32 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/sched")).unwrap();
    text.lines().find_map(|l| l.strip_prefix("policy")?.split(':').nth(1)?.trim().parse().ok()).unwrap()
}

/// Field 19 (nice) of /proc/PID/task/TID/stat.
fn nice(pid: u32, tid: u32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
    stat.rsplit_once(')').unwrap().1.split_whitespace().nth(16).unwrap().parse().unwrap()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).trim().to_string()
}

#[test]
fn cgroup_idle_covers_every_thread_and_later_children_and_undo_restores() {
    let _s = serial();
    let Some(mount) = cgroup_v1_or_skip("cgroup_idle") else { return };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let st = state.to_str().unwrap();
    let b = burner(2);
    let me = std::process::id();
    let my_cgroup = cpu_cgroup(me, me);
    let before = cpu_cgroup(b.pid(), b.pid());

    let (code, out, err) =
        chstorm(&["isolate", "--pid", &b.pid().to_string(), "--mechanism", "cgroup-idle", "--state", st]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("applied cgroup-v1-idle"), "{out}");
    assert!(out.contains("cgroup-v2-idle:") && out.contains("qos-level:"), "says what was unavailable and why: {out}");
    let offline = mount.join("chstorm-offline");
    assert_eq!(read(&offline.join("cpu.idle")), "1");
    let ts = tids(b.pid());
    assert_eq!(ts.len(), 3, "main thread and 2 burners");
    for t in &ts {
        assert_eq!(cpu_cgroup(b.pid(), *t), "/chstorm-offline", "tid {t}");
    }
    assert_eq!(cpu_cgroup(me, me), my_cgroup, "a process that was not named stays put");

    // A process started later by an isolated one is born in the cgroup.
    let mut sh = Command::new("sh").args(["-c", "read x; sleep 30"]).stdin(Stdio::piped()).spawn().unwrap();
    let (code, out, _) =
        chstorm(&["isolate", "--pid", &sh.id().to_string(), "--mechanism", "cgroup-idle", "--state", st]);
    assert_eq!(code, 0, "{out}");
    writeln!(sh.stdin.as_mut().unwrap(), "go").unwrap();
    let t = Instant::now();
    let child = loop {
        let found = chstorm_isolate::procfs::all_pids()
            .into_iter()
            .find(|&p| chstorm_isolate::procfs::parent_of(p) == Some(sh.id()));
        if let Some(c) = found {
            break c;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "sh did not start its child");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(cpu_cgroup(child, child), "/chstorm-offline", "a later child inherits the cgroup");
    let _ = sh.kill();
    unsafe { kill(child as i32, 9) };
    let _ = sh.wait();
    std::thread::sleep(Duration::from_millis(100));

    let (code, out, err) = chstorm(&["isolate", "--undo", "--state", st]);
    assert_eq!(code, 0, "{out}{err}");
    for t in tids(b.pid()) {
        assert_eq!(cpu_cgroup(b.pid(), t), before, "tid {t} is back");
    }
    assert!(!offline.exists(), "the cgroup chstorm created is removed");
    assert!(!state.exists(), "the state file is removed once everything is undone");
}

#[test]
fn sched_idle_on_every_thread_and_undo() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("s.json");
    let st = st.to_str().unwrap();
    let b = burner(2);
    let cg = cpu_cgroup(b.pid(), b.pid());
    let (code, out, err) =
        chstorm(&["isolate", "--pid", &b.pid().to_string(), "--mechanism", "sched-idle", "--state", st]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("3 threads: 3 SCHED_IDLE"), "{out}");
    for t in tids(b.pid()) {
        assert_eq!(policy(b.pid(), t), 5, "tid {t} is SCHED_IDLE");
    }
    assert_eq!(cpu_cgroup(b.pid(), b.pid()), cg, "sched-idle moves nothing");
    let (code, out, err) = chstorm(&["isolate", "--undo", "--pid", &b.pid().to_string(), "--state", st]);
    assert_eq!(code, 0, "{out}{err}");
    for t in tids(b.pid()) {
        assert_eq!(policy(b.pid(), t), 0, "tid {t} is SCHED_OTHER again");
    }
}

#[test]
fn min_weight_sets_shares_and_nice_19_and_undo() {
    let _s = serial();
    let Some(mount) = cgroup_v1_or_skip("min_weight") else { return };
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("s.json");
    let st = st.to_str().unwrap();
    let b = burner(1);
    let (code, out, err) =
        chstorm(&["isolate", "--pid", &b.pid().to_string(), "--mechanism", "min-weight", "--state", st]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(read(&mount.join("chstorm-offline/cpu.shares")), "2");
    for t in tids(b.pid()) {
        assert_eq!(nice(b.pid(), t), 19, "tid {t}");
        assert_eq!(cpu_cgroup(b.pid(), t), "/chstorm-offline");
    }
    let (code, _, err) = chstorm(&["isolate", "--undo", "--state", st]);
    assert_eq!(code, 0, "{err}");
    for t in tids(b.pid()) {
        assert_eq!(nice(b.pid(), t), 0, "tid {t}");
        assert_eq!(cpu_cgroup(b.pid(), t), "/");
    }
    assert!(!mount.join("chstorm-offline").exists());
}

#[test]
fn a_command_runs_after_the_report_and_its_exit_status_passes_through() {
    let _s = serial();
    let (code, out, err) =
        chstorm(&["isolate", "--mechanism", "sched-idle", "--", "sh", "-c", "grep '^policy' /proc/self/sched"]);
    assert_eq!(code, 0, "{err}");
    let applied = out.find("applied sched-idle").unwrap_or_else(|| panic!("{out}"));
    let policy = out.find("policy").unwrap_or_else(|| panic!("the command's own output: {out}"));
    assert!(
        applied < policy && out[policy..].trim_end().ends_with(" 5"),
        "said first, then the command's output: {out}"
    );
    let (code, _, _) = chstorm(&["isolate", "--mechanism", "sched-idle", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code, 3, "the command's exit status passes through");
}

fn assert_one_line_error(args: &[&str], needle: &str) {
    let (code, out, err) = chstorm(args);
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: {err}");
    assert!(lines[0].starts_with("chstorm: error: ") && err.contains(needle), "{args:?}: '{err}' lacks '{needle}'");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let _s = serial();
    // Flags clap refuses, and errors of the library (tested in chstorm-isolate), each in one line.
    assert_one_line_error(&["isolate", "--pid", "12", "--cgroup", "/x"], "cannot be used with");
    assert_one_line_error(&["isolate", "--mechanism", "fast", "--pid", "12"], "fast");
    assert_one_line_error(&["isolate"], "say what to isolate");
    assert_one_line_error(&["isolate", "--pid", "999999"], "pid 999999 does not exist");
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("s.json");
    std::fs::write(&st, "not json").unwrap();
    assert_one_line_error(
        &["isolate", "--undo", "--state", st.to_str().unwrap()],
        "not a chstorm.isolate-state.v1 file",
    );
    // A context and its cause on one line: the state file cannot take the record.
    let sleep = Proc(Command::new("sleep").arg("30").spawn().unwrap());
    assert_one_line_error(
        &[
            "isolate",
            "--pid",
            &sleep.pid().to_string(),
            "--mechanism",
            "sched-idle",
            "--state",
            "/nonexistent/c/s.json",
        ],
        "the isolation was undone because it could not be recorded: state file /nonexistent/c/s.json",
    );
    assert_eq!(policy(sleep.pid(), sleep.pid()), 0, "undone");
}

#[test]
fn detect_prints_and_exits_0() {
    let (code, out, _) = chstorm(&["isolate", "--detect"]);
    assert_eq!(code, 0);
    assert!(out.contains("mechanisms in detection order") && out.contains("auto picks"), "{out}");
}

/// Runs `cmd` as user nobody (65534) through setpriv, or None if this cannot be done here.
fn as_nobody(cmd: &[&str]) -> Option<Command> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { geteuid() } != 0 || !Path::new("/usr/bin/setpriv").exists() {
        return None;
    }
    let mut c = Command::new("/usr/bin/setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).args(cmd);
    Some(c)
}

#[test]
fn an_unprivileged_user_gets_sched_idle_and_says_what_is_missing() {
    let _s = serial();
    let bin = env!("CARGO_BIN_EXE_chstorm");
    let Some(mut detect) = as_nobody(&[bin, "isolate", "--detect"]) else {
        eprintln!("SKIP unprivileged: not root or no setpriv");
        return;
    };
    let out = text_of(detect.output().unwrap());
    assert!(out.1.contains("auto picks sched-idle"), "{}", out.1);
    if v1_cpu_mount().is_some() {
        assert!(out.1.contains("cgroup-v1-idle  unavailable: no permission to create a cgroup"), "{}", out.1);
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let st = dir.path().join("s.json");
    let st = st.to_str().unwrap();
    // Root's process: the environment's fault, said in one line.
    let root_sleep = Proc(Command::new("sleep").arg("30").spawn().unwrap());
    let (code, _, err) = text_of(
        as_nobody(&[bin, "isolate", "--pid", &root_sleep.pid().to_string(), "--state", st]).unwrap().output().unwrap(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no permission to change the scheduling") && err.contains("owner of the process"), "{err}");
    assert_eq!(policy(root_sleep.pid(), root_sleep.pid()), 0);
    // Its own process: SCHED_IDLE applies. Leaving SCHED_IDLE needs RLIMIT_NICE or root, so
    // the unprivileged undo reports that (exit 1) and root finishes it.
    let own = Proc(as_nobody(&["sleep", "30"]).unwrap().spawn().unwrap());
    let t = Instant::now();
    // Wait until setpriv has exec'd sleep (as nobody).
    let is_sleep =
        |p: u32| chstorm_isolate::procfs::cmdline(p).and_then(|a| a.first().cloned()).as_deref() == Some("sleep");
    while !is_sleep(own.pid()) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, out, err) = text_of(
        as_nobody(&[bin, "isolate", "--pid", &own.pid().to_string(), "--state", st]).unwrap().output().unwrap(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("applied sched-idle"), "{out}");
    assert_eq!(policy(own.pid(), own.pid()), 5);
    let (code, _, err) = text_of(as_nobody(&[bin, "isolate", "--undo", "--state", st]).unwrap().output().unwrap());
    if code == 1 {
        assert!(err.contains("cannot restore the scheduling") && err.contains("run --undo again"), "{err}");
        assert_eq!(policy(own.pid(), own.pid()), 5);
        let (code, out, err) = chstorm(&["isolate", "--undo", "--state", st]);
        assert_eq!(code, 0, "root finishes the undo: {out}{err}");
    } else {
        assert_eq!(code, 0, "{err}");
    }
    assert_eq!(policy(own.pid(), own.pid()), 0);
}

fn text_of(o: std::process::Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    fn geteuid() -> u32;
}
