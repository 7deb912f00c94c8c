//! A local cluster: `shards x replicas` clickhouse-server processes on
//! loopback ports, all with the same `<remote_servers>` cluster
//! [`CLUSTER_NAME`] (`storm`), plus a gateway config for them.
//!
//! Layout of a cluster directory `DIR`:
//!
//! | path                 | what                                                   |
//! |----------------------|--------------------------------------------------------|
//! | `DIR/s{S}r{R}/`      | node of shard S, replica R (1-based): a server directory as for [`LocalServer`] |
//! | `DIR/cluster.json`   | the [`Topology`], written once every node answers `/ping` |
//! | `DIR/gateway.yaml`   | a gateway config for the cluster (`docs/gateway.example.yaml` format), mode 0600: it holds the server users' passwords |
//! | `DIR/zookeeper/`     | a replicated cluster's ZooKeeper ([`crate::zookeeper`]) |
//!
//! Every node's `users.xml` has the server users the gateway users run as (`crate::users`).
//!
//! Two layouts:
//!
//! * **replicated** ([`ClusterSpec::replicated`], `chstorm local up --replicated`): a ZooKeeper
//!   on a free loopback port, started first and stopped last; every node names it in
//!   `<zookeeper>`, has its own interserver port for fetching parts and the `ON CLUSTER` DDL
//!   queue, and every shard has `internal_replication` true: `Replicated*MergeTree` tables
//!   keep the replicas of a shard in step, as a production cluster does.
//! * **not replicated** (the default): no ZooKeeper; every shard has `internal_replication`
//!   false, so an INSERT through a Distributed table writes each row to every replica of its
//!   shard itself, and each replica's table is a plain MergeTree of its own.

use std::fs;
use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::LocalError;
use crate::http::ping;
use crate::ports::free_ports;
use crate::process::{resolve_binary, stop_pid, STOP_GRACE};
use crate::procfs::is_server_of;
use crate::remote_servers::{gateway_yaml, macros_xml, remote_servers_xml, replication_xml, NodePorts};
use crate::users::{make_logins, users_xml, ServerLogin};
use crate::zookeeper::{self, zookeeper_xml, LocalZooKeeper, ZooKeeperInfo, ZOOKEEPER_DIR};
use crate::{state, LocalServer, ServerSpec};

/// Name of the cluster in `<remote_servers>` and in the gateway config.
pub const CLUSTER_NAME: &str = "storm";
/// File name of the topology record in a cluster directory.
pub const TOPOLOGY_FILE: &str = "cluster.json";
/// File name of the generated gateway config in a cluster directory.
pub const GATEWAY_CONFIG_FILE: &str = "gateway.yaml";
/// Most nodes a cluster may have.
pub const MAX_NODES: usize = 64;
/// Whole-cluster start attempts when an automatically picked port turns out busy.
const START_ATTEMPTS: u32 = 3;
/// Timeout of the `/ping` that [`cluster_status`] sends to each node.
const STATUS_PING_TIMEOUT: Duration = Duration::from_secs(2);
/// The ZooKeeper session timeout of every node of a replicated cluster: 6 s. A node killed
/// with SIGKILL holds its replicas' `is_active` nodes this long, and a node restarted sooner
/// waits for them to go before its replicas rejoin (18.16 answers `absolute_delay` = the
/// current time meanwhile: never caught up). A node stopped with SIGSTOP for 3 s (the hang
/// tests) keeps its session: its client pings every third of the timeout.
pub const ZOOKEEPER_SESSION_TIMEOUT_MS: u32 = 6_000;
/// How long a node of a replicated cluster may take to reach ZooKeeper after it started.
const ZOOKEEPER_REACH: Duration = Duration::from_secs(15);

