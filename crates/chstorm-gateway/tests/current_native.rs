//! The native port against a replica that speaks as ClickHouse 26.9 does, where no current
//! server can run: a fake replica written from ClickHouse's sources, each step beside the file
//! it follows, and clients at revision 54460 (chstorm's own, and one written here that sends
//! what clickhouse-go v2 sends: string settings, query parameters, the Hello addendum).
//!
//! * Hello (`src/Server/TCPHandler.cpp`, `receiveHello` and `sendHello`): the server announces
//!   54492 (`DBMS_TCP_PROTOCOL_VERSION`, `src/Core/ProtocolDefines.h`) and writes the fields of
//!   the revision the two agree on, `min`; from 54458 the client's addendum (its quota key)
//!   follows (`receiveAddendum`).
//! * Query (`TCPHandler::receiveQuery`): `ClientInfo` (`src/Interpreters/ClientInfo.cpp`,
//!   `ClientInfo::read`), the settings as strings with flags from 54429, the interserver
//!   secret's hash from 54441, stage, compression, text, the parameters from 54459.
//! * The answer: a header block, ProfileEvents packets (`TCPHandler::sendProfileEvents`: never
//!   compressed, a block of `host_name`, `current_time`, `thread_id`, `type`, `name`, `value`),
//!   a data block, Progress with its elapsed time (`src/IO/Progress.cpp`), ProfileInfo,
//!   EndOfStream; each column of a block followed by its custom-serialization byte, 0
//!   (`src/Formats/NativeWriter.cpp`, from 54454).
//! * A `Variant(String, UInt64)` column with rows (a type the gateway cannot delimit): streamed
//!   through as the fake sent it.
//! * TablesStatusRequest (client packet 5, `TCPHandler::processTablesStatusRequest`) and its
//!   TablesStatusResponse (`src/Client/TablesStatus.cpp`).
//!
//! Each answer through the gateway is compared byte for byte with the fake's own.

use chstorm_proto::mem::Mem;
use chstorm_proto::native::packets::{self, client, rev, server, Progress};
use chstorm_proto::native::server::block::{skip_block, Scratch};
use chstorm_proto::native::server::packets::{read_client_hello, read_query, Query};
use chstorm_proto::native::wire::{put_str, put_varuint, Io};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// The revision ClickHouse 26.9 announces.
const SERVER_REVISION: u64 = 54492;
/// The highest revision whose fields the fake writes: it announces this one to a client that
/// would speak more (ClickHouse itself, offering 54492), so a client straight at it speaks
/// what the fake is faithful to, as with the gateway.
const FAITHFUL_UP_TO: u64 = 54460;
const WAIT: Duration = Duration::from_secs(10);

/// A block (BlockInfo, then the columns) at `revision`: `columns` of (name, type, data).
fn block(revision: u64, rows: u64, columns: &[(&str, &str, Vec<u8>)]) -> Vec<u8> {
    let mut b = vec![1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0];
    put_varuint(&mut b, columns.len() as u64);
    put_varuint(&mut b, rows);
    for (name, ty, data) in columns {
        put_str(&mut b, name.as_bytes());
        put_str(&mut b, ty.as_bytes());
        if revision >= rev::CUSTOM_SERIALIZATION {
            b.push(0);
        }
        b.extend_from_slice(data);
    }
    b
}

fn data_packet(code: u64, revision: u64, rows: u64, columns: &[(&str, &str, Vec<u8>)]) -> Vec<u8> {
    let mut p = Vec::new();
    put_varuint(&mut p, code);
    put_str(&mut p, b"");
    let b = block(revision, rows, columns);
    if code != server::PROFILE_EVENTS && COMPRESS.with(|c| c.get()) {
        p.extend_from_slice(&frame(&b));
    } else {
        p.extend_from_slice(&b);
    }
    p
}

