//! Queries of death against real ClickHouse 18.16, on a throw-away cluster of one shard with two
//! replicas (its own servers, so the crashes hurt no other test): a read whose replica dies
//! while running it is not sent to the other replica, its client gets a one-line error, and
//! reads of its shape are refused.
//!
//! Three deaths: a replica killed (SIGKILL) in the middle of a 3 s read, and 18.16's own crash on
//! 1,000 nested parentheses (its parser overflows the stack), over HTTP and over the native port
//! (`clickhouse-client`). Whether the read was resent is
//! seen on the survivor: its `system.query_log` has no `QueryStart` for the read's query_id,
//! and it is still alive after the crashing query.

use chstorm_local::{ClusterSpec, LocalCluster};
use chstorm_testenv::{curl, post};
use std::time::{Duration, Instant};

/// 3 s on any machine (with `max_block_size=1`: 30 blocks of one row, each slept on for 100 ms);
/// a read whose length came from its CPU work would be as long as the host is slow.
const LONG_READ: &str = "SELECT count() FROM numbers(30) WHERE NOT ignore(sleepEachRow(0.1))";

/// `SELECT ((...(1)...))`, `depth` parentheses deep.
fn deep(depth: usize, literal: u32) -> String {
    format!("SELECT {}{literal}{}", "(".repeat(depth), ")".repeat(depth))
}

