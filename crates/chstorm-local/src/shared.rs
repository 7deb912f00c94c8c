//! Per-process shared servers for tests.
//!
//! The first call starts a server in a fresh temporary directory (prefix
//! `chstorm-local-`) with `die_with_parent: true`, so the kernel SIGKILLs it
//! when the process dies, even after a panic or a crash. On a normal exit
//! (including the test harness exiting after failed tests) an `atexit` hook
//! also kills it, reaps it, and deletes its directory.
//!
//! [`kill_and_remove_at_exit`] gives the same end to anything else a test
//! keeps in a `static` (never dropped): a shared cluster's servers and folder.

use std::path::PathBuf;
use std::sync::{Mutex, Once, OnceLock};

use crate::error::LocalError;
use crate::{LocalServer, ServerSpec};

type Shared = OnceLock<Result<LocalServer, LocalError>>;

static PLAIN: Shared = OnceLock::new();
static TLS: Shared = OnceLock::new();

/// The plain (no TLS) server shared by all tests of this process, started on
/// first use.
///
/// # Panics
/// If the server cannot be started; the message says why. Use
/// [`try_shared_server`] to handle that instead.
pub fn shared_server() -> &'static LocalServer {
    try_shared_server().unwrap_or_else(|e| panic!("chstorm-local: shared server: {e}"))
}

/// Like [`shared_server`], with TLS on (see [`ServerInfo::ca_cert`](crate::ServerInfo::ca_cert)).
///
/// # Panics
/// If the server cannot be started. Use [`try_shared_tls_server`] to handle that instead.
pub fn shared_tls_server() -> &'static LocalServer {
    try_shared_tls_server().unwrap_or_else(|e| panic!("chstorm-local: shared TLS server: {e}"))
}

/// [`shared_server`] without the panic. A failed start is remembered and
/// returned to every later caller.
pub fn try_shared_server() -> Result<&'static LocalServer, &'static LocalError> {
    PLAIN.get_or_init(|| start_shared(false)).as_ref()
}

/// [`shared_tls_server`] without the panic.
pub fn try_shared_tls_server() -> Result<&'static LocalServer, &'static LocalError> {
    TLS.get_or_init(|| start_shared(true)).as_ref()
}

fn start_shared(tls: bool) -> Result<LocalServer, LocalError> {
    let dir = tempfile::Builder::new()
        .prefix("chstorm-local-")
        .tempdir()
        .map_err(|e| LocalError::io("create a temporary directory", e))?
        .keep();
    let mut spec = ServerSpec::new(&dir);
    spec.tls = tls;
    spec.die_with_parent = true;
    match LocalServer::start(spec) {
        Ok(server) => {
            kill_and_remove_at_exit(vec![server.pid()], dir);
            Ok(server)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// Servers and directories to clean up at exit.
static CLEANUP: Mutex<Vec<(Vec<u32>, PathBuf)>> = Mutex::new(Vec::new());

/// At the process's normal exit (the test harness's too, after failed tests),
/// SIGKILLs and reaps `pids` (this process's children) and deletes `dir`.
pub fn kill_and_remove_at_exit(pids: Vec<u32>, dir: PathBuf) {
    static REGISTER: Once = Once::new();
    CLEANUP.lock().unwrap_or_else(|e| e.into_inner()).push((pids, dir));
    REGISTER.call_once(|| {
        // SAFETY: registers a plain extern "C" function; failure only loses the cleanup.
        unsafe { libc::atexit(cleanup) };
    });
}

extern "C" fn cleanup() {
    let Ok(mut list) = CLEANUP.try_lock() else { return };
    for (pids, dir) in list.drain(..) {
        for pid in pids.into_iter().filter_map(|p| libc::pid_t::try_from(p).ok()) {
            // SAFETY: plain syscalls on our own child; waitpid reaps it so the
            // data directory is no longer in use when we delete it.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    /// The child half of the test below (it does nothing unless that test starts it): registers
    /// a child of its own and a folder, and exits.
    #[test]
    #[allow(clippy::zombie_processes)] // the exit hook under test reaps it
    fn exit_child() {
        let Ok(dir) = std::env::var("CHSTORM_LOCAL_EXIT_DIR") else { return };
        let sleeper = Command::new("sleep").arg("60").stdout(std::process::Stdio::null()).spawn().unwrap();
        println!("sleeper={}", sleeper.id());
        super::kill_and_remove_at_exit(vec![sleeper.id()], dir.into());
    }

    #[test]
    fn at_exit_the_registered_children_are_killed_and_the_folder_removed() {
        let dir = tempfile::tempdir().unwrap().keep();
        std::fs::write(dir.join("data"), "x").unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "shared::tests::exit_child", "--test-threads", "1", "--nocapture"])
            .env("CHSTORM_LOCAL_EXIT_DIR", &dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        let gone = !dir.exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(gone, "the folder is still there");
        let pid = stdout.split("sleeper=").nth(1).and_then(|r| r.split_whitespace().next()).expect("the child ran");
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "sleep" {
            let _ = Command::new("kill").args(["-9", pid]).status();
            panic!("the child's child was still running");
        }
    }
}
