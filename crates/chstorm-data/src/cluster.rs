//! Loading `items` into a cluster (`chstorm dataset load items --cluster storm --topology DIR/cluster.json`).
//!
//! Two layouts, told apart by the coordinator: a cluster whose nodes have ZooKeeper (the
//! coordinator reads `system.zookeeper`) is *replicated*, as the seed's Shopee cluster is:
//!
//! * `items_local`: the `items` schema as `ReplicatedReplacingMergeTree(version)`, at
//!   `/clickhouse/tables/{shard}/DB.items_local` with replica `{replica}` (every node's macros,
//!   checked first: the replicas of a shard share `{shard}` and differ in `{replica}`), made by
//!   one `CREATE ... ON CLUSTER` statement through the coordinator;
//! * `items`: `Distributed(CLUSTER, 'DB', items_local, cityHash64(shop_id))`, `ON CLUSTER` too;
//! * the shards have `internal_replication` true, so each block of an INSERT through the
//!   Distributed table goes to one replica of its shard, and the others fetch it; the load ends
//!   with `SYSTEM SYNC REPLICA items_local` on every node, so every replica holds every row.
//!
//! Without ZooKeeper (18.16 runs `ON CLUSTER` DDL only through it) the DDL is sent to every
//! node by its own HTTP URL (from the topology `chstorm local up` writes), `items_local` is a
//! plain `ReplacingMergeTree(version)` on each, and the shards have `internal_replication`
//! false: the Distributed table itself writes every row to every replica of its shard.
//!
//! Either way the rows are written once, by `INSERT INTO items SELECT ...` through the
//! Distributed table on the coordinator node with `insert_distributed_sync=1`
//! as an HTTP URL parameter, synchronously. (In
//! 18.16 a `SETTINGS insert_distributed_sync = 1` clause at the end of
//! `INSERT ... SELECT` applies to the SELECT only and the INSERT stays
//! asynchronous; the URL parameter applies to the whole query.) DB is read from
//! `currentDatabase()` of the coordinator (18.16 wants a literal in `Distributed`). Old versions
//! (10% of keys) are written first, as on a single server; a key's shop, and so
//! its shard, is the same in both versions, so `FINAL` works per shard.

use crate::client::SqlClient;
use crate::defs::{items_create, items_create_replicated, DatasetName};
use crate::load::{dataset, registry_ddl, server, LoadOptions, LoadReport, META_TABLE};
use crate::DataError;
use chstorm_proto::TlsOptions;
use std::time::Instant;

/// The local table on every node.
pub const ITEMS_LOCAL: &str = "items_local";
/// The sharding expression of the Distributed `items` table.
pub const ITEMS_SHARDING_KEY: &str = "cityHash64(shop_id)";

/// One server of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    /// 1-based shard number.
    pub shard: usize,
    /// 1-based replica number within the shard.
    pub replica: usize,
    /// The node's HTTP URL.
    pub http_url: String,
}

/// The cluster to load: its `<remote_servers>` name and every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTarget {
    pub name: String,
    pub nodes: Vec<ClusterNode>,
}

/// Rows of `items_local` on one node after loading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRows {
    pub shard: usize,
    pub replica: usize,
    /// `SELECT count() FROM items_local FINAL`
    pub rows: u64,
    /// `SELECT count() FROM items_local`: old versions not merged away yet included, so it may
    /// differ between replicas.
    pub raw_rows: u64,
}

/// What [`load_cluster`] did.
#[derive(Debug, Clone)]
pub struct ClusterLoadReport {
    /// As for a single server, with the one table `items` (the Distributed table).
    pub report: LoadReport,
    /// Per node, shard-major.
    pub nodes: Vec<NodeRows>,
}

struct Node {
    shard: usize,
    replica: usize,
    url: String,
    client: SqlClient,
}

impl Node {
    fn label(&self) -> String {
        format!("s{}r{} ({})", self.shard, self.replica, self.url)
    }
}

