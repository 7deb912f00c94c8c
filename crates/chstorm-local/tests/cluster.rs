//! Local clusters against the real clickhouse-server. Every cluster here is
//! started with `die_with_parent: true`, so its nodes die with the test process.

use std::fs;
use std::path::Path;
use std::time::Duration;

use chstorm_local::{
    cluster_status, down, ping, ClusterSpec, LocalCluster, LocalError, Topology, GATEWAY_CONFIG_FILE, TOPOLOGY_FILE,
};

const PING: Duration = Duration::from_secs(2);

fn spec(dir: &Path, shards: usize, replicas: usize) -> ClusterSpec {
    let mut s = ClusterSpec::new(dir, shards, replicas);
    s.die_with_parent = true;
    s
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()) != Some("Z"))
}

/// Stops whatever is left in the directory when a test ends, even on a failed assertion.
struct Guard<'a>(&'a Path);
impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let _ = down(self.0);
    }
}

#[test]
fn cluster_2x2_queries_kill9_restart_down() {
    let tmp = tempfile::tempdir().unwrap();
    let _guard = Guard(tmp.path());
    let mut cluster = LocalCluster::start(spec(tmp.path(), 2, 2)).unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();

    // The topology: 4 nodes, shard-major, 1-based, each in DIR/s{S}r{R}.
    let topo = cluster.topology().clone();
    assert_eq!((topo.cluster.as_str(), topo.shards, topo.replicas), ("storm", 2, 2));
    let order: Vec<(usize, usize)> = topo.nodes.iter().map(|n| (n.shard, n.replica)).collect();
    assert_eq!(order, vec![(1, 1), (1, 2), (2, 1), (2, 2)]);
    for n in &topo.nodes {
        assert_eq!(n.dir, dir.join(format!("s{}r{}", n.shard, n.replica)));
        assert_eq!(n.http_url, format!("http://127.0.0.1:{}", n.http_port));
        assert_eq!(n.native_url, format!("clickhouse://127.0.0.1:{}", n.tcp_port));
        assert!(alive(n.pid));
        assert_eq!(cluster.node(n.shard, n.replica).pid(), n.pid);
    }
    assert_eq!(topo.gateway_config, dir.join(GATEWAY_CONFIG_FILE));
    assert!(topo.gateway_url.starts_with("http://127.0.0.1:"));
    assert_eq!(Topology::read(&dir.join(TOPOLOGY_FILE)).unwrap(), topo);
    assert_eq!(Topology::read(&dir).unwrap(), topo, "a directory reads its cluster.json");

    // Every node knows the whole cluster and its own place in it.
    for n in cluster.nodes() {
        assert_eq!(n.query("SELECT count() FROM system.clusters WHERE cluster = 'storm'").unwrap(), "4\n");
    }
    let shard_of = cluster.node(2, 1).query("SELECT substitution FROM system.macros WHERE macro = 'shard'").unwrap();
    assert_eq!(shard_of, "2\n");

    // Distributed queries: one replica per shard answers.
    let s1r1 = cluster.node(1, 1);
    s1r1.query("CREATE TABLE one_dist AS system.one ENGINE = Distributed(storm, system, one)").unwrap();
    assert_eq!(s1r1.query("SELECT count() FROM one_dist").unwrap(), "2\n");
    let all: Vec<String> = topo.nodes.iter().map(|n| format!("127.0.0.1:{}", n.tcp_port)).collect();
    let sql = format!("SELECT count() FROM remote('{}', system.one)", all.join(","));
    assert_eq!(s1r1.query(&sql).unwrap(), "4\n");

    // gateway.yaml is valid YAML and lists exactly the topology's replicas.
    let yaml: serde_yaml::Value = serde_yaml::from_str(&fs::read_to_string(&topo.gateway_config).unwrap()).unwrap();
    let port = topo.gateway_url.rsplit(':').next().unwrap();
    assert_eq!(yaml["listen"].as_str().unwrap(), format!("127.0.0.1:{port}"));
    let storm = &yaml["clusters"]["storm"];
    let shards: Vec<Vec<String>> = storm["shards"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|s| {
            assert_eq!(s["weight"].as_u64(), Some(1));
            s["replicas"].as_sequence().unwrap().iter().map(|r| r.as_str().unwrap().to_string()).collect()
        })
        .collect();
    assert_eq!(shards, topo.shard_http_urls());
    assert_eq!(storm["user"].as_str(), Some("default"));
    assert_eq!(storm["password"].as_str(), Some(""));
    assert_eq!(storm["routing"]["sharding_key"].as_str(), Some("cityHash64(shop_id)"));
    assert_eq!(storm["routing"]["tables"]["items"].as_str(), Some("items_local"));
    assert_eq!(storm["routing"]["where_column"].as_str(), Some("shop_id"));
    let user = &yaml["users"][0];
    assert_eq!(
        (user["name"].as_str(), user["password_sha256"].as_str(), user["cluster"].as_str()),
        (Some("default"), Some(""), Some("storm"))
    );
    let nets: Vec<&str> = user["networks"].as_sequence().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(nets, ["127.0.0.0/8", "::1/128"]);
    assert_eq!(yaml["limits"]["max_concurrency"].as_u64(), Some(256));

    // Each gateway user runs as its own server user, which every node has with its profile; the
    // file holding their passwords is its owner's only.
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(fs::metadata(&topo.gateway_config).unwrap().permissions().mode() & 0o777, 0o600);
    let logins = cluster.server_logins();
    assert_eq!(
        logins.iter().map(|l| (l.gateway_user.as_str(), l.user.as_str(), l.readonly)).collect::<Vec<_>>(),
        [("default", "chstorm_writer", false), ("viewer", "chstorm_viewer", true)]
    );
    for (i, l) in logins.iter().enumerate() {
        let u = &yaml["users"][i];
        assert_eq!(u["name"].as_str(), Some(l.gateway_user.as_str()));
        assert_eq!(
            (u["backend"]["user"].as_str(), u["backend"]["password"].as_str()),
            (Some(l.user.as_str()), Some(l.password.as_str()))
        );
        assert_eq!(u["readonly"].as_bool(), Some(l.readonly));
        for n in &topo.nodes {
            let out = std::process::Command::new("curl")
                .args(["-sS", "--max-time", "10", "-u", &format!("{}:{}", l.user, l.password), "--data-binary"])
                .arg("SELECT value FROM system.settings WHERE name = 'readonly'")
                .arg(&n.http_url)
                .output()
                .unwrap();
            let want = if l.readonly { "1\n" } else { "0\n" };
            assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{} on {}", l.user, n.http_url);
        }
    }
    assert_eq!(cluster.server_login("viewer").map(|l| l.user.as_str()), Some("chstorm_viewer"));

    // A second cluster in the same directory is refused.
    assert!(matches!(LocalCluster::start(spec(tmp.path(), 2, 2)), Err(LocalError::AlreadyRunning { .. })));

    // kill -9 one node: the others stay up and Distributed reads fail over to the other replica.
    let old = cluster.node(2, 1).pid();
    cluster.kill9(2, 1);
    assert!(!alive(old));
    assert!(!ping(&topo.node(2, 1).unwrap().http_url, PING));
    let st = cluster_status(tmp.path()).unwrap().unwrap();
    let up: Vec<bool> = st.nodes.iter().map(|n| n.up.unwrap()).collect();
    assert_eq!(up, [true, true, false, true]);
    assert!(!st.all_up());
    assert_eq!(cluster.node(1, 1).query("SELECT count() FROM one_dist").unwrap(), "2\n");

    cluster.restart(2, 1).unwrap();
    let new = cluster.node(2, 1).pid();
    assert_ne!(new, old);
    assert_eq!(cluster.node(2, 1).info().http_port, topo.node(2, 1).unwrap().http_port, "same ports");
    assert_eq!(Topology::read(&dir).unwrap().node(2, 1).unwrap().pid, new, "cluster.json has the new pid");
    assert!(cluster_status(tmp.path()).unwrap().unwrap().all_up());
    assert_eq!(cluster.node(2, 1).query("SELECT count() FROM system.clusters WHERE cluster = 'storm'").unwrap(), "4\n");

    // Detach, then down(DIR) stops all four.
    let topo = cluster.detach();
    let pids: Vec<u32> = topo.nodes.iter().map(|n| n.pid).collect();
    assert!(pids.iter().all(|&p| alive(p)), "detached nodes keep running");
    assert!(down(tmp.path()).unwrap());
    for &p in &pids {
        assert!(!alive(p), "pid {p} still alive after down");
        // Still our children here (not in the CLI): reap the zombies.
        // SAFETY: plain syscall on a pid that is our exited child.
        unsafe { libc::waitpid(p as libc::pid_t, std::ptr::null_mut(), 0) };
    }
    assert!(!dir.join(TOPOLOGY_FILE).exists());
    assert_eq!(cluster_status(tmp.path()).unwrap(), None);
    assert!(!down(tmp.path()).unwrap(), "nothing left to stop");
}

