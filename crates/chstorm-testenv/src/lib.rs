//! Test environments shared by the gateway's integration tests (in `chstorm-gateway` and
//! `chstorm`): a real 2x2 ClickHouse cluster with the `items` dataset ([`start_cluster`]: the
//! replicated layout, a ZooKeeper and `ReplicatedReplacingMergeTree`, as production clusters
//! run; [`start_plain_cluster`]: the replicas' tables written by the Distributed table), the
//! gateway config that `chstorm local up` writes for it, and curl helpers; and fake HTTP servers for faults a real
//! server cannot produce ([`serve_http`], and [`answer_ones`] on it, the load engine's and
//! colocate's). Dev-only (`publish = false`).
//!
//! This crate does not depend on `chstorm-gateway` (which uses it as a dev-dependency): it hands
//! out the gateway config's path and the test starts `chstorm_gateway::Gateway` itself, on
//! [`Env::rt`]:
//!
//! ```ignore
//! let env = chstorm_testenv::start_cluster();
//! let gw = env.rt.block_on(chstorm_gateway::Gateway::start(env.gateway_config(|t| t))).unwrap();
//! let url = format!("http://{}", gw.addr);
//! ```
//!
//! It builds on `chstorm-local`, `chstorm-data` and `chstorm-proto`; it must not import the
//! gateway (see above) or the CLI.

use chstorm_data::{load_cluster, ClusterNode, ClusterTarget, DatasetName, LoadOptions};
use chstorm_local::{ClusterSpec, LocalCluster};
use chstorm_proto::TlsOptions;
use std::path::PathBuf;
use std::process::Command;

/// Rows of `items` in the test cluster.
pub const ROWS: u64 = 20_000;

/// A running 2x2 cluster (stopped when dropped), a tokio runtime for gateways, and a temp dir.
pub struct Env {
    pub cluster: LocalCluster,
    pub rt: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
}

/// Starts a replicated 2x2 cluster (a ZooKeeper, `ReplicatedReplacingMergeTree` items_local on
/// every node, `internal_replication` true) in a temp dir and loads [`ROWS`] rows of `items`
/// through Distributed; every replica holds its shard's rows when it returns.
pub fn start_cluster() -> Env {
    start(true)
}

/// [`start_cluster`] without replication: no ZooKeeper, each replica's `items_local` a
/// `ReplacingMergeTree` of its own, written by the Distributed table.
pub fn start_plain_cluster() -> Env {
    start(false)
}

fn start(replicated: bool) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = ClusterSpec::new(dir.path().join("cluster"), 2, 2);
    spec.die_with_parent = true;
    spec.replicated = replicated;
    let cluster = LocalCluster::start(spec).unwrap();
    let topo = cluster.topology().clone();
    let target = ClusterTarget {
        name: topo.cluster.clone(),
        nodes: topo
            .nodes
            .iter()
            .map(|n| ClusterNode { shard: n.shard, replica: n.replica, http_url: n.http_url.clone() })
            .collect(),
    };
    let opts = LoadOptions { rows: Some(ROWS), index_granularity: 256, drop: false };
    load_cluster(&topo.nodes[0].http_url, &TlsOptions::default(), &target, DatasetName::Items, &opts, &mut |_| {})
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    Env { cluster, rt, dir }
}

/// [`start_cluster`] for an env kept in a `static` for the whole test process: a static is never
/// dropped, so its servers are killed and its temp dir removed when the process exits
/// ([`chstorm_local::kill_and_remove_at_exit`]); without that every run left the cluster's folder
/// (about 50 MB) behind.
pub fn start_shared_cluster() -> Env {
    let env = start_cluster();
    chstorm_local::kill_and_remove_at_exit(env.cluster.pids(), env.dir.path().to_path_buf());
    env
}

impl Env {
    /// Writes the cluster's generated gateway.yaml, listening on free ports (`127.0.0.1:0`, HTTP
    /// and native) and
    /// with `edit` applied to its text, to a new file in the env's dir; returns its path.
    pub fn gateway_config(&self, edit: impl Fn(String) -> String) -> PathBuf {
        let path = self.dir.path().join(format!("gw-{}.yaml", next_id()));
        std::fs::write(&path, self.gateway_config_text(edit)).unwrap();
        path
    }

    /// The text [`Env::gateway_config`] writes.
    pub fn gateway_config_text(&self, edit: impl Fn(String) -> String) -> String {
        edit(gateway_config_text(&self.cluster))
    }