/// What cluster to start. Build it with [`ClusterSpec::new`] and change fields.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// Cluster directory; each node lives in `DIR/s{shard}r{replica}/`. Created if missing.
    pub dir: PathBuf,
    /// Number of shards, at least 1.
    pub shards: usize,
    /// Replicas per shard, at least 1. `shards * replicas` is at most [`MAX_NODES`].
    pub replicas: usize,
    /// Port the gateway config listens on. `None` (default): a free port.
    /// The gateway is not started; the port is only written into `DIR/gateway.yaml`.
    pub gateway_port: Option<u16>,
    /// Kill every node (SIGKILL) when this process exits. Default false; tests set true.
    pub die_with_parent: bool,
    /// Server binary, as [`ServerSpec::binary`]. Default: search `PATH`.
    pub binary: Option<PathBuf>,
    /// Per-node startup timeout. Default 30 s (nodes start in parallel).
    pub startup_timeout: Duration,
    /// Per-node HTTP keep-alive timeout in seconds. Default 3.
    pub keep_alive_timeout_s: u32,
    /// Per-node `max_concurrent_queries`. Default 1000.
    pub max_concurrent_queries: u32,
    /// The replicated layout: a ZooKeeper in `DIR/zookeeper/`, `<zookeeper>`, interserver
    /// ports and the `ON CLUSTER` DDL queue on every node, `internal_replication` true. Default
    /// false: no ZooKeeper, `internal_replication` false (see the module doc).
    pub replicated: bool,
}

impl ClusterSpec {
    /// A spec with all defaults (free ports, 30 s startup timeout, not tied to this process).
    pub fn new(dir: impl Into<PathBuf>, shards: usize, replicas: usize) -> Self {
        ClusterSpec {
            dir: dir.into(),
            shards,
            replicas,
            gateway_port: None,
            die_with_parent: false,
            binary: None,
            startup_timeout: Duration::from_secs(30),
            keep_alive_timeout_s: 3,
            max_concurrent_queries: 1000,
            replicated: false,
        }
    }

    fn validate(&self) -> Result<(), LocalError> {
        if self.shards == 0 {
            return Err(LocalError::InvalidCluster("a cluster needs at least 1 shard (--shards 0 given)".into()));
        }
        if self.replicas == 0 {
            return Err(LocalError::InvalidCluster(
                "a cluster needs at least 1 replica per shard (--replicas 0 given)".into(),
            ));
        }
        match self.shards.checked_mul(self.replicas) {
            Some(n) if n <= MAX_NODES => Ok(()),
            _ => Err(LocalError::InvalidCluster(format!(
                "{} shards x {} replicas is more than {MAX_NODES} servers; ask for fewer",
                self.shards, self.replicas
            ))),
        }
    }
}

/// One node of a cluster, as recorded in `DIR/cluster.json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// 1-based shard number.
    pub shard: usize,
    /// 1-based replica number within the shard.
    pub replica: usize,
    /// `http://127.0.0.1:PORT`
    pub http_url: String,
    /// `clickhouse://127.0.0.1:PORT`
    pub native_url: String,
    /// Process id of the node's clickhouse-server.
    pub pid: u32,
    /// The node's canonical server directory, `DIR/s{shard}r{replica}`.
    pub dir: PathBuf,
    /// HTTP port.
    pub http_port: u16,
    /// Native TCP port (the one listed in `<remote_servers>`).
    pub tcp_port: u16,
    /// The port other replicas fetch its parts from (`interserver_http_port`); replicated
    /// clusters only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interserver_port: Option<u16>,
    /// Set by [`cluster_status`] only: whether the node is running and answers `/ping`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<bool>,
}

/// Where everything of a cluster is; serialised to `DIR/cluster.json` and
/// printed by `chstorm local up --json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// The `<remote_servers>` cluster name, [`CLUSTER_NAME`].
    pub cluster: String,
    /// Number of shards.
    pub shards: usize,
    /// Replicas per shard.
    pub replicas: usize,
    /// Every node, shard-major: s1r1, s1r2, ..., s2r1, ...
    pub nodes: Vec<NodeInfo>,
    /// `DIR/gateway.yaml`
    pub gateway_config: PathBuf,
    /// `http://127.0.0.1:PORT`, where a gateway started with `gateway_config` listens.
    pub gateway_url: String,
    /// `clickhouse://127.0.0.1:PORT`, where that gateway speaks the native protocol
    /// (`listen_native`). Empty in a `cluster.json` written before it existed.
    #[serde(default)]
    pub gateway_native_url: String,
    /// The ZooKeeper of a replicated cluster; absent for the non-replicated layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zookeeper: Option<ZooKeeperInfo>,
}

