//! Integration tests against the real clickhouse-server. Every server here is
//! started with `die_with_parent: true` and owned by a `LocalServer`, so it is
//! stopped even when an assertion fails.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use chstorm_local::{down, ping, status, LocalError, LocalServer, ServerInfo, ServerSpec, INFO_FILE, PID_FILE};

const PING: Duration = Duration::from_secs(2);

fn spec(dir: &Path) -> ServerSpec {
    let mut s = ServerSpec::new(dir);
    s.die_with_parent = true;
    s
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()) != Some("Z"))
}

#[test]
fn start_query_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let server = LocalServer::start(spec(tmp.path())).unwrap();
    let pid = server.pid();
    let url = server.http_url().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert!(server.native_url().starts_with("clickhouse://127.0.0.1:"));
    assert!(ping(&url, PING));

    let version = server.query("SELECT version()").unwrap();
    assert!(version.starts_with(|c: char| c.is_ascii_digit()), "{version:?}");
    assert_eq!(server.query("SELECT 1 + 1").unwrap(), "2\n");
    match server.query("SELECT no_such_function()") {
        Err(LocalError::Query { status, message }) => {
            assert_ne!(status, 200);
            assert!(message.contains("no_such_function") && !message.contains('\n'), "{message}");
        }
        other => panic!("expected a query error, got {other:?}"),
    }

    let recorded: ServerInfo = serde_json::from_str(&fs::read_to_string(tmp.path().join(INFO_FILE)).unwrap()).unwrap();
    assert_eq!(&recorded, server.info());
    assert_eq!(fs::read_to_string(tmp.path().join(PID_FILE)).unwrap().trim(), pid.to_string());
    assert_eq!(status(tmp.path()).unwrap().as_ref(), Some(server.info()));

    // A second server in the same directory is refused.
    match LocalServer::start(spec(tmp.path())) {
        Err(LocalError::AlreadyRunning { pid: p, .. }) => assert_eq!(p, pid),
        other => panic!("expected AlreadyRunning, got {other:?}"),
    }

    server.stop().unwrap();
    assert!(!alive(pid));
    assert!(!ping(&url, PING));
    assert_eq!(status(tmp.path()).unwrap(), None);
    assert!(!tmp.path().join(INFO_FILE).exists());
}

#[test]
fn tls_ports_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(tmp.path());
    s.tls = true;
    let server = LocalServer::start(s).unwrap();
    let info = server.info();
    let https = info.https_url.as_deref().unwrap();
    assert!(https.starts_with("https://127.0.0.1:"));
    assert!(info.native_tls_url.as_deref().unwrap().starts_with("clickhouses://127.0.0.1:"));
    let ca = info.ca_cert.as_deref().unwrap();
    assert!(tmp.path().join("tls/server.key").exists());

    // The native TLS port listens.
    TcpStream::connect(("127.0.0.1", info.tcp_tls_port.unwrap())).unwrap();
    // The HTTPS port answers /ping to a client that trusts only the certificate.
    let answer = https_get(ca, info.https_port.unwrap(), "/ping");
    assert!(answer.starts_with("HTTP/1.") && answer.ends_with("\r\n\r\nOk.\n"), "{answer:?}");
}

/// A blocking HTTPS GET with rustls, trusting only `ca` and checking the name 127.0.0.1.
fn https_get(ca: &Path, port: u16, path: &str) -> String {
    let mut roots = rustls::RootCertStore::empty();
    let pem = fs::read(ca).unwrap();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    write!(tls, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut out = Vec::new();
    match tls.read_to_end(&mut out) {
        Ok(_) => {}
        // Some servers close without close_notify; the body is complete anyway.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => panic!("TLS read: {e}"),
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn kill9_then_restart_on_same_ports() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = LocalServer::start(spec(tmp.path())).unwrap();
    server.query("CREATE TABLE t (x UInt8) ENGINE = TinyLog").unwrap();
    server.query("INSERT INTO t VALUES (7)").unwrap();
    let (old_pid, old_info) = (server.pid(), server.info().clone());

    server.kill9();
    assert!(!alive(old_pid));
    assert!(!ping(server.http_url(), PING));
    assert_eq!(status(tmp.path()).unwrap(), None);

    server.restart().unwrap();
    assert_ne!(server.pid(), old_pid);
    assert_eq!((server.info().http_port, server.info().tcp_port), (old_info.http_port, old_info.tcp_port));
    assert_eq!(server.query("SELECT sum(x) FROM t").unwrap(), "7\n");
    assert_eq!(status(tmp.path()).unwrap().map(|i| i.pid), Some(server.pid()));
    assert!(matches!(server.restart(), Err(LocalError::StillRunning(_))));
}

#[test]
fn down_ignores_stale_pid_of_a_stranger() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(!down(tmp.path()).unwrap(), "empty dir");
    assert!(!down(&tmp.path().join("missing")).unwrap(), "missing dir");

    let mut sleeper = Command::new("sleep").arg("30").stdin(Stdio::null()).spawn().unwrap();
    fs::write(tmp.path().join(PID_FILE), format!("{}\n", sleeper.id())).unwrap();
    let result = down(tmp.path());
    let sleeper_alive = alive(sleeper.id());
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(!result.unwrap());
    assert!(sleeper_alive, "down() killed a process that is not our server");

    fs::write(tmp.path().join(PID_FILE), format!("{}\n", std::process::id())).unwrap();
    assert!(!down(tmp.path()).unwrap());
    assert_eq!(status(tmp.path()).unwrap(), None);
}

#[test]
fn detach_then_status_and_down() {
    let tmp = tempfile::tempdir().unwrap();
    let info = LocalServer::start(spec(tmp.path())).unwrap().detach();
    // Stop it at the end whatever happens above (down() is a no-op once it is gone).
    struct Guard<'a>(&'a Path);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            let _ = down(self.0);
        }
    }
    let _guard = Guard(tmp.path());

    assert!(alive(info.pid), "detached server keeps running");
    assert_eq!(status(tmp.path()).unwrap(), Some(info.clone()));
    assert!(down(tmp.path()).unwrap());
    assert!(!alive(info.pid));
    // The detached server is still our child here (not in the CLI): reap the zombie.
    // SAFETY: plain syscall on a pid that is our exited child.
    unsafe { libc::waitpid(info.pid as libc::pid_t, std::ptr::null_mut(), 0) };
    assert!(!ping(&info.http_url, PING));
    assert_eq!(status(tmp.path()).unwrap(), None);
    assert!(!down(tmp.path()).unwrap());
}

#[test]
fn busy_given_port_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut s = spec(tmp.path());
    s.http_port = Some(free.local_addr().unwrap().port());
    s.tcp_port = Some(busy.local_addr().unwrap().port());
    drop(free);
    match LocalServer::start(s) {
        Err(e @ LocalError::PortInUse { attempts: 1, .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("leave the ports unset") && !msg.contains('\n'), "{msg}");
        }
        other => panic!("expected PortInUse, got {other:?}"),
    }
}

#[test]
fn missing_binary_is_explained() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(tmp.path());
    s.binary = Some(tmp.path().join("no-clickhouse-server"));
    let err = LocalServer::start(s).unwrap_err();
    assert!(matches!(err, LocalError::BinaryMissing(_)), "{err}");
}
