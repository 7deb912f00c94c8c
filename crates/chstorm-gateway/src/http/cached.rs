//! `cached`: the HTTP front's side of the result cache and the merging of identical reads
//! (`crate::cache`): a read the plan found [`Caching::Eligible`](crate::query::cacheable::Caching)
//! is answered from a kept answer (`X-Cache: HIT`, with its `Age`), or waits for an identical
//! read running now (`MERGED`), or starts one (`MISS`) whose attempts run in a task of their
//! own ([`produce`]), so that no client's leaving cancels it while another waits. Every client
//! gets its own `X-ClickHouse-Query-Id` and the answer's bytes as the replica sent them. A kept
//! answer and a merged read are found before the user's slots are taken ([`Job::late`]); only a
//! read that leads a group, or runs alone, takes them.

use super::body::{Guarded, Streamed};
use super::client_fin::ClientFin;
use super::ids::{Ids, Served};
use super::respond::{error_reply, guarded, number, strip_hop, take_slots, wording};
use crate::attempt::{Answered, HttpHead, HttpParts, Outcome, SendBody};
use crate::cache::key::{http_key, HttpShape};
use crate::cache::{Feed, Head, Lookup, Next, Waiter};
use crate::cluster::login::BackendLogin;
use crate::cluster::upstream::{full, BoxError, GBody};
use crate::config::User;
use crate::query::admission::{Slots, UserRt};
use crate::query::exit::Exit;
use crate::query::plan::Plan;
use crate::state::State;
use bytes::Bytes;
use http::{HeaderValue, Response};
use std::sync::Arc;

static X_CACHE: http::HeaderName = http::HeaderName::from_static("x-cache");

/// What the cache did with a read the plan allowed it: the answer, the read's parts back to
/// run alone (its identical read has its most clients) with the slots taken for it, or the
/// client's FIN came before the answer's head (the caller answers it as for a read alone).
pub enum Cached {
    Served(Served),
    Alone(Plan, HttpParts, SendBody, Option<Slots>),
    Fin,
}

/// A read for the cache: its plan, its request's parts and body (held), and its user when its
/// slots are still to be taken (`late`): then a kept answer, or a place among an identical
/// read's clients, is taken before them, and the slots only for a read that needs a server.
pub struct Job<'a> {
    pub plan: Plan,
    pub http: HttpParts,
    pub body: SendBody,
    pub late: Option<&'a UserRt>,
}

/// Serves `job` of user `u` through the cache (see the module doc).
pub async fn serve(
    state: &Arc<State>,
    u: &User,
    login: &Arc<BackendLogin>,
    exit: &Exit<'_>,
    job: Job<'_>,
    fin: Option<&ClientFin>,
) -> Cached {
    let Job { mut plan, http, body, late } = job;
    let (Some(policy), SendBody::Held(held)) = (u.cache.as_ref(), &body) else {
        return alone(state, late, plan, http, body).await;
    };
    let shape = HttpShape { method: &http.method, headers: &http.headers, body: held, readonly: u.readonly };
    let key = http_key(&plan, login, &u.cluster, shape);
    let route = plan.target.label();
    let shared = late.and_then(|_| state.cache.shared(&key, &u.name, policy));
    let (found, slots) = match (shared, late) {
        (Some(found), _) => (found, None),
        (None, Some(user)) => match take_slots(state, user).await {
            Ok(s) => (state.cache.lookup(&key, &u.name, policy), Some(s)),
            Err(refusal) => return Cached::Served(refusal),
        },
        (None, None) => (state.cache.lookup(&key, &u.name, policy), None),
    };
    let query_id = std::mem::take(&mut plan.client_query_id);
    let served = match found {
        Lookup::Hit(stored, age) => {
            let head = &stored.head;
            let mut resp = Response::new(full(stored.body.clone()));
            *resp.status_mut() = http::StatusCode::from_u16(head.status).unwrap_or(http::StatusCode::OK);
            *resp.headers_mut() = head.headers.clone();
            resp.headers_mut().insert(http::header::CONTENT_LENGTH, number(stored.body.len() as u64));
            resp.headers_mut().insert(X_CACHE.clone(), HeaderValue::from_static("HIT"));
            resp.headers_mut().insert(http::header::AGE, number(age.as_secs()));
            exit.record(head.status, route);
            let ids = ids(head, route, query_id);
            Cached::Served(Served { resp, ids: Some(ids) })
        }
        Lookup::Join(w) => answer(w, "MERGED", (state, &u.cluster), exit, route, query_id, fin).await,
        Lookup::Lead(feed, w) => {
            let slot = feed.producer_slot();
            let task = tokio::spawn(produce(state.clone(), u.cluster.clone(), login.clone(), plan, http, body, feed));
            slot.set(task.abort_handle());
            answer(w, "MISS", (state, &u.cluster), exit, route, query_id, fin).await
        }
        Lookup::Alone => {
            plan.client_query_id = query_id;
            return Cached::Alone(plan, http, body, slots);
        }
    };
    match (served, slots) {
        (Cached::Served(s), Some(slots)) => Cached::Served(guarded(s, slots)),
        (other, _) => other,
    }
}

/// A read the cache does not take, back to run alone, with its slots when they were late.
async fn alone(state: &State, late: Option<&UserRt>, plan: Plan, http: HttpParts, body: SendBody) -> Cached {
    let slots = match late {
        Some(user) => match take_slots(state, user).await {
            Ok(s) => Some(s),
            Err(refusal) => return Cached::Served(refusal),
        },
        None => None,
    };
    Cached::Alone(plan, http, body, slots)
}

