//! The HTTP transport of the attempt loop: one request per attempt through [`Backend`], the
//! client's body held (a copy per attempt) or streamed (the first attempt only), a successful
//! answer held ([`super::held`]) before it counts as the head, and an error answer read (at most
//! [`MAX_ERROR_BODY`], within [`ERROR_BODY_TIMEOUT`]) to find its code.

use super::held::{hold, HttpHead, HOLD_AT};
use super::quarantine::fingerprint;
use super::{Judged, Live, Transport};
use crate::cluster::replica::Replica;
use crate::cluster::upstream::{empty, full, Backend, BackendError, BackendRequest, BoxFuture, GBody};
use crate::query::plan::Plan;
use bytes::Bytes;
use chstorm_proto::rules::{http_exception_code, may_run_elsewhere};
use http::Response;
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;

/// Largest error answer read from a backend to find its exception code (64 KiB).
const MAX_ERROR_BODY: usize = 64 << 10;
/// Longest wait for the rest of an error answer once its head came: 10 s.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The backend request's method and headers, from the HTTP front; POST and none by default.
/// The attempts add the gateway's `Authorization` as they write them.
#[derive(Debug, Clone)]
pub struct HttpParts {
    pub method: http::Method,
    /// The client's headers that go on, shared by the attempts.
    pub headers: Arc<http::HeaderMap>,
}

impl Default for HttpParts {
    fn default() -> Self {
        HttpParts { method: http::Method::POST, headers: Default::default() }
    }
}

/// The HTTP transport: one request per attempt through [`Backend`].
pub struct Http<'a> {
    pub(super) plan: &'a Plan,
    pub(super) parts: HttpParts,
    pub(super) body: SendBody,
    pub(super) backend: Arc<dyn Backend>,
    /// The `Authorization` of the query's login ([`super::Ctx::login`]).
    pub(super) auth: http::HeaderValue,
    /// That login's pools ([`crate::cluster::login::BackendLogin::slot`]).
    pub(super) pool: usize,
    /// How long a successful answer is held after its head ([`super::held`]); None for a
    /// `HEAD` request, whose answer has no body.
    pub(super) hold_for: Option<Duration>,
}

impl Transport for Http<'_> {
    type Head = HttpHead;

    fn send(
        &mut self,
        replica: &Arc<Replica>,
        threads: Option<usize>,
        live: Live,
    ) -> Option<BoxFuture<Result<Self::Head, BackendError>>> {
        let plan = self.plan;
        let mut target = String::new();
        plan.path_and_query_into(&mut target, threads);
        // An empty body still says so: 18.16 answers a POST without Content-Length or
        // Transfer-Encoding with 411 (Code 381), and hyper writes neither for an empty body.
        let empty_post = self.parts.method == http::Method::POST
            && match &self.body {
                SendBody::Held(b) => plan.replace_body.as_ref().map_or(b.is_empty(), |t| t.is_empty()),
                SendBody::Once(_) => false,
            };
        let req_body = match &mut self.body {
            SendBody::Held(b) => match &plan.replace_body {
                // The rewritten statement, with the bytes it came with (invalid UTF-8 kept).
                Some(text) => full(Bytes::from(crate::request::encode_bytes(text))),
                // No body (a GET's): the empty body, which is not boxed.
                None if b.is_empty() => empty(),
                None => full(b.clone()),
            },
            SendBody::Once(b) => b.take()?,
        };
        let req = BackendRequest {
            method: self.parts.method.clone(),
            target,
            headers: self.parts.headers.clone(),
            auth: Some(self.auth.clone()),
            pool: self.pool,
            empty_post,
            body: req_body,
        };
        let (head, hold_for) = (self.backend.send(&replica.addr, req), self.hold_for);
        Some(Box::pin(async move {
            let head = head.await?;
            match hold_for {
                Some(d) if head.status().is_success() => hold(head, HOLD_AT, d, |now| live.activity.bump_at(now)).await,
                _ => Ok(HttpHead::streaming(head)),
            }
        }))
    }

    fn streamed(&self) -> bool {
        matches!(self.body, SendBody::Once(_))
    }

    fn is_success(head: &Self::Head) -> bool {
        head.resp.status().is_success()
    }

    fn judge_error(head: Self::Head) -> BoxFuture<Judged<Self::Head>> {
        Box::pin(async move {
            // An error answer: small; read it to find the code.
            let (parts, rbody) = head.resp.into_parts();
            let text =
                tokio::time::timeout(ERROR_BODY_TIMEOUT, read_limited(rbody, MAX_ERROR_BODY)).await.unwrap_or_default();
            let header = parts.headers.get("x-clickhouse-exception-code").and_then(|v| v.to_str().ok());
            match http_exception_code(header, &text) {
                Some(code) if may_run_elsewhere(code) => {
                    Judged::Busy(code, String::from_utf8_lossy(&text).trim().to_string())
                }
                _ => {
                    let whole = Some(text.len() as u64);
                    Judged::Answer(HttpHead { resp: Response::from_parts(parts, full(text)), whole })
                }
            }
        })
    }

    fn went_down(&self, replica: &Replica) {
        self.backend.reset_pool(&replica.addr);
    }

    fn shape(&self) -> Option<u64> {
        // The text a read runs: its `query` parameter, then its body.
        let param = self.plan.params.iter().find(|(k, _)| k == "query").map_or("", |(_, v)| v.as_str());
        let body = match (&self.plan.replace_body, &self.body) {
            (Some(text), _) => text.as_str(),
            (None, SendBody::Held(b)) => std::str::from_utf8(b).ok()?,
            (None, SendBody::Once(_)) => return None,
        };
        if body.is_empty() {
            // The same shape: a trailing line end adds nothing to it.
            return Some(fingerprint(param));
        }
        Some(fingerprint(&format!("{param}\n{body}")))
    }
}

/// The client's body, as the attempts send it.
pub enum SendBody {
    /// Held whole: every attempt sends a copy.
    Held(Bytes),
    /// Streamed: only the first attempt can send it.
    Once(Option<GBody>),
}

/// Reads at most `limit` bytes of `body` (what came before an error, if one comes).
pub(crate) async fn read_limited(mut body: GBody, limit: usize) -> Bytes {
    let mut buf = bytes::BytesMut::new();
    while buf.len() < limit {
        match body.frame().await {
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    buf.extend_from_slice(&d[..d.len().min(limit - buf.len())]);
                }
            }
            _ => break,
        }
    }
    buf.freeze()
}
