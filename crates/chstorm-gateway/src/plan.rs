//! `plan`: what to do with one request, decided from the request and its user alone. Pure: no
//! I/O, no clocks, no randomness beyond the query_id it is given, so every rule is unit-tested.
//!
//! The plan applies the user's rules (read-only, settings allow-list, fixed settings, capped
//! `max_execution_time`), decides the route (one shard, any replica, or the session's replica),
//! builds the backend parameters in the order ClickHouse must see them, and says what the
//! attempt loop may do with the request (retry, hedge, re-issue on a replica going down).
//!
//! Must not import the attempt loop, the backends or the server: it is called by both the HTTP
//! path and the native one (`crate::native::query`), which feeds it a POST to `/` without
//! headers whose parameters are the Query packet's settings (and `database` from its Hello), and
//! sends the settings of [`Plan::params`] in its Query packet.

use crate::config::{AllowedSettings, Cluster, User};
use crate::request::{encode_params, is_setting, HOP_BY_HOP, SHARD_KEY_HEADER, SHARD_KEY_PARAM};
use chstorm_proto::rules::{statement_kind, StatementKind};
use chstorm_sql::route::changes_distributed_result;
use chstorm_sql::rules::{settings_in_sql, table_functions};
use http::{HeaderMap, Method, StatusCode};
use std::time::Duration;

/// How long the gateway waits for a backend's answer head when the user has no
/// max_execution_time: 10 minutes.
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(600);

/// Headers not passed from the client to a backend besides the hop-by-hop ones: `expect` (the
/// gateway answered it), `host`, the client's credentials (the gateway authenticates to the
/// backends itself), the gateway's own, and the length (the forwarded body sets its own).
const NOT_FORWARDED: &[&str] =
    &["expect", "host", "authorization", "x-clickhouse-user", "x-clickhouse-key", SHARD_KEY_HEADER, "content-length"];

/// A request the gateway refuses, with the one-line reason sent to the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

impl Refusal {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal { status, message: format!("chstorm gateway: {}", message.into()) }
    }
}

/// The request body as the reader found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyShape {
    /// Read whole (at most [`crate::read::MAX_HELD_BODY`]), decompressed when it was compressed.
    Held,
    /// Too big to hold: its head was read to classify the statement, the rest streams through.
    Streamed,
    /// Compressed in a way the gateway cannot read (`decompress=1`, ClickHouse's own block
    /// format; or an unknown `Content-Encoding`): passed through unread.
    Opaque,
}

/// What the plan was made from.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    /// The URL parameters, decoded, in order.
    pub params: Vec<(String, String)>,
    /// The statement as ClickHouse will read it: the `query` parameter joined with the body
    /// (its head when streamed). None when the body is opaque and there is no `query` parameter.
    pub sql: Option<&'a str>,
    pub body: BodyShape,
    /// A multipart/form-data body read by `crate::read` (its fields are in `params`, its
    /// statement in `sql`); a multipart body not read so is refused for users with rules.
    pub form_read: bool,
    /// `limits.max_query_depth`: a statement nesting deeper is refused (Code 167).
    pub max_depth: usize,
}

/// Where the query goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A replica of this shard (0-based): a routed query.
    Shard(usize),
    /// Any replica (through the Distributed table: fan-out).
    Any,
    /// The replica its ClickHouse session lives on (a hash of `session_id`).
    Session(u64),
}

impl Target {
    /// The shard a routed query goes to; None for a fan-out or a session (any shard).
    pub fn shard(&self) -> Option<usize> {
        match self {
            Target::Shard(s) => Some(*s),
            Target::Any | Target::Session(_) => None,
        }
    }

    /// The `route` label of metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Target::Shard(_) => "routed",
            Target::Any => "fanout",
            Target::Session(_) => "session",
        }
    }
}

/// What the attempt loop may do with the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latitude {
    /// Send it again after a failure whose outcome is unknown or that proves nothing ran (a
    /// read, held whole, not in a session).
    pub retry: bool,
    /// Send it again after a failure that proves it never reached the server (connect refused):
    /// any held body, writes too.
    pub resend_unsent: bool,
    /// Send a second copy to another replica when the first is slow, and cancel it when its
    /// replica goes down (a read, held whole, not in a session).
    pub hedge: bool,
}

