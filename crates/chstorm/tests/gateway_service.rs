//! The gateway as a service (deploy/): systemd's notify protocol spoken by the real binary, the
//! Grafana dashboard's queries against the metrics a running gateway exports, and the
//! Prometheus alert rules through `promtool check rules` and `promtool test rules`.

use chstorm_testenv::{curl, start_shared_cluster, Env};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(start_shared_cluster)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Kills the child when the test ends, passed or failed.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// CLOCK_MONOTONIC now, in microseconds (the clock of `MONOTONIC_USEC=`).
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// The next datagram that is not a watchdog ping; panics after 20 s.
fn next_message(sock: &UnixDatagram, watchdogs: &mut usize, logs: &dyn Fn() -> String) -> String {
    let mut buf = [0u8; 4096];
    loop {
        let n = sock.recv(&mut buf).unwrap_or_else(|e| panic!("no notification within 20 s ({e}); logs:\n{}", logs()));
        let msg = String::from_utf8(buf[..n].to_vec()).unwrap();
        if msg == "WATCHDOG=1" {
            *watchdogs += 1;
        } else {
            return msg;
        }
    }
}

/// The real binary under a service manager's `NOTIFY_SOCKET` (a socket of the test's own):
/// READY=1 only once `/ping` answers and every replica has been probed (a silent one too); a watchdog ping every
/// half `WATCHDOG_USEC`; RELOADING=1 (with MONOTONIC_USEC) then READY=1 around a SIGHUP, with a
/// STATUS= saying whether the file was taken, for a good and a bad file; STOPPING=1 on SIGTERM.
#[test]
fn the_binary_tells_systemd_when_it_is_ready_reloading_and_stopping() {
    let env = env();
    // A second cluster whose one replica accepts connections and never answers: its first
    // probe takes the whole health.timeout (1 s), so the first round ends a second after start.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let slow = format!(
        "clusters:\n  slow:\n    user: default\n    password: \"\"\n    shards:\n      - replicas: [http://{0}]\n        native: [{0}]\n",
        silent.local_addr().unwrap()
    );
    let text = env.gateway_config_text(|t| t.replacen("clusters:\n", &slow, 1));
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gw.yaml");
    std::fs::write(&cfg, &text).unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let log = dir.path().join("gw.log");
    let mut child = ChildGuard(
        std::process::Command::new(env!("CARGO_BIN_EXE_chstorm"))
            .args(["gateway", "--config", cfg.to_str().unwrap()])
            .env("NOTIFY_SOCKET", &sock_path)
            .env("WATCHDOG_USEC", "200000")
            .env_remove("WATCHDOG_PID")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let logs = || std::fs::read_to_string(&log).unwrap();
    let mut watchdogs = 0;
    let started = Instant::now();

    let ready = next_message(&sock, &mut watchdogs, &logs);
    assert!(ready.starts_with("READY=1\nSTATUS="), "{ready}\n{}", logs());
    assert!(ready.contains("5/5 replicas healthy"), "{ready}");
    // READY=1 comes once it listens: the log names the port it took.
    let url = format!("http://{}", chstorm_testenv::listening_addr(&log, &mut child.0, Duration::from_secs(1)));
    assert!(watchdogs <= 1 + started.elapsed().as_millis() as usize / 100, "{watchdogs} pings");
    // Ready means serving, with every replica probed once (its replica_up sample exists).
    assert_eq!(curl(&[&format!("{url}/ping")]).0, 200);
    let (_, _, metrics) = curl(&[&format!("{url}/metrics")]);
    let up = metrics.lines().filter(|l| l.starts_with("chstorm_gateway_replica_up{")).count();
    assert_eq!(up, 5, "{metrics}");

    // SIGHUP with a good file: a new user is taken.
    std::fs::write(&cfg, text.replace("users:\n", "users:\n  - name: late\n    cluster: storm\n")).unwrap();
    let sent = monotonic_usec();
    unsafe { libc_kill(child.0.id() as i32, 1) };
    let reloading = next_message(&sock, &mut watchdogs, &logs);
    let received = monotonic_usec();
    assert!(reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{reloading}");
    let usec: u64 = reloading.lines().find_map(|l| l.strip_prefix("MONOTONIC_USEC=")).unwrap().parse().unwrap();
    assert!((sent..=received).contains(&usec), "MONOTONIC_USEC={usec} outside {sent}..={received}");
    let ready = next_message(&sock, &mut watchdogs, &logs);
    assert!(ready.starts_with("READY=1\nSTATUS=config reloaded"), "{ready}");
    assert_eq!(curl(&["-u", "late:", "--data-binary", "SELECT 1", &url]).0, 200);
    // That query's backend connection stays pooled: counted by chstorm_gateway_backend_connections.
    let (_, _, metrics) = curl(&[&format!("{url}/metrics")]);
    let open: i64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("chstorm_gateway_backend_connections "))
        .unwrap_or_else(|| panic!("{metrics}"))
        .parse()
        .unwrap();
    assert!(open >= 1, "{metrics}");

    // SIGHUP with a bad file: the running config stays, and STATUS= says so.
    std::fs::write(&cfg, "clusters: [oops\n").unwrap();
    unsafe { libc_kill(child.0.id() as i32, 1) };
    assert!(next_message(&sock, &mut watchdogs, &logs).starts_with("RELOADING=1\n"));
    let ready = next_message(&sock, &mut watchdogs, &logs);
    assert!(ready.starts_with("READY=1\nSTATUS=config reload failed, running config kept"), "{ready}");
    assert_eq!(curl(&["-u", "late:", "--data-binary", "SELECT 1", &url]).0, 200);

    // Watchdog pings every 100 ms (half of WATCHDOG_USEC): after draining those queued, five
    // more intervals take at least 300 ms (periodic, not a burst; a late first read shortens the
    // span by its delay) and arrive within 10 s.
    sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    while sock.recv(&mut buf).is_ok() {}
    sock.set_nonblocking(false).unwrap();
    let mut times = Vec::new();
    while times.len() < 6 {
        let n = sock.recv(&mut buf).expect("a watchdog ping within 20 s");
        assert_eq!(&buf[..n], b"WATCHDOG=1");
        times.push(Instant::now());
    }
    let span = times[5] - times[0];
    assert!(span >= Duration::from_millis(300) && span < Duration::from_secs(10), "5 watchdog intervals in {span:?}");

    unsafe { libc_kill(child.0.id() as i32, 15) };
    let stopping = next_message(&sock, &mut watchdogs, &logs);
    assert!(stopping.starts_with("STOPPING=1\n"), "{stopping}");
    assert!(child.0.wait().unwrap().success(), "{}", logs());
}

