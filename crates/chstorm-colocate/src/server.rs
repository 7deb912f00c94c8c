//! The server under test: a local one started through the harness when `--url` is not given,
//! or the given URL; and the server's process on this machine, for its CPU share.

use crate::error::ColocateError;
use crate::Observer;
use chstorm_isolate::procfs;
use chstorm_local::{LocalServer, ServerSpec};
use chstorm_proto::Target;

/// The server of a colocate run. A local server is stopped, and its folder deleted, on drop.
pub(crate) struct Server {
    /// The local server, when chstorm started one (dropped before `dir`).
    local: Option<LocalServer>,
    dir: Option<tempfile::TempDir>,
    /// The server's process on this machine, if found.
    pub(crate) pid: Option<u32>,
    /// How `pid` was found, or `n/a: why not`.
    pub(crate) cpu_source: String,
}

impl Server {
    /// Looks for `target`'s server among this machine's processes.
    pub(crate) fn find(target: &Target) -> Server {
        let (pid, cpu_source) = find_server(target);
        Server { local: None, dir: None, pid, cpu_source }
    }

    /// Starts a local server in a temporary folder.
    pub(crate) fn start_local(observer: &mut dyn Observer) -> Result<Server, ColocateError> {
        let dir = tempfile::Builder::new().prefix("chstorm-colocate-").tempdir().map_err(ColocateError::TempDir)?;
        let mut spec = ServerSpec::new(dir.path());
        spec.die_with_parent = true;
        observer.note(&format!("starting a local ClickHouse server in {}", dir.path().display()));
        let server = LocalServer::start(spec).map_err(ColocateError::LocalServer)?;
        let pid = server.pid();
        Ok(Server {
            local: Some(server),
            dir: Some(dir),
            pid: Some(pid),
            cpu_source: format!("local server, pid {pid}"),
        })
    }

    /// The local server's native URL (empty for a server chstorm did not start).
    pub(crate) fn url(&self) -> &str {
        self.local.as_ref().map_or("", LocalServer::native_url)
    }

    /// True when chstorm started the server.
    pub(crate) fn is_local(&self) -> bool {
        self.local.is_some()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.local.take() {
            let _ = s.stop();
        }
        drop(self.dir.take());
    }
}

/// The clickhouse-server process serving `target` on this machine: the one listening on its
/// port, else (loopback URL) the only one running; otherwise none, with the reason.
fn find_server(target: &Target) -> (Option<u32>, String) {
    let candidates = procfs::clickhouse_servers();
    if let Some(&pid) = candidates.iter().find(|&&p| procfs::listens_on(p, target.port)) {
        return (Some(pid), format!("clickhouse-server pid {pid}, listening on port {}", target.port));
    }
    match candidates.as_slice() {
        [pid] if target.is_loopback() => {
            (Some(*pid), format!("clickhouse-server pid {pid}, the only one on this machine"))
        }
        [] => (None, "n/a: no clickhouse-server process on this machine".into()),
        _ => (None, format!("n/a: no clickhouse-server on this machine listens on port {}", target.port)),
    }
}