/// The decision for one request.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The backend request's method: the client's, except that a read-only user's GET goes as a
    /// POST (18.16 refuses `readonly=1` on a GET, which runs with `readonly=2`).
    pub method: Method,
    pub target: Target,
    /// The query_id the backend runs the query under: the client's, in its user's namespace
    /// ([`backend_id`]), or one the gateway made.
    pub query_id: String,
    /// The query_id the client sees (`X-ClickHouse-Query-Id`): its own, or the gateway's.
    pub client_query_id: String,
    /// The backend URL's path and query up to (not including) the parts each attempt adds:
    /// `/?a=1&b=2`, then the thread grant, then `&query_id=...` and, for read-only users, a
    /// final `&readonly=1` (see [`Plan::path_and_query`]).
    path_and_params: String,
    /// `query_id=...[&readonly=1]`: last, so `readonly` applies to the query and not to the
    /// gateway's own settings before it.
    tail: String,
    /// The backend parameters in order, before the thread grant, `query_id` and `readonly`
    /// (which [`Plan::path_and_query`] adds): what the native path sends as settings.
    pub params: Vec<(String, String)>,
    /// Headers to forward.
    pub headers: HeaderMap,
    /// The text to send as the body instead of the client's (a routed query's rewritten text).
    pub replace_body: Option<String>,
    /// The client's own `max_threads` wish, lowered to the budget's maximum; None without a
    /// thread budget.
    pub want_threads: Option<usize>,
    /// Longest wait for an answer head.
    pub head_timeout: Duration,
    /// Longest time for the whole answer (max_execution_time + 1 s), when the user has one.
    pub body_deadline: Option<Duration>,
    pub latitude: Latitude,
    /// A read, or anything else (what a client's FIN does to it: `crate::client_fin`).
    pub kind: StatementKind,
}

impl Plan {
    /// The path and query of one attempt, with its thread grant.
    pub fn path_and_query(&self, threads: Option<usize>) -> String {
        let sep = if self.path_and_params.ends_with('?') { "" } else { "&" };
        match threads {
            Some(n) => format!("{}{sep}max_threads={n}&{}", self.path_and_params, self.tail),
            None => format!("{}{sep}{}", self.path_and_params, self.tail),
        }
    }
}

/// True when the user's settings are restricted: read-only, an allow-list, or fixed settings.
pub(crate) fn restricted(user: &User) -> bool {
    user.readonly || user.allowed_settings != AllowedSettings::Any || !user.settings.is_empty()
}

/// The rules on the statement's own text, for restricted users: a `SETTINGS` clause or a `SET`
/// obeys the same allow-list and fixed settings as URL parameters (a read-only user may use
/// none: the server, running the query with `readonly=1`, would refuse it too), and a read-only
/// user calls no table function (`remote`, `url`, `file`, ... read other servers, URLs and
/// files; 18.16 refuses them all under `readonly=1`). Text the rules cannot read is refused.
fn check_sql(sql: &str, user: &User) -> Result<(), Refusal> {
    if !restricted(user) {
        return Ok(());
    }
    let forbid = |why: String| Refusal::new(StatusCode::FORBIDDEN, why);
    let unreadable = |e: chstorm_sql::rules::SqlRuleError| {
        forbid(format!("user '{}' has restricted settings, and the gateway {e}; fix the query's syntax", user.name))
    };
    for (name, value) in settings_in_sql(sql).map_err(unreadable)? {
        if user.readonly {
            return Err(forbid(format!(
                "user '{}' is read-only: a SETTINGS clause or SET ('{name}') is refused; pass allowed settings as \
                 URL parameters",
                user.name
            )));
        }
        if user.settings.iter().any(|(k, _)| *k == name) {
            return Err(forbid(format!("setting '{name}' is fixed for user '{}' and cannot be changed", user.name)));
        }
        if !user.allowed_settings.allows(&name) && !stricter(&name, &value) {
            return Err(forbid(format!("setting '{name}' is not allowed for user '{}'", user.name)));
        }
    }
    if user.readonly {
        if let Some(f) = table_functions(sql).map_err(unreadable)?.first() {
            return Err(forbid(format!(
                "user '{}' is read-only: table function '{f}' is refused (it reads other servers, URLs or files)",
                user.name
            )));
        }
    }
    Ok(())
}

/// True for `readonly` set to 1 or 2: a client may always make itself stricter, whatever its
/// user's allow-list.
fn stricter(name: &str, value: &str) -> bool {
    name == "readonly" && matches!(value.trim(), "1" | "2")
}

/// True for a `multipart/form-data` body: 18.16 reads its plain fields as URL parameters
/// (applied after the URL's) and the `query` fields as the statement.
pub fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("multipart/form-data"))
}

/// The id a client's `query_id` or `session_id` is given on the backend: in its user's
/// namespace, `<user>:<id>` (`%` and `:` in the user name percent-encoded, so no two users
/// share a namespace). Users share one backend login, so a bare id would reach another user's
/// query (`replace_running_query`) or session (its temporary tables and settings). The
/// gateway's own query ids (`chgw-...`) have no `:` prefix and cannot be named by a client.
pub fn backend_id(user: &str, id: &str) -> String {
    format!("{}:{id}", user.replace('%', "%25").replace(':', "%3A"))
}

/// The statement `text` in place of the client's: in the `query` parameter for a GET (a GET
/// stays read-only on the server, and its body is not read), else as the body. Returns the body.
fn replace_statement(method: &Method, params: &mut Vec<(String, String)>, text: String) -> String {
    params.retain(|(k, _)| k != "query");
    if method == Method::GET {
        params.push(("query".into(), text));
        String::new()
    } else {
        text
    }
}

