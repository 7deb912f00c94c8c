//! A ZooKeeper for a replicated local cluster: Debian's `zookeeper` package (ZooKeeper 3.8, a
//! Java program) run standalone on a free loopback port, in the cluster's folder.
//!
//! | path                            | what                                                 |
//! |---------------------------------|------------------------------------------------------|
//! | `DIR/zookeeper/zoo.cfg`         | its config: `clientPortAddress=127.0.0.1`, no admin server, `srvr` and `mntr` allowed |
//! | `DIR/zookeeper/data/`           | its snapshots and transaction log (kept by `local down`, as the nodes' data is) |
//! | `DIR/zookeeper/zookeeper.log`   | its stdout and stderr (warnings and errors, through slf4j-simple when installed) |
//! | `DIR/zookeeper/zookeeper.pid`   | its pid, while it runs                               |
//!
//! It is ready when it answers the four-letter word `srvr` with its mode: `ruok` is answered
//! `imok` as soon as it listens, before it serves (a client connecting then is dropped, and
//! 18.16's DDL worker, whose first connection fails so, dies of a segmentation fault in
//! `zkutil::ZooKeeper::createImpl`, taking its server with it). It is stopped like a
//! server (SIGTERM, up to 10 s, SIGKILL), and only after `/proc` shows that the pid runs
//! ZooKeeper's main class with this folder's `zoo.cfg`.

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::LocalError;
use crate::ports::free_ports;
use crate::process::{kill_child, spawn, stop_child, STOP_GRACE};
use crate::procfs::is_alive;

/// The sub-folder of a cluster directory that holds its ZooKeeper.
pub const ZOOKEEPER_DIR: &str = "zookeeper";
/// Where Debian's `zookeeper` package puts ZooKeeper (its manifest names the other jars).
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// A logging backend for ZooKeeper's slf4j, when installed (Debian's `libslf4j-java`).
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";
/// ZooKeeper's standalone entry point.
const MAIN_CLASS: &str = "org.apache.zookeeper.server.ZooKeeperServerMain";
/// Its pid file, in [`ZOOKEEPER_DIR`].
const PID_FILE: &str = "zookeeper.pid";
/// Start attempts when the picked port turns out busy.
const START_ATTEMPTS: u32 = 3;
/// What Java logs when it cannot bind the port.
const ADDR_IN_USE: &str = "Address already in use";
/// Time between two `srvr` probes while it starts.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);

/// Where a local cluster's ZooKeeper is, as recorded in `DIR/cluster.json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ZooKeeperInfo {
    /// Its client port on 127.0.0.1 (what every node's `<zookeeper>` names).
    pub port: u16,
    /// Process id of its JVM.
    pub pid: u32,
    /// `DIR/zookeeper`.
    pub dir: PathBuf,
    /// Set by [`crate::cluster_status`] only: whether it runs and serves (`srvr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<bool>,
}

/// A ZooKeeper started by this crate; stopped when dropped.
#[derive(Debug)]
pub(crate) struct LocalZooKeeper {
    info: ZooKeeperInfo,
    java: PathBuf,
    die_with_parent: bool,
    timeout: Duration,
    child: Option<Child>,
}

