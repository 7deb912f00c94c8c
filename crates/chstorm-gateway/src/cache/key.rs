//! `key`: the cache key of an HTTP read ([`http_key`]) and of a native one ([`native_key`]): the backend request as the replica
//! gets it, minus what each attempt adds (the query_id, the thread grant): the login it runs as (user and password) and the cluster, the
//! protocol, the method, the path with every parameter (the database, every setting, the user's
//! fixed ones and its capped `max_execution_time` among them, `default_format`, the query when
//! it goes in the URL), the gateway's `readonly`, the routing target, the headers that go on
//! (`Accept-Encoding`, `X-ClickHouse-Format`, ... but not the few that cannot change an answer,
//! [`IGNORED_HEADERS`]) and the statement's bytes after the gateway's rewrites. Two gateway
//! users share entries only when all of that is the same: the same ClickHouse login and the
//! same rules.

use crate::cluster::login::BackendLogin;
use crate::query::plan::{Plan, Target};

/// A cache key: the bytes that make two reads identical (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key(pub std::sync::Arc<[u8]>);

/// Request headers a replica's answer does not depend on, left out of the key.
pub const IGNORED_HEADERS: &[&str] =
    &["user-agent", "accept", "accept-language", "referer", "cache-control", "pragma", "traceparent", "tracestate"];

/// Builds a key field by field, each with its length, so no two sequences of fields share bytes.
struct KeyBuf(Vec<u8>);

impl KeyBuf {
    fn new(protocol: u8, plan: &Plan, login: &BackendLogin, cluster: &str, cap: usize) -> KeyBuf {
        let mut k = KeyBuf(Vec::with_capacity(cap + login.user.len() + login.password.len() + cluster.len() + 32));
        k.0.push(protocol);
        k.field(login.user.as_bytes());
        k.field(login.password.as_bytes());
        k.field(cluster.as_bytes());
        let target = match plan.target {
            Target::Shard(s) => s as u64,
            Target::Any => u64::MAX,
            Target::Session(_) => u64::MAX - 1,
        };
        k.0.extend_from_slice(&target.to_le_bytes());
        k
    }

    fn field(&mut self, b: &[u8]) {
        self.0.extend_from_slice(&(b.len() as u64).to_le_bytes());
        self.0.extend_from_slice(b);
    }

    fn done(self) -> Key {
        Key(self.0.into())
    }
}

/// What an HTTP request adds to its plan's key.
pub struct HttpShape<'a> {
    pub method: &'a http::Method,
    /// The client's headers that go on to the replica.
    pub headers: &'a http::HeaderMap,
    /// The client's body (the replica gets the plan's `replace_body` instead, when it has one).
    pub body: &'a [u8],
    /// The gateway sends `readonly=1` last.
    pub readonly: bool,
}

/// The key of an HTTP read planned as `plan`, running as `login` on `cluster`.
pub fn http_key(plan: &Plan, login: &BackendLogin, cluster: &str, shape: HttpShape<'_>) -> Key {
    let url = plan.url_without_ids();
    let mut k = KeyBuf::new(b'h', plan, login, cluster, url.len() + shape.body.len() + 64);
    k.field(shape.method.as_str().as_bytes());
    k.field(url.as_bytes());
    k.0.push(shape.readonly as u8);
    for (name, value) in shape.headers.iter().filter(|(n, _)| !IGNORED_HEADERS.contains(&n.as_str())) {
        k.field(name.as_str().as_bytes());
        k.field(value.as_bytes());
    }
    k.0.push(0xff);
    k.0.extend_from_slice(&plan.want_threads.map_or(u64::MAX, |n| n as u64).to_le_bytes());
    k.field(plan.replace_body.as_deref().map_or(shape.body, str::as_bytes));
    k.done()
}

/// The key of a native read planned as `plan`, running as `login` on `cluster` in `database`:
/// `packet` is its backend Query packet without the thread grant, from its settings on (the
/// packet's head, its query_id and the client's `ClientInfo`, is left out: the client's name,
/// host and address change no answer), at the client's `revision`, which shapes the answer's
/// packets.
pub fn native_key(
    plan: &Plan,
    login: &BackendLogin,
    cluster: &str,
    database: &str,
    revision: u64,
    packet: &[u8],
) -> Key {
    let mut k = KeyBuf::new(b'n', plan, login, cluster, packet.len() + database.len() + 32);
    k.field(database.as_bytes());
    k.0.extend_from_slice(&revision.to_le_bytes());
    k.0.extend_from_slice(&plan.want_threads.map_or(u64::MAX, |n| n as u64).to_le_bytes());
    k.field(packet);
    k.done()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::login::BackendLogin;
    use crate::config::{Config, Login, User, UserCache};
    use crate::query::request::QueryRequest;
    use http::{HeaderMap, Method};
    use std::time::Duration;

    /// The plan of `sql` with URL parameters `query`, for the example config's `default` user
    /// with a cache.
    fn plan_of(query: &str, sql: &str) -> Plan {
        let c = Config::parse(include_str!("../../../../docs/gateway.example.yaml"), std::path::Path::new("g.yaml"));
        let c = c.unwrap();
        let mut u: User = c.users["default"].clone();
        u.cache = Some(UserCache { ttl: Duration::from_secs(1), max_entry_size: 1024, max_waiters: 4 });
        let params = crate::request::parse_params(Some(query));
        let req = QueryRequest::held(params, sql, crate::config::DEFAULT_MAX_QUERY_DEPTH);
        crate::query::plan::plan(req, &u, &c.clusters["storm"], None, || "gen-1".into()).unwrap()
    }

    /// What makes two reads' keys differ: everything the replica reads, and nothing else.
    #[test]
    fn a_key_holds_what_the_replica_gets() {
        let login = BackendLogin::new(&Login { user: "app".into(), password: "pw".into() }, 0);
        let other = BackendLogin::new(&Login { user: "app".into(), password: "other".into() }, 0);
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, http::HeaderValue::from_static(v));
            }
            h
        };
        let key = |q: &str, login: &crate::cluster::login::BackendLogin, h: &HeaderMap, body: &[u8], ro: bool| {
            let p = plan_of(q, "SELECT 1");
            http_key(&p, login, "storm", HttpShape { method: &Method::POST, headers: h, body, readonly: ro })
        };
        let none = HeaderMap::new();
        let base = key("max_threads=2", &login, &none, b"SELECT 1", false);
        // The query_id and the headers that cannot change an answer are not in it.
        assert_eq!(base, key("max_threads=2&query_id=abc", &login, &none, b"SELECT 1", false));
        let ua = headers(&[("user-agent", "curl"), ("accept", "*/*"), ("cache-control", "no-cache")]);
        assert_eq!(base, key("max_threads=2", &login, &ua, b"SELECT 1", false));
        // Everything the replica reads is.
        for (what, k) in [
            ("a setting", key("max_threads=3", &login, &none, b"SELECT 1", false)),
            ("another setting", key("max_threads=2&extremes=0", &login, &none, b"SELECT 1", false)),
            ("the database", key("max_threads=2&database=d", &login, &none, b"SELECT 1", false)),
            ("the login", key("max_threads=2", &other, &none, b"SELECT 1", false)),
            ("readonly", key("max_threads=2", &login, &none, b"SELECT 1", true)),
            (
                "the encoding",
                key("max_threads=2", &login, &headers(&[("accept-encoding", "gzip")]), b"SELECT 1", false),
            ),
            ("the body", key("max_threads=2", &login, &none, b"SELECT 2", false)),
        ] {
            assert_ne!(base, k, "{what}");
        }
    }
}
