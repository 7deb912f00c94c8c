//! A client's FIN, seen without reading its connection.
//!
//! A client that sends a whole request and then shuts down its sending side (a half-close)
//! still reads the answer: 18.16 answers it, and runs its INSERT. A client that leaves sends
//! the same FIN. The two cannot be told apart without writing to the client, so the gateway
//! follows ClickHouse's own rule for this (`cancel_http_readonly_queries_on_client_close`,
//! which cancels a read on a FIN and lets every other statement run to its end):
//!
//! * a **read** (SELECT, WITH, SHOW, DESCRIBE, EXISTS, EXPLAIN) whose client sends its FIN
//!   before the whole answer has gone out is abandoned: its query is killed on the replica (the
//!   KILL guard, `killed_queries_total{reason="client_gone"}`), and the client gets Code 394 if
//!   no answer head has gone out yet, a cut connection otherwise (an answer the gateway held
//!   whole goes out whole: its query has ended). Without this a client that left would keep a
//!   silent read running to its end;
//! * **any other statement** (INSERT, CREATE, ...) runs to its end and is answered, as direct.
//!
//! hyper itself runs with `half_close(true)` (it no longer ends a connection at a FIN while a
//! request is in flight), and the FIN is watched here instead, without taking a byte from the
//! connection and without a wake-up per request. Each worker thread has a [`Poller`]: an epoll
//! instance of its own, registered in the worker's tokio reactor. A connection is watched through
//! a second descriptor of its socket, added to that epoll for `EPOLLRDHUP` alone (with
//! `EPOLLONESHOT`; a reset's `EPOLLHUP` and `EPOLLERR` come with every registration). A request's
//! bytes wake only the connection's own registration in tokio; the FIN (or a reset) makes the
//! poller's epoll readable, and its task fires the connection's [`ClientFin`]. Registered with
//! tokio instead (whose read interest is `EPOLLIN | EPOLLRDHUP`), the second descriptor woke the
//! connection's task again on every request: 3 % of the gateway's user-space instructions per
//! `SELECT 1` (docs/PERFORMANCE.md, "A client's FIN").
//!
//! The FIN is a TCP one, so a TLS client is watched the same way. A connection is watched once it
//! has sent its first bytes (after its TLS handshake), so it then holds two descriptors of its
//! socket: size the descriptor limit for twice the clients that send queries
//! (`LimitNOFILE=65536` in `deploy/chstorm-gateway.service`: 32,000 such clients). The second
//! descriptor is the watch's own: it leaves the poller's epoll and is closed when the watch is
//! dropped, so a descriptor number the kernel hands out again is never watched by mistake, and a
//! watch's key carries a generation, so a FIN seen just as its connection ended fires nothing.

use crate::cluster::upstream::{BoxError, GBody};
use crate::signal::{Signal, Wait};
use bytes::Bytes;
use http_body::{Body, Frame};
use std::cell::RefCell;
use std::future::Future;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;

/// Fires when the client's FIN has come; the connection hands it to each of its queries.
#[derive(Clone, Debug, Default)]
pub struct ClientFin(Arc<Signal>);

impl ClientFin {
    /// Resolves once the client's FIN has come (never, for a client that keeps its side open).
    pub fn came(&self) -> Wait<&Signal> {
        self.0.wait()
    }

    /// `body`, ended with an error as soon as the FIN comes: the front then closes the
    /// connection and drops the body, whose guards cancel the query.
    pub fn cut(&self, body: GBody) -> GBody {
        use http_body_util::BodyExt;
        Cut { fin: self.0.clone().wait_owned(), body }.boxed_unsync()
    }
}

/// The watch of one connection: `(fin, watch)`, on this worker's [`Poller`]. The connection
/// holds the watch for its life (it holds a descriptor of the socket). None when the socket
/// cannot be watched (no descriptor left, or no poller on this thread); the connection then works
/// as without the watch.
pub fn watch(tcp: &tokio::net::TcpStream) -> Option<(ClientFin, Watch)> {
    let poller = CURRENT.with(|c| c.borrow().clone())?;
    poller.watch(tcp.as_fd()).ok()
}

thread_local! {
    /// The poller of the worker running on this thread ([`Poller::install`]).
    static CURRENT: RefCell<Option<Arc<Poller>>> = const { RefCell::new(None) };
}

/// The FINs of one worker's connections: an epoll instance of the poller's own, and the signal
/// of each watched connection, by key.
#[derive(Debug)]
pub struct Poller {
    epoll: OwnedFd,
    watched: Mutex<Slab>,
}

/// The watched connections' signals. A key is the slot's index and its generation (a slot
/// emptied and taken again gets the next one).
#[derive(Debug, Default)]
struct Slab {
    slots: Vec<(u32, Option<Arc<Signal>>)>,
    free: Vec<u32>,
}

