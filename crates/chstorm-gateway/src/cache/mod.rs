//! The result cache and the merging of identical reads (`users[*].cache`, docs/GATEWAY.md,
//! "Cache and merging"). Whether a query may be shared is the plan's
//! ([`crate::query::cacheable`]); this module keys and keeps what is shared:
//!
//! * [`store`]: the answers kept until their TTL, within `cache.max_size_mib`, least recently
//!   used evicted first;
//! * [`key`]: what makes two reads identical;
//! * [`group`]: one running query's answer, given to every identical read that came while it
//!   ran, each from the first byte.
//!
//! [`Cache::lookup`] decides, under one lock, what a read gets: a kept answer ([`Lookup::Hit`]),
//! a place in a running query's group ([`Lookup::Join`]), or a new group whose query it starts
//! ([`Lookup::Lead`]: a [`Feed`] for the query's producer, a task of its own that no client's
//! leaving cancels while another waits, and a [`Waiter`] for the client). Every client of a
//! group, its first one too, reads through a [`Waiter`]; the last one to leave before the
//! answer's end aborts the producer, whose attempts' guards then kill the query. An error goes to
//! the clients of its group and is never kept: the next read runs anew.
//!
//! The HTTP front runs the producers (it knows its protocol's attempts) and serves hits, in
//! `crate::http::cached`. Must not import it.

pub mod group;
pub mod key;
pub mod store;

use crate::config::UserCache;
use crate::metrics::{CacheMetrics, UserLabel};
use bytes::Bytes;
use group::{End, Group};
use key::Key;
use std::sync::{Arc, Mutex};
use store::{Gone, Store, Stored};
use tokio::time::Instant;

/// An answer's head, as the clients of a group and the hits of an entry get it: an HTTP answer's
/// status and headers, and the
/// gateway's ids of the attempt that made it.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    pub headers: http::HeaderMap,
    /// The replica that answered, and its thread grant.
    pub replica: Option<http::HeaderValue>,
    pub threads: Option<usize>,
    /// The answer's length, when it was whole when its head came.
    pub whole: Option<u64>,
    /// How the replica that answered was judged (`X-Chstorm-Stale`).
    pub stale: crate::cluster::replication::Freshness,
}

impl Head {
    /// A head of `status` alone.
    pub fn status(status: u16) -> Head {
        Head {
            status,
            headers: http::HeaderMap::new(),
            replica: None,
            threads: None,
            whole: None,
            stale: Default::default(),
        }
    }
}

/// What a read gets from [`Cache::lookup`].
pub enum Lookup {
    /// A kept answer, and how long ago its query was sent.
    Hit(Arc<Stored>, std::time::Duration),
    /// A place among the clients of an identical read running now.
    Join(Waiter),
    /// A new group: the producer's end and the client's.
    Lead(Feed, Waiter),
    /// The identical read running now has its most clients: this one runs alone.
    Alone,
}

struct Inner {
    store: Store,
    groups: ahash::AHashMap<Key, Arc<Group>>,
}

struct Shared {
    inner: Mutex<Inner>,
    metrics: Arc<CacheMetrics>,
    /// Where a group's buffered chunks are charged (`limits.max_buffered_mib`).
    mem: chstorm_proto::mem::Budget,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts what left the store.
    fn gone(&self, gone: &[Gone]) {
        for g in gone {
            let user = UserLabel { user: g.owner.to_string() };
            self.metrics.bytes.get_or_create(&user).dec_by(g.size as i64);
            if g.evicted {
                self.metrics.evictions.get_or_create(&user).inc();
            }
        }
    }

    /// Keeps `stored` for `key` until `expires`, counted under `owner` (and what it evicted).
    /// `inner` is the locked state, released before the metrics are counted.
    fn put(
        &self,
        mut inner: std::sync::MutexGuard<'_, Inner>,
        key: Key,
        stored: Arc<Stored>,
        owner: Arc<str>,
        expires: Instant,
    ) {
        let mut gone = Vec::new();
        let size = store::entry_size(&key, &stored);
        let kept = inner.store.put(key, stored, expires, owner.clone(), Instant::now(), &mut gone);
        drop(inner);
        if kept {
            self.metrics.bytes.get_or_create(&UserLabel { user: owner.to_string() }).inc_by(size as i64);
        }
        self.gone(&gone);
    }

