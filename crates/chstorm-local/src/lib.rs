//! Local ClickHouse harness for chstorm.
//!
//! Starts real `clickhouse-server` processes (developed against the Debian
//! package 18.16.1) with a generated config in a private directory, listening
//! on 127.0.0.1 only, and stops them again. It never touches the system's own
//! server, `/etc/clickhouse-server` or `/var/lib/clickhouse`. Everything is
//! synchronous (`std::process`, `std::net`).
//!
//! * [`LocalServer::start`] with a [`ServerSpec`]: writes `DIR/config.xml` and
//!   `DIR/users.xml`, spawns the server, waits (default up to 30 s) until
//!   `GET /ping` answers `Ok.`, and records it in `DIR/chstorm-local.json`
//!   ([`ServerInfo`]) and `DIR/clickhouse-server.pid`. Ports left unset are
//!   picked free; a busy port means up to 3 attempts with new ones.
//! * [`LocalCluster::start`] with a [`ClusterSpec`]: `shards x replicas`
//!   servers in `DIR/s{shard}r{replica}/`, all listing each other in
//!   `<remote_servers>` as cluster `storm`, plus `DIR/gateway.yaml` and the
//!   [`Topology`] in `DIR/cluster.json`. Each gateway user of `gateway.yaml` runs as a server
//!   user of its own, in every node's `users.xml` ([`ServerLogin`]: `chstorm_writer`,
//!   `chstorm_viewer`); with [`ClusterSpec::replicated`], a ZooKeeper (Debian's `zookeeper`
//!   package) in `DIR/zookeeper/` and every node configured for `Replicated*MergeTree` and
//!   `ON CLUSTER` DDL. See `docs/LOCAL_CLUSTER.md`.
//! * [`status`] and [`down`] work on a directory, for `chstorm local status|down`;
//!   [`down`] also stops a cluster, and [`cluster_status`] reports one.
//! * [`shared_server`] and [`shared_tls_server`]: one server per test process,
//!   killed when the process exits.
//!
//! Defaults: user `default` without password (the administrator), `keep_alive_timeout` 3 s,
//! `max_concurrent_queries` 1000, `log_queries=1` with `system.query_log`
//! flushed every 1000 ms, log level `warning` into `DIR/log/`.
//!
//! # Boundaries
//!
//! This crate owns starting, checking and stopping local ClickHouse servers and clusters. It builds
//! on `chstorm-child` only, so that every other crate's tests can use it; it must not import the
//! transports (`chstorm-proto`), the load engine, the gateway or the CLI.

mod cluster;
mod config;
mod control;
mod error;
mod http;
mod launch;
mod ports;
mod process;
mod procfs;
mod remote_servers;
mod server;
mod shared;
mod state;
mod tls;
mod users;
mod zookeeper;

pub use cluster::{
    cluster_status, node_dir, ClusterSpec, LocalCluster, NodeInfo, Topology, CLUSTER_NAME, GATEWAY_CONFIG_FILE,
    MAX_NODES, TOPOLOGY_FILE, ZOOKEEPER_SESSION_TIMEOUT_MS,
};
pub use control::{down, status};
pub use error::LocalError;
pub use http::{ping, QUERY_TIMEOUT};
pub use process::STOP_GRACE;
pub use server::{LocalServer, ServerInfo, ServerSpec};
pub use shared::{kill_and_remove_at_exit, shared_server, shared_tls_server, try_shared_server, try_shared_tls_server};
pub use state::{INFO_FILE, PID_FILE};
pub use users::{ExtraUsersXml, ServerLogin, MAX_EXECUTION_TIME_S};
pub use zookeeper::{ZooKeeperInfo, ZOOKEEPER_DIR, ZOOKEEPER_JAR};
