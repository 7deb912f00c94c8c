//! What an isolation changed ([`Record`]), reading it back, and undoing it in reverse order.

use crate::cgroupfs::{self, CgroupMount, Hierarchy};
use crate::error::is_gone;
use crate::mechanism::Mechanism;
use crate::procfs;
use crate::sched::{self, ThreadSched};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What to isolate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// These processes: every thread, and (with a cgroup mechanism) threads and children
    /// started later.
    Pids(Vec<u32>),
    /// An existing cgroup: its own `cpu.*` file is set (SCHED_IDLE: every thread listed in it).
    /// An absolute path under a cgroup mount, or a path relative to the hierarchy's root.
    Cgroup(PathBuf),
    /// A command started already isolated (see [`crate::prepare_command`]).
    Command(Vec<String>),
}

/// A cgroup file written, and what to write back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub path: PathBuf,
    pub wrote: String,
    pub restore: String,
}

/// A process moved into a cgroup. On cgroup v1 a thread may sit in another cgroup than its
/// process's main thread; those threads are listed with their own previous cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub pid: u32,
    pub hierarchy: Hierarchy,
    /// The cgroup directory the process was in.
    pub from: PathBuf,
    pub to: PathBuf,
    /// (tid, previous cgroup directory) of threads that were not in `from`.
    #[serde(default)]
    pub threads: Vec<(u32, PathBuf)>,
}

/// One thread's scheduling before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadChange {
    pub pid: u32,
    pub tid: u32,
    pub before: ThreadSched,
    pub after: ThreadSched,
}

/// One change, in the order it was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    CreatedCgroup(PathBuf),
    File(FileChange),
    Moved(Move),
    Thread(ThreadChange),
}

/// Everything one [`crate::apply`] changed; [`Record::undo`] restores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub mechanism: Mechanism,
    pub target: Target,
    /// The cgroup directory the workload runs in now (cgroup mechanisms).
    pub cgroup: Option<PathBuf>,
    /// Changes in the order made.
    pub changes: Vec<Change>,
    /// What was done, one line each, for people.
    pub applied: Vec<String>,
    /// Unix time of the apply, seconds.
    pub at: u64,
}

/// What [`Record::undo`] did, and what it could not do.
#[derive(Debug, Default, Clone)]
pub struct UndoReport {
    pub restored: Vec<String>,
    pub problems: Vec<String>,
}

/// How long [`Record::undo`] retries removing a cgroup that is still busy.
const RMDIR_PATIENCE: Duration = Duration::from_millis(1000);

impl Record {
    pub(crate) fn new(mechanism: Mechanism, target: Target) -> Record {
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        Record { mechanism, target, cgroup: None, changes: Vec::new(), applied: Vec::new(), at }
    }

    /// Restores every change, newest first. Processes and threads that are gone are skipped.
    pub fn undo(&self) -> UndoReport {
        let mut rep = UndoReport::default();
        for c in self.changes.iter().rev() {
            match c {
                Change::Thread(t) => undo_thread(t, &mut rep),
                Change::Moved(m) => undo_move(m, &mut rep),
                Change::File(f) => match cgroupfs::write_value(&f.path, &f.restore) {
                    Ok(()) => rep.restored.push(format!("wrote {} to {}", f.restore, f.path.display())),
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                    Err(e) => {
                        rep.problems.push(format!("cannot write {} back to {}: {e}", f.restore, f.path.display()))
                    }
                },
                Change::CreatedCgroup(dir) => remove_cgroup(dir, &mut rep),
            }
        }
        rep
    }

