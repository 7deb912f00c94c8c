//! A real 2x2 ClickHouse cluster with the items dataset, and gateways in front of it, for the
//! gateway tests.
#![allow(dead_code)]

use chstorm_data::{load_cluster, ClusterNode, ClusterTarget, DatasetName, LoadOptions};
use chstorm_gateway::Gateway;
use chstorm_local::{ClusterSpec, LocalCluster};
use chstorm_proto::TlsOptions;
use std::process::Command;

/// Rows of `items` in the test cluster.
pub const ROWS: u64 = 20_000;

pub struct Env {
    pub cluster: LocalCluster,
    pub rt: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
}

/// Starts a 2x2 cluster in a temp dir and loads `items` through Distributed.
pub fn start_cluster() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = ClusterSpec::new(dir.path().join("cluster"), 2, 2);
    spec.die_with_parent = true;
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

impl Env {
    /// The generated gateway.yaml, with `edit` applied to its text and listening on a free port.
    pub fn gateway_with(&self, edit: impl Fn(String) -> String) -> (Gateway, String) {
        let text = std::fs::read_to_string(&self.cluster.topology().gateway_config).unwrap();
        let listen = text.lines().find(|l| l.starts_with("listen:")).unwrap().to_string();
        let text = edit(text.replace(&listen, "listen: 127.0.0.1:0"));
        let path = self.dir.path().join(format!("gw-{}.yaml", rand_suffix()));
        std::fs::write(&path, text).unwrap();
        let gw = self.rt.block_on(Gateway::start(path)).unwrap();
        let url = format!("http://{}", gw.addr);
        (gw, url)
    }

    pub fn node_url(&self, shard: usize, replica: usize) -> String {
        self.cluster.topology().node(shard, replica).unwrap().http_url.clone()
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// An HTTP exchange with curl: (status, headers lower-cased, body).
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
