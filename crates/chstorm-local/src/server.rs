//! [`ServerSpec`], [`ServerInfo`] and [`LocalServer`]: one clickhouse-server
//! process, owned by the value that started it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::thread;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{self, ConfigParams, Ports};
use crate::error::LocalError;
use crate::launch::launch;
use crate::ports::free_ports;
use crate::process::{kill_child, resolve_binary, stop_child, STOP_GRACE};
use crate::procfs::is_server_of;
use crate::tls::{self, TlsFiles};
use crate::users::ExtraUsersXml;
use crate::{http, state};

/// Start attempts when some port is picked automatically and turns out busy.
const START_ATTEMPTS: u32 = 3;
/// Attempts of [`LocalServer::restart`] on its fixed ports, and the pause between them.
const RESTART_ATTEMPTS: u32 = 3;
const RESTART_PAUSE: Duration = Duration::from_millis(500);

/// What server to start. Build it with [`ServerSpec::new`] and change fields.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    /// Working directory (config, logs, data, TLS files); created if missing.
    pub dir: PathBuf,
    /// HTTP port on 127.0.0.1. `None` (default): a free port.
    pub http_port: Option<u16>,
    /// Native TCP port. `None` (default): a free port.
    pub tcp_port: Option<u16>,
    /// Also open `https_port` and `tcp_port_secure` with a self-signed
    /// certificate (see [`ServerInfo::ca_cert`]). Default false.
    pub tls: bool,
    /// HTTPS port when `tls`. `None` (default): a free port.
    pub https_port: Option<u16>,
    /// Native TLS port when `tls`. `None` (default): a free port.
    pub tcp_tls_port: Option<u16>,
    /// HTTP keep-alive timeout in seconds. Default 3: what the 18.16 Debian
    /// package's config ships, and the gateway tests rely on it.
    pub keep_alive_timeout_s: u32,
    /// `max_concurrent_queries`. Default 1000.
    pub max_concurrent_queries: u32,
    /// Raw XML inserted inside `<yandex>` of `config.xml` (e.g. `<remote_servers>`). Default none.
    pub extra_config_xml: Option<String>,
    /// Raw XML inserted inside `<profiles><default>` of `users.xml`. Default none.
    pub extra_profile_xml: Option<String>,
    /// Users, profiles and quotas added to `users.xml` beside `default`. Default none.
    pub extra_users: Option<ExtraUsersXml>,
    /// Server binary. `None` (default): `clickhouse-server` on `PATH`, else
    /// `/usr/sbin/clickhouse-server`.
    pub binary: Option<PathBuf>,
    /// How long to wait for `/ping` to answer after spawning. Default 30 s.
    pub startup_timeout: Duration,
    /// Kill the server (SIGKILL) when this process exits, even on a panic or
    /// a crash. Default false (`chstorm local up` must outlive the CLI);
    /// tests set it to true.
    pub die_with_parent: bool,
}

impl ServerSpec {
    /// A spec for `dir` with all defaults (free ports, no TLS, keep-alive 3 s,
    /// 1000 concurrent queries, 30 s startup timeout, not tied to this process).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ServerSpec {
            dir: dir.into(),
            http_port: None,
            tcp_port: None,
            tls: false,
            https_port: None,
            tcp_tls_port: None,
            keep_alive_timeout_s: 3,
            max_concurrent_queries: 1000,
            extra_config_xml: None,
            extra_profile_xml: None,
            extra_users: None,
            binary: None,
            startup_timeout: Duration::from_secs(30),
            die_with_parent: false,
        }
    }

    /// True if any port has to be picked automatically.
    fn picks_ports(&self) -> bool {
        self.http_port.is_none()
            || self.tcp_port.is_none()
            || (self.tls && (self.https_port.is_none() || self.tcp_tls_port.is_none()))
    }

    /// The given ports, with free ones for the rest.
    fn choose_ports(&self) -> Result<Ports, LocalError> {
        let mut free = free_ports(4)?.into_iter();
        let mut pick = |given: Option<u16>| given.or_else(|| free.next()).unwrap_or(0);
        Ok(Ports {
            http: pick(self.http_port),
            tcp: pick(self.tcp_port),
            https: self.tls.then(|| pick(self.https_port)),
            tcp_tls: self.tls.then(|| pick(self.tcp_tls_port)),
        })
    }
}