    /// The current state of what this record changed, read back from the kernel: each moved
    /// process's cgroup, each written file, each thread's policy and nice.
    pub fn read_back(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in &self.changes {
            match c {
                Change::Moved(m) => {
                    let now = CgroupMount::find(m.hierarchy)
                        .and_then(|mt| mt.cgroup_of(m.pid, None).ok().map(|d| mt.name_of(&d)));
                    out.push(format!("/proc/{}/cgroup: {}", m.pid, now.unwrap_or_else(|| "gone".into())));
                }
                Change::File(f) => {
                    let v = cgroupfs::read_trim(&f.path).unwrap_or_else(|e| format!("unreadable ({e})"));
                    out.push(format!("{} = {v}", f.path.display()));
                }
                Change::Thread(_) | Change::CreatedCgroup(_) => {}
            }
        }
        let mut pids: Vec<u32> = self.thread_changes().map(|t| t.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        for pid in pids {
            out.push(format!("pid {pid}: {}", thread_summary(pid)));
        }
        out
    }

    /// PIDs moved into a cgroup by this record.
    pub fn moved_pids(&self) -> Vec<u32> {
        self.changes.iter().filter_map(|c| if let Change::Moved(m) = c { Some(m.pid) } else { None }).collect()
    }

    /// Thread changes made by this record.
    pub fn thread_changes(&self) -> impl Iterator<Item = &ThreadChange> {
        self.changes.iter().filter_map(|c| if let Change::Thread(t) = c { Some(t) } else { None })
    }
}

/// The policies and nice values of every current thread of `pid`: `3 threads: 3 SCHED_IDLE nice 0`.
pub fn thread_summary(pid: u32) -> String {
    let Ok(tids) = procfs::tids(pid) else { return "gone".into() };
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for tid in &tids {
        if let Ok(s) = sched::get(*tid) {
            *counts.entry(format!("{} nice {}", s.policy_name(), s.nice)).or_default() += 1;
        }
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    format!("{} threads: {}", tids.len(), parts.join(", "))
}

fn undo_thread(t: &ThreadChange, rep: &mut UndoReport) {
    // The TID must still be a thread of the same process (TIDs are reused).
    if !Path::new(&format!("/proc/{}/task/{}", t.pid, t.tid)).exists() {
        return;
    }
    match sched::restore(t.tid, &t.before) {
        Ok(()) => rep.restored.push(format!("tid {} back to {} nice {}", t.tid, t.before.policy_name(), t.before.nice)),
        Err(e) if is_gone(&e) => {}
        Err(e) => rep.problems.push(format!("cannot restore the scheduling of tid {} (pid {}): {e}", t.tid, t.pid)),
    }
}

fn undo_move(m: &Move, rep: &mut UndoReport) {
    if !procfs::pid_exists(m.pid) {
        return;
    }
    let write = |dir: &Path, file: &str, id: u32| cgroupfs::write_value(&dir.join(file), &id.to_string());
    match write(&m.from, "cgroup.procs", m.pid) {
        Ok(()) => rep.restored.push(format!("moved pid {} back to {}", m.pid, m.from.display())),
        Err(e) if is_gone(&e) && !m.from.is_dir() => {
            rep.problems.push(format!("cannot move pid {} back: its old cgroup {} is gone", m.pid, m.from.display()))
        }
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
        Err(e) => rep.problems.push(format!("cannot move pid {} back to {}: {e}", m.pid, m.from.display())),
    }
    for (tid, dir) in &m.threads {
        if !Path::new(&format!("/proc/{}/task/{tid}", m.pid)).exists() {
            continue;
        }
        match write(dir, "tasks", *tid) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => rep.problems.push(format!("cannot move tid {tid} back to {}: {e}", dir.display())),
        }
    }
}

fn remove_cgroup(dir: &Path, rep: &mut UndoReport) {
    let start = std::time::Instant::now();
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => {
                rep.restored.push(format!("removed cgroup {}", dir.display()));
                return;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < RMDIR_PATIENCE => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                let left = std::fs::read_to_string(dir.join("cgroup.procs")).map(|s| s.lines().count()).unwrap_or(0);
                rep.problems.push(format!(
                    "left cgroup {} in place ({e}): it still holds {left} process(es) that chstorm did not name, e.g. children started after the isolation",
                    dir.display()
                ));
                return;
            }
        }
    }
}