impl Topology {
    /// Reads a topology from `path`: a `cluster.json` file, or a cluster
    /// directory holding one.
    pub fn read(path: &Path) -> Result<Topology, LocalError> {
        let file = if path.is_dir() { path.join(TOPOLOGY_FILE) } else { path.to_path_buf() };
        let text = fs::read_to_string(&file).map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                LocalError::io(
                    format!(
                        "read {} (no local cluster there; start one with `chstorm local up --shards S --replicas R`)",
                        file.display()
                    ),
                    e,
                )
            } else {
                LocalError::io(format!("read {}", file.display()), e)
            }
        })?;
        serde_json::from_str(&text).map_err(|e| LocalError::InfoFile { path: file, detail: e.to_string() })
    }

    /// The node of `shard` and `replica` (1-based), if there is one.
    pub fn node(&self, shard: usize, replica: usize) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.shard == shard && n.replica == replica)
    }

    /// The HTTP URLs of each shard's replicas, shard by shard.
    pub fn shard_http_urls(&self) -> Vec<Vec<String>> {
        (1..=self.shards)
            .map(|s| self.nodes.iter().filter(|n| n.shard == s).map(|n| n.http_url.clone()).collect())
            .collect()
    }

    /// True if [`cluster_status`] found every node up (and the ZooKeeper, for a replicated one).
    pub fn all_up(&self) -> bool {
        self.nodes.iter().all(|n| n.up == Some(true)) && self.zookeeper.as_ref().is_none_or(|z| z.up != Some(false))
    }

    /// True for the replicated layout (a cluster with a ZooKeeper).
    pub fn replicated(&self) -> bool {
        self.zookeeper.is_some()
    }
}

/// A running local cluster, owned by the value that started it.
///
/// Dropping it stops every node (in parallel: SIGTERM, up to 10 s, SIGKILL)
/// and removes `DIR/cluster.json`, unless it was [`detach`](LocalCluster::detach)ed.
#[derive(Debug)]
pub struct LocalCluster {
    nodes: Vec<LocalServer>,
    zookeeper: Option<LocalZooKeeper>,
    topology: Topology,
    logins: Vec<ServerLogin>,
    dir: PathBuf,
    detached: bool,
}

