//! The gateway's process: its listeners and their graceful stop, its threads, and the service
//! manager's notifications. The request path starts below it, in the protocol fronts
//! ([`crate::conn`] for HTTP, [`crate::native`]).
//!
//! * [`server`]: starts the gateway (config, state, listeners, TLS), SIGHUP reloads, SIGTERM stops.
//! * [`listen`]: binding a listening socket (`reuse_port`, backlog).
//! * [`workers`]: the worker threads, each a current-thread runtime with its own pools.
//! * [`drain`]: the graceful stop: counting connections, telling them to close.
//! * [`notify`]: systemd's readiness, reload, stop and watchdog notifications.
//! * [`error`]: what stops the gateway from starting.

pub mod drain;
pub mod error;
pub mod listen;
pub mod notify;
pub mod server;
pub mod workers;
