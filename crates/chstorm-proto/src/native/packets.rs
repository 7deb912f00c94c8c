//! Packet codes, protocol revisions and the encoders/decoders of the packets chstorm sends and
//! the small server packets it reads (data blocks are in [`super::columns`]).

use super::wire::{put_str, put_varuint, Io};
use super::{ServerInfo, CLIENT_REVISION};
use crate::error::ProtoError;
use tokio::io::AsyncRead;

/// Packets the client sends (`Protocol::Client` in ClickHouse's `src/Core/Protocol.h`).
pub mod client {
    pub const HELLO: u64 = 0;
    pub const QUERY: u64 = 1;
    pub const DATA: u64 = 2;
    pub const CANCEL: u64 = 3;
    pub const PING: u64 = 4;
    /// A list of tables whose replication delay the client asks for (from revision 54226).
    pub const TABLES_STATUS_REQUEST: u64 = 5;
    /// Keeps the connection alive; no body, no answer.
    pub const KEEP_ALIVE: u64 = 6;
    /// A scalar (a subquery's result) the initiator of a distributed query sends after its
    /// Query packet, before its external tables: laid out as a Data packet (from 54429).
    pub const SCALAR: u64 = 7;
}

/// Packets the server sends.
pub mod server {
    pub const HELLO: u64 = 0;
    pub const DATA: u64 = 1;
    pub const EXCEPTION: u64 = 2;
    pub const PROGRESS: u64 = 3;
    pub const PONG: u64 = 4;
    pub const END_OF_STREAM: u64 = 5;
    pub const PROFILE_INFO: u64 = 6;
    pub const TOTALS: u64 = 7;
    pub const EXTREMES: u64 = 8;
    pub const TABLES_STATUS_RESPONSE: u64 = 9;
    pub const LOG: u64 = 10;
    pub const TABLE_COLUMNS: u64 = 11;
    /// The UUIDs of the parts a query read (a varint count, 16 bytes each).
    pub const PART_UUIDS: u64 = 12;
    /// A cluster table function's request for the next task: no body.
    pub const READ_TASK_REQUEST: u64 = 13;
    /// A block of profile events, never compressed (from revision 54451).
    pub const PROFILE_EVENTS: u64 = 14;
    /// The session's time zone changed: a string (from revision 54464).
    pub const TIMEZONE_UPDATE: u64 = 17;
}

/// Protocol revisions at which fields were added (`DBMS_MIN_REVISION_WITH_*` and
/// `DBMS_MIN_PROTOCOL_VERSION_WITH_*` in ClickHouse's `src/Core/ProtocolDefines.h`), up to the
/// revision chstorm speaks ([`super::CLIENT_REVISION`]); what later revisions add is in
/// [`crate::versions`].
pub mod rev {
    pub const TEMPORARY_TABLES: u64 = 50264;
    pub const TOTAL_ROWS_IN_PROGRESS: u64 = 51554;
    pub const BLOCK_INFO: u64 = 51903;
    pub const CLIENT_INFO: u64 = 54032;
    pub const SERVER_TIMEZONE: u64 = 54058;
    pub const QUOTA_KEY_IN_CLIENT_INFO: u64 = 54060;
    pub const TABLES_STATUS: u64 = 54226;
    pub const SERVER_DISPLAY_NAME: u64 = 54372;
    pub const VERSION_PATCH: u64 = 54401;
    /// Progress carries written rows and bytes.
    pub const CLIENT_WRITE_INFO: u64 = 54420;
    /// Settings in a Query packet as strings with flags, not each in its own type.
    pub const SETTINGS_AS_STRINGS: u64 = 54429;
    /// The Query packet has an interserver secret's hash (empty from a client) after its settings.
    pub const INTERSERVER_SECRET: u64 = 54441;
    /// `ClientInfo` has an OpenTelemetry trace context flag (and the context when it is 1).
    pub const OPENTELEMETRY: u64 = 54442;
    /// `ClientInfo` of the HTTP interface has `X-Forwarded-For`.
    pub const X_FORWARDED_FOR_IN_CLIENT_INFO: u64 = 54443;
    /// `ClientInfo` of the HTTP interface has the referer.
    pub const REFERER_IN_CLIENT_INFO: u64 = 54447;
    /// `ClientInfo` has the distributed depth (a varint).
    pub const DISTRIBUTED_DEPTH: u64 = 54448;
    /// `ClientInfo` has the initial query's start time (microseconds, UInt64).
    pub const INITIAL_QUERY_START_TIME: u64 = 54449;
    /// The server sends ProfileEvents packets.
    pub const INCREMENTAL_PROFILE_EVENTS: u64 = 54451;
    /// `ClientInfo` has the parallel replicas' three varints.
    pub const PARALLEL_REPLICAS: u64 = 54453;
    /// Each column of a block has a byte after its type: 1 when a custom serialization follows.
    pub const CUSTOM_SERIALIZATION: u64 = 54454;
    /// After the Hello exchange the client sends an addendum: its quota key.
    pub const ADDENDUM: u64 = 54458;
    /// The Query packet ends with its query parameters, in the settings' string format.
    pub const PARAMETERS: u64 = 54459;
    /// Progress carries the query's elapsed time (nanoseconds).
    pub const SERVER_QUERY_TIME_IN_PROGRESS: u64 = 54460;
}