impl LocalCluster {
    /// Picks every node's ports, writes every node's config (all with the same
    /// `<remote_servers>`), starts the nodes in parallel, waits until each
    /// answers `/ping`, then writes `DIR/gateway.yaml` and `DIR/cluster.json`.
    /// A replicated cluster starts its ZooKeeper first and waits until every node reaches it.
    /// If an automatically picked port turns out busy, the whole cluster is
    /// started again on new ports, up to 3 attempts. On any error the nodes
    /// already started (and the ZooKeeper) are stopped.
    pub fn start(spec: ClusterSpec) -> Result<LocalCluster, LocalError> {
        spec.validate()?;
        let binary = resolve_binary(spec.binary.as_deref())?;
        fs::create_dir_all(&spec.dir)
            .map_err(|e| LocalError::io(format!("create directory {}", spec.dir.display()), e))?;
        let dir = fs::canonicalize(&spec.dir)
            .map_err(|e| LocalError::io(format!("resolve directory {}", spec.dir.display()), e))?;
        refuse_if_running(&dir)?;
        let (gateway_port, gateway_native_port) = match spec.gateway_port {
            Some(p) => {
                check_free(p)?;
                let native = free_ports(2)?.into_iter().find(|n| *n != p).unwrap_or(0);
                (p, native)
            }
            None => {
                let free = free_ports(2)?;
                (free[0], free[1])
            }
        };
        let logins = make_logins()?;
        let zk = match spec.replicated {
            true => Some(LocalZooKeeper::start(&dir, spec.die_with_parent, spec.startup_timeout)?),
            false => None,
        };
        let zk_port = zk.as_ref().map(|z| z.info().port);
        let mut attempt = 1;
        let (nodes, ports) = loop {
            let ports = pick_ports(spec.shards, spec.replicas, spec.replicated)?;
            match start_nodes(&spec, &dir, &binary, &ports, &logins, zk_port) {
                Ok(nodes) => break (nodes, ports),
                Err(e) if is_port_in_use(&e) && attempt < START_ATTEMPTS => attempt += 1,
                Err(e) => return Err(with_attempts(e, attempt)),
            }
        };
        let gateway_config = dir.join(GATEWAY_CONFIG_FILE);
        let topology = Topology {
            cluster: CLUSTER_NAME.to_string(),
            shards: spec.shards,
            replicas: spec.replicas,
            nodes: ports
                .iter()
                .zip(&nodes)
                .map(|(p, n)| NodeInfo {
                    shard: p.shard,
                    replica: p.replica,
                    http_url: n.http_url().to_string(),
                    native_url: n.native_url().to_string(),
                    pid: n.pid(),
                    dir: n.info().dir.clone(),
                    http_port: p.http,
                    tcp_port: p.tcp,
                    interserver_port: spec.replicated.then_some(p.interserver),
                    up: None,
                })
                .collect(),
            gateway_config: gateway_config.clone(),
            gateway_url: format!("http://127.0.0.1:{gateway_port}"),
            gateway_native_url: format!("clickhouse://127.0.0.1:{gateway_native_port}"),
            zookeeper: zk.as_ref().map(|z| z.info().clone()),
        };
        let cluster = LocalCluster { nodes, zookeeper: zk, topology, logins, dir, detached: false };
        // On an error below, Drop stops the nodes.
        if let Some(port) = zk_port {
            cluster.reach_zookeeper(port)?;
        }
        let dir_text = cluster.dir.display().to_string();
        let yaml = gateway_yaml(CLUSTER_NAME, gateway_port, gateway_native_port, &ports, &cluster.logins, &dir_text);
        write_private(&gateway_config, &yaml)?;
        cluster.write_topology()?;
        Ok(cluster)
    }

    /// Where everything is.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The server users the gateway users of `gateway.yaml` run as, with their passwords (kept
    /// here and in `gateway.yaml`, not in `cluster.json`).
    pub fn server_logins(&self) -> &[ServerLogin] {
        &self.logins
    }

    /// The server user that gateway user `gateway_user` runs as.
    pub fn server_login(&self, gateway_user: &str) -> Option<&ServerLogin> {
        self.logins.iter().find(|l| l.gateway_user == gateway_user)
    }

    /// The cluster directory (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every node, shard-major (the order of [`Topology::nodes`]).
    pub fn nodes(&self) -> &[LocalServer] {
        &self.nodes
    }

    /// The node of `shard` and `replica` (1-based).
    ///
    /// # Panics
    /// If there is no such node.
    pub fn node(&self, shard: usize, replica: usize) -> &LocalServer {
        &self.nodes[self.index(shard, replica)]
    }

    /// Mutable access to the node of `shard` and `replica` (1-based).
    ///
    /// # Panics
    /// If there is no such node.
    pub fn node_mut(&mut self, shard: usize, replica: usize) -> &mut LocalServer {
        let i = self.index(shard, replica);
        &mut self.nodes[i]
    }

    /// SIGKILL one node now, as a crash would (see [`LocalServer::kill9`]).
    ///
    /// # Panics
    /// If there is no such node.
    pub fn kill9(&mut self, shard: usize, replica: usize) {
        self.node_mut(shard, replica).kill9();
    }

