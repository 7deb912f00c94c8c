//! `chstorm isolate` as a function: detect, apply and record, undo what was recorded, or start
//! a command already isolated and undo at its end. [`run`] writes what it did, line by line, to
//! `out` (the CLI's stdout) and warnings to `warn` (stderr), and returns the exit status.

use crate::error::IsolateError;
use crate::{state, Availability, Mechanism, Record, Request, Target};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What `chstorm isolate` was asked to do. With `detect`, only detection; with `undo`, only
/// undo (of the records for `pids` / `cgroup` if given, else of all); otherwise isolate exactly
/// one of `pids`, `cgroup` or `command`, in this order of precedence.
#[derive(Debug, Clone)]
pub struct IsolateOptions {
    /// Processes to isolate: every thread, and with a cgroup mechanism every thread or child
    /// started later.
    pub pids: Vec<u32>,
    /// An existing cgroup to make offline (its own settings; nothing is moved).
    pub cgroup: Option<PathBuf>,
    /// A command (program and arguments) to start already isolated; empty for none.
    pub command: Vec<String>,
    /// Which mechanism.
    pub request: Request,
    /// Restore what earlier runs recorded in the state file, newest first.
    pub undo: bool,
    /// Only print which mechanisms this machine offers, and why not the others.
    pub detect: bool,
    /// The state file; None: [`state::default_path`]. Named in the undo hint when given.
    pub state: Option<PathBuf>,
}

/// Runs `chstorm isolate`. Returns the exit status: 0 done; with a command, the command's
/// status (128 + N when killed by signal N); 1 when an undo could not restore everything (the
/// records stay in the state file for another try).
pub fn run(opts: &IsolateOptions, out: &mut dyn Write, warn: &mut dyn Write) -> Result<i32, IsolateError> {
    let state_path = opts.state.clone().unwrap_or_else(state::default_path);
    if opts.detect {
        write(out, &detection_text(&crate::detect_all()))?;
        return Ok(0);
    }
    if opts.undo {
        return undo(opts, &state_path, out, warn);
    }
    let target = if !opts.pids.is_empty() {
        Target::Pids(opts.pids.clone())
    } else if let Some(c) = &opts.cgroup {
        Target::Cgroup(c.clone())
    } else if !opts.command.is_empty() {
        Target::Command(opts.command.clone())
    } else {
        return Err(IsolateError::NothingToIsolate);
    };
    if let Target::Pids(pids) = &target {
        // Name a missing PID before anything else is said or done.
        if let Some(p) = pids.iter().find(|&&p| !crate::procfs::pid_exists(p)) {
            return Err(IsolateError::NoSuchPid(*p));
        }
    }
    let found = crate::detect_all();
    let mechanism = crate::choose(opts.request, &found)?[0];
    if let Target::Command(cmd) = &target {
        return run_command(mechanism, cmd, &found, out, warn);
    }
    let record = crate::apply(mechanism, &target)?;
    if let Err(e) = state::append(&state_path, record.clone()) {
        record.undo();
        return Err(IsolateError::NotRecorded(Box::new(e)));
    }
    let state_flag = opts.state.as_ref().map(|s| format!(" --state {}", s.display())).unwrap_or_default();
    write(
        out,
        &format!(
            "{}recorded in {}; undo with: chstorm isolate --undo{state_flag}\n",
            applied_text(&record, &found),
            state_path.display()
        ),
    )?;
    Ok(0)
}

/// Writes `text` to a stream of the caller's; failing that is this machine's fault.
fn write(w: &mut dyn Write, text: &str) -> Result<(), IsolateError> {
    w.write_all(text.as_bytes())
        .and_then(|()| w.flush())
        .map_err(|source| IsolateError::Io { what: "write the output".into(), source })
}

