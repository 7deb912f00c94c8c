//! chstorm's HTTP gateway in front of a ClickHouse cluster.
//!
//! The request path, in small pieces:
//! * [`runtime`]: the process: listeners (TLS, SO_REUSEPORT) and the graceful stop on SIGTERM,
//!   SIGHUP reloads, the worker threads (each a current-thread runtime with its own pools), and
//!   systemd's notifications.
//! * [`conn`]: one client connection with its timeouts ([`client_body`]: request bodies with an
//!   idle timeout; [`client_fin`]: a client's FIN, which ends a read and lets a write run), and
//!   where each request goes ([`endpoints`]: ClickHouse's paths, `/replicas_status`).
//! * [`layers`]: tower layers, built once per config: global admission, authentication, user
//!   admission, then [`proxy`].
//! * [`proxy`]: one request, [`read`] (parameters and body: held, streamed or opaque), [`plan`]
//!   (pure: user rules, routing, parameters), [`attempt`] (retries and hedged reads under one
//!   policy and one budget; per-try deadlines from [`hedge`]; a hedge only for
//!   a silent replica; queries of death kept to one replica by [`quarantine`]), and [`respond`],
//!   the one exit that records every outcome; [`body`]: response bodies that carry the guards,
//!   and a small answer held whole so that it leaves in one write.
//! * [`cluster`]: [`cluster::replica`] (runtime state and the health state machine),
//!   [`cluster::balancer`] (selection over snapshots, with a seeded RNG) and [`cluster::health`]
//!   (active probes), joined by snapshots and down signals; [`cluster::budget`]: the
//!   per-replica thread budget (`threads:`), RAII grants; [`cluster::upstream`]: kept-alive
//!   pools per replica (one per worker) behind the `Backend` trait; [`cluster::backend_io`]: its
//!   connections, reset when dropped mid-exchange so a server never takes a cut-short body for
//!   a whole one.
//! * [`admission`]: limits with FIFO queues and fast rejection; RAII permits.
//! * [`native`]: ClickHouse's native TCP protocol on `listen_native` (and over TLS), through the
//!   same authentication, admission, [`plan`] and [`attempt`] loop, relaying packets unchanged.
//! * [`config`]: the YAML configuration, its types and parsing in one module per section.
//! * [`metrics`], [`log`]: Prometheus metrics and JSON logs.
//!
//! ClickHouse's own rules (retry-safe codes, exception parsing, statement kinds) come from
//! `chstorm_proto::rules`; the reading of SQL text (the lexer, shard routing with bit-exact
//! cityHash64, weights, WHERE-key extraction and table rewrite, the rules on settings, table
//! functions and nesting depth) from `chstorm_sql`. This crate must not import the load engine,
//! the outputs or the CLI.
//!
//! `examples/floor_relay.rs` is not part of the gateway: two relays with nothing of it (a byte
//! copy, a bare hyper proxy) that `scripts/bench_gateway_cpu.py` measures beside it, the floor
//! under its CPU per query.

mod admission;
mod attempt;
mod body;
mod client_body;
mod client_fin;
mod cluster;
mod config;
mod conn;
mod endpoints;
mod hedge;
mod layers;
mod log;
mod metrics;
mod native;
mod plan;
mod proxy;
mod quarantine;
mod read;
pub mod request;
mod respond;
mod runtime;
mod state;

pub use config::Config;
pub use runtime::error::GatewayError;
pub use runtime::server::Gateway;
