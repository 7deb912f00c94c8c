//! Helpers shared by the integration tests: run `chstorm bench` in-process and read its JSON.
#![allow(dead_code)]

use chstorm::cli::{Cli, Command};
use chstorm_load::StopHandle;
use chstorm_output::BenchReport;
use clap::Parser;
use std::path::Path;

/// Runs `chstorm bench ARGS --quiet --json TMP` in-process; returns the exit code and the report.
pub fn bench(args: &[&str]) -> (i32, BenchReport) {
    bench_with_stop(args, &StopHandle::new())
}

pub fn bench_with_stop(args: &[&str], stop: &StopHandle) -> (i32, BenchReport) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let mut argv = vec!["chstorm", "bench", "--quiet", "--json", json.to_str().unwrap()];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("bad test args {argv:?}: {e}"));
    let Command::Bench(b) = cli.command else { unreachable!() };
    let code = chstorm::bench::run(b, stop).unwrap_or_else(|e| panic!("bench {argv:?} failed: {e:#}"));
    (code, read_report(&json))
}

pub fn read_report(path: &Path) -> BenchReport {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A marker unique to this test process and call, to find a run's queries in system.query_log.
pub fn marker(name: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("chstorm_{name}_{}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Flushes the server's logs until `count_sql` (a `SELECT count() ...`) reaches `expect`, for at
/// most 5 s: a server may queue a query's finish record just after the client has its answer.
pub fn flush_logs_until(server: &chstorm_local::LocalServer, count_sql: &str, expect: u64) {
    let t = std::time::Instant::now();
    loop {
        server.query("SYSTEM FLUSH LOGS").unwrap();
        let n: u64 = server.query(count_sql).unwrap().trim().parse().unwrap();
        if n >= expect || t.elapsed() > std::time::Duration::from_secs(5) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Number of finished queries in system.query_log whose text contains `marker`, and the number
/// of distinct client ports they came from; waits (up to 5 s) for `expect` of them to be logged.
pub fn query_log_counts(server: &chstorm_local::LocalServer, marker: &str, expect: u64) -> (u64, u64) {
    let filter = format!("type = 2 AND query LIKE '%{marker}%' AND query NOT LIKE '%system.query_log%'");
    flush_logs_until(server, &format!("SELECT count() FROM system.query_log WHERE {filter}"), expect);
    let out = server.query(&format!("SELECT count(), uniqExact(port) FROM system.query_log WHERE {filter}")).unwrap();
    let mut it = out.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

/// Renders `html` in headless Chromium and checks the screenshot is not blank (at least 5% of the
/// pixels differ from the background). Skips, saying so, when Chromium is not installed.
pub fn screenshot_is_not_blank(html: &Path) {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    if !Path::new("/usr/bin/chromium").exists() {
        eprintln!("SKIP screenshot: chromium not installed (scripts/install-deps installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("shot.png");
    let mut child = Command::new("/usr/bin/chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1366,1800",
        ])
        .arg(format!("--user-data-dir={}", dir.path().join("profile").display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("chromium did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let decoder = png::Decoder::new(std::fs::File::open(&png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bytes = &buf[..info.buffer_size()];
    let px = info.color_type.samples();
    let background = &bytes[..px];
    let differing = bytes.chunks(px).filter(|p| p != &background).count();
    let total = bytes.len() / px;
    assert!(
        differing * 20 > total,
        "screenshot is nearly blank: {differing} of {total} pixels differ from the background"
    );
}

/// The captions of the tables of `html` that do not fit their box (so their last columns are
/// scrolled out of sight) when headless Chromium lays the page out in a window `width` px wide.
/// None when Chromium is not installed (the caller skips, saying so).
pub fn tables_cut_at(html: &Path, width: u32) -> Option<Vec<String>> {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    if !Path::new("/usr/bin/chromium").exists() {
        eprintln!("SKIP layout check: chromium not installed (scripts/install-deps installs it)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe.html");
    let script = "<script>const cut=[...document.querySelectorAll('.table-wrap')]\
        .filter(w=>w.scrollWidth>w.clientWidth+1)\
        .map(w=>{const c=w.querySelector('caption');return c?c.textContent:w.textContent.slice(0,60)});\
        document.body.setAttribute('data-cut',JSON.stringify(cut));</script></body>";
    let text = std::fs::read_to_string(html).unwrap().replace("</body>", script);
    std::fs::write(&probe, text).unwrap();
    let out_path = dir.path().join("dom.html");
    let mut child = Command::new("/usr/bin/chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--dump-dom",
        ])
        .arg(format!("--window-size={width},1000"))
        .arg(format!("--user-data-dir={}", dir.path().join("profile").display()))
        .arg(format!("file://{}", probe.display()))
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("chromium did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let dom = std::fs::read_to_string(&out_path).unwrap();
    let attr = dom.split("data-cut=\"").nth(1).expect("the probe ran").split('"').next().unwrap();
    let json = attr.replace("&quot;", "\"").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">");
    Some(serde_json::from_str(&json).unwrap())
}
