//! The request path as tower layers. The order, outermost first:
//!
//! 1. [`GlobalAdmission`]: the gateway-wide concurrency limit with its FIFO queue and maximum
//!    wait. Over it: 503 at once. First, so an overloaded gateway spends nothing else.
//! 2. [`Authenticate`]: user and password (basic auth, `X-ClickHouse-User`/`-Key`, or the `user`
//!    and `password` parameters), then the user's networks. 401 (with `WWW-Authenticate`, as
//!    ClickHouse sends it) / 403. A user name that no configured user could have (empty, over
//!    [`crate::config::MAX_USER_NAME`] bytes, control characters) gets a 401 that says so.
//! 3. [`UserAdmission`]: the user's requests per second (429), then the user's concurrency limit
//!    and queue (429).
//! 4. [`Proxy`]: rules on settings and writes, routing, replica choice, retries, streaming
//!    ([`crate::proxy::handle`]).
//!
//! Every permit taken on the way travels with the response body and is released when the body
//! ends or is dropped (RAII), so a slot is held exactly as long as the client is being served.
//! The request body is a [`ClientBody`]: the server drops the whole stack's future when the client
//! stops sending it (`limits.client_body_idle_timeout`), which frees the permits held meanwhile.
//!
//! Metrics label a request with its user only once the user is authenticated; before that, and
//! for unknown users, the label is [`UNKNOWN_USER`].

use crate::body::Guarded;
use crate::client_body::ClientBody;
use crate::cluster::upstream::GBody;
use crate::metrics::{RequestLabels, UNKNOWN_USER};
use crate::proxy::reply;
use crate::state::State;
use http::{Request, Response, StatusCode};
use sha2::Digest;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

type Fut = Pin<Box<dyn Future<Output = Result<Response<GBody>, Infallible>> + Send>>;

/// The client's address, put into request extensions by the server.
#[derive(Clone, Copy, Debug)]
pub struct ClientAddr(pub SocketAddr);

/// Filled by [`Authenticate`] with the authenticated user's name, for the server, which counts
/// a request it gives up on (a stalled body) under that user.
#[derive(Clone, Debug, Default)]
pub struct AuthenticatedAs(pub Arc<std::sync::OnceLock<String>>);

impl AuthenticatedAs {
    /// The metrics label: the authenticated user, or [`UNKNOWN_USER`].
    pub fn label(&self) -> String {
        self.0.get().cloned().unwrap_or_else(|| UNKNOWN_USER.to_string())
    }
}

fn state_of<B>(req: &Request<B>) -> Arc<State> {
    req.extensions().get::<Arc<State>>().cloned().expect("the server puts the state in every request")
}

/// The realm ClickHouse names in its 401 answers (18.16 and current releases).
pub const WWW_AUTHENTICATE: &str = "Basic realm=\"ClickHouse server HTTP API\"";

/// Counts a rejection under `user` (a configured user's name, or [`UNKNOWN_USER`]) and answers
/// `msg` in one line; a 401 carries `WWW-Authenticate`.
fn rejected(state: &State, user: &str, status: StatusCode, msg: String) -> Response<GBody> {
    state
        .metrics
        .requests
        .get_or_create(&RequestLabels { user: user.to_string(), status: status.as_u16(), route: "rejected" })
        .inc();
    with_www_authenticate(reply(status, msg))
}

/// Adds `WWW-Authenticate` to a 401 that lacks it; other answers pass unchanged.
pub fn with_www_authenticate(mut resp: Response<GBody>) -> Response<GBody> {
    if resp.status() == StatusCode::UNAUTHORIZED && !resp.headers().contains_key(http::header::WWW_AUTHENTICATE) {
        resp.headers_mut().insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static(WWW_AUTHENTICATE));
    }
    resp
}