impl Slab {
    fn insert(&mut self, signal: Arc<Signal>) -> u64 {
        let i = self.free.pop().unwrap_or_else(|| {
            self.slots.push((0, None));
            (self.slots.len() - 1) as u32
        });
        let slot = &mut self.slots[i as usize];
        slot.1 = Some(signal);
        (slot.0 as u64) << 32 | i as u64
    }

    fn get(&self, key: u64) -> Option<Arc<Signal>> {
        let (generation, i) = parts(key);
        self.slots.get(i as usize).filter(|s| s.0 == generation).and_then(|s| s.1.clone())
    }

    fn remove(&mut self, key: u64) {
        let (generation, i) = parts(key);
        if let Some(slot) = self.slots.get_mut(i as usize).filter(|s| s.0 == generation && s.1.is_some()) {
            *slot = (generation.wrapping_add(1), None);
            self.free.push(i);
        }
    }
}

/// A key's generation and slot index ([`Slab::insert`] makes it).
fn parts(key: u64) -> (u32, u32) {
    ((key >> 32) as u32, key as u32)
}

/// The poller of this thread while it lives: [`Poller::install`].
pub struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().take());
    }
}

/// Most FINs taken from the poller's epoll at once: 64.
const BATCH: usize = 64;

impl Poller {
    /// Starts a poller on the current tokio runtime (its task runs until the runtime ends) and
    /// makes it this thread's, for [`watch`], until the returned value is dropped. Each worker
    /// thread calls it once, in its runtime.
    pub fn install() -> std::io::Result<Installed> {
        // SAFETY: epoll_create1 takes no pointer; a descriptor it returns is ours to own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let poller = Arc::new(Poller { epoll: unsafe { OwnedFd::from_raw_fd(fd) }, watched: Mutex::default() });
        // SAFETY: the epoll descriptor stays open, the same one, as long as `Shared` (owned by
        // the AsyncFd) holds its poller.
        let ready = unsafe { AsyncFd::register_with_interest(Shared(poller.clone()), tokio::io::Interest::READABLE)? };
        tokio::spawn(run(ready));
        CURRENT.with(|c| *c.borrow_mut() = Some(poller));
        Ok(Installed(()))
    }

    /// Watches the socket of `fd` for its peer's FIN.
    fn watch(self: &Arc<Self>, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<(ClientFin, Watch)> {
        let second = fd.try_clone_to_owned()?; // close-on-exec
        let fin = ClientFin::default();
        let key = self.lock().insert(fin.0.clone());
        let mut event = libc::epoll_event { events: (libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32, u64: key };
        // SAFETY: both descriptors are open, and `event` outlives the call.
        let rc =
            unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, second.as_raw_fd(), &mut event) };
        if rc < 0 {
            self.lock().remove(key);
            return Err(std::io::Error::last_os_error());
        }
        Ok((fin, Watch { poller: self.clone(), key, second }))
    }

    /// Fires the signals of `events`' keys.
    fn fire(&self, events: &[libc::epoll_event]) {
        for e in events {
            let signal = self.lock().get(e.u64);
            if let Some(s) = signal {
                s.fire();
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slab> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn watching(&self) -> usize {
        self.lock().slots.iter().filter(|s| s.1.is_some()).count()
    }
}

/// The poller as tokio's reactor sees it: its epoll's descriptor.
struct Shared(Arc<Poller>);

impl AsRawFd for Shared {
    fn as_raw_fd(&self) -> RawFd {
        self.0.epoll.as_raw_fd()
    }
}

/// The poller's task: takes the FINs from its epoll whenever the reactor says it has some.
async fn run(ready: AsyncFd<Shared>) {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; BATCH];
    loop {
        let Ok(mut guard) = ready.readable().await else { return };
        // SAFETY: `events` holds BATCH entries; a timeout of 0 does not block.
        let n = unsafe { libc::epoll_wait(ready.as_raw_fd(), events.as_mut_ptr(), BATCH as i32, 0) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                guard.clear_ready();
            }
            continue;
        }
        let n = n as usize;
        if n < BATCH {
            // Drained: the reactor's next event says when there are more.
            guard.clear_ready();
        }
        ready.get_ref().0.fire(&events[..n]);
    }
}

/// A connection's watch on its worker's [`Poller`]: dropped with the connection, it leaves the
/// poller's epoll and closes its descriptor of the socket.
#[derive(Debug)]
pub struct Watch {
    poller: Arc<Poller>,
    key: u64,
    second: OwnedFd,
}

impl Drop for Watch {
    fn drop(&mut self) {
        // SAFETY: both descriptors are open; EPOLL_CTL_DEL ignores the event (not null for old
        // kernels). `second` closes after this, so its registration cannot outlive it.
        let mut unused = libc::epoll_event { events: 0, u64: 0 };
        unsafe {
            libc::epoll_ctl(self.poller.epoll.as_raw_fd(), libc::EPOLL_CTL_DEL, self.second.as_raw_fd(), &mut unused)
        };
        self.poller.lock().remove(self.key);
    }
}

/// The answer body of a read: [`ClientFin::cut`].
struct Cut {
    fin: Wait<Arc<Signal>>,
    body: GBody,
}

impl Body for Cut {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if Pin::new(&mut self.fin).poll(cx).is_ready() {
            return Poll::Ready(Some(Err("the client closed its side of the connection during a read".into())));
        }
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    struct Conn {
        client: Option<std::net::TcpStream>,
        server: tokio::net::TcpStream,
        fin: ClientFin,
        watch: Option<Watch>,
    }

