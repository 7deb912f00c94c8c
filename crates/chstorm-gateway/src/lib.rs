//! chstorm's HTTP gateway in front of a ClickHouse cluster.
//!
//! The request path, in small pieces:
//! * [`server`], [`listen`], [`conn`], [`drain`]: the listeners (TLS, SO_REUSEPORT), one client
//!   connection with its timeouts ([`client_body`]: request bodies with an idle timeout), where
//!   each request goes ([`endpoints`]: ClickHouse's paths, `/replicas_status`), and the graceful
//!   stop on SIGTERM; SIGHUP reloads. [`workers`]: the threads that serve the connections, each
//!   a current-thread runtime with its own pools.
//! * [`layers`]: tower layers, built once per config: global admission, authentication, user
//!   admission, then [`proxy`].
//! * [`proxy`]: one request, [`read`] (parameters and body: held, streamed or opaque), [`plan`]
//!   (pure: user rules, [`sql_rules`], routing, parameters), [`attempt`] (retries and hedged
//!   reads under one policy and one budget, a state machine over the attempts in flight;
//!   per-try deadlines from `attempt::hedge`; a hedge only for a silent replica; queries of
//!   death kept to one replica by `attempt::quarantine`; the KILL guard), and [`respond`],
//!   the one exit that records every outcome; [`body`]: response bodies that carry the guards,
//!   and a small answer held whole so that it leaves in one write.
//! * [`route`]: shard routing (bit-exact cityHash64, weights, WHERE-key extraction, table rewrite).
//! * [`replica`] (runtime state and the health state machine), [`balancer`] (selection over
//!   snapshots) and [`health`] (active probes), joined by snapshots and down signals.
//! * [`admission`]: limits with FIFO queues and fast rejection; RAII permits.
//! * [`budget`]: the per-replica thread budget (`threads:`); RAII grants.
//! * [`upstream`]: kept-alive pools per replica (one per worker) behind the `Backend` trait; [`backend_io`]: its
//!   connections, reset when dropped mid-exchange so a server never takes a cut-short body for a
//!   whole one.
//! * [`native`]: ClickHouse's native TCP protocol on `listen_native` (and over TLS), through the
//!   same authentication, admission, [`plan`] and [`attempt`] loop, relaying packets unchanged.
//! * [`metrics`], [`log`]: Prometheus metrics and JSON logs. [`notify`]: systemd's readiness,
//!   reload, stop and watchdog notifications over `NOTIFY_SOCKET`.
//!
//! ClickHouse's own rules (retry-safe codes, exception parsing, statement kinds) come from
//! `chstorm_proto::rules`. This crate must not import the load engine, the outputs or the CLI.
//!
//! `examples/floor_relay.rs` is not part of the gateway: two relays with nothing of it (a byte
//! copy, a bare hyper proxy) that `scripts/bench_gateway_cpu.py` measures beside it, the floor
//! under its CPU per query.

mod admission;
mod attempt;
mod backend_io;
mod balancer;
mod body;
mod budget;
mod client_body;
mod config;
mod conn;
mod drain;
mod endpoints;
mod health;
mod layers;
mod listen;
mod log;
mod metrics;
mod native;
mod notify;
mod plan;
mod proxy;
mod read;
mod replica;
pub mod request;
mod respond;
pub mod route;
mod server;
mod sql_rules;
mod state;
mod upstream;
mod workers;

pub use config::Config;
pub use server::{Gateway, GatewayError};
