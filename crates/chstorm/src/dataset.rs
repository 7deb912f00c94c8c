//! `chstorm dataset load NAME --url URL [--rows N] [--index-granularity N] [--drop]
//! [--cluster NAME --topology DIR/cluster.json]`.

use chstorm_data::{load, load_cluster, ClusterNode, ClusterTarget, DatasetName, LoadOptions, SqlClient};
use chstorm_proto::TlsOptions;
use clap::{Args, Subcommand};

#[derive(Args, Debug, Clone)]
pub struct DatasetArgs {
    #[command(subcommand)]
    pub action: DatasetAction,
}

#[derive(Subcommand, Debug, Clone)]
pub enum DatasetAction {
    /// Create a synthetic dataset's tables and fill them inside ClickHouse (no download).
    /// Idempotent: complete tables are left alone; --drop rebuilds them.
    #[command(after_long_help = "Datasets:
  items  Shopee-like: ReplacingMergeTree(version) ORDER BY (shop_id, item_id), skewed shop sizes,
         10% of keys with an older version so FINAL has work to do (default 1,000,000 rows)
  kv     Altinity's Part 2 lookup tables kv_int_g<G> (UInt64 ids from cityHash64) and kv_fs_g<G>
         (FixedString(16) ids from murmurHash3_128), one pair per --index-granularity (default 2,000,000 rows)
  hits   hits_v1-like: ClientIP, ResolutionWidth with a realistic skew, EventDate, URL, UserID, ...
         (default 1,000,000 rows)

Example:
  chstorm dataset load items --url http://127.0.0.1:8123 --rows 5000000 --index-granularity 256

A local cluster (chstorm local up --shards S --replicas R --dir DIR), items only:
  chstorm dataset load items --cluster storm --topology DIR/cluster.json
creates items_local on every node and a Distributed table items sharded by cityHash64(shop_id),
and writes the rows once through it (every replica of a shard gets them); see docs/LOCAL_CLUSTER.md.")]
    Load(LoadArgs),
}

#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// items, kv or hits.
    pub name: String,
    /// The server's HTTP(S) URL [default: $CHSTORM_URL, else http://127.0.0.1:8123].
    #[arg(long, env = "CHSTORM_URL", hide_env_values = true)]
    pub url: Option<String>,
    /// Rows per table (default per dataset, see below).
    #[arg(long)]
    pub rows: Option<u64>,
    /// MergeTree index_granularity of the new tables.
    #[arg(long, default_value_t = 8192)]
    pub index_granularity: u32,
    /// Drop the tables and load them again.
    #[arg(long)]
    pub drop: bool,
    /// TLS: accept any server certificate.
    #[arg(long)]
    pub insecure: bool,
    /// TLS: trust the CA certificates in this PEM file.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<std::path::PathBuf>,
    /// Load into this cluster of the servers' remote_servers (items only): items_local on every
    /// node plus a Distributed table items. Needs --topology. --url, if given, is the node the rows
    /// are inserted through (default: shard 1, replica 1).
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// With --cluster: the cluster.json that `chstorm local up --shards S --replicas R --dir DIR`
    /// writes (or DIR itself), which lists every node's HTTP URL.
    #[arg(long, value_name = "FILE", requires = "cluster")]
    pub topology: Option<std::path::PathBuf>,
}

pub fn run(args: DatasetArgs) -> anyhow::Result<i32> {
    let DatasetAction::Load(a) = args.action;
    let name = DatasetName::parse(&a.name)
        .ok_or_else(|| anyhow::anyhow!("unknown dataset '{}'; choose items, kv or hits", a.name))?;
    if let Some(cluster) = &a.cluster {
        return run_cluster(&a, name, cluster);
    }
    let url = a.url.as_deref().unwrap_or(crate::bench::DEFAULT_URL);
    let mut client = SqlClient::new(url, &TlsOptions { insecure: a.insecure, ca_file: a.cacert.clone() })?;
    let opts = LoadOptions { rows: a.rows, index_granularity: a.index_granularity, drop: a.drop };
    let report = load(&mut client, name, &opts, &mut |line| eprintln!("{line}"))?;
    for (table, rows, built) in &report.tables {
        println!("{table}\t{rows} rows\t{}", if *built { "loaded" } else { "already there" });
    }
    Ok(0)
}

fn run_cluster(a: &LoadArgs, name: DatasetName, cluster: &str) -> anyhow::Result<i32> {
    let Some(path) = &a.topology else {
        anyhow::bail!(
            "--cluster {cluster} needs --topology DIR/cluster.json (written by `chstorm local up --shards S --replicas R --dir DIR`) \
to reach every node: ClickHouse 18.16 runs ON CLUSTER DDL only with ZooKeeper"
        );
    };
    if name != DatasetName::Items {
        anyhow::bail!(
            "--cluster supports the items dataset only; load {} into each server separately without --cluster",
            name.as_str()
        );
    }
    let topo = chstorm_local::Topology::read(path)?;
    if topo.cluster != cluster {
        anyhow::bail!(
            "--cluster {cluster} does not match the topology in {}, whose cluster is '{}'",
            path.display(),
            topo.cluster
        );
    }
    let target = ClusterTarget {
        name: topo.cluster.clone(),
        nodes: topo
            .nodes
            .iter()
            .map(|n| ClusterNode { shard: n.shard, replica: n.replica, http_url: n.http_url.clone() })
            .collect(),
    };
    let first = target.nodes.first().map(|n| n.http_url.clone());
    let Some(url) = a.url.clone().or(first) else { anyhow::bail!("the topology in {} lists no nodes", path.display()) };
    let tls = TlsOptions { insecure: a.insecure, ca_file: a.cacert.clone() };
    let opts = LoadOptions { rows: a.rows, index_granularity: a.index_granularity, drop: a.drop };
    let r = load_cluster(&url, &tls, &target, name, &opts, &mut |line| eprintln!("{line}"))?;
    for (table, rows, built) in &r.report.tables {
        println!("{table}\t{rows} rows\t{}", if *built { "loaded" } else { "already there" });
    }
    for n in &r.nodes {
        println!(
            "s{}r{}\t{}\t{} rows with FINAL\t{} without",
            n.shard,
            n.replica,
            chstorm_data::ITEMS_LOCAL,
            n.rows,
            n.raw_rows
        );
    }
    Ok(0)
}
