//! What a local cluster adds to each node's `config.xml` (`<remote_servers>`
//! and `<macros>`, for ClickHouse 18.16; for a replicated cluster also `<zookeeper>`, the
//! interserver port replicas fetch parts from and the `ON CLUSTER` DDL queue) and the gateway
//! config it writes beside the nodes (`DIR/gateway.yaml`, the format of
//! `docs/gateway.example.yaml`).

use std::fmt::Write as _;

use crate::users::{ServerLogin, MAX_EXECUTION_TIME_S};

/// One node as the generated configs see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodePorts {
    /// 1-based shard number.
    pub shard: usize,
    /// 1-based replica number within the shard.
    pub replica: usize,
    pub http: u16,
    pub tcp: u16,
    /// `interserver_http_port`, where other replicas fetch its parts; 0 without replication.
    pub interserver: u16,
}

/// `<remote_servers>` with one cluster `cluster`: a `<shard>` per shard (weight 1) listing its
/// replicas' native ports on 127.0.0.1. With `internal_replication` (a replicated cluster) a
/// Distributed INSERT writes one replica of the shard and replication brings the rows to the
/// others; without it the Distributed table writes every replica itself. `nodes` must be
/// ordered shard-major.
pub(crate) fn remote_servers_xml(cluster: &str, nodes: &[NodePorts], internal_replication: bool) -> String {
    let mut x = String::with_capacity(256 + 96 * nodes.len());
    let _ = write!(x, "  <remote_servers>\n    <{cluster}>\n");
    let mut shard = 0;
    for n in nodes {
        if n.shard != shard {
            if shard != 0 {
                x.push_str("      </shard>\n");
            }
            shard = n.shard;
            let _ = writeln!(
                x,
                "      <shard>\n        <weight>1</weight>\n        <internal_replication>{internal_replication}</internal_replication>"
            );
        }
        let _ = writeln!(x, "        <replica><host>127.0.0.1</host><port>{}</port></replica>", n.tcp);
    }
    if shard != 0 {
        x.push_str("      </shard>\n");
    }
    let _ = write!(x, "    </{cluster}>\n  </remote_servers>");
    x
}

/// `<macros>` naming the node's shard and replica (usable as `{shard}` and `{replica}` in DDL).
pub(crate) fn macros_xml(shard: usize, replica: usize) -> String {
    format!("  <macros><shard>{shard}</shard><replica>{replica}</replica></macros>")
}

/// What a node of a replicated cluster adds: the interserver port on 127.0.0.1 that its peers
/// fetch parts from (every node of a local cluster shares the host, so each needs its own
/// port and must announce 127.0.0.1, not the host name), and the `ON CLUSTER` DDL queue's
/// ZooKeeper path. `<zookeeper>` itself is [`crate::zookeeper::zookeeper_xml`].
pub(crate) fn replication_xml(node: &NodePorts) -> String {
    format!(
        "  <interserver_http_host>127.0.0.1</interserver_http_host>\n\
         \x20 <interserver_http_port>{}</interserver_http_port>\n\
         \x20 <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>",
        node.interserver
    )
}

/// The gateway config for the cluster: listens on `127.0.0.1:gateway_port` (HTTP) and
/// `127.0.0.1:native_port` (`listen_native`), one cluster `cluster` with every shard's
/// replicas' HTTP URLs and native addresses, routing of
/// `items` to `items_local` by `cityHash64(shop_id)`, the server's `default` as the cluster's
/// login, and a gateway user per entry of `logins` (`default`, which may read `/metrics`, and
/// the read-only `viewer`), each without a password from loopback only and running as its own
/// server user. Everything else has the defaults of `docs/gateway.example.yaml`, with generous
/// per-user limits.
pub(crate) fn gateway_yaml(
    cluster: &str,
    gateway_port: u16,
    native_port: u16,
    nodes: &[NodePorts],
    logins: &[ServerLogin],
    dir: &str,
) -> String {
    let mut y = String::with_capacity(2048);
    let _ = writeln!(y, "# chstorm gateway configuration for the local cluster in {}", yaml_comment(dir));
    y.push_str("# written by `chstorm local up`; format: docs/gateway.example.yaml\n");
    let _ = writeln!(y, "listen: 127.0.0.1:{gateway_port}");
    let _ = writeln!(y, "listen_native: 127.0.0.1:{native_port}");
    y.push_str(
        "limits:
  max_concurrency: 256
  queue_size: 1024
  queue_max_wait: 1s
health:
  interval: 500ms
  timeout: 1s
  fall: 2
  rise: 2
retries:
  budget_ratio: 0.1
  min_per_second: 10
pool:
  idle_timeout: auto
  max_idle_per_replica: auto
clusters:
",
    );
    let _ = writeln!(y, "  {cluster}:");
    y.push_str("    user: default\n    password: \"\"\n    shards:\n");
    let shards = nodes.iter().map(|n| n.shard).max().unwrap_or(0);
    for shard in 1..=shards {
        let of: Vec<&NodePorts> = nodes.iter().filter(|n| n.shard == shard).collect();
        let list = |f: &dyn Fn(&NodePorts) -> String| of.iter().map(|n| f(n)).collect::<Vec<_>>().join(", ");
        let _ =
            writeln!(y, "      - weight: 1\n        replicas: [{}]", list(&|n| format!("http://127.0.0.1:{}", n.http)));
        let _ = writeln!(y, "        native: [{}]", list(&|n| format!("127.0.0.1:{}", n.tcp)));
    }
    y.push_str(
        "    routing:
      sharding_key: cityHash64(shop_id)
      tables:
        items: items_local
      where_column: shop_id
users:
",
    );
    for l in logins {
        user_yaml(&mut y, cluster, l);
    }
    y
}

