//! A native session driven over an in-memory stream ([`tokio::io::duplex`]), no socket and no
//! ClickHouse: the gateway's real session code ([`super::session::serve_client`]) with a state
//! built from a config whose replicas are closed loopback ports, and the backends' Hello given
//! in advance, so only what needs no backend is asked: the Hello, refused logins, revisions,
//! Ping, `SET` kept in the session, and queries the plan refuses, each with ClickHouse's code.
//! The client side is `chstorm_proto`'s client codec.

use super::client::Shared;
use super::session::serve_client;
use crate::config::Config;
use crate::metrics::{Metrics, RequestLabels, UNKNOWN_USER};
use crate::runtime::drain::Drain;
use crate::state::State;
use arc_swap::ArcSwap;
use chstorm_proto::native::packets::{self as client_packets, read_exception, read_server_hello, server};
use chstorm_proto::native::server::packets::MIN_CLIENT_REVISION;
use chstorm_proto::native::wire::{put_str, put_varuint, Io};
use chstorm_proto::native::ServerInfo;

/// The revision of the backends these tests fake (18.16's), so the sessions'.
const CLIENT_REVISION: u64 = 54412;
use chstorm_proto::ProtoError;
use sha2::Digest;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::task::JoinHandle;

/// Longest wait for any answer of the session: none of them needs a backend.
const WAIT: Duration = Duration::from_secs(10);

