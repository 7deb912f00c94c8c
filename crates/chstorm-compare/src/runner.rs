//! Sends queries to the two sides and times them.
//!
//! Every run gets its own connection, opened before the clock starts, so a run measures the
//! query and not a TCP or TLS handshake, and no side is tied to one server handler thread (two
//! long-lived connections to one server measured a systematic difference of up to 40% on this
//! 2-core machine, which made A/A comparisons cry wolf). Every run gets a fresh query_id,
//! `chstorm-cmp-<run id>-<n>`, to find it in `system.query_log` later: on HTTP it goes as the
//! `query_id` URL parameter, on the native protocol in the Query packet. The URL's settings apply
//! to every query (HTTP: URL parameters; native: a `SETTINGS` clause).
//!
//! Client time is the wall time from writing the query to reading the end of the answer (the
//! result is read and discarded).
//! Every wait is bounded by the timeout (`--timeout`, default 60 s). A run that times out is
//! cancelled on the server before the next run starts (native: the Cancel packet; HTTP:
//! `KILL QUERY` by its query_id), so a leftover does not slow the runs measured after it.

use crate::schedule::{Attempt, Executor, Run, Side};
use crate::CompareError;
use chstorm_load::{Renderer, Template};
use chstorm_proto::cancel::{kill_over_http, CANCEL_TIMEOUT};
use chstorm_proto::http::{HttpConn, RequestHead};
use chstorm_proto::native::{append_settings_clause, NativeConn};
use chstorm_proto::stream::Connector;
use chstorm_proto::{ProtoError, Target, TlsOptions};
use futures_util::future::join_all;
use rand::SeedableRng;
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Default per-query timeout: 60 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// One per side, so the size difference of the variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Conn {
    Http(HttpConn),
    Native(NativeConn),
}

impl Conn {
    fn usable(&self) -> bool {
        match self {
            Conn::Http(c) => c.reusable(),
            Conn::Native(c) => c.is_usable(),
        }
    }
}

/// One side: its target, its connection and its server's version.
struct SideConn {
    target: Target,
    connector: Connector,
    conn: Option<Conn>,
    /// Settings added to every measured query after the URL's own.
    extra: Vec<(String, String)>,
    version: String,
}

/// Both sides, and the query_id sequence.
pub struct Runner {
    rt: tokio::runtime::Runtime,
    sides: [SideConn; 2],
    run_id: String,
    next_id: u64,
    timeout: Duration,
}