/// Gateway user `l.gateway_user` of `cluster`, running as server user `l.user`.
fn user_yaml(y: &mut String, cluster: &str, l: &ServerLogin) {
    let _ = writeln!(y, "  - name: {}", l.gateway_user);
    y.push_str("    password_sha256: \"\"\n    networks: [127.0.0.0/8, \"::1/128\"]\n");
    let _ = writeln!(y, "    cluster: {cluster}");
    y.push_str("    max_concurrency: 256\n    queue_size: 1024\n    queue_max_wait: 1s\n    requests_per_second: 0\n");
    let _ =
        writeln!(y, "    max_execution_time: {MAX_EXECUTION_TIME_S}s  # the server profile's max_execution_time too");
    if l.readonly {
        y.push_str("    allowed_settings: []  # its server profile has readonly=1, which refuses a changed setting\n");
        y.push_str("    readonly: true\n");
    } else {
        y.push_str("    allowed_settings: [\"*\"]\n    readonly: false\n    metrics: true  # may read /metrics here\n");
        y.push_str(
            "    operator_statements: [\"*\"]  # this local cluster's operator: KILL, SYSTEM, DDL of any database\n",
        );
    }
    y.push_str("    settings: {}\n");
    let _ = writeln!(
        y,
        "    backend:  # the ClickHouse user it runs as (in every node's users.xml)\n      user: {}",
        l.user
    );
    let _ = writeln!(y, "      password: \"{}\"", l.password);
}

/// A path made safe for a one-line YAML comment.
fn yaml_comment(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<NodePorts> {
        vec![
            NodePorts { shard: 1, replica: 1, http: 101, tcp: 201, interserver: 301 },
            NodePorts { shard: 1, replica: 2, http: 102, tcp: 202, interserver: 302 },
            NodePorts { shard: 2, replica: 1, http: 103, tcp: 203, interserver: 303 },
            NodePorts { shard: 2, replica: 2, http: 104, tcp: 204, interserver: 304 },
        ]
    }

    #[test]
    fn remote_servers_lists_shards_and_replicas() {
        let x = remote_servers_xml("storm", &nodes(), false);
        assert!(x.starts_with("  <remote_servers>\n    <storm>\n      <shard>\n"));
        assert_eq!(x.matches("<shard>").count(), 2);
        assert_eq!(x.matches("</shard>").count(), 2);
        assert_eq!(x.matches("<internal_replication>false</internal_replication>").count(), 2);
        let first_shard = &x[..x.find("</shard>").unwrap()];
        assert!(first_shard.contains("<port>201</port>") && first_shard.contains("<port>202</port>"));
        assert!(!first_shard.contains("<port>203</port>"));
        assert!(x.ends_with("    </storm>\n  </remote_servers>"));
        assert_eq!(macros_xml(2, 1), "  <macros><shard>2</shard><replica>1</replica></macros>");
        let r = remote_servers_xml("storm", &nodes(), true);
        assert_eq!(r.matches("<internal_replication>true</internal_replication>").count(), 2);
        assert_eq!(r.replace("true</internal", "false</internal"), x);
    }

    #[test]
    fn replication_names_the_interserver_port_and_the_ddl_queue() {
        let x = replication_xml(&nodes()[2]);
        assert!(x.contains("<interserver_http_host>127.0.0.1</interserver_http_host>"), "{x}");
        assert!(x.contains("\n  <interserver_http_port>303</interserver_http_port>\n"), "{x}");
        assert!(x.ends_with("  <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>"), "{x}");
    }

    #[test]
    fn gateway_yaml_shards() {
        let logins = crate::users::make_logins().unwrap();
        let y = gateway_yaml("storm", 9999, 9998, &nodes(), &logins, "/tmp/x");
        assert!(y.contains("listen: 127.0.0.1:9999\nlisten_native: 127.0.0.1:9998\n"));
        assert!(y.contains(
            "      - weight: 1\n        replicas: [http://127.0.0.1:101, http://127.0.0.1:102]\n        native: [127.0.0.1:201, 127.0.0.1:202]\n      - weight: 1\n        replicas: [http://127.0.0.1:103, http://127.0.0.1:104]\n        native: [127.0.0.1:203, 127.0.0.1:204]\n    routing:"
        ));
        assert!(y.contains("        items: items_local\n"));
        assert!(y.contains("    cluster: storm\n"));
        let viewer = &y[y.find("  - name: viewer\n").unwrap()..];
        assert!(viewer.contains("    readonly: true\n") && !viewer.contains("metrics: true"), "{viewer}");
        assert!(viewer.contains(&format!("      user: chstorm_viewer\n      password: \"{}\"\n", logins[1].password)));
        let default = &y[y.find("  - name: default\n").unwrap()..y.find("  - name: viewer\n").unwrap()];
        assert!(default.contains("    metrics: true") && default.contains("      user: chstorm_writer\n"), "{default}");
    }
}
