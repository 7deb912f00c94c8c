//! `chstorm local up|down|status`: a local ClickHouse for tests and demos, or a local cluster
//! (`--shards S --replicas R`, see docs/LOCAL_CLUSTER.md).

use crate::cli::{LocalAction, LocalArgs, LocalUpArgs};
use chstorm_local::{ClusterSpec, LocalCluster, LocalServer, ServerInfo, ServerSpec, Topology};

fn print_info(info: &ServerInfo, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(info)?);
        return Ok(());
    }
    println!("pid      {}", info.pid);
    println!("dir      {}", info.dir.display());
    println!("http     {}", info.http_url);
    println!("native   {}", info.native_url);
    if let Some(u) = &info.https_url {
        println!("https    {u}");
    }
    if let Some(u) = &info.native_tls_url {
        println!("native+tls {u}");
    }
    if let Some(ca) = &info.ca_cert {
        println!("ca cert  {}   (pass --cacert {} to chstorm bench)", ca.display(), ca.display());
    }
    Ok(())
}

fn print_topology(t: &Topology, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(t)?);
        return Ok(());
    }
    println!("cluster  {}  ({} shard(s) x {} replica(s))", t.cluster, t.shards, t.replicas);
    println!("{:<6} {:<8} {:<8} {:<26} native", "shard", "replica", "pid", "http");
    for n in &t.nodes {
        let state = match n.up {
            Some(true) => "up",
            Some(false) => "DOWN",
            None => "",
        };
        let line =
            format!("{:<6} {:<8} {:<8} {:<26} {:<32} {state}", n.shard, n.replica, n.pid, n.http_url, n.native_url);
        println!("{}", line.trim_end());
    }
    match &t.zookeeper {
        Some(z) => {
            let state = match z.up {
                Some(true) => "   up",
                Some(false) => "   DOWN",
                None => "",
            };
            println!(
                "zookeeper       127.0.0.1:{}   pid {}   (replicated: ON CLUSTER DDL, Replicated*MergeTree){state}",
                z.port, z.pid
            );
        }
        None => println!(
            "replication     none: no ZooKeeper; each replica's tables are its own (--replicated for ZooKeeper)"
        ),
    }
    println!("gateway config  {}", t.gateway_config.display());
    println!("gateway url     {}   (where a gateway started with that config listens)", t.gateway_url);
    if !t.gateway_native_url.is_empty() {
        println!("gateway native  {}   (its native protocol: listen_native)", t.gateway_native_url);
    }
    Ok(())
}

/// True if `local up` was asked for a cluster: more than one server in all.
fn wants_cluster(up: &LocalUpArgs) -> bool {
    up.shards.unwrap_or(1) * up.replicas.unwrap_or(1) > 1
}

fn cluster_up(up: &LocalUpArgs) -> anyhow::Result<i32> {
    let dir = &up.dir.dir;
    let (shards, replicas) = (up.shards.unwrap_or(1), up.replicas.unwrap_or(1));
    if up.tls || up.http_port.is_some() || up.tcp_port.is_some() {
        anyhow::bail!(
            "--tls, --http-port and --tcp-port are for a single server; a cluster's nodes get free loopback ports"
        );
    }
    if let Some(t) = chstorm_local::cluster_status(dir)? {
        if t.nodes.iter().any(|n| n.up == Some(true)) {
            if (t.shards, t.replicas, t.replicated()) != (shards, replicas, up.replicated) {
                let layout = |r: bool| if r { " replicated" } else { "" };
                anyhow::bail!(
                    "a {}x{}{} cluster is already running in {}; run `chstorm local down --dir {}` first or use another directory",
                    t.shards,
                    t.replicas,
                    layout(t.replicated()),
                    dir.display(),
                    dir.display()
                );
            }
            eprintln!("chstorm: a cluster is already running in {}", dir.display());
            print_topology(&t, up.dir.json)?;
            return Ok(if t.all_up() { 0 } else { 1 });
        }
    }
    if let Some(info) = chstorm_local::status(dir)? {
        anyhow::bail!(
            "a single clickhouse-server (pid {}) is running in {}; run `chstorm local down --dir {}` first or use another directory",
            info.pid,
            dir.display(),
            dir.display()
        );
    }
    let mut spec = ClusterSpec::new(dir, shards, replicas);
    spec.gateway_port = up.gateway_port;
    spec.replicated = up.replicated;
    let topo = LocalCluster::start(spec)?.detach();
    print_topology(&topo, up.dir.json)?;
    if !up.dir.json {
        println!("stop it with: chstorm local down --dir {}", dir.display());
    }
    Ok(0)
}

pub fn run(args: LocalArgs) -> anyhow::Result<i32> {
    match args.action {
        LocalAction::Up(up) if wants_cluster(&up) => cluster_up(&up),
        LocalAction::Up(up) => {
            if up.gateway_port.is_some() || up.replicated {
                let flag = if up.replicated { "--replicated" } else { "--gateway-port" };
                anyhow::bail!(
                    "{flag} is for a cluster; add --shards S and/or --replicas R (more than 1 server in all)"
                );
            }
            if let Some(t) = chstorm_local::cluster_status(&up.dir.dir)? {
                if t.nodes.iter().any(|n| n.up == Some(true)) {
                    anyhow::bail!(
                        "a {}x{} cluster is running in {}; run `chstorm local down --dir {}` first or use another directory",
                        t.shards,
                        t.replicas,
                        up.dir.dir.display(),
                        up.dir.dir.display()
                    );
                }
            }
            if let Some(info) = chstorm_local::status(&up.dir.dir)? {
                eprintln!("chstorm: a server is already running in {}", up.dir.dir.display());
                print_info(&info, up.dir.json)?;
                return Ok(0);
            }
            let mut spec = ServerSpec::new(&up.dir.dir);
            spec.tls = up.tls;
            spec.http_port = up.http_port;
            spec.tcp_port = up.tcp_port;
            let info = LocalServer::start(spec)?.detach();
            print_info(&info, up.dir.json)?;
            if !up.dir.json {
                println!("stop it with: chstorm local down --dir {}", up.dir.dir.display());
            }
            Ok(0)
        }
        LocalAction::Down(d) => {
            let cluster = d.dir.join(chstorm_local::TOPOLOGY_FILE).is_file();
            if chstorm_local::down(&d.dir)? {
                println!("stopped the {} in {}", if cluster { "cluster" } else { "server" }, d.dir.display());
            } else {
                println!("no server running in {}", d.dir.display());
            }
            Ok(0)
        }
        LocalAction::Status(d) if d.dir.join(chstorm_local::TOPOLOGY_FILE).is_file() => {
            let Some(t) = chstorm_local::cluster_status(&d.dir)? else {
                println!("no cluster running in {}", d.dir.display());
                return Ok(1);
            };
            print_topology(&t, d.json)?;
            Ok(if t.all_up() { 0 } else { 1 })
        }
        LocalAction::Status(d) => match chstorm_local::status(&d.dir)? {
            Some(info) => {
                print_info(&info, d.json)?;
                Ok(0)
            }
            None => {
                println!("no server running in {}", d.dir.display());
                Ok(1)
            }
        },
    }
}
