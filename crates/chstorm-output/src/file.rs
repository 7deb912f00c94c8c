//! Output files opened before a run, so a bad path fails at once instead of after the run.
//!
//! * [`JsonOut`]: `--json FILE` (`-` for stdout). A folder, a missing folder or an unwritable
//!   file is an error when it is opened; the file is written (replaced) only when the result is
//!   there, and a file this run created is removed again if the run never produced a result.
//! * [`crate::csv::CsvFile`]: `--csv FILE`, checked and opened the same way.

use crate::OutputError;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Where `--json` goes.
#[derive(Debug)]
pub enum JsonOut {
    Stdout,
    File(OpenFile),
}

/// An output file opened for writing before the run.
#[derive(Debug)]
pub struct OpenFile {
    path: PathBuf,
    file: Option<File>,
    /// This run created the file: remove it when nothing is ever written.
    created: bool,
}

/// The error for an output path that is a folder.
pub fn folder_error(path: &Path) -> OutputError {
    OutputError::Io {
        path: path.display().to_string(),
        source: std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a folder; give a file name inside it"),
    }
}

impl OpenFile {
    /// Opens `path` for writing without changing it (no truncation yet). Fails when `path` is a
    /// folder, its folder does not exist, or it cannot be written.
    pub fn open(path: &Path) -> Result<OpenFile, OutputError> {
        let io = |e: std::io::Error| OutputError::Io { path: path.display().to_string(), source: e };
        if path.is_dir() {
            return Err(folder_error(path));
        }
        let existed = path.exists();
        let file = OpenOptions::new().write(true).create(true).truncate(false).open(path).map_err(|e| {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if e.kind() == std::io::ErrorKind::NotFound && !dir.is_dir() {
                io(std::io::Error::new(e.kind(), format!("folder {} does not exist", dir.display())))
            } else {
                io(e)
            }
        })?;
        Ok(OpenFile { path: path.to_path_buf(), file: Some(file), created: !existed })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's contents with `text` (devices and pipes just get `text`).
    pub fn write(mut self, text: &str) -> Result<(), OutputError> {
        let io = |e: std::io::Error| OutputError::Io { path: self.path.display().to_string(), source: e };
        let mut file = self.file.take().expect("written once");
        self.created = false;
        if file.metadata().map(|m| m.is_file()).unwrap_or(false) {
            file.set_len(0).map_err(io)?;
            file.seek(SeekFrom::Start(0)).map_err(io)?;
        }
        file.write_all(text.as_bytes()).map_err(io)?;
        file.flush().map_err(io)
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        if self.created && self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl JsonOut {
    /// `-` is stdout; anything else is opened now (see [`OpenFile::open`]).
    pub fn open(path: &Path) -> Result<JsonOut, OutputError> {
        if path == Path::new("-") {
            return Ok(JsonOut::Stdout);
        }
        OpenFile::open(path).map(JsonOut::File)
    }

    pub fn is_stdout(&self) -> bool {
        matches!(self, JsonOut::Stdout)
    }

    /// Writes `json` and a newline.
    pub fn write(self, json: &str) -> Result<(), OutputError> {
        match self {
            JsonOut::Stdout => {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{json}").map_err(|e| OutputError::Io { path: "stdout".into(), source: e })
            }
            JsonOut::File(f) => f.write(&format!("{json}\n")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_paths_fail_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let e = JsonOut::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a folder"), "{e}");
        let e = JsonOut::open(&dir.path().join("no/such/x.json")).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        assert!(JsonOut::open(Path::new("-")).unwrap().is_stdout());
    }

    #[test]
    fn a_file_is_replaced_only_on_write_and_removed_if_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        std::fs::write(&p, "old contents that are longer").unwrap();
        let f = JsonOut::open(&p).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old contents that are longer", "unchanged until written");
        f.write("{}").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{}\n");
        let q = dir.path().join("new.json");
        drop(JsonOut::open(&q).unwrap());
        assert!(!q.exists(), "a file created for a run that produced nothing is removed");
        drop(JsonOut::open(&p).unwrap());
        assert!(p.exists(), "an existing file is left alone");
    }
}
