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

/// A request to a replica, as an attempt sends it. The parts an attempt makes afresh (its target,
/// with its thread grant; its body) stand apart from those every attempt of a query shares (the
/// client's headers that go on), so an attempt copies no header map and parses no URI: the own
/// HTTP/1 client ([`super::h1`]) writes these fields as they are. hyper's client, for
/// `https://` replicas, gets them as an `http::Request` ([`BackendRequest::into_hyper`]).
pub struct BackendRequest {
    pub method: http::Method,
    /// The path and query, `/?query=...`: no scheme, no authority.
    pub target: String,
    /// The client's headers that go on, shared by the query's attempts.
    pub headers: std::sync::Arc<http::HeaderMap>,
    /// The gateway's own `Authorization`, written after them: the login's the query runs as.
    pub auth: Option<http::HeaderValue>,
    /// That login's slot ([`super::login::BackendLogin::slot`]): the request goes on a connection
    /// of that login's pool only.
    pub pool: usize,
    /// The body is empty and says so with `Content-Length: 0`: 18.16 answers a POST with neither
    /// `Content-Length` nor `Transfer-Encoding` with 411 (Code 381).
    pub empty_post: bool,
    pub body: GBody,
}

impl BackendRequest {
    /// `method` to `target` with `body`, and no headers (the tests' requests).
    #[cfg(test)]
    pub(crate) fn new(method: http::Method, target: impl Into<String>, body: GBody) -> BackendRequest {
        BackendRequest {
            method,
            target: target.into(),
            headers: Default::default(),
            auth: None,
            pool: 0,
            empty_post: false,
            body,
        }
    }

    /// As hyper's client takes it: the URI is `base` (`https://host:port`) and the target.
    pub fn into_hyper(self, base: &str) -> Result<http::Request<GBody>, BackendError> {
        let uri = http::Uri::try_from(format!("{base}{}", self.target))
            .map_err(|e| BackendError { connect: false, message: format!("the request's URI: {e}") })?;
        let mut req = http::Request::new(self.body);
        *req.method_mut() = self.method;
        *req.uri_mut() = uri;
        let h = req.headers_mut();
        h.extend(self.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(auth) = self.auth {
            h.insert(http::header::AUTHORIZATION, auth);
        }
        if self.empty_post {
            h.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from_static("0"));
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyper_s_request_has_the_whole_uri_the_shared_headers_and_the_gateway_s_own() {
        let mut shared = http::HeaderMap::new();
        shared.append("x-b", http::HeaderValue::from_static("1"));
        shared.append("x-b", http::HeaderValue::from_static("2"));
        let mut req = BackendRequest::new(http::Method::POST, "/?query=SELECT%201", empty());
        (req.headers, req.auth, req.empty_post) =
            (std::sync::Arc::new(shared), Some(http::HeaderValue::from_static("Basic Og==")), true);
        let r = req.into_hyper("https://127.0.0.1:8443").unwrap();
        assert_eq!(
            (r.method(), r.uri().to_string()),
            (&http::Method::POST, "https://127.0.0.1:8443/?query=SELECT%201".into())
        );
        let h: Vec<_> = r.headers().iter().map(|(k, v)| format!("{k}: {}", v.to_str().unwrap())).collect();
        assert_eq!(h, ["x-b: 1", "x-b: 2", "authorization: Basic Og==", "content-length: 0"]);
        let bad = BackendRequest::new(http::Method::GET, "/a b", empty()).into_hyper("https://h:1").unwrap_err();
        assert!(bad.message.starts_with("the request's URI: "), "{bad}");
    }
}
