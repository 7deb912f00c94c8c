//! `store`: the answers kept, each until its TTL, all within one bound in bytes with the least
//! recently used evicted first. Pure bookkeeping over a clock it is given
//! (`tokio::time::Instant`, so the tests run in paused time); [`super::Cache`] holds it under its
//! lock and turns what it reports into metrics.

use super::key::Key;
use super::Head;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::time::Instant;

/// One kept answer: its head and body as the replica sent them, and when its query was sent.
#[derive(Debug)]
pub struct Stored {
    pub head: Arc<Head>,
    pub body: Bytes,
    pub sent_at: Instant,
}

/// What an entry costs beyond its key and body: 256 bytes of bookkeeping, and each header.
pub fn entry_size(key: &Key, stored: &Stored) -> usize {
    let headers: usize = stored.head.headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 32).sum();
    key.0.len() * 3 + stored.body.len() + headers + 256
}

struct Slot {
    stored: Arc<Stored>,
    expires: Instant,
    owner: Arc<str>,
    size: usize,
    /// Its place in the use order and its id in the expiry order.
    tick: u64,
}

/// An entry that left the store before its TTL for want of room: whose and how big.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gone {
    pub owner: Arc<str>,
    pub size: usize,
    /// Evicted for room (true) or expired (false).
    pub evicted: bool,
}

/// The kept answers.
pub struct Store {
    max: usize,
    bytes: usize,
    tick: u64,
    map: ahash::AHashMap<Key, Slot>,
    by_use: BTreeMap<u64, Key>,
    by_expiry: BTreeMap<(Instant, u64), Key>,
}

impl Store {
    /// A store of at most `max` bytes.
    pub fn new(max: usize) -> Store {
        Store { max, bytes: 0, tick: 0, map: Default::default(), by_use: BTreeMap::new(), by_expiry: BTreeMap::new() }
    }

    /// Bytes held now.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Entries held now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The answer kept for `key`, when its query was sent less than `ttl` ago (the asking
    /// user's) and its own TTL has not passed; a used entry becomes the most recently used.
    /// Entries whose TTL passed are dropped first (reported in `gone`).
    pub fn get(
        &mut self,
        key: &Key,
        now: Instant,
        ttl: std::time::Duration,
        gone: &mut Vec<Gone>,
    ) -> Option<Arc<Stored>> {
        self.expire(now, gone);
        let slot = self.map.get_mut(key)?;
        if now.duration_since(slot.stored.sent_at) >= ttl {
            return None;
        }
        self.by_use.remove(&slot.tick);
        self.tick += 1;
        // The expiry order keeps the id it was filed under.
        let id = slot.tick;
        self.by_expiry.remove(&(slot.expires, id));
        slot.tick = self.tick;
        self.by_use.insert(self.tick, key.clone());
        self.by_expiry.insert((slot.expires, self.tick), key.clone());
        Some(slot.stored.clone())
    }

    /// Keeps `stored` for `key` until `expires`, owned by `owner`, evicting the least recently
    /// used entries to make room; an entry larger than the whole store is not kept (false).
    pub fn put(
        &mut self,
        key: Key,
        stored: Arc<Stored>,
        expires: Instant,
        owner: Arc<str>,
        now: Instant,
        gone: &mut Vec<Gone>,
    ) -> bool {
        self.expire(now, gone);
        let size = entry_size(&key, &stored);
        if size > self.max || expires <= now {
            return false;
        }
        if let Some(old) = self.remove(&key) {
            gone.push(Gone { owner: old.owner, size: old.size, evicted: false });
        }
        while self.bytes + size > self.max {
            let Some((_, oldest)) = self.by_use.first_key_value().map(|(t, k)| (*t, k.clone())) else { break };
            if let Some(old) = self.remove(&oldest) {
                gone.push(Gone { owner: old.owner, size: old.size, evicted: true });
            }
        }
        self.tick += 1;
        self.by_use.insert(self.tick, key.clone());
        self.by_expiry.insert((expires, self.tick), key.clone());
        self.bytes += size;
        self.map.insert(key, Slot { stored, expires, owner, size, tick: self.tick });
        true
    }