impl Runner {
    /// Connects to both sides and asks each for its version, which also checks that the URL's
    /// settings are accepted. Errors say which side failed.
    pub fn open(
        left: &Target,
        right: &Target,
        tls: &TlsOptions,
        timeout: Duration,
        run_id: &str,
    ) -> Result<Runner, CompareError> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(CompareError::Runtime)?;
        let open = |side: Side, target: &Target| -> Result<SideConn, CompareError> {
            let server = |source: ProtoError| CompareError::Server { side, target: target.to_string(), source };
            let connector = Connector::new(target, tls, timeout).map_err(server)?;
            let mut s =
                SideConn { target: target.clone(), connector, conn: None, extra: Vec::new(), version: String::new() };
            s.version = rt.block_on(s.version(timeout)).map_err(server)?;
            Ok(s)
        };
        let sides = [open(Side::Left, left)?, open(Side::Right, right)?];
        Ok(Runner { rt, sides, run_id: run_id.to_string(), next_id: 0, timeout })
    }

    /// The server version a side reported, e.g. `18.16.1`.
    pub fn version(&self, side: Side) -> &str {
        &self.sides[side as usize].version
    }

    /// Adds a setting to every later query of a side (after the URL's settings).
    pub fn add_setting(&mut self, side: Side, name: &str, value: &str) {
        self.sides[side as usize].extra.push((name.to_string(), value.to_string()));
    }

    /// The next query_id: `chstorm-cmp-<run id>-<n>`.
    pub fn next_query_id(&mut self) -> String {
        self.next_id += 1;
        format!("chstorm-cmp-{}-{}", self.run_id, self.next_id)
    }

    /// Runs `sql` on `side` with `query_id`; returns the client time in seconds.
    pub fn run(&mut self, side: Side, query_id: &str, sql: &str) -> Result<f64, ProtoError> {
        let timeout = self.timeout;
        let s = &mut self.sides[side as usize];
        self.rt.block_on(s.run(query_id, sql, timeout))
    }

    /// Runs a window on `side`: `clients` connections (opened before the clock starts) each send
    /// the queries `next` gives, one after another, until `length` has passed or `next` has no
    /// more; the window ends when the last answer is read. Returns how many queries were
    /// answered and the wall time, seconds. The first error ends the window.
    pub fn window(
        &mut self,
        side: Side,
        clients: usize,
        length: Duration,
        next: &mut dyn FnMut() -> Option<(String, String)>,
    ) -> Result<(usize, f64), ProtoError> {
        let timeout = self.timeout;
        let s = &self.sides[side as usize];
        self.rt.block_on(s.window(clients, length, next, timeout))
    }

    /// Runs `clients` copies of `SELECT sleep(hold_s)` on `side` at once, on connections opened
    /// first, and returns how many ran at once: those answered within 1.9 `hold_s` of the start.
    /// A server running as many queries as it allows (its `max_concurrent_queries`, or a user's
    /// `max_concurrent_queries_for_user`) queues the rest for up to `queue_max_wait_ms` (5 s by
    /// default), so they end at 2 `hold_s` or later, or refuses them (code 202). This asks the
    /// server itself: 18.16 has no table that shows its config.
    pub fn probe_concurrency(&mut self, side: Side, clients: usize, hold_s: f64) -> Result<usize, ProtoError> {
        let sql = format!("SELECT sleep({hold_s})");
        let ids: Vec<String> = (0..clients).map(|_| self.next_query_id()).collect();
        let (timeout, s) = (self.timeout, &self.sides[side as usize]);
        self.rt.block_on(async {
            let conns = join_all((0..clients).map(|_| s.connect(timeout))).await;
            let conns = conns.into_iter().collect::<Result<Vec<Conn>, ProtoError>>()?;
            let start = Instant::now();
            let done = join_all(conns.into_iter().zip(&ids).map(|(mut c, id)| {
                let sql = &sql;
                async move {
                    let r = s.send(&mut c, id, sql, timeout).await;
                    drop(s.settle(c, &r, id, timeout).await);
                    r.map(|_| start.elapsed().as_secs_f64())
                }
            }))
            .await;
            let mut at_once = 0;
            for d in done {
                at_once += usize::from(d? < 1.9 * hold_s);
            }
            Ok(at_once)
        })
    }
}

impl SideConn {
    async fn connect(&self, timeout: Duration) -> Result<Conn, ProtoError> {
        Ok(if self.target.protocol.is_http() {
            Conn::Http(HttpConn::connect(&self.connector).await?)
        } else {
            Conn::Native(NativeConn::connect(&self.connector, &self.target, timeout).await?)
        })
    }

    async fn version(&mut self, timeout: Duration) -> Result<String, ProtoError> {
        let conn = self.connect(timeout).await?;
        let sql = "SELECT version()";
        let text = match conn {
            Conn::Http(mut c) => {
                let head = RequestHead::query(&self.target, &[], true);
                let v = c.send_text(&head, sql.as_bytes(), timeout, 256).await?;
                self.conn = Some(Conn::Http(c));
                v
            }
            Conn::Native(mut c) => {
                let sql = append_settings_clause(sql, &self.target.settings);
                let rows = c.query_rows("", &sql, timeout).await?;
                self.conn = Some(Conn::Native(c));
                rows.into_iter().next().and_then(|r| r.into_iter().next()).unwrap_or_default()
            }
        };
        Ok(text.trim().to_string())
    }

