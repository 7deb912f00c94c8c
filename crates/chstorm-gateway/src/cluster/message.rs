//! What a backend exchange is made of, for both HTTP clients ([`super::h1`], hyper's in
//! [`super::upstream`]) and the attempt loop: the body type of every request and answer, and why
//! an exchange got no answer head ([`BackendError`]).

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body type of every request and response the gateway makes.
pub type GBody = UnsyncBoxBody<Bytes, BoxError>;

pub fn empty() -> GBody {
    Empty::<Bytes>::new().map_err(|never| match never {}).boxed_unsync()
}

pub fn full(b: impl Into<Bytes>) -> GBody {
    http_body_util::Full::new(b.into()).map_err(|never| match never {}).boxed_unsync()
}

/// A body that yields `head` first, then `rest`: a streamed client body whose head the gateway
/// read to classify it, or an answer whose head was held.
pub struct Prefixed {
    head: Option<Bytes>,
    rest: GBody,
}

impl Prefixed {
    pub fn wrap(head: Bytes, rest: GBody) -> GBody {
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

/// A boxed future, as the `Backend` trait returns them.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Why a backend request got no answer head.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    /// The connection could not be made: the query certainly did not run.
    pub connect: bool,
    pub message: String,
}
