//! The crate's error type. Each variant's doc says whose fault it is and whether trying again
//! can help; the messages name the command-line flag to change where there is one. A context
//! and its cause are kept apart (Display, then `source()`), so a one-line rendering of the
//! chain reads `what failed: why`.

use chstorm_isolate::IsolateError;
use std::path::PathBuf;

/// Everything that ends a colocate run with an error (an interrupted run is not an error).
#[derive(Debug, thiserror::Error)]
pub enum ColocateError {
    /// The asked-for isolation is not available on this machine (the environment's; trying
    /// again will not help; the message lists what is available).
    #[error("--isolation: {0}")]
    Isolation(IsolateError),
    /// The offline command is blank (the caller's).
    #[error("--offline-cmd is empty; give a command that keeps the CPU busy")]
    EmptyCommand,
    /// An output's folder does not exist (the caller's); checked before anything runs.
    #[error("cannot write {}: folder {} does not exist", .path.display(), .dir.display())]
    NoFolder { path: PathBuf, dir: PathBuf },
    /// No temporary folder for the local server (the environment's).
    #[error("cannot create a temporary folder for the local server")]
    TempDir(#[source] std::io::Error),
    /// The local server did not start (the environment's: no clickhouse-server installed, no
    /// free port; the message says which).
    #[error("cannot start the local server (give --url to use another)")]
    LocalServer(#[source] chstorm_local::LocalError),
    /// A target URL that does not parse (ours: the local server's URL is generated).
    #[error(transparent)]
    Target(#[from] chstorm_proto::ProtoError),
    /// A phase's bench could not start (the server's or the network's; a retry may help once
    /// the server answers). The offline load is stopped and the isolation undone first.
    #[error("cannot run against {target}")]
    Run {
        target: String,
        #[source]
        source: chstorm_load::LoadError,
    },
    /// The offline command ended during its warm-up (the caller's: it must keep running).
    #[error("the offline load ({0}) exited during its warm-up; give a command that keeps running")]
    LoadExited(String),
    /// Starting, isolating or stopping the offline load failed (see [`IsolateError::fault`]).
    #[error(transparent)]
    Offline(#[from] IsolateError),
    /// Merging rounds or appending CSV rows failed (see the message).
    #[error(transparent)]
    Output(#[from] chstorm_output::OutputError),
    /// An output file could not be written (the environment's).
    #[error("cannot write {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A bug in chstorm.
    #[error("internal error: {0}")]
    Internal(String),
}
