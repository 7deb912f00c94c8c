//! `chstorm isolate`: put offline work into the lowest CPU class this machine offers, or undo
//! that. The flags are parsed here; [`chstorm_isolate::run`] does the work and the printing.

use chstorm_isolate::{IsolateOptions, Mechanism, Request};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// A mechanism as the command line names it.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MechanismArg {
    /// The first available in the detection order.
    Auto,
    /// openEuler cpu.qos_level=-1.
    QosLevel,
    /// cgroup cpu.idle=1: v2 if it has the cpu controller, else v1.
    CgroupIdle,
    /// cgroup v2 cpu.idle=1.
    CgroupV2Idle,
    /// cgroup v1 cpu.idle=1.
    CgroupV1Idle,
    /// SCHED_IDLE on every thread.
    SchedIdle,
    /// Minimum cpu.shares / cpu.weight plus nice 19.
    MinWeight,
}

impl MechanismArg {
    /// The library's request for this choice.
    pub fn request(self) -> Request {
        match self {
            MechanismArg::Auto => Request::Auto,
            MechanismArg::QosLevel => Request::One(Mechanism::QosLevel),
            MechanismArg::CgroupIdle => Request::CgroupIdle,
            MechanismArg::CgroupV2Idle => Request::One(Mechanism::CgroupV2Idle),
            MechanismArg::CgroupV1Idle => Request::One(Mechanism::CgroupV1Idle),
            MechanismArg::SchedIdle => Request::One(Mechanism::SchedIdle),
            MechanismArg::MinWeight => Request::One(Mechanism::MinWeight),
        }
    }
}

pub const ISOLATE_HELP: &str = "\
Mechanisms, in detection order (auto takes the first available):
  1. qos-level       openEuler cpu.qos_level=-1 (cgroup v1; only that kernel has it)
  2. cgroup-v2-idle  cpu.idle=1 on the cgroup v2 child cgroup chstorm-offline (Linux 5.15+)
  3. cgroup-v1-idle  cpu.idle=1 on the cgroup v1 cpu controller's child cgroup chstorm-offline
  4. sched-idle      SCHED_IDLE on every thread (later threads inherit it from their creator)
  5. min-weight      cpu.shares=2 / cpu.weight=1 on chstorm-offline if writable, plus nice 19

Examples:
  chstorm isolate --detect                        # what this machine offers, and why not the rest
  chstorm isolate --pid 4242                      # every thread of 4242, and threads started later
  chstorm isolate --pid 4242 --mechanism sched-idle
  chstorm isolate --cgroup /sys/fs/cgroup/cpu/docker/ID
  chstorm isolate -- stress --cpu 8               # start a command already isolated; undone at its end
  chstorm isolate --undo                          # restore everything recorded in the state file

The state file records what was changed (previous cgroups, files written with their old values,
each thread's previous policy and nice), so --undo restores exactly that. Only the named
processes are ever moved.

Exit status: 0 done (with -- CMD: the command's status), 1 --undo could not restore everything,
2 bad input or unavailable.";

#[derive(Args, Debug, Clone)]
pub struct IsolateArgs {
    /// A process to isolate: every thread, and with a cgroup mechanism every thread or child
    /// it starts later. Repeatable.
    #[arg(long = "pid", value_name = "PID", conflicts_with_all = ["cgroup", "command", "detect"])]
    pub pids: Vec<u32>,

    /// An existing cgroup to make offline: its own cpu.idle (or qos_level, shares, weight) is
    /// set; nothing is moved. A path under a cgroup mount, or relative to the hierarchy's root.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["command", "detect"])]
    pub cgroup: Option<PathBuf>,

    /// Which mechanism to use.
    #[arg(long, value_enum, default_value_t = MechanismArg::Auto)]
    pub mechanism: MechanismArg,

    /// Restore what earlier runs recorded in the state file (only those for --pid/--cgroup if
    /// given), newest first.
    #[arg(long, conflicts_with_all = ["command", "detect"])]
    pub undo: bool,

    /// Print which mechanisms this machine offers and why the others are unavailable.
    #[arg(long)]
    pub detect: bool,

    /// The state file. [default: $XDG_RUNTIME_DIR/chstorm-isolate.json, else
    /// /run/chstorm-isolate.json for root, else /tmp/chstorm-isolate-UID.json]
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,

    /// A command to start already isolated (after --); the isolation is undone when it ends.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Runs `chstorm isolate`; returns the exit code.
pub fn run(args: IsolateArgs) -> anyhow::Result<i32> {
    if !args.command.is_empty() {
        let _ = crate::global_stop(); // a first Ctrl-C reaches the command, not us
    }
    let opts = IsolateOptions {
        pids: args.pids,
        cgroup: args.cgroup,
        command: args.command,
        request: args.mechanism.request(),
        undo: args.undo,
        detect: args.detect,
        state: args.state,
    };
    Ok(chstorm_isolate::run(&opts, &mut std::io::stdout(), &mut std::io::stderr())?)
}
