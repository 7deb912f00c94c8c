//! `plan`: what to do with one request, decided from the request and its user alone. Pure: no
//! I/O, no clocks, no randomness beyond the query_id it is given, so every rule is unit-tested.
//!
//! The plan applies the user's rules (read-only, settings allow-list, fixed settings, capped
//! `max_execution_time`), decides the route (one shard, any replica, or the session's replica),
//! builds the backend parameters in the order ClickHouse must see them, and says what the
//! attempt loop may do with the request (retry, hedge, re-issue on a replica going down).
//!
//! Must not import the attempt loop, the backends or the fronts: both fronts call it with a
//! [`QueryRequest`] (the native one with the Query packet's settings as parameters and `database`
//! from its Hello or `USE`), and the native front sends the settings of [`Plan::params`] in its
//! Query packet. The plan is made in named phases: [`check_rules`], [`ids`], [`backend_params`],
//! [`set_readonly_first`], [`route`], then [`assemble`].

use super::cacheable::Caching;
use super::refusal::{Kind, Refusal};
use super::request::{BodyShape, QueryRequest, MAX_HELD_BODY};
use crate::config::{AllowedSettings, Cluster, User};
use crate::request::{encode_param_into, encode_params_into, is_setting, SHARD_KEY_PARAM};
use chstorm_sql::lexer::Grammar;
use chstorm_sql::reading::{read_all, Reading, Readings};
use chstorm_sql::route::changes_distributed_result;
use chstorm_sql::rules::{calls_of, settings_of};
use chstorm_sql::statement::{Class, InsertData, Name, Operator, StatementKind};
use std::time::Duration;

/// How long the gateway waits for a backend's answer head when the user has no
/// max_execution_time: 10 minutes.
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(600);

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

/// What a successful statement of an HTTP session leaves in it, for the gateway to carry the
/// session to another replica (`crate::http::session`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEffect {
    /// Nothing that stays in the session.
    None,
    /// `SET`: these settings, as SQL literals, as sent.
    Set(Vec<(String, String)>),
    /// `USE db`.
    Use(String),
    /// State the gateway cannot carry: what it is.
    Bound(&'static str),
}

/// A query in an HTTP session: the session's backend id and timeout, and what the statement
/// leaves in it.
#[derive(Debug, Clone)]
pub struct SessionPlan {
    pub id: String,
    /// The `session_timeout` parameter, when the client gave one.
    pub timeout: Option<String>,
    pub effect: SessionEffect,
}

/// The decision for one request.
#[derive(Debug, Clone)]
pub struct Plan {
    pub target: Target,
    /// The query_id the backend runs the query under: the client's, in its user's namespace
    /// ([`backend_id`]), or one the gateway made. Shared: each attempt's KILL guard holds it.
    pub query_id: std::sync::Arc<str>,
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
    /// The text to send as the body instead of the client's (a routed query's rewritten text).
    pub replace_body: Option<String>,
    /// The client's own `max_threads` wish, lowered to the budget's maximum; None without a
    /// thread budget.
    pub want_threads: Option<usize>,
    /// Longest wait for an answer head.
    pub head_timeout: Duration,
    /// Longest time for the whole answer (max_execution_time + 1 s), when the user has one.
    pub body_deadline: Option<Duration>,
    /// The user's `max_execution_time` cap (`users[].max_execution_time`), named in a
    /// `Timeout exceeded` at that limit ([`time_cap_note`]); None without one.
    pub time_cap: Option<Duration>,
    pub latitude: Latitude,
    /// A read, or anything else (what a client's FIN does to it: `crate::http::client_fin`).
    pub kind: StatementKind,
    /// The session the query runs in, when it has a `session_id`.
    pub session: Option<SessionPlan>,
    /// The replica a session's query must go to (its home, `crate::http::session`), set by the
    /// HTTP front after the plan; None: the session's rendezvous choice.
    pub pinned: Option<(usize, usize)>,
    /// Whether it may be merged and cached (`users[*].cache`, [`super::cacheable`]).
    pub caching: Caching,
}

impl Plan {
    /// The path and query of one attempt, with its thread grant.
    #[cfg(test)]
    pub fn path_and_query(&self, threads: Option<usize>) -> String {
        let mut out = String::new();
        self.path_and_query_into(&mut out, threads);
        out
    }

    /// The backend URL without what each attempt adds (the thread grant, the query_id and the
    /// gateway's `readonly`): what a cache key takes of an HTTP request.
    pub fn url_without_ids(&self) -> &str {
        &self.path_and_params
    }

    /// Adds the parameter `k=v` before the parts each attempt adds (`session_check=1`).
    pub fn push_param(&mut self, k: &str, v: &str) {
        if self.path_and_params.is_empty() {
            return;
        }
        if !self.path_and_params.ends_with('?') {
            self.path_and_params.push('&');
        }
        encode_param_into(&mut self.path_and_params, k, v);
    }