impl LocalZooKeeper {
    /// Writes `CLUSTER_DIR/zookeeper/zoo.cfg` for a free port, starts ZooKeeper and waits (up to
    /// `timeout`) until it serves ([`serving`]). A busy port means new ones, up to 3 attempts.
    pub fn start(cluster_dir: &Path, die_with_parent: bool, timeout: Duration) -> Result<Self, LocalError> {
        let java = find_java()?;
        if !Path::new(ZOOKEEPER_JAR).is_file() {
            return Err(LocalError::ZooKeeper(format!(
                "{ZOOKEEPER_JAR} is missing (Debian's zookeeper package); run scripts/install-deps, or start \
                 the cluster without --replicated"
            )));
        }
        let dir = cluster_dir.join(ZOOKEEPER_DIR);
        fs::create_dir_all(dir.join("data"))
            .map_err(|e| LocalError::io(format!("create directory {}", dir.display()), e))?;
        stop_recorded(&dir)?;
        let mut attempt = 1;
        loop {
            let port = free_ports(1)?[0];
            write_config(&dir, port)?;
            let info = ZooKeeperInfo { port, pid: 0, dir: dir.clone(), up: None };
            let mut zk = LocalZooKeeper { info, java: java.clone(), die_with_parent, timeout, child: None };
            match zk.launch() {
                Ok(()) => return Ok(zk),
                Err(LocalError::PortInUse { .. }) if attempt < START_ATTEMPTS => attempt += 1,
                Err(LocalError::PortInUse { ports, .. }) => {
                    return Err(LocalError::PortInUse { ports, attempts: attempt })
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Where it is.
    pub fn info(&self) -> &ZooKeeperInfo {
        &self.info
    }

    /// SIGKILL it now, as a crash would; [`LocalZooKeeper::restart`] starts it again.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = kill_child(&mut c);
        }
    }

    /// Starts it again on its port, with its data (after [`LocalZooKeeper::kill9`]).
    pub fn restart(&mut self) -> Result<(), LocalError> {
        if self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None))) {
            return Err(LocalError::ZooKeeper(format!(
                "ZooKeeper (pid {}) is still running; kill it before restarting it",
                self.info.pid
            )));
        }
        self.child = None;
        self.launch()
    }

    /// Stops it (SIGTERM, up to 10 s, SIGKILL) and removes its pid file.
    pub fn stop(mut self) -> Result<(), LocalError> {
        self.shutdown()
    }

    /// Leaves it running; `Drop` will not stop it.
    pub fn detach(mut self) {
        self.child = None;
    }

    fn shutdown(&mut self) -> Result<(), LocalError> {
        let Some(mut c) = self.child.take() else { return Ok(()) };
        stop_child(&mut c, STOP_GRACE)?;
        remove_pid_file(&self.info.dir)
    }

    /// One start on the configured port: spawn, then `srvr` until it serves, the JVM exits, or
    /// the timeout passes.
    fn launch(&mut self) -> Result<(), LocalError> {
        let log_path = self.info.dir.join("zookeeper.log");
        let mark = log_path.metadata().map_or(0, |m| m.len());
        let cmd = command(&self.java, &self.info.dir, &log_path)?;
        let mut child = spawn(cmd, self.die_with_parent)
            .map_err(|e| LocalError::ZooKeeper(format!("cannot start {}: {e}", self.java.display())))?;
        let new_log = || read_from(&log_path, mark);
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let log = new_log();
                if log.contains(ADDR_IN_USE) {
                    return Err(LocalError::PortInUse { ports: format!("zookeeper={}", self.info.port), attempts: 1 });
                }
                return Err(LocalError::ZooKeeper(format!(
                    "ZooKeeper exited during startup ({status}): {}; see {}",
                    last_line(&log),
                    log_path.display()
                )));
            }
            if serving(self.info.port, Duration::from_millis(500)) {
                break;
            }
            if Instant::now() >= deadline {
                let _ = kill_child(&mut child);
                return Err(LocalError::ZooKeeper(format!(
                    "ZooKeeper did not serve on 127.0.0.1:{} within {:?}: {}; see {}",
                    self.info.port,
                    self.timeout,
                    last_line(&new_log()),
                    log_path.display()
                )));
            }
            thread::sleep(PROBE_INTERVAL);
        }
        self.info.pid = child.id();
        self.child = Some(child);
        let pid_file = self.info.dir.join(PID_FILE);
        fs::write(&pid_file, format!("{}\n", self.info.pid))
            .map_err(|e| LocalError::io(format!("write {}", pid_file.display()), e))
    }
}

