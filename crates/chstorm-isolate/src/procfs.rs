//! Facts about processes and the machine, read from Linux `/proc`.

use std::fs;
use std::io;

/// `PF_KTHREAD` in the flags field of `/proc/PID/stat`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// The fields of `/proc/PID/stat` that follow `(comm)`, split on spaces; index 0 is the state.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": comm may contain spaces and parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// True if `pid` exists and is not a zombie.
pub fn pid_exists(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().map(String::as_str) != Some("Z"))
}

/// True if `pid` is a kernel thread.
pub fn is_kernel_thread(pid: u32) -> bool {
    stat_fields(pid).and_then(|f| f.get(6)?.parse::<u64>().ok()).is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// Parent PID.
pub fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// Process group id.
pub fn process_group_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(2)?.parse().ok()
}

/// The thread ids of `pid` (from `/proc/PID/task`), sorted.
pub fn tids(pid: u32) -> io::Result<Vec<u32>> {
    let mut tids: Vec<u32> = fs::read_dir(format!("/proc/{pid}/task"))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// The process (thread group) a thread id belongs to, from `/proc/TID/status`.
pub fn tgid_of(tid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

/// The command line of `pid`, one string per argument.
pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect())
}

/// Every live (non-zombie) process whose process group is `pgid`.
pub fn process_group_members(pgid: u32) -> Vec<u32> {
    all_pids().into_iter().filter(|&p| process_group_of(p) == Some(pgid) && pid_exists(p)).collect()
}

/// Every PID in `/proc`.
pub fn all_pids() -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

/// User plus system CPU time of `pid` (all its threads, including ones that ended), in clock
/// ticks (see [`ticks_per_second`]). None if the process is gone.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let f = stat_fields(pid)?;
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, normally 100).
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// The kernel release, as `uname -r` prints it.
pub fn kernel_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}

/// `(major, minor)` of the running kernel.
pub fn kernel_version() -> Option<(u32, u32)> {
    parse_version(&kernel_release())
}

fn parse_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// CPUs this process may run on (at least 1).
pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Processes on this machine that look like a ClickHouse server: the binary's name starts
/// with `clickhouse-server`, or it is the all-in-one `clickhouse` run as `clickhouse server`.
pub fn clickhouse_servers() -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|&p| {
            let Some(args) = cmdline(p) else { return false };
            let Some(argv0) = args.first() else { return false };
            let name = argv0.rsplit('/').next().unwrap_or(argv0);
            (name.starts_with("clickhouse-server")
                || (name == "clickhouse" && args.get(1).map(String::as_str) == Some("server")))
                && pid_exists(p)
        })
        .collect()
}

/// True if `pid` owns a TCP socket listening on `port` (IPv4 or IPv6, any address).
pub fn listens_on(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let Some((_, port_hex)) = f.get(1).and_then(|a| a.rsplit_once(':')) else { continue };
            if u16::from_str_radix(port_hex, 16).ok() == Some(port) && f.get(3) == Some(&"0A") {
                if let Some(inode) = f.get(9).and_then(|i| i.parse::<u64>().ok()) {
                    inodes.push(inode);
                }
            }
        }
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path()).is_ok_and(|t| {
            let t = t.to_string_lossy();
            t.strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse::<u64>().ok())
                .is_some_and(|i| inodes.contains(&i))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_facts() {
        let me = std::process::id();
        assert!(pid_exists(me));
        assert!(!pid_exists(u32::MAX - 1));
        assert!(!is_kernel_thread(me));
        assert!(tids(me).unwrap().contains(&me));
        assert_eq!(tgid_of(me), Some(me));
        assert!(cpu_ticks(me).is_some());
        assert!(ticks_per_second() > 0);
        assert!(!cmdline(me).unwrap().is_empty());
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(parse_version("5.10.0-60.18.0.50.oe2203.x86_64"), Some((5, 10)));
        assert_eq!(parse_version("x"), None);
        assert!(kernel_version().is_some());
    }
}
