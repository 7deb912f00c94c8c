//! Applying a mechanism to a target ([`apply`], [`prepare_command`]), recording each change in
//! a [`Record`] as it is made.

use crate::cgroupfs::{self, CgroupMount, Hierarchy};
use crate::error::{is_gone, IsolateError};
use crate::mechanism::Mechanism;
use crate::record::{Change, FileChange, Move, Record, Target, ThreadChange};
use crate::sched;
use crate::{procfs, DEFAULT_CGROUP};
use std::collections::HashSet;
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

/// A step for the child between `fork` and `exec` (see [`prepare_command`]).
#[derive(Debug)]
pub struct PreExec {
    procs: Option<CString>,
    sched_idle: bool,
    nice: Option<i32>,
}

/// Applies `mechanism` to `target` and records what it changed; cgroup mechanisms use the
/// child cgroup [`DEFAULT_CGROUP`]. On error, whatever was done already is undone before the
/// error is returned.
pub fn apply(mechanism: Mechanism, target: &Target) -> Result<Record, IsolateError> {
    apply_in(mechanism, target, DEFAULT_CGROUP)
}

/// [`apply`] with the child cgroup named `cgroup` (a plain name, created under the
/// controller's mount) instead of [`DEFAULT_CGROUP`].
pub fn apply_in(mechanism: Mechanism, target: &Target, cgroup: &str) -> Result<Record, IsolateError> {
    let mut rec = Record::new(mechanism, target.clone());
    let r = match target {
        Target::Pids(pids) => apply_pids(&mut rec, pids, cgroup),
        Target::Cgroup(path) => apply_cgroup(&mut rec, path),
        Target::Command(_) => Err(IsolateError::Internal("commands are isolated with prepare_command".into())),
    };
    match r {
        Ok(()) => Ok(rec),
        Err(e) => {
            rec.undo();
            Err(e)
        }
    }
}

/// Prepares `mechanism` for a command about to be started: creates and sets up the cgroup,
/// and returns the [`PreExec`] step that moves the child into it (writing `0` to
/// `cgroup.procs` moves the writer) or sets its scheduling, before `exec`. Nothing is ever
/// done to another process. Undo the record after the command ends.
pub fn prepare_command(mechanism: Mechanism, command: &[String]) -> Result<(Record, PreExec), IsolateError> {
    prepare_command_in(mechanism, command, DEFAULT_CGROUP)
}

/// [`prepare_command`] with the child cgroup named `cgroup`.
pub fn prepare_command_in(
    mechanism: Mechanism,
    command: &[String],
    cgroup: &str,
) -> Result<(Record, PreExec), IsolateError> {
    let mut rec = Record::new(mechanism, Target::Command(command.to_vec()));
    let mut pre = PreExec { procs: None, sched_idle: false, nice: None };
    let r = (|| {
        if mechanism == Mechanism::SchedIdle {
            pre.sched_idle = true;
            rec.applied.push("the command starts with SCHED_IDLE; its threads and children inherit it".into());
            return Ok(());
        }
        match cgroup_setup(&mut rec, mechanism, cgroup) {
            Ok(dir) => {
                let procs = dir.join("cgroup.procs");
                pre.procs = Some(
                    CString::new(procs.to_string_lossy().as_bytes())
                        .map_err(|e| IsolateError::Internal(e.to_string()))?,
                );
                rec.applied.push(format!("the command starts inside {}", dir.display()));
            }
            Err(e) if mechanism == Mechanism::MinWeight => rec.applied.push(format!("no cgroup weight ({e})")),
            Err(e) => return Err(e),
        }
        if mechanism == Mechanism::MinWeight {
            pre.nice = Some(19);
            rec.applied.push("the command starts at nice 19".into());
        }
        Ok(())
    })();
    match r {
        Ok(()) => Ok((rec, pre)),
        Err(e) => {
            rec.undo();
            Err(e)
        }
    }
}