impl Drop for LocalZooKeeper {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// `<zookeeper>` for every node: the one local ZooKeeper, and the session timeout (ms).
pub(crate) fn zookeeper_xml(port: u16, session_timeout_ms: u32) -> String {
    format!(
        "  <zookeeper><node><host>127.0.0.1</host><port>{port}</port></node>\
         <session_timeout_ms>{session_timeout_ms}</session_timeout_ms></zookeeper>"
    )
}

/// Stops the ZooKeeper recorded in `zk_dir` (`DIR/zookeeper`), if it runs there. Returns true
/// if it was running.
pub(crate) fn stop_recorded(zk_dir: &Path) -> Result<bool, LocalError> {
    let Some(pid) = fs::read_to_string(zk_dir.join(PID_FILE)).ok().and_then(|t| t.trim().parse::<u32>().ok()) else {
        return Ok(false);
    };
    let mut stopped = false;
    if is_zookeeper_of(pid, zk_dir) {
        stopped = true;
        signal(pid, libc::SIGTERM);
        if !wait_gone(pid, STOP_GRACE) && is_zookeeper_of(pid, zk_dir) {
            signal(pid, libc::SIGKILL);
            if !wait_gone(pid, Duration::from_secs(5)) {
                return Err(LocalError::ZooKeeper(format!("ZooKeeper pid {pid} did not exit after SIGKILL")));
            }
        }
    }
    remove_pid_file(zk_dir)?;
    Ok(stopped)
}

/// True if the ZooKeeper recorded in `zk_dir` runs and serves.
pub(crate) fn is_up(info: &ZooKeeperInfo) -> bool {
    let pid = fs::read_to_string(info.dir.join(PID_FILE)).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(info.pid);
    is_zookeeper_of(pid, &info.dir) && serving(info.port, Duration::from_secs(2))
}

/// True if `pid` is alive and runs ZooKeeper's main class with `zk_dir`'s `zoo.cfg`.
fn is_zookeeper_of(pid: u32, zk_dir: &Path) -> bool {
    if pid == 0 || !is_alive(pid) {
        return false;
    }
    let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let cfg = zk_dir.join("zoo.cfg").display().to_string();
    let args: Vec<&[u8]> = raw.split(|&b| b == 0).collect();
    args.contains(&MAIN_CLASS.as_bytes()) && args.contains(&cfg.as_bytes())
}

/// ZooKeeper's four-letter word `srvr`: true when it answers with its `Mode:` within `timeout`
/// (before it serves it answers "This ZooKeeper instance is not currently serving requests").
pub(crate) fn serving(port: u16, timeout: Duration) -> bool {
    four_letter_word(port, b"srvr", timeout).is_some_and(|a| a.lines().any(|l| l.starts_with("Mode: ")))
}

/// Sends a four-letter word and reads the answer (at most 4 KiB) until ZooKeeper closes.
fn four_letter_word(port: u16, word: &[u8; 4], timeout: Duration) -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    s.write_all(word).ok()?;
    let mut answer = Vec::new();
    s.take(4096).read_to_end(&mut answer).ok()?;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// The config: its data in `zk_dir/data`, on 127.0.0.1 only, no admin HTTP server, ticks of
/// 500 ms (session timeouts from 1 s to 60 s), the four-letter words `srvr` and `mntr`.
fn write_config(zk_dir: &Path, port: u16) -> Result<(), LocalError> {
    let text = format!(
        "# ZooKeeper of a chstorm local cluster (written by `chstorm local up --replicated`)\n\
         tickTime=500\n\
         minSessionTimeout=1000\n\
         maxSessionTimeout=60000\n\
         dataDir={}\n\
         clientPort={port}\n\
         clientPortAddress=127.0.0.1\n\
         maxClientCnxns=0\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=srvr,mntr\n",
        zk_dir.join("data").display()
    );
    let path = zk_dir.join("zoo.cfg");
    fs::write(&path, text).map_err(|e| LocalError::io(format!("write {}", path.display()), e))
}

/// `java ... ZooKeeperServerMain DIR/zoo.cfg`: a small heap and the serial collector (a
/// handful of connections), in its own process group, output appended to `log`.
fn command(java: &Path, zk_dir: &Path, log: &Path) -> Result<Command, LocalError> {
    let out = fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| LocalError::io(format!("open {}", log.display()), e))?;
    let err = out.try_clone().map_err(|e| LocalError::io("duplicate a log file handle", e))?;
    let mut classpath = ZOOKEEPER_JAR.to_string();
    if Path::new(SLF4J_SIMPLE_JAR).is_file() {
        classpath.push(':');
        classpath.push_str(SLF4J_SIMPLE_JAR);
    }
    let mut cmd = Command::new(java);
    cmd.args(["-Xms16m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"])
        .arg("-Djava.awt.headless=true")
        .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(classpath)
        .arg(MAIN_CLASS)
        .arg(zk_dir.join("zoo.cfg"))
        .current_dir(zk_dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    Ok(cmd)
}

/// `$JAVA_HOME/bin/java`, else `java` on `PATH`.
fn find_java() -> Result<PathBuf, LocalError> {
    let home = std::env::var_os("JAVA_HOME").map(|h| PathBuf::from(h).join("bin/java"));
    let on_path =
        std::env::var_os("PATH").iter().flat_map(std::env::split_paths).map(|d| d.join("java")).find(|p| p.is_file());
    home.filter(|p| p.is_file()).or(on_path).ok_or_else(|| {
        LocalError::ZooKeeper(
            "no java on PATH (ZooKeeper is a Java program; Debian's zookeeper package brings one): run \
             scripts/install-deps, or start the cluster without --replicated"
                .into(),
        )
    })
}

fn remove_pid_file(zk_dir: &Path) -> Result<(), LocalError> {
    let path = zk_dir.join(PID_FILE);
    match fs::remove_file(&path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(LocalError::io(format!("remove {}", path.display()), e)),
        _ => Ok(()),
    }
}

fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while is_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
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

/// The text appended to `path` after byte `offset` (at most the last 16 KiB).
fn read_from(path: &Path, offset: u64) -> String {
    let text = fs::read(path).unwrap_or_default();
    let start = (offset as usize).min(text.len()).max(text.len().saturating_sub(16 * 1024));
    String::from_utf8_lossy(&text[start..]).into_owned()
}

/// The last line of `log` that says something went wrong, else its last line.
fn last_line(log: &str) -> String {
    let lines: Vec<&str> = log.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let bad = |l: &&&str| {
        let l = l.to_ascii_lowercase();
        l.contains("error") || l.contains("exception")
    };
    let line = lines.iter().rev().find(bad).or(lines.last()).copied().unwrap_or("nothing was logged");
    line.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_and_xml() {
        let dir = tempfile::tempdir().unwrap();
        write_config(dir.path(), 4321).unwrap();
        let cfg = fs::read_to_string(dir.path().join("zoo.cfg")).unwrap();
        assert!(cfg.contains("clientPort=4321\nclientPortAddress=127.0.0.1\n"), "{cfg}");
        assert!(cfg.contains("admin.enableServer=false") && cfg.contains("4lw.commands.whitelist=srvr"));
        assert_eq!(
            zookeeper_xml(4321, 5000),
            "  <zookeeper><node><host>127.0.0.1</host><port>4321</port></node>\
             <session_timeout_ms>5000</session_timeout_ms></zookeeper>"
        );
    }

    #[test]
    fn nothing_recorded_nothing_stopped() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!stop_recorded(dir.path()).unwrap());
        fs::write(dir.path().join(PID_FILE), format!("{}\n", std::process::id())).unwrap();
        assert!(!stop_recorded(dir.path()).unwrap(), "this process is no ZooKeeper of that folder");
        assert!(!dir.path().join(PID_FILE).exists(), "the stale record is gone");
        assert!(!serving(free_ports(1).unwrap()[0], Duration::from_millis(200)));
    }

    #[test]
    fn log_lines() {
        assert_eq!(last_line("a\nERROR bind failed\nb\n"), "ERROR bind failed");
        assert_eq!(last_line("a\nlast\n"), "last");
        assert_eq!(last_line(""), "nothing was logged");
    }
}