macro_rules! layer {
    ($layer:ident, $svc:ident) => {
        #[derive(Clone, Default)]
        pub struct $layer;
        impl<S> Layer<S> for $layer {
            type Service = $svc<S>;
            fn layer(&self, inner: S) -> $svc<S> {
                $svc { inner }
            }
        }
        #[derive(Clone)]
        pub struct $svc<S> {
            inner: S,
        }
        impl<S> Service<Request<ClientBody>> for $svc<S>
        where
            S: Service<Request<ClientBody>, Response = Response<GBody>, Error = Infallible, Future = Fut>
                + Clone
                + Send
                + 'static,
        {
            type Response = Response<GBody>;
            type Error = Infallible;
            type Future = Fut;
            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
                Poll::Ready(Ok(()))
            }
            fn call(&mut self, req: Request<ClientBody>) -> Fut {
                $svc::serve(self.inner.clone(), req)
            }
        }
    };
}

/// The response with `guard` riding on its body (released when the body ends or is dropped).
fn guarded(resp: Response<GBody>, guard: impl std::any::Any + Send) -> Response<GBody> {
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, Guarded::wrap(body, guard))
}

layer!(GlobalAdmissionLayer, GlobalAdmission);
layer!(AuthLayer, Authenticate);
layer!(UserAdmissionLayer, UserAdmission);

impl<S> GlobalAdmission<S>
where
    S: Service<Request<ClientBody>, Response = Response<GBody>, Error = Infallible, Future = Fut>
        + Clone
        + Send
        + 'static,
{
    fn serve(mut inner: S, req: Request<ClientBody>) -> Fut {
        Box::pin(async move {
            let state = state_of(&req);
            state.metrics.queued.set(state.global.queued() as i64);
            let permit = match state.global.acquire().await {
                Ok(p) => p,
                Err(why) => {
                    return Ok(rejected(
                        &state,
                        UNKNOWN_USER,
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("chstorm gateway: overloaded: {why}"),
                    ))
                }
            };
            state.metrics.in_flight.set(state.global.in_flight() as i64);
            Ok(guarded(inner.call(req).await?, permit))
        })
    }
}

/// Who the request says it is: (user, password).
fn credentials<B>(req: &Request<B>) -> (String, String) {
    let h = req.headers();
    if let Some(basic) = h
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic ").or_else(|| v.strip_prefix("basic ")))
    {
        use base64::Engine as _;
        if let Ok(dec) = base64::engine::general_purpose::STANDARD.decode(basic.trim()) {
            let s = String::from_utf8_lossy(&dec).into_owned();
            let (u, p) = s.split_once(':').unwrap_or((&s, ""));
            return (u.to_string(), p.to_string());
        }
    }
    let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    let params = crate::request::parse_params(req.uri().query());
    let param = |n: &str| params.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let user = header("x-clickhouse-user").or_else(|| param("user")).unwrap_or_else(|| "default".into());
    let password = header("x-clickhouse-key").or_else(|| param("password")).unwrap_or_default();
    (user, password)
}

impl<S> Authenticate<S>
where
    S: Service<Request<ClientBody>, Response = Response<GBody>, Error = Infallible, Future = Fut>
        + Clone
        + Send
        + 'static,
{
    fn serve(mut inner: S, mut req: Request<ClientBody>) -> Fut {
        Box::pin(async move {
            let state = state_of(&req);
            let (name, password) = credentials(&req);
            let addr = req.extensions().get::<ClientAddr>().map(|a| a.0.ip());
            let user = match authenticate(&state, &name, &password, addr) {
                Ok(u) => u,
                Err(r) => return Ok(rejected(&state, &r.label, r.status, r.message)),
            };
            if let Some(who) = req.extensions().get::<AuthenticatedAs>() {
                let _ = who.0.set(name.clone());
            }
            req.extensions_mut().insert(Authed(user.clone()));
            inner.call(req).await
        })
    }
}

/// Why [`authenticate`] refused a client.
#[derive(Debug, Clone)]
pub struct AuthRefusal {
    /// 401 (unknown user, wrong password, a name no user could have) or 403 (network).
    pub status: StatusCode,
    /// The metrics label: the user's name once the password was right, else [`UNKNOWN_USER`].
    pub label: String,
    /// The one-line message for the client.
    pub message: String,
}

