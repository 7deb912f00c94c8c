//! The HTTP answer hold: an attempt's successful answer is read before it counts as the
//! attempt's head, until it ends, reaches [`HOLD_AT`] (64 KiB), or the per-try deadline passes
//! after its head while it is still coming, whichever comes first ([`hold`]). An answer that
//! stalled by then (nothing for half a deadline: a replica frozen between its data and its last
//! chunk, as a SIGSTOP or a paused VM leaves it) is held on, its attempt silent, so the attempt
//! loop hedges it or sends it elsewhere as it would a replica hung before its head; let go, it
//! would have kept its client waiting for the replica with nothing left to do about it.
//!
//! Two reasons, one mechanism:
//! * **Nothing is lost while no byte went out.** A replica that dies between its head and its
//!   last byte (a kill -9, an OOM kill, a crash) breaks the held answer inside the attempt
//!   loop, where a read is retried or hedged as if the break came before the head (and a
//!   query of death is told apart the same way). Were the head let go first, the client would
//!   get a cut answer that nothing can mend.
//! * **One write.** 18.16 writes even a one-row answer as three segments (the head, the data,
//!   the last chunk); an answer read whole leaves in one write with a `Content-Length`
//!   ([`HttpHead::whole`]), where three writes each pay the loopback peer's receive and wake-up (about
//!   11 µs apiece on 2 cores, `docs/PERFORMANCE.md`).
//!
//! A break is not always a broken replica: from 24.x a server whose query fails after its 200 head
//! writes the exception into the body (`__exception__` and the text; 25.11 on, inside a block
//! tagged by the head's `X-ClickHouse-Exception-Tag`) and then cuts the answer on purpose, with no
//! final chunk (`cancelWithException` in ClickHouse's
//! `src/Server/HTTP/HTTP1/HTTP1ServerResponse.cpp`). An answer that breaks right after such a
//! block ([`chstorm_proto::rules::exception_after_head`]) is the server's answer: it goes to the
//! client as it came, cut the same way, and is neither retried nor held against its replica.
//!
//! Holding costs no latency a client could see: 18.16 holds its answer in its output buffer
//! (1 MiB) and sends the segments back to back at the query's end. An answer longer than
//! 64 KiB, or still coming one per-try deadline after its head, streams from there, its held
//! bytes first: its first bytes reach the client about as they would direct, and from then on
//! the answer belongs to its replica.

use crate::cluster::upstream::{full, BackendError, BoxError, GBody, Prefixed};
use bytes::Bytes;
use chstorm_proto::rules::{exception_after_head, EXCEPTION_TAG_HEADER};
use http::Response;
use http_body::{Body, Frame};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The most of an answer [`hold`] holds before it lets the head go: 64 KiB.
pub const HOLD_AT: usize = 64 * 1024;

/// An HTTP attempt's answer head, with what the hold found of its body.
#[derive(Debug)]
pub struct HttpHead {
    pub resp: Response<GBody>,
    /// The body's length when it was read whole: it goes out as the answer's `Content-Length`,
    /// and its query has ended on the server. A field, not a response extension: an extension
    /// costs an allocated map on every answer.
    pub whole: Option<u64>,
}

impl HttpHead {
    /// A head whose body streams.
    pub fn streaming(resp: Response<GBody>) -> HttpHead {
        HttpHead { resp, whole: None }
    }
}