thread_local! {
    /// The Query packet asked for compressed blocks (its compression flag): Data blocks go in
    /// frames (`CompressedWriteBuffer`), ProfileEvents never.
    static COMPRESS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `data` in one uncompressed frame (method 0x02), as ClickHouse's `CompressedWriteBuffer`
/// writes it: the CityHash128 (v1.0.2) of the rest (its two halves as `cityhash-rs` names them,
/// high then low), then the method byte, the
/// frame's size with its 9-byte header and the data's size, then the data.
fn frame(data: &[u8]) -> Vec<u8> {
    let mut rest = vec![0x02];
    rest.extend_from_slice(&((data.len() + 9) as u32).to_le_bytes());
    rest.extend_from_slice(&(data.len() as u32).to_le_bytes());
    rest.extend_from_slice(data);
    let hash = cityhash_rs::cityhash_102_128(&rest);
    let mut out = ((hash >> 64) as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&(hash as u64).to_le_bytes());
    out.extend_from_slice(&rest);
    out
}

/// A ProfileEvents packet of one event (`ProfileEventsExt.cpp`'s columns).
fn profile_events(revision: u64) -> Vec<u8> {
    let mut host = Vec::new();
    put_str(&mut host, b"fake");
    let mut name = Vec::new();
    put_str(&mut name, b"SelectedRows");
    data_packet(
        server::PROFILE_EVENTS,
        revision,
        1,
        &[
            ("host_name", "String", host),
            ("current_time", "DateTime", 1_764_583_200u32.to_le_bytes().to_vec()),
            ("thread_id", "UInt64", 7u64.to_le_bytes().to_vec()),
            ("type", "Enum8('increment' = 1, 'gauge' = 2)", vec![1]),
            ("name", "String", name),
            ("value", "Int64", 1i64.to_le_bytes().to_vec()),
        ],
    )
}

/// The answer to a query at `revision`: one column `x` of type `ty`, as 26.9 frames it.
fn answer(revision: u64, ty: &str, rows: u64, data: Vec<u8>) -> Vec<u8> {
    answer_named(revision, "x", ty, rows, data)
}

/// [`answer`] with the column named `name`.
fn answer_named(revision: u64, name: &str, ty: &str, rows: u64, data: Vec<u8>) -> Vec<u8> {
    let x = name;
    let mut out = data_packet(server::DATA, revision, 0, &[(x, ty, Vec::new())]);
    out.extend_from_slice(&profile_events(revision));
    out.extend_from_slice(&data_packet(server::DATA, revision, rows, &[(x, ty, data)]));
    Progress { rows, bytes: 8 * rows, total_rows: rows, elapsed_ns: 120_000, ..Progress::default() }
        .encode(&mut out, revision);
    put_varuint(&mut out, server::PROFILE_INFO);
    out.extend_from_slice(&[1, 1, 8, 0, 0, 0]);
    out.extend_from_slice(&profile_events(revision));
    put_varuint(&mut out, server::END_OF_STREAM);
    out
}

fn strings(values: &[&str]) -> Vec<u8> {
    let mut d = Vec::new();
    values.iter().for_each(|v| put_str(&mut d, v.as_bytes()));
    d
}

/// What the fake saw.
#[derive(Default)]
struct Seen {
    queries: AtomicUsize,
    settings: std::sync::Mutex<Vec<(String, String)>>,
}

/// The answer the fake gives to query `q`: settings asked for by name (`getSetting('x')`) come
/// back as the value the Query packet carried; `{p:String}` as the parameter's bytes (as they
/// came: a Field dump, `'value'`); `variant` as a Variant column.
fn answer_to(revision: u64, q: &Query) -> Vec<u8> {
    if let Some(name) = q.sql.strip_prefix("SELECT getSetting('").and_then(|r| r.strip_suffix("')")) {
        let v = q.settings.iter().rev().find(|(k, _)| k == name).map_or("(unset)", |(_, v)| v.as_str());
        return answer(revision, "String", 1, strings(&[v]));
    }
    if q.sql.contains("{p:String}") {
        let raw = String::from_utf8_lossy(&q.parameters_raw).into_owned();
        return answer(revision, "String", 1, strings(&[&raw]));
    }
    if q.sql.contains("variant") {
        // Variant(String, UInt64): its discriminators' prefix, the discriminators, then each
        // variant's rows (`SerializationVariant`): bytes the gateway cannot delimit.
        let mut d = 0u64.to_le_bytes().to_vec();
        d.extend_from_slice(&[0, 1, 0]);
        d.extend_from_slice(&strings(&["a", "b"]));
        d.extend_from_slice(&42u64.to_le_bytes());
        return answer(revision, "Variant(String, UInt64)", 3, d);
    }
    if q.sql.starts_with("DESC") {
        // `DESCRIBE TABLE system.one`, as ClickHouse's `remote()` asks a table's structure first
        // (`getStructureOfRemoteTable`): name, type and five empty columns.
        let col = |v: &str| ("c", "String", strings(&[v]));
        let mut out = data_packet(server::DATA, revision, 0, &[("name", "String", Vec::new())]);
        out.extend_from_slice(&data_packet(
            server::DATA,
            revision,
            1,
            &[
                ("name", "String", strings(&["dummy"])),
                ("type", "String", strings(&["UInt8"])),
                ("default_type", col("").1, col("").2),
                ("default_expression", "String", strings(&[""])),
                ("comment", "String", strings(&[""])),
                ("codec_expression", "String", strings(&[""])),
                ("ttl_expression", "String", strings(&[""])),
            ],
        ));
        out.extend_from_slice(&profile_events(revision));
        put_varuint(&mut out, server::END_OF_STREAM);
        return out;
    }
    if q.sql.contains("system.one") || q.sql.contains("`one`") {
        return answer_named(revision, "dummy", "UInt8", 1, vec![0]);
    }
    answer(revision, "UInt8", 1, vec![1])
}

async fn serve(tcp: TcpStream, seen: Arc<Seen>) -> Option<()> {
    let mut io = Io::new(tcp);
    let hello = read_client_hello(&mut io).await.ok()?;
    let announced = if hello.revision > FAITHFUL_UP_TO { FAITHFUL_UP_TO } else { SERVER_REVISION };
    let revision = hello.revision.min(announced);
    let mut out = Vec::new();
    put_varuint(&mut out, server::HELLO);
    put_str(&mut out, b"ClickHouse");
    put_varuint(&mut out, 26);
    put_varuint(&mut out, 9);
    put_varuint(&mut out, announced);
    put_str(&mut out, b"UTC");
    put_str(&mut out, b"fake");
    put_varuint(&mut out, 1);
    io.write_all(&out).await.ok()?;
    if revision >= rev::ADDENDUM {
        io.skip_string().await.ok()?; // quota key
    }
    let mut scratch = Scratch::default();
    loop {
        match io.varuint().await.ok()? {
            client::PING => io.write_all(&[server::PONG as u8]).await.ok()?,
            client::TABLES_STATUS_REQUEST => {
                let n = io.varuint().await.ok()?;
                let mut out = Vec::new();
                put_varuint(&mut out, server::TABLES_STATUS_RESPONSE);
                put_varuint(&mut out, n);
                for _ in 0..n {
                    let (db, table) = (io.string().await.ok()?, io.string().await.ok()?);
                    put_str(&mut out, db.as_bytes());
                    put_str(&mut out, table.as_bytes());
                    out.push(1); // replicated
                    put_varuint(&mut out, 3); // absolute_delay
                }
                io.write_all(&out).await.ok()?;
            }
            client::QUERY => {
                let q = read_query(&mut io, revision, &mut Mem::unbounded().charge()).await.ok()?;
                seen.queries.fetch_add(1, Ordering::SeqCst);
                seen.settings.lock().unwrap().extend(q.settings.iter().cloned());
                // The client's scalars and data, to its empty data block (`receivePacketsExpectData`).
                loop {
                    let code = io.varuint().await.ok()?;
                    if code != client::DATA && code != client::SCALAR {
                        return None;
                    }
                    io.skip_string().await.ok()?;
                    let shape =
                        skip_block(&mut io, revision, q.compression, &mut scratch, &Mem::unbounded()).await.ok()?;
                    if code == client::DATA && shape.is_empty() {
                        break;
                    }
                }
                COMPRESS.with(|c| c.set(q.compression));
                let answer = answer_to(revision, &q);
                io.write_all(&answer).await.ok()?;
            }
            _ => return None,
        }
    }
}

/// A fake replica: (its HTTP base URL, its native address, what it saw). Its HTTP side answers
/// `/ping` and `SELECT version()` as 26.9 does.
async fn fake() -> (String, String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let native = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let native_addr = native.local_addr().unwrap().to_string();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = native.accept().await {
            tokio::spawn(serve(tcp, s.clone()));
        }
    });
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", http.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in http.incoming().flatten() {
            std::thread::spawn(move || {
                chstorm_testenv::serve_http(conn, |head| {
                    let body = if head.starts_with("get /ping") { "Ok.\n" } else { "26.9.1.1\n" };
                    (format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes(), true)
                })
            });
        }
    });
    (base, native_addr, seen)
}

