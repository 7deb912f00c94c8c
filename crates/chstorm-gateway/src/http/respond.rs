//! `respond`: writing the HTTP answer. A one-line answer of the gateway ([`reply`]), and the
//! attempts' outcome for a planned request ([`Answer::outcome`]): a failure as one line, or the
//! winner's head with the gateway's headers and its body streaming with the guards riding on it.
//! Every outcome is recorded through the query's [`Exit`] (`crate::query::exit`), and failures,
//! retries and hedges are logged here.

use super::body::{Guarded, Streamed};
use super::client_fin::ClientFin;
use super::ids::{Ids, Served};
use crate::attempt::{Answered, HttpHead, Outcome};
use crate::cluster::upstream::{full, GBody};
use crate::log::log;
use crate::metrics::UNKNOWN_USER;
use crate::query::admission::{admit_slots, SlotRefusal, Slots, UserRt};
use crate::query::exit::Exit;
use crate::query::refusal::{Kind, Refusal};
use chstorm_proto::versions::ErrorWording;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use std::time::Duration;

/// The gateway's own error as a server of `wording` words it (`Code: N. DB::Exception: ...` for
/// current releases, `Code: N, e.displayText() = DB::Exception: ...` for 18.16), one line, with
/// `X-ClickHouse-Exception-Code` as every release sends it (`setExceptionCode`). `message` may
/// start with `Code: N. ` (the attempts' failures): the code is read there.
pub fn error_reply(wording: ErrorWording, status: StatusCode, code: i32, message: &str) -> Response<GBody> {
    let (code, text) = match chstorm_proto::rules::parse_exception_code(message.as_bytes()) {
        Some(c) if message.starts_with("Code: ") => (c, message.split_once(". ").map_or(message, |(_, t)| t)),
        _ => (code, message),
    };
    let mut r = reply(status, wording.text(code, text.trim_end()));
    r.headers_mut().insert("x-clickhouse-exception-code", number(code as u64));
    r
}

/// The realm ClickHouse names in its 401 answers (18.16 and current releases).
pub const WWW_AUTHENTICATE: &str = "Basic realm=\"ClickHouse server HTTP API\"";

/// Adds `WWW-Authenticate` to a 401 that lacks it; other answers pass unchanged.
pub fn with_www_authenticate(mut resp: Response<GBody>) -> Response<GBody> {
    if resp.status() == StatusCode::UNAUTHORIZED && !resp.headers().contains_key(http::header::WWW_AUTHENTICATE) {
        resp.headers_mut().insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static(WWW_AUTHENTICATE));
    }
    resp
}

/// The one-line answer to `refusal`, recorded by `exit`, worded as `wording` says (the
/// refusal's kind gives its code); a 401 carries `WWW-Authenticate`.
pub fn refused(exit: &Exit<'_>, refusal: &Refusal, wording: ErrorWording) -> Response<GBody> {
    exit.refused(refusal);
    let text = match refusal.kind {
        Kind::ClickHouse(_) => refusal.native_text(),
        _ => refusal.message.as_str(),
    };
    with_www_authenticate(error_reply(wording, refusal.status(), refusal.kind.code(), text))
}

/// The answer with `guard` riding on its body (released when the body ends or is dropped).
pub fn guarded(served: Served, guard: impl Send + Unpin + 'static) -> Served {
    let (parts, body) = served.resp.into_parts();
    Served { resp: Response::from_parts(parts, Guarded::wrap(body, guard)), ids: served.ids }
}

/// The slots of a query of `user` whose rate was taken ([`admit_slots`]: the user's, then the
/// gateway's), or the refusal answered: 429 under the user's name, or 503 under
/// [`UNKNOWN_USER`] with the user's slot held until the refusal is written.
pub async fn take_slots(state: &crate::state::State, user: &UserRt) -> Result<Slots, Served> {
    match admit_slots(user, &state.global, &state.metrics).await {
        Ok(s) => Ok(s),
        Err(SlotRefusal::User(r)) => {
            let w = wording(state, Some(&user.cfg.cluster));
            Err(refused(&Exit::new(&state.metrics, &user.cfg.name), &r, w).into())
        }
        Err(SlotRefusal::Global(r, permit)) => {
            let w = wording(state, Some(&user.cfg.cluster));
            Err(guarded(refused(&Exit::new(&state.metrics, UNKNOWN_USER), &r, w).into(), permit))
        }
    }
}

/// How the gateway words its own errors to a client of `cluster` (every cluster when None): as
/// the oldest ClickHouse release detected among its replicas does, and as current releases do
/// while none is known (`chstorm_proto::versions::ServerVersion::error_wording`).
pub fn wording(state: &crate::state::State, cluster: Option<&str>) -> ErrorWording {
    let lowest = state
        .clusters
        .iter()
        .filter(|(name, _)| cluster.is_none_or(|c| c == name.as_str()))
        .filter_map(|(_, c)| crate::cluster::version::lowest_version(&c.balancer))
        .min();
    lowest.map_or(ErrorWording::Current, |v| v.error_wording())
}

/// A one-line answer from the gateway itself.
pub fn reply(status: StatusCode, msg: impl Into<String>) -> Response<GBody> {
    let mut r = Response::new(full(format!("{}\n", msg.into())));
    *r.status_mut() = status;
    r.headers_mut().insert("content-type", HeaderValue::from_static("text/plain; charset=UTF-8"));
    r
}

