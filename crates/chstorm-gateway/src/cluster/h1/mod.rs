//! The gateway's own HTTP/1 client for `http://` replicas: a request is written, and its answer
//! read, by the task of the request that sends it. A pooled hyper client drives each connection
//! in a task of its own and hands requests and answers to it over channels; every exchange then
//! costs wake-ups on both sides of that hand-off, which on 2 cores was the largest single cost
//! of the gateway's CPU per `SELECT 1` (docs/PERFORMANCE.md, the floor relays). Written here
//! rather than taken from a crate because no well-kept client works that way; the parsing is
//! `httparse`'s, as hyper's is.
//!
//! * [`pool`]: the kept-alive connections to one replica for one worker thread.
//! * [`conn`]: one connection; reset, not closed, when dropped with a request unanswered.
//! * [`request`]: writes a request (one write for a held body).
//! * [`answer`]: reads an answer's head and streams its body; the connection goes back to its
//!   pool at the body's end.
//! * [`spelling`]: the replica's header-name spelling, for the answers whose spelling the front
//!   would change.
//!
//! `https://` replicas stay on hyper's client ([`super::upstream`]).

pub mod answer;
pub mod conn;
pub mod pool;
pub mod request;
pub mod spelling;

use crate::cluster::message::{BackendError, BackendRequest, GBody};
use http_body_util::BodyExt;
use pool::Pool;
use std::sync::Arc;

/// Sends `req` over a connection of `pool`; resolves with the answer head, its body streaming
/// off the connection. Dropping the future drops the connection (reset when the request was
/// sent and not answered).
pub async fn send(pool: Arc<Pool>, mut req: BackendRequest) -> Result<http::Response<GBody>, BackendError> {
    let mut conn = pool.checkout().await?;
    let sent = request::write(&mut conn, &mut req, &pool.authority).await?;
    let is_head = req.method == http::Method::HEAD;
    drop(req);
    let head = answer::read_head(&mut conn, is_head).await?;
    let keep_alive = head.keep_alive && sent == request::Sent::Whole;
    let body = answer::Answer::new(conn, pool, keep_alive, head.framing);
    let mut resp = http::Response::from_parts(head.parts, body.boxed_unsync());
    if let Some(names) = head.spelled {
        resp.extensions_mut().insert(spelling::BackendSpelling);
        resp.extensions_mut().insert(spelling::SpelledNames::of(&names));
    }
    Ok(resp)
}

#[cfg(test)]
mod tests;
