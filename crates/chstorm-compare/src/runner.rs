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
use rand::SeedableRng;
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
        let conn = match self.conn.take() {
            Some(c) if c.usable() => c,
            _ => self.connect(timeout).await?,
        };
        let mut conn = conn;
        let start = Instant::now();
        let result = match &mut conn {
            Conn::Http(c) => {
                let head = RequestHead::query(&self.target, &self.extra, true);
                c.send_with_id(&head, query_id, sql.as_bytes(), timeout).await.map(|_| ())
            }
            Conn::Native(c) => {
                let settings: Vec<(String, String)> = self.target.settings.iter().chain(&self.extra).cloned().collect();
                let sql = append_settings_clause(sql, &settings);
                c.query(query_id, &sql, timeout).await.map(|_| ())
            }
        };
        let elapsed = start.elapsed().as_secs_f64();
        // A run given up on must not keep the server busy while the next runs are measured.
        let gave_up = match (&result, &conn) {
            (Err(ProtoError::Timeout(..)), _) => true,
            (Err(_), Conn::Native(c)) => c.query_in_flight(),
            _ => false,
        };
        if gave_up {
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
            self.conn = None;
            return result.map(|_| elapsed);
        }
        // Every run gets a fresh connection (opened before the clock starts): a server serves a
        // connection from one handler thread, and on a small machine two long-lived connections
        // can settle on different CPUs and differ systematically, which broke A/A comparisons of
        // a server with itself. A new connection per run makes the sides exchangeable.
        drop(conn);
        self.conn = None;
        result.map(|_| elapsed)
    }
}

/// The query texts of one query's attempts: rendered from the template in order, once each, so
/// text n is the same whichever side asks for it first (even for `seq()` placeholders, whose
/// counter lives in the template).
pub struct Texts<'a> {
    template: &'a Template,
    renderer: Renderer,
    texts: Vec<String>,
    buf: Vec<u8>,
}

impl<'a> Texts<'a> {
    /// `seed` seeds the placeholders of this query.
    pub fn new(template: &'a Template, seed: u64) -> Texts<'a> {
        let renderer = Renderer::new(rand::rngs::SmallRng::seed_from_u64(seed));
        Texts { template, renderer, texts: Vec::new(), buf: Vec::new() }
    }

    /// The text of attempt index `i` (0 = warm-up), rendered on first use.
    pub fn get(&mut self, i: usize) -> &str {
        while self.texts.len() <= i {
            self.template.render(&mut self.renderer, &mut self.buf);
            self.texts.push(String::from_utf8_lossy(&self.buf).into_owned());
        }
        &self.texts[i]
    }
}

/// Runs the attempts of one query on the two sides: attempt n of either side sends text n.
pub struct QueryExec<'a> {
    runner: &'a mut Runner,
    texts: Texts<'a>,
}

impl<'a> QueryExec<'a> {
    /// `seed` seeds the placeholders of this query.
    pub fn new(runner: &'a mut Runner, template: &'a Template, seed: u64) -> QueryExec<'a> {
        QueryExec { runner, texts: Texts::new(template, seed) }
    }
}

impl Executor for QueryExec<'_> {
    fn execute(&mut self, side: Side, attempt: Attempt) -> Result<Run, String> {
        let query_id = self.runner.next_query_id();
        let sql = self.texts.get(attempt.text_index()).to_string();
        let time_s = self.runner.run(side, &query_id, &sql).map_err(|e| e.to_string())?;
        Ok(Run { query_id, time_s })
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
    }
}
