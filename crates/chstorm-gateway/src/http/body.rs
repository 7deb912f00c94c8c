//! Response bodies that carry guards: an admission permit released when the body ends or is
//! dropped, and a KILL QUERY guard that fires when a client leaves (or a deadline passes) before
//! the last byte; and [`hold_small`], which sends a small answer in one write.

use crate::attempt::KillGuard;
use crate::cluster::upstream::{BoxError, GBody};
use bytes::Bytes;
use http::Response;
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

/// A streamed response body: disarms its [`KillGuard`] at the end of the stream, and ends the
/// stream (firing the guard) when its deadline passes first.
///
/// The deadline fires whether or not the client reads (hyper polls no body while the client
/// reads nothing): a watchdog task, at the deadline, drops the backend's body (closing that
/// connection: a query blocked writing its answer ends only so, `KILL QUERY` alone leaves it
/// blocked) and sends `KILL QUERY`; the stream then ends with the error when next polled. The
/// client's connection and the admission permits go when the client reads again, or at
/// `limits.client_write_timeout`.
pub struct Streamed {
    /// The backend's body; the watchdog takes it at the deadline.
    inner: Arc<std::sync::Mutex<Option<GBody>>>,
    guard: KillGuard,
    /// The same deadline, polled with the body: it wakes the task that reads the body (the
    /// watchdog cannot), so a stream that waits for a silent backend ends at the deadline.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Kills the query at the deadline; aborted when the stream ends or is dropped.
    watchdog: Option<(tokio::task::AbortHandle, Arc<std::sync::atomic::AtomicBool>)>,
}

impl Streamed {
    pub fn wrap(inner: GBody, guard: KillGuard, deadline: Option<std::time::Duration>) -> GBody {
        use http_body_util::BodyExt;
        let inner = Arc::new(std::sync::Mutex::new(Some(inner)));
        let watchdog = deadline.filter(|_| guard.armed).and_then(|d| {
            let handle = tokio::runtime::Handle::try_current().ok()?;
            let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
            // Built disarmed, so an aborted watchdog sends nothing.
            let mut kill = guard.clone_disarmed();
            kill.reason = "timeout";
            let (f, body) = (fired.clone(), inner.clone());
            let task = handle.spawn(async move {
                tokio::time::sleep(d).await;
                f.store(true, std::sync::atomic::Ordering::SeqCst);
                let taken = body.lock().unwrap_or_else(|e| e.into_inner()).take();
                drop(taken); // closes the backend connection
                kill.armed = true;
                drop(kill); // sends the KILL
            });
            Some((task.abort_handle(), fired))
        });
        let deadline = deadline.map(|d| Box::pin(tokio::time::sleep(d)));
        Streamed { inner, guard, deadline, watchdog }.boxed_unsync()
    }

    fn stop_watchdog(&mut self) {
        if let Some((task, _)) = self.watchdog.take() {
            task.abort();
        }
    }

    /// The watchdog sent the KILL: this body's own guard stays quiet.
    fn watchdog_fired(&mut self) -> bool {
        let fired = self.watchdog.as_ref().is_some_and(|(_, f)| f.load(std::sync::atomic::Ordering::SeqCst));
        if fired {
            self.guard.disarm();
        }
        fired
    }
}

impl Drop for Streamed {
    fn drop(&mut self) {
        if let Some((task, _)) = &self.watchdog {
            task.abort();
        }
        self.watchdog_fired();
    }
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.deadline.as_mut().is_some_and(|d| d.as_mut().poll(cx).is_ready()) {
            // The watchdog may have sent the KILL already; else this body's guard sends it.
            if !this.watchdog_fired() {
                this.guard.reason = "timeout";
            }
            this.stop_watchdog();
            return Poll::Ready(Some(Err("max_execution_time passed; the query was killed".into())));
        }
        let fired = this.watchdog.as_ref().is_some_and(|(_, f)| f.load(std::sync::atomic::Ordering::SeqCst));
        let mut inner = this.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(body) = inner.as_mut().filter(|_| !fired) else {
            drop(inner);
            this.guard.disarm();
            this.stop_watchdog();
            return Poll::Ready(Some(Err("max_execution_time passed; the query was killed".into())));
        };
        match Pin::new(body).poll_frame(cx) {
            Poll::Ready(None) => {
                drop(inner);
                this.guard.disarm();
                this.stop_watchdog();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                // The backend failed mid-answer: its query is gone already.
                drop(inner);
                this.guard.disarm();
                this.stop_watchdog();
                Poll::Ready(Some(Err(e)))
            }
            other => other,
        }
    }
    fn is_end_stream(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|b| b.is_end_stream())
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map_or_else(SizeHint::default, |b| b.size_hint())
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

/// The most of an answer [`hold_small`] holds before it lets the head go: 64 KiB.
pub const HOLD_AT: usize = 64 * 1024;

