//! Sends one request on whichever protocol the target speaks, keeping or replacing the
//! connection as the run's keep-alive mode and the errors require.
//!
//! Every query carries a query_id, `chstorm-<run id>-<connection>-<n>` (or the user's own,
//! given as the `query_id` setting), and a query chstorm gives up on is cancelled on the server:
//! after a timeout, and when the run ends or is interrupted while it is in flight
//! ([`Executor::abandon`]). See `chstorm_proto::cancel`.

use crate::spec::{LoadSpec, Work};
use chstorm_proto::cancel::{kill_over_http, CANCEL_TIMEOUT};
use chstorm_proto::http::{HttpConn, RequestHead};
use chstorm_proto::native::NativeConn;
use chstorm_proto::stream::Connector;
use chstorm_proto::{ProtoError, QueryStats, Target};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// One per load connection, held for the run: the size difference of the variants is no cost.
#[allow(clippy::large_enum_variant)]
enum Conn {
    Http(HttpConn),
    Native(NativeConn),
}

/// How this connection names its queries.
#[derive(Debug, Clone)]
pub(crate) enum QueryIds {
    /// `chstorm-<run id>-<connection>-<n>`, n counting from 1.
    Numbered { prefix: String },
    /// The user's own query_id, the same for every query.
    Fixed(String),
}

impl QueryIds {
    pub fn new(run_id: &str, connection: usize, fixed: Option<&str>) -> QueryIds {
        match fixed {
            Some(id) => QueryIds::Fixed(id.to_string()),
            None => QueryIds::Numbered { prefix: format!("chstorm-{run_id}-{connection}-") },
        }
    }
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
    ids: QueryIds,
    sent: u64,
    /// The current query's id (reused buffer).
    query_id: String,
    /// Set while a query is in flight; still set when its call was abandoned midway.
    in_flight: bool,
    /// Queries chstorm gave up on and tried to cancel on the server, and how many of those
    /// cancellations could not be sent (HTTP: the KILL QUERY failed or timed out; native: the
    /// Cancel packet could not be written).
    pub cancelled: u64,
    pub cancel_failures: u64,
}

impl Executor {
    pub fn new(
        spec: &LoadSpec,
        connector: Connector,
        target: Arc<Target>,
        head: Option<Arc<RequestHead>>,
        ids: QueryIds,
    ) -> Self {
        Executor {
            connector,
            target,
            head,
            ping: matches!(spec.work, Work::Ping),
            keepalive: spec.keepalive,
            timeout: spec.timeout,
            conn: None,
            ids,
            sent: 0,
            query_id: String::with_capacity(48),
            in_flight: false,
            cancelled: 0,
            cancel_failures: 0,
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

    fn next_query_id(&mut self) {
        self.sent += 1;
        self.query_id.clear();
        match &self.ids {
            QueryIds::Numbered { prefix } => {
                let _ = write!(self.query_id, "{prefix}{}", self.sent);
            }
            QueryIds::Fixed(id) => self.query_id.push_str(id),
        }
    }

    /// Sends `query` (ignored for ping) and reads the whole answer. A query that times out is
    /// cancelled on the server before this returns (see [`Executor::abandon`]).
    pub async fn exec(&mut self, query: &[u8]) -> Result<QueryStats, ProtoError> {
        if self.conn.is_none() {
            self.conn = Some(self.connect().await?);
        }
        if !self.ping {
            self.next_query_id();
            self.in_flight = true;
        }
        let Some(conn) = self.conn.as_mut() else { unreachable!("connected above") };
        let (res, reusable) = match conn {
            Conn::Http(c) => {
                let head = self.head.as_deref().expect("HTTP executor has a request head");
                let r = if self.ping {
                    c.send(head, query, self.timeout).await
                } else {
                    c.send_with_id(head, &self.query_id, query, self.timeout).await
                };
                (r, c.reusable())
            }
            Conn::Native(c) => {
                let r = if self.ping {
                    c.ping(self.timeout).await.map(|_| QueryStats::default())
                } else {
                    match std::str::from_utf8(query) {
                        Ok(sql) => c.query(&self.query_id, sql, self.timeout).await,
                        Err(_) => Err(ProtoError::Protocol("rendered query is not UTF-8".into())),
                    }
                };
                let broken = matches!(&r, Err(e) if e.breaks_connection());
                (r, !broken)
            }
        };
        let gave_up = match (&res, &self.conn) {
            (Err(ProtoError::Timeout(..)), _) => true,
            (Err(_), Some(Conn::Native(c))) => c.query_in_flight(),
            _ => false,
        };
        if gave_up {
            self.abandon().await;
        } else {
            self.in_flight = false;
            if !(self.keepalive && reusable) {
                self.conn = None;
            }
        }
        res
    }

    /// Cancels on the server the query whose call was abandoned (a timeout, or the run ended
    /// while it was in flight), and drops the connection. Does nothing when no query is in
    /// flight. Bounded by [`CANCEL_TIMEOUT`] or the query timeout, whichever is shorter. If this call is itself abandoned midway, the query
    /// stays in flight and the next call tries again (over HTTP, another KILL QUERY).
    pub async fn abandon(&mut self) {
        if !self.in_flight {
            return;
        }
        // A server that cannot answer a KILL QUERY within the query timeout is not answering:
        // waiting longer would only stall this connection.
        let bound = CANCEL_TIMEOUT.min(self.timeout);
        let ok = match self.conn.take() {
            Some(Conn::Native(c)) => c.cancel(bound).await.sent(),
            Some(Conn::Http(c)) => {
                drop(c);
                kill_over_http(&self.connector, &self.target, &self.query_id, bound).await.is_ok()
            }
            // A retry: the connection went with the interrupted attempt.
            None if self.head.is_some() => {
                kill_over_http(&self.connector, &self.target, &self.query_id, bound).await.is_ok()
            }
            // Native: the interrupted attempt wrote the Cancel packet or closed the connection.
            None => true,
        };
        self.in_flight = false;
        self.cancelled += 1;
        if !ok {
            self.cancel_failures += 1;
        }
    }
}
