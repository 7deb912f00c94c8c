//! The binary: bad input gives one line on stderr and exit status 2; Ctrl-C writes results.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn chstorm(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_chstorm")).args(args).env_remove("CHSTORM_URL").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn assert_one_line_error(args: &[&str], needle: &str) {
    let (code, _, err) = chstorm(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?} printed {} lines:\n{err}", lines.len());
    assert!(lines[0].starts_with("chstorm: error: "), "{err}");
    assert!(err.contains(needle), "{args:?}: '{err}' lacks '{needle}'");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    assert_one_line_error(&["bench", "--bogus"], "--bogus");
    assert_one_line_error(&["bench", "-q", "SELECT 1", "-c", "zero"], "zero");
    assert_one_line_error(&["bench", "-q", "SELECT 1", "-c", "0"], "concurrency");
    assert_one_line_error(&["bench", "-q", "SELECT 1", "-d", "ten"], "duration");
    assert_one_line_error(&["bench", "-q", "SELECT 1", "--rate", "0"], "positive");
    assert_one_line_error(&["bench", "-q", "SELECT 1", "--setting", "max_threads"], "name=value");
    assert_one_line_error(&["bench", "--url", "ftp://127.0.0.1", "-q", "SELECT 1"], "unknown scheme");
    assert_one_line_error(&["bench", "--url", "127.0.0.1:8123", "-q", "SELECT 1"], "invalid target");
    assert_one_line_error(&["bench"], "nothing to send");
    assert_one_line_error(&["bench", "-q", "SELECT {k:uniform(9,1)}"], "a <= b");
    assert_one_line_error(&["bench", "--queries", "/nonexistent/queries.sql"], "/nonexistent/queries.sql");
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.sql");
    std::fs::write(&empty, "\n-- only a comment\n\n").unwrap();
    assert_one_line_error(&["bench", "--queries", empty.to_str().unwrap()], "no queries");
    assert_one_line_error(&["bench", "-q", "SELECT 1", "--json", "/nonexistent/dir/x.json"], "does not exist");
    assert_one_line_error(&["merge", "/nonexistent.json"], "/nonexistent.json");
    std::fs::write(dir.path().join("bad.json"), "{\"schema\": 1}").unwrap();
    assert_one_line_error(&["merge", dir.path().join("bad.json").to_str().unwrap()], "not a chstorm.bench.v1");
    assert_one_line_error(&["merge", "x.json", "--correct-omission", "soon"], "neither auto nor a duration");
    assert_one_line_error(&["merge", "x.json", "--correct-omission", "0s"], "shorter than 1us");
}

#[test]
fn placeholder_typos_are_refused_before_the_run() {
    for (q, needle) in [
        ("SELECT {x:unifrom(1,2)}", "unknown placeholder function 'unifrom' (did you mean uniform?)"),
        ("SELECT {x:uniform(1,2)", "no closing '}'"),
        ("SELECT {y}", "'y' has no value"),
    ] {
        assert_one_line_error(&["bench", "-q", q], needle);
    }
    // How to tell a placeholder from a ClickHouse query parameter.
    assert_one_line_error(&["bench", "-q", "SELECT {x:unifrom(1,2)}"], "{id:UInt64}");
    assert_one_line_error(&["bench", "-q", "SELECT {y}"], "{y:UInt64}");
}

#[test]
fn missing_arguments_are_named_on_the_one_line() {
    assert_one_line_error(&["bench", "-q", "SELECT 1", "--rate", "5", "--ramp-to", "10"], "--ramp-over <DURATION>");
    assert_one_line_error(&["merge"], "<INPUTS>");
    assert_one_line_error(&["sweep", "--out", "x"], "--suite <SUITE>");
    assert_one_line_error(&["compare", "--left", "http://127.0.0.1:1", "--queries", "q.sql"], "--right <URL>");
}

#[test]
fn absurd_durations_and_counts_are_refused() {
    assert_one_line_error(&["bench", "-q", "SELECT 1", "-d", "1y"], "longer than 7 days");
    assert_one_line_error(&["bench", "-q", "SELECT 1", "-d", "100y"], "--duration");
    assert_one_line_error(&["bench", "-q", "SELECT 1", "-c", "10000000"], "--concurrency");
    assert_one_line_error(
        &["compare", "--left", "http://a", "--right", "http://b", "--queries", "q", "--max-time", "30d"],
        "--max-time",
    );
    assert_one_line_error(&["sweep", "--suite", "storm", "--out", "x", "--timeout", "1y"], "--timeout");
}