/// A `SET` in a session that sets `readonly` (to 1 or 2), with the settings the gateway adds
/// to every query (`forced`: the user's fixed settings and capped `max_execution_time`, as
/// sent) appended, so the session holds them before it turns read-only. 18.16 then takes the
/// same values in later URLs as unchanged, where a changed one would be refused (`Code: 164
/// Cannot override setting (max_execution_time) in readonly mode`). None for any other
/// statement. Verified on 18.16.1: `SET readonly = 1, max_execution_time = 30` applies both,
/// and a later query with `max_execution_time=30` in the URL runs.
fn set_readonly_with(sql: &str, forced: &[(String, String)]) -> Option<String> {
    if forced.is_empty() || !chstorm_proto::rules::first_keyword(sql).eq_ignore_ascii_case("SET") {
        return None;
    }
    let set = settings_in_sql(sql).ok()?;
    if !set.iter().any(|(k, v)| stricter(k, v)) {
        return None;
    }
    let toks = chstorm_sql::lexer::tokenize(sql);
    let end = toks.iter().rev().find(|t| !t.is_punct(";"))?.end();
    let mut out = sql[..end].to_string();
    for (k, v) in forced {
        let literal = if v.parse::<i64>().is_ok() || v.parse::<u64>().is_ok() || v.parse::<f64>().is_ok() {
            v.clone()
        } else {
            format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
        };
        out.push_str(&format!(", {k} = {literal}"));
    }
    Some(out)
}

/// Refuses a statement nesting deeper than `max_depth` ([`chstorm_sql::rules::nesting_depth`]) with
/// ClickHouse's own error for a too deep query (Code 167, TOO_DEEP_AST, HTTP 400 as 18.16 sends
/// it), before anything else reads the text: 18.16 dies of a stack overflow on about 760 levels,
/// and every later step is spared the depth.
fn check_depth(sql: &str, max_depth: usize) -> Result<(), Refusal> {
    let depth = chstorm_sql::rules::nesting_depth(sql);
    if depth <= max_depth {
        return Ok(());
    }
    Err(Refusal {
        status: StatusCode::BAD_REQUEST,
        message: format!(
            "Code: 167, e.displayText() = DB::Exception: Query is too deep: {depth} levels of brackets and CASE. \
             Maximum: {max_depth} (chstorm gateway, limits.max_query_depth), e.what() = DB::Exception"
        ),
    })
}