    async fn run(&mut self, query_id: &str, sql: &str, timeout: Duration) -> Result<f64, ProtoError> {
        let reused = self.conn.as_ref().is_some_and(Conn::usable);
        match self.run_once(query_id, sql, timeout).await {
            // A reused connection the server had closed: the query never reached it.
            Err(ProtoError::Io(_)) if reused => {
                self.conn = None;
                self.run_once(query_id, sql, timeout).await
            }
            r => r,
        }
    }

    async fn run_once(&mut self, query_id: &str, sql: &str, timeout: Duration) -> Result<f64, ProtoError> {
        let mut conn = match self.conn.take() {
            Some(c) if c.usable() => c,
            _ => self.connect(timeout).await?,
        };
        let start = Instant::now();
        let result = self.send(&mut conn, query_id, sql, timeout).await;
        let elapsed = start.elapsed().as_secs_f64();
        // Every run gets a fresh connection (opened before the clock starts): a server serves a
        // connection from one handler thread, and on a small machine two long-lived connections
        // can settle on different CPUs and differ systematically, which broke A/A comparisons of
        // a server with itself. A new connection per run makes the sides exchangeable.
        drop(self.settle(conn, &result, query_id, timeout).await);
        self.conn = None;
        result.map(|_| elapsed)
    }

    /// Sends one query on `conn` and reads its answer to the end.
    async fn send(&self, conn: &mut Conn, query_id: &str, sql: &str, timeout: Duration) -> Result<(), ProtoError> {
        match conn {
            Conn::Http(c) => {
                let head = RequestHead::query(&self.target, &self.extra, true);
                c.send_with_id(&head, query_id, sql.as_bytes(), timeout).await.map(|_| ())
            }
            Conn::Native(c) => {
                let settings: Vec<(String, String)> = self.target.settings.iter().chain(&self.extra).cloned().collect();
                let sql = append_settings_clause(sql, &settings);
                c.query(query_id, &sql, timeout).await.map(|_| ())
            }
        }
    }

    /// After a query on `conn`: a run given up on (timed out, or a native query still in flight)
    /// is cancelled on the server, so it does not keep the server busy while the next runs are
    /// measured; gives the connection back when it can carry another query.
    async fn settle(
        &self,
        conn: Conn,
        result: &Result<(), ProtoError>,
        query_id: &str,
        timeout: Duration,
    ) -> Option<Conn> {
        let gave_up = match (result, &conn) {
            (Err(ProtoError::Timeout(..)), _) => true,
            (Err(_), Conn::Native(c)) => c.query_in_flight(),
            _ => false,
        };
        if !gave_up {
            return conn.usable().then_some(conn);
        }
        let bound = CANCEL_TIMEOUT.min(timeout);
        match conn {
            Conn::Native(c) => {
                let _ = c.cancel(bound).await;
            }
            Conn::Http(c) => {
                drop(c);
                let _ = kill_over_http(&self.connector, &self.target, query_id, bound).await;
            }
        }
        None
    }

    /// See [`Runner::window`].
    async fn window(
        &self,
        clients: usize,
        length: Duration,
        next: &mut dyn FnMut() -> Option<(String, String)>,
        timeout: Duration,
    ) -> Result<(usize, f64), ProtoError> {
        let conns = join_all((0..clients.max(1)).map(|_| self.connect(timeout))).await;
        let conns = conns.into_iter().collect::<Result<Vec<Conn>, ProtoError>>()?;
        let next = RefCell::new(next);
        let start = Instant::now();
        let deadline = start + length;
        let client = |conn: Conn| {
            let next = &next;
            async move {
                let mut conn = Some(conn);
                let mut answered = 0usize;
                loop {
                    let Some((id, sql)) = (next.borrow_mut())() else { break };
                    let mut c = match conn.take() {
                        Some(c) => c,
                        None => self.connect(timeout).await?,
                    };
                    let result = self.send(&mut c, &id, &sql, timeout).await;
                    conn = self.settle(c, &result, &id, timeout).await;
                    result?;
                    answered += 1;
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                Ok::<usize, ProtoError>(answered)
            }
        };
        let results = join_all(conns.into_iter().map(client)).await;
        let elapsed = start.elapsed().as_secs_f64();
        let mut answered = 0;
        for r in results {
            answered += r?;
        }
        Ok((answered, elapsed))
    }
}

/// The query texts of one query's attempts: rendered from the template in order, once each, so
/// text n is the same whichever side asks for it first (even for `seq()` placeholders, whose
/// counter lives in the template). Texts before [`Texts::forget_before`] are dropped, which bounds
/// what a long run of windows keeps.
pub struct Texts<'a> {
    template: &'a Template,
    renderer: Renderer,
    /// Texts `first..`.
    texts: std::collections::VecDeque<String>,
    first: usize,
    buf: Vec<u8>,
}

