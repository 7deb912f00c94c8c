//! The HTTP front's query service: one request that is a query, from admission to the answer.
//! The order:
//!
//! 1. Authentication ([`crate::query::auth::authenticate`]) of the credentials found by
//!    [`credentials`] (basic auth, `X-ClickHouse-User`/`-Key`, or the `user` and `password`
//!    parameters), then the user's networks. 401 (with `WWW-Authenticate`, as ClickHouse sends
//!    it) / 403. A user name that no configured user could have (empty, over
//!    [`crate::config::MAX_USER_NAME`] bytes, control characters) gets a 401 that says so.
//! 2. The user's rate ([`crate::query::admission::admit_rate`]): its requests per second (429).
//! 3. The query's slots ([`super::respond::take_slots`]): the user's concurrency limit and queue
//!    (429), then the gateway-wide limit with its FIFO queue and maximum wait (503 at once). The
//!    gateway's after the user's, so a query waiting in its user's queue holds none of the
//!    gateway's slots: a user over its own limit cannot fill the gateway and starve the others. A
//!    user with a cache takes its slots in [`query`], once its query needs a server: a kept
//!    answer or a merged read (`super::cached`) waits in no queue.
//! 4. [`query`]: the body read ([`super::read`]), the [`QueryRequest`] made of it and planned
//!    ([`crate::query::plan`]), the attempts run ([`crate::attempt`]) and the answer written
//!    ([`super::respond`]), with the query's end recorded once ([`crate::query::exit`]).
//!
//! Every permit taken on the way travels with the response body and is released when the body
//! ends or is dropped (RAII), so a slot is held exactly as long as the client is being served.
//! The request body is any body (the connection's is a `super::client_body::ClientBody`, a
//! test's is in memory): the connection drops this future when the client stops
//! sending it (`limits.client_body_idle_timeout`), which frees the permits held meanwhile.
//!
//! The gateway's [`State`] is passed in by the connection ([`super::conn`]); nothing is fetched
//! from the request's extensions. Metrics label a request with its user only once the user is
//! authenticated; before that, and for unknown users, the label is [`UNKNOWN_USER`].

