//! `chstorm local up --shards 2 --replicas 2`, `dataset load items --cluster storm`, `local down`,
//! through the real binary and real servers. The servers outlive the CLI (as `local up` must), so a
//! guard runs `local down` when the test ends, even on a failed assertion.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use chstorm_data::SqlClient;
use chstorm_proto::TlsOptions;

fn chstorm(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_chstorm")).args(args).env_remove("CHSTORM_URL").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn alive(pid: u64) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()) != Some("Z"))
}

struct Down(PathBuf);
impl Drop for Down {
    fn drop(&mut self) {
        let _ = chstorm_local::down(&self.0);
    }
}

fn q(url: &str, sql: &str) -> u64 {
    let mut c = SqlClient::new(url, &TlsOptions::default()).unwrap();
    c.query_u64(sql).unwrap_or_else(|e| panic!("{url}: {sql}: {e}"))
}

#[test]
fn cluster_up_load_down_through_the_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _down = Down(dir.clone());

    // up --json prints the topology.
    let (code, out, err) = chstorm(&["local", "up", "--shards", "2", "--replicas", "2", "--dir", d, "--json"]);
    assert_eq!(code, 0, "{err}");
    let topo: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let canon = fs::canonicalize(&dir).unwrap();
    assert_eq!(topo["cluster"], "storm");
    assert_eq!(topo["gateway_config"].as_str().unwrap(), canon.join("gateway.yaml").to_str().unwrap());
    let gateway_url = topo["gateway_url"].as_str().unwrap();
    assert!(gateway_url.starts_with("http://127.0.0.1:"), "{gateway_url}");
    let nodes = topo["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4);
    let mut pids = Vec::new();
    let mut shard_urls: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
    for (i, n) in nodes.iter().enumerate() {
        let (shard, replica) = (n["shard"].as_u64().unwrap(), n["replica"].as_u64().unwrap());
        assert_eq!((shard, replica), (1 + i as u64 / 2, 1 + i as u64 % 2));
        assert!(n["native_url"].as_str().unwrap().starts_with("clickhouse://127.0.0.1:"));
        assert_eq!(n["dir"].as_str().unwrap(), canon.join(format!("s{shard}r{replica}")).to_str().unwrap());
        let pid = n["pid"].as_u64().unwrap();
        assert!(alive(pid), "node s{shard}r{replica} pid {pid}");
        pids.push(pid);
        let url = n["http_url"].as_str().unwrap().to_string();
        assert_eq!(q(&url, "SELECT count() FROM system.clusters WHERE cluster = 'storm'"), 4);
        shard_urls[shard as usize - 1].push(url);
    }

    // gateway.yaml lists the same replicas and listens on the printed URL.
    let yaml: serde_yaml::Value =
        serde_yaml::from_str(&fs::read_to_string(canon.join("gateway.yaml")).unwrap()).unwrap();
    assert_eq!(format!("http://{}", yaml["listen"].as_str().unwrap()), gateway_url);
    let native_url = topo["gateway_native_url"].as_str().unwrap();
    assert_eq!(format!("clickhouse://{}", yaml["listen_native"].as_str().unwrap()), native_url);
    let yaml_shards: Vec<Vec<String>> = yaml["clusters"]["storm"]["shards"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|s| s["replicas"].as_sequence().unwrap().iter().map(|r| r.as_str().unwrap().to_string()).collect())
        .collect();
    assert_eq!(yaml_shards, shard_urls);

    // status shows the cluster, all up.
    let (code, out, _) = chstorm(&["local", "status", "--dir", d]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("storm") && out.matches(" up\n").count() == 4, "{out}");
    let (code, out, _) = chstorm(&["local", "status", "--dir", d, "--json"]);
    assert_eq!(code, 0);
    let st: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(st["nodes"].as_array().unwrap().iter().all(|n| n["up"] == true));

    // dataset load items --cluster storm: replicas of a shard equal, shards add up, Distributed FINAL = rows.
    let rows = 20_000;
    let topo_file = canon.join("cluster.json");
    let load = [
        "dataset",
        "load",
        "items",
        "--cluster",
        "storm",
        "--topology",
        topo_file.to_str().unwrap(),
        "--rows",
        "20000",
        "--index-granularity",
        "256",
    ];
    let (code, out, err) = chstorm(&load);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("items\t20000 rows\tloaded"), "{out}");
    let mut sum = 0;
    for (s, urls) in shard_urls.iter().enumerate() {
        let counts: Vec<u64> = urls.iter().map(|u| q(u, "SELECT count() FROM items_local FINAL")).collect();
        assert!(counts[0] > 0 && counts.iter().all(|&c| c == counts[0]), "shard {}: {counts:?}", s + 1);
        sum += counts[0];
        for u in urls {
            // Every row of a replica belongs to its shard by cityHash64(shop_id), as the gateway routes.
            assert_eq!(q(u, &format!("SELECT count() FROM items_local WHERE cityHash64(shop_id) % 2 != {s}")), 0);
            assert_eq!(q(u, "SELECT count() FROM items FINAL"), rows, "Distributed FINAL through {u}");
            assert_eq!(q(u, "SELECT max(rows) FROM chstorm_datasets FINAL WHERE dataset = 'items'"), rows);
        }
    }
    assert_eq!(sum, rows);
    let any = &shard_urls[0][0];
    assert_eq!(q(any, "SELECT count() FROM items FINAL WHERE version = 1"), 0);
    let raw = q(any, "SELECT count() FROM items");
    assert!((rows..=rows + rows / 10).contains(&raw), "old versions: {raw}");
    assert_eq!(q(any, "SELECT count() FROM system.tables WHERE name = 'items' AND engine = 'Distributed'"), 1);

    // A second load is a no-op.
    let (code, out, err) = chstorm(&load);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("items\t20000 rows\talready there"), "{out}");
    assert!(err.contains("nothing to do"), "{err}");
    assert_eq!(q(any, "SELECT count() FROM chstorm_datasets WHERE dataset = 'items'"), 1, "recorded once");

    // down stops all four.
    let (code, out, err) = chstorm(&["local", "down", "--dir", d]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("stopped the cluster"), "{out}");
    for p in &pids {
        assert!(!alive(*p), "pid {p} alive after down");
    }
    assert!(!canon.join("cluster.json").exists());
    let (code, _, _) = chstorm(&["local", "status", "--dir", d]);
    assert_eq!(code, 1);
}

#[test]
fn cluster_errors_are_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    let one_line = |args: &[&str], needle: &str| {
        let (code, _, err) = chstorm(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("chstorm: error: ") && err.contains(needle), "{args:?}: {err}");
    };
    one_line(&["local", "up", "--shards", "0", "--dir", d], "--shards");
    one_line(&["local", "up", "--shards", "2", "--tls", "--dir", d], "--tls");
    one_line(&["local", "up", "--gateway-port", "1", "--dir", d], "--gateway-port is for a cluster");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    one_line(&["local", "up", "--shards", "2", "--gateway-port", &port, "--dir", d], "port already in use");
    one_line(&["dataset", "load", "items", "--cluster", "storm"], "--topology");
    one_line(&["dataset", "load", "kv", "--cluster", "storm", "--topology", d], "items dataset only");
    one_line(&["dataset", "load", "items", "--cluster", "storm", "--topology", d], "cluster.json");
    assert!(!Path::new(d).join("cluster.json").exists());
}