    /// `n` loopback connections: the client's std socket and the server's tokio one, watched.
    async fn watched(n: usize) -> Vec<Conn> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut out = Vec::new();
        for _ in 0..n {
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().await.unwrap();
            let (fin, w) = watch(&server).expect("a poller is installed");
            out.push(Conn { client: Some(client), server, fin, watch: Some(w) });
        }
        out
    }

    async fn fired(fin: &ClientFin) -> bool {
        tokio::time::timeout(Duration::from_secs(5), fin.came()).await.is_ok()
    }

    /// Closes `s` with a reset: SO_LINGER 0, then close.
    fn reset(s: std::net::TcpStream) {
        s.set_nonblocking(true).unwrap();
        tokio::net::TcpStream::from_std(s).unwrap().set_zero_linger().unwrap();
    }

    #[tokio::test]
    async fn a_fin_or_a_reset_fires_and_a_requests_bytes_do_not() {
        let _poller = Poller::install().unwrap();
        let mut conns = watched(40).await;
        // Requests on every connection, read by the server: no FIN fires.
        let mut buf = [0u8; 64];
        for _ in 0..20 {
            for c in conns.iter_mut() {
                c.client.as_mut().unwrap().write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
                let _ = c.server.read(&mut buf).await.unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(conns.iter().all(|c| !c.fin.0.is_fired()), "a request's bytes fired a FIN");
        // A half-close on every third, a reset on every seventh: those fire, the rest do not.
        let ends = |i: usize| i.is_multiple_of(3) || i.is_multiple_of(7);
        for (i, c) in conns.iter_mut().enumerate() {
            if i.is_multiple_of(3) {
                c.client.as_ref().unwrap().shutdown(std::net::Shutdown::Write).unwrap();
            } else if i.is_multiple_of(7) {
                reset(c.client.take().unwrap());
            }
        }
        for (i, c) in conns.iter().enumerate().filter(|(i, _)| ends(*i)) {
            assert!(fired(&c.fin).await, "connection {i}: its end was not seen");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        for (i, c) in conns.iter().enumerate() {
            assert_eq!(c.fin.0.is_fired(), ends(i), "connection {i}");
        }
    }

    #[tokio::test]
    async fn a_fin_that_came_before_the_watch_fires_at_once() {
        let _poller = Poller::install().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.write_all(b"SELECT 1").unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        let (server, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (fin, _w) = watch(&server).unwrap();
        assert!(fired(&fin).await);
    }

    #[tokio::test]
    async fn a_dropped_watch_leaves_the_poller_and_its_key_fires_nothing_again() {
        let _poller = Poller::install().unwrap();
        let poller = CURRENT.with(|c| c.borrow().clone()).unwrap();
        let mut conns = watched(3).await;
        assert_eq!(poller.watching(), 3);
        // The middle connection's watch goes; its sockets stay open.
        let old = conns[1].watch.take().unwrap();
        let old_key = old.key;
        drop(old);
        assert_eq!(poller.watching(), 2);
        // A FIN on it now fires nothing: its descriptor left the epoll.
        conns[1].client.as_ref().unwrap().shutdown(std::net::Shutdown::Write).unwrap();
        // The next watch takes its slot again, with the next generation.
        let mut new = watched(1).await.pop().unwrap();
        let key = new.watch.as_ref().unwrap().key;
        assert_eq!(key as u32, old_key as u32);
        assert_ne!(key, old_key);
        // An event of the old key (seen just as its watch went) fires nobody.
        poller.fire(&[libc::epoll_event { events: libc::EPOLLRDHUP as u32, u64: old_key }]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(conns.iter().chain([&new]).all(|c| !c.fin.0.is_fired()));
        // The others still fire on their own FINs.
        for c in [&conns[0], &conns[2], &new] {
            c.client.as_ref().unwrap().shutdown(std::net::Shutdown::Write).unwrap();
            assert!(fired(&c.fin).await);
        }
        assert!(!conns[1].fin.0.is_fired());
        new.watch.take();
        drop(conns);
        assert_eq!(poller.watching(), 0);
    }

    #[tokio::test]
    async fn without_a_poller_a_connection_is_not_watched() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().await.unwrap();
        assert!(watch(&server).is_none());
    }
}