/// Loads `name` (only [`DatasetName::Items`]) into `cluster`: DDL on every node,
/// rows through the Distributed table of `coordinator_url` (one of the nodes),
/// then checks that the Distributed table shows the rows with `FINAL`, that
/// the replicas of each shard hold the same rows, and that the shards add up.
/// Records the dataset in [`META_TABLE`] on every node. Idempotent: a complete
/// load is left alone; `opts.drop` rebuilds it.
pub fn load_cluster(
    coordinator_url: &str,
    tls: &TlsOptions,
    cluster: &ClusterTarget,
    name: DatasetName,
    opts: &LoadOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<ClusterLoadReport, DataError> {
    if name != DatasetName::Items {
        return Err(DataError::Invalid(format!(
            "--cluster supports the items dataset only; load {} into each server separately without --cluster",
            name.as_str()
        )));
    }
    let shards = check_target(cluster)?;
    let ds = dataset(name, opts)?;
    let rows = ds.rows;
    let cname = &cluster.name;

    let mut coord = SqlClient::new(&with_param(coordinator_url, "insert_distributed_sync=1"), tls)
        .map_err(server("cannot use the coordinator URL"))?;
    let listed = coord
        .query_u64(&format!("SELECT count() FROM system.clusters WHERE cluster = '{cname}'"))
        .map_err(server("cannot read system.clusters"))?;
    if listed == 0 {
        return Err(DataError::Invalid(format!(
            "server {} has no cluster '{cname}' in system.clusters; pass --url of a node of the cluster in --topology",
            coord.target()
        )));
    }
    let listed_shards = coord
        .query_u64(&format!("SELECT uniqExact(shard_num) FROM system.clusters WHERE cluster = '{cname}'"))
        .map_err(server("cannot read system.clusters"))?;
    if listed != cluster.nodes.len() as u64 || listed_shards != shards as u64 {
        return Err(DataError::Invalid(format!(
            "cluster '{cname}' on {} has {listed} replicas in {listed_shards} shards, but the topology lists {} nodes \
in {shards} shards; is --topology the cluster.json of this cluster?",
            coord.target(),
            cluster.nodes.len()
        )));
    }
    let db = coord.query("SELECT currentDatabase()").map_err(server("cannot read the current database"))?;
    let db = db.trim().to_string();
    let mut nodes = Vec::with_capacity(cluster.nodes.len());
    for n in &cluster.nodes {
        let url = if db == "default" { n.http_url.clone() } else { with_param(&n.http_url, &format!("database={db}")) };
        let client = SqlClient::new(&url, tls).map_err(server("cannot use a node URL from the topology"))?;
        nodes.push(Node { shard: n.shard, replica: n.replica, url: n.http_url.clone(), client });
    }
    for n in &mut nodes {
        let ctx = format!("cannot create the dataset registry table on node {}", n.label());
        n.client.query(&registry_ddl()).map_err(server(&ctx))?;
    }
    let replicated = coord.query("SELECT count() FROM system.zookeeper WHERE path = '/'").is_ok();
    if replicated {
        check_macros(&mut nodes)?;
    }

    // What is there already.
    let mut complete = 0;
    let mut partial = Vec::new();
    let mut any_exists = false;
    for n in &mut nodes {
        let engines = n
            .client
            .query(&format!(
                "SELECT name, engine FROM system.tables WHERE database = currentDatabase() AND name IN ('items', '{ITEMS_LOCAL}')"
            ))
            .map_err(server("cannot list tables"))?;
        let mut has = (false, false);
        for line in engines.lines() {
            any_exists = true;
            match line.split_once('\t') {
                Some(("items", "Distributed")) => has.0 = true,
                Some(("items", engine)) if !opts.drop => {
                    return Err(DataError::Invalid(format!(
                        "table items on node {} is a {engine} table, not Distributed (a single-server load?); \
rerun with --drop to replace it",
                        n.label()
                    )))
                }
                Some((t, engine))
                    if t == ITEMS_LOCAL && replicated && !engine.starts_with("Replicated") && !opts.drop =>
                {
                    return Err(DataError::Invalid(format!(
                        "table {ITEMS_LOCAL} on node {} is a {engine} table, but the cluster is replicated \
(its nodes have ZooKeeper); rerun with --drop to make it ReplicatedReplacingMergeTree",
                        n.label()
                    )))
                }
                Some((t, _)) if t == ITEMS_LOCAL => has.1 = true,
                _ => {}
            }
        }
        match has {
            (true, true) => complete += 1,
            (false, false) => {}
            _ => partial.push(n.label()),
        }
    }
    if any_exists && opts.drop && replicated {
        progress(&format!("items: dropping items and items_local ON CLUSTER {cname} (--drop)"));
        for t in ["items", ITEMS_LOCAL] {
            coord
                .query(&format!("DROP TABLE IF EXISTS `{db}`.{t} ON CLUSTER {cname}"))
                .map_err(server("cannot drop table on the cluster"))?;
        }
    } else if any_exists && opts.drop {
        progress("items: dropping items and items_local on every node (--drop)");
        for n in &mut nodes {
            n.client.query("DROP TABLE IF EXISTS items").map_err(server("cannot drop table"))?;
            n.client.query(&format!("DROP TABLE IF EXISTS {ITEMS_LOCAL}")).map_err(server("cannot drop table"))?;
        }
    } else if complete == nodes.len() {
        let per_node = verify(&mut coord, &mut nodes, rows).map_err(|e| match e {
            DataError::RowCount { table, got, want } => {
                DataError::Invalid(format!("{table} holds {got} rows, not {want}; rerun with --drop to rebuild it"))
            }
            e => e,
        })?;
        progress(&format!("items: already loaded on all {} nodes with {rows} rows, nothing to do", nodes.len()));
        return Ok(ClusterLoadReport {
            report: LoadReport { dataset: ds, tables: vec![("items".into(), rows, false)] },
            nodes: per_node,
        });
    } else if any_exists {
        let mut where_ = partial;
        if complete > 0 {
            where_.push(format!("{complete} node(s) with both tables"));
        }
        return Err(DataError::Invalid(format!(
            "items/items_local exist on some nodes only ({}); rerun with --drop to rebuild them on every node",
            where_.join(", ")
        )));
    }

    if replicated {
        progress(&format!(
            "items: creating the ReplicatedReplacingMergeTree {ITEMS_LOCAL} and the Distributed table items ON CLUSTER \
{cname} ({} nodes)",
            nodes.len()
        ));
        let local_ddl = items_create_replicated(ITEMS_LOCAL, cname, &db, ds.index_granularity);
        let dist_ddl = format!(
            "CREATE TABLE IF NOT EXISTS `{db}`.items ON CLUSTER {cname} AS `{db}`.{ITEMS_LOCAL} \
ENGINE = Distributed({cname}, '{db}', {ITEMS_LOCAL}, {ITEMS_SHARDING_KEY})"
        );
        coord.query(&local_ddl).map_err(server("cannot create items_local ON CLUSTER"))?;
        coord.query(&dist_ddl).map_err(server("cannot create items ON CLUSTER"))?;
    } else {
        progress(&format!("items: creating {ITEMS_LOCAL} and the Distributed table items on {} nodes", nodes.len()));
        let local_ddl = items_create(ITEMS_LOCAL, ds.index_granularity);
        let dist_ddl = format!(
            "CREATE TABLE IF NOT EXISTS items AS {ITEMS_LOCAL} ENGINE = Distributed({cname}, '{db}', {ITEMS_LOCAL}, {ITEMS_SHARDING_KEY})"
        );
        for n in &mut nodes {
            let ctx = format!("cannot create the tables on node {}", n.label());
            n.client.query(&local_ddl).map_err(server(&ctx))?;
            n.client.query(&dist_ddl).map_err(server(&ctx))?;
        }
    }
    let on_coord = coord
        .query_u64("SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = 'items' AND engine = 'Distributed'")
        .map_err(server("cannot list tables"))?;
    if on_coord != 1 {
        return Err(DataError::Invalid(format!(
            "{} is not one of the nodes in --topology (it has no table items now); pass --url of a node, or leave it out",
            coord.target()
        )));
    }
    let table = &ds.tables[0];
    for (i, ins) in table.inserts.iter().enumerate() {
        let started = Instant::now();
        progress(&format!(
            "items: inserting through the Distributed table (insert_distributed_sync=1), step {} of {} ...",
            i + 1,
            table.inserts.len()
        ));
        coord.query(ins).map_err(server("insert failed"))?;
        progress(&format!("items: step {} done in {:.1} s", i + 1, started.elapsed().as_secs_f64()));
    }
    if replicated {
        let started = Instant::now();
        progress("items: waiting for every replica to fetch its shard's parts (SYSTEM SYNC REPLICA) ...");
        for n in &mut nodes {
            let ctx = format!("node {} did not catch up with its shard", n.label());
            n.client.query(&format!("SYSTEM SYNC REPLICA {ITEMS_LOCAL}")).map_err(server(&ctx))?;
        }
        progress(&format!("items: every replica caught up in {:.1} s", started.elapsed().as_secs_f64()));
    }
    let per_node = verify(&mut coord, &mut nodes, rows)?;
    for n in &mut nodes {
        let ctx = format!("cannot record the dataset on node {}", n.label());
        n.client
            .query(&format!(
                "INSERT INTO {META_TABLE} VALUES ('{}', 'items', {rows}, {}, {}, now())",
                name.as_str(),
                ds.shops,
                ds.index_granularity
            ))
            .map_err(server(&ctx))?;
    }
    let per_shard: Vec<String> =
        (1..=shards).map(|s| per_node.iter().find(|r| r.shard == s).map_or(0, |r| r.rows).to_string()).collect();
    progress(&format!(
        "items: verified {rows} rows through Distributed FINAL; per shard {} (equal on every replica)",
        per_shard.join(" + ")
    ));
    Ok(ClusterLoadReport {
        report: LoadReport { dataset: ds, tables: vec![("items".into(), rows, true)] },
        nodes: per_node,
    })
}

/// Checks the loaded cluster: `count() FROM items FINAL` through the
/// coordinator equals `rows`; the replicas of each shard hold the same rows
/// (with FINAL); the shards' FINAL counts add up to `rows`.
fn verify(coord: &mut SqlClient, nodes: &mut [Node], rows: u64) -> Result<Vec<NodeRows>, DataError> {
    let through = coord.query_u64("SELECT count() FROM items FINAL").map_err(server("cannot count rows"))?;
    if through != rows {
        return Err(DataError::RowCount { table: "items (Distributed, FINAL)".into(), got: through, want: rows });
    }
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes.iter_mut() {
        let ctx = format!("cannot count rows on node {}", n.label());
        let final_rows =
            n.client.query_u64(&format!("SELECT count() FROM {ITEMS_LOCAL} FINAL")).map_err(server(&ctx))?;
        let raw_rows = n.client.query_u64(&format!("SELECT count() FROM {ITEMS_LOCAL}")).map_err(server(&ctx))?;
        out.push(NodeRows { shard: n.shard, replica: n.replica, rows: final_rows, raw_rows });
    }
    let mut sum = 0;
    let shards = out.iter().map(|r| r.shard).max().unwrap_or(0);
    for s in 1..=shards {
        let reps: Vec<&NodeRows> = out.iter().filter(|r| r.shard == s).collect();
        let first = reps[0];
        // Only FINAL counts compare: background merges collapse old versions on each replica at its own pace.
        if let Some(bad) = reps.iter().find(|r| r.rows != first.rows) {
            return Err(DataError::Invalid(format!(
                "replicas of shard {s} differ: s{s}r{} has {} rows, s{s}r{} has {}; rerun with --drop",
                first.replica, first.rows, bad.replica, bad.rows
            )));
        }
        sum += first.rows;
    }
    if sum != rows {
        return Err(DataError::RowCount { table: format!("{ITEMS_LOCAL} (sum over shards)"), got: sum, want: rows });
    }
    Ok(out)
}

/// Checks that the nodes' `{shard}` and `{replica}` macros lay the replicated tables out as the
/// topology does: the replicas of a shard share `{shard}` and no two share `{replica}`, and no
/// two shards share `{shard}` (or their replicas would share one table in ZooKeeper).
fn check_macros(nodes: &mut [Node]) -> Result<(), DataError> {
    let mut seen: Vec<(usize, String, String)> = Vec::with_capacity(nodes.len());
    for n in nodes.iter_mut() {
        let ctx = format!("cannot read the macros of node {}", n.label());
        let text = n
            .client
            .query("SELECT macro, substitution FROM system.macros WHERE macro IN ('shard', 'replica')")
            .map_err(server(&ctx))?;
        let get = |m: &str| text.lines().find_map(|l| l.strip_prefix(m)?.strip_prefix('\t').map(str::to_string));
        let (Some(shard), Some(replica)) = (get("shard"), get("replica")) else {
            return Err(DataError::Invalid(format!(
                "node {} has ZooKeeper but no {{shard}} and {{replica}} macros, which replicated tables need \
(`chstorm local up --replicated` writes them)",
                n.label()
            )));
        };
        for (s, sm, rm) in &seen {
            let same_shard = *s == n.shard;
            if same_shard != (*sm == shard) || (same_shard && *rm == replica) {
                return Err(DataError::Invalid(format!(
                    "node {}'s macros (shard '{shard}', replica '{replica}') clash with those of a node of shard {s} \
(shard '{sm}', replica '{rm}'): the replicas of a shard must share {{shard}} and differ in {{replica}}",
                    n.label()
                )));
            }
        }
        seen.push((n.shard, shard, replica));
    }
    Ok(())
}

/// Checks shard and replica numbering: shards 1..=S, each with replicas
/// 1..=R_s, no duplicates. Returns S.
fn check_target(c: &ClusterTarget) -> Result<usize, DataError> {
    let bad = |why: String| Err(DataError::Invalid(format!("bad cluster topology: {why}")));
    if c.name.is_empty() || !c.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return bad(format!("cluster name {:?} is not a plain identifier", c.name));
    }
    if c.nodes.is_empty() {
        return bad("no nodes".into());
    }
    let shards = c.nodes.iter().map(|n| n.shard).max().unwrap_or(0);
    for s in 1..=shards {
        let mut reps: Vec<usize> = c.nodes.iter().filter(|n| n.shard == s).map(|n| n.replica).collect();
        reps.sort_unstable();
        if reps.is_empty() || reps.iter().enumerate().any(|(i, &r)| r != i + 1) {
            return bad(format!(
                "shard {s} has replicas {reps:?}; expected 1, 2, ... (shards and replicas count from 1)"
            ));
        }
    }
    if c.nodes.iter().any(|n| n.shard == 0) {
        return bad("shard 0 (shards count from 1)".into());
    }
    Ok(shards)
}

