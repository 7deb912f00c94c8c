//! The native protocol client against a real clickhouse-server (started by chstorm-local).

use chstorm_local::{shared_server, shared_tls_server, LocalServer};
use chstorm_proto::native::{append_settings_clause, Cancelled, NativeConn, CLIENT_REVISION};
use chstorm_proto::stream::Connector;
use chstorm_proto::{ProtoError, Target, TlsOptions};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

/// Connects to `url`; server lookups happen outside the runtime (chstorm-local blocks).
async fn connect_url(url: &str, tls: &TlsOptions) -> Result<NativeConn, ProtoError> {
    let target = Target::parse(url)?;
    let connector = Connector::new(&target, tls, T)?;
    NativeConn::connect(&connector, &target, T).await
}

async fn connect(server: &LocalServer) -> NativeConn {
    connect_url(&server.info().native_url, &TlsOptions::default()).await.expect("native connect")
}

fn http(server: &LocalServer, sql: &str) -> String {
    server.query(sql).unwrap_or_else(|e| panic!("HTTP query {sql}: {e}")).trim_end().to_string()
}

#[test]
fn handshake_reports_the_server_version() {
    let server = shared_server();
    let http_version = http(server, "SELECT version()");
    rt().block_on(async {
        let conn = connect(server).await;
        let info = conn.server();
        assert_eq!(info.name, "ClickHouse");
        assert!(info.version_major >= 18, "{info:?}");
        assert!(info.revision > 0, "{info:?}");
        assert_eq!(conn.revision(), info.revision.min(CLIENT_REVISION));
        // 18.16.1 here; current releases print four parts over HTTP (24.3.1.2672).
        assert!(http_version.starts_with(&info.version()), "native {} vs HTTP {http_version}", info.version());
        eprintln!("server {} revision {} tz {:?}", info.version(), info.revision, info.timezone);
    });
}

#[test]
fn select_one_and_ping() {
    let server = shared_server();
    rt().block_on(async {
        let mut conn = connect(server).await;
        let stats = conn.query("", "SELECT 1", T).await.unwrap();
        assert_eq!(stats.rows, 1);
        assert!(stats.bytes > 0);
        conn.ping(T).await.unwrap();
        assert_eq!(conn.query_rows("", "SELECT 1", T).await.unwrap(), vec![vec!["1".to_string()]]);
        conn.ping(T).await.unwrap();
        let empty = conn.query("", "SELECT 1 WHERE 0", T).await.unwrap();
        assert_eq!(empty.rows, 0);
    });
}

#[test]
fn counts_rows_of_many_column_types() {
    let server = shared_server();
    rt().block_on(async {
        let mut conn = connect(server).await;
        let sql = "SELECT number, toString(number), [number], toNullable(number), toFixedString('ab', 2), \
                   toDate('2020-01-01'), now(), toDecimal64(1.5, 2), \
                   toUUID('00000000-0000-0000-0000-000000000001'), toLowCardinality(toString(number % 3)), \
                   tuple(number, 'x') FROM numbers(100000)";
        let stats = conn.query("", sql, T).await.unwrap();
        assert_eq!(stats.rows, 100_000);
        assert!(stats.bytes > 100_000 * 40, "{stats:?}");

        let sql =
            "SELECT [toLowCardinality(toString(number % 5))], toLowCardinality(toNullable(toString(number % 7))), \
                   if(number % 2 = 0, NULL, toString(number)), [[number], []], ['a', NULL], \
                   toLowCardinality(number % 10), CAST(number % 2 + 1 AS Enum8('a' = 1, 'b' = 2)), \
                   toDateTime('2020-01-01 00:00:00', 'UTC'), toInt8(-1), toFloat32(0.5), NULL, [] \
                   FROM numbers(70000)";
        let stats = conn.query("", sql, T).await.unwrap();
        assert_eq!(stats.rows, 70_000);

        // Totals and extremes are not result rows.
        let sql = "SELECT number % 2 AS k, count() FROM numbers(10) GROUP BY k WITH TOTALS SETTINGS extremes = 1";
        assert_eq!(conn.query("", sql, T).await.unwrap().rows, 2);
        assert_eq!(conn.query("", "SELECT 1", T).await.unwrap().rows, 1);
    });
}

