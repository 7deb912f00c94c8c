//! A lean client for ClickHouse's native TCP protocol.
//!
//! # Why our own codec
//!
//! chstorm must spend less client CPU per query than `clickhouse-benchmark`. The native
//! protocol crates decode every row of every result block into Rust values, which is exactly
//! the work a load generator must not do. This client:
//!
//! * **discards result blocks without materialising rows**: it parses each column's type name
//!   once per block and skips the column's bytes (fixed-width columns in one jump, strings by
//!   their length prefixes), counting only rows and bytes;
//! * **writes each query with one `write` call**: the Query packet and the empty Data block
//!   that ends the client's data are encoded into one reused buffer;
//! * **does not allocate per query** on the hot path: the read buffer, write buffer, type-name
//!   scratch and skip plans are reused for the life of the connection;
//! * **negotiates the protocol revision**: it offers [`CLIENT_REVISION`] (54460, see
//!   [`crate::versions::NATIVE_REVISION`] for why that one) and speaks `min(server's, 54460)`:
//!   54412 with ClickHouse 18.16, 54460 with every current release, each in its own layout
//!   (the Hello addendum, `ClientInfo`'s fields, Progress's, the columns' serialization byte,
//!   ProfileEvents packets).
//!
//! # Errors before the server reads the client's data
//!
//! The server reads the client's (empty) data block only once it has parsed the query and
//! admitted it. When a query fails before that (syntax error, TOO_MANY_SIMULTANEOUS_QUERIES,
//! quota), current servers skip the unread block, but old ones such as 18.16 take it for the
//! next packet and the stream goes out of step. So after an exception that arrives as the first
//! answer to a query, the client sends a Ping: Pong means the stream is in step; anything else
//! means it is not, and the next call on this [`NativeConn`] transparently reconnects (counted
//! by [`NativeConn::reconnects`]) before it sends its query. The caller still gets the server's
//! exception for the failed query, and the connection stays usable as documented. The check
//! costs one round trip, only for queries that fail before returning anything.
//!
//! Settings are never sent in the binary Query packet (below revision 54429 each value is
//! typed per setting, from it a string); [`append_settings_clause`] adds a SQL `SETTINGS`
//! clause instead, which every revision carries alike.
//!
//! Modules: [`wire`] (primitives and the buffered reader), [`packets`] (packet layouts),
//! [`columns`] (type names and skipping column data), [`text`] (decoding small results to
//! text for [`NativeConn::query_rows`]), [`settings`] (the `SETTINGS` clause); [`server`] is the
//! server side (reading a client's packets, writing a server's, delimiting blocks to relay).

pub mod columns;
pub mod packets;
pub mod server;
pub mod settings;
pub mod text;
pub mod wire;

pub use settings::append_settings_clause;

use crate::error::ProtoError;
use crate::stream::{Connector, Stream};
use crate::target::Target;
use crate::QueryStats;
use columns::{skip_column, Plan};
use packets::rev;
use packets::server as code;
use std::time::Duration;
use text::TextType;
use wire::Io;

/// The protocol revision chstorm advertises. The connection speaks
/// `min(server revision, CLIENT_REVISION)`.
pub const CLIENT_REVISION: u64 = crate::versions::NATIVE_REVISION;

/// Most columns one block may have.
pub(crate) const MAX_COLUMNS: u64 = 1 << 20;
/// Most rows one block may have.
pub(crate) const MAX_ROWS: u64 = 1 << 40;

/// What the server said about itself in its Hello.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub name: String,
    pub version_major: u64,
    pub version_minor: u64,
    pub version_patch: u64,
    /// The server's own protocol revision (the connection uses at most [`CLIENT_REVISION`]).
    pub revision: u64,
    pub timezone: String,
    pub display_name: String,
}

impl ServerInfo {
    /// What a ClickHouse server of version `v` says in its Hello (time zone UTC, no display
    /// name; its revision `v`'s, else 18.16's): for tests and fakes.
    pub fn of_version(v: crate::versions::ServerVersion) -> ServerInfo {
        ServerInfo {
            name: "ClickHouse".into(),
            version_major: v.major,
            version_minor: v.minor,
            version_patch: v.patch,
            revision: v.revision.unwrap_or(54412),
            timezone: "UTC".into(),
            display_name: String::new(),
        }
    }

