//! Rare paths made and polled out of line, so the usual request's poll functions keep small
//! stack frames.
//!
//! A poll function's stack frame has room for what every path of its `async fn` makes (each
//! future before it is stored, each temporary), and the whole frame is taken (and probed, a
//! write per 4 KiB page) on every poll, whichever path runs. A rare path that makes a large
//! future (hyper's connection, a TLS handshake, a multipart body) inlined into a connection's
//! poll made that poll's frame 12 to 14 KiB; the frames of one poll, nested, outgrew the
//! first-level data cache, and each query wrote to lines it had evicted itself.
//!
//! [`boxed`] makes the future in a function of its own and returns it boxed as a trait object,
//! so neither its making nor its polling is inlined into the caller: the caller's frame holds a
//! pointer. It costs an allocation, on a rare path only.

use std::future::Future;
use std::pin::Pin;

/// The future `make` returns, made here and boxed: see the module doc.
#[inline(never)]
pub(crate) fn boxed<'a, F>(make: impl FnOnce() -> F) -> Pin<Box<dyn Future<Output = F::Output> + Send + 'a>>
where
    F: Future + Send + 'a,
{
    Box::pin(make())
}