    /// Starts a killed node again on its old ports (see [`LocalServer::restart`])
    /// and records its new pid in `DIR/cluster.json`.
    ///
    /// # Panics
    /// If there is no such node.
    pub fn restart(&mut self, shard: usize, replica: usize) -> Result<(), LocalError> {
        let i = self.index(shard, replica);
        self.nodes[i].restart().map_err(|e| node_error(shard, replica, e))?;
        self.topology.nodes[i].pid = self.nodes[i].pid();
        self.write_topology()
    }

    /// Stops every node in parallel and removes `DIR/cluster.json`.
    pub fn stop(mut self) -> Result<(), LocalError> {
        self.shutdown()
    }

    /// SIGKILL the cluster's ZooKeeper now, as a crash would: the nodes lose their sessions and
    /// their replicated tables turn read-only once the session timeout passes.
    ///
    /// # Panics
    /// If the cluster is not replicated.
    pub fn kill_zookeeper(&mut self) {
        self.zookeeper.as_mut().expect("a replicated cluster").kill9();
    }

    /// Starts the cluster's ZooKeeper again on its port, with its data.
    ///
    /// # Panics
    /// If the cluster is not replicated.
    pub fn restart_zookeeper(&mut self) -> Result<(), LocalError> {
        let zk = self.zookeeper.as_mut().expect("a replicated cluster");
        zk.restart()?;
        self.topology.zookeeper = Some(zk.info().clone());
        self.write_topology()
    }

    /// Waits until every node answers a query on ZooKeeper (`system.zookeeper`), at most 15 s.
    fn reach_zookeeper(&self, port: u16) -> Result<(), LocalError> {
        let deadline = std::time::Instant::now() + ZOOKEEPER_REACH;
        for (n, info) in self.nodes.iter().zip(&self.topology.nodes) {
            loop {
                match n.query("SELECT count() FROM system.zookeeper WHERE path = '/'") {
                    Ok(_) => break,
                    Err(e) if std::time::Instant::now() >= deadline => {
                        return Err(node_error(
                            info.shard,
                            info.replica,
                            LocalError::ZooKeeper(format!(
                                "the node cannot reach ZooKeeper at 127.0.0.1:{port} within {ZOOKEEPER_REACH:?}: {e}"
                            )),
                        ))
                    }
                    Err(_) => thread::sleep(Duration::from_millis(100)),
                }
            }
        }
        Ok(())
    }

    /// Leaves every node running and returns the topology; `Drop` will not
    /// stop them. Use [`down`](crate::down) on the directory to stop them later.
    pub fn detach(mut self) -> Topology {
        self.detached = true;
        for n in std::mem::take(&mut self.nodes) {
            n.detach();
        }
        if let Some(zk) = self.zookeeper.take() {
            zk.detach();
        }
        self.topology.clone()
    }

    /// The pids of every process of the cluster: its nodes, then its ZooKeeper (for
    /// [`crate::kill_and_remove_at_exit`]).
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.nodes.iter().map(LocalServer::pid).collect();
        pids.extend(self.zookeeper.as_ref().map(|z| z.info().pid));
        pids
    }

    fn index(&self, shard: usize, replica: usize) -> usize {
        let (s, r) = (self.topology.shards, self.topology.replicas);
        assert!(
            (1..=s).contains(&shard) && (1..=r).contains(&replica),
            "no node s{shard}r{replica} in a {s}x{r} cluster (shards and replicas count from 1)"
        );
        (shard - 1) * r + (replica - 1)
    }

    fn write_topology(&self) -> Result<(), LocalError> {
        write_topology(&self.dir, &self.topology)
    }

    fn shutdown(&mut self) -> Result<(), LocalError> {
        if self.detached {
            return Ok(());
        }
        self.detached = true;
        let result = stop_all(std::mem::take(&mut self.nodes));
        // The ZooKeeper goes last: nodes stopping still close their sessions.
        let zk = self.zookeeper.take().map_or(Ok(()), LocalZooKeeper::stop);
        remove_file(&self.dir.join(TOPOLOGY_FILE))?;
        result.and(zk)
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Writes `text` to `path`, readable by its owner only (it holds passwords).
fn write_private(path: &Path, text: &str) -> Result<(), LocalError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let _ = fs::remove_file(path);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| LocalError::io(format!("write {}", path.display()), e))?;
    f.write_all(text.as_bytes()).map_err(|e| LocalError::io(format!("write {}", path.display()), e))
}