/// A gateway config in `dir` over the fake at `base` (HTTP) and `native`: its path.
fn config(dir: &std::path::Path, base: &str, native: &str) -> std::path::PathBuf {
    let cfg = dir.join("gw.yaml");
    let text = format!(
        "listen: 127.0.0.1:0\nlisten_native: 127.0.0.1:0\nclusters:\n  c:\n    shards:\n      - replicas: [{base}]\n        native: [{native}]\nusers:\n  - name: default\n    networks: [127.0.0.0/8]\n    cluster: c\n"
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// A client at revision 54460 (what clickhouse-go v2 speaks) on `addr`.
struct Client {
    io: Io<TcpStream>,
    revision: u64,
}

impl Client {
    async fn open(addr: &str) -> Client {
        let mut io = Io::new(TcpStream::connect(addr).await.unwrap());
        let mut hello = Vec::new();
        packets::write_hello(&mut hello, "", "default", "");
        io.write_all(&hello).await.unwrap();
        let info = tokio::time::timeout(WAIT, packets::read_server_hello(&mut io)).await.unwrap().unwrap();
        let revision = info.revision.min(chstorm_proto::native::CLIENT_REVISION);
        let mut addendum = Vec::new();
        packets::write_addendum(&mut addendum, revision, "");
        io.write_all(&addendum).await.unwrap();
        Client { io, revision }
    }

    /// Sends `sql` with string `settings` and `params` (name, Field dump) as clickhouse-go does,
    /// and reads the answer to its end: its bytes.
    async fn query(&mut self, sql: &str, settings: &[(&str, &str)], params: &[(&str, &str)]) -> Vec<u8> {
        let r = self.revision;
        let mut q = Vec::new();
        put_varuint(&mut q, client::QUERY);
        put_str(&mut q, b"");
        q.extend_from_slice(&packets::client_info(r));
        for (k, v) in settings {
            put_str(&mut q, k.as_bytes());
            put_varuint(&mut q, 0);
            put_str(&mut q, v.as_bytes());
        }
        put_str(&mut q, b"");
        put_str(&mut q, b""); // interserver secret
        put_varuint(&mut q, 2);
        put_varuint(&mut q, 0);
        put_str(&mut q, sql.as_bytes());
        for (k, v) in params {
            put_str(&mut q, k.as_bytes());
            put_varuint(&mut q, 2); // custom
            put_str(&mut q, v.as_bytes());
        }
        put_str(&mut q, b"");
        q.extend_from_slice(&packets::empty_data(r));
        self.io.write_all(&q).await.unwrap();
        tokio::time::timeout(WAIT, self.read_to_end()).await.expect("an answer to its end")
    }

    /// Reads a TablesStatusResponse of one replicated table (18 bytes for `default.items`).
    async fn read_status(&mut self) -> Vec<u8> {
        tokio::time::timeout(WAIT, async {
            let mut got = Vec::new();
            while got.len() < 18 {
                self.io.fill_some().await.unwrap();
                got.extend_from_slice(self.io.buffered());
                let n = self.io.buffered().len();
                self.io.consume(n);
            }
            got
        })
        .await
        .unwrap()
    }

    /// Reads bytes until the answer's end: every answer of the fake ends with a ProfileEvents
    /// packet whose last value is the Int64 1, then EndOfStream.
    async fn read_to_end(&mut self) -> Vec<u8> {
        let mut got = Vec::new();
        loop {
            self.io.fill_some().await.unwrap();
            got.extend_from_slice(self.io.buffered());
            let n = self.io.buffered().len();
            self.io.consume(n);
            if got.ends_with(&[1, 0, 0, 0, 0, 0, 0, 0, server::END_OF_STREAM as u8]) {
                return got;
            }
        }
    }
}

#[test]
fn a_current_replica_s_revision_is_spoken_end_to_end() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (base, native, seen) = fake().await;
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), &base, &native);
        let gw = chstorm_gateway::Gateway::start(cfg).await.unwrap();
        let through = gw.native_addr.unwrap().to_string();

        // The gateway announces 54460 over a 54492 replica; the client speaks it.
        let mut g = Client::open(&through).await;
        let mut d = Client::open(&native).await;
        assert_eq!((g.revision, d.revision), (54460, 54460));

        // A plain read, ProfileEvents and all, byte for byte.
        assert_eq!(g.query("SELECT 1", &[], &[]).await, d.query("SELECT 1", &[], &[]).await);
        // Settings no 18.16 knows, as strings: they reach the replica.
        for (name, value) in [("async_insert", "1"), ("enable_analyzer", "0"), ("max_threads", "auto")] {
            let sql = format!("SELECT getSetting('{name}')");
            let (a, b) = (g.query(&sql, &[(name, value)], &[]).await, d.query(&sql, &[(name, value)], &[]).await);
            assert_eq!(a, b, "{name}");
            assert!(seen.settings.lock().unwrap().iter().any(|(k, v)| k == name && v == value), "{name}");
        }
        // A Variant column streams through; the session goes on after it.
        let before = seen.queries.load(Ordering::SeqCst);
        assert_eq!(g.query("SELECT variant", &[], &[]).await, d.query("SELECT variant", &[], &[]).await);
        assert_eq!(seen.queries.load(Ordering::SeqCst) - before, 2, "once each: not run again");
        assert_eq!(g.query("SELECT 1", &[], &[]).await, d.query("SELECT 1", &[], &[]).await);
        // Query parameters reach the replica as they came.
        let sql = "SELECT {p:String}";
        let (a, b) = (g.query(sql, &[], &[("p", "'x y'")]).await, d.query(sql, &[], &[("p", "'x y'")]).await);
        assert_eq!(a, b);
        assert!(String::from_utf8_lossy(&a).contains("'x y'"), "{a:?}");
        // TablesStatusRequest: the replica's answer.
        let mut req = vec![client::TABLES_STATUS_REQUEST as u8, 1];
        put_str(&mut req, b"default");
        put_str(&mut req, b"items");
        g.io.write_all(&req).await.unwrap();
        d.io.write_all(&req).await.unwrap();
        let (a, b) = (g.read_status().await, d.read_status().await);
        assert_eq!(a, b);
        assert_eq!(a[0], server::TABLES_STATUS_RESPONSE as u8);
        // chstorm's own client (bench's) at 54460 through the gateway.
        let target = chstorm_proto::Target::parse(&format!("clickhouse://{through}")).unwrap();
        let connector =
            chstorm_proto::stream::Connector::new(&target, &chstorm_proto::TlsOptions::default(), WAIT).unwrap();
        let mut c = chstorm_proto::native::NativeConn::connect(&connector, &target, WAIT).await.unwrap();
        assert_eq!(c.revision(), 54460);
        let rows = c.query_rows("", "SELECT 1", WAIT).await.unwrap();
        assert_eq!(rows, vec![vec!["1".to_string()]]);
        gw.stop();
    });
}