/// Query processing stage `Complete`.
const STAGE_COMPLETE: u64 = 2;
/// `ClientInfo::QueryKind::INITIAL_QUERY`.
pub const QUERY_KIND_INITIAL: u8 = 1;
/// `ClientInfo::Interface::TCP`.
const INTERFACE_TCP: u8 = 1;
/// How many nested exceptions we read before giving up.
const MAX_NESTED_EXCEPTIONS: usize = 64;

/// Name and version we report to the server (visible in `system.query_log`).
pub const CLIENT_NAME: &str = "chstorm";

const fn parse_u64(s: &str) -> u64 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u64;
        i += 1;
    }
    v
}

pub const CLIENT_VERSION_MAJOR: u64 = parse_u64(env!("CARGO_PKG_VERSION_MAJOR"));
pub const CLIENT_VERSION_MINOR: u64 = parse_u64(env!("CARGO_PKG_VERSION_MINOR"));
pub const CLIENT_VERSION_PATCH: u64 = parse_u64(env!("CARGO_PKG_VERSION_PATCH"));

/// Appends the client's Hello addendum, which a client at `revision` from 54458 sends once it
/// has read the server's Hello: its quota key (`TCPHandler::receiveAddendum`).
pub fn write_addendum(out: &mut Vec<u8>, revision: u64, quota_key: &str) {
    if revision >= rev::ADDENDUM {
        put_str(out, quota_key.as_bytes());
    }
}

/// Appends the client Hello.
pub fn write_hello(out: &mut Vec<u8>, database: &str, user: &str, password: &str) {
    put_varuint(out, client::HELLO);
    put_str(out, CLIENT_NAME.as_bytes());
    put_varuint(out, CLIENT_VERSION_MAJOR);
    put_varuint(out, CLIENT_VERSION_MINOR);
    put_varuint(out, CLIENT_REVISION);
    put_str(out, database.as_bytes());
    put_str(out, user.as_bytes());
    put_str(out, password.as_bytes());
}

/// Reads the server's answer to Hello: its Hello, or an exception (e.g. bad credentials).
pub async fn read_server_hello<S: AsyncRead + Unpin>(io: &mut Io<S>) -> Result<ServerInfo, ProtoError> {
    match io.varuint().await? {
        server::HELLO => {}
        server::EXCEPTION => return Err(read_exception(io).await),
        other => return Err(ProtoError::Protocol(format!("expected Hello from the server, got packet {other}"))),
    }
    let name = io.string().await?;
    let version_major = io.varuint().await?;
    let version_minor = io.varuint().await?;
    let revision = io.varuint().await?;
    let effective = revision.min(CLIENT_REVISION);
    let timezone = if effective >= rev::SERVER_TIMEZONE { io.string().await? } else { String::new() };
    let display_name = if effective >= rev::SERVER_DISPLAY_NAME { io.string().await? } else { String::new() };
    // Servers without a patch number report their revision in its place (as clickhouse-client).
    let version_patch = if effective >= rev::VERSION_PATCH { io.varuint().await? } else { revision };
    Ok(ServerInfo { name, version_major, version_minor, version_patch, revision, timezone, display_name })
}

/// Who we are, for the `ClientInfo` of queries.
pub struct Identity {
    pub os_user: String,
    pub hostname: String,
}