    /// Drops every entry whose TTL has passed.
    pub fn expire(&mut self, now: Instant, gone: &mut Vec<Gone>) {
        while let Some((&(at, _), key)) = self.by_expiry.first_key_value() {
            if at > now {
                break;
            }
            let key = key.clone();
            if let Some(old) = self.remove(&key) {
                gone.push(Gone { owner: old.owner, size: old.size, evicted: false });
            }
        }
    }

    fn remove(&mut self, key: &Key) -> Option<Slot> {
        let slot = self.map.remove(key)?;
        self.by_use.remove(&slot.tick);
        self.by_expiry.remove(&(slot.expires, slot.tick));
        self.bytes -= slot.size;
        Some(slot)
    }

    /// Every entry's owner and size, for the metrics when the store is dropped.
    pub fn drain(&mut self) -> Vec<Gone> {
        let keys: Vec<Key> = self.map.keys().cloned().collect();
        keys.iter()
            .filter_map(|k| self.remove(k))
            .map(|s| Gone { owner: s.owner, size: s.size, evicted: false })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(n: u8) -> Key {
        Key(vec![n; 10].into())
    }

    fn answer(len: usize, at: Instant) -> Arc<Stored> {
        Arc::new(Stored { head: Arc::new(Head::status(200)), body: Bytes::from(vec![b'x'; len]), sent_at: at })
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_lives_until_its_ttl_and_the_askers_ttl() {
        let mut s = Store::new(1 << 20);
        let mut gone = Vec::new();
        let t0 = Instant::now();
        assert!(s.put(key(1), answer(100, t0), t0 + Duration::from_secs(2), "u".into(), t0, &mut gone));
        let ttl = Duration::from_secs(2);
        tokio::time::advance(Duration::from_millis(1999)).await;
        assert!(s.get(&key(1), Instant::now(), ttl, &mut gone).is_some(), "just within its TTL");
        assert!(s.get(&key(1), Instant::now(), Duration::from_secs(1), &mut gone).is_none(), "a shorter TTL asks");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(s.get(&key(1), Instant::now(), ttl, &mut gone).is_none(), "at its TTL it is gone");
        assert_eq!((s.len(), s.bytes()), (0, 0));
        assert_eq!(gone.len(), 1);
        assert!(!gone[0].evicted);
    }

    #[tokio::test(start_paused = true)]
    async fn the_least_recently_used_goes_first_and_the_bound_holds() {
        let t0 = Instant::now();
        let one = entry_size(&key(0), &answer(1000, t0));
        let mut s = Store::new(one * 3);
        let mut gone = Vec::new();
        let later = t0 + Duration::from_secs(60);
        for n in 1..=3 {
            assert!(s.put(key(n), answer(1000, t0), later, "u".into(), t0, &mut gone));
        }
        let ttl = Duration::from_secs(60);
        assert!(s.get(&key(1), t0, ttl, &mut gone).is_some(), "1 is now the most recently used");
        assert!(s.put(key(4), answer(1000, t0), later, "v".into(), t0, &mut gone));
        assert_eq!(gone, vec![Gone { owner: "u".into(), size: one, evicted: true }], "2 was the least recently used");
        assert!(s.get(&key(2), t0, ttl, &mut gone).is_none());
        for n in [1, 3, 4] {
            assert!(s.get(&key(n), t0, ttl, &mut gone).is_some(), "{n}");
        }
        assert!(s.bytes() <= one * 3);
        assert!(!s.put(key(5), answer(one * 3, t0), later, "u".into(), t0, &mut gone), "larger than the store");
        // A flood of distinct entries never passes the bound.
        for n in 0..=255u8 {
            s.put(key(n), answer(700 + n as usize, t0), later, "u".into(), t0, &mut gone);
            assert!(s.bytes() <= one * 3);
        }
        let held: usize = s.drain().iter().map(|g| g.size).sum();
        assert_eq!((held, s.bytes(), s.len()), (held, 0, 0));
    }
}
