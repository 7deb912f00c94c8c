//! `load_cluster` on a real 2x2 local cluster: --drop, a leftover single-server table, partial tables.

use chstorm_data::{load_cluster, ClusterNode, ClusterTarget, DatasetName, LoadOptions};
use chstorm_local::{ClusterSpec, LocalCluster};
use chstorm_proto::TlsOptions;

fn target(c: &LocalCluster) -> ClusterTarget {
    let t = c.topology();
    ClusterTarget {
        name: t.cluster.clone(),
        nodes: t
            .nodes
            .iter()
            .map(|n| ClusterNode { shard: n.shard, replica: n.replica, http_url: n.http_url.clone() })
            .collect(),
    }
}

#[test]
fn drop_leftovers_and_partial_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let mut spec = ClusterSpec::new(tmp.path(), 2, 2);
    spec.die_with_parent = true;
    let c = LocalCluster::start(spec).unwrap();
    let t = target(&c);
    let tls = TlsOptions::default();
    let coord = c.node(2, 2).http_url().to_string();
    let opts = LoadOptions { rows: Some(3_000), index_granularity: 128, drop: false };

    // A single-server `items` left on one node is not silently reused.
    c.node(1, 2).query("CREATE TABLE items (x UInt8) ENGINE = Memory").unwrap();
    let e = load_cluster(&coord, &tls, &t, DatasetName::Items, &opts, &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("not Distributed") && e.contains("--drop") && e.contains("s1r2"), "{e}");

    // --drop replaces it; the coordinator may be any node.
    let r =
        load_cluster(&coord, &tls, &t, DatasetName::Items, &LoadOptions { drop: true, ..opts.clone() }, &mut |_| {})
            .unwrap();
    assert_eq!(r.report.tables, vec![("items".to_string(), 3_000, true)]);
    assert_eq!(r.nodes.len(), 4);
    assert_eq!(r.nodes[0].rows, r.nodes[1].rows);
    assert_eq!(r.nodes[2].rows, r.nodes[3].rows);
    assert_eq!(r.nodes[0].rows + r.nodes[2].rows, 3_000);
    assert!(r.nodes.iter().all(|n| n.raw_rows >= n.rows));

    // Another --rows on a complete cluster: a clear error, not a silent mix.
    let e = load_cluster(
        &coord,
        &tls,
        &t,
        DatasetName::Items,
        &LoadOptions { rows: Some(10), ..opts.clone() },
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("3000") && e.contains("--drop"), "{e}");

    // Tables on some nodes only: partial, rebuild with --drop.
    c.node(2, 1).query("DROP TABLE items").unwrap();
    let e = load_cluster(&coord, &tls, &t, DatasetName::Items, &opts, &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("some nodes only") && e.contains("s2r1"), "{e}");
    let r =
        load_cluster(&coord, &tls, &t, DatasetName::Items, &LoadOptions { drop: true, ..opts.clone() }, &mut |_| {})
            .unwrap();
    assert!(r.report.tables[0].2);

    // A topology that does not match the servers' remote_servers.
    let mut wrong = t.clone();
    wrong.nodes.truncate(2);
    let e = load_cluster(&coord, &tls, &wrong, DatasetName::Items, &opts, &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("topology lists 2 nodes"), "{e}");
    let mut other = t.clone();
    other.name = "nope".into();
    let e = load_cluster(&coord, &tls, &other, DatasetName::Items, &opts, &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("no cluster 'nope'"), "{e}");
}

/// A node's client sits idle while the coordinator inserts; ClickHouse closes idle keep-alive
/// connections after 3 s, so the client must not reuse one that old.
#[test]
fn client_survives_the_servers_keep_alive_timeout() {
    let mut c =
        chstorm_data::SqlClient::new(chstorm_local::shared_server().http_url(), &TlsOptions::default()).unwrap();
    assert_eq!(c.query_u64("SELECT 1").unwrap(), 1);
    std::thread::sleep(std::time::Duration::from_millis(3500));
    assert_eq!(c.query_u64("SELECT 2").unwrap(), 2);
}
