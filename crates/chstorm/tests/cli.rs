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