/// The gateway's headers of an answer made by `head`'s attempt, for a client with `query_id`.
fn ids(head: &Head, route: &'static str, query_id: String) -> Ids {
    Ids { replica: head.replica.clone(), route, query_id, threads: head.threads, stale: head.stale, warning: None }
}

/// A client's answer from its group: the head when it comes (or [`Cached::Fin`]), then the
/// chunks as they come.
async fn answer(
    w: Waiter,
    how: &'static str,
    words: (&State, &str),
    exit: &Exit<'_>,
    route: &'static str,
    query_id: String,
    fin: Option<&ClientFin>,
) -> Cached {
    let head = match fin {
        Some(fin) => tokio::select! {
            h = w.head() => h,
            _ = fin.came() => return Cached::Fin,
        },
        None => w.head().await,
    };
    let head = match head {
        Ok(h) => h,
        Err(why) => {
            exit.record(502, route);
            let ids = Ids { replica: None, route, query_id, threads: None, stale: Default::default(), warning: None };
            let resp = error_reply(wording(words.0, Some(words.1)), http::StatusCode::BAD_GATEWAY, 1002, &why);
            return Cached::Served(Served { resp, ids: Some(ids) });
        }
    };
    let mut resp = Response::new(body_of(w));
    *resp.status_mut() = http::StatusCode::from_u16(head.status).unwrap_or(http::StatusCode::OK);
    *resp.headers_mut() = head.headers.clone();
    if let Some(len) = head.whole {
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, number(len));
    }
    resp.headers_mut().insert(X_CACHE.clone(), HeaderValue::from_static(how));
    exit.record(head.status, route);
    let ids = ids(&head, route, query_id);
    let resp = match (fin, head.whole) {
        (Some(fin), None) => {
            let (parts, body) = resp.into_parts();
            Response::from_parts(parts, fin.cut(body))
        }
        _ => resp,
    };
    Cached::Served(Served { resp, ids: Some(ids) })
}

/// The waiter's chunks as a response body; an answer that broke ends it with the error.
fn body_of(w: Waiter) -> GBody {
    use http_body_util::BodyExt;
    let chunks = futures_util::stream::unfold(
        (w, std::collections::VecDeque::<Bytes>::new(), false),
        |(w, mut ready, over)| async move {
            loop {
                if let Some(b) = ready.pop_front() {
                    return Some((Ok(http_body::Frame::data(b)), (w, ready, over)));
                }
                if over {
                    return None;
                }
                match w.next().await {
                    Next::Chunks(c) => ready.extend(c),
                    Next::Done => return None,
                    Next::Broken(why) => return Some((Err(BoxError::from(why)), (w, ready, true))),
                }
            }
        },
    );
    http_body_util::StreamBody::new(chunks).boxed_unsync()
}

/// Runs the attempts of a shared read and gives its answer to `feed`: a task of its own, aborted
/// when its last client leaves (the attempts' guards then kill the query).
async fn produce(
    state: Arc<State>,
    cluster: String,
    login: Arc<BackendLogin>,
    plan: Plan,
    http: HttpParts,
    body: SendBody,
    mut feed: Feed,
) {
    let Some(rt) = state.clusters.get(&cluster) else {
        return feed.broken(format!("cluster '{cluster}' is gone"));
    };
    let ctx = rt.attempt_ctx(&state, &login, rt.head_times(plan.target));
    match crate::attempt::run(&plan, http, body, &ctx).await {
        Outcome::Failed { status, message, .. } => {
            // The same line the gateway answers a failed read alone with (`super::respond`).
            let (parts, body) = error_reply(wording(&state, Some(&cluster)), status, 1002, &message).into_parts();
            let text = http_body_util::BodyExt::collect(body).await.map(|b| b.to_bytes()).unwrap_or_default();
            let mut head = Head::status(status.as_u16());
            head.headers = parts.headers;
            head.whole = Some(text.len() as u64);
            feed.head(head);
            feed.push(text).await;
            feed.finish(false);
        }
        Outcome::Answer(answered) => {
            let Answered { head: HttpHead { resp, whole }, mut won, .. } = *answered;
            let (mut parts, body) = resp.into_parts();
            strip_hop(&mut parts.headers);
            let ok = parts.status.is_success();
            let threads = won.grant.as_ref().map(|g| g.threads());
            let head = Head {
                status: parts.status.as_u16(),
                headers: parts.headers,
                replica: Some(won.replica.label_value()),
                threads,
                whole,
                stale: won.inflight.freshness(),
            };
            feed.head(head);
            let body = if whole.is_some() {
                won.guard.disarm();
                Guarded::wrap(body, (won.inflight, won.grant, won.guard))
            } else {
                Guarded::wrap(Streamed::wrap(body, won.guard, plan.body_deadline), (won.inflight, won.grant))
            };
            relay(body, feed, ok).await;
        }
    }
}

/// Gives `body`'s frames to `feed`; kept when `ok` and whole, with no exception at its end.
async fn relay(mut body: GBody, mut feed: Feed, ok: bool) {
    use http_body_util::BodyExt;
    let mut tail: Vec<u8> = Vec::new();
    loop {
        match body.frame().await {
            None => {
                let partial = chstorm_proto::rules::ends_in_exception(&tail);
                return feed.finish(ok && !partial);
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else { continue };
                tail.extend_from_slice(&data[data.len().saturating_sub(4096)..]);
                if tail.len() > 8192 {
                    tail.drain(..tail.len() - 4096);
                }
                feed.push(data).await;
                if !feed.wanted() {
                    return;
                }
            }
            Some(Err(e)) => return feed.broken(format!("the answer broke: {e}")),
        }
    }
}
