//! The gateway's own headers on a query's answer: `X-ChStorm-Replica` (the replica that
//! answered), `X-ChStorm-Route`, `X-ClickHouse-Query-Id` (the client's query_id),
//! `X-ChStorm-Threads` (the thread grant), and two that most answers lack: `X-Chstorm-Stale` (a
//! read answered by a replica not known fresh, because none of its shard was: its delay in
//! seconds, or `unknown`) and `X-Chstorm-Warning` (a statement that will exist on one replica
//! only). They travel beside the answer as [`Ids`] ([`Served`],
//! then the own front's `super::wire::Reply`) and are written by the own front's answer writer
//! ([`super::wire::answer`]) as it writes the head: inserted into the answer's header map, each
//! hashing its name, they were 1,500 instructions of a proxied `SELECT 1`'s 43,000 (callgrind,
//! `scripts/bench_gateway_instructions.py`, 2026-11-27). hyper's server, which writes only the map, gets them inserted
//! ([`Ids::insert_into`]); both write the same bytes.
//!
//! They go where `HeaderMap::insert` would put them, in the order above: in place of the first
//! header of the same name the answer has (its others dropped), else after the answer's own.

use crate::cluster::replication::Freshness;
use crate::cluster::upstream::GBody;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response};

static X_CHSTORM_REPLICA: HeaderName = HeaderName::from_static("x-chstorm-replica");
static X_CHSTORM_ROUTE: HeaderName = HeaderName::from_static("x-chstorm-route");
static X_CLICKHOUSE_QUERY_ID: HeaderName = HeaderName::from_static("x-clickhouse-query-id");
static X_CHSTORM_THREADS: HeaderName = HeaderName::from_static("x-chstorm-threads");
static X_CHSTORM_STALE: HeaderName = HeaderName::from_static("x-chstorm-stale");
static X_CHSTORM_WARNING: HeaderName = HeaderName::from_static("x-chstorm-warning");

/// The names, in the order they go.
pub static NAMES: [&HeaderName; 6] = [
    &X_CHSTORM_REPLICA,
    &X_CHSTORM_ROUTE,
    &X_CLICKHOUSE_QUERY_ID,
    &X_CHSTORM_THREADS,
    &X_CHSTORM_STALE,
    &X_CHSTORM_WARNING,
];

/// A query's ids, as its answer carries them.
#[derive(Debug, Clone)]
pub struct Ids {
    /// The replica's label; None when no replica answered.
    pub replica: Option<HeaderValue>,
    pub route: &'static str,
    /// The query_id the client sees; left out when it is not a header value (a control
    /// character), as `HeaderValue::from_str` would refuse it.
    pub query_id: String,
    pub threads: Option<usize>,
    /// How the replica that answered was judged: a stale or unknown one when no fresher was there.
    pub stale: Freshness,
    /// Why the statement will exist on one replica only.
    pub warning: Option<&'static str>,
}

impl Ids {
    /// Which of [`NAMES`] `name` is.
    pub fn index(name: &HeaderName) -> Option<usize> {
        // Every one of them starts so; most of an answer's names do not.
        if !name.as_str().starts_with("x-c") {
            return None;
        }
        NAMES.iter().position(|n| *n == name)
    }

    /// The value of the `i`th of [`NAMES`], if the answer has one; `n` holds a number's text.
    pub fn value<'s>(&'s self, i: usize, n: &'s mut itoa::Buffer) -> Option<&'s [u8]> {
        match i {
            0 => self.replica.as_ref().map(HeaderValue::as_bytes),
            1 => Some(self.route.as_bytes()),
            2 => Some(self.query_id.as_bytes()).filter(|v| v.iter().all(|b| *b == b'\t' || (32..127).contains(b))),
            3 => self.threads.map(|t| n.format(t).as_bytes()),
            4 => match self.stale {
                Freshness::Fresh => None,
                Freshness::Unknown => Some(b"unknown"),
                Freshness::Stale(d) => Some(n.format(d).as_bytes()),
            },
            5 => self.warning.map(str::as_bytes),
            _ => None,
        }
    }

    /// Inserted into `headers`, as the answer writer writes them.
    pub fn insert_into(&self, headers: &mut HeaderMap) {
        for (i, name) in NAMES.iter().enumerate() {
            let v = self.value(i, &mut itoa::Buffer::new()).map(Bytes::copy_from_slice);
            if let Some(Ok(v)) = v.map(HeaderValue::from_maybe_shared) {
                headers.insert((*name).clone(), v);
            }
        }
    }
}

/// An answer of the query service, with the gateway's ids when it answers a planned query.
pub struct Served {
    pub resp: Response<GBody>,
    pub ids: Option<Ids>,
}

impl From<Response<GBody>> for Served {
    fn from(resp: Response<GBody>) -> Served {
        Served { resp, ids: None }
    }
}

impl Served {
    /// The answer with its ids in its header map, as hyper's server writes it
    /// (`super::wire::Reply::into_inserted`; the tests read the map).
    pub fn into_response(self) -> Response<GBody> {
        let mut resp = self.resp;
        if let Some(ids) = self.ids {
            ids.insert_into(resp.headers_mut());
        }
        resp
    }
}