    /// `major.minor.patch`, e.g. `18.16.1`.
    pub fn version(&self) -> String {
        format!("{}.{}.{}", self.version_major, self.version_minor, self.version_patch)
    }
}

/// One native-protocol connection.
pub struct NativeConn {
    io: Io<Stream>,
    /// Reused for every outgoing packet.
    wbuf: Vec<u8>,
    /// For reconnecting after the stream went out of step (see the module docs).
    connector: Connector,
    hello: Vec<u8>,
    /// The per-connection constant parts of a query.
    client_info: Vec<u8>,
    empty_data: Vec<u8>,
    /// Scratch for decoding blocks.
    type_name: Vec<u8>,
    plan: Plan,
    stack: Vec<(u32, u64)>,
    server: ServerInfo,
    /// The revision in use: `min(server.revision, CLIENT_REVISION)`.
    revision: u64,
    /// Set while a call is in flight; still set afterwards when it did not finish cleanly
    /// (timeout, I/O or protocol error), which leaves the stream mid-packet.
    broken: bool,
    /// Set when the stream went out of step after a server exception: reconnect before the
    /// next call.
    out_of_step: bool,
    reconnects: u64,
    /// Where the current query is: what [`NativeConn::cancel`] must do to stop it.
    stage: Stage,
}

/// What [`NativeConn::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// No query was in flight.
    Nothing,
    /// The server stopped the query and closed the connection.
    Stopped,
    /// The Cancel packet went out, but the server did not close within the timeout (it stops
    /// the query when it next checks for cancellation).
    Requested,
    /// The Cancel packet could not be sent: the query may still run.
    Failed,
}

impl Cancelled {
    /// False only when the Cancel packet could not be sent.
    pub fn sent(self) -> bool {
        self != Cancelled::Failed
    }
}

/// Where a query call is, for [`NativeConn::cancel`]. A call abandoned midway (its future
/// dropped, or its timeout fired) leaves the stage it reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// No query in flight.
    Idle,
    /// The Query packet is being written: the server cannot have started it whole.
    Writing,
    /// The query was sent and its answer is not complete: the server may be running it.
    Running,
}