/// Runs chstorm with a time limit; returns the exit code, stderr and how long it took.
fn chstorm_within(args: &[&str], limit: Duration) -> (i32, String, Duration) {
    let t = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_chstorm"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            return (st.code().unwrap_or(-1), err, t.elapsed());
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chstorm {args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn outputs_are_checked_before_the_run() {
    let s = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["bench", "--url", s.http_url(), "-q", "SELECT 1", "-d", "5s", "--quiet"];
        args.extend_from_slice(extra);
        chstorm_within(&args, Duration::from_secs(20))
    };
    let folder = dir.path().to_str().unwrap();
    let foreign = dir.path().join("foreign.csv");
    std::fs::write(&foreign, "a,b\n1,2\n").unwrap();
    for (extra, needle) in [
        (vec!["--csv", "/dev/full"], "/dev/full"),
        (vec!["--json", folder], "is a folder"),
        (vec!["--csv", folder], "is a folder"),
        (vec!["--csv", foreign.to_str().unwrap()], "header differs"),
    ] {
        let (code, err, took) = run(&extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(took < Duration::from_secs(3), "{extra:?}: refused only after the 5 s run ({took:?})");
    }
    assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "a,b\n1,2\n", "a foreign CSV is left alone");
}

#[test]
fn merge_refuses_what_would_make_the_sum_a_lie() {
    let s = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    for (name, q) in [("a.json", "SELECT 1"), ("b.json", "SELECT 1"), ("c.json", "SELECT 2")] {
        let (code, _, err) =
            chstorm(&["bench", "--url", s.http_url(), "-q", q, "-n", "20", "--quiet", "--json", &path(name)]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, err) = chstorm(&["merge", &path("a.json"), &path("b.json"), "--json", &path("ab.json")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("queries 40,"), "{out}");
    assert_one_line_error(&["merge", &path("a.json"), &path("a.json")], "the same run as");
    assert_one_line_error(&["merge", &path("ab.json"), &path("b.json")], "the same run as");
    assert_one_line_error(&["merge", &path("a.json"), &path("c.json")], "workload is SELECT 2, but SELECT 1");
    let (code, _, err) = chstorm(&["merge", &path("a.json"), &path("c.json"), "--allow-mixed"]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(path("a.json")).unwrap();
    std::fs::write(path("edited.json"), text.replace("\"queries\": 20,", "\"queries\": 2000,")).unwrap();
    assert_one_line_error(&["merge", &path("edited.json"), &path("b.json")], "edited or damaged");
}

#[test]
fn a_password_in_the_url_is_never_printed() {
    let (code, _, err) = chstorm(&["bench", "--url", "http://bob:hunter2@127.0.0.1:1/", "-q", "SELECT 1", "-d", "1s"]);
    assert_eq!(code, 2);
    assert!(!err.contains("hunter2"), "{err}");
    assert!(err.contains("bob@127.0.0.1:1"), "{err}");
}

#[test]
fn help_teaches() {
    let (code, out, _) = chstorm(&["bench", "--help"]);
    assert_eq!(code, 0);
    for needle in ["--rate", "zipf(n,s)", "coordinated omission", "Exit status", "clickhouses://"] {
        assert!(
            out.contains(needle) || out.contains(&needle.replace("coordinated omission", "queueing")),
            "help lacks {needle}"
        );
    }
}

#[test]
fn sigint_writes_the_results() {
    let s = chstorm_local::shared_server();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("int.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_chstorm"))
        .args([
            "bench",
            "--url",
            s.http_url(),
            "-q",
            "SELECT 1",
            "-c",
            "2",
            "-d",
            "60s",
            "--json",
            json.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    unsafe { libc_kill(child.id() as i32, 2) };
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "chstorm did not stop after SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["stop_reason"], "interrupted");
    assert!(r["queries"].as_u64().unwrap() > 0);
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(out.contains("QPS:"), "summary printed: {out}");
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
