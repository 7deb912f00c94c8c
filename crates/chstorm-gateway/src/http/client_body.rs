//! Request bodies from clients, with an idle deadline: a client whose upload stops sending
//! bytes must not hold its admission slots, its backend connection and its query for ever.
//!
//! [`IdleBody`] wraps the body hyper hands the server. Its clock runs only while the gateway waits
//! for the client: it starts when a poll finds no frame ready, and a frame stops it. Time spent
//! before the first poll (queued for admission, say) or while the consumer is busy elsewhere (a
//! slow backend) never counts. Two limits apply to that waiting time:
//!
//! * each gap between frames: at most `idle` (`limits.client_body_idle_timeout`);
//! * all the gaps together: at most `idle` plus one second for every `min_rate` bytes received
//!   (`limits.client_body_min_rate`, Apache's `mod_reqtimeout` rule). Without it a body sent one
//!   byte every `idle - 1` s would hold its slots and its backend query for ever; with the
//!   defaults (30 s, 500 B/s) that trickle is cut off 30 s after its first wait, while an upload
//!   at 500 B/s or more is never cut off.
//!
//! When the clock reaches either limit, the body
//!
//! 1. marks itself expired and wakes the [`IdleWatch`] the server holds for this request; the
//!    server then drops the whole request future (the service's admission permits, its
//!    backend request, whose KILL guard cancels the query on the replica) and answers 408;
//! 2. stays pending while that watch lives (so no layer below sees a body error first and takes
//!    it for a backend failure), and fails with [`ClientBodyError::Idle`] once the watch is gone
//!    (a backend connection still sending it, after the answer went out, is then closed).
//!
//! Written here because neither hyper nor tower-http has a per-frame idle timeout on a request
//! body that also cancels the request handling it.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

/// The request body type the query service (`super::service`) sees from a connection.
pub type ClientBody = IdleBody<FrontBody>;

/// A request body as a front hands it over: hyper's, or one the gateway's own front
/// (`super::wire`) read whole with its head.
pub enum FrontBody {
    Hyper(hyper::body::Incoming),
    /// The whole body (`None` once taken, or for a request without one).
    Whole(Option<Bytes>),
}

impl Body for FrontBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            FrontBody::Hyper(b) => Pin::new(b).poll_frame(cx),
            FrontBody::Whole(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            FrontBody::Hyper(b) => b.is_end_stream(),
            FrontBody::Whole(b) => b.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            FrontBody::Hyper(b) => b.size_hint(),
            FrontBody::Whole(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}

/// Why a client's request body failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// The client sent no byte for the whole idle timeout. The client's fault; retrying the same
    /// way will fail the same way.
    #[error("the client sent no request body byte for {} ms (limits.client_body_idle_timeout)", .0.as_millis())]
    Idle(Duration),
    /// The client sent too slowly: `bytes` in `waited` of waiting, under
    /// `limits.client_body_min_rate`.
    #[error("the client sent its request body too slowly: {bytes} bytes in {} ms of waiting (limits.client_body_min_rate)", .waited.as_millis())]
    Slow { bytes: u64, waited: Duration },
    /// Reading the body failed (the client closed the connection mid-body, or sent a malformed
    /// chunk).
    #[error("reading the request body: {0}")]
    Read(Box<dyn std::error::Error + Send + Sync>),
}

#[derive(Default)]
struct Shared {
    state: Mutex<SharedState>,
    expired: Notify,
}

#[derive(Default)]
struct SharedState {
    watched: bool,
    /// Why the body gave up, once it has.
    expired: Option<ClientBodyError>,
    /// The body's waker while it waits for its watch to go.
    body: Option<Waker>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SharedState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A body that fails, and wakes its [`IdleWatch`], when its inner body yields no frame for
/// `idle` while polled. See the module doc.
pub struct IdleBody<B> {
    inner: B,
    idle: Duration,
    /// `limits.client_body_min_rate`, bytes a second; 0: no rate rule.
    min_rate: u64,
    /// Bytes received so far.
    received: u64,
    /// Time spent waiting for the client so far, the current wait excluded.
    waited: Duration,
    /// When the current wait began.
    wait_began: Option<Instant>,
    /// Runs while the consumer waits for a frame; `None` while it does not.
    clock: Option<Pin<Box<Sleep>>>,
    expired: bool,
    done: bool,
    shared: Arc<Shared>,
}

/// The server's side of an [`IdleBody`]: resolves [`IdleWatch::expired`] when the body's idle
/// timeout passes. While it lives the expired body stays pending; dropping it lets the body fail.
pub struct IdleWatch {
    shared: Arc<Shared>,
}

impl<B> IdleBody<B> {
    /// Wraps `inner` with an idle timeout of `idle`, and returns the watch for the server.
    pub fn new(inner: B, idle: Duration) -> (IdleBody<B>, IdleWatch) {
        let shared = Arc::new(Shared::default());
        shared.lock().watched = true;
        let body = IdleBody {
            inner,
            idle,
            min_rate: 0,
            received: 0,
            waited: Duration::ZERO,
            wait_began: None,
            clock: None,
            expired: false,
            done: false,
            shared: shared.clone(),
        };
        (body, IdleWatch { shared })
    }

