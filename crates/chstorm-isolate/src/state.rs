//! The state file: the [`Record`]s of `chstorm isolate` runs not yet undone, as JSON.
//!
//! Default location ([`default_path`]): `$XDG_RUNTIME_DIR/chstorm-isolate.json` when
//! `XDG_RUNTIME_DIR` is set, else `/run/chstorm-isolate.json` for root, else
//! `/tmp/chstorm-isolate-UID.json`. The file is rewritten whole (write to a temporary file,
//! then rename) and removed when the last record is undone.

use crate::error::IsolateError;
use crate::record::Record;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Schema id written into the state file.
pub const STATE_SCHEMA: &str = "chstorm.isolate-state.v1";

#[derive(Debug, Serialize, Deserialize)]
struct StateFile {
    schema: String,
    /// Oldest first.
    records: Vec<Record>,
}

/// Where the state is kept when `--state` is not given.
pub fn default_path() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("chstorm-isolate.json");
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 && Path::new("/run").is_dir() {
        PathBuf::from("/run/chstorm-isolate.json")
    } else {
        PathBuf::from(format!("/tmp/chstorm-isolate-{uid}.json"))
    }
}

/// The records in `path`, oldest first; none if the file does not exist.
pub fn load(path: &Path) -> Result<Vec<Record>, IsolateError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(IsolateError::State { path: path.into(), why: e.to_string() }),
    };
    let file: StateFile = serde_json::from_str(&text)
        .map_err(|e| IsolateError::State { path: path.into(), why: format!("not a {STATE_SCHEMA} file: {e}") })?;
    if file.schema != STATE_SCHEMA {
        return Err(IsolateError::State {
            path: path.into(),
            why: format!("schema is {}, expected {STATE_SCHEMA}", file.schema),
        });
    }
    Ok(file.records)
}

/// Writes `records` to `path` (removes the file when there are none).
pub fn save(path: &Path, records: &[Record]) -> Result<(), IsolateError> {
    let err = |e: std::io::Error| IsolateError::State { path: path.into(), why: e.to_string() };
    if records.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(err(e)),
            _ => Ok(()),
        };
    }
    let file = StateFile { schema: STATE_SCHEMA.into(), records: records.to_vec() };
    let text = serde_json::to_string_pretty(&file).map_err(|e| IsolateError::Internal(e.to_string()))?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text + "\n").map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Appends `record` to the file at `path`.
pub fn append(path: &Path, record: Record) -> Result<(), IsolateError> {
    let mut all = load(path)?;
    all.push(record);
    save(path, &all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mechanism, Target};

    #[test]
    fn round_trip_and_removal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        assert!(load(&path).unwrap().is_empty());
        // An apply that changes nothing real: SCHED_IDLE on a helper process we own.
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let rec = crate::apply(Mechanism::SchedIdle, &Target::Pids(vec![child.id()])).unwrap();
        append(&path, rec.clone()).unwrap();
        let back = load(&path).unwrap();
        assert_eq!(back, vec![rec]);
        back[0].undo();
        save(&path, &[]).unwrap();
        assert!(!path.exists());
        std::fs::write(&path, "{\"schema\": \"x\", \"records\": []}").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("expected chstorm.isolate-state.v1"));
        let _ = child.kill();
        let _ = child.wait();
    }
}
