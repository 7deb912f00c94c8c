//! Questions about other processes, answered from Linux `/proc`: is a pid
//! alive, is it the server of a given directory, does it own a listening port.

use std::collections::HashSet;
use std::fs;
use std::path::Path;

use crate::config;
use crate::process::config_arg;

/// True if `pid` exists and is not a zombie.
pub(crate) fn is_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Format: "pid (comm) S ..."; comm may contain spaces and parens.
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// True if `pid` is alive, runs a `clickhouse*` binary and was started with
/// `--config-file=DIR/config.xml` (or `--config-file DIR/config.xml`), where
/// `dir` is the canonical server directory.
pub(crate) fn is_server_of(pid: u32, dir: &Path) -> bool {
    if pid == 0 || !is_alive(pid) {
        return false;
    }
    let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<String> =
        raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let Some(argv0) = args.first() else { return false };
    let is_clickhouse = Path::new(argv0).file_name().is_some_and(|n| n.to_string_lossy().starts_with("clickhouse"));
    let config = config::config_path(dir).display().to_string();
    let wanted = config_arg(dir);
    let mentions_dir =
        args.contains(&wanted) || args.windows(2).any(|w| (w[0] == "--config-file" || w[0] == "-C") && w[1] == config);
    is_clickhouse && mentions_dir
}

/// True if process `pid` holds a socket listening on TCP `127.0.0.1:port`
/// (or on the IPv4 wildcard). Used to make sure the server answering a
/// freshly picked port is ours and not a stranger that grabbed the port.
pub(crate) fn listens_on(pid: u32, port: u16) -> bool {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path()).is_ok_and(|target| {
            let t = target.to_string_lossy();
            t.strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode))
        })
    })
}

/// Inodes of the IPv4 sockets in state LISTEN on 127.0.0.1 or 0.0.0.0 at `port`.
fn listening_inodes(port: u16) -> HashSet<u64> {
    const LISTEN: &str = "0A";
    let Ok(table) = fs::read_to_string("/proc/net/tcp") else { return HashSet::new() };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (addr, port_hex) = f.get(1)?.split_once(':')?;
            let ours = (addr == "0100007F" || addr == "00000000")
                && u16::from_str_radix(port_hex, 16).ok()? == port
                && *f.get(3)? == LISTEN;
            if ours {
                f.get(9)?.parse().ok()
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn alive_and_strangers() {
        let dir = Path::new("/nonexistent/chstorm");
        assert!(is_alive(std::process::id()));
        assert!(!is_alive(u32::MAX));
        assert!(!is_server_of(std::process::id(), dir));
        assert!(!is_server_of(0, dir));
    }

    #[test]
    fn finds_own_listener() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listens_on(std::process::id(), port));
        drop(l);
        assert!(!listens_on(std::process::id(), port));
    }
}