/// Sample names a `/metrics` text (format 0.0.4) declares: every `# TYPE` family, with
/// `_bucket`, `_sum` and `_count` for histograms.
fn exported_names(metrics: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
        let mut it = rest.split_whitespace();
        let (name, kind) = (it.next().unwrap().to_string(), it.next().unwrap_or(""));
        if kind == "histogram" {
            for s in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{s}"));
            }
        }
        names.insert(name);
    }
    names
}

/// The metric names (`chstorm_gateway_...`) a PromQL expression uses.
fn used_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("chstorm_gateway_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// A gateway started in this process (with a thread budget, so those families are declared
/// too): its `/metrics` text.
fn running_gateway_metrics() -> String {
    let env = env();
    let path = env.gateway_config(|t| t.replacen("    shards:\n", "    threads:\n      total: 8\n    shards:\n", 1));
    let gw = env.rt.block_on(chstorm_gateway::Gateway::start(path)).unwrap();
    let url = format!("http://{}", gw.addr);
    assert_eq!(curl(&["--data-binary", "SELECT 1", &url]).0, 200);
    let (s, _, m) = curl(&[&format!("{url}/metrics")]);
    assert_eq!(s, 200);
    env.rt.block_on(gw.shutdown());
    m
}

/// Every metric that a query of deploy/grafana/chstorm-gateway.json uses is one the running
/// gateway exports; the dashboard imports as is (a `${DS_PROMETHEUS}`-free datasource variable).
#[test]
fn every_dashboard_query_uses_a_metric_the_gateway_exports() {
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("deploy/grafana/chstorm-gateway.json")).unwrap())
            .unwrap();
    let vars = dash["templating"]["list"].as_array().unwrap();
    assert!(vars.iter().any(|v| v["type"] == "datasource" && v["query"] == "prometheus" && v["name"] == "datasource"));
    let exported = exported_names(&running_gateway_metrics());
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {}", p["title"]);
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("panel {} has no queries", p["title"]));
        assert!(!targets.is_empty(), "panel {}", p["title"]);
        for t in targets {
            exprs.push((p["title"].as_str().unwrap().to_string(), t["expr"].as_str().unwrap().to_string()));
        }
    }
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let q = v["query"]["query"].as_str().or(v["query"].as_str()).unwrap();
        exprs.push((format!("variable {}", v["name"]), q.to_string()));
    }
    assert!(exprs.len() >= 10, "{exprs:?}");
    for (title, expr) in &exprs {
        let used = used_names(expr);
        assert!(!used.is_empty(), "{title}: {expr} uses no gateway metric");
        for name in used {
            assert!(exported.contains(&name), "{title}: {name} is not exported; exported: {exported:?}");
        }
    }
}

/// deploy/prometheus/chstorm-gateway-rules.yml passes `promtool check rules` and its unit tests
/// (`promtool test rules`), and every metric the rules use is one the running gateway exports.
#[test]
fn alert_rules_pass_promtool_and_use_exported_metrics() {
    let dir = repo().join("deploy/prometheus");
    let rules = dir.join("chstorm-gateway-rules.yml");
    let check = std::process::Command::new("promtool").arg("check").arg("rules").arg(&rules).output().unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let test = std::process::Command::new("promtool")
        .arg("test")
        .arg("rules")
        .arg("chstorm-gateway-rules.test.yml")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
    let doc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(&rules).unwrap()).unwrap();
    let exported = exported_names(&running_gateway_metrics());
    let mut n = 0;
    for g in doc["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            let expr = r["expr"].as_str().unwrap();
            for name in used_names(expr) {
                n += 1;
                assert!(exported.contains(&name), "{:?}: {name} is not exported", r["alert"]);
            }
        }
    }
    assert!(n >= 5);
}