/// Checks a client's user name, password and address against the configured users: the one
/// check of both listeners (HTTP here, native in `crate::native`).
pub fn authenticate(
    state: &State,
    name: &str,
    password: &str,
    addr: Option<std::net::IpAddr>,
) -> Result<Arc<crate::state::UserRt>, AuthRefusal> {
    let refuse = |status, label: &str, message: String| AuthRefusal { status, label: label.to_string(), message };
    if let Err(why) = crate::config::check_user_name(name) {
        return Err(refuse(StatusCode::UNAUTHORIZED, UNKNOWN_USER, format!("chstorm gateway: {why}")));
    }
    let wrong =
        || refuse(StatusCode::UNAUTHORIZED, UNKNOWN_USER, "chstorm gateway: unknown user or wrong password".into());
    let Some(user) = state.users.get(name) else { return Err(wrong()) };
    let ok = match &user.cfg.password_sha256 {
        None => password.is_empty(),
        Some(hash) => sha2::Sha256::digest(password.as_bytes()).as_slice() == hash,
    };
    if !ok {
        return Err(wrong());
    }
    let allowed = addr.is_some_and(|ip| {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map(std::net::IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        user.cfg.networks.iter().any(|n| n.contains(&ip))
    });
    if !allowed {
        let from = addr.map(|a| a.to_string()).unwrap_or_else(|| "?".into());
        return Err(refuse(
            StatusCode::FORBIDDEN,
            name,
            format!("chstorm gateway: user '{name}' may not connect from {from}"),
        ));
    }
    Ok(user.clone())
}

/// The authenticated user, resolved once by [`Authenticate`] and carried in the request's
/// extensions to the layers below.
#[derive(Clone)]
pub struct Authed(pub Arc<crate::state::UserRt>);

impl<S> UserAdmission<S>
where
    S: Service<Request<ClientBody>, Response = Response<GBody>, Error = Infallible, Future = Fut>
        + Clone
        + Send
        + 'static,
{
    fn serve(mut inner: S, req: Request<ClientBody>) -> Fut {
        Box::pin(async move {
            let state = state_of(&req);
            let Some(Authed(user)) = req.extensions().get::<Authed>().cloned() else {
                return Ok(rejected(
                    &state,
                    UNKNOWN_USER,
                    StatusCode::UNAUTHORIZED,
                    "chstorm gateway: unknown user".into(),
                ));
            };
            let name = &user.cfg.name;
            if let Some(rate) = &user.rate {
                if let Err(why) = rate.check() {
                    return Ok(rejected(
                        &state,
                        name,
                        StatusCode::TOO_MANY_REQUESTS,
                        format!("chstorm gateway: user '{name}': {why}"),
                    ));
                }
            }
            let permit = match user.limiter.acquire().await {
                Ok(p) => p,
                Err(why) => {
                    return Ok(rejected(
                        &state,
                        name,
                        StatusCode::TOO_MANY_REQUESTS,
                        format!("chstorm gateway: user '{name}': {why}"),
                    ))
                }
            };
            Ok(guarded(inner.call(req).await?, permit))
        })
    }
}

/// The innermost service.
#[derive(Clone, Default)]
pub struct Proxy;

impl Service<Request<ClientBody>> for Proxy {
    type Response = Response<GBody>;
    type Error = Infallible;
    type Future = Fut;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: Request<ClientBody>) -> Fut {
        Box::pin(async move {
            let state = state_of(&req);
            let Some(user) = req.extensions().get::<Authed>().map(|u| u.0.cfg.clone()) else {
                return Ok(with_www_authenticate(reply(StatusCode::UNAUTHORIZED, "chstorm gateway: unknown user")));
            };
            Ok(crate::proxy::handle(state, user, req).await)
        })
    }
}

/// The whole stack's type: zero-sized services, so a copy per request costs nothing.
pub type Stack = GlobalAdmission<Authenticate<UserAdmission<Proxy>>>;

/// The stack, in the order documented above; built once per config (`State::stack`).
pub fn stack() -> Stack {
    tower::ServiceBuilder::new().layer(GlobalAdmissionLayer).layer(AuthLayer).layer(UserAdmissionLayer).service(Proxy)
}
