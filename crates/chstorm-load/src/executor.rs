//! Sends one request on whichever protocol the target speaks, keeping or replacing the
//! connection as the run's keep-alive mode and the errors require.

use crate::spec::{LoadSpec, Work};
use chstorm_proto::http::{HttpConn, RequestHead};
use chstorm_proto::native::NativeConn;
use chstorm_proto::stream::Connector;
use chstorm_proto::{ProtoError, QueryStats, Target};
use std::sync::Arc;
use std::time::Duration;

enum Conn {
    Http(HttpConn),
    Native(NativeConn),
}

/// One connection's sender.
pub(crate) struct Executor {
    connector: Connector,
    target: Arc<Target>,
    head: Option<Arc<RequestHead>>,
    ping: bool,
    keepalive: bool,
    timeout: Duration,
    conn: Option<Conn>,
}

impl Executor {
    pub fn new(spec: &LoadSpec, connector: Connector, target: Arc<Target>, head: Option<Arc<RequestHead>>) -> Self {
        Executor {
            connector,
            target,
            head,
            ping: matches!(spec.work, Work::Ping),
            keepalive: spec.keepalive,
            timeout: spec.timeout,
            conn: None,
        }
    }

    /// The HTTP request head for this spec (None for the native protocol).
    pub fn http_head(spec: &LoadSpec, target: &Target) -> Option<RequestHead> {
        if !target.protocol.is_http() {
            return None;
        }
        Some(match spec.work {
            Work::Ping => RequestHead::ping(target, spec.keepalive),
            Work::Queries { .. } => RequestHead::query(target, &spec.settings, spec.keepalive),
        })
    }

    /// Opens the connection now, if there is none (used before the clock starts).
    pub async fn preconnect(&mut self) -> Result<(), ProtoError> {
        if self.conn.is_none() && self.keepalive {
            self.conn = Some(self.connect().await?);
        }
        Ok(())
    }

    async fn connect(&self) -> Result<Conn, ProtoError> {
        if self.head.is_some() {
            Ok(Conn::Http(HttpConn::connect(&self.connector).await?))
        } else {
            Ok(Conn::Native(NativeConn::connect(&self.connector, &self.target, self.timeout).await?))
        }
    }

    /// Sends `query` (ignored for ping) and reads the whole answer.
    pub async fn exec(&mut self, query: &[u8]) -> Result<QueryStats, ProtoError> {
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => self.connect().await?,
        };
        let (res, reusable) = match &mut conn {
            Conn::Http(c) => {
                let head = self.head.as_deref().expect("HTTP executor has a request head");
                let r = c.send(head, query, self.timeout).await;
                (r, c.reusable())
            }
            Conn::Native(c) => {
                let r = if self.ping {
                    c.ping(self.timeout).await.map(|_| QueryStats::default())
                } else {
                    match std::str::from_utf8(query) {
                        Ok(sql) => c.query("", sql, self.timeout).await,
                        Err(_) => Err(ProtoError::Protocol("rendered query is not UTF-8".into())),
                    }
                };
                let broken = matches!(&r, Err(e) if e.breaks_connection());
                (r, !broken)
            }
        };
        if self.keepalive && reusable {
            self.conn = Some(conn);
        }
        res
    }
}
