//! Memory accounting for what a server buffers from its clients: a gateway-wide [`Budget`]
//! and, per client connection, a [`Mem`] with its own ceiling, from which [`Charge`]s are taken
//! *before* the bytes are allocated and given back when they are dropped.
//!
//! The first [`FREE_PER_CONN`] bytes a connection holds are counted against its own ceiling
//! only, not against the budget: a connection's small buffers (a query's text, a few settings,
//! a small held body) never fail for want of room that big uploads have taken, so a `SELECT 1`
//! is answered however many clients are filling their buffers. The budget bounds the rest.
//!
//! Written here rather than with a semaphore crate: a charge grows by any number of bytes, one
//! at a time as a buffer grows, and must fail at once rather than wait (the client gets an
//! error, the others keep their room); two atomics do that.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes per connection not counted against the gateway-wide budget (64 KiB).
pub const FREE_PER_CONN: usize = 64 << 10;

/// Why a charge was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum MemError {
    /// The connection's own ceiling.
    #[error("the client's buffered data would pass {} MiB, this connection's limit (limits.max_client_buffer_mib)", .max >> 20)]
    Connection { max: usize },
    /// The gateway-wide budget.
    #[error("the gateway's buffers for all clients are full ({} MiB, limits.max_buffered_mib); try again later", .max >> 20)]
    Gateway { max: usize },
}

/// The gateway-wide budget, shared by every connection (cheap to clone).
#[derive(Debug, Clone)]
pub struct Budget(Arc<BudgetInner>);

#[derive(Debug)]
struct BudgetInner {
    max: usize,
    used: AtomicUsize,
}

impl Budget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Budget {
        Budget(Arc::new(BudgetInner { max, used: AtomicUsize::new(0) }))
    }

    /// Bytes charged now (beyond each connection's free part).
    pub fn used(&self) -> usize {
        self.0.used.load(Ordering::Relaxed)
    }

    /// The budget's size in bytes.
    pub fn max(&self) -> usize {
        self.0.max
    }

    /// A new connection's account, with a ceiling of `conn_max` bytes.
    pub fn conn(&self, conn_max: usize) -> Mem {
        Mem(Arc::new(MemInner { budget: self.clone(), max: conn_max, used: AtomicUsize::new(0) }))
    }

    fn take(&self, n: usize) -> Result<(), MemError> {
        if n == 0 {
            return Ok(());
        }
        let before = self.0.used.fetch_add(n, Ordering::Relaxed);
        if before + n > self.0.max {
            self.0.used.fetch_sub(n, Ordering::Relaxed);
            return Err(MemError::Gateway { max: self.0.max });
        }
        Ok(())
    }

    fn give(&self, n: usize) {
        if n > 0 {
            self.0.used.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

/// One connection's account (cheap to clone; every clone is the same account).
#[derive(Debug, Clone)]
pub struct Mem(Arc<MemInner>);

#[derive(Debug)]
struct MemInner {
    budget: Budget,
    max: usize,
    used: AtomicUsize,
}

/// The part of a connection's `used` bytes counted against the budget.
fn counted(used: usize) -> usize {
    used.saturating_sub(FREE_PER_CONN)
}

impl Mem {
    /// An account with no budget behind it and no ceiling (tests, and readers that are not a
    /// server's).
    pub fn unbounded() -> Mem {
        Budget::new(usize::MAX / 2).conn(usize::MAX / 2)
    }

    /// The connection's ceiling in bytes.
    pub fn max(&self) -> usize {
        self.0.max
    }

    /// Bytes this connection holds now.
    pub fn used(&self) -> usize {
        self.0.used.load(Ordering::Relaxed)
    }

    /// An empty charge on this account.
    pub fn charge(&self) -> Charge {
        Charge { mem: self.clone(), n: 0 }
    }

    fn take(&self, n: usize) -> Result<(), MemError> {
        let before = self.0.used.fetch_add(n, Ordering::Relaxed);
        let after = before.saturating_add(n);
        if after > self.0.max {
            self.0.used.fetch_sub(n, Ordering::Relaxed);
            return Err(MemError::Connection { max: self.0.max });
        }
        if let Err(e) = self.0.budget.take(counted(after) - counted(before)) {
            self.0.used.fetch_sub(n, Ordering::Relaxed);
            return Err(e);
        }
        Ok(())
    }

    fn give(&self, n: usize) {
        let before = self.0.used.fetch_sub(n, Ordering::Relaxed);
        self.0.budget.give(counted(before) - counted(before - n));
    }
}

/// Bytes held on a connection's account, given back when dropped.
#[derive(Debug)]
pub struct Charge {
    mem: Mem,
    n: usize,
}

impl Charge {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.n
    }

    /// The ceiling of the connection the charge is on.
    pub fn max(&self) -> usize {
        self.mem.max()
    }

    /// Holds `to` bytes in all (more or fewer than now). Growing fails, holding what it held,
    /// when the connection or the gateway has no room.
    pub fn set(&mut self, to: usize) -> Result<(), MemError> {
        if to > self.n {
            self.mem.take(to - self.n)?;
        } else {
            self.mem.give(self.n - to);
        }
        self.n = to;
        Ok(())
    }

    /// Holds `more` bytes more.
    pub fn grow(&mut self, more: usize) -> Result<(), MemError> {
        self.set(self.n.saturating_add(more))
    }

    /// Takes over what `other` holds (on the same account).
    pub fn absorb(&mut self, mut other: Charge) {
        self.n += std::mem::take(&mut other.n);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.n > 0 {
            self.mem.give(self.n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_stops_at_its_ceiling_and_the_gateway_at_its_budget() {
        let b = Budget::new(1 << 20);
        let a = b.conn(800 << 10);
        let mut ca = a.charge();
        ca.set(800 << 10).unwrap();
        assert_eq!(ca.grow(1), Err(MemError::Connection { max: 800 << 10 }));
        assert_eq!(ca.bytes(), 800 << 10, "a refused growth keeps what was held");
        assert_eq!(b.used(), (800 << 10) - FREE_PER_CONN);
        // A second connection: its free part always, then only what the budget has left.
        let c = b.conn(800 << 10);
        let mut cc = c.charge();
        cc.set(FREE_PER_CONN).unwrap();
        let left = (1 << 20) - b.used();
        assert_eq!(cc.grow(left + 1), Err(MemError::Gateway { max: 1 << 20 }));
        cc.grow(left).unwrap();
        assert_eq!(b.used(), 1 << 20);
        // However full the budget, a third connection's small buffers fit.
        let mut small = b.conn(800 << 10).charge();
        small.set(FREE_PER_CONN).unwrap();
        assert!(small.grow(1).is_err());
        drop(ca);
        assert_eq!(a.used(), 0);
        assert_eq!(b.used(), left);
        small.grow(1).unwrap();
        drop((cc, small));
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn charges_shrink_and_merge() {
        let b = Budget::new(1 << 30);
        let m = b.conn(1 << 30);
        let mut x = m.charge();
        x.set(1 << 20).unwrap();
        x.set(1 << 10).unwrap();
        assert_eq!(m.used(), 1 << 10);
        let mut y = m.charge();
        y.set(1 << 20).unwrap();
        x.absorb(y);
        assert_eq!((x.bytes(), m.used()), ((1 << 20) + (1 << 10), (1 << 20) + (1 << 10)));
        drop(x);
        assert_eq!((m.used(), b.used()), (0, 0));
    }
}