#[test]
fn drop_stops_every_node() {
    let tmp = tempfile::tempdir().unwrap();
    let _guard = Guard(tmp.path());
    let cluster = LocalCluster::start(spec(tmp.path(), 1, 2)).unwrap();
    let pids: Vec<u32> = cluster.nodes().iter().map(|n| n.pid()).collect();
    assert_eq!(pids.len(), 2);
    assert_eq!(cluster.node(1, 2).query("SELECT count() FROM system.clusters WHERE cluster = 'storm'").unwrap(), "2\n");
    drop(cluster);
    assert!(pids.iter().all(|&p| !alive(p)));
    assert!(!tmp.path().join(TOPOLOGY_FILE).exists());
}

#[test]
fn bad_requests_are_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    for (s, r, want) in [(0, 2, "--shards 0"), (2, 0, "--replicas 0"), (100, 100, "more than 64")] {
        let e = LocalCluster::start(spec(tmp.path(), s, r)).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, LocalError::InvalidCluster(_)) && msg.contains(want) && !msg.contains('\n'), "{msg}");
    }

    let mut s = spec(tmp.path(), 2, 1);
    s.binary = Some(tmp.path().join("no-clickhouse-server"));
    assert!(matches!(LocalCluster::start(s), Err(LocalError::BinaryMissing(_))));

    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut s = spec(tmp.path(), 2, 1);
    s.gateway_port = Some(busy.local_addr().unwrap().port());
    let e = LocalCluster::start(s).unwrap_err();
    assert!(matches!(e, LocalError::PortInUse { .. }) && e.to_string().contains("gateway="), "{e}");
    assert!(!tmp.path().join(TOPOLOGY_FILE).exists());
}

