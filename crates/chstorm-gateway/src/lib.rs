//! chstorm's HTTP gateway in front of a ClickHouse cluster.
//!
//! The request path, in the order a query runs; a lower layer never names a higher one:
//!
//! * [`config`], [`log`], [`metrics`]: the configuration, JSON logs and Prometheus metrics.
//! * The cluster: [`replica`] (runtime state and the health state machine), [`balancer`]
//!   (selection over snapshots) and [`health`] (active probes), joined by snapshots and down
//!   signals; [`budget`]: the per-replica thread budget (`threads:`), RAII grants; [`upstream`]:
//!   kept-alive pools per replica (one per worker) behind the `Backend` trait; [`backend_io`]: its
//!   connections, reset when dropped mid-exchange so a server never takes a cut-short body for a
//!   whole one. [`route`]: shard routing (bit-exact cityHash64, weights, WHERE-key extraction,
//!   table rewrite); [`sql_rules`]: what the rules read in a statement.
//! * [`query`]: the query core both fronts call: a protocol-neutral request, authentication,
//!   admission (limits with FIFO queues and fast rejection; RAII permits), the plan (pure: user
//!   rules, routing, parameters), one refusal form (an HTTP status and a ClickHouse code), and
//!   the one exit that records every query's end.
//! * [`attempt`]: retries and hedged reads under one policy and one budget; per-try deadlines
//!   from [`hedge`]; a hedge only for a silent replica; queries of death kept to one replica by
//!   [`quarantine`].
//! * [`state`]: everything a query needs, built from one config and swapped on reload.
//! * The fronts: [`http`] (connections and their timeouts, ClickHouse's endpoints, the query
//!   service, request bodies, the answer and the response bodies that carry the guards) and
//!   [`native`] (ClickHouse's native TCP protocol on `listen_native`, and over TLS, relaying
//!   packets unchanged).
//! * Running it: [`server`], [`listen`], [`drain`] (the listeners, TLS, SO_REUSEPORT, the
//!   graceful stop on SIGTERM; SIGHUP reloads), [`workers`] (the threads that serve the
//!   connections, each a current-thread runtime with its own pools), [`notify`] (systemd's
//!   readiness, reload, stop and watchdog notifications over `NOTIFY_SOCKET`).
//!
//! ClickHouse's own rules (retry-safe codes, exception parsing, statement kinds) come from
//! `chstorm_proto::rules`. This crate must not import the load engine, the outputs or the CLI.
//!
//! `examples/floor_relay.rs` is not part of the gateway: two relays with nothing of it (a byte
//! copy, a bare hyper proxy) that `scripts/bench_gateway_cpu.py` measures beside it, the floor
//! under its CPU per query.

mod attempt;
mod backend_io;
mod balancer;
mod budget;
mod config;
mod drain;
mod health;
mod hedge;
mod http;
mod listen;
mod log;
mod metrics;
mod native;
mod notify;
mod quarantine;
mod query;
mod replica;
pub mod request;
pub mod route;
mod server;
mod sql_rules;
mod state;
mod upstream;
mod workers;

pub use config::Config;
pub use server::{Gateway, GatewayError};
