//! The open loop holds its rate against a real server (its own test binary, so no other load
//! test shares the machine with it).

mod common;
use common::bench;

/// The tests here measure rates: they take turns, so two open loops never share the 2 cores.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn open_loop_holds_its_rate_within_five_percent() {
    let _turn = turn();
    let s = chstorm_local::shared_server();
    let rate = 400.0;
    let (_, r) = bench(&["--url", s.http_url(), "-q", "SELECT 1", "--rate", "400", "-c", "16", "-d", "4s"]);
    assert_eq!(r.mode, "open");
    assert_eq!(r.stop_reason, "duration", "-d ended the run");
    assert_eq!(r.errors, 0);
    assert!((r.qps - rate).abs() / rate <= 0.05, "qps {} vs rate {rate}", r.qps);
    assert_eq!(r.dropped, 0);
    assert!(r.per_second.len() >= 4, "{:?}", r.per_second);
    for p in &r.per_second[..4] {
        assert!((p.queries as f64 - rate).abs() / rate <= 0.1, "second {}: {} queries", p.t, p.queries);
    }
}

#[test]
fn a_ramp_rises_from_its_start_rate_to_its_end_rate() {
    let _turn = turn();
    let s = chstorm_local::shared_server();
    let (_, r) = bench(&[
        "--url",
        s.native_url(),
        "-q",
        "SELECT 1",
        "--rate",
        "100",
        "--ramp-to",
        "500",
        "--ramp-over",
        "4s",
        "-c",
        "16",
        "-d",
        "4s",
    ]);
    assert_eq!(r.errors, 0);
    assert_eq!(r.stop_reason, "duration", "-d ended the run");
    // The JSON and the summary keep both ends of the ramp, not only where it ended.
    let ramp = r.ramp.expect("a ramp is recorded");
    assert_eq!((ramp.from_qps, ramp.to_qps, ramp.over_s), (100.0, 500.0, 4.0));
    assert_eq!(r.rate, Some(500.0));
    let header = chstorm_output::text::summary(&r);
    assert!(header.lines().next().unwrap().contains("ramping from 100 to 500 QPS over 4 s"), "{header}");
    // Average rate over the ramp is 300/s.
    assert!((r.qps - 300.0).abs() / 300.0 <= 0.05, "qps {}", r.qps);
    let first = r.per_second[0].queries as f64;
    let last = r.per_second[3].queries as f64;
    assert!((first - 150.0).abs() < 25.0 && (last - 450.0).abs() < 40.0, "{:?}", r.per_second);
}

#[test]
fn a_partial_last_second_is_scaled_not_shown_as_a_drop() {
    let _turn = turn();
    let s = chstorm_local::shared_server();
    let (_, r) = bench(&["--url", s.http_url(), "-q", "SELECT 1", "--rate", "200", "-c", "4", "-d", "1500ms"]);
    assert_eq!(r.per_second.len(), 2, "{:?}", r.per_second);
    assert_eq!(r.per_second[0].span_s, 1.0);
    assert!((r.per_second[1].span_s - 0.5).abs() < 0.05, "{:?}", r.per_second[1]);
    for p in &r.per_second {
        assert!((p.qps() - 200.0).abs() < 25.0, "second {}: {} QPS", p.t, p.qps());
    }
}