/// deploy/chstorm-gateway.service passes `systemd-analyze verify` (with its ExecStart pointed at
/// this build's binary, which verify requires to exist), and keeps the directives the docs
/// promise. Without systemd-analyze (package systemd) only the directives are checked.
#[test]
fn the_systemd_unit_verifies() {
    let text = std::fs::read_to_string(repo().join("deploy/chstorm-gateway.service")).unwrap();
    for line in [
        "Type=notify",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "LimitNOFILE=65536",
        "User=chstorm",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=",
        "WatchdogSec=10s",
    ] {
        assert!(text.lines().any(|l| l == line), "the unit lacks {line}");
    }
    // The priority the docs give a gateway beside a server is one line to uncomment.
    assert!(text.lines().any(|l| l == "#Nice=-5"), "the unit lacks the commented #Nice=-5");
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("chstorm-gateway.service");
    let shipped = text.replace("/usr/local/bin/chstorm", env!("CARGO_BIN_EXE_chstorm"));
    for variant in [shipped.clone(), shipped.replace("#Nice=-5", "Nice=-5")] {
        std::fs::write(&unit, variant).unwrap();
        match std::process::Command::new("systemd-analyze").arg("verify").arg(&unit).output() {
            Ok(out) => {
                let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
                assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
            }
            Err(e) => eprintln!("systemd-analyze not run ({e}); install the systemd package to verify the unit"),
        }
    }
}

/// `echo -n secret | sha256sum`
const SECRET_SHA256: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

/// deploy/prometheus/prometheus.yml passes `promtool check config`, and Debian's Prometheus,
/// running its two jobs against two gateways of the cluster, scrapes both: `metrics_listen`
/// without credentials, and the client port with basic auth as a user with `metrics: true`;
/// the client-port job without the password finds ClickHouse's 404.
#[test]
fn prometheus_scrapes_metrics_listen_and_the_client_port_with_basic_auth() {
    let shipped = repo().join("deploy/prometheus/prometheus.yml");
    let check = std::process::Command::new("promtool").arg("check").arg("config").arg(&shipped).output().unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let env = env();
    let with_listen = env
        .gateway_config(|t| t.replace("listen: 127.0.0.1:0\n", "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\n"));
    let client_port = env.gateway_config(|t| {
        format!(
            "{}  - name: prometheus\n    password_sha256: \"{SECRET_SHA256}\"\n    cluster: storm\n    metrics: true\n",
            t.replace("    metrics: true  # may read /metrics here\n", "")
        )
    });
    let gw1 = env.rt.block_on(chstorm_gateway::Gateway::start(with_listen)).unwrap();
    let gw2 = env.rt.block_on(chstorm_gateway::Gateway::start(client_port)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("chstorm-gateway.password");
    std::fs::write(&password, "secret\n").unwrap();
    let shipped = std::fs::read_to_string(&shipped).unwrap();
    let config = shipped
        .replace("rule_files: [chstorm-gateway-rules.yml]", "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s")
        .replace("['gw1.internal:9363', 'gw2.internal:9363']", &format!("['{}']", gw1.metrics_addr.unwrap()))
        .replace("['gw3.internal:8124']", &format!("['{}']", gw2.addr))
        .replace("/etc/prometheus/chstorm-gateway.password", password.to_str().unwrap())
        + &format!("  - job_name: no-password\n    static_configs:\n      - targets: ['{}']\n", gw2.addr);
    let config_path = dir.path().join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let prometheus = std::process::Command::new("prometheus")
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
        .spawn()
        .expect("prometheus (Debian's prometheus package, scripts/install-deps) must be installed");
    let mut prometheus = ChildGuard(prometheus);
    let log = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    // Each job's target: (health, lastError), once all three were scraped (at most 30 s).
    let t = Instant::now();
    let targets = loop {
        assert!(prometheus.0.try_wait().unwrap().is_none(), "prometheus exited; its log:\n{}", log());
        let (_, _, body) = curl(&[&format!("http://127.0.0.1:{port}/api/v1/targets")]);
        let seen: std::collections::BTreeMap<String, (String, String)> =
            serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["data"]["activeTargets"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter(|t| t["health"] != "unknown")
                .map(|t| {
                    let s = |k: &str| t[k].as_str().unwrap_or_default().to_string();
                    (t["labels"]["job"].as_str().unwrap_or_default().to_string(), (s("health"), s("lastError")))
                })
                .collect();
        if seen.len() == 3 || t.elapsed() > Duration::from_secs(30) {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(targets.get("chstorm-gateway").map(|t| t.0.as_str()), Some("up"), "{targets:?}\n{}", log());
    assert_eq!(targets.get("chstorm-gateway-client-port").map(|t| t.0.as_str()), Some("up"), "{targets:?}");
    let anonymous = &targets["no-password"];
    assert_eq!(anonymous.0, "down");
    assert!(anonymous.1.contains("404"), "{anonymous:?}");
}
