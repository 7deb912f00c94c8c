//! The record a running server leaves in its directory:
//! `DIR/chstorm-local.json` (a [`ServerInfo`]) and `DIR/clickhouse-server.pid`
//! (the pid and a newline). Both are written when the server answers `/ping`
//! and removed when it is stopped through this crate.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::LocalError;
use crate::ServerInfo;

/// File name of the JSON record.
pub const INFO_FILE: &str = "chstorm-local.json";
/// File name of the pid file.
pub const PID_FILE: &str = "clickhouse-server.pid";

/// Writes both files (each atomically: temp file, then rename).
pub(crate) fn write(dir: &Path, info: &ServerInfo) -> Result<(), LocalError> {
    let json = serde_json::to_string_pretty(info)
        .map_err(|e| LocalError::io("encode the server info", std::io::Error::other(e)))?;
    write_atomic(&dir.join(INFO_FILE), &(json + "\n"))?;
    write_atomic(&dir.join(PID_FILE), &format!("{}\n", info.pid))
}

fn write_atomic(path: &Path, text: &str) -> Result<(), LocalError> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text)
        .and_then(|_| fs::rename(&tmp, path))
        .map_err(|e| LocalError::io(format!("write {}", path.display()), e))
}

/// Reads the JSON record; `None` if there is none.
pub(crate) fn read_info(dir: &Path) -> Result<Option<ServerInfo>, LocalError> {
    let path = dir.join(INFO_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LocalError::io(format!("read {}", path.display()), e)),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| LocalError::InfoFile { path, detail: e.to_string() })
}

/// The recorded pid: from the JSON record if present, else from the pid file.
pub(crate) fn recorded_pid(dir: &Path) -> Result<Option<u32>, LocalError> {
    if let Some(info) = read_info(dir)? {
        return Ok(Some(info.pid));
    }
    let path = dir.join(PID_FILE);
    match fs::read_to_string(&path) {
        Ok(t) => Ok(t.trim().parse().ok()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LocalError::io(format!("read {}", path.display()), e)),
    }
}

/// Removes both files; missing files are fine.
pub(crate) fn remove(dir: &Path) -> Result<(), LocalError> {
    for name in [INFO_FILE, PID_FILE] {
        let path = dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(LocalError::io(format!("remove {}", path.display()), e)),
        }
    }
    Ok(())
}

/// Canonical form of an existing server directory; `None` if it does not exist.
pub(crate) fn existing_dir(dir: &Path) -> Result<Option<PathBuf>, LocalError> {
    match fs::canonicalize(dir) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LocalError::io(format!("resolve directory {}", dir.display()), e)),
    }
}
