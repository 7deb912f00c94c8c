//! The gateway's worker threads: `workers` (default `auto`: half the logical cores) threads, each
//! running its own current-thread tokio runtime. The listeners hand every accepted client
//! connection to the next worker, round robin; the connection, its requests, and the backend
//! connections they use (each worker has its own pools: [`current`] picks the slot) then stay on
//! that one thread. A query crosses no thread on its way: with one multi-thread runtime the
//! client's connection task and the pooled backend connection's task ran on different workers,
//! and the wake-ups between them were the largest part of the gateway's CPU (docs/PERFORMANCE.md,
//! the profile).
//!
//! Why round robin from one listener rather than one `SO_REUSEPORT` listener per worker: the
//! kernel spreads connections by a hash of their addresses, which leaves a few kept-alive
//! connections unevenly spread (8 connections on 2 workers land 6 and 2 often enough), and
//! `reuse_port` stays what the operator set it for (a restart's second gateway on the port).
//!
//! Health checks, budget polls and the listeners' accept loops stay on the runtime that started
//! the gateway.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The index of the worker running this thread (0 off the workers' threads).
pub fn current() -> usize {
    CURRENT.with(Cell::get)
}

/// The worker threads and their runtimes; dropping it stops them (their tasks are dropped,
/// which closes their connections).
pub struct Workers {
    handles: Vec<tokio::runtime::Handle>,
    next: AtomicUsize,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl Workers {
    /// Starts `n` worker threads (at least one).
    pub fn start(n: usize) -> std::io::Result<Workers> {
        let (mut handles, mut stops) = (Vec::new(), Vec::new());
        for i in 0..n.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            handles.push(rt.handle().clone());
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            stops.push(stop);
            std::thread::Builder::new().name(format!("chstorm-gw-{i}")).spawn(move || {
                CURRENT.with(|c| c.set(i));
                // Runs the worker's tasks until the gateway stops (or drops its sender).
                let _ = rt.block_on(stopped);
                // The runtime drops here, on its own thread, with its tasks.
            })?;
        }
        Ok(Workers { handles, next: AtomicUsize::new(0), stops })
    }

    /// How many workers there are.
    pub fn count(&self) -> usize {
        self.handles.len()
    }

    /// Moves an accepted connection to the next worker and serves it there with `serve`.
    pub fn serve<F, Fut>(&self, tcp: tokio::net::TcpStream, serve: F)
    where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // The socket leaves this runtime's reactor and joins the worker's.
        let Ok(std) = tcp.into_std() else { return };
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        drop(self.handles[i].spawn(async move {
            // Registered with the worker's reactor: this runs on the worker.
            let Ok(tcp) = tokio::net::TcpStream::from_std(std) else { return };
            serve(tcp).await;
        }));
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
    }
}