/// Reads `resp`'s body until it ends (the answer becomes whole, [`HttpHead::whole`]), passes
/// `hold_at` bytes, or `hold_for` passes while frames still come (it streams from there, what
/// was held first). A body silent for half of `hold_for` by then is held on until its next
/// frame (then it streams) or its end. Every frame is a sign of work (`bump`, given the time
/// it came). A body that breaks while held is the attempt's failure: nothing of it went to the
/// client.
pub async fn hold(
    resp: Response<GBody>,
    hold_at: usize,
    hold_for: Duration,
    bump: impl Fn(tokio::time::Instant),
) -> Result<HttpHead, BackendError> {
    use http_body_util::BodyExt;
    let (parts, mut body) = resp.into_parts();
    let mut held = bytes::BytesMut::new();
    let mut last = tokio::time::Instant::now();
    let until = last + hold_for;
    loop {
        if held.len() > hold_at {
            return Ok(HttpHead::streaming(Response::from_parts(parts, Prefixed::wrap(held.freeze(), body))));
        }
        // Waiting for a frame loses nothing when it is given up (`frame` only polls the body).
        // Past `until` an answer that is still coming streams; one that stalled is held on.
        let frame = match tokio::time::timeout_at(until, body.frame()).await {
            Ok(frame) => frame,
            Err(_) if last.elapsed() < hold_for / 2 => {
                return Ok(HttpHead::streaming(Response::from_parts(parts, Prefixed::wrap(held.freeze(), body))));
            }
            Err(_) => body.frame().await,
        };
        last = tokio::time::Instant::now();
        bump(last);
        match frame {
            None => {
                let whole = Some(held.len() as u64);
                return Ok(HttpHead { resp: Response::from_parts(parts, full(held.freeze())), whole });
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => held.extend_from_slice(&data),
                // Trailers (ClickHouse sends none): stream from here, the trailers included.
                Err(frame) => {
                    let rest = Prefixed::wrap(held.freeze(), Replay::wrap(frame, body));
                    return Ok(HttpHead::streaming(Response::from_parts(parts, rest)));
                }
            },
            Some(Err(e)) => {
                // A current server's own error after its head, then the cut it makes on purpose
                // (`cancelWithException`): its answer, passed on as it came, cut the same way.
                let tag = parts.headers.get(EXCEPTION_TAG_HEADER).and_then(|v| v.to_str().ok());
                if exception_after_head(&held, tag).is_some() {
                    let rest = Prefixed::wrap(held.freeze(), Cut::wrap(e));
                    return Ok(HttpHead::streaming(Response::from_parts(parts, rest)));
                }
                let message = format!("the answer broke after {} bytes: {e}", held.len());
                return Err(BackendError { connect: false, message });
            }
        }
    }
}

/// A body whose only frame is the error its answer was cut with.
struct Cut(Option<BoxError>);

impl Cut {
    fn wrap(e: BoxError) -> GBody {
        use http_body_util::BodyExt;
        Cut(Some(e)).boxed_unsync()
    }
}

impl Body for Cut {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.0.take().map(Err))
    }
    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }
}

/// A body that yields one frame taken out of `rest` ahead of time, then `rest`.
struct Replay {
    first: Option<Frame<Bytes>>,
    rest: GBody,
}

impl Replay {
    fn wrap(first: Frame<Bytes>, rest: GBody) -> GBody {
        use http_body_util::BodyExt;
        Replay { first: Some(first), rest }.boxed_unsync()
    }
}

impl Body for Replay {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(f) = self.first.take() {
            return Poll::Ready(Some(Ok(f)));
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
    use std::sync::atomic::{AtomicUsize, Ordering};

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
    const LONG: Duration = Duration::from_secs(3600);

    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_still_coming_streams_from_the_per_try_deadline_on() {
        // A long read whose rows keep coming, one every 30 ms.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(16);
        let body = http_body_util::StreamBody::new(tokio_stream_from(rx)).boxed_unsync();
        tokio::spawn(async move {
            for i in 0..10 {
                tx.send(Ok(Frame::data(Bytes::from(format!("{i}\n"))))).await.unwrap();
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        });
        let t0 = tokio::time::Instant::now();
        let r = hold(Response::new(body), 1024, Duration::from_millis(100), |_| ()).await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_millis(100), "held only to the deadline");
        assert!(r.whole.is_none(), "it streams");
        let all = r.resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(all, "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n", "what was held first, then the rest");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_answer_is_held_on_past_the_per_try_deadline() {
        // Its data at once, then nothing for 3 s (a replica frozen before its last chunk), then
        // the rest: held on through the stall, so the attempt loop could have sent it elsewhere.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        tx.send(Ok(Frame::data(Bytes::from("first\n")))).await.unwrap();
        let body = http_body_util::StreamBody::new(tokio_stream_from(rx)).boxed_unsync();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            tx.send(Ok(Frame::data(Bytes::from("last\n")))).await.unwrap();
        });
        let bumps = AtomicUsize::new(0);
        let t0 = tokio::time::Instant::now();
        let r = hold(Response::new(body), 1024, Duration::from_millis(100), |_| {
            bumps.fetch_add(1, Ordering::Relaxed);
        })
        .await
        .unwrap();
        assert_eq!(t0.elapsed(), Duration::from_secs(3), "held until the stall ended");
        assert_eq!(r.whole, Some(11), "and then whole");
        assert_eq!(bumps.load(Ordering::Relaxed), 3, "two frames and the end");
        assert_eq!(r.resp.into_body().collect().await.unwrap().to_bytes(), "first\nlast\n");

