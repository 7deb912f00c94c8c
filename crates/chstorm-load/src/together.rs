//! Several runs at once in one process (the scenarios of `--scenarios`): each on its own
//! threads, each with its own [`LoadSpec`]; give them one `start_at` (plus each one's offset)
//! and they start together. When one cannot start (its server unreachable, its spec invalid),
//! the others are stopped before they send, and its error comes back with their results.

use crate::engine::{run, Progress, RunResult, StopHandle};
use crate::spec::LoadSpec;
use crate::LoadError;

/// Runs every spec at the same time; `on_progress(i, p)` reports spec `i` once a second, from
/// that run's thread. Returns each run's result in the order of `specs`.
pub fn run_together(
    specs: Vec<LoadSpec>,
    stop: &StopHandle,
    on_progress: &(dyn Fn(usize, &Progress) + Sync),
) -> Vec<Result<RunResult, LoadError>> {
    let group = stop.child();
    std::thread::scope(|scope| {
        let handles: Vec<_> = specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let group = group.clone();
                scope.spawn(move || {
                    let r = run(spec, &group, |p| on_progress(i, p));
                    if r.is_err() {
                        // The others would measure a run that is not the one asked for.
                        group.interrupt();
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(LoadError::Invalid("a load thread panicked".into()))))
            .collect()
    })
}
