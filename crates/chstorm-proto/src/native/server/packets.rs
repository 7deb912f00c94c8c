//! The packets a server (the gateway) reads and writes: the client's Hello and Query, its own
//! Hello and Exception; and, to relay a client's query, the Hello and Query it sends a backend
//! at a chosen revision. Packet codes and revisions are [`crate::native::packets`]'.

use super::typed_settings::{type_of, unzigzag, Ty};
use crate::mem::Charge;
use crate::native::packets::{client, rev, server};
use crate::native::wire::{put_str, put_varuint, Cursor, Io, MAX_STRING_LEN, MAX_TEXT_LEN};
use crate::native::ServerInfo;
use crate::ProtoError;
use tokio::io::AsyncRead;

/// The oldest client revision served: 54401, the first whose Hello exchange has the version
/// patch (what chstorm's native code reads from a backend's Hello). An older client is refused
/// at its Hello with an exception that names this minimum.
pub const MIN_CLIENT_REVISION: u64 = rev::VERSION_PATCH;

/// The client's Hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    pub client_name: String,
    pub revision: u64,
    pub database: String,
    pub user: String,
    pub password: String,
}

/// Longest string of a client's Hello (its name, database, user, password): 64 KiB, so a
/// client not yet authenticated holds at most 256 KiB.
pub const MAX_HELLO_STRING: u64 = 64 << 10;

/// What one setting costs in memory beyond its name and value: its entry and two allocations.
const SETTING_OVERHEAD: usize = 64;

/// Reads the client's Hello, packet code included.
pub async fn read_client_hello<S: AsyncRead + Unpin>(io: &mut Io<S>) -> Result<ClientHello, ProtoError> {
    match io.varuint().await? {
        client::HELLO => {}
        other => return Err(ProtoError::Protocol(format!("expected Hello from the client, got packet {other}"))),
    }
    let client_name = io.string_max(MAX_HELLO_STRING).await?;
    io.varuint().await?; // major
    io.varuint().await?; // minor
    let revision = io.varuint().await?;
    let database = io.string_max(MAX_HELLO_STRING).await?;
    let user = io.string_max(MAX_HELLO_STRING).await?;
    let password = io.string_max(MAX_HELLO_STRING).await?;
    Ok(ClientHello { client_name, revision, database, user, password })
}

/// The gateway's Hello: the backend's name, version and timezone. It announces `announced` (the
/// revision the gateway speaks with its backends: `min(54460, theirs)`), as a server announces
/// its own whatever the client's; its fields are those a client at `revision` (the negotiated
/// one, `min(client's, announced)`) reads (`TCPHandler::sendHello`).
pub fn server_hello(out: &mut Vec<u8>, info: &ServerInfo, announced: u64, revision: u64) {
    put_varuint(out, server::HELLO);
    put_str(out, info.name.as_bytes());
    put_varuint(out, info.version_major);
    put_varuint(out, info.version_minor);
    put_varuint(out, announced);
    if revision >= rev::SERVER_TIMEZONE {
        put_str(out, info.timezone.as_bytes());
    }
    if revision >= rev::SERVER_DISPLAY_NAME {
        put_str(out, info.display_name.as_bytes());
    }
    if revision >= rev::VERSION_PATCH {
        put_varuint(out, info.version_patch);
    }
}

/// An Exception packet as ClickHouse writes one: `DB::Exception`, the message prefixed with it
/// (what its `displayText()` gives), no stack trace, nothing nested.
pub fn exception(out: &mut Vec<u8>, code: i32, message: &str) {
    put_varuint(out, server::EXCEPTION);
    out.extend_from_slice(&code.to_le_bytes());
    put_str(out, b"DB::Exception");
    put_str(out, format!("DB::Exception: {message}").as_bytes());
    put_str(out, b"");
    out.push(0);
}

