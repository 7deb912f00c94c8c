//! The gateway's own graceful stop (SIGTERM), so a restart loses no query:
//!
//! 1. the listener closes (with `reuse_port`, a new gateway on the same port already takes every
//!    new connection, see [`super::listen`]);
//! 2. `/ping` answers 503, so a load balancer takes this instance out;
//! 3. every answer carries `Connection: close`, so each kept-alive client connection closes
//!    right after its next answer and the client reconnects (to the new gateway);
//! 4. after [`IDLE_GRACE`], connections still open are shut down gracefully (an idle one at
//!    once, a busy one after its answer);
//! 5. the gateway exits when every connection has closed, or when `shutdown.drain_timeout`
//!    (default 30 s) passes, whichever is first.
//!
//! Connections are counted by RAII guards ([`Drain::conn`]).

use crate::signal::{Signal, Wait};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How long idle kept-alive connections are left open after the drain starts, for their
/// clients to send one more request (answered with `Connection: close`): 1 s.
pub const IDLE_GRACE: Duration = Duration::from_secs(1);

/// The drain state shared by the listener and its connections.
#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    open: AtomicUsize,
    closed: Notify,
    /// Fired after [`IDLE_GRACE`]: connections shut down gracefully.
    force: Signal,
}

/// Counts one open client connection while it lives.
#[derive(Debug)]
pub struct ConnGuard(Arc<Drain>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.closed.notify_waiters();
        }
    }
}

impl Drain {
    /// True once the drain started: `/ping` answers 503 and answers close their connection.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Client connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Counts a connection until the guard drops.
    pub fn conn(self: &Arc<Self>) -> ConnGuard {
        self.open.fetch_add(1, Ordering::AcqRel);
        ConnGuard(self.clone())
    }

    /// Resolves when connections must shut down (after [`IDLE_GRACE`] of draining). Cheap to
    /// poll again from the task that waits: a connection polls it at every wake-up.
    pub fn forced(&self) -> Wait<&Signal> {
        self.force.wait()
    }

    /// Starts draining and waits until every connection has closed, at most `timeout`; returns
    /// the connections still open then.
    pub async fn run(&self, timeout: Duration) -> usize {
        self.draining.store(true, Ordering::Release);
        let wait_closed = async {
            loop {
                let notified = self.closed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.open() == 0 {
                    return;
                }
                notified.await;
            }
        };
        let grace = async {
            tokio::time::sleep(IDLE_GRACE.min(timeout)).await;
            self.force.fire();
            std::future::pending::<()>().await
        };
        let _ = tokio::time::timeout(timeout, async {
            tokio::select! {
                _ = wait_closed => {}
                _ = grace => {}
            }
        })
        .await;
        self.open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_for_connections_then_forces_then_gives_up() {
        let d = Arc::new(Drain::default());
        assert_eq!(d.run(Duration::from_secs(5)).await, 0, "nothing open: done at once");

        let d = Arc::new(Drain::default());
        let a = d.conn();
        let b = d.conn();
        let d2 = d.clone();
        let t0 = tokio::time::Instant::now();
        let closer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            drop(a);
            // b closes only when told to shut down.
            d2.forced().await;
            tokio::time::sleep(Duration::from_millis(10)).await;
            drop(b);
        });
        assert!(!d.is_draining());
        assert_eq!(d.run(Duration::from_secs(30)).await, 0);
        assert!(d.is_draining());
        assert_eq!(t0.elapsed(), IDLE_GRACE + Duration::from_millis(10));
        closer.await.unwrap();

        let d = Arc::new(Drain::default());
        let _stuck = d.conn();
        let t0 = tokio::time::Instant::now();
        assert_eq!(d.run(Duration::from_secs(3)).await, 1, "a connection that never closes: the timeout wins");
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
    }
}
