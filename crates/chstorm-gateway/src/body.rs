//! Response bodies that carry guards: an admission permit released when the body ends or is
//! dropped, and a KILL QUERY guard that fires when a client leaves (or a deadline passes) before
//! the last byte.

use crate::config::ReplicaAddr;
use crate::metrics::{KillLabel, Metrics};
use crate::upstream::{Backend, BoxError, GBody};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::any::Any;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A body that holds `guard` until it ends or is dropped.
pub struct Guarded {
    inner: GBody,
    _guard: Box<dyn Any + Send>,
}

impl Guarded {
    pub fn wrap(inner: GBody, guard: impl Any + Send) -> GBody {
        use http_body_util::BodyExt;
        Guarded { inner, _guard: Box::new(guard) }.boxed_unsync()
    }
}

impl Body for Guarded {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Sends `KILL QUERY` for `query_id` on `replica` if dropped while armed.
pub struct KillGuard {
    pub armed: bool,
    pub reason: &'static str,
    pub query_id: String,
    pub replica: ReplicaAddr,
    pub auth: String,
    pub backend: Arc<dyn Backend>,
    pub metrics: Arc<Metrics>,
}

impl KillGuard {
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (up, r, auth, qid, m, reason) = (
            self.backend.clone(),
            self.replica.clone(),
            self.auth.clone(),
            self.query_id.clone(),
            self.metrics.clone(),
            self.reason,
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let ok = up.kill(&r, &auth, &qid).await;
                m.killed.get_or_create(&KillLabel { reason }).inc();
                crate::log::log(
                    "info",
                    "killed query",
                    serde_json::json!({"query_id": qid, "replica": r.base, "reason": reason, "ok": ok}),
                );
            });
        }
    }
}

/// A streamed response body: disarms its [`KillGuard`] at the end of the stream, and ends the
/// stream (firing the guard) when its deadline passes first.
pub struct Streamed {
    inner: GBody,
    guard: KillGuard,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Streamed {
    pub fn wrap(inner: GBody, guard: KillGuard, deadline: Option<std::time::Duration>) -> GBody {
        use http_body_util::BodyExt;
        Streamed { inner, guard, deadline: deadline.map(|d| Box::pin(tokio::time::sleep(d))) }.boxed_unsync()
    }
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(d) = self.deadline.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                self.guard.reason = "timeout";
                return Poll::Ready(Some(Err("max_execution_time passed; the query was killed".into())));
            }
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                self.guard.disarm();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                // The backend failed mid-answer: its query is gone already.
                self.guard.disarm();
                Poll::Ready(Some(Err(e)))
            }
            other => other,
        }
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

use std::future::Future;

/// A body that yields `head` first, then `rest`: a streamed client body whose head the gateway
/// read to classify it.
pub struct Prefixed {
    head: Option<Bytes>,
    rest: GBody,
}

impl Prefixed {
    pub fn wrap(head: Bytes, rest: GBody) -> GBody {
        use http_body_util::BodyExt;
        Prefixed { head: Some(head).filter(|h| !h.is_empty()), rest }.boxed_unsync()
    }
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(h) = self.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(h))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.head.is_none() && self.rest.is_end_stream()
    }
}