use super::client_fin::ClientFin;
use super::ids::Served;
use super::read::ClientBody;
use super::respond::{guarded, take_slots, wording, Answer};
pub use super::respond::{refused, with_www_authenticate};
use crate::attempt::{HttpParts, SendBody};
use crate::cluster::upstream::BoxError;
use crate::config::User;
use crate::metrics::UNKNOWN_USER;
use crate::query::admission::{admit_rate, UserRt};
use crate::query::auth::authenticate;
use crate::query::cacheable::Caching;
use crate::query::exit::Exit;
use crate::query::refusal::{Kind, Refusal};
use crate::query::request::{new_query_id, BodyShape, QueryRequest};
use crate::request::{HOP_BY_HOP, SHARD_KEY_HEADER};
use crate::state::State;
use bytes::Bytes;
use chstorm_sql::statement::StatementKind;
use http::request::Parts;
use http::{HeaderMap, Method, Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use std::net::SocketAddr;
use std::sync::Arc;

/// Filled with the authenticated user's name, for the connection, which counts a request it
/// gives up on (a stalled body) under that user.
#[derive(Clone, Debug, Default)]
pub struct AuthenticatedAs(pub Arc<std::sync::OnceLock<String>>);

impl AuthenticatedAs {
    /// The metrics label: the authenticated user, or [`UNKNOWN_USER`].
    pub fn label(&self) -> String {
        self.0.get().cloned().unwrap_or_else(|| UNKNOWN_USER.to_string())
    }
}

/// Headers not passed from the client to a backend besides the hop-by-hop ones: `expect` (the
/// gateway answered it), `host`, the client's credentials (the gateway authenticates to the
/// backends itself), the gateway's own, and the length (the forwarded body sets its own).
const NOT_FORWARDED: &[&str] = &[
    "expect",
    "host",
    "authorization",
    "x-clickhouse-user",
    "x-clickhouse-key",
    "x-clickhouse-quota",
    SHARD_KEY_HEADER,
    "content-length",
];

static X_CLICKHOUSE_QUOTA: http::HeaderName = http::HeaderName::from_static("x-clickhouse-quota");

/// The client's quota key, carried once, as the `quota_key` parameter: the gateway authenticates
/// to its replicas with `Authorization`, beside which a current server reads the quota key from
/// that parameter only (`authenticateUserByHTTP.cpp`), and 18.16 reads the parameter too. A key
/// in `X-ClickHouse-Quota` becomes the parameter; one given both ways, differently, is refused as
/// a current server refuses it (Code 36).
fn quota_key_once(params: &mut Vec<(String, String)>, headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(header) = headers.get(&X_CLICKHOUSE_QUOTA).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    else {
        return Ok(());
    };
    match params.iter().find(|(k, _)| k == "quota_key") {
        Some((_, p)) if *p == header => Ok(()),
        Some(_) => Err(Refusal::clickhouse(
            36,
            "Code: 36, e.displayText() = DB::Exception: Invalid authentication: it is not allowed to use \
             X-ClickHouse-Quota HTTP header and 'quota_key' parameter simultaneously"
                .into(),
        )),
        None => {
            params.push(("quota_key".into(), header));
            Ok(())
        }
    }
}

/// Serves one query request of the client at `peer`, in the order documented above; `who` is
/// told the user once authenticated. A read is abandoned when `fin` comes (the client's FIN on
/// the connection; None where no connection is watched).
///
/// The request comes boxed, as the fronts make it: each layer of the query's future moves a
/// pointer, not the request's 352 bytes (which the profile showed copied at every layer).
pub async fn serve<B>(
    state: Arc<State>,
    req: Box<Request<B>>,
    peer: SocketAddr,
    who: &AuthenticatedAs,
    fin: Option<&ClientFin>,
) -> Served
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let (name, password) = credentials(&req);
    let user = match authenticate(&state.users, &name, &password, Some(peer.ip())) {
        Ok(u) => u,
        Err(d) => return refused(&Exit::new(&state.metrics, &d.label), &d.refusal, wording(&state, None)).into(),
    };
    let _ = who.0.set(name);
    if let Err(r) = admit_rate(&user) {
        let w = wording(&state, Some(&user.cfg.cluster));
        return refused(&Exit::new(&state.metrics, &user.cfg.name), &r, w).into();
    }
    if user.cfg.cache.is_some() {
        // Its slots once its query needs a server (`query`).
        return query(state, user.cfg.clone(), req, fin, Some(&user)).await;
    }
    match take_slots(&state, &user).await {
        Ok(slots) => guarded(query(state, user.cfg.clone(), req, fin, None).await, slots),
        Err(refusal) => refusal,
    }
}

static X_CLICKHOUSE_USER: http::HeaderName = http::HeaderName::from_static("x-clickhouse-user");
static X_CLICKHOUSE_DATABASE: http::HeaderName = http::HeaderName::from_static("x-clickhouse-database");
static X_CHSTORM_SHARD_KEY: http::HeaderName = http::HeaderName::from_static(SHARD_KEY_HEADER);

/// Who the request says it is: (user, password).
pub fn credentials<B>(req: &Request<B>) -> (String, String) {
    let [authorization, user, password] = crate::request::first_headers(
        req.headers(),
        [&http::header::AUTHORIZATION, &X_CLICKHOUSE_USER, &crate::request::X_CLICKHOUSE_KEY],
    );
    if let Some(basic) = authorization.and_then(|v| v.strip_prefix("Basic ").or_else(|| v.strip_prefix("basic "))) {
        use base64::Engine as _;
        if let Ok(dec) = base64::engine::general_purpose::STANDARD.decode(basic.trim()) {
            let s = String::from_utf8_lossy(&dec).into_owned();
            let (u, p) = s.split_once(':').unwrap_or((&s, ""));
            return (u.to_string(), p.to_string());
        }
    }
    let (user, password) = (user.map(str::to_string), password.map(str::to_string));
    let [param_user, param_password] = match (&user, &password) {
        (Some(_), Some(_)) => [None, None],
        _ => crate::request::first_params(req.uri().query(), ["user", "password"]),
    };
    let user = user.or(param_user).unwrap_or_else(|| "default".into());
    (user, password.or(param_password).unwrap_or_default())
}

