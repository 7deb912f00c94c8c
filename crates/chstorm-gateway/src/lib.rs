//! chstorm's HTTP gateway in front of a ClickHouse cluster.
//!
//! * [`config`]: the YAML config, validated.
//! * [`layers`]: the request path as tower layers (global admission, authentication, per-user
//!   admission, proxy), in that order.
//! * [`proxy`]: rules, routing, replica choice, safe retries, streaming, KILL QUERY on disconnect.
//! * [`route`]: shard routing (bit-exact cityHash64, weights, WHERE-key extraction, table rewrite).
//! * [`balancer`] + [`health`]: replica selection over snapshots published by active probes and
//!   passive failure detection.
//! * [`admission`]: limits with FIFO queues and fast rejection; RAII permits.
//! * [`budget`]: the per-replica thread budget (`threads:`): each query's `max_threads` granted
//!   from a shared total; RAII grants.
//! * [`upstream`]: the kept-alive backend pool.
//! * [`metrics`], [`log`]: Prometheus metrics and JSON logs.
//! * [`server`]: the listener, TLS and SIGHUP reload.
//! * [`sql_rules`]: the settings and table functions a query names, for the user rules.

pub mod admission;
pub mod attempt;
pub mod balancer;
pub mod body;
pub mod budget;
pub mod config;
pub mod drain;
pub mod health;
pub mod hedge;
pub mod layers;
pub mod listen;
pub mod log;
pub mod metrics;
pub mod plan;
pub mod proxy;
pub mod read;
pub mod replica;
pub mod request;
pub mod respond;
pub mod route;
pub mod server;
pub mod sql_rules;
pub mod state;
pub mod upstream;

pub use config::Config;
pub use server::{Gateway, GatewayError};
