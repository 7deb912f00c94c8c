//! CPU shares from `/proc/PID/stat`: user plus system time over wall time × cores.

use crate::procfs;
use std::time::Instant;

/// CPU time of a set of processes at one instant.
#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    at: Instant,
    /// Clock ticks (utime + stime) summed over the processes that exist now.
    ticks: u64,
}

/// Samples the CPU time of `pids` (processes that are gone count 0).
pub fn sample(pids: &[u32]) -> CpuSample {
    CpuSample { at: Instant::now(), ticks: pids.iter().filter_map(|&p| procfs::cpu_ticks(p)).sum() }
}

/// The share of the whole machine (`cores` CPUs) those processes used between `a` and `b`, in
/// percent: 100 means every core busy all the time. Processes that ended in between lose
/// their time, so this is a lower bound for a changing set.
pub fn share_pct(a: &CpuSample, b: &CpuSample, cores: usize) -> f64 {
    let wall = b.at.saturating_duration_since(a.at).as_secs_f64();
    if wall <= 0.0 {
        return 0.0;
    }
    let cpu = b.ticks.saturating_sub(a.ticks) as f64 / procfs::ticks_per_second() as f64;
    100.0 * cpu / (wall * cores.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spinning_thread_shows() {
        let me = [std::process::id()];
        let a = sample(&me);
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 300 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let b = sample(&me);
        let pct = share_pct(&a, &b, 1);
        assert!(pct > 10.0 && pct <= 110.0, "{pct}");
        assert_eq!(share_pct(&a, &a, 2), 0.0);
    }
}