/// The cluster's generated gateway config, listening on free ports, with `limits.max_query_depth`
/// raised above the depth that crashes 18.16, so that the crash itself reaches a server.
fn gateway_config(cluster: &LocalCluster, dir: &std::path::Path) -> std::path::PathBuf {
    let text = chstorm_testenv::gateway_config_text(cluster).replacen(
        "\nlimits:\n",
        "\nlimits:\n  max_query_depth: 5000\n",
        1,
    );
    assert!(text.contains("max_query_depth: 5000"), "the generated config has a limits section:\n{text}");
    let path = dir.join("gw.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn alive(url: &str) -> bool {
    curl(&["--max-time", "2", &format!("{url}/ping")]).0 == 200
}

/// The replica (1 or 2) running the client's `query_id` (`default:<query_id>` on the backend), within 10 s.
fn running_on(urls: &[String], query_id: &str) -> usize {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        for (i, url) in urls.iter().enumerate() {
            let sql = format!("SELECT count() FROM system.processes WHERE query_id = 'default:{query_id}'");
            if post(url, &sql).1.trim() == "1" {
                return i + 1;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{query_id} ran nowhere");
}

/// Sends `sql` to the native `addr`; the Exception that answers it (code, message).
async fn native_exception(addr: std::net::SocketAddr, sql: &str) -> (i32, String) {
    use chstorm_proto::native::packets::{self, server};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut io = chstorm_proto::native::wire::Io::new(stream);
    let mut hello = Vec::new();
    packets::write_hello(&mut hello, "", "default", "");
    io.write_all(&hello).await.unwrap();
    let revision =
        packets::read_server_hello(&mut io).await.unwrap().revision.min(chstorm_proto::native::CLIENT_REVISION);
    let mut q = Vec::new();
    packets::write_query(&mut q, &packets::client_info(revision), "qod-native", sql, revision);
    q.extend_from_slice(&packets::empty_data(revision));
    io.write_all(&q).await.unwrap();
    let read = async {
        assert_eq!(io.varuint().await.unwrap(), server::EXCEPTION, "the answer is an exception");
        match packets::read_exception(&mut io).await {
            chstorm_proto::ProtoError::Server { code, message, .. } => (code, message),
            e => panic!("{e}"),
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read).await.expect("an answer within 30 s")
}

/// Waits (30 s at most) until the server at `url` answers, and the gateway has seen it again.
fn wait_alive(url: &str) {
    let t = Instant::now();
    while !alive(url) {
        assert!(t.elapsed() < Duration::from_secs(30), "{url} did not come back");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The gateway's probes (every 500 ms, `rise` of them) bring the replica back.
    std::thread::sleep(Duration::from_secs(3));
}

fn starts(url: &str, query_id: &str) -> u64 {
    assert_eq!(post(url, "SYSTEM FLUSH LOGS").0, 200);
    let sql = format!("SELECT count() FROM system.query_log WHERE query_id = 'default:{query_id}' AND type = 1");
    let (status, body) = post(url, &sql);
    // 18.16 creates system.query_log at the first flush with a query in it: a node that ran no
    // query at all has none (Code: 60, UNKNOWN_TABLE).
    if status != 200 && body.contains("Code: 60") {
        return 0;
    }
    body.trim().parse().unwrap_or_else(|_| panic!("{status} {body}"))
}

#[test]
fn a_read_whose_replica_died_running_it_is_not_resent_and_its_shape_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = ClusterSpec::new(dir.path().join("cluster"), 1, 2);
    spec.die_with_parent = true;
    let mut cluster = LocalCluster::start(spec).unwrap();
    let urls: Vec<String> = cluster.topology().nodes.iter().map(|n| n.http_url.clone()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let gw = rt.block_on(chstorm_gateway::Gateway::start(gateway_config(&cluster, dir.path()))).unwrap();
    let url = format!("http://{}", gw.addr);

    // 1. SIGKILL of the replica running a 3 s read, 500 ms into it.
    let read_url = format!("{url}/?query_id=qod-kill&max_block_size=1");
    let client = std::thread::spawn(move || post(&read_url, LONG_READ));
    let victim = running_on(&urls, "qod-kill");
    std::thread::sleep(Duration::from_millis(500));
    cluster.kill9(1, victim);
    let (status, body) = client.join().unwrap();
    eprintln!("killed mid-read: {status} {}", body.trim());
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("died while running this query"), "{body}");
    let survivor = 3 - victim;
    assert_eq!(starts(&urls[survivor - 1], "qod-kill"), 0, "the read was not resent to the survivor");
    // Its shape is refused now, another literal included.
    let (status, body) = post(&format!("{url}/?max_block_size=1"), &LONG_READ.replace("0.1", "0.2"));
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("limits.query_of_death_ttl"), "{body}");
    cluster.restart(1, victim).unwrap();
    wait_alive(&urls[victim - 1]);

    // 2. 18.16 crashes on 1,000 nested parentheses: one server dies, not two.
    let (status, body) = post(&format!("{url}/?query_id=qod-deep"), &deep(1000, 1));
    eprintln!("1,000 parentheses: {status} {}", body.trim());
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("died while running this query"), "{body}");
    std::thread::sleep(Duration::from_millis(500));
    let up: Vec<bool> = urls.iter().map(|u| alive(u)).collect();
    assert_eq!(up.iter().filter(|u| **u).count(), 1, "exactly one server died: {up:?}");
    let (status, body) = post(&url, &deep(1000, 2));
    assert_eq!(status, 503, "the same shape is refused: {body}");
    let up2: Vec<bool> = urls.iter().map(|u| alive(u)).collect();
    assert_eq!(up, up2, "and the survivor lives");

    // 3. The same over the native port (another depth: another shape). Not with
    // clickhouse-client: it parses the query itself first, and crashes on it.
    let dead = up.iter().position(|u| !u).unwrap() + 1;
    cluster.restart(1, dead).unwrap();
    wait_alive(&urls[dead - 1]);
    let native = gw.native_addr.expect("the generated config has listen_native");
    let (code, message) = rt.block_on(native_exception(native, &deep(1001, 1)));
    eprintln!("native, 1,001 parentheses: Code {code}: {message}");
    assert_eq!(code, 210);
    assert!(message.contains("died while running this query"), "{message}");
    std::thread::sleep(Duration::from_millis(500));
    let up3: Vec<bool> = urls.iter().map(|u| alive(u)).collect();
    assert_eq!(up3.iter().filter(|u| **u).count(), 1, "exactly one server died: {up3:?}");
    drop(gw);
}

/// Kills (SIGKILL) every server of `urls` (pids `pids`) that runs a query holding `marker`,
/// polling every 20 ms until `stop`; the count of kills.
fn watcher(
    urls: Vec<String>,
    pids: Vec<u32>,
    marker: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut killed = vec![false; urls.len()];
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for (i, url) in urls.iter().enumerate() {
                if killed[i] {
                    continue;
                }
                let sql = format!(
                    "SELECT count() FROM system.processes WHERE query LIKE '%{marker}%' AND query NOT LIKE '%system.processes%'"
                );
                let (status, _, body) = curl(&["--max-time", "1", "--data-binary", &sql, url]);
                if status == 200 && body.trim() != "0" {
                    let _ = std::process::Command::new("kill").args(["-9", &pids[i].to_string()]).status();
                    killed[i] = true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        killed.iter().filter(|k| **k).count()
    })
}

/// The read of the deadly-literal test: about 3 s, its literal in its shape's place.
fn marked_read(literal: &str, tail: &str) -> String {
    format!("SELECT count() FROM numbers(100000000) WHERE sipHash64(number) % 7 = 1 AND '{literal}' != ''{tail}")
}

/// A crash that depends on a value, in a shape that ran fine: a watcher kills any server that
/// runs the marked literal. The read goes to one replica, which dies; it is resent once to
/// another, which dies too; then it is a query of death: the third replica never receives it,
/// and its shape is refused, over HTTP and over the native port.
#[test]
fn a_deadly_literal_in_a_known_shape_kills_at_most_two_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = ClusterSpec::new(dir.path().join("cluster"), 1, 3);
    spec.die_with_parent = true;
    let mut cluster = LocalCluster::start(spec).unwrap();
    let urls: Vec<String> = cluster.topology().nodes.iter().map(|n| n.http_url.clone()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let gw = rt.block_on(chstorm_gateway::Gateway::start(gateway_config(&cluster, dir.path()))).unwrap();
    let url = format!("http://{}/?max_threads=1", gw.addr);
    let native = gw.native_addr.expect("the generated config has listen_native");
    let native_target = chstorm_proto::target::Target::parse(&format!("clickhouse://default@{native}")).unwrap();
    let native_read = |sql: String| {
        rt.block_on(async {
            let connector =
                chstorm_proto::stream::Connector::new(&native_target, &Default::default(), Duration::from_secs(5))
                    .unwrap();
            let mut c = chstorm_proto::native::NativeConn::connect(&connector, &native_target, Duration::from_secs(5))
                .await
                .unwrap();
            c.query("", &format!("{sql} SETTINGS max_threads = 1"), Duration::from_secs(60)).await.map(|_| ())
        })
    };
    for (protocol, marker, tail) in [("http", "qod-marker-http", ""), ("native", "qod-marker-native", " AND 1 = 1")] {
        // The shape runs fine with a harmless literal.
        match protocol {
            "http" => assert_eq!(post(&url, &marked_read("harmless", tail)).0, 200),
            _ => native_read(marked_read("harmless", tail)).unwrap(),
        }
        let pids: Vec<u32> = (1..=3).map(|r| cluster.node(1, r).pid()).collect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let kills = watcher(urls.clone(), pids, marker, stop.clone());
        let deadly = marked_read(marker, tail);
        let answer = match protocol {
            "http" => post(&url, &deadly).1,
            _ => native_read(deadly).expect_err("no answer").to_string(),
        };
        eprintln!("{protocol}: the deadly literal: {}", answer.trim());
        assert!(answer.contains("died while running this query"), "{protocol}: {answer}");
        // The same shape, another literal: refused, and the last replica lives.
        let again = match protocol {
            "http" => post(&url, &marked_read(&format!("{marker}-2"), tail)),
            _ => (0, native_read(marked_read(&format!("{marker}-2"), tail)).expect_err("refused").to_string()),
        };
        assert!(again.1.contains("limits.query_of_death_ttl"), "{protocol}: {again:?}");
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let killed = kills.join().unwrap();
        let up: Vec<bool> = urls.iter().map(|u| alive(u)).collect();
        assert_eq!((killed, up.iter().filter(|u| **u).count()), (2, 1), "{protocol}: two replicas died: {up:?}");
        for (r, alive) in up.iter().enumerate() {
            if !alive {
                cluster.restart(1, r + 1).unwrap();
                wait_alive(&urls[r]);
            }
        }
    }
    drop(gw);
}
