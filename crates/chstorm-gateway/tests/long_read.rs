//! Long reads through the gateway against a real 2x2 cluster of ClickHouse 18.16: a read that
//! runs for 2.5 s starts exactly once on the cluster (its replica is working, so it is not
//! hedged), over HTTP and over the native port, and a native client sees the read's progress
//! while it runs, not only at its end.
//!
//! "Starts once" is counted where it happens: `QueryStart` rows (type 1) for the read's
//! `query_id` in `system.query_log`, summed over the 4 nodes after `SYSTEM FLUSH LOGS`.

use chstorm_proto::native::packets::{self, server};
use chstorm_proto::native::wire::Io;
use chstorm_proto::native::CLIENT_REVISION;
use chstorm_testenv::{post, start_cluster, Env};
use std::time::{Duration, Instant};

/// 2.5 s on any machine: 25 blocks of one row, each slept on for 100 ms (`sleepEachRow`), so the
/// replica reports progress block by block and answers pings while it runs. A read whose length
/// came from its CPU work would be as long as the host is slow (a fast host ended it in 0.9 s).
const LONG_READ: &str = "SELECT count() FROM numbers(25) WHERE NOT ignore(sleepEachRow(0.1))";

/// QueryStart rows of the client's `query_id` over the cluster's nodes (user `default`: on the backend the
/// id is `default:<query_id>`, see `plan::backend_id`).
fn starts(env: &Env, query_id: &str) -> u64 {
    env.node_urls()
        .iter()
        .map(|url| {
            let (s, _) = post(url, "SYSTEM FLUSH LOGS");
            assert_eq!(s, 200);
            let sql =
                format!("SELECT count() FROM system.query_log WHERE query_id = 'default:{query_id}' AND type = 1");
            let (s, n) = post(url, &sql);
            assert_eq!(s, 200, "{n}");
            n.trim().parse::<u64>().unwrap()
        })
        .sum()
}

/// Runs `sql` on a native `addr` with `query_id`; (time to the first Progress packet, the time
/// the answer ended). Reads the answer packet by packet: the header block (no rows), Progress,
/// the result block (one UInt64 row), ProfileInfo, EndOfStream.
async fn native_read(addr: std::net::SocketAddr, query_id: &str, sql: &str) -> (Option<Duration>, Duration) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut io = Io::new(stream);
    let mut hello = Vec::new();
    packets::write_hello(&mut hello, "", "default", "");
    io.write_all(&hello).await.unwrap();
    let info = packets::read_server_hello(&mut io).await.unwrap();
    let revision = info.revision.min(CLIENT_REVISION);
    let mut q = Vec::new();
    packets::write_query(&mut q, &packets::client_info(revision), query_id, sql, revision);
    q.extend_from_slice(&packets::empty_data(revision));
    let t0 = Instant::now();
    io.write_all(&q).await.unwrap();
    let mut first_progress = None;
    loop {
        match io.varuint().await.unwrap() {
            server::PROGRESS => {
                first_progress.get_or_insert(t0.elapsed());
                packets::skip_progress(&mut io, revision).await.unwrap();
            }
            server::DATA => {
                io.skip_string().await.unwrap(); // the external table's name
                packets::skip_block_info(&mut io).await.unwrap();
                let (columns, rows) = (io.varuint().await.unwrap(), io.varuint().await.unwrap());
                for _ in 0..columns {
                    io.skip_string().await.unwrap(); // name
                    let t = io.string().await.unwrap();
                    assert!(rows == 0 || t == "UInt64", "a block of {t}");
                    for _ in 0..rows * 8 {
                        io.u8().await.unwrap();
                    }
                }
            }
            server::PROFILE_INFO => packets::skip_profile_info(&mut io).await.unwrap(),
            server::END_OF_STREAM => return (first_progress, t0.elapsed()),
            other => panic!("packet {other} from the gateway"),
        }
    }
}

#[test]
fn a_working_read_starts_once_and_its_progress_reaches_the_native_client() {
    let env = start_cluster();
    let gw = env.rt.block_on(chstorm_gateway::Gateway::start(env.gateway_config(|t| t))).unwrap();
    let url = format!("http://{}", gw.addr);

    // HTTP: nothing comes before the answer; the replica answers the gateway's ping.
    let t0 = Instant::now();
    let (s, body) = post(&format!("{url}/?query_id=long-http&max_block_size=1"), LONG_READ);
    let took = t0.elapsed();
    assert_eq!(s, 200, "{body}");
    eprintln!("HTTP long read: {took:?}, answer {}", body.trim());
    assert!(took > Duration::from_secs(1), "a long read: {took:?}");
    assert_eq!(starts(&env, "long-http"), 1, "the HTTP read started once");

    // Native: its Progress packets show the replica is working, and reach the client.
    let native = gw.native_addr.expect("the generated config has listen_native");
    let sql = format!("{LONG_READ} SETTINGS max_block_size = 1");
    let (first, took) = env.rt.block_on(native_read(native, "long-native", &sql));
    eprintln!("native long read: first Progress after {first:?}, end after {took:?}");
    assert!(took > Duration::from_secs(1), "a long read: {took:?}");
    let first = first.expect("a Progress packet");
    assert!(first < Duration::from_secs(1), "the first Progress came after {first:?}");
    assert!(first + Duration::from_millis(500) < took, "progress during the read, not at its end");
    assert_eq!(starts(&env, "long-native"), 1, "the native read started once");
    drop(gw);
}