/// The client's Query packet (its code already read).
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub query_id: String,
    /// The raw `ClientInfo` (the client's name, version, user and host for `system.query_log`),
    /// passed to the backend as it came.
    pub client_info: Vec<u8>,
    pub query_kind: u8,
    /// The settings, their values as text (invalid UTF-8 replaced; see `raw_settings`).
    pub settings: Vec<(String, String)>,
    /// The settings whose values were not valid UTF-8, as sent: they go to the backend so.
    pub raw_settings: Vec<(String, Vec<u8>)>,
    /// The flags of settings sent as strings (revision 54429 on: 1 important, 2 custom), where
    /// they are not 0: they go to a backend that reads strings so.
    pub setting_flags: Vec<(String, u64)>,
    /// The query parameters' section (revision 54459 on) as it came, its end included; empty
    /// below 54459.
    pub parameters_raw: Vec<u8>,
    /// How many parameters it has.
    pub parameters: usize,
    /// The revision the packet was read at.
    pub revision: u64,
    pub stage: u64,
    pub compression: bool,
    /// The query's text (invalid UTF-8 replaced, for planning; see `raw_sql`).
    pub sql: String,
    /// The query's bytes when they are not valid UTF-8: they go to the backend unchanged.
    pub raw_sql: Option<Vec<u8>>,
}

/// Bytes as text, and the bytes themselves when they are not valid UTF-8.
fn text(bytes: Vec<u8>) -> (String, Option<Vec<u8>>) {
    match String::from_utf8(bytes) {
        Ok(s) => (s, None),
        Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), Some(e.into_bytes())),
    }
}

/// Why a Query packet could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The stream is broken or out of step: close the connection.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// A setting 18.16 does not know, in the typed format of revisions below 54429: its value
    /// cannot be skipped (code 115; close).
    #[error("Unknown setting {0}")]
    UnknownSetting(String),
}

/// Where a setting's value ends and what it is, in the format of `revision`.
enum SettingsFormat {
    /// Below 54429: each value in its setting's type ([`type_of`]).
    Typed,
    /// 54429 on: a varint of flags, then the value as a string.
    Strings,
}

impl SettingsFormat {
    fn of(revision: u64) -> SettingsFormat {
        if revision >= rev::SETTINGS_AS_STRINGS {
            SettingsFormat::Strings
        } else {
            SettingsFormat::Typed
        }
    }
}

/// Reads a Query packet's body at `revision`; what it holds is charged to `charge` before it
/// is read (on failure, [`Io::mem_error`] says whether the charge was refused).
pub async fn read_query<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    revision: u64,
    charge: &mut Charge,
) -> Result<Query, QueryError> {
    let mut buf = Vec::new();
    io.read_bytes_charged(&mut buf, MAX_HELLO_STRING, charge).await?;
    let mut q = Query { query_id: text(buf).0, revision, ..Query::default() };
    if revision >= rev::CLIENT_INFO {
        io.tee_start(Vec::with_capacity(128));
        let info = read_client_info(io, revision).await;
        q.client_info = io.tee_take();
        q.query_kind = info?;
    }
    let format = SettingsFormat::of(revision);
    loop {
        if let Err(e) = charge.grow(SETTING_OVERHEAD) {
            return Err(io.fail_mem(e).into());
        }
        let mut buf = Vec::new();
        io.read_bytes_charged(&mut buf, MAX_HELLO_STRING, charge).await?;
        let name = text(buf).0;
        if name.is_empty() {
            break;
        }
        let ty = match format {
            SettingsFormat::Typed => type_of(&name).ok_or_else(|| QueryError::UnknownSetting(name.clone()))?,
            SettingsFormat::Strings => {
                let flags = io.varuint().await?;
                if flags != 0 {
                    q.setting_flags.push((name.clone(), flags));
                }
                Ty::Str
            }
        };
        let value = match ty {
            Ty::UInt => io.varuint().await?.to_string(),
            Ty::Int => unzigzag(io.varuint().await?).to_string(),
            Ty::Str => {
                let mut buf = Vec::new();
                io.read_bytes_charged(&mut buf, MAX_TEXT_LEN, charge).await?;
                let (value, raw) = text(buf);
                if let Some(raw) = raw {
                    q.raw_settings.push((name.clone(), raw));
                }
                value
            }
        };
        q.settings.push((name, value));
    }
    if revision >= rev::INTERSERVER_SECRET {
        io.skip_string().await?; // a client's is empty; the gateway sends its own (empty)
    }
    q.stage = io.varuint().await?;
    q.compression = io.varuint().await? != 0;
    let mut buf = Vec::new();
    io.read_bytes_charged(&mut buf, MAX_STRING_LEN, charge).await?;
    (q.sql, q.raw_sql) = text(buf);
    if revision >= rev::PARAMETERS {
        io.tee_start(Vec::new());
        let read = read_parameters(io, charge).await;
        q.parameters_raw = io.tee_take();
        q.parameters = read?;
    }
    Ok(q)
}

