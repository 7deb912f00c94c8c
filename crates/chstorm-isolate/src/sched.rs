//! Per-thread scheduling policy and nice value, through `libc` directly.
//!
//! On Linux both are attributes of a thread (TID), not of a process: `sched_setscheduler(tid)`
//! and `setpriority(PRIO_PROCESS, tid)` change one thread. A new thread starts with its
//! creator's policy and nice value (unless `SCHED_RESET_ON_FORK` is set).

use serde::{Deserialize, Serialize};
use std::io;

/// Flag OR-ed into the policy by `sched_getscheduler` when reset-on-fork is set.
const RESET_ON_FORK: i32 = 0x4000_0000;

/// A thread's scheduling attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSched {
    /// `SCHED_OTHER` (0), `SCHED_FIFO` (1), `SCHED_RR` (2), `SCHED_BATCH` (3), `SCHED_IDLE` (5),
    /// possibly with `SCHED_RESET_ON_FORK` (0x40000000) OR-ed in.
    pub policy: i32,
    /// Real-time priority (0 for the non-real-time policies).
    pub rt_priority: i32,
    /// Nice value, -20..=19.
    pub nice: i32,
}

impl ThreadSched {
    /// `SCHED_IDLE`, `SCHED_OTHER`, ...
    pub fn policy_name(&self) -> &'static str {
        policy_name(self.policy)
    }
}

/// The name of a policy number.
pub fn policy_name(policy: i32) -> &'static str {
    match policy & !RESET_ON_FORK {
        libc::SCHED_OTHER => "SCHED_OTHER",
        libc::SCHED_FIFO => "SCHED_FIFO",
        libc::SCHED_RR => "SCHED_RR",
        libc::SCHED_BATCH => "SCHED_BATCH",
        libc::SCHED_IDLE => "SCHED_IDLE",
        6 => "SCHED_DEADLINE",
        _ => "unknown",
    }
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads the policy, RT priority and nice value of thread `tid` (0: the calling thread).
pub fn get(tid: u32) -> io::Result<ThreadSched> {
    let t = tid as libc::pid_t;
    // SAFETY: plain system calls with valid pointers.
    unsafe {
        let policy = libc::sched_getscheduler(t);
        check(policy)?;
        let mut p = libc::sched_param { sched_priority: 0 };
        check(libc::sched_getparam(t, &mut p))?;
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, t as libc::id_t);
        if nice == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ThreadSched { policy, rt_priority: p.sched_priority, nice })
    }
}

/// Sets the policy (reset-on-fork flag included) and RT priority of thread `tid`.
pub fn set_policy(tid: u32, policy: i32, rt_priority: i32) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: rt_priority };
    // SAFETY: plain system call with a valid pointer.
    check(unsafe { libc::sched_setscheduler(tid as libc::pid_t, policy, &p) })
}

/// Sets the nice value of thread `tid`.
pub fn set_nice(tid: u32, nice: i32) -> io::Result<()> {
    // SAFETY: plain system call.
    check(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) })
}

/// Puts thread `tid` into `SCHED_IDLE`, keeping its reset-on-fork flag.
pub fn set_idle(tid: u32, before: &ThreadSched) -> io::Result<()> {
    set_policy(tid, libc::SCHED_IDLE | (before.policy & RESET_ON_FORK), 0)
}

/// Restores `before` on thread `tid`: the policy first, then the nice value.
pub fn restore(tid: u32, before: &ThreadSched) -> io::Result<()> {
    set_policy(tid, before.policy, before.rt_priority)?;
    set_nice(tid, before.nice)
}

/// Checks that this kernel accepts `SCHED_IDLE`, on a short-lived helper thread.
pub fn probe_sched_idle() -> io::Result<()> {
    std::thread::spawn(|| {
        let before = get(0)?;
        set_idle(0, &before)?;
        let after = get(0)?;
        if after.policy & !RESET_ON_FORK != libc::SCHED_IDLE {
            return Err(io::Error::other(format!("policy read back as {}", after.policy_name())));
        }
        Ok(())
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("probe thread panicked")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_and_back_on_a_thread() {
        std::thread::spawn(|| {
            let tid = unsafe { libc::gettid() } as u32;
            let before = get(tid).unwrap();
            set_idle(tid, &before).unwrap();
            assert_eq!(get(tid).unwrap().policy_name(), "SCHED_IDLE");
            set_nice(tid, 19).unwrap();
            // Going back to SCHED_OTHER and nice 0 needs CAP_SYS_NICE or RLIMIT_NICE.
            if restore(tid, &before).is_ok() {
                assert_eq!(get(tid).unwrap(), before);
            }
        })
        .join()
        .unwrap();
        probe_sched_idle().unwrap();
    }

    #[test]
    fn names() {
        assert_eq!(policy_name(libc::SCHED_IDLE | RESET_ON_FORK), "SCHED_IDLE");
        assert_eq!(policy_name(0), "SCHED_OTHER");
    }
}
