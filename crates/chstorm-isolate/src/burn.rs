//! The CPU burner: N threads spinning on integer arithmetic, like `stress --cpu N`.
//!
//! `chstorm burn --threads N` (a hidden sub-command) calls [`run`]; [`crate::offline`] starts
//! it as a child process so it can be isolated as a process and killed reliably.

use std::hint::black_box;
use std::io::Write;
use std::time::Duration;

/// The line the burner prints on stdout once all its threads are spinning.
pub const READY: &str = "chstorm-burn ready";

/// Starts `threads` spinning threads, prints [`READY`], and never returns. The process exits
/// when its parent changes (the parent died and the kernel's `PR_SET_PDEATHSIG` did not
/// reach it first).
pub fn run(threads: usize) -> ! {
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    for i in 0..threads.max(1) {
        if let Err(e) = std::thread::Builder::new().name(format!("burn-{i}")).spawn(spin) {
            eprintln!("chstorm burn: cannot start thread {i}: {e}");
            std::process::exit(2);
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{READY}");
    let _ = out.flush();
    drop(out);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: as above.
        if unsafe { libc::getppid() } != parent {
            std::process::exit(0);
        }
    }
}

/// One core's worth of work: an LCG step the optimizer cannot remove.
fn spin() {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    loop {
        for _ in 0..1_000_000 {
            x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407));
        }
    }
}