/// The hash of a session id that picks its replica.
fn session_hash(id: &str) -> u64 {
    // FNV-1a: stable across processes and gateway instances (std's hasher is randomly seeded).
    id.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// Makes the plan for a request of `user`, whose cluster is `cluster`. `query_id` is used when
/// the client did not set one. `max_per_query` is the thread budget's per-query maximum when the
/// cluster has a budget.
pub fn plan(
    input: PlanInput<'_>,
    user: &User,
    cluster: &Cluster,
    max_per_query: Option<usize>,
    query_id: impl FnOnce() -> String,
) -> Result<Plan, Refusal> {
    let PlanInput { method, path, headers, mut params, sql, body, form_read, max_depth } = input;
    if let Some(text) = sql {
        check_depth(text, max_depth)?;
    }
    let multipart = is_multipart(headers);
    let kind = sql.map_or(StatementKind::Write, statement_kind);

    // The user's rules.
    let forbid = |why: String| Refusal::new(StatusCode::FORBIDDEN, why);
    if restricted(user) && body == BodyShape::Opaque {
        return Err(forbid(format!(
            "user '{}' has rules on settings, and this body is compressed in a format the gateway cannot read \
             (decompress=1 with other than LZ4 frames, or an unknown Content-Encoding); send it uncompressed, with \
             Content-Encoding: gzip, or with decompress=1 and LZ4",
            user.name
        )));
    }
    if restricted(user) && multipart && !form_read {
        return Err(forbid(format!(
            "user '{}' has rules on settings, and the gateway does not read multipart/form-data bodies (their \
             fields are settings and statement text); send the query in the URL or as the body",
            user.name
        )));
    }
    if sql.is_some_and(|q| chstorm_proto::rules::first_keyword(q).eq_ignore_ascii_case("KILL")) {
        return Err(forbid(
            "KILL is refused: the gateway's users share one backend login, so it would reach other users' queries; \
             a query is cancelled when its client disconnects, or replaced by sending its query_id again with \
             replace_running_query=1"
                .into(),
        ));
    }
    if user.readonly && kind != StatementKind::Read {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!(
                "user '{}' is read-only: only SELECT, WITH, SHOW, DESCRIBE, EXISTS and EXPLAIN are allowed",
                user.name
            ),
        ));
    }
    if let Some((k, _)) =
        params.iter().find(|(k, v)| is_setting(k) && !user.allowed_settings.allows(k) && !stricter(k, v))
    {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!("setting '{k}' is not allowed for user '{}'", user.name),
        ));
    }
    if let Some(text) = sql {
        check_sql(text, user)?;
    }
    if body == BodyShape::Streamed && kind == StatementKind::Read {
        return Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "a query over {} MiB; ClickHouse's max_query_size is far smaller: send less text (data goes after \
                 INSERT ... FORMAT)",
                crate::read::MAX_HELD_BODY >> 20
            ),
        ));
    }

    // Parameters for the backend: the client's, minus credentials and the gateway's own, plus
    // the user's fixed settings and a capped max_execution_time.
    let client_query_id =
        params.iter().find(|(k, _)| k == "query_id").map(|(_, v)| v.clone()).filter(|v| !v.is_empty());
    let (query_id, client_query_id) = match client_query_id {
        Some(id) => (backend_id(&user.name, &id), id),
        None => {
            let id = query_id();
            (id.clone(), id)
        }
    };
    let shard_key_param = params.iter().find(|(k, _)| k == SHARD_KEY_PARAM).map(|(_, v)| v.clone());
    for (k, v) in params.iter_mut() {
        if k == "session_id" && !v.is_empty() {
            *v = backend_id(&user.name, v);
        }
    }
    let session = params.iter().find(|(k, v)| k == "session_id" && !v.is_empty()).map(|(_, v)| session_hash(v));
    // A client's own readonly is relayed (it can always make itself stricter); a read-only
    // user's is dropped, for the gateway's readonly=1 sent last.
    params.retain(|(k, _)| {
        let dropped = matches!(k.as_str(), "user" | "password" | "query_id" | SHARD_KEY_PARAM);
        let own_readonly = user.readonly && k == "readonly";
        !(dropped || own_readonly)
    });
    for (k, v) in &user.settings {
        params.retain(|(pk, _)| pk != k);
        params.push((k.clone(), v.clone()));
    }
    if let Some(max) = user.max_execution_time {
        let client = params.iter().find(|(k, _)| k == "max_execution_time").and_then(|(_, v)| v.parse::<f64>().ok());
        let secs = client.filter(|&c| c > 0.0).map_or(max.as_secs_f64(), |c| c.min(max.as_secs_f64()));
        params.retain(|(k, _)| k != "max_execution_time");
        params.push(("max_execution_time".into(), format!("{}", secs.ceil() as u64)));
    }

    // A SET that makes the session read-only first takes the settings the gateway sends with
    // every query, so that they do not break the session's later queries.
    let mut forced: Vec<(String, String)> = user.settings.clone();
    forced
        .extend(params.iter().filter(|(k, _)| k == "max_execution_time" && user.max_execution_time.is_some()).cloned());
    let mut replace_body = match (session, sql.and_then(|q| set_readonly_with(q, &forced))) {
        (Some(_), Some(text)) if !multipart => Some(replace_statement(method, &mut params, text)),
        _ => None,
    };

    // The route: one shard for a read that carries a key and names a routed table; the
    // session's replica for a session (routing would lose its temporary tables and settings).
    let header_key = headers.get(SHARD_KEY_HEADER).and_then(|v| v.to_str().ok());
    let target = match (session, &cluster.routing, sql, kind) {
        (Some(h), _, _, _) => Target::Session(h),
        // A setting that changes a Distributed query's answer (URL, or the native Query packet).
        (None, Some(_), _, _) if params.iter().any(|(k, _)| changes_distributed_result(k)) => Target::Any,
        (None, Some(router), Some(text), StatementKind::Read) if body == BodyShape::Held && !multipart => {
            let database = crate::request::current_database(
                &params,
                headers.get("x-clickhouse-database").and_then(|v| v.to_str().ok()),
            );
            match router.route(text, shard_key_param.as_deref(), header_key, database) {
                Ok(r) => {
                    // The rewritten text replaces the whole statement.
                    replace_body = Some(replace_statement(method, &mut params, r.sql));
                    Target::Shard(r.shard)
                }
                Err(_) => Target::Any,
            }
        }
        _ => Target::Any,
    };

    // The thread budget: the query wants max_per_query threads, or fewer when the client's (or
    // the user's fixed) max_threads says so; each attempt sends its replica's grant instead.
    let want_threads = max_per_query.map(|m| crate::cluster::budget::wanted(&params, m));
    if want_threads.is_some() {
        params.retain(|(k, _)| k != "max_threads");
    }
    if replace_body.is_some() {
        // The new text goes plain, not in ClickHouse's compressed frames.
        params.retain(|(k, _)| k != "decompress");
    }
    let path_and_params = format!("{path}?{}", encode_params(&params));
    let mut tail = encode_params(&[("query_id".to_string(), query_id.clone())]);
    if user.readonly {
        tail.push_str("&readonly=1");
    }

    let mut forwarded = HeaderMap::with_capacity(headers.len());
    for (k, v) in headers {
        if !NOT_FORWARDED.contains(&k.as_str()) && !HOP_BY_HOP.contains(&k.as_str()) {
            forwarded.append(k.clone(), v.clone());
        }
    }
    if replace_body.is_some() || body == BodyShape::Held {
        // A held body is forwarded decompressed.
        forwarded.remove("content-encoding");
    }

    let in_session = matches!(target, Target::Session(_));
    let held_read = kind == StatementKind::Read && body == BodyShape::Held && !in_session;
    let method = if user.readonly && method == Method::GET { Method::POST } else { method.clone() };
    Ok(Plan {
        method,
        target,
        query_id,
        client_query_id,
        path_and_params,
        tail,
        params,
        headers: forwarded,
        replace_body,
        want_threads,
        head_timeout: user.max_execution_time.map_or(DEFAULT_HEAD_TIMEOUT, |d| d + Duration::from_secs(1)),
        body_deadline: user.max_execution_time.map(|d| d + Duration::from_secs(1)),
        latitude: Latitude {
            retry: held_read,
            resend_unsent: body == BodyShape::Held && !in_session,
            hedge: held_read,
        },
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    const EXAMPLE: &str = include_str!("../../../docs/gateway.example.yaml");

    fn cfg() -> Config {
        Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap()
    }

    fn input<'a>(method: &'a Method, headers: &'a HeaderMap, query: &str, sql: Option<&'a str>) -> PlanInput<'a> {
        PlanInput {
            method,
            path: "/",
            headers,
            params: crate::request::parse_params(Some(query)),
            sql,
            body: BodyShape::Held,
            form_read: false,
            max_depth: crate::config::DEFAULT_MAX_QUERY_DEPTH,
        }
    }

    fn run(user: &User, query: &str, sql: &str) -> Result<Plan, Refusal> {
        let c = cfg();
        let h = HeaderMap::new();
        plan(input(&Method::POST, &h, query, Some(sql)), user, &c.clusters["storm"], None, || "gen-1".into())
    }

    fn user(edit: impl FnOnce(&mut User)) -> User {
        let mut u = cfg().users["default"].clone();
        edit(&mut u);
        u
    }

    /// Too deep a statement is refused with ClickHouse's Code 167 before anything else reads it;
    /// the limit's own depth passes.
    #[test]
    fn too_deep_a_query_is_refused_with_code_167() {
        let c = cfg();
        let h = HeaderMap::new();
        let at = |depth: usize, sql: &str| {
            let mut i = input(&Method::POST, &h, "", Some(sql));
            i.max_depth = depth;
            plan(i, &user(|_| {}), &c.clusters["storm"], None, || "gen-1".into())
        };
        let nested = |n: usize| format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n));
        assert!(at(5, &nested(5)).is_ok());
        let r = at(5, &nested(6)).unwrap_err();
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.message.starts_with("Code: 167, e.displayText() = DB::Exception: Query is too deep: 6 levels"),
            "{}",
            r.message
        );
        assert!(r.message.contains("Maximum: 5 (chstorm gateway, limits.max_query_depth)"), "{}", r.message);
        assert_eq!(chstorm_proto::rules::http_exception_code(None, r.message.as_bytes()), Some(167));
        // 200,000 levels: refused at once, whatever the form.
        for sql in [nested(200_000), format!("SELECT {}1{}", "abs(".repeat(200_000), ")".repeat(200_000))] {
            assert!(at(crate::config::DEFAULT_MAX_QUERY_DEPTH, &sql).unwrap_err().message.contains("Code: 167"));
        }
    }

    /// A setting that changes a Distributed query's answer, as a URL parameter (or a native
    /// Query packet's setting, which arrives as one), makes a query with a key fan out.
    #[test]
    fn distributed_result_settings_fan_out() {
        let sql = "SELECT count() FROM items WHERE shop_id = 123";
        for name in chstorm_sql::route::FAN_OUT_SETTINGS {
            let p = run(&user(|_| {}), &format!("{name}=1"), sql).unwrap();
            assert_eq!((p.target, p.replace_body), (Target::Any, None), "{name}");
        }
        assert_eq!(run(&user(|_| {}), "max_threads=1", sql).unwrap().target, Target::Shard(1));
    }

    #[test]
    fn routes_reads_with_a_key_and_rewrites_the_body() {
        let p = run(&user(|_| {}), "", "SELECT * FROM items WHERE shop_id = 123").unwrap();
        assert_eq!(p.target, Target::Shard(1));
        assert_eq!(p.replace_body.as_deref(), Some("SELECT * FROM items_local WHERE shop_id = 123"));
        assert!(p.latitude.retry && p.latitude.hedge && p.latitude.resend_unsent);
        let p = run(&user(|_| {}), "", "SELECT count() FROM items").unwrap();
        assert_eq!((p.target, p.replace_body), (Target::Any, None));
    }

    #[test]
    fn a_get_keeps_the_rewritten_query_in_the_url() {
        let c = cfg();
        let h = HeaderMap::new();
        let sql = "SELECT * FROM items WHERE shop_id = 123";
        let p = plan(
            input(&Method::GET, &h, "query=SELECT%20*%20FROM%20items%20WHERE%20shop_id%20%3D%20123", Some(sql)),
            &user(|_| {}),
            &c.clusters["storm"],
            None,
            || "q".into(),
        )
        .unwrap();
        assert_eq!(p.target, Target::Shard(1));
        assert!(
            p.path_and_query(None).contains("query=SELECT%20%2A%20FROM%20items_local"),
            "{}",
            p.path_and_query(None)
        );
        assert_eq!(p.replace_body.as_deref(), Some(""));
    }

    #[test]
    fn sessions_go_to_their_replica_and_are_never_routed_retried_or_hedged() {
        let p = run(&user(|_| {}), "session_id=abc", "SELECT * FROM items WHERE shop_id = 123").unwrap();
        assert!(matches!(p.target, Target::Session(_)));
        assert_eq!(p.replace_body, None, "not rewritten");
        assert_eq!(p.latitude, Latitude { retry: false, resend_unsent: false, hedge: false });
        let q = run(&user(|_| {}), "session_id=abc", "SELECT 1").unwrap();
        assert_eq!(p.target, q.target, "the same session, the same replica");
    }

    #[test]
    fn writes_are_never_retried_after_they_may_have_run() {
        let p = run(&user(|_| {}), "", "INSERT INTO t VALUES (1)").unwrap();
        assert_eq!(p.latitude, Latitude { retry: false, resend_unsent: true, hedge: false });
    }

    #[test]
    fn read_only_users() {
        let ro = user(|u| u.readonly = true);
        let e = run(&ro, "", "INSERT INTO t VALUES (1)").unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(e.message.contains("read-only"), "{e}");
        // readonly=1 comes last, after the gateway's own settings; the client's readonly is dropped.
        let p = run(&ro, "readonly=0&max_threads=2", "SELECT 1").unwrap();
        let pq = p.path_and_query(Some(3));
        assert!(pq.ends_with("&max_threads=3&query_id=gen-1&readonly=1"), "{pq}");
        assert!(!pq.contains("readonly=0"), "{pq}");
        let c = cfg();
        let h = HeaderMap::new();
        let mut i = input(&Method::POST, &h, "", None);
        i.body = BodyShape::Opaque;
        let e = plan(i, &ro, &c.clusters["storm"], None, || "q".into()).unwrap_err();
        assert!(e.message.contains("decompress=1"), "{e}");
    }

    #[test]
    fn settings_rules_and_fixed_settings() {
        let u = user(|u| {
            u.allowed_settings = crate::config::AllowedSettings::Only(
                ["max_threads".to_string(), "max_execution_time".to_string()].into(),
            );
            u.settings = vec![("max_memory_usage".into(), "1000".into())];
            u.max_execution_time = Some(Duration::from_secs(30));
        });
        let e = run(&u, "max_block_size=1", "SELECT 1").unwrap_err();
        assert!(e.message.contains("setting 'max_block_size' is not allowed"), "{e}");
        let p = run(&u, "max_threads=2&max_execution_time=100&query_id=mine&user=x&password=y", "SELECT 1").unwrap();
        let pq = p.path_and_query(None);
        assert_eq!((p.query_id.as_str(), p.client_query_id.as_str()), ("default:mine", "mine"));
        assert!(pq.contains("max_threads=2") && pq.contains("max_memory_usage=1000"), "{pq}");
        assert!(pq.contains("max_execution_time=30") && !pq.contains("max_execution_time=100"), "capped: {pq}");
        assert!(!pq.contains("user=") && !pq.contains("password="), "{pq}");
        assert_eq!(p.head_timeout, Duration::from_secs(31));
    }

    #[test]
    fn a_streamed_read_is_refused_and_a_streamed_write_is_not_retried() {
        let c = cfg();
        let h = HeaderMap::new();
        let mut i = input(&Method::POST, &h, "", Some("SELECT 1 -- and a megabyte"));
        i.body = BodyShape::Streamed;
        let e = plan(i, &user(|_| {}), &c.clusters["storm"], None, || "q".into()).unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        let mut i = input(&Method::POST, &h, "", Some("INSERT INTO t FORMAT TSV\n1\n2\n"));
        i.body = BodyShape::Streamed;
        let p = plan(i, &user(|_| {}), &c.clusters["storm"], None, || "q".into()).unwrap();
        assert_eq!(p.latitude, Latitude { retry: false, resend_unsent: false, hedge: false });
    }

    #[test]
    fn hop_headers_and_credentials_are_not_forwarded() {
        let c = cfg();
        let mut h = HeaderMap::new();
        h.insert("authorization", "Basic eDp5".parse().unwrap());
        h.insert("x-clickhouse-key", "secret".parse().unwrap());
        h.insert("connection", "keep-alive".parse().unwrap());
        h.insert("x-clickhouse-format", "JSON".parse().unwrap());
        h.insert("content-encoding", "gzip".parse().unwrap());
        let p = plan(input(&Method::POST, &h, "", Some("SELECT 1")), &user(|_| {}), &c.clusters["storm"], None, || {
            "q".into()
        })
        .unwrap();
        let names: Vec<&str> = p.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["x-clickhouse-format"], "a held body goes decompressed");
    }

    #[test]
    fn settings_clauses_obey_the_same_rules_as_url_parameters() {
        let u = user(|u| {
            u.allowed_settings = crate::config::AllowedSettings::Only(["max_threads".to_string()].into());
            u.settings = vec![("max_memory_usage".into(), "1000".into())];
        });
        assert!(run(&u, "", "SELECT 1 SETTINGS max_threads = 2").is_ok());
        let e = run(&u, "", "SELECT 1 SETTINGS max_threads = 64, max_memory_usage = 0").unwrap_err();
        assert!(e.message.contains("'max_memory_usage' is fixed"), "{e}");
        let e = run(&u, "", "SELECT * FROM (SELECT 1 SETTINGS max_block_size = 1)").unwrap_err();
        assert!(e.message.contains("'max_block_size' is not allowed"), "{e}");
        let e = run(&u, "", "SET max_memory_usage = 0").unwrap_err();
        assert!(e.message.contains("fixed"), "{e}");
        let e = run(&u, "", "SELECT 'unterminated").unwrap_err();
        assert!(e.message.contains("fix the query's syntax"), "{e}");
        // An unrestricted user's text is not even read.
        assert!(run(&user(|_| {}), "", "SELECT 1 SETTINGS max_memory_usage = 0").is_ok());
        assert!(run(&user(|_| {}), "", "SELECT 'unterminated").is_ok());
    }

    #[test]
    fn read_only_users_get_no_settings_clause_and_no_table_function() {
        let ro = user(|u| u.readonly = true);
        let e = run(&ro, "", "SELECT 1 SETTINGS max_threads = 64").unwrap_err();
        assert!(e.message.contains("SETTINGS clause"), "{e}");
        for q in [
            "SELECT * FROM remote('127.0.0.1:9000', system.one)",
            "SELECT * FROM url('http://127.0.0.1:8124/metrics', TSV, 'l String')",
            "SELECT * FROM file('x.tsv', TSV, 'a String')",
            "SELECT 1 WHERE 1 IN (SELECT number FROM /* hidden */ `numbers` (3))",
        ] {
            let e = run(&ro, "", q).unwrap_err();
            assert!(e.message.contains("table function"), "{q}: {e}");
        }
        assert!(run(&ro, "", "SELECT count() FROM system.numbers LIMIT 1").is_ok());
    }

    #[test]
    fn a_read_only_users_get_goes_as_a_post() {
        let c = cfg();
        let h = HeaderMap::new();
        let ro = user(|u| u.readonly = true);
        let p = plan(
            input(&Method::GET, &h, "query=SELECT%201", Some("SELECT 1")),
            &ro,
            &c.clusters["storm"],
            None,
            || "q".into(),
        )
        .unwrap();
        assert_eq!(p.method, Method::POST);
        assert!(p.path_and_query(None).ends_with("&readonly=1"));
        let p = plan(
            input(&Method::GET, &h, "query=SELECT%201", Some("SELECT 1")),
            &user(|_| {}),
            &c.clusters["storm"],
            None,
            || "q".into(),
        )
        .unwrap();
        assert_eq!(p.method, Method::GET);
    }

    #[test]
    fn no_empty_parameter_when_the_client_sent_none() {
        let p = run(&user(|u| u.max_execution_time = None), "", "SELECT 1").unwrap();
        assert_eq!(p.path_and_query(None), "/?query_id=gen-1");
        assert_eq!(p.path_and_query(Some(4)), "/?max_threads=4&query_id=gen-1");
    }

    #[test]
    fn the_thread_budget_takes_over_max_threads() {
        let c = cfg();
        let h = HeaderMap::new();
        let p = plan(
            input(&Method::POST, &h, "max_threads=2", Some("SELECT 1")),
            &user(|_| {}),
            &c.clusters["storm"],
            Some(8),
            || "q".into(),
        )
        .unwrap();
        assert_eq!(p.want_threads, Some(2));
        assert!(!p.path_and_query(None).contains("max_threads"));
        assert!(p.path_and_query(Some(2)).contains("&max_threads=2&query_id=q"));
    }
    #[test]
    fn query_and_session_ids_live_in_their_users_namespace() {
        let p = run(&user(|_| {}), "query_id=q1&session_id=s1&replace_running_query=1", "SELECT 1").unwrap();
        assert_eq!((p.query_id.as_str(), p.client_query_id.as_str()), ("default:q1", "q1"));
        let pq = p.path_and_query(None);
        assert!(pq.contains("session_id=default%3As1") && pq.contains("query_id=default%3Aq1"), "{pq}");
        let other = user(|u| u.name = "other".into());
        let q = run(&other, "query_id=q1&session_id=s1", "SELECT 1").unwrap();
        assert_eq!(q.query_id, "other:q1");
        assert!(q.path_and_query(None).contains("session_id=other%3As1"));
        // No user's namespace holds another's, whatever the names.
        assert_ne!(backend_id("a:b", "c"), backend_id("a", "b:c"));
        assert_ne!(backend_id("a%3Ab", "c"), backend_id("a:b", "c"));
        // The gateway's own ids stay as made.
        let p = run(&user(|_| {}), "", "SELECT 1").unwrap();
        assert_eq!((p.query_id.as_str(), p.client_query_id.as_str()), ("gen-1", "gen-1"));
    }

    #[test]
    fn kill_is_refused_for_every_user() {
        for q in ["KILL QUERY WHERE user = 'default'", " /* c */ kill query where query_id = 'x' SYNC"] {
            let e = run(&user(|_| {}), "", q).unwrap_err();
            assert_eq!(e.status, StatusCode::FORBIDDEN);
            assert!(e.message.contains("KILL is refused"), "{e}");
        }
    }

    #[test]
    fn a_clients_own_readonly_is_relayed_and_a_read_only_users_wins() {
        let p = run(&user(|_| {}), "readonly=1", "CREATE TABLE t (x UInt8) ENGINE = Memory").unwrap();
        assert!(p.path_and_query(None).contains("readonly=1"), "{}", p.path_and_query(None));
        let listed =
            user(|u| u.allowed_settings = crate::config::AllowedSettings::Only(["max_threads".to_string()].into()));
        for v in ["1", "2"] {
            let p = run(&listed, &format!("readonly={v}"), "SELECT 1").unwrap();
            assert!(p.path_and_query(None).contains(&format!("readonly={v}")));
            assert!(run(&listed, "", &format!("SET readonly = {v}")).is_ok(), "stricter is always allowed");
        }
        assert!(run(&listed, "readonly=0", "SELECT 1").is_err(), "readonly=0 obeys the allow-list");
        let ro = user(|u| u.readonly = true);
        let p = run(&ro, "readonly=2", "SELECT 1").unwrap();
        let pq = p.path_and_query(None);
        assert!(pq.ends_with("&readonly=1") && !pq.contains("readonly=2"), "{pq}");
    }

    #[test]
    fn a_set_readonly_in_a_session_takes_the_forced_settings_first() {
        let u =
            user(|u| u.settings = vec![("max_memory_usage".into(), "10000000000".into()), ("x".into(), "it's".into())]);
        let p = run(&u, "session_id=s", "SET readonly = 1;").unwrap();
        assert_eq!(
            p.replace_body.as_deref(),
            Some("SET readonly = 1, max_memory_usage = 10000000000, x = 'it\\'s', max_execution_time = 30")
        );
        let p = run(&u, "session_id=s&max_execution_time=5", "SET max_threads = 1, readonly = 2 -- c").unwrap();
        assert_eq!(
            p.replace_body.as_deref(),
            Some("SET max_threads = 1, readonly = 2, max_memory_usage = 10000000000, x = 'it\\'s', max_execution_time = 5")
        );
        for (q, sql) in
            [("session_id=s", "SET readonly = 0"), ("session_id=s", "SET max_threads = 1"), ("", "SET readonly = 1")]
        {
            assert_eq!(run(&u, q, sql).unwrap().replace_body, None, "{q} {sql}");
        }
        let none = user(|u| u.max_execution_time = None);
        assert_eq!(run(&none, "session_id=s", "SET readonly = 1").unwrap().replace_body, None, "nothing forced");
    }

    #[test]
    fn restricted_users_send_no_multipart_and_no_unreadable_body() {
        let c = cfg();
        let listed =
            user(|u| u.allowed_settings = crate::config::AllowedSettings::Only(["max_threads".to_string()].into()));
        let mut h = HeaderMap::new();
        h.insert("content-type", "Multipart/Form-Data; boundary=x".parse().unwrap());
        let e =
            plan(input(&Method::POST, &h, "", Some("SELECT 1")), &listed, &c.clusters["storm"], None, || "q".into())
                .unwrap_err();
        assert!(e.message.contains("multipart/form-data"), "{e}");
        assert!(plan(
            input(&Method::POST, &h, "", Some("SELECT 1")),
            &user(|_| {}),
            &c.clusters["storm"],
            None,
            || "q".into()
        )
        .is_ok());
        let h = HeaderMap::new();
        let mut i = input(&Method::POST, &h, "decompress=1&query=SELECT%201", Some("SELECT 1"));
        i.body = BodyShape::Opaque;
        let e = plan(i, &listed, &c.clusters["storm"], None, || "q".into()).unwrap_err();
        assert!(e.message.contains("decompress=1"), "{e}");
    }
}
