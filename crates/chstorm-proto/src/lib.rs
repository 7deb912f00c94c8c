//! ClickHouse transports used by chstorm.
//!
//! * [`target`]: parsing of `http://`, `https://`, `clickhouse://` and `clickhouses://` URLs.
//! * [`http`]: a lean HTTP/1.1 client that writes pre-rendered requests and discards bodies.
//! * [`native`]: a client for ClickHouse's native TCP protocol (up to revision 54460), and its server
//!   side ([`native::server`]: a client's packets read, a server's written, blocks delimited).
//! * [`stream`]: TCP or TLS byte streams with connect timeouts.
//! * [`error`]: one error type that says who is at fault and whether a retry is safe.
//! * [`rules`]: ClickHouse's rules shared by every part of chstorm: retry-safe exception codes,
//!   exception parsing, statement kinds.
//! * [`cancel`]: giving up on a query without leaving it running on the server.
//! * [`versions`]: what differs between ClickHouse releases (18.16 and current ones), and the
//!   native revision chstorm speaks.
//!
//! # Boundaries
//!
//! This crate owns talking to ClickHouse (URLs, HTTP, native, TLS, errors, ClickHouse's rules),
//! and the native protocol's wire format from the server's side (what the gateway's native port
//! reads and writes as a ClickHouse server); the gateway keeps its sessions, policy and relay.
//! It must not import any other chstorm crate (it uses the local harness only in its tests):
//! the load engine, the gateway and the compare tool all build on it.

pub mod cancel;
pub mod error;
pub mod http;
pub mod mem;
pub mod native;
pub mod rules;
pub mod stream;
pub mod target;
pub mod versions;

#[cfg(test)]
mod test_rng;

pub use error::{Fault, ProtoError};
pub use stream::{Stream, TlsOptions};
pub use target::{Protocol, Target};

/// What one query returned, as counted by the transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryStats {
    /// Bytes of result payload received (HTTP body bytes, native data-block bytes).
    pub bytes: u64,
    /// Result rows, where the transport can count them cheaply (native); 0 otherwise.
    pub rows: u64,
}
