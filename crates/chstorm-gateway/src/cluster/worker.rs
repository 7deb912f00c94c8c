//! The index of the worker thread running the caller (`crate::runtime::workers` sets it when it starts
//! a worker): the per-worker backend pools ([`super::upstream`], the native port's) key on it,
//! so a pooled connection is used on the thread whose runtime drives it.

use std::cell::Cell;

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The index of the worker running this thread (0 off the workers' threads).
pub fn current() -> usize {
    CURRENT.with(Cell::get)
}

/// Marks this thread as worker `i`.
pub fn set_current(i: usize) {
    CURRENT.with(|c| c.set(i));
}