    /// Adds the rate rule: all the waiting together may not pass `idle` plus one second for
    /// every `min_rate` bytes received. 0 leaves it off.
    pub fn with_min_rate(mut self, min_rate: u64) -> Self {
        self.min_rate = min_rate;
        self
    }

    /// How long the wait that starts now may last: `idle`, or less when the rate rule's
    /// allowance left is shorter.
    fn this_wait(&self) -> Duration {
        if self.min_rate == 0 {
            return self.idle;
        }
        let allowance = self.idle + Duration::from_secs_f64(self.received as f64 / self.min_rate as f64);
        self.idle.min(allowance.saturating_sub(self.waited))
    }

    /// Why the body gives up now, after waiting `gap`: the gap or the rate.
    fn expiry(&self, gap: Duration) -> ClientBodyError {
        if self.this_wait() >= self.idle {
            ClientBodyError::Idle(self.idle)
        } else {
            ClientBodyError::Slow { bytes: self.received, waited: self.waited + gap }
        }
    }

    /// A wait ended (a frame, the end, an error).
    fn wait_over(&mut self) {
        self.clock = None;
        if let Some(t) = self.wait_began.take() {
            self.waited += t.elapsed();
        }
    }

    /// The body once its time is up: pending while the watch lives, then one error.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let mut s = self.shared.lock();
        if s.watched {
            s.body = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let why = s.expired.take();
        drop(s);
        self.done = true;
        Poll::Ready(Some(Err(why.unwrap_or(ClientBodyError::Idle(self.idle)))))
    }
}

impl IdleWatch {
    /// Resolves once the body has given up (at once if it already has), with the reason as
    /// one line.
    pub async fn expired(&self) -> String {
        loop {
            // `Notify` keeps one permit, so an expiry between the check and the wait is not lost.
            if let Some(why) = &self.shared.lock().expired {
                return why.to_string();
            }
            self.shared.expired.notified().await;
        }
    }
}

impl Drop for IdleWatch {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.shared.lock();
            s.watched = false;
            s.body.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<B> Body for IdleBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.expired {
            return this.poll_expired(cx);
        }
        if this.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.wait_over();
                this.received += frame.data_ref().map_or(0, |d| d.len() as u64);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.wait_over();
                this.done = true;
                Poll::Ready(Some(Err(ClientBodyError::Read(e.into()))))
            }
            Poll::Ready(None) => {
                this.wait_over();
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => {
                if this.clock.is_none() {
                    let now = Instant::now();
                    this.wait_began = Some(now);
                    this.clock = Some(Box::pin(tokio::time::sleep_until(now + this.this_wait())));
                }
                let clock = this.clock.as_mut().expect("set above");
                if clock.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                let gap = this.wait_began.map_or(this.idle, |t| t.elapsed());
                let why = this.expiry(gap);
                this.wait_over();
                this.expired = true;
                this.shared.lock().expired = Some(why);
                this.shared.expired.notify_one();
                this.poll_expired(cx)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || (!self.expired && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::sync::mpsc;

    /// A body fed by a channel: each message is a frame, closing the channel ends the body.
    struct Fed(mpsc::Receiver<Bytes>);

    impl Body for Fed {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
        }
    }

    fn fed(idle: Duration) -> (mpsc::Sender<Bytes>, IdleBody<Fed>, IdleWatch) {
        let (tx, rx) = mpsc::channel(16);
        let (body, watch) = IdleBody::new(Fed(rx), idle);
        (tx, body, watch)
    }

    const IDLE: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_sending_within_the_timeout_is_read_whole() {
        let (tx, body, watch) = fed(IDLE);
        let sender = tokio::spawn(async move {
            for i in 0..10u8 {
                tokio::time::sleep(IDLE - Duration::from_millis(1)).await;
                tx.send(Bytes::from(vec![i])).await.unwrap();
            }
        });
        let t = Instant::now();
        let all = body.collect().await.unwrap().to_bytes();
        assert_eq!(&all[..], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(t.elapsed(), (IDLE - Duration::from_millis(1)) * 10, "no frame came early or late");
        sender.await.unwrap();
        // The watch never fires for a body that finished.
        assert!(tokio::time::timeout(IDLE * 2, watch.expired()).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_wakes_its_watch_stays_pending_then_fails_once_the_watch_is_gone() {
        let (tx, mut body, watch) = fed(IDLE);
        tx.send(Bytes::from_static(b"INSERT half")).await.unwrap();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"INSERT half");
        let t = Instant::now();
        let reader = tokio::spawn(async move {
            let r = body.frame().await;
            (r.map(|r| r.map(|f| f.into_data().ok())), Instant::now())
        });
        watch.expired().await;
        assert_eq!(t.elapsed(), IDLE, "the watch fires exactly one idle timeout after the last frame");
        // While the watch lives the body does not fail: whoever reads it is about to be dropped.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!reader.is_finished());
        drop(watch);
        let (r, at) = reader.await.unwrap();
        assert!(matches!(r, Some(Err(ClientBodyError::Idle(d))) if d == IDLE), "{r:?}");
        assert_eq!(at - t, IDLE + Duration::from_secs(3600));
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_watch_a_stalled_body_fails_after_the_timeout_and_then_ends() {
        let (_tx, mut body, watch) = fed(IDLE);
        drop(watch);
        let t = Instant::now();
        let e = body.frame().await.unwrap().unwrap_err();
        assert_eq!(t.elapsed(), IDLE);
        assert_eq!(
            e.to_string(),
            "the client sent no request body byte for 30000 ms (limits.client_body_idle_timeout)"
        );
        assert!(body.frame().await.is_none(), "one error, then the end");
        assert!(body.is_end_stream());
    }

    #[tokio::test(start_paused = true)]
    async fn time_before_the_first_poll_does_not_count() {
        let (tx, mut body, watch) = fed(IDLE);
        // Queued for admission for longer than the timeout: the body was not being read.
        tokio::time::sleep(IDLE * 3).await;
        let t = Instant::now();
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(IDLE - Duration::from_secs(1)).await;
            tx.send(Bytes::from_static(b"late but in time")).await.unwrap();
        });
        let f = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&f[..], b"late but in time");
        assert_eq!(t.elapsed(), IDLE - Duration::from_secs(1));
        feeder.await.unwrap();
        assert!(tokio::time::timeout(Duration::ZERO, watch.expired()).await.is_err(), "not expired");
    }

    #[tokio::test(start_paused = true)]
    async fn each_frame_restarts_the_clock() {
        let (tx, mut body, watch) = fed(IDLE);
        tx.send(Bytes::from_static(b"a")).await.unwrap();
        body.frame().await.unwrap().unwrap();
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(IDLE / 2).await;
            tx.send(Bytes::from_static(b"b")).await.unwrap();
            // ... then nothing more, the sender kept open.
            tokio::time::sleep(IDLE * 10).await;
            drop(tx);
        });
        let t = Instant::now();
        body.frame().await.unwrap().unwrap();
        let reader = tokio::spawn(async move { body.frame().await.map(|r| r.is_err()) });
        watch.expired().await;
        assert_eq!(t.elapsed(), IDLE / 2 + IDLE, "the clock restarted at the second frame");
        drop(watch);
        assert_eq!(reader.await.unwrap(), Some(true));
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_is_cut_off_by_the_rate_rule() {
        let (tx, body, watch) = fed(IDLE);
        let mut body = body.with_min_rate(500);
        let feeder = tokio::spawn(async move {
            // One byte every 20 s: each gap inside the 30 s idle timeout.
            loop {
                tokio::time::sleep(Duration::from_secs(20)).await;
                if tx.send(Bytes::from_static(b"1")).await.is_err() {
                    return;
                }
            }
        });
        let t = Instant::now();
        let reader = tokio::spawn(async move { while let Some(Ok(_)) = body.frame().await {} });
        let why = tokio::time::timeout(Duration::from_secs(3600), watch.expired())
            .await
            .expect("the trickle was never cut off");
        // 30 s for the first wait, plus 2 ms for the one byte that came (1 / 500 s).
        assert_eq!(t.elapsed(), Duration::from_millis(30_002));
        assert_eq!(
            why,
            "the client sent its request body too slowly: 1 bytes in 30002 ms of waiting (limits.client_body_min_rate)"
        );
        drop(watch);
        reader.await.unwrap();
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_at_the_minimum_rate_or_faster_is_read_whole() {
        for (bytes, every_ms) in [(300usize, 500u64), (1, 2), (16_000, 29_000)] {
            let (tx, body, watch) = fed(IDLE);
            let body = body.with_min_rate(500);
            let feeder = tokio::spawn(async move {
                let end = Instant::now() + Duration::from_secs(300);
                while Instant::now() < end {
                    tokio::time::sleep(Duration::from_millis(every_ms)).await;
                    tx.send(Bytes::from(vec![b'x'; bytes])).await.unwrap();
                }
            });
            let all = body.collect().await.unwrap().to_bytes();
            assert!(all.len() >= 300 * 500, "{bytes} bytes every {every_ms} ms: {} bytes", all.len());
            feeder.await.unwrap();
            assert!(tokio::time::timeout(Duration::ZERO, watch.expired()).await.is_err(), "not expired");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn time_the_consumer_spends_elsewhere_does_not_count_against_the_rate() {
        let (tx, body, watch) = fed(IDLE);
        let mut body = body.with_min_rate(500);
        tx.send(Bytes::from_static(b"a")).await.unwrap();
        body.frame().await.unwrap().unwrap();
        // The consumer is busy (a slow backend) for an hour; the client's next byte is ready.
        tx.send(Bytes::from_static(b"b")).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        body.frame().await.unwrap().unwrap();
        assert!(tokio::time::timeout(Duration::ZERO, watch.expired()).await.is_err(), "not expired");
        drop(tx);
    }
}