impl Identity {
    /// The process's identity, looked up once.
    pub fn get() -> &'static Identity {
        static ID: std::sync::OnceLock<Identity> = std::sync::OnceLock::new();
        ID.get_or_init(|| Identity {
            os_user: std::env::var("USER").or_else(|_| std::env::var("USERNAME")).unwrap_or_default(),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .or_else(|_| std::env::var("HOSTNAME"))
                .unwrap_or_default(),
        })
    }
}

/// The `ClientInfo` part of a Query packet, which is the same for every query of a connection.
pub fn client_info(revision: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    if revision < rev::CLIENT_INFO {
        return out;
    }
    let id = Identity::get();
    out.push(QUERY_KIND_INITIAL);
    put_str(&mut out, b""); // initial_user
    put_str(&mut out, b""); // initial_query_id
    put_str(&mut out, b"0.0.0.0:0"); // initial_address
    if revision >= rev::INITIAL_QUERY_START_TIME {
        out.extend_from_slice(&0u64.to_le_bytes()); // the server sets it for an initial query
    }
    out.push(INTERFACE_TCP);
    put_str(&mut out, id.os_user.as_bytes());
    put_str(&mut out, id.hostname.as_bytes());
    put_str(&mut out, CLIENT_NAME.as_bytes());
    put_varuint(&mut out, CLIENT_VERSION_MAJOR);
    put_varuint(&mut out, CLIENT_VERSION_MINOR);
    put_varuint(&mut out, CLIENT_REVISION);
    if revision >= rev::QUOTA_KEY_IN_CLIENT_INFO {
        put_str(&mut out, b""); // quota_key
    }
    if revision >= rev::DISTRIBUTED_DEPTH {
        put_varuint(&mut out, 0);
    }
    if revision >= rev::VERSION_PATCH {
        put_varuint(&mut out, CLIENT_VERSION_PATCH);
    }
    if revision >= rev::OPENTELEMETRY {
        out.push(0); // no trace context
    }
    if revision >= rev::PARALLEL_REPLICAS {
        put_varuint(&mut out, 0); // collaborate_with_initiator
        put_varuint(&mut out, 0); // count_participating_replicas
        put_varuint(&mut out, 0); // number_of_current_replica
    }
    out
}

/// The Data packet with an empty block that tells the server the client has no more data.
pub fn empty_data(revision: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    put_varuint(&mut out, client::DATA);
    if revision >= rev::TEMPORARY_TABLES {
        put_str(&mut out, b""); // external table name
    }
    if revision >= rev::BLOCK_INFO {
        put_varuint(&mut out, 1);
        out.push(0); // is_overflows
        put_varuint(&mut out, 2);
        out.extend_from_slice(&(-1i32).to_le_bytes()); // bucket_num
        put_varuint(&mut out, 0);
    }
    put_varuint(&mut out, 0); // columns
    put_varuint(&mut out, 0); // rows
    out
}

/// Appends a Query packet at `revision` (stage Complete, no compression, no settings, no
/// parameters; `client_info` made by [`client_info`] for the same revision).
pub fn write_query(out: &mut Vec<u8>, client_info: &[u8], query_id: &str, sql: &str, revision: u64) {
    put_varuint(out, client::QUERY);
    put_str(out, query_id.as_bytes());
    out.extend_from_slice(client_info);
    // Settings: none, just the empty name that ends the list (in either format). Per-query
    // settings travel as a SQL SETTINGS clause instead (see `append_settings_clause`).
    put_str(out, b"");
    if revision >= rev::INTERSERVER_SECRET {
        put_str(out, b""); // no interserver secret
    }
    put_varuint(out, STAGE_COMPLETE);
    put_varuint(out, 0); // compression off
    put_str(out, sql.as_bytes());
    if revision >= rev::PARAMETERS {
        put_str(out, b""); // no parameters
    }
}

/// Reads an Exception packet's body (the code is already consumed) into the top exception.
pub async fn read_exception<S: AsyncRead + Unpin>(io: &mut Io<S>) -> ProtoError {
    match read_exception_inner(io).await {
        Ok(e) | Err(e) => e,
    }
}