impl NativeConn {
    /// Connects via `connector` (TCP, plus TLS for `clickhouses://`) and performs the Hello
    /// handshake with the target's user (default `default`), password (default empty) and
    /// database (default: the user's default). The whole handshake is bounded by `timeout`.
    pub async fn connect(connector: &Connector, target: &Target, timeout: Duration) -> Result<NativeConn, ProtoError> {
        let mut hello = Vec::with_capacity(64);
        packets::write_hello(
            &mut hello,
            target.database.as_deref().unwrap_or(""),
            target.user.as_deref().unwrap_or("default"),
            target.password.as_deref().unwrap_or(""),
        );
        let connect = async {
            let mut io = Io::new(connector.connect().await?);
            let server = handshake(&mut io, &hello).await?;
            Ok::<_, ProtoError>((io, server))
        };
        let (io, server) = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| ProtoError::Timeout(timeout, "connecting and handshaking"))??;
        let revision = server.revision.min(CLIENT_REVISION);
        Ok(NativeConn {
            io,
            wbuf: Vec::with_capacity(4096),
            connector: connector.clone(),
            hello,
            client_info: packets::client_info(revision),
            empty_data: packets::empty_data(revision),
            type_name: Vec::with_capacity(256),
            plan: Plan::default(),
            stack: Vec::new(),
            server,
            revision,
            broken: false,
            out_of_step: false,
            reconnects: 0,
            stage: Stage::Idle,
        })
    }

    /// What the server said in its Hello.
    pub fn server(&self) -> &ServerInfo {
        &self.server
    }

    /// The protocol revision in use.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// False after a timeout, an I/O or protocol error: such a connection must be dropped
    /// (every further call fails with [`ProtoError::Protocol`]).
    pub fn is_usable(&self) -> bool {
        !self.broken
    }

    /// How many times this connection transparently reconnected because the stream went out
    /// of step after a server exception (see the module docs).
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// Runs `sql` and discards its result, counting rows and bytes of the data blocks.
    ///
    /// Sends the query (stage Complete, no compression) and the empty Data block that ends the
    /// client's data in one write, then reads packets until EndOfStream. An Exception packet
    /// gives [`ProtoError::Server`] (the top exception of a nested chain) and leaves the
    /// connection usable. The whole exchange is bounded by `timeout`; after a timeout, I/O or
    /// protocol error the connection is unusable (see [`ProtoError::breaks_connection`]).
    pub async fn query(&mut self, query_id: &str, sql: &str, timeout: Duration) -> Result<QueryStats, ProtoError> {
        self.begin()?;
        let result = tokio::time::timeout(timeout, self.run_query(query_id, sql, None)).await;
        self.finish(result, timeout, "waiting for the query result")
    }

    /// Like [`query`](Self::query), but collects the result as text: one `Vec<String>` per row
    /// (numbers in decimal, strings as lossy UTF-8, NULL as `NULL`; see [`text`] for the
    /// supported types). Meant for small results: version checks and tests.
    pub async fn query_rows(
        &mut self,
        query_id: &str,
        sql: &str,
        timeout: Duration,
    ) -> Result<Vec<Vec<String>>, ProtoError> {
        self.begin()?;
        let mut rows = Vec::new();
        let result = tokio::time::timeout(timeout, self.run_query(query_id, sql, Some(&mut rows))).await;
        self.finish(result, timeout, "waiting for the query result")?;
        Ok(rows)
    }

    /// Gives up on the query in flight without leaving it running on the server, and consumes
    /// the connection. When a query was sent and its answer is not complete (a timeout, or a
    /// call abandoned midway), sends the Cancel packet, closes the writing half and reads,
    /// discarding, until the server closes the connection, which it does once the query has
    /// stopped (it reads the Cancel packet while the query runs, and the end of the stream
    /// after). A query whose packet was only partly written cannot run and needs nothing more.
    ///
    /// Bounded by `timeout`: the server may take longer to stop a query than the client waits,
    /// which [`Cancelled::Requested`] tells apart from a Cancel packet that never left.
    pub async fn cancel(mut self, timeout: Duration) -> Cancelled {
        if self.stage != Stage::Running {
            return Cancelled::Nothing;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut packet = Vec::with_capacity(1);
        wire::put_varuint(&mut packet, packets::client::CANCEL);
        let sent = async {
            self.io.write_all(&packet).await?;
            self.io.shutdown().await
        };
        match tokio::time::timeout_at(deadline, sent).await {
            Ok(Ok(())) => {}
            _ => return Cancelled::Failed,
        }
        match tokio::time::timeout_at(deadline, self.io.discard_to_eof()).await {
            Ok(Ok(_)) => Cancelled::Stopped,
            _ => Cancelled::Requested,
        }
    }

    /// True while a query is in flight or was abandoned midway (see [`NativeConn::cancel`]).
    pub fn query_in_flight(&self) -> bool {
        self.stage != Stage::Idle
    }

    /// Sends Ping and waits for Pong.
    pub async fn ping(&mut self, timeout: Duration) -> Result<(), ProtoError> {
        self.begin()?;
        let exchange = async {
            self.reconnect_if_out_of_step().await?;
            if self.ping_pong().await? {
                Ok(())
            } else {
                Err(ProtoError::Protocol("expected Pong from the server".into()))
            }
        };
        let result = tokio::time::timeout(timeout, exchange).await;
        self.finish(result, timeout, "waiting for Pong")
    }

    fn begin(&mut self) -> Result<(), ProtoError> {
        if self.broken {
            return Err(ProtoError::Protocol(
                "the native connection is unusable after an earlier timeout or error".into(),
            ));
        }
        self.broken = true;
        Ok(())
    }

    fn finish<T>(
        &mut self,
        result: Result<Result<T, ProtoError>, tokio::time::error::Elapsed>,
        timeout: Duration,
        waiting_for: &'static str,
    ) -> Result<T, ProtoError> {
        match result {
            Ok(r) => {
                self.broken = r.as_ref().err().is_some_and(ProtoError::breaks_connection);
                r
            }
            Err(_) => Err(ProtoError::Timeout(timeout, waiting_for)),
        }
    }

    async fn reconnect_if_out_of_step(&mut self) -> Result<(), ProtoError> {
        if self.out_of_step {
            self.io.replace_stream(self.connector.connect().await?);
            let server = handshake(&mut self.io, &self.hello).await?;
            self.revision = server.revision.min(CLIENT_REVISION);
            self.client_info = packets::client_info(self.revision);
            self.empty_data = packets::empty_data(self.revision);
            self.server = server;
            self.out_of_step = false;
            self.reconnects += 1;
        }
        Ok(())
    }

    /// Writes Ping; true when the next packet is Pong.
    async fn ping_pong(&mut self) -> Result<bool, ProtoError> {
        self.wbuf.clear();
        wire::put_varuint(&mut self.wbuf, packets::client::PING);
        self.io.write_all(&self.wbuf).await?;
        Ok(self.io.varuint().await? == code::PONG)
    }

    /// Sends the query and the empty data block in one write and reads the result. With
    /// `sink`, data blocks are decoded into it as text; without, they are skipped.
    async fn run_query(
        &mut self,
        query_id: &str,
        sql: &str,
        sink: Option<&mut Vec<Vec<String>>>,
    ) -> Result<QueryStats, ProtoError> {
        self.reconnect_if_out_of_step().await?;
        self.wbuf.clear();
        packets::write_query(&mut self.wbuf, &self.client_info, query_id, sql, self.revision);
        self.wbuf.extend_from_slice(&self.empty_data);
        self.stage = Stage::Writing;
        self.io.write_all(&self.wbuf).await?;
        self.stage = Stage::Running;
        let result = self.read_result(sink).await;
        // Complete (EndOfStream, an exception) or a broken connection: the server is done with
        // the query. After a protocol error on our side (an answer we cannot decode) it may not
        // be, and the stage stays Running for `cancel`; after a timeout the call never gets here.
        if !matches!(result, Err(ProtoError::Protocol(_))) {
            self.stage = Stage::Idle;
        }
        result
    }

    /// Reads the answer to a query until EndOfStream or an exception.
    async fn read_result(&mut self, mut sink: Option<&mut Vec<Vec<String>>>) -> Result<QueryStats, ProtoError> {
        let mut stats = QueryStats::default();
        let mut first_packet = true;
        loop {
            let packet = self.io.varuint().await?;
            if packet == code::EXCEPTION {
                let err = packets::read_exception(&mut self.io).await;
                if first_packet && matches!(err, ProtoError::Server { .. }) {
                    // See the module docs. A failed check must not hide the server's exception.
                    self.out_of_step = !matches!(self.ping_pong().await, Ok(true));
                }
                return Err(err);
            }
            first_packet = false;
            match packet {
                code::DATA => {
                    self.skip_table_name().await?;
                    let start = self.io.position();
                    stats.rows += self.read_block(sink.as_deref_mut()).await?;
                    stats.bytes += self.io.position() - start;
                }
                code::TOTALS | code::EXTREMES | code::LOG | code::PROFILE_EVENTS => {
                    self.skip_table_name().await?;
                    self.read_block(None).await?;
                }
                code::TIMEZONE_UPDATE => self.io.skip_string().await?,
                code::PART_UUIDS => {
                    let n = self.io.count(MAX_ROWS, "part UUID count").await?;
                    for _ in 0..n {
                        let _: [u8; 16] = self.io.array().await?;
                    }
                }
                code::PROGRESS => packets::skip_progress(&mut self.io, self.revision).await?,
                code::PROFILE_INFO => packets::skip_profile_info(&mut self.io).await?,
                code::TABLE_COLUMNS => {
                    self.io.skip_string().await?;
                    self.io.skip_string().await?;
                }
                code::END_OF_STREAM => return Ok(stats),
                other => {
                    return Err(ProtoError::Protocol(format!("unexpected packet {other} in a query result")));
                }
            }
        }
    }

    async fn skip_table_name(&mut self) -> Result<(), ProtoError> {
        if self.revision >= rev::TEMPORARY_TABLES {
            self.io.skip_string().await?;
        }
        Ok(())
    }

    /// Reads one block, skipping it or decoding it into `sink`. Returns its row count.
    async fn read_block(&mut self, sink: Option<&mut Vec<Vec<String>>>) -> Result<u64, ProtoError> {
        if self.revision >= rev::BLOCK_INFO {
            packets::skip_block_info(&mut self.io).await?;
        }
        let columns = self.io.count(MAX_COLUMNS, "block column count").await?;
        let rows = self.io.count(MAX_ROWS, "block row count").await?;
        match sink {
            None => {
                for _ in 0..columns {
                    self.io.skip_string().await?; // column name
                    self.io.read_bytes_into(&mut self.type_name).await?;
                    let ty = std::str::from_utf8(&self.type_name)
                        .map_err(|_| ProtoError::Protocol("column type name is not UTF-8".into()))?;
                    columns::custom_serialization(&mut self.io, self.revision, ty).await?;
                    if rows == 0 {
                        continue; // no column data (the header block): any type will do
                    }
                    self.plan.compile(ty)?;
                    skip_column(&mut self.io, &self.plan, &mut self.stack, rows).await?;
                }
            }
            Some(out) => {
                if rows > text::MAX_ROWS {
                    return Err(ProtoError::Protocol(format!("a block of {rows} rows is too large to decode to text")));
                }
                let mut values: Vec<Vec<String>> = Vec::with_capacity(columns.min(1024) as usize);
                for _ in 0..columns {
                    self.io.skip_string().await?;
                    let name = self.io.string().await?;
                    columns::custom_serialization(&mut self.io, self.revision, &name).await?;
                    let ty = TextType::parse(&name)?;
                    let mut column = Vec::new();
                    text::read_column(&mut self.io, &ty, rows, &mut column).await?;
                    values.push(column);
                }
                for r in 0..rows as usize {
                    out.push(values.iter_mut().map(|c| c.get_mut(r).map(std::mem::take).unwrap_or_default()).collect());
                }
            }
        }
        Ok(rows)
    }
}