    /// Takes `group` out of the running ones, if it is still the one of `key`.
    fn forget(&self, inner: &mut Inner, key: &Key, group: &Arc<Group>) {
        if inner.groups.get(key).is_some_and(|g| Arc::ptr_eq(g, group)) {
            inner.groups.remove(key);
        }
    }
}

/// The cache of one gateway state (emptied by a reload).
pub struct Cache {
    shared: Arc<Shared>,
}

impl Drop for Cache {
    fn drop(&mut self) {
        let gone = self.shared.lock().store.drain();
        self.shared.gone(&gone);
    }
}

impl Cache {
    /// A cache of at most `max_bytes` of kept answers, its groups charged on `mem`.
    pub fn new(max_bytes: usize, metrics: Arc<CacheMetrics>, mem: chstorm_proto::mem::Budget) -> Cache {
        let inner = Mutex::new(Inner { store: Store::new(max_bytes), groups: Default::default() });
        Cache { shared: Arc::new(Shared { inner, metrics, mem }) }
    }

    /// What a read of `user` with `key` gets under its `policy` (see [`Lookup`]), counted in its
    /// user's metrics.
    pub fn lookup(&self, key: &Key, user: &str, policy: &UserCache) -> Lookup {
        self.find(key, user, policy, true).unwrap_or(Lookup::Alone)
    }

    /// What a read gets that needs no server: a kept answer ([`Lookup::Hit`]) or a place in an
    /// identical read's group ([`Lookup::Join`]); None (and nothing counted) when it would lead
    /// a group or run alone. The fronts ask it before the user's queue, so that such reads
    /// wait in none.
    pub fn shared(&self, key: &Key, user: &str, policy: &UserCache) -> Option<Lookup> {
        self.find(key, user, policy, false)
    }

    /// The answer kept for `key` under `policy` (which keeps answers), counted as a hit, and how
    /// long ago its query was sent; None is counted as a miss. The native port's lookup: it keeps
    /// answers ([`Cache::keep`]) but merges none.
    pub fn kept(&self, key: &Key, user: &str, policy: &UserCache) -> Option<(Arc<Stored>, std::time::Duration)> {
        let now = Instant::now();
        let mut gone = Vec::new();
        let hit = self.shared.lock().store.get(key, now, policy.ttl, &mut gone);
        self.shared.gone(&gone);
        let label = UserLabel { user: user.to_string() };
        match hit {
            Some(stored) => {
                self.shared.metrics.hits.get_or_create(&label).inc();
                let age = now.duration_since(stored.sent_at);
                Some((stored, age))
            }
            None => {
                self.shared.metrics.misses.get_or_create(&label).inc();
                None
            }
        }
    }

    /// Keeps `body`, a whole answer of `owner`'s read with `key` whose query was sent at
    /// `sent_at`, until `policy`'s TTL from then, when it fits its entry limit.
    pub fn keep(&self, key: Key, owner: &str, policy: &UserCache, body: Bytes, sent_at: Instant) {
        if body.len() > policy.max_entry_size || !policy.keeps() {
            return;
        }
        let stored = Arc::new(Stored { head: Arc::new(Head::status(200)), body, sent_at });
        self.shared.put(self.shared.lock(), key, stored, owner.into(), sent_at + policy.ttl);
    }