async fn read_exception_inner<S: AsyncRead + Unpin>(io: &mut Io<S>) -> Result<ProtoError, ProtoError> {
    let code = io.i32_le().await?;
    let name = io.string().await?;
    let message = io.string().await?;
    io.skip_string().await?; // stack trace
    let mut nested = io.u8().await? != 0;
    let mut depth = 0;
    while nested {
        depth += 1;
        if depth > MAX_NESTED_EXCEPTIONS {
            return Err(ProtoError::Protocol("too many nested exceptions".into()));
        }
        io.i32_le().await?;
        io.skip_string().await?;
        io.skip_string().await?;
        io.skip_string().await?;
        nested = io.u8().await? != 0;
    }
    Ok(ProtoError::Server { code, name, message })
}

/// How many `VarUInt`s a Progress packet's body has at `revision`: rows and bytes, then
/// total_rows from 51554, then written_rows and written_bytes from 54420, then the elapsed
/// nanoseconds from 54460 (`Progress::write` in ClickHouse's `src/IO/Progress.cpp`).
pub fn progress_fields(revision: u64) -> usize {
    2 + usize::from(revision >= rev::TOTAL_ROWS_IN_PROGRESS)
        + 2 * usize::from(revision >= rev::CLIENT_WRITE_INFO)
        + usize::from(revision >= rev::SERVER_QUERY_TIME_IN_PROGRESS)
}

/// Skips a Progress packet's body.
pub async fn skip_progress<S: AsyncRead + Unpin>(io: &mut Io<S>, revision: u64) -> Result<(), ProtoError> {
    for _ in 0..progress_fields(revision) {
        io.varuint().await?;
    }
    Ok(())
}

/// How often a server sends a Progress packet during a query by default: every 100 ms, the
/// `interactive_delay` setting (microseconds) of 18.16 and of current releases.
pub const DEFAULT_INTERACTIVE_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

/// A Progress packet's counters, each an increment since the server's previous Progress
/// packet (clients add them up). `total_rows` is sent from revision 51554, the `written_*`
/// pair from 54420, `elapsed_ns` from 54460; an older revision leaves them zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub rows: u64,
    pub bytes: u64,
    pub total_rows: u64,
    pub written_rows: u64,
    pub written_bytes: u64,
    pub elapsed_ns: u64,
}

impl Progress {
    /// Decodes a whole Progress packet (its code first) spoken at `revision`; None when `packet`
    /// is not one.
    pub fn decode(packet: &[u8], revision: u64) -> Option<Progress> {
        // The code, then the body's fields.
        let mut fields = [0u64; 7];
        let mut at = 0;
        for f in fields.iter_mut().take(1 + progress_fields(revision)) {
            let (v, len) = super::wire::decode_varuint(&packet[at..]).ok()??;
            *f = v;
            at += len;
        }
        (fields[0] == server::PROGRESS && at == packet.len()).then_some(Progress {
            rows: fields[1],
            bytes: fields[2],
            total_rows: fields[3],
            written_rows: fields[4],
            written_bytes: fields[5],
            elapsed_ns: fields[6],
        })
    }

    /// Adds another packet's increments.
    pub fn add(&mut self, o: &Progress) {
        self.rows = self.rows.saturating_add(o.rows);
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.total_rows = self.total_rows.saturating_add(o.total_rows);
        self.written_rows = self.written_rows.saturating_add(o.written_rows);
        self.written_bytes = self.written_bytes.saturating_add(o.written_bytes);
        self.elapsed_ns = self.elapsed_ns.saturating_add(o.elapsed_ns);
    }

    /// Appends it as a Progress packet spoken at `revision`.
    pub fn encode(&self, out: &mut Vec<u8>, revision: u64) {
        put_varuint(out, server::PROGRESS);
        put_varuint(out, self.rows);
        put_varuint(out, self.bytes);
        if revision >= rev::TOTAL_ROWS_IN_PROGRESS {
            put_varuint(out, self.total_rows);
        }
        if revision >= rev::CLIENT_WRITE_INFO {
            put_varuint(out, self.written_rows);
            put_varuint(out, self.written_bytes);
        }
        if revision >= rev::SERVER_QUERY_TIME_IN_PROGRESS {
            put_varuint(out, self.elapsed_ns);
        }
    }
}