/// The directory of node `shard`/`replica` in cluster directory `dir`.
pub fn node_dir(dir: &Path, shard: usize, replica: usize) -> PathBuf {
    dir.join(format!("s{shard}r{replica}"))
}

/// The cluster recorded in `DIR/cluster.json`, with each node's `up` set
/// (its pid is alive, is the clickhouse-server of its directory, and it
/// answers `/ping` within 2 s) and its pid refreshed from the node's own
/// record, and the ZooKeeper's `up` (it serves: `srvr`) for a replicated cluster.
/// `Ok(None)` when the directory or `cluster.json` is missing.
pub fn cluster_status(dir: &Path) -> Result<Option<Topology>, LocalError> {
    let Some(dir) = state::existing_dir(dir)? else { return Ok(None) };
    if !dir.join(TOPOLOGY_FILE).is_file() {
        return Ok(None);
    }
    let mut topo = Topology::read(&dir.join(TOPOLOGY_FILE))?;
    thread::scope(|s| {
        for n in topo.nodes.iter_mut() {
            s.spawn(move || {
                if let Ok(Some(info)) = state::read_info(&n.dir) {
                    n.pid = info.pid;
                }
                n.up = Some(is_server_of(n.pid, &n.dir) && ping(&n.http_url, STATUS_PING_TIMEOUT));
            });
        }
    });
    if let Some(z) = topo.zookeeper.as_mut() {
        z.up = Some(zookeeper::is_up(z));
    }
    Ok(Some(topo))
}