fn undo(opts: &IsolateOptions, path: &Path, out: &mut dyn Write, warn: &mut dyn Write) -> Result<i32, IsolateError> {
    let records = state::load(path)?;
    let selected = |r: &Record| match (&r.target, opts.pids.is_empty(), &opts.cgroup) {
        (_, true, None) => true,
        (Target::Pids(p), false, _) => p.iter().any(|x| opts.pids.contains(x)),
        (Target::Cgroup(c), _, Some(want)) => c == want,
        _ => false,
    };
    let (chosen, mut kept): (Vec<Record>, Vec<Record>) = records.into_iter().partition(|r| selected(r));
    if chosen.is_empty() {
        if opts.pids.is_empty() && opts.cgroup.is_none() {
            write(out, &format!("nothing to undo: {} records no isolation\n", path.display()))?;
            return Ok(0);
        }
        return Err(IsolateError::NotInState(path.to_path_buf()));
    }
    let mut problems = Vec::new();
    let mut retry = Vec::new();
    for r in chosen.into_iter().rev() {
        let rep = r.undo();
        let mut text = format!("undid {} on {}\n", r.mechanism.name(), describe_target(&r.target));
        for line in &rep.restored {
            text += &format!("  {line}\n");
        }
        write(out, &text)?;
        if !rep.problems.is_empty() {
            problems.extend(rep.problems);
            retry.insert(0, r);
        }
    }
    // A record not fully restored stays, so that --undo can be run again (e.g. as root).
    kept.extend(retry);
    state::save(path, &kept)?;
    let mut text = String::new();
    for p in &problems {
        text += &format!("chstorm: warning: {p}\n");
    }
    if !problems.is_empty() {
        text += &format!("chstorm: warning: kept in {}; run --undo again (e.g. as root) to retry\n", path.display());
    }
    write(warn, &text)?;
    Ok(if problems.is_empty() { 0 } else { 1 })
}

fn run_command(
    mechanism: Mechanism,
    cmd: &[String],
    found: &[Availability],
    out: &mut dyn Write,
    warn: &mut dyn Write,
) -> Result<i32, IsolateError> {
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    let (record, pre) = crate::prepare_command(mechanism, cmd)?;
    // Written (and flushed) before the command starts, so its own output comes after.
    if let Err(e) = write(out, &applied_text(&record, found)) {
        record.undo();
        return Err(e);
    }
    let mut command = std::process::Command::new(&cmd[0]);
    command.args(&cmd[1..]);
    // SAFETY: PreExec::run makes only async-signal-safe system calls.
    unsafe { command.pre_exec(move || pre.run()) };
    let status = command.status();
    let rep = record.undo();
    let text: String = rep.problems.iter().map(|p| format!("chstorm: warning: {p}\n")).collect();
    write(warn, &text)?;
    let status = status.map_err(|source| IsolateError::Io { what: format!("start {}", cmd[0]), source })?;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// `pid 1, 2`, `cgroup /sys/fs/cgroup/...` or `command sh -c ...`.
pub fn describe_target(t: &Target) -> String {
    match t {
        Target::Pids(p) => format!("pid {}", p.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")),
        Target::Cgroup(c) => format!("cgroup {}", c.display()),
        Target::Command(c) => format!("command {}", c.join(" ")),
    }
}

/// What `record` applied, read back from the system now, and why the other mechanisms were not
/// used; one item a line.
pub fn applied_text(record: &Record, found: &[Availability]) -> String {
    let mut s = format!(
        "applied {} ({}) to {}\n",
        record.mechanism.name(),
        record.mechanism.describe(),
        describe_target(&record.target)
    );
    for line in &record.applied {
        s += &format!("  {line}\n");
    }
    let back = record.read_back();
    if !back.is_empty() {
        s += "read back:\n";
        for line in back {
            s += &format!("  {line}\n");
        }
    }
    let rank = |m: Mechanism| Mechanism::ORDER.iter().position(|x| *x == m).unwrap_or(0);
    let others: Vec<&Availability> = found.iter().filter(|a| a.mechanism != record.mechanism).collect();
    if !others.is_empty() {
        s += "not used:\n";
        for a in others {
            match &a.result {
                Ok(_) if rank(a.mechanism) > rank(record.mechanism) => {
                    s += &format!("  {}: available, later in the detection order\n", a.mechanism.name())
                }
                Ok(_) => s += &format!("  {}: available, not asked for (--mechanism)\n", a.mechanism.name()),
                Err(e) => s += &format!("  {}: {}\n", a.mechanism.name(), e.reason()),
            }
        }
    }
    s
}

/// The kernel, the CPUs, every mechanism in detection order (available: where it acts;
/// unavailable: why) and the one `auto` picks.
pub fn detection_text(found: &[Availability]) -> String {
    let mut s = format!(
        "kernel {}, {} CPUs; mechanisms in detection order:\n",
        crate::procfs::kernel_release(),
        crate::procfs::cores()
    );
    for (i, a) in found.iter().enumerate() {
        match &a.result {
            Ok(detail) => s += &format!("  {}. {:<15} available: {detail}\n", i + 1, a.mechanism.name()),
            Err(e) => s += &format!("  {}. {:<15} unavailable: {}\n", i + 1, a.mechanism.name(), e.reason()),
        }
    }
    if let Some(best) = found.iter().find(|a| a.result.is_ok()) {
        s += &format!("auto picks {}\n", best.mechanism.name());
    }
    s
}