/// The answer to a planned query, recorded under its [`Exit`].
pub struct Answer<'a, 'e> {
    pub exit: &'a Exit<'e>,
    /// A read's client FIN ([`super::client_fin`]): a streamed answer is cut when it comes. An
    /// answer held whole, or one line of the gateway's, goes out whole: its query has ended.
    pub fin: Option<&'a ClientFin>,
    /// `X-Chstorm-Warning` for the answer ([`crate::query::ddl`]).
    pub warning: Option<&'static str>,
    /// The state and the client's cluster, to word the gateway's own errors as [`wording`]
    /// says: looked up only when there is one to word.
    pub words: (&'a crate::state::State, &'a str),
}

impl Answer<'_, '_> {
    fn record(&self, status: StatusCode, route: &'static str) {
        self.exit.record(status.as_u16(), route);
    }

    /// The attempts' outcome for a planned request.
    pub fn outcome(
        &self,
        outcome: Outcome,
        route: &'static str,
        query_id: String,
        body_deadline: Option<Duration>,
    ) -> Served {
        match outcome {
            Outcome::Failed { status, message, replica, retries, .. } => {
                self.record(status, route);
                log(
                    "warn",
                    "query",
                    serde_json::json!({"query_id": query_id, "user": self.exit.user, "status": status.as_u16(), "route": route,
                        "replica": replica.as_ref().map(|r| r.label()), "retries": retries,
                        "ms": self.exit.started.elapsed().as_millis() as u64, "error": message}),
                );
                Served {
                    resp: error_reply(wording(self.words.0, Some(self.words.1)), status, 1002, &message),
                    ids: Some(Ids {
                        replica: None,
                        route,
                        query_id,
                        threads: None,
                        stale: Default::default(),
                        warning: None,
                    }),
                }
            }
            Outcome::Answer(answered) => {
                let Answered { head: HttpHead { resp, whole }, mut won, retries, hedged } = *answered;
                let (mut parts, body) = resp.into_parts();
                strip_hop(&mut parts.headers);
                // An answer read whole leaves in one write, with its length; its query has
                // ended on the server, so nothing is left to KILL.
                if let Some(len) = whole {
                    parts.headers.insert(http::header::CONTENT_LENGTH, number(len));
                    won.guard.disarm();
                }
                self.record(parts.status, route);
                if retries > 0 || hedged || !parts.status.is_success() {
                    log(
                        if parts.status.is_success() { "info" } else { "warn" },
                        "query",
                        serde_json::json!({"query_id": query_id, "user": self.exit.user, "status": parts.status.as_u16(),
                            "route": route, "replica": won.replica.label(), "retries": retries, "hedged": hedged,
                            "ms": self.exit.started.elapsed().as_millis() as u64}),
                    );
                }
                let threads = won.grant.as_ref().map(|g| g.threads());
                let stale = won.inflight.freshness();
                let warning = self.warning.filter(|_| parts.status.is_success());
                let replica = Some(won.replica.label_value());
                let ids = Some(Ids { replica, route, query_id, threads, stale, warning });
                // The replica's in-flight count, its thread grant and the KILL guard live as long
                // as the body. A body read whole is in memory and its query has ended: nothing
                // to kill, no deadline to watch.
                if whole.is_some() {
                    let resp = Response::from_parts(parts, Guarded::wrap(body, (won.inflight, won.grant, won.guard)));
                    return Served { resp, ids };
                }
                let body = Guarded::wrap(Streamed::wrap(body, won.guard, body_deadline), (won.inflight, won.grant));
                let body = match self.fin {
                    Some(fin) => fin.cut(body),
                    None => body,
                };
                Served { resp: Response::from_parts(parts, body), ids }
            }
        }
    }
}

/// `n` as a header value; one made once for `n` up to [`SMALL_NUMBERS`] (a thread grant, a
/// short answer's length), where `HeaderValue::from` allocates each time.
pub(super) fn number(n: u64) -> HeaderValue {
    static SMALL: std::sync::LazyLock<Vec<HeaderValue>> = std::sync::LazyLock::new(|| {
        (0..=SMALL_NUMBERS).map(|n| HeaderValue::from_static(Box::leak(n.to_string().into_boxed_str()))).collect()
    });
    if n <= SMALL_NUMBERS {
        SMALL[n as usize].clone()
    } else {
        HeaderValue::from(n)
    }
}

/// The largest number [`number`] keeps made: 1,024.
const SMALL_NUMBERS: u64 = 1024;

/// Takes the hop-by-hop headers and the length off a replica's answer head (one pass over the
/// names when there are none, as with the HTTP/1 client's heads).
pub(super) fn strip_hop(h: &mut HeaderMap) {
    let stripped = || crate::request::HOP_BY_HOP.iter().chain(&["content-length"]);
    if h.keys().map(HeaderName::as_str).any(|k| stripped().any(|n| *n == k)) {
        for name in stripped() {
            h.remove(*name);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_number_is_its_decimal_text_below_and_above_the_kept_ones() {
        for n in [0, 1, 9, 10, 255, 1023, super::SMALL_NUMBERS, super::SMALL_NUMBERS + 1, 65_536, u64::MAX] {
            assert_eq!(super::number(n).to_str().unwrap(), n.to_string());
        }
    }
}