impl PreExec {
    /// Runs in the child between `fork` and `exec`: only async-signal-safe system calls.
    pub fn run(&self) -> io::Result<()> {
        // SAFETY: open/write/close/sched_setscheduler/setpriority on the calling process, with
        // a NUL-terminated path prepared before the fork.
        unsafe {
            if let Some(p) = &self.procs {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
            }
            if self.sched_idle {
                let p = libc::sched_param { sched_priority: 0 };
                if libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if let Some(n) = self.nice {
                if libc::setpriority(libc::PRIO_PROCESS, 0, n) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

fn check_pids(pids: &[u32]) -> Result<(), IsolateError> {
    if pids.is_empty() {
        return Err(IsolateError::Internal("no pids given".into()));
    }
    for &pid in pids {
        if pid <= 1 {
            return Err(IsolateError::Refused { pid, why: "it is init (or not a process)".into() });
        }
        if !procfs::pid_exists(pid) {
            return Err(IsolateError::NoSuchPid(pid));
        }
        if procfs::is_kernel_thread(pid) {
            return Err(IsolateError::Refused { pid, why: "it is a kernel thread".into() });
        }
    }
    Ok(())
}

fn apply_pids(rec: &mut Record, pids: &[u32], cgroup: &str) -> Result<(), IsolateError> {
    check_pids(pids)?;
    let m = rec.mechanism;
    if m != Mechanism::SchedIdle {
        match cgroup_setup(rec, m, cgroup) {
            Ok(dir) => {
                let mount = m.mount()?;
                for &pid in pids {
                    move_pid(rec, &mount, pid, &dir)?;
                }
            }
            Err(e) if m == Mechanism::MinWeight => rec.applied.push(format!("no cgroup weight ({e}); nice 19 only")),
            Err(e) => return Err(e),
        }
    }
    match m {
        Mechanism::SchedIdle => pids.iter().try_for_each(|&pid| sched_all(rec, pid, true)),
        Mechanism::MinWeight => pids.iter().try_for_each(|&pid| sched_all(rec, pid, false)),
        _ => Ok(()),
    }
}

/// Creates (or reuses) the child cgroup and writes the mechanism's setting; returns its dir.
fn cgroup_setup(rec: &mut Record, m: Mechanism, name: &str) -> Result<PathBuf, IsolateError> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(IsolateError::Internal(format!("bad cgroup name '{name}'")));
    }
    let mount = m.mount()?;
    let dir = mount.mount.join(name);
    if mount.hierarchy == Hierarchy::V2 {
        enable_cpu(rec, &mount.mount)?;
    }
    if dir.is_dir() {
        rec.applied.push(format!("reused cgroup {}", dir.display()));
    } else {
        std::fs::create_dir(&dir).map_err(|e| IsolateError::io(format!("create cgroup {}", dir.display()), &dir, e))?;
        rec.changes.push(Change::CreatedCgroup(dir.clone()));
        rec.applied.push(format!("created cgroup {}", dir.display()));
    }
    if let Some((file, value)) = m.setting(mount.hierarchy) {
        set_file(rec, &dir, file, value)?;
    }
    rec.cgroup = Some(dir.clone());
    Ok(dir)
}

/// v2: makes sure `parent` passes the cpu controller to its children.
fn enable_cpu(rec: &mut Record, parent: &Path) -> Result<(), IsolateError> {
    let path = parent.join("cgroup.subtree_control");
    let now = cgroupfs::read_trim(&path).map_err(|e| IsolateError::io(format!("read {}", path.display()), &path, e))?;
    if now.split_whitespace().any(|c| c == "cpu") {
        return Ok(());
    }
    cgroupfs::write_value(&path, "+cpu")
        .map_err(|e| IsolateError::io(format!("write +cpu to {}", path.display()), &path, e))?;
    rec.changes.push(Change::File(FileChange { path: path.clone(), wrote: "+cpu".into(), restore: "-cpu".into() }));
    rec.applied.push(format!("wrote +cpu to {}", path.display()));
    Ok(())
}

fn set_file(rec: &mut Record, dir: &Path, file: &str, value: &str) -> Result<(), IsolateError> {
    let path = dir.join(file);
    let before = match cgroupfs::read_trim(&path) {
        Ok(v) => v,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            return Err(match file {
                "cpu.qos_level" => IsolateError::Unavailable {
                    mechanism: "qos-level".into(),
                    why: format!(
                        "kernel {} has no cpu.qos_level (openEuler's CONFIG_QOS_SCHED)",
                        procfs::kernel_release()
                    ),
                },
                _ => IsolateError::OldKernel {
                    release: procfs::kernel_release(),
                    what: format!("no {}", path.display()),
                },
            })
        }
        Err(e) => return Err(IsolateError::io(format!("read {}", path.display()), &path, e)),
    };
    cgroupfs::write_value(&path, value)
        .map_err(|e| IsolateError::io(format!("write {value} to {}", path.display()), &path, e))?;
    rec.changes.push(Change::File(FileChange { path: path.clone(), wrote: value.into(), restore: before.clone() }));
    rec.applied.push(format!("wrote {file} = {value} in {} (was {before})", dir.display()));
    Ok(())
}

fn move_pid(rec: &mut Record, mount: &CgroupMount, pid: u32, to: &Path) -> Result<(), IsolateError> {
    let gone = |e: io::Error| {
        if is_gone(&e) {
            IsolateError::NoSuchPid(pid)
        } else {
            IsolateError::Io { what: format!("read the cgroup of pid {pid}"), source: e }
        }
    };
    let from = mount.cgroup_of(pid, None).map_err(gone)?;
    let tids = procfs::tids(pid).map_err(gone)?;
    let mut threads = Vec::new();
    if mount.hierarchy == Hierarchy::V1 {
        for &tid in &tids {
            match mount.cgroup_of(pid, Some(tid)) {
                Ok(d) if d != from => threads.push((tid, d)),
                _ => {}
            }
        }
    }
    if from == to && threads.is_empty() {
        rec.applied.push(format!("pid {pid} was already in {}", to.display()));
        return Ok(());
    }
    let procs = to.join("cgroup.procs");
    cgroupfs::write_value(&procs, &pid.to_string()).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => IsolateError::NoSuchPid(pid),
        _ => IsolateError::io(format!("move pid {pid} into {}", to.display()), &procs, e),
    })?;
    rec.applied.push(format!(
        "moved pid {pid} ({} threads) from {} to {}",
        tids.len(),
        mount.name_of(&from),
        mount.name_of(to)
    ));
    rec.changes.push(Change::Moved(Move { pid, hierarchy: mount.hierarchy, from, to: to.to_path_buf(), threads }));
    Ok(())
}