/// clickhouse-go v2's test client (`scripts/install-deps` builds it into target/test-clients).
fn chgo() -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-clients/chgo");
    p.exists().then_some(p)
}

/// What clickhouse-go prints for `sql` with `args` on the native port `addr`: (stdout, success).
fn go_query(bin: &std::path::Path, addr: &str, args: &[&str], sql: &str) -> (String, bool) {
    let out = std::process::Command::new("timeout")
        .arg("60")
        .arg(bin)
        .args(["-protocol", "native", "-addr", addr])
        .args(args)
        .args(["-query", sql])
        .output()
        .unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.success())
}

#[test]
fn clickhouse_go_through_the_gateway_as_straight_at_a_current_replica() {
    let Some(bin) = chgo() else {
        eprintln!("skipped: clickhouse-go's test client is not built (scripts/install-deps builds it)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (gw, native, seen) = rt.block_on(async {
        let (base, native, seen) = fake().await;
        let cfg = config(dir.path(), &base, &native);
        (chstorm_gateway::Gateway::start(cfg).await.unwrap(), native, seen)
    });
    let through = gw.native_addr.unwrap().to_string();
    let cases: [(&[&str], &str, &str); 4] = [
        (&[], "SELECT 1", "1\n"),
        (&["-setting", "async_insert=1"], "SELECT getSetting('async_insert')", "1\n"),
        (&["-setting", "enable_analyzer=1"], "SELECT getSetting('enable_analyzer')", "1\n"),
        (&["-param", "p=x y"], "SELECT {p:String}", "x y"),
    ];
    for (args, sql, want) in cases {
        let (a, b) = (go_query(&bin, &native, args, sql), go_query(&bin, &through, args, sql));
        assert!(a.1 && a.0.contains(want), "{sql} straight at the fake: {}", a.0);
        assert_eq!(a, b, "{sql} {args:?}");
    }
    assert!(seen.settings.lock().unwrap().iter().any(|(k, v)| k == "enable_analyzer" && v == "1"));
    rt.block_on(async { gw.stop() });
}