        // A stall that ends with more to come: it streams from the frame that ended it.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        tx.send(Ok(Frame::data(Bytes::from("a")))).await.unwrap();
        let body = http_body_util::StreamBody::new(tokio_stream_from(rx)).boxed_unsync();
        let (go_on, more) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            tx.send(Ok(Frame::data(Bytes::from("b")))).await.unwrap();
            more.await.unwrap();
            tx.send(Ok(Frame::data(Bytes::from("c")))).await.unwrap();
        });
        let t0 = tokio::time::Instant::now();
        let r = hold(Response::new(body), 1024, Duration::from_millis(100), |_| ()).await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_secs(1));
        assert!(r.whole.is_none(), "it streams");
        go_on.send(()).unwrap();
        assert_eq!(r.resp.into_body().collect().await.unwrap().to_bytes(), "abc");
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

    #[tokio::test]
    async fn a_small_answer_is_whole_in_one_frame_and_each_frame_is_a_sign_of_work() {
        let bumps = AtomicUsize::new(0);
        let r = hold(answer(&["1\n", "2\n", "3\n"], false), 1024, LONG, |_| {
            bumps.fetch_add(1, Ordering::Relaxed);
        })
        .await
        .unwrap();
        assert_eq!(r.whole, Some(6));
        assert_eq!(bumps.load(Ordering::Relaxed), 4, "three frames and the end");
        let mut body = r.resp.into_body();
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "1\n2\n3\n", "one frame, one write");
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_long_answer_streams_after_what_was_held() {
        let r = hold(answer(&["aaaa", "bbbb", "cccc", "dddd"], false), 5, LONG, |_| ()).await.unwrap();
        assert!(r.whole.is_none(), "a long answer keeps streaming");
        let all = r.resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(all, "aaaabbbbccccdddd");
    }

    #[tokio::test]
    async fn a_break_while_held_fails_the_attempt() {
        let e = hold(answer(&["1\n", "2\n"], true), 1024, LONG, |_| ()).await.unwrap_err();
        assert!(!e.connect, "the query was sent: its outcome is unknown");
        assert_eq!(e.message, "the answer broke after 4 bytes: the backend went away");
    }

    #[tokio::test]
    async fn a_cut_after_the_server_s_own_exception_is_its_answer() {
        let text = "Code: 395. DB::Exception: Value passed to 'throwIf' function is non-zero";
        let tagged = format!(
            "\r\n__exception__\r\nt0t0t0t0t0t0t0t0\r\n{text}\n{} t0t0t0t0t0t0t0t0\r\n__exception__\r\n",
            text.len() + 1
        );
        let untagged = format!("__exception__\r\n{text}\n");
        for (tag, block) in [(Some("t0t0t0t0t0t0t0t0"), tagged.as_str()), (None, untagged.as_str())] {
            let mut resp = answer(&["1\n", "2\n", block], true);
            if tag.is_some() {
                resp.headers_mut().insert(EXCEPTION_TAG_HEADER, http::HeaderValue::from_static("t0t0t0t0t0t0t0t0"));
            }
            let r = hold(resp, 1024, LONG, |_| ()).await.expect("the server's answer, not a broken one");
            assert!(r.whole.is_none(), "it is cut, as the server cut it");
            let mut body = r.resp.into_body();
            let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
            assert_eq!(first, format!("1\n2\n{block}"));
            assert!(body.frame().await.unwrap().is_err(), "then the same cut");
        }
        // A block with another answer's tag, or a cut inside one, is a broken answer.
        let mut resp = answer(&["1\n", &tagged], true);
        resp.headers_mut().insert(EXCEPTION_TAG_HEADER, http::HeaderValue::from_static("other"));
        assert!(hold(resp, 1024, LONG, |_| ()).await.is_err());
        assert!(hold(answer(&["1\n", &untagged[..10]], true), 1024, LONG, |_| ()).await.is_err());
    }

    #[tokio::test]
    async fn a_break_after_the_hold_reaches_the_client_after_what_was_held() {
        let r = hold(answer(&["aaaa", "bbbb", "cccc"], true), 5, LONG, |_| ()).await.unwrap();
        let mut body = r.resp.into_body();
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "aaaabbbb");
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "cccc");
        assert_eq!(body.frame().await.unwrap().unwrap_err().to_string(), "the backend went away");
    }
}
