//! Network faults that a real server cannot produce on demand, with a fake HTTP listener, and a
//! real server killed mid-run.

mod common;
use common::{bench, bench_with_stop};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A minimal HTTP server answering `1\n` to every request, except that requests arriving in
/// [stall_at, stall_at + stall) from its start are held until the end of that window.
fn stalling_server(stall_at: Duration, stall: Duration) -> (String, Arc<Instant>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let start = Arc::new(Instant::now());
    let st = start.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let st = st.clone();
            std::thread::spawn(move || {
                chstorm_testenv::answer_ones(conn, || {
                    let since = st.elapsed();
                    if since >= stall_at && since < stall_at + stall {
                        std::thread::sleep(stall_at + stall - since);
                    }
                })
            });
        }
    });
    (url, start)
}

#[test]
fn open_loop_latency_includes_a_stall() {
    // The stall starts 1.5 s after the listener does, i.e. during the measured run.
    let (url, _) = stalling_server(Duration::from_millis(1500), Duration::from_secs(1));
    let (_, r) = bench(&["--url", &url, "-q", "SELECT 1", "--rate", "200", "-c", "8", "-d", "5s"]);
    assert_eq!(r.errors, 0);
    // ~200 of ~1000 queries were due during the stall; the first of them waited about 1 s.
    assert!(r.latency_s.p99 >= 0.9, "open-loop p99 {} must show the 1 s stall", r.latency_s.p99);
    assert!(r.latency_s.max >= 0.95, "max {}", r.latency_s.max);
    assert!(r.late >= 150, "sends due in the stall leave late: {}", r.late);
    assert!(r.latency_note.starts_with("open loop"));
}

#[test]
fn closed_loop_says_it_leaves_out_queueing() {
    let (url, _) = stalling_server(Duration::from_millis(1500), Duration::from_secs(1));
    let (_, r) = bench(&["--url", &url, "-q", "SELECT 1", "-c", "8", "-d", "4s"]);
    // Only the 8 queries in flight saw the stall: a closed loop hides it from P99 ...
    assert!(r.latency_s.max >= 0.9);
    assert!(r.latency_s.p99 < 0.5, "closed-loop p99 {}", r.latency_s.p99);
    // ... and the summary says so.
    assert!(r.latency_note.contains("coordinated omission"), "{}", r.latency_note);
    let text = chstorm_output::text::summary(&r);
    assert!(text.contains("closed loop") && text.contains("not included"), "{text}");
}

#[test]
fn a_listener_that_never_answers_is_a_clear_error_in_bounded_time() {
    // Accepts connections and never answers, not even the version probe.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    let cli = <chstorm::cli::Cli as clap::Parser>::try_parse_from([
        "chstorm",
        "bench",
        "--quiet",
        "--url",
        &url,
        "-q",
        "SELECT 1",
        "-d",
        "1s",
        "--timeout",
        "300ms",
    ])
    .unwrap();
    let t = Instant::now();
    let line = chstorm::one_line(&chstorm::run(cli).unwrap_err());
    assert!(line.contains("timed out"), "{line}");
    assert!(t.elapsed() < Duration::from_secs(3), "took {:?}", t.elapsed());
}

#[test]
fn a_server_that_stops_answering_mid_run_gives_timeouts_not_a_hang() {
    // Answers the version probe, then holds every request for 100 s.
    let (url, _) = stalling_server(Duration::from_millis(300), Duration::from_secs(100));
    let t = Instant::now();
    let (_, r) = bench(&["--url", &url, "-q", "SELECT 1", "-c", "2", "-d", "2s", "--timeout", "300ms"]);
    assert!(t.elapsed() < Duration::from_secs(5), "run took {:?}", t.elapsed());
    assert!(r.errors_by_kind.get("timeout").copied().unwrap_or(0) >= 4, "{:?}", r.errors_by_kind);
}

#[test]
fn a_refused_connection_is_a_clear_error_before_the_run() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cli = <chstorm::cli::Cli as clap::Parser>::try_parse_from([
        "chstorm",
        "bench",
        "--quiet",
        "--url",
        &format!("http://127.0.0.1:{port}"),
        "-q",
        "SELECT 1",
        "-d",
        "1s",
    ])
    .unwrap();
    let t = Instant::now();
    let err = chstorm::run(cli).unwrap_err();
    let line = chstorm::one_line(&err);
    assert!(line.contains("connect") && line.contains(&port.to_string()), "{line}");
    assert!(!line.contains('\n'));
    assert!(t.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_server_killed_mid_run_is_counted_and_the_run_ends_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = chstorm_local::ServerSpec::new(dir.path());
    spec.die_with_parent = true;
    let mut server = chstorm_local::LocalServer::start(spec).unwrap();
    let url = server.http_url().to_string();
    let json = dir.path().join("killed.json");
    let json_s = json.to_str().unwrap().to_string();
    let run = std::thread::spawn(move || {
        let t = Instant::now();
        let (code, r) = bench_with_stop(
            &["--url", &url, "-q", "SELECT 1", "-c", "4", "-d", "4s", "--timeout", "1s"],
            &chstorm_load::StopHandle::new(),
        );
        std::fs::write(&json_s, r.to_json()).unwrap();
        (code, r, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(1500));
    server.kill9();
    let (code, r, took) = run.join().unwrap();
    assert_eq!(code, 0);
    assert!(took < Duration::from_secs(8), "run took {took:?}");
    assert!(r.queries > 100, "queries before the kill were kept: {}", r.queries);
    assert!(r.errors > 0, "errors after the kill were counted");
    let kinds: Vec<&String> = r.errors_by_kind.keys().collect();
    assert!(kinds.iter().all(|k| ["connect", "io", "timeout"].contains(&k.as_str())), "{kinds:?}");
    assert!(json.exists());
}

#[test]
fn ctrl_c_stops_the_run_and_keeps_what_was_measured() {
    let s = chstorm_local::shared_server();
    let stop = chstorm_load::StopHandle::new();
    let s2 = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        s2.interrupt();
    });
    let t = Instant::now();
    let (code, r) = bench_with_stop(&["--url", s.http_url(), "-q", "SELECT 1", "-c", "2", "-d", "30s"], &stop);
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(code, chstorm::EXIT_INTERRUPTED);
    assert_eq!(r.stop_reason, "interrupted");
    assert!(r.queries > 0 && r.duration_s > 1.0 && r.duration_s < 3.0, "{} in {}", r.queries, r.duration_s);
}
