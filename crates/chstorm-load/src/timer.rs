//! Sleeping until an exact instant.
//!
//! tokio's timer wheel has a resolution of 1 ms: a sleep ends on the next millisecond tick, up
//! to 1 ms late. An open loop measures latency from each query's intended send time, so that
//! slack would be added to every latency of a sub-millisecond query. On Linux each open-loop
//! connection therefore sleeps on its own `timerfd` (nanosecond resolution; wake-up is typically
//! within tens of microseconds), driven by the tokio reactor. Elsewhere, or if a timerfd cannot
//! be created, it falls back to tokio's sleep.

use std::time::Instant;

#[cfg(target_os = "linux")]
mod imp {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Instant;
    use tokio::io::unix::AsyncFd;

    pub struct PreciseTimer {
        fd: AsyncFd<OwnedFd>,
    }

    impl PreciseTimer {
        pub fn new() -> io::Result<PreciseTimer> {
            // SAFETY: plain syscall; the returned descriptor is owned below.
            let raw = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: raw is a fresh descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: the descriptor is owned by the OwnedFd that the AsyncFd holds; it stays open
            // until the AsyncFd (and with it the registration) is dropped.
            let fd = unsafe { AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)?;
            Ok(PreciseTimer { fd })
        }

        pub async fn sleep_until(&mut self, due: Instant) -> io::Result<()> {
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            let spec = libc::itimerspec {
                it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
                it_value: libc::timespec {
                    tv_sec: left.as_secs() as libc::time_t,
                    tv_nsec: left.subsec_nanos() as libc::c_long,
                },
            };
            // SAFETY: valid descriptor and a properly initialised itimerspec.
            if unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } < 0 {
                return Err(io::Error::last_os_error());
            }
            loop {
                let mut guard = self.fd.readable().await?;
                let mut buf = [0u8; 8];
                // SAFETY: reading 8 bytes into an 8-byte buffer from our own descriptor.
                let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
                if n == 8 {
                    return Ok(());
                }
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::WouldBlock {
                    guard.clear_ready();
                    continue;
                }
                return Err(err);
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;
    use std::time::Instant;
    pub struct PreciseTimer;
    impl PreciseTimer {
        pub fn new() -> io::Result<PreciseTimer> {
            Err(io::Error::other("no timerfd on this platform"))
        }
        pub async fn sleep_until(&mut self, _: Instant) -> io::Result<()> {
            Ok(())
        }
    }
}

pub use imp::PreciseTimer;

/// Sleeps until `due`, precisely when a timer is given, else with tokio's 1 ms timer.
pub async fn sleep_until(timer: Option<&mut PreciseTimer>, due: Instant) {
    if let Some(t) = timer {
        if t.sleep_until(due).await.is_ok() {
            return;
        }
    }
    tokio::time::sleep_until(due.into()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_close_to_the_due_time() {
        let mut t = PreciseTimer::new().expect("timerfd");
        let mut worst = Duration::ZERO;
        for _ in 0..20 {
            let due = Instant::now() + Duration::from_micros(700);
            sleep_until(Some(&mut t), due).await;
            let now = Instant::now();
            assert!(now >= due, "woke early");
            worst = worst.max(now - due);
        }
        // tokio's own timer would be up to 1 ms late; allow generous slack for a loaded CI box.
        assert!(worst < Duration::from_millis(20), "worst lateness {worst:?}");
    }
}
