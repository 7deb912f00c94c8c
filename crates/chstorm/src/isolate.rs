//! `chstorm isolate`: put offline work into the lowest CPU class this machine offers, or undo
//! that. The work is done by [`chstorm_isolate`]; this module parses and prints.

use anyhow::{bail, Context};
use chstorm_isolate::{state, Availability, Mechanism, Record, Request, Target};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};

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
    let state_path = args.state.clone().unwrap_or_else(state::default_path);
    if args.detect {
        print_detection(&chstorm_isolate::detect_all());
        return Ok(0);
    }
    if args.undo {
        return undo(&args, &state_path);
    }
    let target = if !args.pids.is_empty() {
        Target::Pids(args.pids.clone())
    } else if let Some(c) = &args.cgroup {
        Target::Cgroup(c.clone())
    } else if !args.command.is_empty() {
        Target::Command(args.command.clone())
    } else {
        bail!("say what to isolate: --pid PID, --cgroup PATH or -- CMD ARGS (or --undo, --detect)");
    };
    if let Target::Pids(pids) = &target {
        // Name a missing PID before anything else is said or done.
        if let Some(p) = pids.iter().find(|&&p| !chstorm_isolate::procfs::pid_exists(p)) {
            bail!(chstorm_isolate::IsolateError::NoSuchPid(*p));
        }
    }
    let found = chstorm_isolate::detect_all();
    let mechanism = chstorm_isolate::choose(args.mechanism.request(), &found)?[0];
    if let Target::Command(cmd) = &target {
        return run_command(mechanism, cmd, &found);
    }
    let record = chstorm_isolate::apply(mechanism, &target)?;
    if let Err(e) = state::append(&state_path, record.clone()) {
        record.undo();
        return Err(e).context("the isolation was undone because it could not be recorded");
    }
    print_applied(&record, &found);
    println!("recorded in {}; undo with: chstorm isolate --undo{}", state_path.display(), state_flag(&args));
    Ok(0)
}

fn state_flag(args: &IsolateArgs) -> String {
    args.state.as_ref().map(|s| format!(" --state {}", s.display())).unwrap_or_default()
}

fn undo(args: &IsolateArgs, path: &Path) -> anyhow::Result<i32> {
    let records = state::load(path)?;
    let selected = |r: &Record| match (&r.target, args.pids.is_empty(), &args.cgroup) {
        (_, true, None) => true,
        (Target::Pids(p), false, _) => p.iter().any(|x| args.pids.contains(x)),
        (Target::Cgroup(c), _, Some(want)) => c == want,
        _ => false,
    };
    let (chosen, mut kept): (Vec<Record>, Vec<Record>) = records.into_iter().partition(|r| selected(r));
    if chosen.is_empty() {
        if args.pids.is_empty() && args.cgroup.is_none() {
            println!("nothing to undo: {} records no isolation", path.display());
            return Ok(0);
        }
        bail!("{} records no isolation of the given --pid/--cgroup", path.display());
    }
    let mut problems = Vec::new();
    let mut retry = Vec::new();
    for r in chosen.into_iter().rev() {
        let rep = r.undo();
        println!("undid {} on {}", r.mechanism.name(), describe_target(&r.target));
        for line in &rep.restored {
            println!("  {line}");
        }
        if !rep.problems.is_empty() {
            problems.extend(rep.problems);
            retry.insert(0, r);
        }
    }
    // A record not fully restored stays, so that --undo can be run again (e.g. as root).
    kept.extend(retry);
    state::save(path, &kept)?;
    for p in &problems {
        eprintln!("chstorm: warning: {p}");
    }
    if !problems.is_empty() {
        eprintln!("chstorm: warning: kept in {}; run --undo again (e.g. as root) to retry", path.display());
    }
    Ok(if problems.is_empty() { 0 } else { 1 })
}

fn run_command(mechanism: Mechanism, cmd: &[String], found: &[Availability]) -> anyhow::Result<i32> {
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    let (record, pre) = chstorm_isolate::prepare_command(mechanism, cmd)?;
    print_applied(&record, found);
    let _ = crate::global_stop(); // a first Ctrl-C reaches the command, not us
    let mut command = std::process::Command::new(&cmd[0]);
    command.args(&cmd[1..]);
    // SAFETY: PreExec::run makes only async-signal-safe system calls.
    unsafe { command.pre_exec(move || pre.run()) };
    let status = command.status();
    let rep = record.undo();
    for p in &rep.problems {
        eprintln!("chstorm: warning: {p}");
    }
    let status = status.with_context(|| format!("cannot start {}", cmd[0]))?;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

fn describe_target(t: &Target) -> String {
    match t {
        Target::Pids(p) => format!("pid {}", p.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")),
        Target::Cgroup(c) => format!("cgroup {}", c.display()),
        Target::Command(c) => format!("command {}", c.join(" ")),
    }
}

fn print_applied(record: &Record, found: &[Availability]) {
    println!(
        "applied {} ({}) to {}",
        record.mechanism.name(),
        record.mechanism.describe(),
        describe_target(&record.target)
    );
    for line in &record.applied {
        println!("  {line}");
    }
    let back = record.read_back();
    if !back.is_empty() {
        println!("read back:");
        for line in back {
            println!("  {line}");
        }
    }
    let rank = |m: Mechanism| Mechanism::ORDER.iter().position(|x| *x == m).unwrap_or(0);
    let others: Vec<&Availability> = found.iter().filter(|a| a.mechanism != record.mechanism).collect();
    if !others.is_empty() {
        println!("not used:");
        for a in others {
            match &a.result {
                Ok(_) if rank(a.mechanism) > rank(record.mechanism) => {
                    println!("  {}: available, later in the detection order", a.mechanism.name())
                }
                Ok(_) => println!("  {}: available, not asked for (--mechanism)", a.mechanism.name()),
                Err(e) => println!("  {}: {}", a.mechanism.name(), e.reason()),
            }
        }
    }
}

fn print_detection(found: &[Availability]) {
    println!(
        "kernel {}, {} CPUs; mechanisms in detection order:",
        chstorm_isolate::procfs::kernel_release(),
        chstorm_isolate::procfs::cores()
    );
    for (i, a) in found.iter().enumerate() {
        match &a.result {
            Ok(detail) => println!("  {}. {:<15} available: {detail}", i + 1, a.mechanism.name()),
            Err(e) => println!("  {}. {:<15} unavailable: {}", i + 1, a.mechanism.name(), e.reason()),
        }
    }
    if let Some(best) = found.iter().find(|a| a.result.is_ok()) {
        println!("auto picks {}", best.mechanism.name());
    }
}