impl<'a> Texts<'a> {
    /// `seed` seeds the placeholders of this query.
    pub fn new(template: &'a Template, seed: u64) -> Texts<'a> {
        let renderer = Renderer::new(rand::rngs::SmallRng::seed_from_u64(seed));
        Texts { template, renderer, texts: Default::default(), first: 0, buf: Vec::new() }
    }

    /// The text of attempt index `i` (0 = warm-up), rendered on first use; `i` must not be
    /// before what was forgotten.
    pub fn get(&mut self, i: usize) -> &str {
        debug_assert!(i >= self.first, "text {i} was forgotten (first kept: {})", self.first);
        while self.first + self.texts.len() <= i {
            self.template.render(&mut self.renderer, &mut self.buf);
            self.texts.push_back(String::from_utf8_lossy(&self.buf).into_owned());
        }
        &self.texts[i - self.first]
    }

    /// How many texts were rendered so far.
    pub fn rendered(&self) -> usize {
        self.first + self.texts.len()
    }

    /// Drops the texts before `i`.
    pub fn forget_before(&mut self, i: usize) {
        while self.first < i && !self.texts.is_empty() {
            self.texts.pop_front();
            self.first += 1;
        }
    }
}

/// Most queries one window may send: bounds the texts a window keeps.
pub const MAX_WINDOW_QUERIES: usize = 100_000;

/// Concurrent clients per side in a window: `N` clients for `length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    pub clients: usize,
    pub length: Duration,
}

/// Runs the attempts of one query on the two sides: attempt n of either side sends text n; or,
/// with [`Windows`], measured run n of either side is a window whose queries take the texts from
/// the same starting text on both sides.
pub struct QueryExec<'a> {
    runner: &'a mut Runner,
    texts: Texts<'a>,
    windows: Option<Windows>,
    /// The measured run whose windows are being run, and its first text.
    pair: Option<(usize, usize)>,
}

impl<'a> QueryExec<'a> {
    /// `seed` seeds the placeholders of this query.
    pub fn new(runner: &'a mut Runner, template: &'a Template, seed: u64, windows: Option<Windows>) -> QueryExec<'a> {
        QueryExec { runner, texts: Texts::new(template, seed), windows, pair: None }
    }

    fn window(&mut self, side: Side, n: usize, w: Windows) -> Result<Run, String> {
        // Both windows of run n start at the same text: the first not used by any earlier window.
        let base = match self.pair {
            Some((p, base)) if p == n => base,
            _ => {
                let base = self.texts.rendered();
                self.texts.forget_before(base);
                self.pair = Some((n, base));
                base
            }
        };
        let (runner, texts) = (&mut *self.runner, &mut self.texts);
        let mut sent = 0usize;
        let mut ids = 0usize;
        let steal = HostCpu::read();
        let mut next_id = {
            let run_id = runner.run_id.clone();
            let start = runner.next_id;
            move || {
                ids += 1;
                format!("chstorm-cmp-{run_id}-{}", start + ids as u64)
            }
        };
        let mut next = || {
            if sent >= MAX_WINDOW_QUERIES {
                return None;
            }
            let sql = texts.get(base + sent).to_string();
            sent += 1;
            Some((next_id(), sql))
        };
        let result = runner.window(side, w.clients, w.length, &mut next);
        runner.next_id += sent as u64;
        let (answered, wall_s) = result.map_err(|e| e.to_string())?;
        if answered == 0 {
            return Err("the window answered no query".into());
        }
        Ok(Run {
            query_ids: Vec::new(),
            time_s: wall_s / answered as f64,
            wall_s,
            steal: steal.and_then(HostCpu::steal_since),
        })
    }
}