/// The replicated layout: a ZooKeeper in DIR/zookeeper, ON CLUSTER DDL, a part written on one
/// replica fetched by the other, the ZooKeeper lost and back, and `down` stopping it last.
#[test]
fn replicated_cluster_on_cluster_ddl_fetches_and_zookeeper_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let _guard = Guard(tmp.path());
    let mut s = spec(tmp.path(), 1, 2);
    s.replicated = true;
    let mut cluster = LocalCluster::start(s).unwrap();
    let topo = cluster.topology().clone();
    let zk = topo.zookeeper.clone().expect("a ZooKeeper");
    assert!(topo.replicated() && alive(zk.pid) && zk.dir.ends_with("zookeeper"));
    assert!(topo.nodes.iter().all(|n| n.interserver_port.is_some()));
    assert_eq!(cluster.pids().len(), 3);
    let (a, b) = (cluster.node(1, 1), cluster.node(1, 2));
    let ddl = "CREATE TABLE t ON CLUSTER storm (x UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/t', '{replica}') ORDER BY x";
    assert_eq!(a.query(ddl).unwrap().lines().count(), 2, "one row per node");
    a.query("INSERT INTO t VALUES (1), (2)").unwrap();
    b.query("SYSTEM SYNC REPLICA t").unwrap();
    assert_eq!(b.query("SELECT count() FROM t").unwrap(), "2\n", "fetched from its peer");
    assert_eq!(b.query("SELECT substitution FROM system.macros WHERE macro = 'replica'").unwrap(), "2\n");
    let status = cluster_status(tmp.path()).unwrap().unwrap();
    assert!(status.all_up() && status.zookeeper.unwrap().up == Some(true));

    // Without its ZooKeeper a replicated table turns read-only; reads go on.
    cluster.kill_zookeeper();
    let t = std::time::Instant::now();
    while cluster.node(1, 1).query("SELECT is_readonly FROM system.replicas").unwrap() != "1\n" {
        assert!(t.elapsed() < Duration::from_secs(15), "still writable without ZooKeeper");
        std::thread::sleep(Duration::from_millis(200));
    }
    let e = cluster.node(1, 1).query("INSERT INTO t VALUES (3)").unwrap_err().to_string();
    assert!(e.contains("Code: 242"), "{e}");
    assert_eq!(cluster.node(1, 1).query("SELECT count() FROM t").unwrap(), "2\n");
    assert!(!cluster_status(tmp.path()).unwrap().unwrap().all_up(), "the ZooKeeper is down");
    cluster.restart_zookeeper().unwrap();
    let t = std::time::Instant::now();
    while cluster.node(1, 1).query("INSERT INTO t VALUES (3)").is_err() {
        assert!(t.elapsed() < Duration::from_secs(30), "no writes after the ZooKeeper came back");
        std::thread::sleep(Duration::from_millis(300));
    }

    // `down` (another process's view) stops the nodes, then the ZooKeeper.
    let topo = cluster.detach();
    assert!(down(tmp.path()).unwrap());
    let zk = topo.zookeeper.unwrap();
    for p in topo.nodes.iter().map(|n| n.pid).chain([zk.pid]) {
        // SAFETY: plain syscall on a pid that is our exited child.
        unsafe { libc::waitpid(p as libc::pid_t, std::ptr::null_mut(), 0) };
        assert!(!alive(p), "pid {p} still runs");
    }
    assert!(!zk.dir.join("zookeeper.pid").exists());
}
