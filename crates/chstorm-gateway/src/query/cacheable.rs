//! `cacheable`: whether a planned read may be merged with identical reads in flight and its
//! answer reused (`users[*].cache`), and the key that says which reads are identical. Pure, as
//! the plan is: the plan calls [`decide`] for users with a cache, the HTTP front calls [`http_key`]
//! with what only it knows (the headers, the body).
//!
//! Never merged nor cached ([`Uncached`]): anything but a single `SELECT` or `WITH` statement
//! that every grammar of the cluster reads alike (the plan's `kind` comes from
//! `chstorm_sql::reading`: a disputed statement is never a read); a query in a session
//! (`session_id`); a body the gateway did not read whole (streamed, opaque, multipart with its
//! external tables); a call of a non-deterministic function or a system table
//! ([`chstorm_sql::rules::cacheable`], ClickHouse's query cache's own rules); a current database
//! the gateway cannot tell, or a predefined one; and a query whose client asked for none
//! (`no_cache=1`, `Cache-Control: no-cache`).
//!
//! The key is the backend request as the replica gets it, minus what each attempt adds (the
//! query_id, the thread grant): the login it runs as (user and password) and the cluster, the
//! protocol, the method, the path with every parameter (the database, every setting, the user's
//! fixed ones and its capped `max_execution_time` among them, `default_format`, the query when
//! it goes in the URL), the gateway's `readonly`, the routing target, the headers that go on
//! (`Accept-Encoding`, `X-ClickHouse-Format`, ... but not the few that cannot change an answer,
//! [`IGNORED_HEADERS`]) and the statement's bytes after the gateway's rewrites. Two gateway
//! users share entries only when all of that is the same: the same ClickHouse login and the
//! same rules.

use super::plan::{Plan, Target};
use super::request::{BodyShape, QueryRequest};
use crate::cluster::login::BackendLogin;
use chstorm_sql::reading::Readings;
use chstorm_sql::rules::cacheable::{volatile, Volatile, SYSTEM_DATABASES};
use chstorm_sql::statement::{Class, StatementKind};

/// What the plan says of a query's caching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caching {
    /// The user has no `cache:`.
    Off,
    /// The user has one, and this query is neither merged nor cached.
    Skip(Uncached),
    /// It may be merged and, if the user keeps answers, cached.
    Eligible,
}

/// Why a query of a user with a cache is neither merged nor cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uncached {
    /// Not a single SELECT or WITH read (a write, SHOW, several statements, a disputed text).
    NotSelect,
    /// It runs in a session.
    Session,
    /// Its body was not read whole, or it carries external tables.
    Body,
    /// It reads what changes by itself.
    Volatile(Volatile),
    /// Its current database is a predefined one, or not known.
    Database,
    /// The client asked (`no_cache=1`, `Cache-Control: no-cache`).
    Asked,
}

impl Uncached {
    /// The metrics label.
    pub fn label(&self) -> &'static str {
        match self {
            Uncached::NotSelect => "not_select",
            Uncached::Session => "session",
            Uncached::Body => "body",
            Uncached::Volatile(Volatile::Function(_)) => "function",
            Uncached::Volatile(Volatile::SystemTable(_)) => "system_table",
            Uncached::Database => "database",
            Uncached::Asked => "asked",
        }
    }
}

/// The `no_cache` parameter, taken out of `params` (the server knows no such setting): true
/// when it asks for no cache (any value but `0` or empty).
pub fn take_no_cache(params: &mut Vec<(String, String)>) -> bool {
    let mut asked = false;
    params.retain(|(k, v)| {
        let it = k == "no_cache";
        asked |= it && !matches!(v.trim(), "" | "0");
        !it
    });
    asked
}

/// Whether `req`, of kind `kind`, read as `readings`, in a session or not, may be merged and
/// cached; `asked`: its client asked for no cache.
pub fn decide(
    req: &QueryRequest<'_>,
    readings: Option<&Readings<'_>>,
    kind: StatementKind,
    session: bool,
    asked: bool,
) -> Result<(), Uncached> {
    if asked {
        return Err(Uncached::Asked);
    }
    if session {
        return Err(Uncached::Session);
    }
    if req.body != BodyShape::Held || req.multipart {
        return Err(Uncached::Body);
    }
    let reading = readings.and_then(|r| r.agreed().ok()).filter(|_| kind == StatementKind::Read);
    let Some(reading) = reading.filter(|r| r.classes == [Class::Read] && r.lexed()) else {
        return Err(Uncached::NotSelect);
    };
    let first = reading.tokens.iter().find(|t| !t.is_punct("("));
    if !first.is_some_and(|t| t.is_kw("SELECT") || t.is_kw("WITH")) {
        return Err(Uncached::NotSelect);
    }
    if let Some(v) = volatile(&reading.tokens) {
        return Err(Uncached::Volatile(v));
    }
    match crate::request::current_database(&req.params, req.database) {
        Some(db) if db.is_empty() || SYSTEM_DATABASES.contains(&db) => Err(Uncached::Database),
        _ => Ok(()),
    }
}

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