/// Stops every node of the cluster in `dir` (the nodes listed in
/// `cluster.json` and any `s{S}r{R}` sub-directory with a record), in
/// parallel, removes their records and `cluster.json`. Returns true if any
/// node was running. Used by [`down`](crate::down).
pub(crate) fn down_nodes(dir: &Path) -> Result<bool, LocalError> {
    let topo_file = dir.join(TOPOLOGY_FILE);
    let mut dirs: Vec<PathBuf> = match Topology::read(&topo_file) {
        Ok(t) => t.nodes.into_iter().map(|n| n.dir).collect(),
        Err(_) => Vec::new(),
    };
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if is_node_dir_name(&name) && e.path().is_dir() {
                if let Ok(p) = fs::canonicalize(e.path()) {
                    if !dirs.contains(&p) {
                        dirs.push(p);
                    }
                }
            }
        }
    }
    let results: Vec<Result<bool, LocalError>> = thread::scope(|s| {
        let handles: Vec<_> = dirs
            .iter()
            .map(|d| {
                s.spawn(move || {
                    let Some(pid) = state::recorded_pid(d).unwrap_or(None) else { return Ok(false) };
                    let stopped = stop_pid(pid, d, STOP_GRACE)?;
                    state::remove(d)?;
                    Ok(stopped)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(Ok(false))).collect()
    });
    remove_file(&topo_file)?;
    let zk = zookeeper::stop_recorded(&dir.join(ZOOKEEPER_DIR))?;
    let mut any = zk;
    for r in results {
        any |= r?;
    }
    Ok(any)
}

/// `s{digits}r{digits}`
fn is_node_dir_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('s') else { return false };
    let Some((s, r)) = rest.split_once('r') else { return false };
    !s.is_empty() && !r.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && r.bytes().all(|b| b.is_ascii_digit())
}

/// Refuses to start where a cluster node or a single server is still running.
fn refuse_if_running(dir: &Path) -> Result<(), LocalError> {
    if let Some(pid) = state::recorded_pid(dir)? {
        if is_server_of(pid, dir) {
            return Err(LocalError::AlreadyRunning { pid, dir: dir.to_path_buf() });
        }
    }
    if let Ok(topo) = Topology::read(&dir.join(TOPOLOGY_FILE)) {
        for n in &topo.nodes {
            let pid = state::recorded_pid(&n.dir).ok().flatten().unwrap_or(n.pid);
            if is_server_of(pid, &n.dir) {
                return Err(LocalError::AlreadyRunning { pid, dir: dir.to_path_buf() });
            }
        }
    }
    Ok(())
}

/// Fails with [`LocalError::PortInUse`] if `port` cannot be bound on 127.0.0.1.
fn check_free(port: u16) -> Result<(), LocalError> {
    TcpListener::bind(("127.0.0.1", port))
        .map(drop)
        .map_err(|_| LocalError::PortInUse { ports: format!("gateway={port}"), attempts: 1 })
}

/// Free HTTP and TCP ports for every node, shard-major, and interserver ports when `replicated`.
fn pick_ports(shards: usize, replicas: usize, replicated: bool) -> Result<Vec<NodePorts>, LocalError> {
    let per_node = if replicated { 3 } else { 2 };
    let mut free = free_ports(per_node * shards * replicas)?.into_iter();
    let mut nodes = Vec::with_capacity(shards * replicas);
    for shard in 1..=shards {
        for replica in 1..=replicas {
            let (http, tcp) = (free.next().unwrap_or(0), free.next().unwrap_or(0));
            let interserver = if replicated { free.next().unwrap_or(0) } else { 0 };
            nodes.push(NodePorts { shard, replica, http, tcp, interserver });
        }
    }
    Ok(nodes)
}

/// Starts one server per entry of `ports` in parallel threads. All or nothing:
/// if any fails, the others are stopped and the first error (a non-port one
/// first) is returned, tagged with its node.
fn start_nodes(
    spec: &ClusterSpec,
    dir: &Path,
    binary: &Path,
    ports: &[NodePorts],
    logins: &[ServerLogin],
    zookeeper_port: Option<u16>,
) -> Result<Vec<LocalServer>, LocalError> {
    let remote = remote_servers_xml(CLUSTER_NAME, ports, zookeeper_port.is_some());
    let users = users_xml(logins);
    let results: Vec<Result<LocalServer, LocalError>> = thread::scope(|s| {
        let handles: Vec<_> = ports
            .iter()
            .map(|p| {
                let mut ns = ServerSpec::new(node_dir(dir, p.shard, p.replica));
                ns.http_port = Some(p.http);
                ns.tcp_port = Some(p.tcp);
                ns.keep_alive_timeout_s = spec.keep_alive_timeout_s;
                ns.max_concurrent_queries = spec.max_concurrent_queries;
                let mut extra = format!("{remote}\n{}", macros_xml(p.shard, p.replica));
                if let Some(zk) = zookeeper_port {
                    extra.push('\n');
                    extra.push_str(&zookeeper_xml(zk, ZOOKEEPER_SESSION_TIMEOUT_MS));
                    extra.push('\n');
                    extra.push_str(&replication_xml(p));
                }
                ns.extra_config_xml = Some(extra);
                ns.extra_users = Some(users.clone());
                ns.binary = Some(binary.to_path_buf());
                ns.startup_timeout = spec.startup_timeout;
                ns.die_with_parent = spec.die_with_parent;
                let (shard, replica) = (p.shard, p.replica);
                s.spawn(move || LocalServer::start(ns).map_err(|e| node_error(shard, replica, e)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| Err(LocalError::InvalidCluster("a node's start thread panicked".into())))
            })
            .collect()
    });
    let mut ok = Vec::with_capacity(results.len());
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(n) => ok.push(n),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        return Ok(ok);
    }
    let _ = stop_all(ok);
    let pick = errors.iter().position(|e| !is_port_in_use(e)).unwrap_or(0);
    Err(errors.swap_remove(pick))
}

fn node_error(shard: usize, replica: usize, e: LocalError) -> LocalError {
    match e {
        e @ LocalError::Node { .. } => e,
        e => LocalError::Node { shard, replica, source: Box::new(e) },
    }
}

/// `e` with the attempt count of a (possibly node-tagged) `PortInUse` set to `attempts`.
fn with_attempts(e: LocalError, attempts: u32) -> LocalError {
    match e {
        LocalError::PortInUse { ports, .. } => LocalError::PortInUse { ports, attempts },
        LocalError::Node { shard, replica, source } => {
            LocalError::Node { shard, replica, source: Box::new(with_attempts(*source, attempts)) }
        }
        e => e,
    }
}

fn is_port_in_use(e: &LocalError) -> bool {
    match e {
        LocalError::PortInUse { .. } => true,
        LocalError::Node { source, .. } => is_port_in_use(source),
        _ => false,
    }
}

/// Stops servers in parallel; the first error wins, all are attempted.
fn stop_all(nodes: Vec<LocalServer>) -> Result<(), LocalError> {
    let results: Vec<Result<(), LocalError>> = thread::scope(|s| {
        let handles: Vec<_> = nodes.into_iter().map(|n| s.spawn(move || n.stop())).collect();
        handles.into_iter().map(|h| h.join().unwrap_or(Ok(()))).collect()
    });
    results.into_iter().collect()
}

fn write_topology(dir: &Path, topo: &Topology) -> Result<(), LocalError> {
    let path = dir.join(TOPOLOGY_FILE);
    let json = serde_json::to_string_pretty(topo)
        .map_err(|e| LocalError::io("encode the cluster topology", std::io::Error::other(e)))?;
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, json + "\n")
        .and_then(|_| fs::rename(&tmp, &path))
        .map_err(|e| LocalError::io(format!("write {}", path.display()), e))
}

