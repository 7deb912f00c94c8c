//! A replica whose answer breaks between its head and its last byte (a server killed at that
//! moment: kill -9, an OOM kill) costs a read nothing: the gateway holds an answer until it
//! ends before any of it goes out, so the read is sent to the other replica and its client gets
//! that replica's whole answer, byte for byte as a node gives it.
//!
//! One shard: a real ClickHouse node and a fake replica (a fault a real server cannot produce on
//! demand) that answers its `/ping` and cuts every query's answer after its head and first
//! chunk.

use chstorm_local::{ClusterSpec, LocalCluster};
use chstorm_testenv::{curl, post};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Serves one connection of the fake replica: `/ping` answers `Ok.`, a query gets a 200 head
/// and one chunk of `1\n`, then the connection is closed (counted in `cut`).
fn serve(conn: TcpStream, cut: &AtomicUsize) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    chstorm_testenv::serve_http(conn, |head| {
        if head.starts_with("get /ping") {
            return (b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=3\r\nContent-Length: 4\r\n\r\nOk.\n".to_vec(), true);
        }
        cut.fetch_add(1, Ordering::SeqCst);
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n1\n\r\n".to_vec(), false)
    });
}

#[test]
fn an_answer_cut_after_its_head_is_read_again_from_the_other_replica() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = ClusterSpec::new(dir.path().join("cluster"), 1, 1);
    spec.die_with_parent = true;
    let cluster = LocalCluster::start(spec).unwrap();
    let node = cluster.topology().nodes[0].http_url.clone();
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = fake.local_addr().unwrap();
    let cut = Arc::new(AtomicUsize::new(0));
    let cut2 = cut.clone();
    std::thread::spawn(move || {
        for conn in fake.incoming().flatten() {
            let cut = cut2.clone();
            std::thread::spawn(move || serve(conn, &cut));
        }
    });

    // The generated config, with the fake as the shard's first replica.
    let text = chstorm_testenv::gateway_config_text(&cluster)
        .replacen("replicas: [", &format!("replicas: [http://{fake_addr}, "), 1)
        .replacen("native: [", &format!("native: [{fake_addr}, "), 1);
    let cfg = dir.path().join("gw.yaml");
    std::fs::write(&cfg, text).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let gw = rt.block_on(chstorm_gateway::Gateway::start(cfg)).unwrap();
    let url = format!("http://{}", gw.addr);

    // Reads, each a new statement, until the fake has cut an answer and 20 were sent (the fake
    // is marked down at each cut, up again after two good pings, and picked again once its
    // penalty has faded). Every read is answered whole, byte for byte as the node answers it.
    let (t, mut reads) = (Instant::now(), 0);
    while cut.load(Ordering::SeqCst) < 1 || reads < 20 {
        assert!(t.elapsed() < Duration::from_secs(30), "the fake cut {} answers in 30 s", cut.load(Ordering::SeqCst));
        let sql = format!("SELECT number, 'read {reads}', toString(number * {reads}) FROM numbers(5)");
        let direct = post(&node, &sql);
        assert_eq!(direct.0, 200, "{direct:?}");
        let (status, _, body) = curl(&["--data-binary", &sql, &url]);
        assert_eq!((status, body.as_str()), (200, direct.1.as_str()), "read {reads}");
        reads += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("{reads} reads, {} cut by the fake replica, all answered whole", cut.load(Ordering::SeqCst));
    // A whole answer's query has ended: none was sent a KILL.
    let m = curl(&[&format!("{url}/metrics")]).2;
    let kills: Vec<&str> = m.lines().filter(|l| l.starts_with("chstorm_gateway_killed_queries_total{")).collect();
    assert!(kills.is_empty(), "{kills:?}");
    drop(gw);
}
