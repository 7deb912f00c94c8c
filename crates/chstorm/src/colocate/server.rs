//! The server under test: a local one started through the harness when `--url` is not given,
//! or the given URL; and the server's process on this machine, for its CPU share.

use crate::cli::BenchArgs;
use anyhow::Context;
use chstorm_isolate::procfs;
use chstorm_local::{LocalServer, ServerSpec};
use chstorm_proto::Target;

/// The server of a colocate run. A local server is stopped, and its folder deleted, on drop.
pub struct Server {
    /// The local server, when chstorm started one (dropped before `dir`).
    local: Option<LocalServer>,
    dir: Option<tempfile::TempDir>,
    /// The server's process on this machine, if found.
    pub pid: Option<u32>,
    /// How `pid` was found, or `n/a: why not`.
    pub cpu_source: String,
}

impl Server {
    /// Starts a local server if `args.url` is None (and points `args.url` at its native port);
    /// otherwise looks for the URL's server among this machine's processes.
    pub fn resolve(args: &mut BenchArgs) -> anyhow::Result<Server> {
        if let Some(url) = &args.url {
            let (pid, cpu_source) = find_server(url);
            return Ok(Server { local: None, dir: None, pid, cpu_source });
        }
        let dir = tempfile::Builder::new()
            .prefix("chstorm-colocate-")
            .tempdir()
            .context("cannot create a temporary folder for the local server")?;
        let mut spec = ServerSpec::new(dir.path());
        spec.die_with_parent = true;
        if !args.quiet {
            eprintln!("chstorm colocate: starting a local ClickHouse server in {}", dir.path().display());
        }
        let server = LocalServer::start(spec).context("cannot start the local server (give --url to use another)")?;
        args.url = Some(server.native_url().to_string());
        let pid = server.pid();
        Ok(Server {
            local: Some(server),
            dir: Some(dir),
            pid: Some(pid),
            cpu_source: format!("local server, pid {pid}"),
        })
    }

    /// True when chstorm started the server.
    pub fn is_local(&self) -> bool {
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

/// The clickhouse-server process serving `url` on this machine: the one listening on its port,
/// else (loopback URL) the only one running; otherwise none, with the reason.
fn find_server(url: &str) -> (Option<u32>, String) {
    let Ok(target) = Target::parse(url) else { return (None, "n/a: the URL does not parse".into()) };
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
