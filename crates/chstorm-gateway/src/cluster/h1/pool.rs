//! The kept-alive connections to one replica, for one worker thread: taken last in, first out
//! (the connections in use stay few and warm; the others reach their idle timeout), at most
//! `max_idle` of them, none kept past `idle_timeout` (a sweeper task closes them while no
//! request comes), and none the server closed while it was idle.
//!
//! [`Pool::reset`] (the replica went down) closes the idle connections and keeps the busy ones
//! from coming back: a server that is shutting down or hung gets no request on them again.
//!
//! A request that finds no idle connection connects, and also waits in line for one to come
//! back ([`Pool::checkout`]), whichever comes first, as hyper's pool does: a burst of new client
//! connections overflows the server's listen backlog (Poco's is 64), and a connect whose SYN was
//! dropped waits for its retransmit (1 s, the default `pool.connect_timeout`) while the
//! connections already made are free again within milliseconds. A connect that loses the race is
//! given up unless it is made by then (its connection then goes to the next request in line, or
//! joins the idle ones). hyper's pool lets it go on; here that gave a cold pool under 256 new
//! clients more connections than it had requests in flight, each one a thread of an 18.16
//! server's, and the sweeper closed the ones left over at the idle timeout, in the middle of the
//! load (docs/PERFORMANCE.md, "Connections to the server").

use super::conn::Conn;
use crate::cluster::message::BackendError;
use futures_util::FutureExt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::net::TcpStream;

pub struct Pool {
    /// `host:port` of the replica, for connects and the `Host` header.
    pub authority: String,
    host: String,
    port: u16,
    idle_timeout: Duration,
    max_idle: usize,
    connect_timeout: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    idle: Vec<Conn>,
    /// Requests waiting for a connection to come back (while they connect), first come first.
    waiters: std::collections::VecDeque<tokio::sync::oneshot::Sender<Conn>>,
    /// Bumped by [`Pool::reset`]; a connection made before it is not taken back.
    generation: u64,
    /// A sweeper task runs (while idle connections wait).
    sweeping: bool,
}

impl Pool {
    /// A pool for `http://host:port`.
    pub fn new(base: &str, idle_timeout: Duration, max_idle: usize, connect_timeout: Duration) -> Result<Pool, String> {
        let uri: http::Uri = base.parse().map_err(|e| format!("replica {base}: {e}"))?;
        let host = uri.host().ok_or_else(|| format!("replica {base}: no host"))?;
        let port = uri.port_u16().unwrap_or(80);
        Ok(Pool {
            authority: format!("{host}:{port}"),
            host: host.trim_start_matches('[').trim_end_matches(']').to_string(),
            port,
            idle_timeout,
            max_idle,
            connect_timeout,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection the server has not closed; else a new one, or one that comes back
    /// while it is made, whichever comes first.
    pub async fn checkout(self: &Arc<Self>) -> Result<Conn, BackendError> {
        match self.idle_or_wait() {
            Ok(c) => Ok(c),
            // Out of line: the usual checkout's poll keeps a small frame.
            Err(back) => crate::out_of_line::boxed(|| self.clone().connect_or_wait(back)).await,
        }
    }

    /// A new connection, or an idle one that comes back first (`back`); a connect that loses
    /// the race is given up unless it is made by then (its connection is put in the pool).
    async fn connect_or_wait(
        self: Arc<Self>,
        back: tokio::sync::oneshot::Receiver<Conn>,
    ) -> Result<Conn, BackendError> {
        let mut connect = std::pin::pin!(self.clone().connect());
        tokio::select! {
            made = &mut connect => made,
            Ok(c) = back => {
                if let Some(Ok(made)) = connect.now_or_never() {
                    self.put(made);
                }
                Ok(c)
            }
        }
    }

    /// The last idle connection still open, else a place in line for one that comes back.
    fn idle_or_wait(&self) -> Result<Conn, tokio::sync::oneshot::Receiver<Conn>> {
        let mut stale = Vec::new();
        let mut s = self.state();
        while let Some(c) = s.idle.pop() {
            if !self.expired(&c, tokio::time::Instant::now()) && !c.closed_while_idle() {
                drop(s);
                return Ok(c);
            }
            stale.push(c);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        s.waiters.retain(|w| !w.is_closed());
        s.waiters.push_back(tx);
        Err(rx)
    }

    /// Has idle `c` passed the idle timeout at `now`?
    fn expired(&self, c: &Conn, now: tokio::time::Instant) -> bool {
        c.idle_since + self.idle_timeout <= now
    }

    async fn connect(self: Arc<Self>) -> Result<Conn, BackendError> {
        let generation = self.state().generation;
        let fail = |e: String| BackendError { connect: true, message: format!("connect to {}: {e}", self.authority) };
        let tcp = tokio::time::timeout(self.connect_timeout, TcpStream::connect((self.host.as_str(), self.port)))
            .await
            .map_err(|_| fail(format!("no answer within {:?}", self.connect_timeout)))?
            .map_err(|e| fail(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        Ok(Conn::new(tcp, generation))
    }

    /// Takes `c` back after a whole answer: to the first request waiting for one, else to the
    /// idle ones (when there is room, and it is of this generation); else it closes.
    pub fn put(self: &Arc<Self>, mut c: Conn) {
        let mut s = self.state();
        if c.generation != s.generation || !c.buf.is_empty() {
            return;
        }
        while let Some(w) = s.waiters.pop_front() {
            match w.send(c) {
                Ok(()) => return,
                Err(back) => c = back,
            }
        }
        if s.idle.len() >= self.max_idle {
            return;
        }
        c.idle_since = tokio::time::Instant::now();
        s.idle.push(c);
        if !s.sweeping {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                s.sweeping = true;
                rt.spawn(sweep(Arc::downgrade(self)));
            }
        }
    }

    /// Closes the idle connections; the busy ones close when done.
    pub fn reset(&self) {
        let idle = {
            let mut s = self.state();
            s.generation += 1;
            s.waiters.clear();
            std::mem::take(&mut s.idle)
        };
        drop(idle);
    }

    /// The idle connections now (for tests).
    #[cfg(test)]
    pub fn idle_count(&self) -> usize {
        self.state().idle.len()
    }

    /// Waits until the last idle connection is reported readable (for tests: its peer's close
    /// has reached the reactor).
    #[cfg(test)]
    pub async fn idle_readable(self: &Arc<Self>) {
        let c = self.state().idle.pop().expect("an idle connection");
        let _ = c.tcp.readable().await;
        self.state().idle.push(c);
    }
}

/// Closes `pool`'s connections as they pass their idle timeout; ends when none is idle.
async fn sweep(pool: Weak<Pool>) {
    loop {
        let next = {
            let Some(p) = pool.upgrade() else { return };
            let mut s = p.state();
            match s.idle.iter().map(|c| c.idle_since).min() {
                Some(oldest) => oldest + p.idle_timeout,
                None => {
                    s.sweeping = false;
                    return;
                }
            }
        };
        tokio::time::sleep_until(next).await;
        let Some(p) = pool.upgrade() else { return };
        let expired: Vec<Conn> = {
            let now = tokio::time::Instant::now();
            let mut s = p.state();
            let (old, keep) = std::mem::take(&mut s.idle).into_iter().partition(|c| p.expired(c, now));
            s.idle = keep;
            old
        };
        drop(expired);
    }
}