#[test]
fn query_rows_decodes_like_the_http_interface() {
    let server = shared_server();
    let sql = "SELECT number, toString(number * 3), toInt32(number) - 5, toFloat64(number) / 4, \
               toFixedString('ab', 2), toDate('2020-01-01') + number, toDecimal64(number, 2) / 3, \
               toUUID('01234567-89ab-cdef-0123-456789abcdef'), toLowCardinality(toString(number % 3)), \
               CAST(number % 2 + 1 AS Enum8('a' = 1, 'b' = 2)), toUInt8(number) = 1, \
               toUnixTimestamp(toDateTime('2020-01-01 00:00:00', 'UTC')) \
               FROM numbers(5)";
    let expected: Vec<Vec<String>> =
        http(server, sql).lines().map(|l| l.split('\t').map(str::to_string).collect()).collect();
    let nulls = "SELECT toNullable(1), CAST(NULL AS Nullable(String)), toLowCardinality(toNullable('x')), \
                 toDateTime('2020-01-01 00:00:00', 'UTC')";
    rt().block_on(async {
        let mut conn = connect(server).await;
        let rows = conn.query_rows("", sql, T).await.unwrap();
        assert_eq!(rows, expected);
        let rows = conn.query_rows("", nulls, T).await.unwrap();
        assert_eq!(rows, vec![vec!["1", "NULL", "x", "1577836800"]]);
        match conn.query_rows("", "SELECT [1]", T).await {
            Err(ProtoError::Protocol(m)) => assert!(m.contains("Array(UInt8)"), "{m}"),
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn server_errors_keep_the_connection() {
    let server = shared_server();
    rt().block_on(async {
        let mut conn = connect(server).await;
        // A syntax error fails before the server reads the client's data block: old servers
        // then go out of step, and the client must notice and recover.
        let queries = ["SELECT no_such_column", "SELECT * FROM no_such_table_xyz", "SELEKT 1", "SELEKT 2"];
        for (i, sql) in queries.iter().enumerate() {
            match conn.query("", sql, T).await {
                Err(e @ ProtoError::Server { .. }) => {
                    assert!(!e.breaks_connection());
                    let ProtoError::Server { code, name, message } = &e else { unreachable!() };
                    assert!([47, 60, 62].contains(code), "{sql}: {e}");
                    assert!(name.contains("Exception"), "{name}");
                    assert!(!message.is_empty());
                }
                other => panic!("{sql}: {other:?}"),
            }
            assert!(conn.is_usable());
            let check = format!("SELECT {i}");
            assert_eq!(conn.query_rows("", &check, T).await.unwrap(), vec![vec![i.to_string()]], "after {sql}");
        }
        eprintln!("reconnects after early errors: {}", conn.reconnects());
        assert!(conn.reconnects() <= 2);
        // An exception after data blocks were sent.
        let sql = "SELECT throwIf(number = 99999) FROM numbers(100000) SETTINGS max_block_size = 1000";
        assert!(matches!(conn.query("", sql, T).await, Err(ProtoError::Server { code: 395, .. })));
        assert_eq!(conn.query("", "SELECT 1", T).await.unwrap().rows, 1);
    });
}

#[test]
fn wrong_query_code_is_47_or_62() {
    let server = shared_server();
    rt().block_on(async {
        let mut conn = connect(server).await;
        let err = conn.query("", "SELECT nonexistent_column_xyz", T).await.unwrap_err();
        assert!(matches!(err, ProtoError::Server { code: 47 | 62, .. }), "{err}");
        assert_eq!(conn.query("", "SELECT 1", T).await.unwrap().rows, 1);
    });
}

#[test]
fn bad_password_is_a_server_error() {
    let server = shared_server();
    let url = server.info().native_url.replace("clickhouse://", "clickhouse://default:wrong@");
    rt().block_on(async {
        match connect_url(&url, &TlsOptions::default()).await {
            Err(ProtoError::Server { code, .. }) => assert!([192, 193, 516].contains(&code), "{code}"),
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("wrong password accepted"),
        }
    });
}

#[test]
fn settings_clause_takes_effect() {
    let server = shared_server();
    rt().block_on(async {
        let mut conn = connect(server).await;
        let sql = "SELECT throwIf(value != '1') FROM system.settings WHERE name = 'max_threads'";
        let with = append_settings_clause(sql, &[("max_threads".into(), "1".into())]);
        assert_ne!(with, sql);
        assert_eq!(conn.query("", &with, T).await.unwrap().rows, 1);
        assert!(matches!(conn.query("", sql, T).await, Err(ProtoError::Server { .. })));
        // A string-typed setting value and a FORMAT clause.
        let sql = "SELECT value FROM system.settings WHERE name = 'load_balancing' FORMAT TabSeparated";
        let with = append_settings_clause(sql, &[("load_balancing".into(), "in_order".into())]);
        assert_eq!(conn.query_rows("", &with, T).await.unwrap(), vec![vec!["in_order".to_string()]]);
    });
}

#[test]
fn query_id_is_honoured() {
    let server = shared_server();
    let id = format!("chstorm-native-test-{}", std::process::id());
    rt().block_on(async {
        let mut conn = connect(server).await;
        conn.query(&id, "SELECT 42", T).await.unwrap();
    });
    http(server, "SYSTEM FLUSH LOGS");
    let n: u64 =
        http(server, &format!("SELECT count() FROM system.query_log WHERE query_id = '{id}'")).parse().unwrap();
    assert!(n >= 1, "query {id} not in query_log");
    let client =
        http(server, &format!("SELECT any(client_name), any(interface) FROM system.query_log WHERE query_id = '{id}'"));
    assert_eq!(client, "chstorm\t1");
}

#[test]
fn tls_connection_answers() {
    let server = shared_tls_server();
    let url = server.info().native_tls_url.clone().expect("TLS server has a native TLS URL");
    let ca = server.info().ca_cert.clone().expect("TLS server has a CA certificate");
    rt().block_on(async {
        for tls in
            [TlsOptions { insecure: false, ca_file: Some(ca.clone()) }, TlsOptions { insecure: true, ca_file: None }]
        {
            let mut conn = connect_url(&url, &tls).await.expect("TLS connect");
            assert_eq!(conn.query("", "SELECT 1", T).await.unwrap().rows, 1);
            let stats = conn.query("", "SELECT toString(number) FROM numbers(200000)", T).await.unwrap();
            assert_eq!(stats.rows, 200_000);
            conn.ping(T).await.unwrap();
        }
    });
}

#[test]
fn timeout_is_quick_and_breaks_the_connection() {
    let server = shared_server();
    rt().block_on(async {
        let mut conn = connect(server).await;
        let started = Instant::now();
        let err = conn.query("", "SELECT sleep(2)", Duration::from_millis(300)).await.unwrap_err();
        assert!(matches!(err, ProtoError::Timeout(..)), "{err:?}");
        assert!(err.breaks_connection());
        assert!(started.elapsed() < Duration::from_millis(1500), "{:?}", started.elapsed());
        assert!(conn.query("", "SELECT 1", T).await.is_err());
    });
}

#[test]
fn closed_port_is_a_connect_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    rt().block_on(async {
        match connect_url(&format!("clickhouse://127.0.0.1:{port}"), &TlsOptions::default()).await {
            Err(ProtoError::Connect { .. }) => {}
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("connected to a closed port"),
        }
    });
}

#[test]
fn unsupported_type_is_a_protocol_error() {
    let server = shared_server();
    rt().block_on(async {
        let mut conn = connect(server).await;
        match conn.query("", "SELECT uniqState(number) FROM numbers(10)", T).await {
            Err(e @ ProtoError::UnknownType(_)) => {
                assert!(e.to_string().contains("unsupported column type 'AggregateFunction(uniq, UInt64)'"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    });
}

/// How many queries with `marker` in their text the server runs, waiting up to 3 s for none.
fn running(server: &LocalServer, marker: &str) -> u64 {
    let sql = format!(
        "SELECT count() FROM system.processes WHERE query LIKE '%{marker}%' AND query NOT LIKE '%system.processes%'"
    );
    let t = Instant::now();
    loop {
        let n: u64 = http(server, &sql).parse().unwrap();
        if n == 0 || t.elapsed() > Duration::from_secs(3) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn cancel_stops_a_query_on_the_server() {
    let server = shared_server();
    let marker = format!("native_cancel_{}", std::process::id());
    let sql = format!("SELECT count() AS {marker} FROM system.numbers SETTINGS max_threads = 1");
    // A timed-out query, then an abandoned one (its future dropped mid-call). One runtime: a
    // connection lives in the runtime that opened it.
    let rt = rt();
    let conn = rt.block_on(async {
        let mut conn = connect(server).await;
        let r = conn.query("chstorm-test-cancel-1", &sql, Duration::from_millis(500)).await;
        assert!(matches!(r, Err(ProtoError::Timeout(..))), "{r:?}");
        assert!(conn.query_in_flight());
        let t = Instant::now();
        assert_eq!(
            conn.cancel(Duration::from_secs(5)).await,
            Cancelled::Stopped,
            "the server closed after the Cancel packet"
        );
        assert!(t.elapsed() < Duration::from_secs(3), "cancelled in {:?}", t.elapsed());
        let mut conn = connect(server).await;
        let _ = tokio::time::timeout(Duration::from_millis(300), conn.query("chstorm-test-cancel-2", &sql, T)).await;
        conn
    });
    assert_eq!(http(server, "SELECT count() FROM system.processes WHERE query_id = 'chstorm-test-cancel-1'"), "0");
    assert!(conn.query_in_flight(), "a dropped call leaves its query in flight");
    assert_eq!(rt.block_on(conn.cancel(Duration::from_secs(5))), Cancelled::Stopped);
    assert_eq!(running(server, &marker), 0, "both queries stopped on the server");
    // A connection with nothing in flight has nothing to cancel.
    rt.block_on(async {
        let mut conn = connect(server).await;
        conn.query("", "SELECT 1", T).await.unwrap();
        assert!(!conn.query_in_flight());
        assert_eq!(conn.cancel(Duration::from_secs(1)).await, Cancelled::Nothing);
    });
}

/// The server side's table of 18.16's settings is the live server's, in its order, and every
/// setting written in its type ([`put_setting`], what the gateway sends a backend) is read by
/// the server as that value: one Query packet carrying all of them at the server's own values,
/// whose query fails (`throwIf`) unless each came through as set. A type the table got wrong
/// puts the packet out of step and fails the query.
#[test]
fn typed_settings_are_18_16s_and_the_server_reads_them_as_written() {
    use chstorm_proto::native::server::typed_settings::NAMES_18_16;
    let server = shared_server();
    let version = http(server, "SELECT version()");
    if !version.starts_with("18.16.") {
        eprintln!("SKIP: the table is 18.16's; this server is {version}");
        return;
    }
    let live = http(server, "SELECT name, value FROM system.settings");
    let live: Vec<(String, String)> =
        live.lines().map(|l| l.split_once('\t').map(|(n, v)| (n.to_string(), v.to_string())).unwrap()).collect();
    let names: Vec<&str> = live.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(NAMES_18_16, names.as_slice(), "the table, in Settings.h order");
    rt().block_on(async {
        match send_typed_settings(server, &live).await {
            Ok(()) => {}
            Err(e) => panic!("{e}"),
        }
    });
}

/// Sends every setting of `live` at its value in one Query packet, typed; Ok when the server
/// reports each as changed to that value.
async fn send_typed_settings(server: &LocalServer, live: &[(String, String)]) -> Result<(), ProtoError> {
    use chstorm_proto::mem::Mem;
    use chstorm_proto::native::packets::{self, client, server as code};
    use chstorm_proto::native::server::block::{skip_block, Scratch};
    use chstorm_proto::native::server::typed_settings::put_setting;
    use chstorm_proto::native::wire::{put_str, put_varuint, Io};
    let target = Target::parse(&server.info().native_url)?;
    let stream = Connector::new(&target, &TlsOptions::default(), T)?.connect().await?;
    let mut io = Io::new(stream);
    let mut out = Vec::new();
    packets::write_hello(&mut out, "", "default", "");
    io.write_all(&out).await?;
    let revision = packets::read_server_hello(&mut io).await?.revision.min(CLIENT_REVISION);
    // The expected `name=value` list; 18.16 shows max_threads' auto as `auto(N)`, set as 0.
    let esc = |s: &str| s.replace('\\', "\\\\").replace('\'', "\\'");
    let expected: Vec<String> = live.iter().map(|(n, v)| format!("{n}={}", esc(v))).collect();
    let sql = format!(
        "SELECT throwIf(arrayStringConcat(groupArray(concat(name, '=', value)), ',') != '{}') \
         FROM system.settings WHERE changed",
        expected.join(",")
    );
    out.clear();
    put_varuint(&mut out, client::QUERY);
    put_str(&mut out, b"typed-settings");
    out.extend_from_slice(&packets::client_info(revision));
    for (n, v) in live {
        let v = if v.starts_with("auto(") { "0" } else { v.as_str() };
        put_setting(&mut out, n, v).map_err(|e| ProtoError::Protocol(e.to_string()))?;
    }
    put_str(&mut out, b"");
    put_varuint(&mut out, 2); // stage Complete
    put_varuint(&mut out, 0); // no compression
    put_str(&mut out, sql.as_bytes());
    out.extend_from_slice(&packets::empty_data(revision));
    io.write_all(&out).await?;
    let mut scratch = Scratch::default();
    loop {
        match tokio::time::timeout(T, io.varuint()).await.map_err(|_| ProtoError::Protocol("no answer".into()))?? {
            code::DATA => {
                io.skip_string().await?;
                skip_block(&mut io, revision, false, &mut scratch, &Mem::unbounded()).await?;
            }
            code::PROGRESS => packets::skip_progress(&mut io, revision).await?,
            code::PROFILE_INFO => packets::skip_profile_info(&mut io).await?,
            code::EXCEPTION => return Err(packets::read_exception(&mut io).await),
            code::END_OF_STREAM => return Ok(()),
            other => return Err(ProtoError::Protocol(format!("unexpected packet {other}"))),
        }
    }
}
