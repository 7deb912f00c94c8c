//! A small blocking SQL client over the HTTP interface, for loading data and reading results.

use chstorm_proto::http::{HttpConn, RequestHead};
use chstorm_proto::stream::{Connector, TlsOptions};
use chstorm_proto::{ProtoError, Target};
use std::time::Duration;

/// Runs statements one at a time on one keep-alive connection (reconnecting when needed).
pub struct SqlClient {
    rt: tokio::runtime::Runtime,
    connector: Connector,
    head: RequestHead,
    conn: Option<HttpConn>,
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
        Ok(SqlClient { rt, connector, head, conn: None, timeout: Duration::from_secs(600), target })
    }

    /// The target, for messages (no password).
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Runs `sql` and returns the answer's text (at most 16 MiB kept).
    pub fn query(&mut self, sql: &str) -> Result<String, ProtoError> {
        let mut conn = match self.conn.take() {
            Some(c) if c.reusable() => c,
            _ => self.rt.block_on(HttpConn::connect(&self.connector))?,
        };
        let res = self.rt.block_on(conn.send_text(&self.head, sql.as_bytes(), self.timeout, 16 << 20));
        if conn.reusable() {
            self.conn = Some(conn);
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
