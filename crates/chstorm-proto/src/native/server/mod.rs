//! The server side of the native protocol, for a proxy that speaks it to clients and relays
//! their queries to servers (chstorm's gateway on `listen_native`).
//!
//! * [`packets`]: the client's Hello and Query read, the server's Hello and Exception written,
//!   and the Hello and Query a proxy sends a backend for its client at the client's revision.
//! * [`typed_settings`]: the settings of a Query packet at revision 54412 and below, each value
//!   in its setting's own binary type (ClickHouse 18.16's table of settings).
//! * [`block`]: where a data block ends, plain or in compressed frames (LZ4, ZSTD, none), so it
//!   can be relayed as the bytes read, within a memory account.
//! * [`scan`]: where a server packet ends, found in the bytes already read without awaiting;
//!   what it does not know is left to the readers of [`block`] and [`super::packets`].
//!
//! Packet codes, protocol revisions and the column skipper are the client codec's
//! ([`super::packets`], [`super::columns`]); the Query packet's settings never go through
//! [`super::settings`] (a SQL `SETTINGS` clause, what chstorm's own client sends instead).

pub mod block;
pub mod packets;
pub mod scan;
pub mod typed_settings;
