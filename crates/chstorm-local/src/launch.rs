//! One start attempt: spawn the server with the config already written in
//! `DIR`, then poll `/ping` every 100 ms until it answers, the process exits,
//! or the startup timeout passes.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use crate::config::{self, Ports};
use crate::error::LocalError;
use crate::http::ping;
use crate::process::{kill_child, server_command, spawn};
use crate::procfs::listens_on;

/// Interval between two `/ping` probes during startup.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// Timeout of one `/ping` probe during startup.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// What ClickHouse logs when it cannot bind a port.
const ADDR_IN_USE: &str = "Address already in use";

/// Spawns the server in `dir` and waits until it answers `/ping` on
/// `ports.http` *and* owns that listening socket (so a stranger that grabbed
/// the port is not mistaken for it). A busy port gives
/// [`LocalError::PortInUse`] with `attempts: 1`; the caller may retry.
pub(crate) fn launch(
    binary: &Path,
    dir: &Path,
    ports: Ports,
    die_with_parent: bool,
    timeout: Duration,
) -> Result<Child, LocalError> {
    let err_log = config::error_log_path(dir);
    let out_log = config::stdout_log_path(dir);
    let marks = (file_len(&err_log), file_len(&out_log));
    let cmd = server_command(binary, dir)?;
    let mut child =
        spawn(cmd, die_with_parent).map_err(|e| LocalError::io(format!("start {}", binary.display()), e))?;
    let url = format!("http://127.0.0.1:{}", ports.http);
    let new_logs = || format!("{}\n{}", read_from(&err_log, marks.0), read_from(&out_log, marks.1));
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let logs = new_logs();
            if logs.contains(ADDR_IN_USE) {
                return Err(LocalError::PortInUse { ports: ports.describe(), attempts: 1 });
            }
            return Err(LocalError::Exited { status: status.to_string(), detail: last_error(&logs), log: err_log });
        }
        if ping(&url, PROBE_TIMEOUT) && listens_on(child.id(), ports.http) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = kill_child(&mut child);
            let logs = new_logs();
            if logs.contains(ADDR_IN_USE) {
                return Err(LocalError::PortInUse { ports: ports.describe(), attempts: 1 });
            }
            return Err(LocalError::StartupTimeout { url, timeout, detail: last_error(&logs), log: err_log });
        }
        thread::sleep(PROBE_INTERVAL);
    }
}

fn file_len(path: &Path) -> u64 {
    path.metadata().map(|m| m.len()).unwrap_or(0)
}

/// The text appended to `path` after byte `offset` (at most the last 64 KiB).
fn read_from(path: &Path, offset: u64) -> String {
    const MAX: u64 = 64 * 1024;
    let Ok(mut f) = File::open(path) else { return String::new() };
    let start = offset.max(file_len(path).saturating_sub(MAX));
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(start)).is_ok() && f.read_to_end(&mut buf).is_ok() {
        String::from_utf8_lossy(&buf).into_owned()
    } else {
        String::new()
    }
}

/// The most telling line of fresh log text: the last one that mentions an
/// error or exception, else the last non-empty one, else a placeholder.
fn last_error(logs: &str) -> String {
    let lines: Vec<&str> = logs.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let line = lines
        .iter()
        .rev()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("error") || l.contains("exception")
        })
        .or(lines.last())
        .copied()
        .unwrap_or("no error was logged");
    const MAX_CHARS: usize = 300;
    match line.char_indices().nth(MAX_CHARS) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_error_line() {
        assert_eq!(last_error("a\n<Error> Application: boom\nStopped\n"), "<Error> Application: boom");
        assert_eq!(last_error("a\nlast\n\n"), "last");
        assert_eq!(last_error(""), "no error was logged");
        assert_eq!(last_error(&"error".repeat(100)).len(), 303);
    }
}