/// `url` with `param` (`name=value`) added to its query string.
fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(shard: usize, replica: usize) -> ClusterNode {
        ClusterNode { shard, replica, http_url: format!("http://127.0.0.1:{}", 1000 + shard * 10 + replica) }
    }

    #[test]
    fn topology_checks() {
        let ok = ClusterTarget { name: "storm".into(), nodes: vec![node(1, 1), node(1, 2), node(2, 1), node(2, 2)] };
        assert_eq!(check_target(&ok).unwrap(), 2);
        let gap = ClusterTarget { name: "storm".into(), nodes: vec![node(1, 1), node(3, 1)] };
        assert!(check_target(&gap).unwrap_err().to_string().contains("shard 2"));
        let dup = ClusterTarget { name: "storm".into(), nodes: vec![node(1, 1), node(1, 1)] };
        assert!(check_target(&dup).is_err());
        let name = ClusterTarget { name: "a'b".into(), nodes: vec![node(1, 1)] };
        assert!(check_target(&name).is_err());
        assert!(check_target(&ClusterTarget { name: "x".into(), nodes: vec![] }).is_err());
    }

    #[test]
    fn params() {
        assert_eq!(with_param("http://h:1", "a=1"), "http://h:1?a=1");
        assert_eq!(with_param("http://h:1/?b=2", "a=1"), "http://h:1/?b=2&a=1");
    }
}