/// Reads the query parameters' section (names, flags and values as strings, to an empty name);
/// returns how many there are.
async fn read_parameters<S: AsyncRead + Unpin>(io: &mut Io<S>, charge: &mut Charge) -> Result<usize, ProtoError> {
    let mut n = 0;
    loop {
        if let Err(e) = charge.grow(SETTING_OVERHEAD) {
            return Err(io.fail_mem(e));
        }
        let mut name = Vec::new();
        io.read_bytes_charged(&mut name, MAX_HELLO_STRING, charge).await?;
        if name.is_empty() {
            return Ok(n);
        }
        io.varuint().await?;
        let mut value = Vec::new();
        io.read_bytes_charged(&mut value, MAX_TEXT_LEN, charge).await?;
        n += 1;
    }
}

/// [`read_query`] on a Query packet's body already whole in `buf`, without awaiting: the query
/// and the bytes it took, charged to `charge` as [`read_query`] charges them. None when the
/// body is not whole in `buf`, or on anything [`read_query`] would refuse (an unknown setting,
/// a value past a limit, a refused charge): the caller then drops `charge` and reads the packet
/// with [`read_query`], which says why. A test checks the two agree on generated packets.
pub fn query_in(buf: &[u8], revision: u64, charge: &mut Charge) -> Option<(Query, usize)> {
    let mut c = Cursor::new(buf);
    let mut q = Query { query_id: text(charged(&mut c, MAX_HELLO_STRING, charge)?).0, revision, ..Query::default() };
    if revision >= rev::CLIENT_INFO {
        let from = c.pos();
        q.query_kind = client_info_in(&mut c, revision)?;
        q.client_info = buf[from..c.pos()].to_vec();
    }
    let format = SettingsFormat::of(revision);
    loop {
        charge.grow(SETTING_OVERHEAD).ok()?;
        let name = text(charged(&mut c, MAX_HELLO_STRING, charge)?).0;
        if name.is_empty() {
            break;
        }
        let ty = match format {
            SettingsFormat::Typed => type_of(&name)?,
            SettingsFormat::Strings => {
                let flags = c.varuint()?;
                if flags != 0 {
                    q.setting_flags.push((name.clone(), flags));
                }
                Ty::Str
            }
        };
        let value = match ty {
            Ty::UInt => c.varuint()?.to_string(),
            Ty::Int => unzigzag(c.varuint()?).to_string(),
            Ty::Str => {
                let (value, raw) = text(charged(&mut c, MAX_TEXT_LEN, charge)?);
                if let Some(raw) = raw {
                    q.raw_settings.push((name.clone(), raw));
                }
                value
            }
        };
        q.settings.push((name, value));
    }
    if revision >= rev::INTERSERVER_SECRET {
        c.string(MAX_STRING_LEN)?;
    }
    q.stage = c.varuint()?;
    q.compression = c.varuint()? != 0;
    (q.sql, q.raw_sql) = text(charged(&mut c, MAX_STRING_LEN, charge)?);
    if revision >= rev::PARAMETERS {
        let from = c.pos();
        loop {
            charge.grow(SETTING_OVERHEAD).ok()?;
            if charged(&mut c, MAX_HELLO_STRING, charge)?.is_empty() {
                break;
            }
            c.varuint()?;
            charged(&mut c, MAX_TEXT_LEN, charge)?;
            q.parameters += 1;
        }
        q.parameters_raw = buf[from..c.pos()].to_vec();
    }
    Some((q, c.pos()))
}

/// A length-prefixed string of at most `max` bytes, its length charged before it is copied.
fn charged(c: &mut Cursor<'_>, max: u64, charge: &mut Charge) -> Option<Vec<u8>> {
    let len = c.count(max)?;
    let bytes = c.take(len)?;
    charge.grow(bytes.len()).ok()?;
    Some(bytes.to_vec())
}

