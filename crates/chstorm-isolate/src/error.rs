//! The crate's error type. Every message is one line and says whose fault it is (see
//! [`Fault`]): the caller's (a PID that does not exist), the environment's (no permission, no
//! writable cgroup, an old kernel), or ours.

use std::io;
use std::path::{Path, PathBuf};

/// How to get permission for cgroup changes.
pub(crate) const CGROUP_HINT: &str = "run as root or give a writable cgroup";
/// How to get permission for scheduling changes.
pub(crate) const SCHED_HINT: &str = "run as root (CAP_SYS_NICE) or as the owner of the process";

/// Whose fault an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The caller asked for something wrong (a missing PID, a bad path, a bad state file).
    Client,
    /// This machine cannot do it (permissions, mounts, kernel).
    Environment,
    /// A bug in chstorm.
    Internal,
}

/// Everything that can go wrong detecting, applying or undoing an isolation.
#[derive(Debug, thiserror::Error)]
pub enum IsolateError {
    /// A named PID does not exist (or is a zombie).
    #[error("pid {0} does not exist")]
    NoSuchPid(u32),
    /// A named PID must not be isolated (init, a kernel thread).
    #[error("refusing to isolate pid {pid}: {why}")]
    Refused { pid: u32, why: String },
    /// A named cgroup does not exist.
    #[error("cgroup {0} does not exist")]
    NoSuchCgroup(PathBuf),
    /// A named cgroup is not in the hierarchy the mechanism works on.
    #[error("cgroup {path} is not under {mount}, where {what} lives; give a path in that hierarchy")]
    WrongHierarchy { path: PathBuf, mount: PathBuf, what: String },
    /// Permission denied (EACCES/EPERM); `hint` says how to get it.
    #[error("no permission to {what}: {hint}")]
    NoPermission { what: String, hint: &'static str },
    /// No cgroup hierarchy with the needed controller is mounted writable.
    #[error("no writable cgroup: {0}")]
    NoWritableCgroup(String),
    /// The kernel lacks the feature.
    #[error("kernel {release} is too old or lacks it: {what}")]
    OldKernel { release: String, what: String },
    /// The mechanism does not exist on this machine for another reason.
    #[error("{mechanism} is not available here: {why}")]
    Unavailable { mechanism: String, why: String },
    /// Any other system call failure.
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The state file is unreadable or malformed.
    #[error("state file {path}: {why}")]
    State { path: PathBuf, why: String },
    /// Neither processes, a cgroup nor a command were named.
    #[error("say what to isolate: --pid PID, --cgroup PATH or -- CMD ARGS (or --undo, --detect)")]
    NothingToIsolate,
    /// An undo for given PIDs or a cgroup found no record of them.
    #[error("{} records no isolation of the given --pid/--cgroup", .0.display())]
    NotInState(PathBuf),
    /// The state file could not take the new record; the isolation was undone.
    #[error("the isolation was undone because it could not be recorded")]
    NotRecorded(#[source] Box<IsolateError>),
    /// A bug.
    #[error("internal error: {0}")]
    Internal(String),
}

impl IsolateError {
    /// Whose fault this is.
    pub fn fault(&self) -> Fault {
        use IsolateError::*;
        match self {
            NoSuchPid(_)
            | Refused { .. }
            | NoSuchCgroup(_)
            | WrongHierarchy { .. }
            | State { .. }
            | NothingToIsolate
            | NotInState(_) => Fault::Client,
            NoPermission { .. } | NoWritableCgroup(_) | OldKernel { .. } | Unavailable { .. } | Io { .. } => {
                Fault::Environment
            }
            NotRecorded(e) => e.fault(),
            Internal(_) => Fault::Internal,
        }
    }

    /// The message without the mechanism's name, for lists that already show it.
    pub fn reason(&self) -> String {
        match self {
            IsolateError::Unavailable { why, .. } => why.clone(),
            e => e.to_string(),
        }
    }

    /// Maps an I/O error on `path` while doing `what` to the most telling variant.
    pub(crate) fn io(what: impl Into<String>, path: &Path, e: io::Error) -> IsolateError {
        let what = what.into();
        match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => IsolateError::NoPermission { what, hint: CGROUP_HINT },
            Some(libc::EROFS) => {
                IsolateError::NoWritableCgroup(format!("{} is on a read-only file system", path.display()))
            }
            _ => IsolateError::Io { what, source: e },
        }
    }
}

/// True if `e` says the process or thread is gone.
pub(crate) fn is_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ESRCH) | Some(libc::ENOENT))
}