/// Where a running server is, as recorded in `DIR/chstorm-local.json`.
/// All URLs use 127.0.0.1.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// Process id of clickhouse-server.
    pub pid: u32,
    /// Canonical working directory.
    pub dir: PathBuf,
    /// `http://127.0.0.1:PORT`
    pub http_url: String,
    /// `clickhouse://127.0.0.1:PORT`
    pub native_url: String,
    /// `https://127.0.0.1:PORT` when TLS is on.
    pub https_url: Option<String>,
    /// `clickhouses://127.0.0.1:PORT` when TLS is on.
    pub native_tls_url: Option<String>,
    /// PEM certificate to trust for the TLS ports (self-signed, SANs
    /// `localhost` and `127.0.0.1`) when TLS is on.
    pub ca_cert: Option<PathBuf>,
    /// HTTP port.
    pub http_port: u16,
    /// Native TCP port.
    pub tcp_port: u16,
    /// HTTPS port when TLS is on.
    #[serde(default)]
    pub https_port: Option<u16>,
    /// Native TLS port when TLS is on.
    #[serde(default)]
    pub tcp_tls_port: Option<u16>,
}

impl ServerInfo {
    fn new(pid: u32, dir: &Path, ports: Ports, ca_cert: Option<PathBuf>) -> Self {
        let url = |scheme: &str, port: u16| format!("{scheme}://127.0.0.1:{port}");
        ServerInfo {
            pid,
            dir: dir.to_path_buf(),
            http_url: url("http", ports.http),
            native_url: url("clickhouse", ports.tcp),
            https_url: ports.https.map(|p| url("https", p)),
            native_tls_url: ports.tcp_tls.map(|p| url("clickhouses", p)),
            ca_cert,
            http_port: ports.http,
            tcp_port: ports.tcp,
            https_port: ports.https,
            tcp_tls_port: ports.tcp_tls,
        }
    }

    fn ports(&self) -> Ports {
        Ports { http: self.http_port, tcp: self.tcp_port, https: self.https_port, tcp_tls: self.tcp_tls_port }
    }
}

/// A clickhouse-server process started by this crate.
///
/// Dropping it stops the server (SIGTERM, up to 10 s, SIGKILL, reap) unless
/// it was [`detach`](LocalServer::detach)ed or already stopped.
#[derive(Debug)]
pub struct LocalServer {
    info: ServerInfo,
    binary: PathBuf,
    die_with_parent: bool,
    startup_timeout: Duration,
    child: Option<Child>,
}

impl LocalServer {
    /// Writes the configs, spawns the server, waits for `/ping`, and records
    /// it in `DIR/chstorm-local.json` and `DIR/clickhouse-server.pid`.
    /// Automatically picked ports that turn out busy are re-picked, up to 3 attempts.
    pub fn start(spec: ServerSpec) -> Result<LocalServer, LocalError> {
        let binary = resolve_binary(spec.binary.as_deref())?;
        fs::create_dir_all(&spec.dir)
            .map_err(|e| LocalError::io(format!("create directory {}", spec.dir.display()), e))?;
        let dir = fs::canonicalize(&spec.dir)
            .map_err(|e| LocalError::io(format!("resolve directory {}", spec.dir.display()), e))?;
        if let Some(pid) = state::recorded_pid(&dir)? {
            if is_server_of(pid, &dir) {
                return Err(LocalError::AlreadyRunning { pid, dir });
            }
        }
        config::create_dirs(&dir)?;
        let tls_files = if spec.tls { Some(tls::write_self_signed(&dir)?) } else { None };
        let attempts = if spec.picks_ports() { START_ATTEMPTS } else { 1 };
        let mut attempt = 1;
        let (child, ports) = loop {
            let ports = spec.choose_ports()?;
            write_configs(&spec, &dir, ports, tls_files.as_ref())?;
            match launch(&binary, &dir, ports, spec.die_with_parent, spec.startup_timeout) {
                Ok(child) => break (child, ports),
                Err(LocalError::PortInUse { ports, .. }) if attempt >= attempts => {
                    return Err(LocalError::PortInUse { ports, attempts })
                }
                Err(LocalError::PortInUse { .. }) => attempt += 1,
                Err(e) => return Err(e),
            }
        };
        let info = ServerInfo::new(child.id(), &dir, ports, tls_files.map(|t| t.cert));
        let server = LocalServer {
            info,
            binary,
            die_with_parent: spec.die_with_parent,
            startup_timeout: spec.startup_timeout,
            child: Some(child),
        };
        state::write(&dir, &server.info)?; // on error, Drop stops the server
        Ok(server)
    }

    /// Where the server is.
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    /// `http://127.0.0.1:PORT`
    pub fn http_url(&self) -> &str {
        &self.info.http_url
    }

    /// `clickhouse://127.0.0.1:PORT`
    pub fn native_url(&self) -> &str {
        &self.info.native_url
    }

