//! The offline load: a CPU burner or a shell command, started as a child process in its own
//! process group, and always stopped.
//!
//! Stopping is SIGKILL to the whole process group, then reaping the child. It happens in
//! [`OfflineLoad::stop`], on drop (any error path), and in an `atexit` hook (a second Ctrl-C
//! that calls `exit()`). If chstorm itself is SIGKILLed, the kernel kills the child because of
//! `PR_SET_PDEATHSIG=SIGKILL`, set in the child before `exec`, and the fork comes from a
//! long-lived thread, because the signal follows the *thread* that forked (`chstorm_child`).
//! Grandchildren of a
//! custom command are only covered by the group kill, not by the death signal.

use crate::apply::PreExec;
use crate::burn::READY;
use crate::error::IsolateError;
use crate::{cpu, procfs};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex, Once};
use std::time::Duration;

/// How long the burner gets to print its ready line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// What to run.
#[derive(Debug, Clone)]
pub enum OfflineSpec {
    /// `exe args...` that runs [`crate::burn::run`] (chstorm: `chstorm burn --threads N`);
    /// start waits for its [`READY`] line, so every thread is running when start returns.
    Burner { exe: PathBuf, args: Vec<String>, threads: usize },
    /// `sh -c COMMAND`.
    Command(String),
}

impl OfflineSpec {
    /// A line for people: `2 burner threads` or `sh -c '...'`.
    pub fn describe(&self) -> String {
        match self {
            OfflineSpec::Burner { threads, .. } => {
                format!("{threads} burner thread{}", if *threads == 1 { "" } else { "s" })
            }
            OfflineSpec::Command(c) => format!("sh -c '{c}'"),
        }
    }
}

/// A running offline load. Dropping it kills and reaps it.
#[derive(Debug)]
pub struct OfflineLoad {
    child: Option<Child>,
    pid: u32,
}

/// Loads to kill at `exit()`: the leader pid, which is also the process group id.
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

extern "C" fn kill_all_at_exit() {
    let Ok(mut live) = LIVE.try_lock() else { return };
    for pid in live.drain(..) {
        // SAFETY: SIGKILL to a process group we created, then reap our own child.
        unsafe {
            libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
            libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
        }
    }
}

fn track(pid: u32, add: bool) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        // SAFETY: registers a plain extern "C" function.
        unsafe { libc::atexit(kill_all_at_exit) };
    });
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|&p| p != pid);
    if add {
        live.push(pid);
    }
}

impl OfflineLoad {
    /// Starts `spec` in a new process group, tied to this process's life. `pre` runs in the
    /// child before `exec` (to start it already isolated, see [`crate::prepare_command`]).
    pub fn start(spec: &OfflineSpec, pre: Option<PreExec>) -> Result<OfflineLoad, IsolateError> {
        let mut cmd = match spec {
            OfflineSpec::Burner { exe, args, .. } => {
                let mut c = Command::new(exe);
                c.args(args).stdout(Stdio::piped());
                c
            }
            OfflineSpec::Command(line) => {
                let mut c = Command::new("/bin/sh");
                c.arg("-c").arg(line).stdout(Stdio::null());
                c
            }
        };
        cmd.stdin(Stdio::null()).process_group(0);
        chstorm_child::tie_to_parent(&mut cmd);
        if let Some(pre) = pre {
            // SAFETY: PreExec::run makes only async-signal-safe system calls.
            unsafe {
                cmd.pre_exec(move || pre.run());
            }
        }
        let what = spec.describe();
        let mut child = chstorm_child::spawn(cmd)
            .map_err(|e| IsolateError::Io { what: format!("start the offline load ({what})"), source: e })?;
        let pid = child.id();
        track(pid, true);
        let mut load = OfflineLoad { child: None, pid };
        let stdout = child.stdout.take();
        load.child = Some(child);
        if let (OfflineSpec::Burner { exe, .. }, Some(out)) = (spec, stdout) {
            wait_ready(out, exe)?; // on error, drop kills it
        }
        Ok(load)
    }

    /// The process chstorm started (the process group leader).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Every live process of the load (its process group).
    pub fn pids(&self) -> Vec<u32> {
        let mut p = procfs::process_group_members(self.pid);
        if p.is_empty() && procfs::pid_exists(self.pid) {
            p.push(self.pid);
        }
        p
    }

    /// Samples the load's CPU time (see [`cpu::share_pct`]).
    pub fn cpu_sample(&self) -> cpu::CpuSample {
        cpu::sample(&self.pids())
    }

    /// True while the leader is running.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills the whole process group and reaps the child. Idempotent.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        // SAFETY: SIGKILL to the process group we created.
        unsafe { libc::kill(-(self.pid as libc::pid_t), libc::SIGKILL) };
        let _ = child.kill();
        let status = child.wait().ok();
        track(self.pid, false);
        status
    }
}

impl Drop for OfflineLoad {
    fn drop(&mut self) {
        self.stop();
    }
}

fn wait_ready(out: std::process::ChildStdout, exe: &std::path::Path) -> Result<(), IsolateError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let r = BufReader::new(out).read_line(&mut line).map(|_| line);
        let _ = tx.send(r);
    });
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(Ok(line)) if line.trim() == READY => Ok(()),
        Ok(Ok(line)) => Err(IsolateError::Internal(format!(
            "the burner {} printed '{}' instead of '{READY}'; is it chstorm?",
            exe.display(),
            line.trim()
        ))),
        Ok(Err(e)) => {
            Err(IsolateError::Io { what: format!("read the burner's ready line ({})", exe.display()), source: e })
        }
        Err(_) => {
            Err(IsolateError::Internal(format!("the burner {} did not start within {READY_TIMEOUT:?}", exe.display())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_group_is_killed_and_reaped() {
        let mut load = OfflineLoad::start(&OfflineSpec::Command("sleep 30 & sleep 30; wait".into()), None).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let pids = load.pids();
        assert!(pids.len() >= 2, "sh and its sleeps: {pids:?}");
        assert!(load.is_running());
        load.stop();
        std::thread::sleep(Duration::from_millis(100));
        for p in pids {
            assert!(!procfs::pid_exists(p), "pid {p} survived");
        }
        assert!(load.stop().is_none(), "stop is idempotent");
    }
}
