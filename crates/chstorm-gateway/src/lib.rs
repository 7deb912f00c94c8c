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
//! * [`upstream`]: the kept-alive backend pool; [`backend_io`]: its connections, reset when
//!   dropped mid-exchange so a server never takes a cut-short body for a whole one.
//! * [`metrics`], [`log`]: Prometheus metrics and JSON logs.
//! * [`server`]: the listeners, TLS and SIGHUP reload; [`conn`]: one client connection, its
//!   timeouts, and where each request goes ([`endpoints`]: ClickHouse's paths, `/replicas_status`);
//!   [`client_body`]: request bodies with an idle timeout.

pub mod admission;
pub mod backend_io;
pub mod balancer;
pub mod body;
pub mod budget;
pub mod client_body;
pub mod config;
pub mod conn;
pub mod endpoints;
pub mod health;
pub mod layers;
pub mod log;
pub mod metrics;
pub mod proxy;
pub mod request;
pub mod route;
pub mod server;
pub mod state;
pub mod upstream;

pub use config::Config;
pub use server::{Gateway, GatewayError};