/// The backends' Hello the gateway tells its clients (as if fetched from a replica); an 18.16
/// replica's Hello, for the transport's tests too.
pub(super) fn backend_info() -> ServerInfo {
    ServerInfo {
        name: "ClickHouse".into(),
        version_major: 18,
        version_minor: 16,
        version_patch: 1,
        revision: 54412,
        timezone: "UTC".into(),
        display_name: "node1".into(),
    }
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One cluster on closed ports; users: `default` (no password), `pw` (password `secret`),
/// `ro` (read-only), `far` (allowed from 10.0.0.0/8 only).
fn config() -> Config {
    let (http, native) = (closed_port(), closed_port());
    let sha = hex::encode(sha2::Sha256::digest(b"secret"));
    let text = format!(
        "listen: 127.0.0.1:0\npool:\n  idle_timeout: 2s\nclusters:\n  storm:\n    shards:\n      - replicas: \
         [http://127.0.0.1:{http}]\n        native: [127.0.0.1:{native}]\nusers:\n  - name: default\n    cluster: \
         storm\n  - name: pw\n    cluster: storm\n    password_sha256: \"{sha}\"\n  - name: ro\n    cluster: storm\n    \
         readonly: true\n  - name: far\n    cluster: storm\n    networks: [10.0.0.0/8]\n"
    );
    Config::parse(&text, std::path::Path::new("t.yaml")).unwrap()
}

async fn shared() -> Arc<Shared> {
    let state = State::build(config(), Arc::new(Metrics::default())).await.unwrap();
    Arc::new(Shared {
        state: Arc::new(ArcSwap::from_pointee(state)),
        pool: super::backend::Pool::new(4),
        server_info: std::sync::Mutex::new(Some(backend_info())),
        drain: Arc::new(Drain::default()),
    })
}

/// The client's end of one session.
struct Client {
    io: Io<ReadHalf<DuplexStream>>,
    w: WriteHalf<DuplexStream>,
    session: JoinHandle<()>,
}

impl Client {
    /// Opens a session and sends a Hello at `revision` as `user`.
    async fn open(shared: &Arc<Shared>, revision: u64, user: &str, password: &str) -> Client {
        let (ours, theirs) = tokio::io::duplex(64 << 10);
        let peer = "127.0.0.1:40000".parse().unwrap();
        let session =
            tokio::spawn(serve_client(shared.clone(), async { Some(super::client_io::in_memory(theirs)) }, peer));
        let (r, w) = tokio::io::split(ours);
        let mut c = Client { io: Io::new(r), w, session };
        let mut hello = Vec::new();
        put_varuint(&mut hello, client_packets::client::HELLO);
        put_str(&mut hello, b"test client");
        put_varuint(&mut hello, 18);
        put_varuint(&mut hello, 16);
        put_varuint(&mut hello, revision);
        put_str(&mut hello, b"");
        put_str(&mut hello, user.as_bytes());
        put_str(&mut hello, password.as_bytes());
        c.send(hello).await;
        c
    }

    async fn send(&mut self, bytes: Vec<u8>) {
        tokio::time::timeout(WAIT, self.w.write_all(&bytes)).await.expect("the session reads").unwrap();
    }

    async fn hello(&mut self) -> Result<ServerInfo, ProtoError> {
        tokio::time::timeout(WAIT, read_server_hello(&mut self.io)).await.expect("an answer to the Hello")
    }

    /// Sends a Query packet (and the empty block that ends the client's data).
    async fn query(&mut self, sql: &str) {
        let mut out = Vec::new();
        client_packets::write_query(
            &mut out,
            &client_packets::client_info(CLIENT_REVISION),
            "q1",
            sql,
            CLIENT_REVISION,
        );
        out.extend_from_slice(&client_packets::empty_data(CLIENT_REVISION));
        self.send(out).await;
    }

    async fn ping(&mut self) {
        self.send(vec![client_packets::client::PING as u8]).await;
    }

    /// The next packet's code, and for an Exception its (code, message).
    async fn answer(&mut self) -> (u64, Option<(i32, String)>) {
        let code = tokio::time::timeout(WAIT, self.io.varuint()).await.expect("an answer").unwrap();
        if code != server::EXCEPTION {
            return (code, None);
        }
        match read_exception(&mut self.io).await {
            ProtoError::Server { code: c, message, .. } => (code, Some((c, message))),
            other => panic!("not an exception: {other}"),
        }
    }

    async fn exception(&mut self) -> (i32, String) {
        match self.answer().await {
            (_, Some(e)) => e,
            (code, None) => panic!("packet {code}, not an exception"),
        }
    }

    /// The session ended: the stream is at its end and the session's task returned.
    async fn closed(mut self) {
        let left = tokio::time::timeout(WAIT, self.io.discard_to_eof()).await.expect("the session closes");
        assert!(left.is_ok(), "{left:?}");
        tokio::time::timeout(WAIT, self.session).await.expect("the session's task ends").unwrap();
    }
}

fn requests(shared: &Shared, user: &str, status: u16, route: &'static str) -> u64 {
    let state = shared.state.load();
    let n = state.metrics.requests.get_or_create(&RequestLabels { user: user.into(), status, route }).get();
    n
}

#[tokio::test]
async fn hello_and_ping_at_every_revision_served() {
    let shared = shared().await;
    for revision in [MIN_CLIENT_REVISION, 54410, CLIENT_REVISION, 54429, 54460] {
        let mut c = Client::open(&shared, revision, "default", "").await;
        let info = c.hello().await.unwrap_or_else(|e| panic!("revision {revision}: {e}"));
        // The gateway announces 54412 whatever the client's; read_server_hello takes the fields
        // a client at 54412 reads, and the session speaks min(client's, 54412).
        assert_eq!(info.revision, CLIENT_REVISION);
        let want = backend_info();
        assert_eq!(
            (info.version(), info.name, info.timezone, info.display_name),
            (want.version(), want.name, want.timezone, want.display_name)
        );
        for _ in 0..3 {
            c.ping().await;
            assert_eq!(c.answer().await, (server::PONG, None), "revision {revision}");
        }
        let Client { io, w, session } = c;
        drop((io, w));
        tokio::time::timeout(WAIT, session).await.expect("a client that leaves ends its session").unwrap();
    }
}

#[tokio::test]
async fn a_revision_below_54401_is_refused_at_its_hello() {
    let shared = shared().await;
    for revision in [0, 1, 54000, 54058, 54372, MIN_CLIENT_REVISION - 1] {
        let mut c = Client::open(&shared, revision, "default", "").await;
        match c.hello().await {
            Err(ProtoError::Server { code: 2, message, .. }) => assert_eq!(
                message,
                format!(
                    "DB::Exception: chstorm gateway: client revision {revision} is too old; at least 54401 is needed"
                )
            ),
            other => panic!("revision {revision}: {other:?}"),
        }
        c.closed().await;
    }
}

#[tokio::test]
async fn refused_logins_get_18_16s_codes_and_close() {
    let shared = shared().await;
    // (user, password, code): a wrong password and an unknown user alike 193 (the gateway does
    // not tell them apart), a network the user may not come from 195.
    let wrong = "DB::Exception: unknown user or wrong password";
    let cases = [
        ("pw", "", 193, wrong),
        ("pw", "Secret", 193, wrong),
        ("pw", "secret ", 193, wrong),
        ("default", "x", 193, wrong),
        ("nobody", "", 193, wrong),
        ("nobody", "secret", 193, wrong),
        ("far", "", 195, "DB::Exception: user 'far' may not connect from 127.0.0.1"),
    ];
    for (user, password, code, text) in cases {
        let mut c = Client::open(&shared, CLIENT_REVISION, user, password).await;
        match c.hello().await {
            Err(ProtoError::Server { code: got, message, .. }) => {
                assert_eq!((got, message.as_str()), (code, text), "{user}/{password}")
            }
            other => panic!("{user}/{password}: {other:?}"),
        }
        c.closed().await;
    }
    // Each counted once, as refused.
    assert_eq!(requests(&shared, UNKNOWN_USER, 401, "rejected"), 6);
    assert_eq!(requests(&shared, "far", 403, "rejected"), 1);
    // The right password is taken; the empty user is `default`.
    for (user, password) in [("pw", "secret"), ("", "")] {
        let mut c = Client::open(&shared, CLIENT_REVISION, user, password).await;
        c.hello().await.unwrap();
        c.ping().await;
        assert_eq!(c.answer().await, (server::PONG, None));
    }
}

#[tokio::test]
async fn set_is_kept_for_the_session_and_a_refused_set_changes_nothing() {
    let shared = shared().await;
    let mut c = Client::open(&shared, CLIENT_REVISION, "default", "").await;
    c.hello().await.unwrap();
    for sql in ["SET max_block_size = 77", "SET max_threads = 2, load_balancing = 'in_order'", "set extremes=1;"] {
        c.query(sql).await;
        assert_eq!(c.answer().await, (server::END_OF_STREAM, None), "{sql}");
    }
    // 18.16's own checks: a setting it does not know, a value not of its type.
    c.query("SET no_such_setting = 1").await;
    assert_eq!(c.exception().await.0, 115);
    c.query("SET max_threads = 'many'").await;
    assert_eq!(c.exception().await.0, 115);
    c.query("SET readonly = 7").await;
    assert_eq!(c.exception().await.0, 36);
    // readonly = 2 is kept: later settings may change, readonly may not.
    c.query("SET readonly = 2").await;
    assert_eq!(c.answer().await, (server::END_OF_STREAM, None));
    c.query("SET max_block_size = 9").await;
    assert_eq!(c.answer().await, (server::END_OF_STREAM, None));
    c.query("SET readonly = 0").await;
    let (code, msg) = c.exception().await;
    assert_eq!((code, msg.as_str()), (164, "DB::Exception: Cannot modify 'readonly' setting in readonly mode"));
    // The session still has readonly = 2 after that refusal; readonly = 1 in a new session
    // then locks every setting.
    c.query("SET readonly = 1").await;
    assert_eq!(c.exception().await.0, 164);
    c.ping().await;
    assert_eq!(c.answer().await, (server::PONG, None), "a refused SET keeps the session");
    let mut c = Client::open(&shared, CLIENT_REVISION, "default", "").await;
    c.hello().await.unwrap();
    c.query("SET readonly = 1").await;
    assert_eq!(c.answer().await, (server::END_OF_STREAM, None));
    for sql in ["SET max_block_size = 5", "SET readonly = 0", "SET extremes = 0"] {
        c.query(sql).await;
        let (code, msg) = c.exception().await;
        assert_eq!(code, 164, "{sql}: {msg}");
        assert!(msg.contains("in readonly mode"), "{msg}");
    }
    assert_eq!(requests(&shared, "default", 200, "session"), 6, "each SET taken counted once");
    assert_eq!(requests(&shared, "default", 400, "session"), 8, "each SET refused counted once");
}

#[tokio::test]
async fn a_read_only_users_writes_are_refused_with_code_164() {
    let shared = shared().await;
    let mut c = Client::open(&shared, CLIENT_REVISION, "ro", "").await;
    c.hello().await.unwrap();
    let writes = [
        "INSERT INTO t VALUES (1)",
        "insert into db.t select 1",
        "CREATE TABLE t (x UInt8) ENGINE = Memory",
        "CREATE TEMPORARY TABLE tt (x UInt8)",
        "DROP TABLE t",
        "ALTER TABLE t DELETE WHERE 1",
        "TRUNCATE TABLE t",
        "OPTIMIZE TABLE t",
        "RENAME TABLE a TO b",
        "  /* c */ DETACH TABLE t",
        "ATTACH TABLE t",
        "SYSTEM RELOAD DICTIONARIES",
    ];
    let before = requests(&shared, "ro", 403, "rejected");
    for sql in writes {
        c.query(sql).await;
        let (code, msg) = c.answer().await.1.unwrap_or_else(|| panic!("{sql}: no exception"));
        assert_eq!(code, 164, "{sql}: {msg}");
        assert_eq!(
            msg,
            "DB::Exception: user 'ro' is read-only: only SELECT, WITH, SHOW, DESCRIBE, EXISTS and EXPLAIN are allowed",
            "{sql}"
        );
    }
    assert_eq!(requests(&shared, "ro", 403, "rejected") - before, writes.len() as u64, "each counted once");
    // The plan's other refusals of a read-only user's text (a SETTINGS clause, a table function
    // that reads elsewhere) are read-only matters too (164); KILL is refused for every user, and
    // not as a read-only matter (497, ACCESS_DENIED).
    for (sql, code) in [
        ("SELECT 1 SETTINGS max_threads = 1", 164),
        ("SELECT * FROM remote('127.0.0.2', system.one)", 164),
        ("select * from url('http://127.0.0.1:1/', CSV, 'x UInt8')", 164),
        ("KILL QUERY WHERE 1", 497),
    ] {
        c.query(sql).await;
        let (got, msg) = c.exception().await;
        assert_eq!(got, code, "{sql}: {msg}");
    }
    // Refusals keep the session.
    c.ping().await;
    assert_eq!(c.answer().await, (server::PONG, None));
}

/// A Query packet from its parts: `kind` the ClientInfo's query kind (1 initial, 2 secondary),
/// `settings` already typed, then the empty block that ends the client's data.
fn query_packet(kind: u8, settings: &[u8], sql: &str) -> Vec<u8> {
    let mut info = client_packets::client_info(CLIENT_REVISION);
    info[0] = kind;
    let mut out = Vec::new();
    put_varuint(&mut out, client_packets::client::QUERY);
    put_str(&mut out, b"q2");
    out.extend_from_slice(&info);
    out.extend_from_slice(settings);
    put_str(&mut out, b"");
    put_varuint(&mut out, 2);
    put_varuint(&mut out, 0);
    put_str(&mut out, sql.as_bytes());
    out.extend_from_slice(&client_packets::empty_data(CLIENT_REVISION));
    out
}

#[tokio::test]
async fn queries_refused_before_any_backend_keep_or_end_the_session_as_18_16_does() {
    let shared = shared().await;
    let mut c = Client::open(&shared, CLIENT_REVISION, "default", "").await;
    c.hello().await.unwrap();
    // USE without one database name: a syntax error (62); the session goes on.
    for sql in ["USE", "USE ;", "use a b", "USE `a` `b`"] {
        c.query(sql).await;
        let (code, msg) = c.exception().await;
        assert_eq!(code, 62, "{sql}: {msg}");
        assert!(msg.starts_with("DB::Exception: Syntax error: USE needs one database name"), "{msg}");
    }
    // A query of a kind beyond secondary (3) is not served (48); the session goes on. (A
    // secondary query goes on as an initial one.)
    c.send(query_packet(3, &[], "SELECT 1")).await;
    assert_eq!(c.exception().await.0, 48);
    // Settings in the Query packet are read typed and the session stays in step.
    let mut typed = Vec::new();
    chstorm_proto::native::server::typed_settings::put_setting(&mut typed, "load_balancing", "random").unwrap();
    c.send(query_packet(1, &typed, "SET max_threads = 2")).await;
    assert_eq!(c.answer().await, (server::END_OF_STREAM, None), "a SET with settings in its packet");
    c.ping().await;
    assert_eq!(c.answer().await, (server::PONG, None));
    assert_eq!(requests(&shared, "default", 400, "rejected"), 5);
    // A setting 18.16 does not know: its value cannot be skipped, so 115 and the session ends.
    let mut unknown = Vec::new();
    put_str(&mut unknown, b"no_such_setting");
    put_varuint(&mut unknown, 1);
    c.send(query_packet(1, &unknown, "SELECT 1")).await;
    let (code, msg) = c.exception().await;
    assert_eq!((code, msg.as_str()), (115, "DB::Exception: Unknown setting no_such_setting"));
    c.closed().await;
}