    /// `http://127.0.0.1:PORT` of a node (1-based shard and replica).
    pub fn node_url(&self, shard: usize, replica: usize) -> String {
        self.cluster.topology().node(shard, replica).unwrap().http_url.clone()
    }

    /// Every node's URL, shard by shard.
    pub fn node_urls(&self) -> Vec<String> {
        self.cluster.topology().nodes.iter().map(|n| n.http_url.clone()).collect()
    }
}

/// The gateway config `chstorm local up` wrote for `cluster`, listening on free ports
/// (`127.0.0.1:0`, HTTP and native).
pub fn gateway_config_text(cluster: &LocalCluster) -> String {
    let text = std::fs::read_to_string(&cluster.topology().gateway_config).unwrap();
    let listen = text.lines().find(|l| l.starts_with("listen:")).unwrap().to_string();
    let mut text = text.replace(&listen, "listen: 127.0.0.1:0");
    if let Some(native) = text.lines().find(|l| l.starts_with("listen_native:")).map(str::to_string) {
        text = text.replace(&native, "listen_native: 127.0.0.1:0");
    }
    text
}

/// The HTTP address a `chstorm gateway` process listens on, read from the `gateway listening`
/// line of its log (`log`, where its stderr goes). Its config listens on port 0 (as
/// [`gateway_config_text`] writes it): a port picked beforehand and let go can be taken by any
/// connection's source port before the gateway binds it. Panics with the log when the process
/// exits first, or when `within` passes.
pub fn listening_addr(
    log: &std::path::Path,
    child: &mut std::process::Child,
    within: std::time::Duration,
) -> std::net::SocketAddr {
    let started = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| is_listening_line(l)) {
            return listening_field(line, "addr");
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the gateway exited ({status}) before listening; its log:\n{text}");
        }
        assert!(started.elapsed() < within, "the gateway did not listen within {within:?}; its log:\n{text}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether `line` is the gateway's `gateway listening` log line.
pub fn is_listening_line(line: &str) -> bool {
    line.contains("\"msg\":\"gateway listening\"")
}

/// An address field (`addr`, `native_addr`) of the `gateway listening` log line. Panics, naming
/// the field, when the line lacks it.
pub fn listening_field(line: &str, key: &str) -> std::net::SocketAddr {
    let tag = format!("\"{key}\":\"");
    let at = line.find(&tag).unwrap_or_else(|| panic!("no {key} in the gateway listening line: {line}"));
    let value = line[at + tag.len()..].split('"').next().unwrap();
    value.parse().unwrap_or_else(|e| panic!("{key} {value:?} in the gateway listening line: {e}"))
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// An HTTP exchange with curl (20 s at most): (status, headers lower-cased, body). Status 0
/// when curl got no answer.
pub fn curl(args: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl").args(["-sS", "-i", "--max-time", "20"]).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// POSTs `sql` and returns (status, body).
pub fn post(url: &str, sql: &str) -> (u16, String) {
    let (s, _, b) = curl(&["--data-binary", sql, url]);
    (s, b)
}

/// Serves a fake ClickHouse HTTP interface on `conn`: every complete request (its head and its
/// `Content-Length` body) is answered `200` with the body `1\n`, after `before_answer` runs (a
/// test's fault: a stall, a count). Returns when the client closes or a write fails. For faults
/// a real server cannot produce; used by the load engine's and colocate's tests.
pub fn answer_ones(conn: std::net::TcpStream, mut before_answer: impl FnMut()) {
    serve_http(conn, |_| {
        before_answer();
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n1\n".to_vec(), true)
    })
}

/// Serves a fake HTTP server on `conn`: each complete request (its head and its
/// `Content-Length` body) gets the bytes `answer` makes of its head (lower-cased), and the
/// connection stays open while `answer` says so. Returns when the client closes, a write
/// fails, or the connection is given up.
pub fn serve_http(mut conn: std::net::TcpStream, mut answer: impl FnMut(&str) -> (Vec<u8>, bool)) {
    use std::io::{Read, Write};
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_nodelay(true);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                .unwrap_or(0);
            if buf.len() < end + 4 + len {
                break;
            }
            buf.drain(..end + 4 + len);
            let (bytes, keep_open) = answer(&head);
            if conn.write_all(&bytes).is_err() || !keep_open {
                return;
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