    /// Process id (of the latest start, even if it was killed since).
    pub fn pid(&self) -> u32 {
        self.info.pid
    }

    /// Runs `sql` with an HTTP POST to [`http_url`](Self::http_url) and returns
    /// the body. A non-200 answer is [`LocalError::Query`] with the body's
    /// first line. Timeout 60 s.
    pub fn query(&self, sql: &str) -> Result<String, LocalError> {
        http::post_query(&self.info.http_url, sql)
    }

    /// SIGKILL the server now and reap it, as a crash would. The record files
    /// stay behind. Later `stop()` and `Drop` do nothing; `restart()` works.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill_child(&mut child);
        }
    }

    /// Stops the server (SIGTERM, up to 10 s, SIGKILL, reap) and removes the record files.
    pub fn stop(mut self) -> Result<(), LocalError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), LocalError> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        stop_child(&mut child, STOP_GRACE)?;
        state::remove(&self.info.dir)
    }

    /// Starts the server again in the same directory on the same ports (after
    /// [`kill9`](Self::kill9) or a crash) and waits for `/ping`. The config
    /// files on disk are reused. Busy ports are retried 3 times, 0.5 s apart.
    pub fn restart(&mut self) -> Result<(), LocalError> {
        if let Some(child) = self.child.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                return Err(LocalError::StillRunning(child.id()));
            }
        }
        self.child = None;
        let mut attempt = 1;
        let child = loop {
            let r = launch(&self.binary, &self.info.dir, self.info.ports(), self.die_with_parent, self.startup_timeout);
            match r {
                Ok(child) => break child,
                Err(LocalError::PortInUse { ports, .. }) if attempt >= RESTART_ATTEMPTS => {
                    return Err(LocalError::PortInUse { ports, attempts: attempt })
                }
                Err(LocalError::PortInUse { .. }) => {
                    attempt += 1;
                    thread::sleep(RESTART_PAUSE);
                }
                Err(e) => return Err(e),
            }
        };
        self.info.pid = child.id();
        self.child = Some(child);
        state::write(&self.info.dir, &self.info)
    }

    /// Leaves the server running and returns its info; `Drop` will not stop it.
    /// Use [`down`](crate::down) to stop it later.
    pub fn detach(mut self) -> ServerInfo {
        self.child = None;
        self.info.clone()
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn write_configs(spec: &ServerSpec, dir: &Path, ports: Ports, tls: Option<&TlsFiles>) -> Result<(), LocalError> {
    config::write_configs(&ConfigParams {
        dir,
        ports,
        tls: tls.map(|t| (t.cert.as_path(), t.key.as_path())),
        keep_alive_timeout_s: spec.keep_alive_timeout_s,
        max_concurrent_queries: spec.max_concurrent_queries,
        extra_config_xml: spec.extra_config_xml.as_deref(),
        extra_profile_xml: spec.extra_profile_xml.as_deref(),
        extra_users: spec.extra_users.as_ref(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_defaults() {
        let s = ServerSpec::new("/x");
        assert_eq!(s.keep_alive_timeout_s, 3);
        assert_eq!(s.max_concurrent_queries, 1000);
        assert_eq!(s.startup_timeout, Duration::from_secs(30));
        assert!(!s.tls && !s.die_with_parent && s.picks_ports());
    }

    #[test]
    fn given_ports_are_kept() {
        let mut s = ServerSpec::new("/x");
        s.http_port = Some(1);
        s.tcp_port = Some(2);
        assert!(!s.picks_ports());
        assert_eq!(s.choose_ports().unwrap(), Ports { http: 1, tcp: 2, https: None, tcp_tls: None });
        s.tls = true;
        s.https_port = Some(3);
        assert!(s.picks_ports());
        let p = s.choose_ports().unwrap();
        assert_eq!((p.https, p.tcp_tls.is_some()), (Some(3), true));
    }

    #[test]
    fn info_urls() {
        let ports = Ports { http: 1, tcp: 2, https: Some(3), tcp_tls: Some(4) };
        let i = ServerInfo::new(7, Path::new("/d"), ports, Some("/d/tls/server.crt".into()));
        assert_eq!(i.http_url, "http://127.0.0.1:1");
        assert_eq!(i.native_url, "clickhouse://127.0.0.1:2");
        assert_eq!(i.https_url.as_deref(), Some("https://127.0.0.1:3"));
        assert_eq!(i.native_tls_url.as_deref(), Some("clickhouses://127.0.0.1:4"));
        assert_eq!(i.ports(), ports);
        let back: ServerInfo = serde_json::from_str(&serde_json::to_string(&i).unwrap()).unwrap();
        assert_eq!(back, i);
    }
}