/// SCHED_IDLE (`idle`) or nice 19 on every thread of `pid`, re-listing the threads until no new
/// one shows up (a thread created meanwhile by a covered thread inherits the change anyway).
fn sched_all(rec: &mut Record, pid: u32, idle: bool) -> Result<(), IsolateError> {
    let mut done: HashSet<u32> = HashSet::new();
    for round in 0..10 {
        let tids = match procfs::tids(pid) {
            Ok(t) => t,
            Err(_) if round == 0 => return Err(IsolateError::NoSuchPid(pid)),
            Err(_) => break,
        };
        let new: Vec<u32> = tids.into_iter().filter(|t| !done.contains(t)).collect();
        if new.is_empty() {
            break;
        }
        for tid in new {
            done.insert(tid);
            let before = match sched::get(tid) {
                Ok(b) => b,
                Err(e) if is_gone(&e) => continue,
                Err(e) => {
                    return Err(IsolateError::Io { what: format!("read the scheduling of tid {tid}"), source: e })
                }
            };
            let r = if idle { sched::set_idle(tid, &before) } else { sched::set_nice(tid, 19) };
            match r {
                Ok(()) => {}
                Err(e) if is_gone(&e) => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) => {
                    let what = format!("change the scheduling of pid {pid} (tid {tid})");
                    return Err(IsolateError::NoPermission { what, hint: crate::error::SCHED_HINT });
                }
                Err(e) => {
                    return Err(IsolateError::Io { what: format!("change the scheduling of tid {tid}"), source: e })
                }
            }
            let after = sched::get(tid).unwrap_or(before);
            rec.changes.push(Change::Thread(ThreadChange { pid, tid, before, after }));
        }
    }
    let what = if idle { "SCHED_IDLE" } else { "nice 19" };
    let n = rec.thread_changes().filter(|t| t.pid == pid).count();
    rec.applied.push(format!("{what} on {n} threads of pid {pid}"));
    Ok(())
}

fn apply_cgroup(rec: &mut Record, path: &Path) -> Result<(), IsolateError> {
    let m = rec.mechanism;
    let mounts: Vec<CgroupMount> = if m == Mechanism::SchedIdle {
        [Hierarchy::V1, Hierarchy::V2].into_iter().filter_map(CgroupMount::find).collect()
    } else {
        vec![m.mount()?]
    };
    let (mount, dir) = resolve(&mounts, path, m)?;
    rec.cgroup = Some(dir.clone());
    if let Some((file, value)) = m.setting(mount.hierarchy) {
        if mount.hierarchy == Hierarchy::V2 && dir != mount.mount {
            if let Some(parent) = dir.parent() {
                enable_cpu(rec, parent)?;
            }
        }
        set_file(rec, &dir, file, value)?;
    }
    if matches!(m, Mechanism::SchedIdle | Mechanism::MinWeight) {
        let tids = cgroupfs::threads_in(&mount, &dir)
            .map_err(|e| IsolateError::io(format!("list the threads of {}", dir.display()), &dir, e))?;
        let pids: HashSet<u32> = tids.iter().filter_map(|&t| procfs::tgid_of(t)).collect();
        let mut pids: Vec<u32> = pids.into_iter().collect();
        pids.sort_unstable();
        for pid in pids {
            sched_all(rec, pid, m == Mechanism::SchedIdle)?;
        }
    }
    Ok(())
}

/// The mount and directory of the cgroup the user named.
fn resolve(mounts: &[CgroupMount], path: &Path, m: Mechanism) -> Result<(CgroupMount, PathBuf), IsolateError> {
    let Some(first) = mounts.first() else {
        return Err(IsolateError::NoWritableCgroup("no cgroup hierarchy with the cpu controller is mounted".into()));
    };
    for mount in mounts {
        let dir = if mount.contains(path) { path.to_path_buf() } else { mount.dir_of(&path.to_string_lossy()) };
        if dir.is_dir() && mount.contains(&dir) {
            return Ok((mount.clone(), dir));
        }
    }
    if path.is_dir() {
        return Err(IsolateError::WrongHierarchy {
            path: path.into(),
            mount: first.mount.clone(),
            what: m.describe().into(),
        });
    }
    Err(IsolateError::NoSuchCgroup(path.into()))
}