/// True when the request names a user or a password at all (basic auth, `X-ClickHouse-User` or
/// `-Key`, the `user` or `password` parameter); else ClickHouse takes it for user `default`
/// without a password, as [`credentials`] does.
pub fn names_credentials<B>(req: &Request<B>) -> bool {
    let h = req.headers();
    let in_headers = [&http::header::AUTHORIZATION, &X_CLICKHOUSE_USER, &crate::request::X_CLICKHOUSE_KEY]
        .into_iter()
        .any(|name| h.contains_key(name));
    in_headers || crate::request::first_params(req.uri().query(), ["user", "password"]).iter().any(Option::is_some)
}

/// What a request may see of the gateway's own listings: `/metrics` on the client port, and
/// the replicas' URLs in `/replicas_status`.
pub enum Listing {
    /// Authenticated as a user with `metrics: true`, from one of its networks.
    Allowed,
    /// It names no credentials, and the user `default` (whom such a request is) may not: the
    /// answer is the one ClickHouse gives a path it has no handler for.
    Anonymous,
    /// Its credentials fail (401, or 403 for the network), or its user may not (403); the
    /// refusal and its metrics label.
    Refused(Refusal, String),
}

/// Whether the client at `peer` may read the gateway's own listings ([`Listing`]).
pub fn listing_access<B>(state: &State, req: &Request<B>, peer: SocketAddr) -> Listing {
    let (name, password) = credentials(req);
    match authenticate(&state.users, &name, &password, Some(peer.ip())) {
        Ok(u) if u.cfg.metrics => Listing::Allowed,
        _ if !names_credentials(req) => Listing::Anonymous,
        Ok(u) => Listing::Refused(
            Refusal::new(
                Kind::Forbidden,
                format!("user '{name}' may not read the gateway's metrics (`metrics: true` on the user allows it)"),
            ),
            u.cfg.name.clone(),
        ),
        Err(d) => Listing::Refused(d.refusal, d.label),
    }
}

/// One authenticated query of user `u`: read, planned, sent and answered; a read is abandoned
/// when `fin` comes. Admitted already, or `late`: a user with a cache, whose slots are taken
/// here once the query needs a server (an answer kept, or an identical read's, needs none).
pub async fn query<B>(
    state: Arc<State>,
    u: Arc<User>,
    req: Box<Request<B>>,
    fin: Option<&ClientFin>,
    late: Option<&UserRt>,
) -> Served
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let exit = Exit::new(&state.metrics, &u.name);
    let Some(cluster) = state.clusters.get(&u.cluster) else {
        let why = format!("user '{}' names cluster '{}', which is gone", u.name, u.cluster);
        return refused(&exit, &Refusal::new(Kind::Internal, why), wording(&state, None)).into();
    };
    let (parts, body) = (*req).into_parts();
    let body = body.map_err(|e| Box::new(e) as BoxError).boxed_unsync();
    let read =
        match super::read::read_within(&parts, body, crate::query::plan::restricted(&u), &state.client_mem()).await {
            Ok(r) => r,
            Err(refusal) => return refused(&exit, &refusal, wording(&state, Some(&u.cluster))).into(),
        };
    // The held body's room on the memory budget, until the attempts are done with it.
    let _held = read.charge;
    let max_per_query = cluster.budget.as_ref().map(|b| b.cfg.max_per_query);
    let mut params = read.params;
    if let Err(refusal) = quota_key_once(&mut params, &parts.headers) {
        return refused(&exit, &refusal, wording(&state, Some(&u.cluster))).into();
    }
    let mut request = query_request(&parts, params, read.sql.as_deref(), read.shape, read.form_read, &state);
    request.grammars = cluster.grammars();
    let plan = match crate::query::plan::plan(request, &u, &cluster.cfg, max_per_query, new_query_id) {
        Ok(p) => p,
        Err(refusal) => return refused(&exit, &refusal, wording(&state, Some(&u.cluster))).into(),
    };
    let http = for_http(&parts, u.readonly, plan.replace_body.is_some() || read.shape == BodyShape::Held);
    let body = match read.body {
        ClientBody::Held(b) => SendBody::Held(b),
        ClientBody::Streamed { head, rest } => {
            SendBody::Once(Some(crate::cluster::upstream::Prefixed::wrap(head, rest)))
        }
        ClientBody::Opaque(b) => SendBody::Once(Some(b)),
    };
    if let Caching::Skip(why) = &plan.caching {
        let labels = crate::metrics::SkipLabels { user: u.name.clone(), reason: why.label() };
        state.metrics.cache.skipped.get_or_create(&labels).inc();
    }
    let mut slots = None;
    if let Some(user) = late.filter(|_| plan.caching != Caching::Eligible) {
        match take_slots(&state, user).await {
            Ok(s) => slots = Some(s),
            Err(refusal) => return refusal,
        }
    }
    if plan.session.is_some() {
        let login = state.login(&u, cluster);
        let served = crate::out_of_line::boxed(|| in_session(&state, cluster, login, &exit, plan, http, body)).await;
        return with_slots(served, slots);
    }
    let (plan, http, body) = match &plan.caching {
        Caching::Off | Caching::Skip(_) => (plan, http, body),
        Caching::Eligible => {
            let login = state.login(&u, cluster);
            let fin = fin.filter(|_| plan.kind == StatementKind::Read);
            let job = super::cached::Job { plan, http, body, late };
            match crate::out_of_line::boxed(|| super::cached::serve(&state, &u, login, &exit, job, fin)).await {
                super::cached::Cached::Served(s) => return s,
                super::cached::Cached::Alone(p, h, b, s) => {
                    slots = s;
                    (p, h, b)
                }
                super::cached::Cached::Fin => {
                    let w = wording(&state, Some(&u.cluster));
                    return refused(&exit, &Refusal::new(Kind::Internal, FIN_DURING_READ), w).into();
                }
            }
        }
    };
    with_slots(run(&state, &u, cluster, &exit, (plan, http, body), fin, read.sql.as_deref()).await, slots)
}

