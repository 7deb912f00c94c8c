//! The HTTP front: ClickHouse's HTTP interface over the query core (`crate::query`).
//!
//! * [`conn`]: one client connection (HTTP/1, its timeouts, answers spelled as 18.16 sends
//!   them; [`wire`]: the gateway's own HTTP/1 server for the usual requests, hyper's for the
//!   rest), and where each request goes ([`endpoints`]: ClickHouse's paths, `/replicas_status`);
//!   [`client_body`]: request bodies with an idle timeout and a minimum rate; [`client_fin`]: a
//!   client's FIN, which ends a read and lets any other statement run to its end.
//! * [`service`]: a query request: global admission, authentication, user admission, then the
//!   body read ([`read`]: held, streamed or opaque), the plan, the attempts and the answer.
//! * [`respond`]: the answer's head and its one-line errors, with the gateway's own headers
//!   ([`ids`], written by the answer writer); [`body`]: response bodies that
//!   carry the guards (permits, grants, the KILL guard), and a small answer held whole so that it
//!   leaves in one write.

pub mod body;
pub mod cached;
pub mod client_body;
pub mod client_fin;
pub mod conn;
pub mod endpoints;
pub mod ids;
pub mod read;
pub mod respond;
pub mod service;
pub mod session;
pub mod wire;