fn remove_file(path: &Path) -> Result<(), LocalError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LocalError::io(format!("remove {}", path.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_validation() {
        assert!(ClusterSpec::new("/x", 2, 2).validate().is_ok());
        let e = ClusterSpec::new("/x", 0, 2).validate().unwrap_err().to_string();
        assert!(e.contains("--shards 0"), "{e}");
        let e = ClusterSpec::new("/x", 2, 0).validate().unwrap_err().to_string();
        assert!(e.contains("--replicas 0"), "{e}");
        assert!(ClusterSpec::new("/x", 9, 8).validate().is_err());
        assert!(ClusterSpec::new("/x", usize::MAX, 2).validate().is_err());
    }

    #[test]
    fn node_dir_names() {
        assert!(is_node_dir_name("s1r1") && is_node_dir_name("s12r3"));
        assert!(
            !is_node_dir_name("s1")
                && !is_node_dir_name("sr1")
                && !is_node_dir_name("s1rx")
                && !is_node_dir_name("log")
        );
        assert_eq!(node_dir(Path::new("/d"), 2, 1), Path::new("/d/s2r1"));
    }

    #[test]
    fn ports_are_shard_major_and_distinct() {
        let p = pick_ports(2, 3, false).unwrap();
        assert_eq!(p.len(), 6);
        assert_eq!((p[0].shard, p[0].replica, p[3].shard, p[3].replica), (1, 1, 2, 1));
        assert!(p.iter().all(|n| n.interserver == 0));
        let mut all: Vec<u16> = p.iter().flat_map(|n| [n.http, n.tcp]).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 12);
        let p = pick_ports(2, 2, true).unwrap();
        let mut all: Vec<u16> = p.iter().flat_map(|n| [n.http, n.tcp, n.interserver]).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 12, "three distinct ports a node");
    }

    #[test]
    fn port_in_use_seen_through_node() {
        let e = node_error(1, 2, LocalError::PortInUse { ports: "x".into(), attempts: 1 });
        assert!(is_port_in_use(&e));
        assert_eq!(e.to_string().split(':').next().unwrap(), "cluster node s1r2");
        assert!(!is_port_in_use(&LocalError::StillRunning(1)));
    }
}