/// `served` with the query's late slots riding on its body, when it took any.
fn with_slots(served: Served, slots: Option<crate::query::admission::Slots>) -> Served {
    match slots {
        Some(s) => guarded(served, s),
        None => served,
    }
}

/// The attempts of a planned query outside a session and the cache, and its answer.
async fn run(
    state: &Arc<State>,
    u: &User,
    cluster: &crate::state::ClusterRt,
    exit: &Exit<'_>,
    (plan, http, body): (crate::query::plan::Plan, HttpParts, SendBody),
    fin: Option<&ClientFin>,
    sql: Option<&str>,
) -> Served {
    let mut plan = plan;
    let ctx = cluster.attempt_ctx(state, state.login(u, cluster), cluster.head_times(plan.target));
    // A read is abandoned at the client's FIN (`super::client_fin`); anything else runs to its end.
    let fin = fin.filter(|_| plan.kind == StatementKind::Read);
    let outcome = {
        // Made in its place and polled there: the attempts' future is over a kilobyte, and
        // `select!` would copy it into its own state.
        let mut run = std::pin::pin!(crate::attempt::run(&plan, http, body, &ctx));
        match fin {
            Some(fin) => tokio::select! {
                o = run.as_mut() => o,
                _ = fin.came() => {
                    let w = wording(state, Some(&u.cluster));
                    return refused(exit, &Refusal::new(Kind::Internal, FIN_DURING_READ), w).into();
                }
            },
            None => run.await,
        }
    };
    let mut outcome = outcome;
    name_the_time_cap(&mut outcome, plan.time_cap).await;
    let query_id = std::mem::take(&mut plan.client_query_id);
    let warning = crate::query::ddl::warning(&plan, sql);
    Answer { exit, fin, warning, words: (state, &u.cluster) }.outcome(
        outcome,
        plan.target.label(),
        query_id,
        plan.body_deadline,
    )
}

