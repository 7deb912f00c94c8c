//! The shared servers are started once per test process and reused.

use std::time::Duration;

use chstorm_local::{ping, shared_server, shared_tls_server, status};

#[test]
fn shared_server_is_reused() {
    let a = shared_server();
    let b = shared_server();
    assert_eq!(a.pid(), b.pid());
    assert!(std::ptr::eq(a, b));
    assert!(ping(a.http_url(), Duration::from_secs(2)));
    assert_eq!(a.query("SELECT 42").unwrap(), "42\n");
    assert_eq!(status(&a.info().dir).unwrap().map(|i| i.pid), Some(a.pid()));
}

#[test]
fn shared_server_from_many_threads() {
    let pids: Vec<u32> =
        (0..4).map(|_| std::thread::spawn(|| shared_server().pid())).map(|t| t.join().unwrap()).collect();
    assert!(pids.iter().all(|&p| p == pids[0]));
}

#[test]
fn shared_tls_server_is_separate() {
    let tls = shared_tls_server();
    assert_eq!(tls.pid(), shared_tls_server().pid());
    assert_ne!(tls.pid(), shared_server().pid());
    assert!(tls.info().https_url.is_some());
    assert!(tls.info().ca_cert.as_ref().is_some_and(|p| p.exists()));
}
