//! chstorm's HTTP gateway in front of a ClickHouse cluster.
//!
//! A query's path, in the order it runs (docs/GATEWAY.md, "The request path", has the table):
//!
//! 1. [`runtime`]: a worker thread accepts the connection.
//! 2. The front: [`http`] (`conn`, `endpoints`) or [`native`] (`session`).
//! 3. The wire form becomes one [`query::request::QueryRequest`] (`http::service` and
//!    `http::read`, or `native::query`).
//! 4. [`query`]: authentication, admission (RAII permits), the pure plan.
//! 5. [`attempt`]: the tries on replicas, under one policy, with hedging and the KILL guard.
//! 6. [`cluster`]: which replica, its health, its pools, its thread grants.
//! 7. The answer back through the front (`http::respond`, `http::body`, or the native relay),
//!    and [`query::exit`], the one place every query's end is recorded.
//!
//! The request path, in the order a query runs; a lower layer never names a higher one:
//!
//! * [`config`] (the YAML configuration, its types and parsing in one module per section),
//!   [`log`], [`metrics`]: JSON logs and Prometheus metrics.
//! * [`cluster`]: [`cluster::replica`] (runtime state and the health state machine),
//!   [`cluster::balancer`] (selection over snapshots, with a seeded RNG) and [`cluster::health`]
//!   (active probes), joined by snapshots and down signals; [`cluster::budget`]: the
//!   per-replica thread budget (`threads:`), RAII grants; [`cluster::upstream`]: kept-alive
//!   pools per replica (one per worker) behind the `Backend` trait: [`cluster::h1`], the
//!   gateway's own HTTP/1 client, for `http://` replicas, hyper's for `https://` ones
//!   ([`cluster::backend_io`]); both reset a connection dropped mid-exchange so a server never
//!   takes a cut-short body for a whole one.
//! * [`query`]: the query core both fronts call: a protocol-neutral request, authentication,
//!   admission (limits with FIFO queues and fast rejection; RAII permits), the plan (pure: user
//!   rules, routing, parameters), one refusal form (an HTTP status and a ClickHouse code), and
//!   the one exit that records every query's end.
//! * [`attempt`]: retries and hedged reads under one policy and one budget, a state machine over
//!   the attempts in flight; per-try deadlines from `attempt::hedge`; a hedge only for a silent
//!   replica; queries of death kept to one replica by `attempt::quarantine`; the KILL guard.
//! * [`cache`]: the result cache and the merging of identical reads in flight
//!   (`users[*].cache`): kept answers within their TTL and the gateway-wide bound, and one
//!   running query's answer shared by its identical reads; the plan decides what may be shared
//!   (`query::cacheable`), the fronts run the shared queries and serve the kept answers.
//! * [`state`]: everything a query needs, built from one config and swapped on reload.
//! * The fronts: [`http`] (connections and their timeouts, ClickHouse's endpoints, the query
//!   service, request bodies, the answer and the response bodies that carry the guards) and
//!   [`native`] (ClickHouse's native TCP protocol on `listen_native`, and over TLS, relaying
//!   packets unchanged).
//! * [`runtime`]: running it: the listeners (TLS, SO_REUSEPORT) and the graceful stop on
//!   SIGTERM, SIGHUP reloads, the worker threads (each a current-thread runtime with its own
//!   pools), systemd's readiness, reload, stop and watchdog notifications.
//!
//! * `header_values`: the header values a thread sees again and again (a replica's
//!   `Content-Type`, a client's `Host`), made once and shared, for both sides' head parsers.
//! * `out_of_line`: rare paths (hyper's connection, a TLS handshake, a multipart body, a backend
//!   connect, the attempt loop's rare events) made and polled out of line, so the poll functions
//!   of the usual request keep small stack frames.
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

mod attempt;
mod cache;
mod cluster;
mod config;
mod header_values;
mod http;
mod log;
mod metrics;
mod native;
mod out_of_line;
mod query;
pub mod request;
mod runtime;
mod signal;
mod state;

pub use config::Config;
pub use runtime::error::GatewayError;
pub use runtime::server::{Gateway, Signals};