/// A query in an HTTP session ([`super::session`]): to the session's home, checked there
/// (`session_check=1`), the session moved first when its home is down, or after the home
/// restarted (Code 372, SESSION_NOT_FOUND) and the request is sent again; a session that cannot
/// be carried fails in one line. A session's query is never retried nor hedged, so the client's
/// FIN does not abandon it either. Its requests and replays go as `login`, the user's: a
/// server keeps a session per its own user.
async fn in_session(
    state: &State,
    cluster: &crate::state::ClusterRt,
    login: &Arc<crate::cluster::login::BackendLogin>,
    exit: &Exit<'_>,
    mut plan: crate::query::plan::Plan,
    http: crate::attempt::HttpParts,
    body: SendBody,
) -> Served {
    use super::session::{Replay, Route};
    let Some(s) = plan.session.clone() else { unreachable!("in_session takes a session's plan") };
    let replay = Replay { backend: &state.backend, login, timeout: s.timeout.clone() };
    let again = match &body {
        SendBody::Held(b) => Some(b.clone()),
        SendBody::Once(_) => None,
    };
    let mut body = Some(body);
    let (mut restarted, mut tries) = (false, 0);
    loop {
        let route = match cluster.sessions.route(&s.id, &cluster.balancer, &replay, restarted).await {
            Ok(r) => r,
            Err(why) => {
                let w = wording(state, Some(&cluster.balancer.cluster));
                return refused(exit, &Refusal::new(Kind::SessionLost, why), w).into();
            }
        };
        let mut attempt_plan = plan.clone();
        if let Route::Home(at) | Route::Moved { to: at, .. } = &route {
            attempt_plan.pinned = Some(*at);
            attempt_plan.push_param("session_check", "1");
        }
        let ctx = cluster.attempt_ctx(state, login, cluster.head_times(attempt_plan.target));
        let Some(send) = body.take().or_else(|| again.clone().map(SendBody::Held)) else {
            unreachable!("a streamed body is sent once")
        };
        let mut outcome = crate::attempt::run(&attempt_plan, http.clone(), send, &ctx).await;
        let at_home = matches!(route, Route::Home(_)) && again.is_some() && tries < 2;
        tries += 1;
        if at_home && session_not_found(&mut outcome).await {
            // The home restarted: carried back to it.
            restarted = true;
            continue;
        }
        if at_home && home_gone(&outcome, plan.kind, &route, &cluster.balancer) {
            // The home died under this request, which surely did not run there (or is a read):
            // the session moves, and the request goes with it.
            restarted = false;
            continue;
        }
        if let crate::attempt::Outcome::Answer(a) = &mut outcome {
            if a.head.resp.status().is_success() {
                let timeout =
                    s.timeout.as_deref().and_then(|t| t.trim().parse::<u64>().ok()).map(std::time::Duration::from_secs);
                cluster.sessions.answered(&s.id, (a.won.replica.shard, a.won.replica.index), timeout, &s.effect);
            }
            if let Route::Moved { from, .. } = &route {
                let to = a.won.replica.label().to_string();
                if let Ok(v) = http::HeaderValue::from_str(&format!("{from} -> {to}")) {
                    a.head.resp.headers_mut().insert("x-chstorm-session-moved", v);
                }
            }
        }
        name_the_time_cap(&mut outcome, plan.time_cap).await;
        let query_id = std::mem::take(&mut plan.client_query_id);
        let words = (state, cluster.balancer.cluster.as_str());
        return Answer { exit, fin: None, warning: None, words }.outcome(
            outcome,
            plan.target.label(),
            query_id,
            plan.body_deadline,
        );
    }
}

/// Whether a session's request failed because its home went down (it is not healthy now), in a
/// way that lets it be sent again: it never reached the server, or it is a read.
fn home_gone(
    outcome: &crate::attempt::Outcome,
    kind: StatementKind,
    route: &super::session::Route,
    balancer: &crate::cluster::balancer::Balancer,
) -> bool {
    let super::session::Route::Home(at) = route else { return false };
    let crate::attempt::Outcome::Failed { unsent, .. } = outcome else { return false };
    let down = balancer.replica_at(*at).is_some_and(|r| !r.is_healthy());
    down && (*unsent || kind == StatementKind::Read)
}

/// Whether `outcome` is a server's SESSION_NOT_FOUND (Code 372): the session's home lost it.
/// The error answer, read whole already, is left as it was.
async fn session_not_found(outcome: &mut crate::attempt::Outcome) -> bool {
    let crate::attempt::Outcome::Answer(a) = outcome else { return false };
    let Some((parts, text, code)) = error_answer(a).await else { return false };
    a.head.resp = Response::from_parts(parts, crate::cluster::upstream::full(text));
    if code == Some(372) {
        a.won.guard.disarm();
        return true;
    }
    false
}

/// A replica's error answer held whole, taken apart to be read: its head, its text and its
/// exception code. None for a success or an answer that streams (it is left as it was).
async fn error_answer(
    a: &mut crate::attempt::Answered<crate::attempt::HttpHead>,
) -> Option<(http::response::Parts, Bytes, Option<i32>)> {
    if a.head.resp.status().is_success() || a.head.whole.is_none() {
        return None;
    }
    let resp = std::mem::replace(&mut a.head.resp, Response::new(crate::cluster::upstream::empty()));
    let (parts, body) = resp.into_parts();
    let text = http_body_util::BodyExt::collect(body).await.map(|b| b.to_bytes()).unwrap_or_default();
    let header = parts.headers.get("x-clickhouse-exception-code").and_then(|v| v.to_str().ok());
    let code = chstorm_proto::rules::http_exception_code(header, &text);
    Some((parts, text, code))
}