/// [`read_client_info`] on buffered bytes.
fn client_info_in(c: &mut Cursor<'_>, revision: u64) -> Option<u8> {
    let kind = c.u8()?;
    if kind == 0 {
        return Some(kind);
    }
    for _ in 0..3 {
        c.string(MAX_STRING_LEN)?; // initial_user, initial_query_id, initial_address
    }
    if revision >= rev::INITIAL_QUERY_START_TIME {
        c.take(8)?;
    }
    let interface = c.u8()?;
    match interface {
        INTERFACE_TCP => {
            for _ in 0..3 {
                c.string(MAX_STRING_LEN)?; // os_user, client_hostname, client_name
            }
            for _ in 0..3 {
                c.varuint()?; // version major, minor, client revision
            }
        }
        INTERFACE_HTTP => {
            c.u8()?; // http_method
            c.string(MAX_STRING_LEN)?; // http_user_agent
            if revision >= rev::X_FORWARDED_FOR_IN_CLIENT_INFO {
                c.string(MAX_STRING_LEN)?;
            }
            if revision >= rev::REFERER_IN_CLIENT_INFO {
                c.string(MAX_STRING_LEN)?;
            }
        }
        _ => {} // gRPC, MySQL, PostgreSQL, local (6: clickhouse-local, chdb), ...: no fields
    }
    if revision >= rev::QUOTA_KEY_IN_CLIENT_INFO {
        c.string(MAX_STRING_LEN)?;
    }
    if revision >= rev::DISTRIBUTED_DEPTH {
        c.varuint()?;
    }
    if revision >= rev::VERSION_PATCH && interface == INTERFACE_TCP {
        c.varuint()?;
    }
    if revision >= rev::OPENTELEMETRY && c.u8()? != 0 {
        c.take(16 + 8)?; // trace_id, span_id
        c.string(MAX_STRING_LEN)?; // tracestate
        c.take(1)?; // trace_flags
    }
    if revision >= rev::PARALLEL_REPLICAS {
        for _ in 0..3 {
            c.varuint()?;
        }
    }
    Some(kind)
}

/// `ClientInfo::Interface::TCP` and `::HTTP` (`src/Interpreters/ClientInfo.h`), the two with
/// fields of their own.
const INTERFACE_TCP: u8 = 1;
const INTERFACE_HTTP: u8 = 2;

/// Reads a `ClientInfo`; returns its query kind.
async fn read_client_info<S: AsyncRead + Unpin>(io: &mut Io<S>, revision: u64) -> Result<u8, ProtoError> {
    let kind = io.u8().await?;
    if kind == 0 {
        return Ok(kind);
    }
    io.skip_string().await?; // initial_user
    io.skip_string().await?; // initial_query_id
    io.skip_string().await?; // initial_address
    if revision >= rev::INITIAL_QUERY_START_TIME {
        let _: [u8; 8] = io.array().await?;
    }
    let interface = io.u8().await?;
    match interface {
        INTERFACE_TCP => {
            io.skip_string().await?; // os_user
            io.skip_string().await?; // client_hostname
            io.skip_string().await?; // client_name
            io.varuint().await?;
            io.varuint().await?;
            io.varuint().await?; // client revision
        }
        INTERFACE_HTTP => {
            io.u8().await?; // http_method
            io.skip_string().await?; // http_user_agent
            if revision >= rev::X_FORWARDED_FOR_IN_CLIENT_INFO {
                io.skip_string().await?;
            }
            if revision >= rev::REFERER_IN_CLIENT_INFO {
                io.skip_string().await?;
            }
        }
        _ => {} // no fields of its own (`ClientInfo::read`)
    }
    if revision >= rev::QUOTA_KEY_IN_CLIENT_INFO {
        io.skip_string().await?;
    }
    if revision >= rev::DISTRIBUTED_DEPTH {
        io.varuint().await?;
    }
    if revision >= rev::VERSION_PATCH && interface == INTERFACE_TCP {
        io.varuint().await?;
    }
    if revision >= rev::OPENTELEMETRY && io.u8().await? != 0 {
        let _: [u8; 24] = io.array().await?; // trace_id, span_id
        io.skip_string().await?; // tracestate
        io.u8().await?; // trace_flags
    }
    if revision >= rev::PARALLEL_REPLICAS {
        for _ in 0..3 {
            io.varuint().await?;
        }
    }
    Ok(kind)
}

