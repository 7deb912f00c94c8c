//! Per-process shared servers for tests.
//!
//! The first call starts a server in a fresh temporary directory (prefix
//! `chstorm-local-`) with `die_with_parent: true`, so the kernel SIGKILLs it
//! when the process dies, even after a panic or a crash. On a normal exit
//! (including the test harness exiting after failed tests) an `atexit` hook
//! also kills it, reaps it, and deletes its directory.

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
            at_exit_cleanup(server.pid(), dir);
            Ok(server)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// Servers and directories to clean up at exit.
static CLEANUP: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

fn at_exit_cleanup(pid: u32, dir: PathBuf) {
    static REGISTER: Once = Once::new();
    CLEANUP.lock().unwrap_or_else(|e| e.into_inner()).push((pid, dir));
    REGISTER.call_once(|| {
        // SAFETY: registers a plain extern "C" function; failure only loses the cleanup.
        unsafe { libc::atexit(cleanup) };
    });
}

extern "C" fn cleanup() {
    let Ok(mut list) = CLEANUP.try_lock() else { return };
    for (pid, dir) in list.drain(..) {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
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