    /// [`Cache::lookup`]; a read that would lead a group or run alone gets None when not
    /// `lead`.
    fn find(&self, key: &Key, user: &str, policy: &UserCache, lead: bool) -> Option<Lookup> {
        let now = Instant::now();
        let m = &self.shared.metrics;
        let label = UserLabel { user: user.to_string() };
        let mut gone = Vec::new();
        let mut inner = self.shared.lock();
        let hit = if policy.keeps() { inner.store.get(key, now, policy.ttl, &mut gone) } else { None };
        let found = match hit {
            Some(stored) => Found::Hit(stored),
            None => match inner.groups.get(key) {
                Some(g) => {
                    let mut st = g.lock();
                    if st.open && !st.abandoned && st.waiters() < policy.max_waiters {
                        let slot = st.join();
                        Found::Join(g.clone(), slot)
                    } else {
                        Found::Alone
                    }
                }
                None if !lead => Found::Alone,
                None => {
                    let group =
                        Group::new(self.shared.mem.conn(policy.max_entry_size.saturating_add(1 << 20)).charge());
                    let slot = group.lock().join();
                    inner.groups.insert(key.clone(), group.clone());
                    Found::Lead(group, slot)
                }
            },
        };
        drop(inner);
        self.shared.gone(&gone);
        if !lead && matches!(found, Found::Alone) {
            return None;
        }
        Some(match found {
            Found::Hit(stored) => {
                m.hits.get_or_create(&label).inc();
                let age = now.duration_since(stored.sent_at);
                Lookup::Hit(stored, age)
            }
            Found::Join(group, slot) => {
                m.merged.get_or_create(&label).inc();
                Lookup::Join(Waiter { group, slot, shared: self.shared.clone(), key: key.clone() })
            }
            Found::Lead(group, slot) => {
                m.misses.get_or_create(&label).inc();
                let feed = Feed {
                    group: group.clone(),
                    shared: self.shared.clone(),
                    key: key.clone(),
                    owner: user.into(),
                    policy: policy.clone(),
                    sent_at: now,
                    ended: false,
                };
                Lookup::Lead(feed, Waiter { group, slot, shared: self.shared.clone(), key: key.clone() })
            }
            Found::Alone => {
                m.misses.get_or_create(&label).inc();
                Lookup::Alone
            }
        })
    }
}

enum Found {
    Hit(Arc<Stored>),
    Join(Arc<Group>, usize),
    Lead(Arc<Group>, usize),
    Alone,
}

/// The producer's end of a group: it gives the head, the chunks and the end. Dropped without
/// [`Feed::finish`], the answer is broken for its clients.
pub struct Feed {
    group: Arc<Group>,
    shared: Arc<Shared>,
    key: Key,
    owner: Arc<str>,
    policy: UserCache,
    sent_at: Instant,
    ended: bool,
}

impl Feed {
    /// Where the producer's task is told to the group, once it is spawned with this feed.
    pub fn producer_slot(&self) -> ProducerSlot {
        ProducerSlot(self.group.clone())
    }

    /// True while some client waits for the answer.
    pub fn wanted(&self) -> bool {
        !self.group.lock().abandoned
    }

    /// The answer's head.
    pub fn head(&self, head: Head) {
        self.group.lock().head = Some(Arc::new(head));
        self.group.changed.notify_waiters();
    }

    /// Gives the next chunk. Within the entry limit (and the buffer budget) it is kept for every
    /// client, at once; past it the group closes to new clients and this waits until every
    /// client has taken the chunks before it.
    pub async fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        loop {
            let taken = self.group.taken.notified();
            tokio::pin!(taken);
            taken.as_mut().enable();
            {
                let mut st = self.group.lock();
                if st.abandoned {
                    return;
                }
                let fits = st.given + chunk.len() <= self.policy.max_entry_size;
                if st.open && fits && st.charge.grow(chunk.len()).is_ok() {
                    st.given += chunk.len();
                    st.chunks.push_back(chunk);
                    break;
                }
                if st.open {
                    // Past the limit: no one new, and the answer is not kept. This chunk goes
                    // at once; the next waits until every client has taken it.
                    st.open = false;
                    st.given += chunk.len();
                    let _ = st.charge.grow(chunk.len());
                    st.chunks.push_back(chunk);
                    drop(st);
                    let mut inner = self.shared.lock();
                    self.shared.forget(&mut inner, &self.key, &self.group);
                    break;
                }
                st.drop_taken();
                if st.all_taken() {
                    st.given += chunk.len();
                    let _ = st.charge.grow(chunk.len());
                    st.chunks.push_back(chunk);
                    break;
                }
            }
            taken.await;
        }
        self.group.changed.notify_waiters();
    }

    /// The answer ended. `keep`: it is whole and may be kept (a success, nothing cut, no
    /// exception); it is, when its user keeps answers and it fit within the entry limit.
    pub fn finish(mut self, keep: bool) {
        self.end(End::Done, keep);
    }

    /// The answer broke after what was given: its clients' answers end with an error.
    pub fn broken(mut self, why: String) {
        self.end(End::Broken(why), false);
    }

    fn end(&mut self, end: End, keep: bool) {
        self.ended = true;
        let stored = {
            let mut st = self.group.lock();
            let whole = st.open && !st.abandoned && end == End::Done && keep && self.policy.keeps();
            st.end = Some(end);
            match (&st.head, whole) {
                (Some(head), true) => {
                    let mut body = bytes::BytesMut::with_capacity(st.given);
                    st.chunks.iter().for_each(|c| body.extend_from_slice(c));
                    Some(Arc::new(Stored { head: head.clone(), body: body.freeze(), sent_at: self.sent_at }))
                }
                _ => None,
            }
        };
        self.group.changed.notify_waiters();
        // Out of the running groups and into the store under one lock: a read finds the one
        // or the other.
        let mut inner = self.shared.lock();
        self.shared.forget(&mut inner, &self.key, &self.group);
        if let Some(stored) = stored {
            let expires = self.sent_at + self.policy.ttl;
            self.shared.put(inner, self.key.clone(), stored, self.owner.clone(), expires);
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        if !self.ended {
            self.end(End::Broken("the gateway gave up the query".into()), false);
        }
    }
}