/// The gateway's Hello to a backend, at `revision`, with the cluster's credentials.
pub fn backend_hello(out: &mut Vec<u8>, revision: u64, database: &str, user: &str, password: &str) {
    use crate::native::packets::{CLIENT_NAME, CLIENT_VERSION_MAJOR, CLIENT_VERSION_MINOR};
    put_varuint(out, client::HELLO);
    put_str(out, format!("{CLIENT_NAME} gateway").as_bytes());
    put_varuint(out, CLIENT_VERSION_MAJOR);
    put_varuint(out, CLIENT_VERSION_MINOR);
    put_varuint(out, revision);
    put_str(out, database.as_bytes());
    put_str(out, user.as_bytes());
    put_str(out, password.as_bytes());
}

/// A Query packet for a backend: the client's `ClientInfo` (already in this revision's layout:
/// the backend connection speaks the client's revision) and stage and compression, the planned
/// settings (in the revision's format) and text, and the client's query parameters.
pub fn backend_query(
    out: &mut Vec<u8>,
    q: &Query,
    query_id: &str,
    settings: &[(String, String)],
    sql: &str,
) -> Result<(), super::typed_settings::SettingError> {
    backend_query_head(out, q, query_id, settings)?;
    backend_query_tail(out, q, sql);
    Ok(())
}

/// A backend Query packet up to its last setting (see [`backend_query`]): more settings may
/// follow (each by [`super::typed_settings::put_setting`]), then [`backend_query_tail`].
pub fn backend_query_head(
    out: &mut Vec<u8>,
    q: &Query,
    query_id: &str,
    settings: &[(String, String)],
) -> Result<(), super::typed_settings::SettingError> {
    put_varuint(out, client::QUERY);
    put_str(out, query_id.as_bytes());
    out.extend_from_slice(&q.client_info);
    backend_query_settings(out, q, settings)
}

/// The settings of a backend Query packet ([`backend_query_head`] writes them after the
/// ClientInfo), each as the client sent it where its value is unchanged.
pub fn backend_query_settings(
    out: &mut Vec<u8>,
    q: &Query,
    settings: &[(String, String)],
) -> Result<(), super::typed_settings::SettingError> {
    for (k, v) in settings {
        // A value that came as invalid UTF-8 and is passed on as it came goes as those bytes.
        let flags = q.setting_flags.iter().find(|(fk, _)| fk == k).map_or(0, |(_, f)| *f);
        match q.raw_settings.iter().find(|(rk, raw)| rk == k && String::from_utf8_lossy(raw) == v.as_str()) {
            Some((_, raw)) => {
                put_str(out, k.as_bytes());
                if q.revision >= rev::SETTINGS_AS_STRINGS {
                    put_varuint(out, flags);
                }
                put_str(out, raw);
            }
            None => super::typed_settings::put_setting_at(out, k, v, flags, q.revision)?,
        }
    }
    Ok(())
}

/// The rest of a backend Query packet after its settings: their end, stage, compression and
/// text.
pub fn backend_query_tail(out: &mut Vec<u8>, q: &Query, sql: &str) {
    put_str(out, b"");
    if q.revision >= rev::INTERSERVER_SECRET {
        put_str(out, b""); // no interserver secret: the gateway is a client
    }
    put_varuint(out, q.stage);
    put_varuint(out, q.compression as u64);
    match &q.raw_sql {
        Some(raw) if sql == q.sql => put_str(out, raw),
        _ => put_str(out, sql.as_bytes()),
    }
    if q.revision >= rev::PARAMETERS {
        match q.parameters_raw.is_empty() {
            true => put_str(out, b""),
            false => out.extend_from_slice(&q.parameters_raw),
        }
    }
}

