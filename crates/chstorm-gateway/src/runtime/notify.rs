//! systemd's service notification protocol (`sd_notify(3)`), so that a `Type=notify` (or
//! `Type=notify-reload`) unit knows when the gateway is ready, reloading or stopping, and can
//! watch it with `WatchdogSec=`.
//!
//! The protocol is a datagram of `KEY=VALUE` lines sent to the Unix socket named by
//! `NOTIFY_SOCKET` (a path, or `@name` for Linux's abstract namespace). It is written here
//! directly: a few lines over `std::os::unix::net::UnixDatagram`, no new dependency. Without
//! `NOTIFY_SOCKET` every call does nothing. The gateway sends:
//!
//! * `READY=1` once its listeners are bound and the first health round has finished;
//! * `RELOADING=1` with `MONOTONIC_USEC=` (`CLOCK_MONOTONIC`, µs) when a SIGHUP reload starts,
//!   then `READY=1` with a `STATUS=` saying whether the new config was taken;
//! * `STOPPING=1` when a drain starts;
//! * `WATCHDOG=1` every half of `WATCHDOG_USEC`, when the unit sets it (and `WATCHDOG_PID`, if
//!   set, is this process).
//!
//! A datagram that cannot be sent is ignored, and the first such failure logged: the service
//! manager being away never stops the gateway.

use crate::log::log;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// The notification socket of the service manager, when there is one.
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    /// A send failed and was logged; later failures are not (a watchdog ping would log one
    /// every period).
    warned: std::sync::atomic::AtomicBool,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`; unset or empty: a notifier that does nothing. A value that is not
    /// a usable socket address is logged and also gives one that does nothing.
    pub fn from_env() -> Notifier {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET").filter(|p| !p.is_empty()) else {
            return Notifier::new(None);
        };
        let path = path.to_string_lossy().into_owned();
        match open(&path) {
            Ok(target) => Notifier::new(Some(target)),
            Err(e) => {
                log(
                    "warn",
                    "NOTIFY_SOCKET is not usable; no service notifications",
                    serde_json::json!({"socket": path, "error": e.to_string()}),
                );
                Notifier::new(None)
            }
        }
    }

    fn new(target: Option<(UnixDatagram, SocketAddr)>) -> Notifier {
        Notifier { target, warned: Default::default() }
    }

    /// True when there is a service manager to notify.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends `lines` (`KEY=VALUE`, newline-separated) as one datagram.
    pub fn send(&self, lines: &str) {
        let Some((sock, addr)) = &self.target else { return };
        let failed = sock.send_to_addr(lines.as_bytes(), addr).err();
        if let Some(e) = failed.filter(|_| !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)) {
            log("warn", "service notification not sent", serde_json::json!({"message": lines, "error": e.to_string()}));
        }
    }

    /// `READY=1` with a `STATUS=` line.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// `RELOADING=1` with the `MONOTONIC_USEC=` that `Type=notify-reload` asks for.
    pub fn reloading(&self) {
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the config", monotonic_usec()));
    }

    /// `STOPPING=1` with a `STATUS=` line.
    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }

    /// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, when it is set, positive, and
    /// `WATCHDOG_PID` (if set) names this process; else `None`.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.target.as_ref()?;
        watchdog_interval(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        )
    }

    /// Sends `WATCHDOG=1` every [`Notifier::watchdog_interval`], forever (nothing to do without
    /// a watchdog: then it never resolves).
    pub async fn watchdog(&self) {
        let Some(every) = self.watchdog_interval() else { return std::future::pending().await };
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.send("WATCHDOG=1");
        }
    }
}

fn open(path: &str) -> std::io::Result<(UnixDatagram, SocketAddr)> {
    let addr = match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())?
        }
        None if path.starts_with('/') => SocketAddr::from_pathname(path)?,
        None => return Err(std::io::Error::other("neither an absolute path nor @abstract")),
    };
    let sock = UnixDatagram::unbound()?;
    // A full socket buffer must never block the caller (the signal loop).
    sock.set_nonblocking(true)?;
    Ok((sock, addr))
}

/// The watchdog period from the environment's values: half of `WATCHDOG_USEC` (µs).
fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok() != Some(me) {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2).max(Duration::from_millis(1)))
}

/// `CLOCK_MONOTONIC` now, in microseconds.
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// A `STATUS=` value is one line.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn messages_reach_a_path_and_an_abstract_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        server.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = Notifier::new(Some(open(path.to_str().unwrap()).unwrap()));
        n.ready("serving\non 2 lines");
        assert_eq!(recv(&server), "READY=1\nSTATUS=serving on 2 lines");
        n.reloading();
        let msg = recv(&server);
        let usec: u64 = msg.lines().find_map(|l| l.strip_prefix("MONOTONIC_USEC=")).unwrap().parse().unwrap();
        assert!(msg.starts_with("RELOADING=1\n") && usec > 0 && usec <= monotonic_usec(), "{msg}");
        n.stopping("draining");
        assert_eq!(recv(&server), "STOPPING=1\nSTATUS=draining");

        let name = format!("chstorm-notify-test-{}", std::process::id());
        let abs = {
            use std::os::linux::net::SocketAddrExt;
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap()
        };
        abs.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = Notifier::new(Some(open(&format!("@{name}")).unwrap()));
        n.send("WATCHDOG=1");
        assert_eq!(recv(&abs), "WATCHDOG=1");
    }

    #[test]
    fn nothing_to_notify_and_bad_addresses_do_nothing() {
        let n = Notifier::new(None);
        assert!(!n.enabled());
        n.ready("x");
        assert_eq!(n.watchdog_interval(), None);
        assert!(open("relative/path").is_err());
        // A socket nobody listens on: the send fails, is logged, and nothing panics.
        let dir = tempfile::tempdir().unwrap();
        let n = Notifier::new(Some(open(dir.path().join("gone.sock").to_str().unwrap()).unwrap()));
        n.ready("x");
    }

    #[test]
    fn the_watchdog_runs_at_half_its_period_for_this_process_only() {
        let half = Some(Duration::from_secs(5));
        assert_eq!(watchdog_interval(Some("10000000"), None, 7), half);
        assert_eq!(watchdog_interval(Some("10000000"), Some("7"), 7), half);
        assert_eq!(watchdog_interval(Some("10000000"), Some("8"), 7), None, "another process's watchdog");
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("x"), None, 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
    }
}
