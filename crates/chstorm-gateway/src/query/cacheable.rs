//! `cacheable`: whether a planned read may be merged with identical reads in flight and its
//! answer reused (`users[*].cache`); the key that says which reads are identical is
//! `crate::cache::key`'s. Pure, as the plan is: the plan calls [`decide`] for users with a
//! cache.
//!
//! Never merged nor cached ([`Uncached`]): anything but a single `SELECT` or `WITH` statement
//! that every grammar of the cluster reads alike (the plan's `kind` comes from
//! `chstorm_sql::reading`: a disputed statement is never a read); a query in a session
//! (`session_id`); a body the gateway did not read whole (streamed, opaque, multipart with its
//! external tables); a call of a non-deterministic function or a system table
//! ([`chstorm_sql::rules::cacheable`], ClickHouse's query cache's own rules); a current database
//! the gateway cannot tell, or a predefined one; and a query whose client asked for none
//! (`no_cache=1`, `Cache-Control: no-cache`).

use super::request::{BodyShape, QueryRequest};
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