impl Executor for QueryExec<'_> {
    fn execute(&mut self, side: Side, attempt: Attempt) -> Result<Run, String> {
        if let (Some(w), Attempt::Measured(n)) = (self.windows, attempt) {
            return self.window(side, n, w);
        }
        let query_id = self.runner.next_query_id();
        let sql = self.texts.get(attempt.text_index()).to_string();
        let before = HostCpu::read();
        let time_s = self.runner.run(side, &query_id, &sql).map_err(|e| e.to_string())?;
        let mut run = Run::single(query_id, time_s);
        run.steal = before.and_then(HostCpu::steal_since);
        Ok(run)
    }
}

/// This host's CPU time, from the first line of `/proc/stat` (USER_HZ ticks): all of it, and
/// what the hypervisor stole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCpu {
    pub total: u64,
    pub steal: u64,
}

impl HostCpu {
    /// Now; None where `/proc/stat` cannot be read (not Linux).
    pub fn read() -> Option<HostCpu> {
        HostCpu::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The `cpu` line: user nice system idle iowait irq softirq steal (guest time is already
    /// in user).
    pub fn parse(stat: &str) -> Option<HostCpu> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let f: Vec<u64> = line.split_whitespace().skip(1).take(8).map(|x| x.parse().ok()).collect::<Option<_>>()?;
        (f.len() == 8).then(|| HostCpu { total: f.iter().sum(), steal: f[7] })
    }

    /// The share of the CPU time since `self` that was stolen; None when no tick passed.
    pub fn steal_since(self) -> Option<f64> {
        let now = HostCpu::read()?;
        let total = now.total.checked_sub(self.total)?;
        (total > 0).then(|| now.steal.saturating_sub(self.steal) as f64 / total as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_text_is_rendered_once_whoever_asks_first() {
        let t = Template::parse("SELECT {k:uniform(1,1000000)}, {s:seq(10)}", std::path::Path::new(".")).unwrap();
        let mut a = Texts::new(&t, 7);
        let (t3, t1) = (a.get(3).to_string(), a.get(1).to_string());
        assert_eq!(a.get(3), t3, "asked again: the same text");
        assert_eq!(a.get(1), t1);
        assert!(t1.ends_with(", 11") && t3.ends_with(", 13"), "{t1} / {t3}");
        let all: std::collections::BTreeSet<String> = (0..20).map(|i| a.get(i).to_string()).collect();
        assert_eq!(all.len(), 20, "a fresh value per run");
        // The same seed gives the same texts.
        let t2 = Template::parse("SELECT {k:uniform(1,1000000)}", std::path::Path::new(".")).unwrap();
        let (mut x, mut y) = (Texts::new(&t2, 3), Texts::new(&t2, 3));
        assert_eq!(x.get(5).to_string(), y.get(5));
        // Texts before a window's first are dropped; the later ones stay as they were.
        let t8 = x.get(8).to_string();
        x.forget_before(7);
        assert_eq!(x.rendered(), 9);
        assert_eq!(x.get(8), t8);
        assert_eq!(x.texts.len(), 2, "texts 7 and 8 kept");
    }

    #[test]
    fn host_cpu_reads_the_cpu_line() {
        let stat = "cpu  100 5 50 800 10 1 2 30 0 0\ncpu0 50 2 25 400 5 0 1 15 0 0\n";
        assert_eq!(HostCpu::parse(stat), Some(HostCpu { total: 998, steal: 30 }));
        assert_eq!(HostCpu::parse("intr 1 2 3"), None);
        if let Some(now) = HostCpu::read() {
            assert!(now.total > 0 && now.steal <= now.total);
        }
    }
}