/// Holds a small answer whole before its head goes to the client, so that the head and the
/// body leave in one write with a `Content-Length`.
///
/// 18.16 writes even a one-row answer as three segments (the head, the data, the last chunk)
/// and the gateway relayed each as it came: three writes to the client, each paying the
/// loopback peer's receive and wake-up (about 11 µs apiece on 2 cores, `docs/PERFORMANCE.md`).
/// Holding costs no latency a client could see: the server itself holds its answer in its
/// output buffer (1 MiB) and sends the three segments back to back at the query's end, so they
/// arrive within microseconds. An answer longer than `hold_at` bytes streams as before, its
/// first `hold_at` bytes first; an error mid-answer reaches the client after what was held, as
/// it would have mid-stream. The hold lasts at most `hold_for` (the per-try deadline): an
/// answer still coming by then streams from there, so a long answer's first bytes reach the
/// client as they would direct. While it holds, the body's guards stay alive: a client that
/// leaves drops this future and with it the body, which fires the KILL guard as before.
pub async fn hold_small(resp: Response<GBody>, hold_at: usize, hold_for: std::time::Duration) -> Response<GBody> {
    use http_body_util::BodyExt;
    let (mut parts, mut body) = resp.into_parts();
    let mut held = bytes::BytesMut::new();
    let until = tokio::time::Instant::now() + hold_for;
    loop {
        if held.len() > hold_at {
            return Response::from_parts(parts, Prefixed::wrap(held.freeze(), body));
        }
        // Waiting for a frame loses nothing when it is given up (`frame` only polls the body).
        let Ok(frame) = tokio::time::timeout_at(until, body.frame()).await else {
            return Response::from_parts(parts, Prefixed::wrap(held.freeze(), body));
        };
        match frame {
            None => {
                parts.headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(held.len() as u64));
                return Response::from_parts(parts, crate::cluster::upstream::full(held.freeze()));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => held.extend_from_slice(&data),
                // Trailers (ClickHouse sends none): stream from here, the trailers included.
                Err(frame) => {
                    let rest = Prefixed::wrap(held.freeze(), Replay::wrap(Ok(frame), body));
                    return Response::from_parts(parts, rest);
                }
            },
            Some(Err(e)) => {
                let rest = Prefixed::wrap(held.freeze(), Replay::wrap(Err(e), body));
                return Response::from_parts(parts, rest);
            }
        }
    }
}

/// A body that yields one frame or error taken out of `rest` ahead of time, then `rest`.
struct Replay {
    first: Option<Result<Frame<Bytes>, BoxError>>,
    rest: GBody,
}

impl Replay {
    fn wrap(first: Result<Frame<Bytes>, BoxError>, rest: GBody) -> GBody {
        use http_body_util::BodyExt;
        Replay { first: Some(first), rest }.boxed_unsync()
    }
}

impl Body for Replay {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(f) = self.first.take() {
            return Poll::Ready(Some(f));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A backend body: these frames, then the end.
    struct Frames(VecDeque<Result<Frame<Bytes>, BoxError>>);
    impl Body for Frames {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Ready(self.0.pop_front())
        }
    }
    fn answer(parts: &[&str], error_at_end: bool) -> Response<GBody> {
        let mut f: VecDeque<_> = parts.iter().map(|p| Ok(Frame::data(Bytes::from(p.to_string())))).collect();
        if error_at_end {
            f.push_back(Err("the backend went away".into()));
        }
        Response::new(Frames(f).boxed_unsync())
    }
    const LONG: std::time::Duration = std::time::Duration::from_secs(3600);

    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_streams_from_the_per_try_deadline_on() {
        // The first bytes at once, the rest only after 3 s (a long read).
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        tx.send(Ok(Frame::data(Bytes::from("first\n")))).await.unwrap();
        let body = http_body_util::StreamBody::new(tokio_stream_from(rx)).boxed_unsync();
        let t0 = tokio::time::Instant::now();
        let r = hold_small(Response::new(body), 1024, std::time::Duration::from_millis(100)).await;
        assert_eq!(t0.elapsed(), std::time::Duration::from_millis(100), "held only to the deadline");
        assert!(r.headers().get("content-length").is_none(), "it streams");
        let mut body = r.into_body();
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "first\n");
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            tx.send(Ok(Frame::data(Bytes::from("last\n")))).await.unwrap();
        });
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "last\n");
        assert!(body.frame().await.is_none());
    }

    /// A stream of the frames sent on `rx`.
    fn tokio_stream_from(
        rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
    ) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, BoxError>> {
        struct S(tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>);
        impl futures_core::Stream for S {
            type Item = Result<Frame<Bytes>, BoxError>;
            fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
                self.0.poll_recv(cx)
            }
        }
        S(rx)
    }

    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_small_answer_leaves_whole_with_its_length() {
        let released = Arc::new(AtomicBool::new(false));
        let (parts, body) = answer(&["1\n", "2\n", "3\n"], false).into_parts();
        let guarded = Response::from_parts(parts, Guarded::wrap(body, Flag(released.clone())));
        let r = hold_small(guarded, 1024, LONG).await;
        assert_eq!(r.headers()["content-length"], "6");
        assert!(released.load(Ordering::SeqCst), "the answer is read whole: its guards are released");
        let mut body = r.into_body();
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "1\n2\n3\n", "one frame, one write");
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_long_answer_streams_after_what_was_held() {
        let r = hold_small(answer(&["aaaa", "bbbb", "cccc", "dddd"], false), 5, LONG).await;
        assert!(r.headers().get("content-length").is_none(), "a long answer keeps streaming");
        let all = r.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(all, "aaaabbbbccccdddd");
    }

    #[tokio::test]
    async fn an_error_mid_answer_follows_what_was_held() {
        let r = hold_small(answer(&["1\n", "2\n"], true), 1024, LONG).await;
        assert!(r.headers().get("content-length").is_none());
        let mut body = r.into_body();
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "1\n2\n");
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(err.to_string(), "the backend went away");
    }
}