#[cfg(test)]
mod query_in_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::Mem;
    use crate::native::packets::QUERY_KIND_INITIAL;

    #[tokio::test]
    async fn a_query_round_trips_through_the_backend_encoding() {
        let info = crate::native::packets::client_info(54412);
        let mut p = Vec::new();
        put_str(&mut p, b"qid");
        p.extend_from_slice(&info);
        crate::native::server::typed_settings::put_setting(&mut p, "max_threads", "2").unwrap();
        crate::native::server::typed_settings::put_setting(&mut p, "load_balancing", "in_order").unwrap();
        put_str(&mut p, b"");
        put_varuint(&mut p, 2);
        put_varuint(&mut p, 1);
        put_str(&mut p, b"SELECT 1");
        let q = read_query(&mut Io::new(&p[..]), 54412, &mut Mem::unbounded().charge()).await.unwrap();
        assert_eq!(q.query_id, "qid");
        assert_eq!(q.client_info, info);
        assert_eq!(q.query_kind, QUERY_KIND_INITIAL);
        assert_eq!(q.settings, vec![("max_threads".into(), "2".into()), ("load_balancing".into(), "in_order".into())]);
        assert_eq!((q.stage, q.compression, q.sql.as_str()), (2, true, "SELECT 1"));
        let mut out = Vec::new();
        backend_query(&mut out, &q, "qid", &q.settings, "SELECT 1").unwrap();
        assert_eq!(out[0], client::QUERY as u8);
        assert_eq!(&out[1..], &p[..], "the same bytes back");
    }

    #[tokio::test]
    async fn an_unknown_setting_is_refused() {
        let mut p = Vec::new();
        put_str(&mut p, b"");
        p.push(0); // no client info
        put_str(&mut p, b"no_such_setting");
        put_varuint(&mut p, 1);
        assert!(matches!(
            read_query(&mut Io::new(&p[..]), 54412, &mut Mem::unbounded().charge()).await,
            Err(QueryError::UnknownSetting(_))
        ));
    }

    #[tokio::test]
    async fn invalid_utf8_in_text_and_settings_goes_to_the_backend_as_it_came() {
        for bad in [&b"\xff"[..], b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"a\x80b\xc0\xaf"] {
            let mut sql = b"SELECT length('".to_vec();
            sql.extend_from_slice(bad);
            sql.extend_from_slice(b"')");
            let mut p = Vec::new();
            put_str(&mut p, b"qid");
            p.push(0); // no client info
            put_str(&mut p, b"format_csv_delimiter");
            put_str(&mut p, bad);
            put_str(&mut p, b"");
            put_varuint(&mut p, 2);
            put_varuint(&mut p, 0);
            put_str(&mut p, &sql);
            let q = read_query(&mut Io::new(&p[..]), 54412, &mut Mem::unbounded().charge()).await.unwrap();
            let mut out = Vec::new();
            backend_query(&mut out, &q, "qid", &q.settings, &q.sql.clone()).unwrap();
            assert_eq!(&out[1..], &p[..], "{bad:?}: the same bytes back");
        }
    }

    #[tokio::test]
    async fn a_query_packet_stops_at_the_connection_limit() {
        let budget = crate::mem::Budget::new(1 << 30);
        let mem = budget.conn(1 << 20);
        // Settings whose values add up to 4 MiB: refused within the first MiB.
        let mut p = Vec::new();
        put_str(&mut p, b"qid");
        p.push(0);
        for _ in 0..64 {
            put_str(&mut p, b"format_csv_delimiter");
            put_str(&mut p, &[b'x'; 64 << 10]);
        }
        let mut io = Io::new(&p[..]);
        let mut charge = mem.charge();
        let e = read_query(&mut io, 54412, &mut charge).await.unwrap_err();
        assert!(e.to_string().contains("limits.max_client_buffer"), "{e}");
        assert!(io.mem_error().is_some() && io.position() < (1 << 20) + (64 << 10), "{}", io.position());
        drop(charge);
        // Many small settings: each is charged its entry too.
        let mut p = Vec::new();
        put_str(&mut p, b"qid");
        p.push(0);
        for _ in 0..(1 << 16) {
            put_str(&mut p, b"max_threads");
            put_varuint(&mut p, 2);
        }
        let mut charge = mem.charge();
        assert!(read_query(&mut Io::new(&p[..]), 54412, &mut charge).await.is_err());
        drop(charge);
        assert_eq!((mem.used(), budget.used()), (0, 0));
    }
}