    /// [`Self::path_and_query`], appended to `out`. (A plan made with no path, a native query's,
    /// has no URL.)
    pub fn path_and_query_into(&self, out: &mut String, threads: Option<usize>) {
        debug_assert!(!self.path_and_params.is_empty(), "a plan made without a URL");
        out.reserve(self.path_and_params.len() + self.tail.len() + 20);
        out.push_str(&self.path_and_params);
        if !self.path_and_params.ends_with('?') {
            out.push('&');
        }
        if let Some(n) = threads {
            out.push_str("max_threads=");
            out.push_str(itoa::Buffer::new().format(n));
            out.push('&');
        }
        out.push_str(&self.tail);
    }
}

/// True when the user's settings are restricted: read-only, an allow-list, or fixed settings.
pub(crate) fn restricted(user: &User) -> bool {
    user.readonly || user.allowed_settings != AllowedSettings::Any || !user.settings.is_empty()
}

/// The rules on the statement's own text, for restricted users: it must read alike under
/// every grammar of the cluster ([`chstorm_sql::reading`]); a `SETTINGS` clause or a `SET`
/// obeys the same allow-list and fixed settings as URL parameters (a read-only user may use
/// none: the server, running the query with `readonly=1`, would refuse it too); a read-only
/// user calls no table function (18.16 refuses them all under `readonly=1`), and any other
/// calls only those that stay inside the server, or that its `table_functions` names
/// (`url`, `remote`, `file`, `ENGINE = URL(...)`, ... run on the server's own authority,
/// out of reach of the user's settings). Text the rules cannot read is refused.
fn check_sql(readings: &Readings<'_>, user: &User) -> Result<(), Refusal> {
    if !restricted(user) {
        return Ok(());
    }
    let forbid = |why: String| Refusal::new(Kind::Forbidden, why);
    let read_only = |why: String| Refusal::new(Kind::ReadOnly, why);
    let reading = readings.agreed().map_err(|d| {
        Refusal::new(
            Kind::Syntax,
            format!(
                "user '{}' has rules, and the servers of its cluster would not all read this statement alike: {d}; \
                 write it in a form they share",
                user.name
            ),
        )
    })?;
    let unreadable = |e: chstorm_sql::rules::SqlRuleError| {
        forbid(format!("user '{}' has restricted settings, and the gateway {e}; fix the query's syntax", user.name))
    };
    for (name, value) in settings_of(&reading.tokens).map_err(unreadable)? {
        if user.readonly {
            return Err(read_only(format!(
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
    for call in calls_of(&reading.tokens).map_err(unreadable)? {
        if user.readonly && call.kind == chstorm_sql::rules::CallKind::TableFunction {
            return Err(read_only(format!(
                "user '{}' is read-only: table function '{}' is refused (it reads other servers, URLs or files)",
                user.name, call.name
            )));
        }
        if !call.stays_local() && !user.table_functions.contains(&call.name.to_ascii_lowercase()) {
            return Err(forbid(format!(
                "user '{}' has rules, and {} '{}' reaches outside the server, beyond the user's settings; add it to \
                 the user's table_functions to allow it",
                user.name,
                call.kind.describe(),
                call.name
            )));
        }
    }
    Ok(())
}

/// The operator statements of `readings` (under any grammar of the cluster) that `user` may
/// not send: `KILL`, `SYSTEM`, users and grants, databases, server-wide objects, unless its
/// `operator_statements` allows the kind.
fn check_operators(readings: &Readings<'_>, user: &User) -> Result<(), Refusal> {
    let refuse = |what: String, op: Operator| {
        Refusal::new(
            Kind::Forbidden,
            format!(
                "{what} is refused for user '{}': add '{}' to the user's operator_statements to allow it",
                user.name,
                op.name()
            ),
        )
    };
    for op in readings.operators() {
        if !user.operators.contains(&op) {
            return Err(refuse(format!("{} statement", operator_what(op)), op));
        }
    }
    Ok(())
}

/// The tables `readings` drops, detaches, attaches, renames, exchanges, truncates or replaces
/// outside `user`'s `own_databases`, unless it may send [`Operator::Drop`]: refused.
/// `database` is the request's current database, for names without one ([`owned`]).
fn check_drops(readings: &Readings<'_>, user: &User, database: Option<&str>) -> Result<(), Refusal> {
    if user.operators.contains(&Operator::Drop) {
        return Ok(());
    }
    for class in readings.classes() {
        let Class::Drop(names) = class else { continue };
        if let Some(n) = names.iter().find(|n| !owned(user, n, database)) {
            let table = match &n.database {
                Some(db) => format!("{db}.{}", n.table),
                None => n.table.clone(),
            };
            return Err(Refusal::new(
                Kind::Forbidden,
                format!(
                    "dropping, renaming or replacing '{table}' is refused for user '{}': its database is not in the \
                     user's own_databases{}",
                    user.name,
                    if n.database.is_none() { " (name the database: db.table)" } else { "" }
                ),
            ));
        }
    }
    Ok(())
}

/// How a refusal names an operator kind.
fn operator_what(op: Operator) -> &'static str {
    match op {
        Operator::Kill => "a KILL",
        Operator::System => "a SYSTEM",
        Operator::Access => "a users, roles, quotas, profiles, policies or grants",
        Operator::Drop => "a database's DROP, DETACH, ATTACH, RENAME or TRUNCATE",
        Operator::Server => "a functions, named collections, workloads, resources, BACKUP or RESTORE",
    }
}

/// Whether table `n` lies in one of `user`'s own databases. A name without a database is in
/// the request's current one when the request names it (`database`); without one, the backend
/// user's default database decides, which the gateway does not know: not owned.
fn owned(user: &User, n: &Name, database: Option<&str>) -> bool {
    let db = match (&n.database, database) {
        (Some(db), _) => db.as_str(),
        (None, Some(db)) if !db.is_empty() => db,
        (None, _) => return false,
    };
    user.own_databases.contains(db)
}

/// True for `readonly` set to 1 or 2: a client may always make itself stricter, whatever its
/// user's allow-list.
fn stricter(name: &str, value: &str) -> bool {
    name == "readonly" && matches!(value.trim(), "1" | "2")
}

/// The id a client's `query_id` or `session_id` is given on the backend: in its user's
/// namespace, `<user>:<id>` (`%` and `:` in the user name percent-encoded, so no two users
/// share a namespace). Users share one backend login, so a bare id would reach another user's
/// query (`replace_running_query`) or session (its temporary tables and settings). The
/// gateway's own query ids (`chgw-...`) have no `:` prefix and cannot be named by a client.
pub fn backend_id(user: &str, id: &str) -> String {
    let mut out = String::with_capacity(user.len() + 1 + id.len());
    for c in user.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out.push(':');
    out.push_str(id);
    out
}

/// The statement `text` in place of the client's: in the `query` parameter for a GET (a GET
/// stays read-only on the server, and its body is not read), else as the body. Returns the body.
fn replace_statement(in_url: bool, params: &mut Vec<(String, String)>, text: String) -> String {
    params.retain(|(k, _)| k != "query");
    if in_url {
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
fn set_readonly_with(sql: &str, reading: &Reading<'_>, forced: &[(String, String)]) -> Option<String> {
    if forced.is_empty() || reading.classes != [Class::Set] {
        return None;
    }
    let set = settings_of(&reading.tokens).ok()?;
    if !set.iter().any(|(k, v)| stricter(k, v)) {
        return None;
    }
    let end = reading.tokens.iter().rev().find(|t| !t.is_punct(";"))?.end();
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
fn check_depth(depth: usize, max_depth: usize) -> Result<(), Refusal> {
    if depth <= max_depth {
        return Ok(());
    }
    Err(Refusal::clickhouse(
        167,
        format!(
            "Code: 167, e.displayText() = DB::Exception: Query is too deep: {depth} levels of brackets and CASE. \
             Maximum: {max_depth} (chstorm gateway, limits.max_query_depth), e.what() = DB::Exception"
        ),
    ))
}

/// The hash of a session id that picks its replica.
pub(crate) fn session_hash(id: &str) -> u64 {
    // FNV-1a: stable across processes and gateway instances (std's hasher is randomly seeded).
    id.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// Makes the plan for `req` of `user`, whose cluster is `cluster`. `query_id` is used when the
/// client did not set one. `max_per_query` is the thread budget's per-query maximum when the
/// cluster has a budget.
pub fn plan(
    req: QueryRequest<'_>,
    user: &User,
    cluster: &Cluster,
    max_per_query: Option<usize>,
    query_id: impl FnOnce() -> String,
) -> Result<Plan, Refusal> {
    let mut req = req;
    // `no_cache` is the gateway's, for users with a cache; the server knows no such setting.
    let asked = user.cache.is_some() && super::cacheable::take_no_cache(&mut req.params) || req.no_cache;
    let readings = req.sql.map(|q| read_all(q, req.grammars));
    let kind = readings.as_ref().map_or(StatementKind::Write, Readings::kind);
    check_rules(&req, user, readings.as_ref(), kind)?;
    let caching = match &user.cache {
        None => Caching::Off,
        Some(_) => {
            let session = req.params.iter().any(|(k, v)| k == "session_id" && !v.is_empty());
            match super::cacheable::decide(&req, readings.as_ref(), kind, session, asked) {
                Ok(()) => Caching::Eligible,
                Err(why) => Caching::Skip(why),
            }
        }
    };
    let ids = ids(&mut req.params, user, query_id);
    backend_params(&mut req.params, user);
    let agreed = readings.as_ref().and_then(|r| r.agreed().ok());
    let mut replace_body = set_readonly_first(&mut req, user, ids.session, agreed);
    // A statement the grammars read apart is never routed: it goes to any replica as it came.
    let grammar = agreed.map(|r| r.grammar);
    let target = route(&mut req, cluster, kind, grammar, ids.session, ids.shard_key.as_deref(), &mut replace_body);
    let session = ids.session.map(|_| session_plan(&req.params, readings.as_ref(), replace_body.as_deref()));
    let mut plan = assemble(req, user, kind, ids, target, replace_body, max_per_query);
    plan.session = session;
    plan.caching = caching;
    Ok(plan)
}

/// The session of a query with a `session_id` (namespaced already), and what its statement
/// leaves in it: the settings of a `SET` (as sent: `replaced`, the rewritten text, when the plan
/// rewrote it), a `USE`, or state the gateway cannot carry (a temporary table, a transaction, a
/// statement the cluster's grammars read apart).
fn session_plan(params: &[(String, String)], readings: Option<&Readings<'_>>, replaced: Option<&str>) -> SessionPlan {
    let id = params.iter().find(|(k, _)| k == "session_id").map(|(_, v)| v.clone()).unwrap_or_default();
    let timeout = params.iter().find(|(k, _)| k == "session_timeout").map(|(_, v)| v.clone());
    let effect = match readings.map(Readings::agreed) {
        None => SessionEffect::Bound("a statement the gateway could not read"),
        Some(Err(_)) => SessionEffect::Bound("a statement the cluster's releases read differently"),
        Some(Ok(r)) => session_effect(r, replaced),
    };
    SessionPlan { id, timeout, effect }
}

fn session_effect(r: &Reading<'_>, replaced: Option<&str>) -> SessionEffect {
    let word = |i: usize| r.tokens.get(i).filter(|t| t.kind == chstorm_sql::lexer::TokenKind::Word);
    match r.classes.as_slice() {
        [Class::Set] => {
            let text = replaced
                .and_then(|t| chstorm_sql::reading::read(t, chstorm_sql::reading::Grammars::of(r.grammar)).ok());
            let tokens = text.as_ref().map_or(&r.tokens, |t| &t.tokens);
            match settings_of(tokens) {
                Ok(pairs) => SessionEffect::Set(pairs.into_iter().map(|(k, v)| (k, sql_literal(&v))).collect()),
                Err(_) => SessionEffect::Bound("a SET the gateway could not read"),
            }
        }
        [Class::Use] => match r.tokens.get(1).and_then(|t| t.ident()) {
            Some(db) => SessionEffect::Use(db),
            None => SessionEffect::Bound("a USE the gateway could not read"),
        },
        [Class::Write]
            if word(0).is_some_and(|w| w.is_kw("CREATE")) && r.tokens.iter().take(4).any(|t| t.is_kw("TEMPORARY")) =>
        {
            SessionEffect::Bound("a temporary table")
        }
        [Class::Write]
            if word(0).is_some_and(|w| ["BEGIN", "COMMIT", "ROLLBACK"].iter().any(|k| w.is_kw(k)))
                || (word(0).is_some_and(|w| w.is_kw("SET")) && word(1).is_some_and(|w| w.is_kw("TRANSACTION"))) =>
        {
            SessionEffect::Bound("a transaction")
        }
        [Class::Operator(Operator::Access)] if word(0).is_some_and(|w| w.is_kw("SET")) => {
            SessionEffect::Bound("a role")
        }
        _ => SessionEffect::None,
    }
}

/// A setting's value as a SQL literal: a number, `NULL`, `true` or `false` as it is; anything
/// else quoted.
fn sql_literal(v: &str) -> String {
    let bare = v.parse::<i64>().is_ok()
        || v.parse::<u64>().is_ok()
        || v.parse::<f64>().is_ok_and(f64::is_finite)
        || ["NULL", "TRUE", "FALSE"].iter().any(|k| v.eq_ignore_ascii_case(k));
    if bare {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

/// The user's rules, and the gateway's, on the request as it came: depth, bodies the rules
/// cannot read, KILL, read-only, the settings allow-list, the statement's own settings, and a
/// streamed read.
fn check_rules(
    req: &QueryRequest<'_>,
    user: &User,
    readings: Option<&Readings<'_>>,
    kind: StatementKind,
) -> Result<(), Refusal> {
    if let Some(r) = readings {
        check_depth(r.depth(), req.max_depth)?;
    }
    let forbid = |why: String| Refusal::new(Kind::Forbidden, why);
    check_unread(req, user, readings)?;
    if restricted(user) && req.multipart && !req.form_read {
        return Err(forbid(format!(
            "user '{}' has rules on settings, and the gateway does not read multipart/form-data bodies (their \
             fields are settings and statement text); send the query in the URL or as the body",
            user.name
        )));
    }

    // KILL is no write: 18.16 runs it under readonly=1. It is the operator rule's.
    let kill =
        readings.is_some_and(|r| r.classes().all(|c| matches!(c, Class::Read | Class::Operator(Operator::Kill))));
    if user.readonly && kind != StatementKind::Read && !kill {
        return Err(Refusal::new(
            Kind::ReadOnly,
            format!(
                "user '{}' is read-only: only SELECT, WITH, SHOW, DESCRIBE, EXISTS and EXPLAIN are allowed",
                user.name
            ),
        ));
    }
    if let Some(r) = readings {
        check_operators(r, user)?;
        check_drops(r, user, crate::request::current_database(&req.params, req.database))?;
    }
    if let Some((k, _)) =
        req.params.iter().find(|(k, v)| is_setting(k) && !user.allowed_settings.allows(k) && !stricter(k, v))
    {
        return Err(forbid(format!("setting '{k}' is not allowed for user '{}'", user.name)));
    }
    if let Some(r) = readings {
        check_sql(r, user)?;
    }
    if req.body == BodyShape::Streamed && kind == StatementKind::Read {
        return Err(Refusal::new(
            Kind::TooLarge,
            format!(
                "a query over {} MiB; ClickHouse's max_query_size is far smaller: send less text (data goes after \
                 INSERT ... FORMAT)",
                MAX_HELD_BODY >> 20
            ),
        ));
    }
    Ok(())
}

/// A body the gateway could not read, or read only in part, where the server reads SQL: refused
/// for every user, since neither the depth limit nor a user's rules can be checked on text the
/// gateway has not read. An opaque body (a `Content-Encoding` or a `decompress=1` method the
/// gateway does not decode) may pass only as an INSERT's data, when the statement in the URL
/// ends in `FORMAT <name>` of a data format; the rows of an `INSERT ... VALUES` are SQL, so
/// they must be held whole ([`MAX_HELD_BODY`]).
fn check_unread(req: &QueryRequest<'_>, user: &User, readings: Option<&Readings<'_>>) -> Result<(), Refusal> {
    let data = readings.and_then(|r| r.agreed().ok()).map(|r| r.data);
    let kind = if restricted(user) { Kind::Forbidden } else { Kind::BadRequest };
    if req.body == BodyShape::Opaque && !matches!(data, Some(InsertData::Format(_))) {
        return Err(Refusal::new(
            kind,
            "this body is compressed in a format the gateway cannot read (a decompress=1 method other than LZ4 \
             and ZSTD, or an unknown Content-Encoding), and the server would read SQL in it: its depth and its \
             settings cannot be checked; send it uncompressed, with Content-Encoding gzip or deflate, or with \
             decompress=1 (LZ4 or ZSTD); an INSERT's data may stay so when the URL's query ends in FORMAT <name>",
        ));
    }
    if req.body == BodyShape::Streamed && matches!(data, Some(InsertData::Values(_))) {
        return Err(Refusal::new(
            Kind::TooLarge,
            format!(
                "an INSERT ... VALUES over {} MiB: its rows are SQL expressions the server parses, which the \
                 gateway reads first and holds at most {} MiB of; send larger inserts in a data format (FORMAT \
                 TSV, CSV, JSONEachRow, RowBinary, Native) or in parts",
                MAX_HELD_BODY >> 20,
                MAX_HELD_BODY >> 20
            ),
        ));
    }
    Ok(())
}

/// The ids of a query, taken from the client's parameters.
struct Ids {
    /// The backend's query_id and the client's (see [`Plan::query_id`]).
    query_id: String,
    client_query_id: String,
    /// The `shard_key` parameter.
    shard_key: Option<String>,
    /// The hash of the (namespaced) `session_id`, when the client is in a session.
    session: Option<u64>,
}

/// Takes the ids out of `params`: the query_id (the client's in its user's namespace, or
/// `query_id()`), the shard key; and puts the `session_id` in the user's namespace.
fn ids(params: &mut [(String, String)], user: &User, query_id: impl FnOnce() -> String) -> Ids {
    let client_query_id =
        params.iter().find(|(k, _)| k == "query_id").map(|(_, v)| v.clone()).filter(|v| !v.is_empty());
    let (query_id, client_query_id) = match client_query_id {
        Some(id) => (backend_id(&user.name, &id), id),
        None => {
            let id = query_id();
            (id.clone(), id)
        }
    };
    let shard_key = params.iter().find(|(k, _)| k == SHARD_KEY_PARAM).map(|(_, v)| v.clone());
    for (k, v) in params.iter_mut() {
        if k == "session_id" && !v.is_empty() {
            *v = backend_id(&user.name, v);
        }
    }
    let session = params.iter().find(|(k, v)| k == "session_id" && !v.is_empty()).map(|(_, v)| session_hash(v));
    Ids { query_id, client_query_id, shard_key, session }
}

/// What the gateway says of a user's `max_execution_time` cap (`cap`) where a query ran into
/// it: the key to raise, as a client that sees only `Timeout exceeded` cannot know it.
pub fn time_cap_note(cap: Duration) -> String {
    format!(
        "chstorm gateway: this user's max_execution_time is capped at {} s by the gateway's \
         users[].max_execution_time; raise it there for longer queries",
        cap.as_secs_f64().ceil() as u64
    )
}

/// Parameters for the backend: the client's, minus credentials and the gateway's own, plus the
/// user's fixed settings and a capped max_execution_time.
fn backend_params(params: &mut Vec<(String, String)>, user: &User) {
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
}

/// A SET that makes the session read-only first takes the settings the gateway sends with
/// every query, so that they do not break the session's later queries: the new body, if so.
fn set_readonly_first(
    req: &mut QueryRequest<'_>,
    user: &User,
    session: Option<u64>,
    reading: Option<&Reading<'_>>,
) -> Option<String> {
    if session.is_none() || req.multipart {
        return None;
    }
    let mut forced: Vec<(String, String)> = user.settings.clone();
    forced.extend(
        req.params.iter().filter(|(k, _)| k == "max_execution_time" && user.max_execution_time.is_some()).cloned(),
    );
    let with = req.sql.zip(reading).and_then(|(q, r)| set_readonly_with(q, r, &forced));
    match (session, with) {
        (Some(_), Some(text)) if !req.multipart => Some(replace_statement(req.statement_in_url, &mut req.params, text)),
        _ => None,
    }
}

/// The route: one shard for a read that carries a key and names a routed table (its rewritten
/// text goes in `replace_body`); the session's replica for a session (routing would lose its
/// temporary tables and settings); else any replica.
fn route(
    req: &mut QueryRequest<'_>,
    cluster: &Cluster,
    kind: StatementKind,
    grammar: Option<Grammar>,
    session: Option<u64>,
    shard_key: Option<&str>,
    replace_body: &mut Option<String>,
) -> Target {
    match (session, &cluster.routing, req.sql.zip(grammar), kind) {
        (Some(h), _, _, _) => Target::Session(h),
        // A setting that changes a Distributed query's answer (URL, or the native Query packet).
        (None, Some(_), _, _) if req.params.iter().any(|(k, _)| changes_distributed_result(k)) => Target::Any,
        (None, Some(router), Some((text, grammar)), StatementKind::Read)
            if req.body == BodyShape::Held && !req.multipart =>
        {
            let database = crate::request::current_database(&req.params, req.database);
            match router.route(text, shard_key, req.shard_key, database, grammar) {
                Ok(r) => {
                    // The rewritten text replaces the whole statement.
                    *replace_body = Some(replace_statement(req.statement_in_url, &mut req.params, r.sql));
                    Target::Shard(r.shard)
                }
                Err(_) => Target::Any,
            }
        }
        _ => Target::Any,
    }
}

/// The plan from its parts: the thread budget's hold on `max_threads`, the backend URL, the
/// timeouts and what the attempt loop may do.
fn assemble(
    req: QueryRequest<'_>,
    user: &User,
    kind: StatementKind,
    ids: Ids,
    target: Target,
    replace_body: Option<String>,
    max_per_query: Option<usize>,
) -> Plan {
    let QueryRequest { path, mut params, body, .. } = req;
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
    let (mut path_and_params, mut tail) = (String::new(), String::new());
    if !path.is_empty() {
        path_and_params.reserve(path.len() + 128);
        path_and_params.push_str(path);
        path_and_params.push('?');
        encode_params_into(&mut path_and_params, &params);
        tail.reserve(ids.query_id.len() + 24);
        encode_param_into(&mut tail, "query_id", &ids.query_id);
        if user.readonly {
            tail.push_str("&readonly=1");
        }
    }
    let in_session = matches!(target, Target::Session(_));
    let held_read = kind == StatementKind::Read && body == BodyShape::Held && !in_session;
    Plan {
        target,
        query_id: ids.query_id.into(),
        client_query_id: ids.client_query_id,
        path_and_params,
        tail,
        params,
        replace_body,
        want_threads,
        head_timeout: user.max_execution_time.map_or(DEFAULT_HEAD_TIMEOUT, |d| d + Duration::from_secs(1)),
        body_deadline: user.max_execution_time.map(|d| d + Duration::from_secs(1)),
        time_cap: user.max_execution_time,
        latitude: Latitude {
            retry: held_read,
            resend_unsent: body == BodyShape::Held && !in_session,
            hedge: held_read,
        },
        kind,
        session: None,
        pinned: None,
        caching: Caching::Off,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use http::{HeaderMap, Method};
    use std::path::Path;

    const EXAMPLE: &str = include_str!("../../../../docs/gateway.example.yaml");

    fn cfg() -> Config {
        Config::parse(EXAMPLE, Path::new("g.yaml")).unwrap()
    }

    /// The request as the HTTP front makes it of `method`, `headers` and URL parameters `query`.
    fn input<'a>(method: &'a Method, headers: &'a HeaderMap, query: &str, sql: Option<&'a str>) -> QueryRequest<'a> {
        let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
        QueryRequest {
            path: "/",
            params: crate::request::parse_params(Some(query)),
            sql,
            body: BodyShape::Held,
            multipart: crate::http::read::is_multipart(headers),
            form_read: false,
            statement_in_url: method == Method::GET,
            shard_key: header(crate::request::SHARD_KEY_HEADER),
            database: header("x-clickhouse-database"),
            max_depth: crate::config::DEFAULT_MAX_QUERY_DEPTH,
            grammars: chstorm_sql::reading::Grammars::ALL,
            no_cache: false,
        }
    }

    fn run(user: &User, query: &str, sql: &str) -> Result<Plan, Refusal> {
        let c = cfg();
        let h = HeaderMap::new();
        plan(input(&Method::POST, &h, query, Some(sql)), user, &c.clusters["storm"], None, || "gen-1".into())
    }

    #[test]
    fn a_native_query_makes_no_url_and_keeps_its_settings() {
        let c = cfg();
        let params = vec![("max_block_size".to_string(), "10".to_string()), ("query_id".into(), "q1".into())];
        let req = QueryRequest::native(params, "SELECT 1", 300);
        let p = plan(req, &user(|u| u.readonly = true), &c.clusters["storm"], None, || "gen-1".into()).unwrap();
        assert!(p.path_and_params.is_empty() && p.tail.is_empty());
        // The user's capped max_execution_time is among them, as in an HTTP query's URL.
        assert_eq!(p.params, [("max_block_size".into(), "10".into()), ("max_execution_time".into(), "30".into())]);
        assert_eq!(&*p.query_id, "default:q1");
        let http = run(&user(|u| u.readonly = true), "max_block_size=10&query_id=q1", "SELECT 1").unwrap();
        let url = http.path_and_query(None);
        assert!(url.ends_with("?max_block_size=10&max_execution_time=30&query_id=default%3Aq1&readonly=1"), "{url}");
    }

    fn user(edit: impl FnOnce(&mut User)) -> User {
        let mut u = cfg().users["default"].clone();
        edit(&mut u);
        u
    }

    /// What a user's cache may take.
    #[test]
    fn a_users_cache_takes_single_deterministic_reads() {
        let cache = crate::config::UserCache { ttl: Duration::from_secs(1), max_entry_size: 1024, max_waiters: 4 };
        let cached = user(|u| u.cache = Some(cache));
        let why = |q: &str, sql: &str| match run(&cached, q, sql).unwrap().caching {
            Caching::Eligible => "eligible",
            Caching::Skip(w) => w.label(),
            Caching::Off => "off",
        };
        for sql in ["SELECT 1", "WITH 1 AS x SELECT x", "(SELECT 1)", "SELECT * FROM items WHERE shop_id = 1"] {
            assert_eq!(why("", sql), "eligible", "{sql}");
        }
        for (q, sql, want) in [
            ("", "INSERT INTO t VALUES (1)", "not_select"),
            ("", "SHOW TABLES", "not_select"),
            ("", "SELECT 1; SELECT 2", "not_select"),
            ("", "SELECT now()", "function"),
            ("", "SELECT rand() FROM items", "function"),
            ("", "SELECT * FROM items WHERE d = today()", "function"),
            ("", "SELECT * FROM system.tables", "system_table"),
            ("", "SELECT * FROM INFORMATION_SCHEMA.TABLES", "system_table"),
            ("database=system", "SELECT 1", "database"),
            ("session_id=s1", "SELECT 1", "session"),
            ("no_cache=1", "SELECT 1", "asked"),
        ] {
            assert_eq!(why(q, sql), want, "{q} {sql}");
        }
        // `no_cache` is the gateway's: taken out of the URL for a user with a cache, sent on for others.
        let p = run(&cached, "no_cache=1&max_threads=2", "SELECT 1").unwrap();
        assert!(!p.path_and_query(None).contains("no_cache"), "{}", p.path_and_query(None));
        assert_eq!(why("no_cache=0", "SELECT 1"), "eligible");
        let plain = run(&user(|_| {}), "no_cache=1", "SELECT 1").unwrap();
        assert_eq!(plain.caching, Caching::Off);
        assert!(plain.path_and_query(None).contains("no_cache=1"));
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
        assert_eq!(r.status(), http::StatusCode::BAD_REQUEST);
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
        assert_eq!(e.status(), http::StatusCode::FORBIDDEN);
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
        assert_eq!((&*p.query_id, p.client_query_id.as_str()), ("default:mine", "mine"));
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
        assert_eq!(e.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
        let mut i = input(&Method::POST, &h, "", Some("INSERT INTO t FORMAT TSV\n1\n2\n"));
        i.body = BodyShape::Streamed;
        let p = plan(i, &user(|_| {}), &c.clusters["storm"], None, || "q".into()).unwrap();
        assert_eq!(p.latitude, Latitude { retry: false, resend_unsent: false, hedge: false });
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
        assert_eq!((&*p.query_id, p.client_query_id.as_str()), ("default:q1", "q1"));
        let pq = p.path_and_query(None);
        assert!(pq.contains("session_id=default%3As1") && pq.contains("query_id=default%3Aq1"), "{pq}");
        let other = user(|u| u.name = "other".into());
        let q = run(&other, "query_id=q1&session_id=s1", "SELECT 1").unwrap();
        assert_eq!(&*q.query_id, "other:q1");
        assert!(q.path_and_query(None).contains("session_id=other%3As1"));
        // No user's namespace holds another's, whatever the names.
        assert_ne!(backend_id("a:b", "c"), backend_id("a", "b:c"));
        assert_ne!(backend_id("a%3Ab", "c"), backend_id("a:b", "c"));
        assert_eq!(backend_id("a%b:c é", "x:y"), "a%25b%3Ac é:x:y");
        // The gateway's own ids stay as made.
        let p = run(&user(|_| {}), "", "SELECT 1").unwrap();
        assert_eq!((&*p.query_id, p.client_query_id.as_str()), ("gen-1", "gen-1"));
    }

    #[test]
    fn operator_statements_are_refused_unless_allowed_by_kind() {
        for (q, kind) in [
            ("KILL QUERY WHERE user = 'default'", "kill"),
            (" /* c */ kill query where query_id = 'x' SYNC", "kill"),
            ("# c\nKILL QUERY WHERE 1", "kill"),
            ("SYSTEM SHUTDOWN", "system"),
            ("SELECT 1 PARALLEL WITH SYSTEM SHUTDOWN", "system"),
            ("CREATE USER u", "access"),
            ("GRANT ALL ON *.* TO u", "access"),
            ("DROP DATABASE d", "drop"),
            ("DROP FUNCTION f", "server"),
        ] {
            let e = run(&user(|_| {}), "", q).unwrap_err();
            assert_eq!(e.status(), http::StatusCode::FORBIDDEN, "{q}");
            assert!(e.message.contains(&format!("add '{kind}' to the user's operator_statements")), "{q}: {e}");
            let allowed = user(|u| u.operators.insert(Operator::from_name(kind).unwrap()).then_some(()).unwrap());
            assert!(run(&allowed, "", q).is_ok(), "{q}");
        }
    }

    #[test]
    fn tables_are_dropped_only_in_the_users_own_databases() {
        let own = user(|u| u.own_databases = crate::config::Names::Only(["app".to_string()].into()));
        for (params, q, ok) in [
            ("", "DROP TABLE app.t", true),
            ("", "DROP TABLE IF EXISTS app.t, app.u", true),
            ("", "DROP TABLE app.t, other.u", false),
            ("", "DROP TABLE t", false),
            ("database=app", "DROP TABLE t", true),
            ("database=app", "RENAME TABLE t TO other.t", false),
            ("database=app", "TRUNCATE t", true),
            ("database=app&database=other", "TRUNCATE t", false),
            ("", "CREATE OR REPLACE TABLE default.items (x UInt8) ENGINE = Memory", false),
            ("", "EXCHANGE TABLES app.a AND default.items", false),
            ("", "DROP TEMPORARY TABLE t", true),
            ("", "CREATE TABLE t (x UInt8) ENGINE = Memory", true),
        ] {
            assert_eq!(run(&own, params, q).is_ok(), ok, "{params} {q}");
        }
        let dropper = user(|u| {
            u.operators.insert(Operator::Drop);
        });
        assert!(run(&dropper, "", "DROP TABLE t").is_ok());
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