/// Sends the client Hello and reads the server's answer, then sends the addendum (an empty
/// quota key) when the revision they agree on has one.
async fn handshake(io: &mut Io<Stream>, hello: &[u8]) -> Result<ServerInfo, ProtoError> {
    io.write_all(hello).await?;
    let server = packets::read_server_hello(io).await?;
    let mut addendum = Vec::new();
    packets::write_addendum(&mut addendum, server.revision.min(CLIENT_REVISION), "");
    if !addendum.is_empty() {
        io.write_all(&addendum).await?;
    }
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The load engine spawns connections on a multi-threaded runtime.
    #[allow(dead_code)]
    fn futures_are_send(conn: &mut NativeConn, connector: &Connector, target: &Target) {
        fn send<T: Send>(_: T) {}
        send(NativeConn::connect(connector, target, Duration::ZERO));
        send(conn.query("", "", Duration::ZERO));
    }

    #[allow(dead_code)]
    fn more_futures_are_send(conn: &mut NativeConn) {
        fn send<T: Send>(_: T) {}
        send(conn.query_rows("", "", Duration::ZERO));
    }

    #[allow(dead_code)]
    fn ping_is_send(conn: &mut NativeConn) {
        fn send<T: Send>(_: T) {}
        send(conn.ping(Duration::ZERO));
    }

    #[test]
    fn version_string() {
        let info = ServerInfo::of_version(crate::versions::ServerVersion::V18_16);
        assert_eq!(info.version(), "18.16.1");
    }
}
