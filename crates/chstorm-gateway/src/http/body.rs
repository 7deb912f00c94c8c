//! Response bodies that carry guards: an admission permit released when the body ends or is
//! dropped, and a KILL QUERY guard that fires when a client leaves (or a deadline passes) before
//! the last byte.

use crate::attempt::KillGuard;
use crate::cluster::upstream::{BoxError, GBody};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A body that holds `guard` until it ends or is dropped. The guard is a field, not a box of its
/// own: wrapping a body makes one allocation (the boxed body), where a boxed guard beside it made
/// two, and a query's answer is wrapped twice (its admission permits, its replica's guards).
pub struct Guarded<G> {
    inner: GBody,
    _guard: G,
}

impl<G: Send + Unpin + 'static> Guarded<G> {
    pub fn wrap(inner: GBody, guard: G) -> GBody {
        use http_body_util::BodyExt;
        Guarded { inner, _guard: guard }.boxed_unsync()
    }
}

impl<G: Unpin> Body for Guarded<G> {
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
