//! Process control: finding the binary, spawning (optionally tied to the
//! lifetime of this process), and stopping servers by `Child` or by pid.
//!
//! Stopping is always: SIGTERM, wait up to [`STOP_GRACE`] (10 s), SIGKILL,
//! wait up to [`KILL_WAIT`] (5 s).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::config;
use crate::error::LocalError;
use crate::procfs::{is_alive, is_server_of};

/// How long a server gets to exit after SIGTERM before it is sent SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long we wait for a process to vanish after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// Polling interval while waiting for a process to exit.
const POLL: Duration = Duration::from_millis(20);
/// Where Debian's package installs the server.
const DEBIAN_BINARY: &str = "/usr/sbin/clickhouse-server";

/// Picks the server binary: `explicit` if given, else `clickhouse-server` on
/// `PATH`, else `/usr/sbin/clickhouse-server`.
pub(crate) fn resolve_binary(explicit: Option<&Path>) -> Result<PathBuf, LocalError> {
    if let Some(p) = explicit {
        return if p.is_file() { Ok(p.to_path_buf()) } else { Err(LocalError::BinaryMissing(p.to_path_buf())) };
    }
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("clickhouse-server"))
        .find(|p| is_executable(p));
    on_path
        .or_else(|| Some(PathBuf::from(DEBIAN_BINARY)).filter(|p| is_executable(p)))
        .ok_or(LocalError::BinaryNotFound)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Builds the command line `BINARY [server] --config-file=DIR/config.xml`, run
/// in `dir`, stdin from /dev/null, stdout and stderr appended to
/// `DIR/log/stdout.log`, in its own process group (so Ctrl-C in a terminal
/// does not reach it).
pub(crate) fn server_command(binary: &Path, dir: &Path) -> Result<Command, LocalError> {
    let log_path = config::stdout_log_path(dir);
    let log = File::options()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| LocalError::io(format!("open {}", log_path.display()), e))?;
    let log2 = log.try_clone().map_err(|e| LocalError::io("duplicate a log file handle", e))?;
    let mut cmd = Command::new(binary);
    // The all-in-one binary of newer releases needs the sub-command.
    if binary.file_name() == Some(OsStr::new("clickhouse")) {
        cmd.arg("server");
    }
    cmd.arg(config_arg(dir)).current_dir(dir).stdin(Stdio::null()).stdout(log).stderr(log2).process_group(0);
    Ok(cmd)
}

/// The `--config-file=` argument for `dir`; also what [`is_server_of`] looks for.
pub(crate) fn config_arg(dir: &Path) -> String {
    format!("--config-file={}", config::config_path(dir).display())
}

/// Spawns `cmd`. With `die_with_parent` the child is tied to this process's life and forked
/// from a long-lived thread (see `chstorm_child`).
pub(crate) fn spawn(mut cmd: Command, die_with_parent: bool) -> io::Result<Child> {
    if !die_with_parent {
        return cmd.spawn();
    }
    chstorm_child::tie_to_parent(&mut cmd);
    chstorm_child::spawn(cmd)
}

/// Stops our own child: SIGTERM, wait up to `grace`, SIGKILL, reap.
pub(crate) fn stop_child(child: &mut Child, grace: Duration) -> Result<(), LocalError> {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return Ok(());
    }
    signal(child.id(), libc::SIGTERM);
    if wait_child(child, grace) {
        return Ok(());
    }
    kill_child(child)
}

/// SIGKILL our own child now and reap it.
pub(crate) fn kill_child(child: &mut Child) -> Result<(), LocalError> {
    let _ = child.kill();
    if wait_child(child, KILL_WAIT) {
        Ok(())
    } else {
        Err(LocalError::StopFailed(child.id()))
    }
}

/// Polls until the child exited (and is reaped) or `timeout` passes.
fn wait_child(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => return false,
            Ok(None) => thread::sleep(POLL),
        }
    }
}

/// Stops a process that may not be our child, after checking it is the server
/// of `dir` (checked again before SIGKILL, against pid reuse). Returns false
/// if it was not running or is not that server.
pub(crate) fn stop_pid(pid: u32, dir: &Path, grace: Duration) -> Result<bool, LocalError> {
    if !is_server_of(pid, dir) {
        return Ok(false);
    }
    signal(pid, libc::SIGTERM);
    if wait_gone(pid, grace) {
        return Ok(true);
    }
    if is_server_of(pid, dir) {
        signal(pid, libc::SIGKILL);
        if !wait_gone(pid, KILL_WAIT) {
            return Err(LocalError::StopFailed(pid));
        }
    }
    Ok(true)
}

fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while is_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(POLL);
    }
    true
}

fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if pid > 0 {
            // SAFETY: plain syscall; pid > 0 so it targets exactly one process.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strangers_are_not_servers() {
        let dir = Path::new("/nonexistent/chstorm");
        assert!(!stop_pid(std::process::id(), dir, Duration::from_millis(10)).unwrap());
    }

    #[test]
    fn explicit_missing_binary() {
        let err = resolve_binary(Some(Path::new("/nonexistent/clickhouse-server"))).unwrap_err();
        assert!(matches!(err, LocalError::BinaryMissing(_)));
    }

    #[test]
    fn die_with_parent_spawn_and_stop() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30").stdin(Stdio::null());
        let mut child = spawn(cmd, true).expect("spawn sleep");
        assert!(is_alive(child.id()));
        stop_child(&mut child, Duration::from_secs(5)).unwrap();
        assert!(!is_alive(child.id()));
    }
}