/// Skips a ProfileInfo packet's body.
pub async fn skip_profile_info<S: AsyncRead + Unpin>(io: &mut Io<S>) -> Result<(), ProtoError> {
    io.varuint().await?; // rows
    io.varuint().await?; // blocks
    io.varuint().await?; // bytes
    io.u8().await?; // applied_limit
    io.varuint().await?; // rows_before_limit
    io.u8().await?; // calculated_rows_before_limit
    Ok(())
}

/// Skips the BlockInfo that starts a block: numbered fields until field number 0.
pub async fn skip_block_info<S: AsyncRead + Unpin>(io: &mut Io<S>) -> Result<(), ProtoError> {
    loop {
        match io.varuint().await? {
            0 => return Ok(()),
            1 => {
                io.u8().await?; // is_overflows
            }
            2 => {
                io.i32_le().await?; // bucket_num
            }
            f => return Err(ProtoError::Protocol(format!("unknown BlockInfo field {f}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_data_block_bytes() {
        assert_eq!(empty_data(54412), [2, 0, 1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0]);
    }

    #[test]
    fn progress_round_trips_at_every_revision_and_skip_agrees() {
        let p =
            Progress { rows: 1, bytes: 300, total_rows: 1 << 40, written_rows: 7, written_bytes: 128, elapsed_ns: 9 };
        for (revision, kept) in [(51000u64, 2usize), (54412, 3), (54420, 5), (54460, 6)] {
            let mut out = Vec::new();
            p.encode(&mut out, revision);
            let got = Progress::decode(&out, revision).expect("a Progress packet");
            let fields = [got.rows, got.bytes, got.total_rows, got.written_rows, got.written_bytes, got.elapsed_ns];
            let want = [p.rows, p.bytes, p.total_rows, p.written_rows, p.written_bytes, p.elapsed_ns];
            assert_eq!(&fields[..kept], &want[..kept], "revision {revision}");
            assert!(fields[kept..].iter().all(|f| *f == 0), "revision {revision}");
            // A truncated packet, a longer one and another packet are not Progress.
            assert_eq!(Progress::decode(&out[..out.len() - 1], revision), None);
            assert_eq!(Progress::decode(&[out.as_slice(), &[0]].concat(), revision), None);
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let mut io = Io::new(&out[1..]);
            rt.block_on(skip_progress(&mut io, revision)).unwrap();
        }
        assert_eq!(Progress::decode(&[server::PONG as u8], 54412), None);
        let mut sum = Progress::default();
        sum.add(&p);
        sum.add(&Progress { rows: u64::MAX, ..p });
        assert_eq!((sum.rows, sum.bytes), (u64::MAX, 600));
    }

    #[test]
    fn hello_bytes() {
        let mut out = Vec::new();
        write_hello(&mut out, "", "default", "");
        assert_eq!(out[0], 0);
        assert_eq!(&out[1..9], b"\x07chstorm");
        assert!(out.ends_with(b"\x00\x07default\x00"));
    }

    #[tokio::test]
    async fn reads_nested_exception_as_top_one() {
        let mut d = Vec::new();
        for (code, nested) in [(60i32, 1u8), (1000, 0)] {
            d.extend_from_slice(&code.to_le_bytes());
            put_str(&mut d, b"DB::Exception");
            put_str(&mut d, format!("message {code}").as_bytes());
            put_str(&mut d, b"stack");
            d.push(nested);
        }
        d.push(0xAA);
        let mut io = Io::new(&d[..]);
        match read_exception(&mut io).await {
            ProtoError::Server { code, name, message } => {
                assert_eq!((code, name.as_str(), message.as_str()), (60, "DB::Exception", "message 60"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(io.u8().await.unwrap(), 0xAA);
    }

    #[tokio::test]
    async fn reads_server_hello_at_our_revision() {
        let mut d = vec![0u8];
        put_str(&mut d, b"ClickHouse");
        put_varuint(&mut d, 18);
        put_varuint(&mut d, 16);
        put_varuint(&mut d, 54412);
        put_str(&mut d, b"UTC");
        put_str(&mut d, b"host");
        put_varuint(&mut d, 1);
        let info = read_server_hello(&mut Io::new(&d[..])).await.unwrap();
        assert_eq!(info.version(), "18.16.1");
        assert_eq!((info.revision, info.timezone.as_str(), info.display_name.as_str()), (54412, "UTC", "host"));
    }
}
