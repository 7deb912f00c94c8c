//! A small blocking SQL client over the HTTP interface, for loading data and reading results.

use chstorm_proto::http::{HttpConn, RequestHead};
use chstorm_proto::stream::{Connector, TlsOptions};
use chstorm_proto::{ProtoError, Target};
use std::time::{Duration, Instant};

/// A kept-alive connection idle for longer than this is not reused: ClickHouse closes idle
/// connections after its `keep_alive_timeout` (3 s in 18.16's default config), and a request sent
/// on a connection the server is closing fails with "connection closed before the HTTP answer".
const MAX_IDLE_REUSE: Duration = Duration::from_millis(2000);

/// Runs statements one at a time on one keep-alive connection (reconnecting when needed).
pub struct SqlClient {
    rt: tokio::runtime::Runtime,
    connector: Connector,
    head: RequestHead,
    conn: Option<HttpConn>,
    /// When `conn` finished its last answer.
    idle_since: Instant,
    /// Per-statement timeout. Default 10 minutes (big INSERT ... SELECTs).
    pub timeout: Duration,
    target: Target,
}

impl SqlClient {
    /// `url` must be `http://` or `https://`.
    pub fn new(url: &str, tls: &TlsOptions) -> Result<SqlClient, ProtoError> {
        let target = Target::parse(url)?.with_env_credentials();
        if !target.protocol.is_http() {
            return Err(ProtoError::InvalidTarget(format!(
                "'{target}' is not an HTTP URL; loading data needs the HTTP interface (http:// or https://)"
            )));
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(ProtoError::Io)?;
        let connector = Connector::new(&target, tls, Duration::from_secs(10))?;
        let head = RequestHead::query(&target, &[], true);
        Ok(SqlClient {
            rt,
            connector,
            head,
            conn: None,
            idle_since: Instant::now(),
            timeout: Duration::from_secs(600),
            target,
        })
    }

    /// The target, for messages (no password).
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Runs `sql` and returns the answer's text (at most 16 MiB kept).
    pub fn query(&mut self, sql: &str) -> Result<String, ProtoError> {
        let mut conn = match self.conn.take() {
            Some(c) if c.reusable() && self.idle_since.elapsed() < MAX_IDLE_REUSE => c,
            _ => self.rt.block_on(HttpConn::connect(&self.connector))?,
        };
        let res = self.rt.block_on(conn.send_text(&self.head, sql.as_bytes(), self.timeout, 16 << 20));
        if conn.reusable() {
            self.conn = Some(conn);
            self.idle_since = Instant::now();
        }
        res
    }

    /// Runs `sql` and parses a single number.
    pub fn query_u64(&mut self, sql: &str) -> Result<u64, ProtoError> {
        let text = self.query(sql)?;
        text.trim()
            .parse()
            .map_err(|_| ProtoError::Protocol(format!("expected a number from '{sql}', got '{}'", text.trim())))
    }
}
