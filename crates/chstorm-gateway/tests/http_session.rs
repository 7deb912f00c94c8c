//! HTTP sessions through the gateway against real ClickHouse 18.16, on a throw-away cluster of one
//! shard with two replicas: a session whose replica dies continues on the other with what it set
//! (its `SET`s, `USE`, its own `readonly`), says so, and stays there when the replica returns;
//! a session that held a temporary table fails in one line instead of continuing empty; and a
//! session whose replica restarted between two requests is carried back, never answered from a
//! fresh session.

use chstorm_local::{ClusterSpec, LocalCluster};
use chstorm_testenv::curl;
use std::time::{Duration, Instant};

/// One request of session `sid` to the gateway at `gw`: (status, the replica header, the
/// moved header, body).
fn in_session(gw: &str, sid: &str, sql: &str) -> (u16, String, String, String) {
    let (status, head, body) =
        curl(&["--max-time", "20", "--data-binary", sql, &format!("{gw}/?session_id={sid}&session_timeout=120")]);
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    (status, header("x-chstorm-replica"), header("x-chstorm-session-moved"), body)
}

/// The replica index (1 or 2) of a `shard.replica` label.
fn index(label: &str) -> usize {
    label.rsplit('.').next().and_then(|r| r.parse().ok()).unwrap_or_else(|| panic!("no replica in {label:?}"))
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the gateway sees replica `label` up (its `/replicas_status?verbose=1`).
fn up(gw: &str, label: &str) -> bool {
    let body = curl(&["--max-time", "2", &format!("{gw}/replicas_status?verbose=1")]).2;
    body.lines().any(|l| l.starts_with(&format!("storm.{label}:")) && l.contains("\tup."))
}

#[test]
fn a_session_never_continues_without_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = ClusterSpec::new(dir.path().join("cluster"), 1, 2);
    spec.die_with_parent = true;
    let mut cluster = LocalCluster::start(spec).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let config = dir.path().join("gw.yaml");
    std::fs::write(&config, chstorm_testenv::gateway_config_text(&cluster)).unwrap();
    let gw = rt.block_on(chstorm_gateway::Gateway::start(config)).unwrap();
    let url = format!("http://{}", gw.addr);
    let setting = |name: &str| format!("SELECT value FROM system.settings WHERE name = '{name}'");

    // 1. A session that set things: carried to the other replica when its own dies.
    let (s, home, _, b) = in_session(&url, "carried", "SET max_block_size = 777");
    assert_eq!(s, 200, "{b}");
    assert_eq!(in_session(&url, "carried", "USE system").0, 200);
    assert_eq!(in_session(&url, "carried", "SET readonly = 1").0, 200);
    let (s, again, moved, b) = in_session(&url, "carried", &setting("max_block_size"));
    assert_eq!((s, b.trim(), again.as_str(), moved.as_str()), (200, "777", home.as_str(), ""), "at home");
    let victim = index(&home);
    cluster.kill9(1, victim);
    let (s, to, moved, b) = in_session(&url, "carried", &setting("max_block_size"));
    eprintln!("after kill -9 of {home}: {s} on {to}, moved {moved:?}: {}", b.trim());
    assert_eq!((s, b.trim()), (200, "777"), "its SET came along");
    assert_ne!(to, home);
    assert_eq!(moved, format!("{home} -> {to}"), "and the answer says it moved");
    assert_eq!(in_session(&url, "carried", &setting("readonly")).3.trim(), "1", "its own readonly too");
    assert_eq!(in_session(&url, "carried", "SELECT currentDatabase()").3.trim(), "system", "and its USE");
    let (s, _, _, b) = in_session(&url, "carried", "CREATE TABLE default.t_carried (x UInt8) ENGINE = Memory");
    assert_ne!(s, 200, "a read-only session stays read-only: {b}");
    assert!(b.contains("Code: 164"), "{b}");
    // The old home comes back: the session stays where it is now, with its state.
    cluster.restart(1, victim).unwrap();
    wait_for("the old home up again", Duration::from_secs(20), || up(&url, &home));
    let (s, now, moved, b) = in_session(&url, "carried", &setting("max_block_size"));
    assert_eq!((s, b.trim(), now.as_str(), moved.as_str()), (200, "777", to.as_str(), ""), "not moved back");

    // 2. A session that holds a temporary table cannot be carried: it fails in one line.
    let (s, home2, _, b) = in_session(&url, "bound", "CREATE TEMPORARY TABLE tt (x UInt8)");
    assert_eq!(s, 200, "{b}");
    assert_eq!(in_session(&url, "bound", "INSERT INTO tt VALUES (1)").0, 200);
    cluster.kill9(1, index(&home2));
    let (s, _, _, b) = in_session(&url, "bound", "SELECT count() FROM tt");
    eprintln!("a temporary table's session after kill -9: {s} {}", b.trim());
    assert_eq!(s, 500, "{b}");
    assert!(b.contains("session lost") && b.contains("temporary table"), "{b}");
    assert_eq!(b.trim().lines().count(), 1, "one line: {b}");
    let (s, _, _, b) = in_session(&url, "bound", "SELECT 1");
    assert_eq!(s, 500, "and it stays lost: {b}");
    cluster.restart(1, index(&home2)).unwrap();
    wait_for("both replicas up", Duration::from_secs(20), || up(&url, "1.1") && up(&url, "1.2"));

    // 3. A replica that restarts between two requests of a session (faster than the gateway's
    // probes notice): the server answers SESSION_NOT_FOUND, and the session is carried back.
    let (s, home3, _, b) = in_session(&url, "restarted", "SET max_block_size = 555");
    assert_eq!(s, 200, "{b}");
    let i = index(&home3);
    cluster.kill9(1, i);
    cluster.restart(1, i).unwrap();
    let (s, at, _, b) = in_session(&url, "restarted", &setting("max_block_size"));
    eprintln!("after a restart of {home3}: {s} on {at}: {}", b.trim());
    assert_eq!((s, b.trim()), (200, "555"), "carried, never a fresh session");
    drop(gw);
}
