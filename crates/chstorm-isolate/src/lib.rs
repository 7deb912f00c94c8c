//! Keep an online service fast beside offline CPU work: put the offline work into the lowest
//! CPU class this machine offers, record what was changed, and undo exactly that.
//!
//! # Mechanisms, in detection order
//!
//! [`detect_all`] checks each [`Mechanism`] without changing anything; `auto` picks the first
//! one available:
//!
//! 1. [`Mechanism::QosLevel`]: openEuler's `cpu.qos_level = -1` (kernels built with
//!    `CONFIG_QOS_SCHED`, cgroup v1 `cpu` controller). Offline tasks run only when no online
//!    task wants the CPU, and are preempted at once. Only that kernel has it.
//! 2. [`Mechanism::CgroupV2Idle`]: `cpu.idle = 1` on a cgroup v2 child (mainline Linux 5.15+,
//!    needs the `cpu` controller on the unified hierarchy). The whole group is scheduled like a
//!    `SCHED_IDLE` task against its siblings.
//! 3. [`Mechanism::CgroupV1Idle`]: the same `cpu.idle = 1` on the cgroup v1 `cpu` controller.
//! 4. [`Mechanism::SchedIdle`]: `sched_setscheduler(tid, SCHED_IDLE)` on every thread. Threads
//!    created later inherit the policy *from the thread that creates them*, so a workload's
//!    later threads stay idle as long as they are started by threads already covered; nothing
//!    covers a thread started by a process that was not named.
//! 5. [`Mechanism::MinWeight`]: the last resort: the minimum `cpu.shares` (2, cgroup v1) or
//!    `cpu.weight` (1, cgroup v2) on a child cgroup when one is writable, plus nice 19 on every
//!    thread. Offline work still gets a small share (about 1.5% per nice-19 thread against a
//!    nice-0 one).
//!
//! The cgroup mechanisms create (or reuse) a child cgroup named [`DEFAULT_CGROUP`]
//! (`chstorm-offline`) directly under the controller's mount (v1: where the `cpu` controller is
//! mounted, found in `/proc/self/mountinfo`; v2: the unified mount, with `+cpu` written to its
//! `cgroup.subtree_control` when missing) and move the named processes there by writing each
//! PID to `cgroup.procs`: every thread moves, and threads and children started later are born
//! there. Nothing else is ever moved. [`apply_in`] takes another child cgroup name (chstorm
//! colocate uses `chstorm-colocate-PID`, so it never shares settings with an operator's
//! isolation).
//!
//! # Records and undo
//!
//! [`apply`] returns a [`Record`] of everything it changed: the cgroups it created, every file
//! it wrote with the value to restore, each PID's (and TID's, on v1) previous cgroup, and each
//! thread's previous policy, RT priority and nice. [`Record::undo`] restores exactly that, in
//! reverse order. [`state`] keeps records in a small JSON file between `chstorm isolate` and
//! `chstorm isolate --undo`. A failed [`apply`] undoes what it did before returning the error.
//!
//! # The offline load
//!
//! [`offline::OfflineLoad`] starts a CPU burner ([`burn::run`], N spinning threads, like
//! `stress --cpu N`) or a shell command, each in its own process group, killed with the parent
//! (`PR_SET_PDEATHSIG`), and killed and reaped on drop and at `exit()`. [`cpu`] measures CPU
//! shares from `/proc/PID/stat`.
//!
//! # The `chstorm isolate` command
//!
//! [`run`] does what `chstorm isolate` was asked ([`IsolateOptions`]): print the detection,
//! apply and record, undo recorded isolations (of given PIDs or a cgroup, or all), or start a
//! command already isolated and undo at its end; the CLI only parses flags into the options.
//!
//! # Boundaries
//!
//! This crate owns Linux CPU isolation (cgroup files, scheduling policies, `/proc`), its state
//! file, the offline load and the burner. It builds on `chstorm-child` only; it must not import
//! ClickHouse clients (`chstorm-proto`), the load engine, the local harness, the outputs, the
//! gateway, colocate (`chstorm-colocate` builds on this crate) or the CLI, nor clap or anyhow.

mod apply;
pub mod burn;
mod cgroupfs;
pub mod cpu;
mod error;
mod mechanism;
pub mod offline;
pub mod procfs;
mod record;
mod run;
mod sched;
pub mod state;

pub use apply::{apply, apply_in, prepare_command, prepare_command_in, PreExec};
pub use cgroupfs::{v1_cpu_idle_mount, v1_cpu_mount, CgroupMount, Hierarchy};
pub use error::{Fault, IsolateError};
pub use mechanism::{choose, detect_all, Availability, Mechanism, Request};
pub use record::{thread_summary, Change, FileChange, Move, Record, Target, ThreadChange, UndoReport};
pub use run::{applied_text, describe_target, detection_text, run, IsolateOptions};
pub use sched::ThreadSched;

/// Name of the child cgroup the cgroup mechanisms create (or reuse) under the controller root.
pub const DEFAULT_CGROUP: &str = "chstorm-offline";
