//! `group`: one query's answer shared by every identical read that came while it ran. The
//! producer ([`super::Feed`]) gives the head and the body's chunks; each client ([`super::Waiter`])
//! reads them from its own place, from the first byte whenever it joined.
//!
//! Bounded: up to the user's `max_entry_size` the chunks are all kept (late joiners read them
//! from the start, and the whole answer can be stored); past it, or when the gateway's buffer
//! budget (`limits.max_buffered_mib`) has no room, the group takes no one new and goes at the
//! pace of its slowest client: the producer reads the next chunk only when every client has
//! taken the last, and chunks every client has taken are dropped. The clients of one group
//! are at most the user's `max_waiters`.

use super::Head;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// How the answer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Whole: every chunk was given.
    Done,
    /// Cut short: what came is all there is (the replica broke, the deadline passed).
    Broken(String),
}

/// The shared part of a group.
pub struct Group {
    pub(super) state: Mutex<State>,
    /// Wakes the clients: a head, a chunk or the end came.
    pub(super) changed: Notify,
    /// Wakes the producer: a client took a chunk or left.
    pub(super) taken: Notify,
    /// The producer's task, aborted when the last client leaves before the end.
    pub(super) producer: Mutex<Option<tokio::task::AbortHandle>>,
}

pub(super) struct State {
    pub head: Option<Arc<Head>>,
    pub chunks: VecDeque<Bytes>,
    /// The index of `chunks[0]` among all the chunks given.
    pub base: usize,
    /// Bytes given in all.
    pub given: usize,
    pub end: Option<End>,
    /// New clients may join (all chunks are kept).
    pub open: bool,
    /// Every client left before the end.
    pub abandoned: bool,
    /// Each client's next chunk, by slot (None: a slot left free).
    pub cursors: Vec<Option<usize>>,
    /// The buffered chunks' room on the gateway's budget.
    pub charge: chstorm_proto::mem::Charge,
}

impl Group {
    pub(super) fn new(charge: chstorm_proto::mem::Charge) -> Arc<Group> {
        Arc::new(Group {
            state: Mutex::new(State {
                head: None,
                chunks: VecDeque::new(),
                base: 0,
                given: 0,
                end: None,
                open: true,
                abandoned: false,
                cursors: Vec::new(),
                charge,
            }),
            changed: Notify::new(),
            taken: Notify::new(),
            producer: Mutex::new(None),
        })
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// Clients now.
    pub fn waiters(&self) -> usize {
        self.cursors.iter().filter(|c| c.is_some()).count()
    }

    /// A new client's slot, reading from the first chunk.
    pub fn join(&mut self) -> usize {
        debug_assert_eq!(self.base, 0, "a group that dropped chunks takes no one new");
        match self.cursors.iter().position(Option::is_none) {
            Some(i) => {
                self.cursors[i] = Some(0);
                i
            }
            None => {
                self.cursors.push(Some(0));
                self.cursors.len() - 1
            }
        }
    }

    /// True when every client has taken every chunk given.
    pub fn all_taken(&self) -> bool {
        let end = self.base + self.chunks.len();
        self.cursors.iter().flatten().all(|c| *c >= end)
    }

    /// Drops the chunks every client has taken (only once the group is closed).
    pub fn drop_taken(&mut self) {
        if self.open {
            return;
        }
        let min = self.cursors.iter().flatten().min().copied().unwrap_or(self.base + self.chunks.len());
        while self.base < min {
            if self.chunks.pop_front().is_none() {
                break;
            }
            self.base += 1;
        }
        let held: usize = self.chunks.iter().map(Bytes::len).sum();
        let _ = self.charge.set(held.min(self.charge.bytes()));
    }

    /// The chunks from `cursor` on, in one batch, and the new cursor.
    pub fn take(&self, cursor: usize) -> (Vec<Bytes>, usize) {
        let from = cursor.saturating_sub(self.base);
        let batch: Vec<Bytes> = self.chunks.iter().skip(from).cloned().collect();
        let next = self.base + self.chunks.len();
        (batch, next.max(cursor))
    }
}