/// ClickHouse 26.9 itself (chdb-core, `scripts/install-deps` installs it into target/test-clients).
fn chdb() -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-clients/py/bin/python");
    p.exists().then_some(p)
}

/// What 26.9's `remote()` to `addr` answers for `system.one`, or its error: its output.
fn remote_one(python: &std::path::Path, addr: &str) -> String {
    let script = format!(
        "import chdb\ntry:\n    print(chdb.query(\"SELECT dummy FROM remote('{addr}', system.one)\", 'TSV'), end='')\nexcept Exception as e:\n    print('ERROR', str(e).split('. ')[0])\n"
    );
    let out = std::process::Command::new("timeout").arg("120").arg(python).args(["-c", &script]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn clickhouse_26_9_s_remote_through_the_gateway_as_straight_at_a_current_replica() {
    let Some(python) = chdb() else {
        eprintln!("skipped: chdb-core is not installed (scripts/install-deps installs it)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (gw, native) = rt.block_on(async {
        let (base, native, _) = fake().await;
        let cfg = config(dir.path(), &base, &native);
        (chstorm_gateway::Gateway::start(cfg).await.unwrap(), native)
    });
    let through = gw.native_addr.unwrap().to_string();
    let (a, b) = (remote_one(&python, &native), remote_one(&python, &through));
    eprintln!("direct: {a}\nthrough the gateway: {b}");
    assert_eq!(a, "0\n", "straight at the fake");
    assert_eq!(b, a);
    rt.block_on(async { gw.stop() });
}
