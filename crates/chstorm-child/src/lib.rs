//! Child processes tied to chstorm's life, shared by the local servers (`chstorm-local`) and
//! the offline load (`chstorm-isolate`).
//!
//! [`tie_to_parent`] makes the kernel SIGKILL the child when its parent goes away
//! (`PR_SET_PDEATHSIG`, set in the child before `exec`), even if chstorm itself is SIGKILLed.
//! The kernel sends that signal when the *thread* that forked the child exits, not the
//! process, so [`spawn`] forks from one helper thread that lives as long as the process: a
//! caller on a short-lived thread (a scoped thread, a blocking-pool thread) cannot lose its
//! children by returning.
//!
//! # Boundaries
//!
//! This crate owns spawning child processes that die with chstorm. It is the bottom of the graph:
//! it uses libc only and must not import any other chstorm crate.

use std::io;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command};
use std::sync::{mpsc, Mutex, OnceLock};
use std::thread;

/// Registers, as the next `pre_exec` step of `cmd`, `PR_SET_PDEATHSIG=SIGKILL`, and a check
/// that the parent did not die before it took effect. Spawn `cmd` with [`spawn`].
pub fn tie_to_parent(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Spawns `cmd` from the long-lived spawner thread; pair it with [`tie_to_parent`].
pub fn spawn(cmd: Command) -> io::Result<Child> {
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("the chstorm spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| io::Error::other("the chstorm spawner thread did not answer"))?
}

type SpawnJob = (Command, mpsc::Sender<io::Result<Child>>);

/// The long-lived spawner thread's queue. The sender lives in a static, so the thread's
/// receive loop never ends; should it, the thread parks forever.
fn spawner() -> &'static Mutex<mpsc::Sender<SpawnJob>> {
    static TX: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        let spawned = thread::Builder::new().name("chstorm-spawner".into()).spawn(move || {
            for (mut cmd, reply) in rx {
                let _ = reply.send(cmd.spawn());
            }
            loop {
                thread::park();
            }
        });
        if let Err(e) = spawned {
            // Without the thread every spawn request fails with a clear error.
            eprintln!("chstorm: cannot start the spawner thread: {e}");
        }
        Mutex::new(tx)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn alive(pid: u32) -> bool {
        // Reaped or a zombie both count as gone: read the state from /proc.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s) => !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
            Err(_) => false,
        }
    }

    #[test]
    fn a_child_outlives_the_short_lived_thread_that_asked_for_it() {
        let mut child = thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            tie_to_parent(&mut cmd);
            spawn(cmd).unwrap()
        })
        .join()
        .unwrap();
        // Forked from the asking thread, the child would get SIGKILL when it exited.
        thread::sleep(Duration::from_millis(300));
        assert!(alive(child.id()), "the child died with the thread that asked for it");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
