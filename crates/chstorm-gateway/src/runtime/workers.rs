//! The gateway's worker threads: `workers` (default `auto`: half the logical cores) threads, each
//! running its own current-thread tokio runtime. Every worker accepts from each listening socket
//! (its own registration of the socket in its own reactor): the first worker to wake takes a new
//! connection, so a busy worker, which wakes later, takes fewer. The connection, its requests,
//! and the backend connections they use (each worker has its own pools:
//! [`crate::cluster::worker::current`] picks the slot) then stay on that one thread. A query crosses no thread on its way: with one
//! multi-thread runtime the client's connection task and the pooled backend connection's task
//! ran on different threads, and the wake-ups between them were the largest part of the
//! gateway's CPU (docs/PERFORMANCE.md, the profile). A new connection is not handed from thread
//! to thread either (an accept loop elsewhere doubled `/ping`'s time on a fresh connection).
//!
//! Why not one `SO_REUSEPORT` listener per worker: the kernel would spread connections by a hash
//! of their addresses, blind to how busy each worker is, and `reuse_port` stays what the
//! operator set it for (a restart's second gateway on the port).
//!
//! Health checks and budget polls stay on the runtime that started the gateway.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

/// After a failed accept (out of file descriptors, most likely), the pause before the next: 10 ms.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);

/// The worker threads and their runtimes; dropping it stops them (their tasks are dropped,
/// which closes their connections).
pub struct Workers {
    handles: Vec<tokio::runtime::Handle>,
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
                crate::cluster::worker::set_current(i);
                // Runs the worker's tasks until the gateway stops (or drops its sender), with
                // the worker's watch of its clients' FINs.
                let _ = rt.block_on(async {
                    let _fins = crate::http::client_fin::Poller::install().map_err(|e| {
                        let msg = "cannot watch clients' FINs on this worker: a client that leaves mid-read has its \
                                   query run to its end; raise the descriptor limit";
                        crate::log::log("error", msg, serde_json::json!({"worker": i, "error": e.to_string()}))
                    });
                    stopped.await
                });
                // The runtime drops here, on its own thread, with its tasks.
            })?;
        }
        Ok(Workers { handles, stops })
    }

    /// How many workers there are.
    pub fn count(&self) -> usize {
        self.handles.len()
    }

    /// Accepts on `listener` on every worker until the returned tasks are aborted, and serves
    /// each connection with `serve` on the worker that took it.
    pub fn accept<F, Fut>(
        &self,
        listener: tokio::net::TcpListener,
        serve: F,
    ) -> std::io::Result<Vec<tokio::task::JoinHandle<()>>>
    where
        F: Fn(tokio::net::TcpStream, SocketAddr) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // The socket leaves this runtime's reactor; each worker registers a copy in its own.
        let listener = listener.into_std()?;
        let mut tasks = Vec::with_capacity(self.handles.len());
        for handle in &self.handles {
            let (copy, serve) = (listener.try_clone()?, serve.clone());
            tasks.push(handle.spawn(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(copy) else { return };
                loop {
                    match listener.accept().await {
                        Ok((tcp, peer)) => drop(tokio::spawn(serve(tcp, peer))),
                        // Out of file descriptors, most likely: wait rather than spin.
                        Err(_) => tokio::time::sleep(ACCEPT_PAUSE).await,
                    }
                }
            }));
        }
        Ok(tasks)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
    }
}