/// A server's `Timeout exceeded` (Code 159) at the limit the gateway set for the user
/// (`users[].max_execution_time`, `cap`) says so: a query that runs longer direct fails
/// through the gateway, and the server's text names only `maximum: N`.
async fn name_the_time_cap(outcome: &mut crate::attempt::Outcome, cap: Option<std::time::Duration>) {
    let (Some(cap), crate::attempt::Outcome::Answer(a)) = (cap, outcome) else { return };
    let Some((parts, text, code)) = error_answer(a).await else { return };
    let capped = code == Some(chstorm_proto::rules::TIMEOUT_EXCEEDED)
        && chstorm_proto::rules::timeout_maximum(&text).is_some_and(|m| (m - cap.as_secs_f64().ceil()).abs() < 1e-3);
    let text = if capped {
        let shown = String::from_utf8_lossy(&text);
        Bytes::from(format!("{} ({})\n", shown.trim_end(), crate::query::plan::time_cap_note(cap)))
    } else {
        text
    };
    a.head.whole = Some(text.len() as u64);
    a.head.resp = Response::from_parts(parts, crate::cluster::upstream::full(text));
}

/// The answer to a read whose client sent its FIN before the answer came (ClickHouse's
/// QUERY_WAS_CANCELLED).
const FIN_DURING_READ: &str = "Code: 394, e.displayText() = DB::Exception: Query was cancelled: the client closed its \
side of the connection during a read (a read is abandoned at the client's FIN; other statements run to their end)";

/// The [`QueryRequest`] of an HTTP request: its path, the parameters and statement read by
/// [`super::read`], and what its method and headers say.
fn query_request<'a>(
    parts: &'a Parts,
    params: Vec<(String, String)>,
    sql: Option<&'a str>,
    body: BodyShape,
    form_read: bool,
    state: &State,
) -> QueryRequest<'a> {
    let [shard_key, database, content_type, cache_control] = crate::request::first_headers(
        &parts.headers,
        [&X_CHSTORM_SHARD_KEY, &X_CLICKHOUSE_DATABASE, &http::header::CONTENT_TYPE, &http::header::CACHE_CONTROL],
    );
    QueryRequest {
        path: parts.uri.path(),
        params,
        sql,
        body,
        multipart: super::read::is_multipart_type(content_type),
        form_read,
        statement_in_url: parts.method == Method::GET,
        shard_key,
        database,
        max_depth: state.config.limits.max_query_depth,
        grammars: chstorm_sql::reading::Grammars::ALL,
        no_cache: cache_control.is_some_and(|v| v.to_ascii_lowercase().contains("no-cache")),
    }
}

/// The HTTP parts of the backend request: the client's method, except that a read-only user's
/// GET goes as a POST (18.16 refuses `readonly=1` on a GET, which runs with `readonly=2`), and
/// the client's headers that go on (without `content-encoding` when the body goes `decoded`:
/// held or rewritten).
fn for_http(parts: &Parts, readonly: bool, decoded: bool) -> HttpParts {
    let method = if readonly && parts.method == Method::GET { Method::POST } else { parts.method.clone() };
    HttpParts { method, headers: forwarded(&parts.headers, decoded) }
}

/// The client's `headers` a backend gets; without `content-encoding` when `decoded`. When none
/// goes on (a client that sends only `Host`, or credentials), one empty map shared by all.
fn forwarded(headers: &HeaderMap, decoded: bool) -> Arc<HeaderMap> {
    static NONE: std::sync::LazyLock<Arc<HeaderMap>> = std::sync::LazyLock::new(Default::default);
    let stays = |k: &str| NOT_FORWARDED.contains(&k) || HOP_BY_HOP.contains(&k) || (decoded && k == "content-encoding");
    let mut out = HeaderMap::new();
    for (k, v) in headers.iter().filter(|(k, _)| !stays(k.as_str())) {
        out.append(k.clone(), v.clone());
    }
    if out.is_empty() {
        return NONE.clone();
    }
    Arc::new(out)
}

#[cfg(test)]
mod tests;