/// Where a group learns its producer's task ([`Feed::producer_slot`]).
pub struct ProducerSlot(Arc<Group>);

impl ProducerSlot {
    /// The producer's task, aborted when every client has left before the end (at once when
    /// they already have).
    pub fn set(self, task: tokio::task::AbortHandle) {
        let mut slot = self.0.producer.lock().unwrap_or_else(|e| e.into_inner());
        if self.0.lock().abandoned {
            task.abort();
        } else {
            *slot = Some(task);
        }
    }
}

/// A client's end of a group. Dropped, the client leaves; the last to leave before the end
/// aborts the producer.
pub struct Waiter {
    group: Arc<Group>,
    slot: usize,
    shared: Arc<Shared>,
    key: Key,
}

/// What a waiter reads next.
pub enum Next {
    /// These chunks, in order.
    Chunks(Vec<Bytes>),
    /// The answer ended whole.
    Done,
    /// It broke.
    Broken(String),
}

impl Waiter {
    /// The answer's head; Err when the answer broke before it.
    pub async fn head(&self) -> Result<Arc<Head>, String> {
        loop {
            let changed = self.group.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let st = self.group.lock();
                if let Some(h) = &st.head {
                    return Ok(h.clone());
                }
                if let Some(End::Broken(why)) = &st.end {
                    return Err(why.clone());
                }
                if st.end.is_some() {
                    return Err("the answer ended without a head".into());
                }
            }
            changed.await;
        }
    }

    /// The chunks given since this client's last read (waiting for one), or the end.
    pub async fn next(&self) -> Next {
        loop {
            let changed = self.group.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut st = self.group.lock();
                let cursor = st.cursors.get(self.slot).copied().flatten().unwrap_or(usize::MAX);
                let (batch, to) = st.take(cursor);
                if !batch.is_empty() {
                    st.cursors[self.slot] = Some(to);
                    let closed = !st.open;
                    drop(st);
                    if closed {
                        self.group.taken.notify_one();
                    }
                    return Next::Chunks(batch);
                }
                match &st.end {
                    Some(End::Done) => return Next::Done,
                    Some(End::Broken(why)) => return Next::Broken(why.clone()),
                    None => {}
                }
            }
            changed.await;
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut inner = self.shared.lock();
        let mut st = self.group.lock();
        if let Some(c) = st.cursors.get_mut(self.slot) {
            *c = None;
        }
        let last = st.waiters() == 0 && st.end.is_none();
        if last {
            st.abandoned = true;
        }
        drop(st);
        if last {
            self.shared.forget(&mut inner, &self.key, &self.group);
        }
        drop(inner);
        self.group.taken.notify_one();
        if last {
            if let Some(task) = self.group.producer.lock().unwrap_or_else(|e| e.into_inner()).take() {
                task.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests;
