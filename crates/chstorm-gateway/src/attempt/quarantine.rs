//! Queries of death: a statement that killed the replicas running it is not sent anywhere
//! else, and statements of the same shape are refused for `limits.query_of_death_ttl` (default
//! 5 min; `0s` turns it off), over both protocols.
//!
//! 18.16 crashes on some queries (about 1,000 nested parentheses overflow its parser's stack),
//! and a crash that depends on a value is the common kind: resent by retries and hedges, one such
//! request killed both replicas of its shard, and a fan-out one all four servers. A statement
//! (a read, or a write held whole and out of a session) is a *suspect* when its connection broke
//! after it was sent (not a refused connection), its replica was healthy when it was sent, and
//! the replica refuses a new connection right after (its process is gone: a `GET /ping` finds it
//! dead). A suspect is a query of death, and its shape is refused:
//!
//! * when no statement of its shape succeeded within the TTL (a query of death never succeeds,
//!   so a shape that only ever killed is never known good): one replica dies;
//! * for a read of a known shape, when the one replica it is resent to dies running it too: the
//!   innocent reads in flight on a replica that died of something else (`kill -9`, the OOM
//!   killer, a power cut, a restart) are resent once and answered, as before; a deadly literal
//!   in a known shape kills two replicas, and no third receives it;
//! * for a write of a known shape (writes are never resent), when a write of the same shape
//!   killed its replica before, within the TTL: its *strike*; so a series of deadly writes of
//!   one shape, new literals each, kills at most two replicas.
//!
//! The cost: a shape that ran fine for others (the point lookup of every client, say) is refused
//! for the TTL once one of its literals killed two replicas, and a write of a known shape that
//! was in flight on a replica that died for another reason leaves a strike, so a second such
//! death within the TTL refuses that shape too.
//!
//! A shape is the query's fingerprint: its text with literals out (numbers and quoted strings
//! become `?`), comments dropped, whitespace collapsed and ASCII letters lowercased, hashed with
//! FNV-1a 64. `SELECT * FROM t WHERE id = 1` and `select *  from t where id = 42` share one.
//!
//! Both tables are bounded ([`MAX_SHAPES`] each): when one is full, its expired entries go, and
//! if it is still full it is emptied (known-good shapes are relearnt from the next answers;
//! refusals are rare, and a full table of them means something else is wrong).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most shapes remembered per table (known good, refused, struck): 16,384.
pub const MAX_SHAPES: usize = 16 << 10;

/// A query's shape: FNV-1a 64 over its normalised text.
pub fn fingerprint(sql: &str) -> u64 {
    let mut h = Fnv::default();
    let b = sql.as_bytes();
    let mut i = 0;
    let mut space = false;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            space = true;
            i += 1;
            continue;
        }
        if c == b'-' && b.get(i + 1) == Some(&b'-') {
            i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p);
            space = true;
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i = sql[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2);
            space = true;
            continue;
        }
        if space {
            h.push(b' ');
            space = false;
        }
        let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        if c == b'\'' {
            i = skip_quoted(b, i);
            h.push(b'?');
        } else if c.is_ascii_digit() && (i == 0 || !word(b[i - 1])) {
            // A number: digits, letters (hex, exponents, suffixes) and dots.
            while i < b.len() && (word(b[i]) || b[i] == b'.') {
                i += 1;
            }
            h.push(b'?');
        } else {
            h.push(c.to_ascii_lowercase());
            i += 1;
        }
    }
    h.0
}

/// The index after the quoted string that starts at `start` (backslash escapes and doubled
/// quotes inside).
fn skip_quoted(b: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\'') => i += 2,
            b'\'' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn push(&mut self, c: u8) {
        self.0 = (self.0 ^ c as u64).wrapping_mul(0x0100_0000_01b3);
    }
}

/// Marks shape `fp` now in `table`, kept within [`MAX_SHAPES`]: when full, its entries older
/// than `ttl` go, and if it is still full it is emptied.
fn stamp(table: &mut HashMap<u64, Instant, ahash::RandomState>, fp: u64, ttl: Duration) {
    let now = Instant::now();
    if table.len() >= MAX_SHAPES && !table.contains_key(&fp) {
        table.retain(|_, at| now.duration_since(*at) < ttl);
        if table.len() >= MAX_SHAPES {
            table.clear();
        }
    }
    table.insert(fp, now);
}

/// Why a shape is refused.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The replica it killed (`shard.replica`).
    pub replica: String,
    /// How much longer it is refused.
    pub left: Duration,
}

#[derive(Default)]
struct Tables {
    /// Shape -> its last success.
    good: HashMap<u64, Instant, ahash::RandomState>,
    /// Shape -> (refused until, the replica it killed).
    refused: HashMap<u64, (Instant, String), ahash::RandomState>,
    /// Shape -> when a write of it killed its replica.
    struck: HashMap<u64, Instant, ahash::RandomState>,
}

/// The known-good and refused shapes of one gateway.
pub struct Quarantine {
    ttl: Duration,
    tables: Mutex<Tables>,
}

impl Quarantine {
    /// Shapes are refused, and known good, for `ttl` (zero: no quarantine).
    pub fn new(ttl: Duration) -> Quarantine {
        Quarantine { ttl, tables: Mutex::new(Tables::default()) }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A statement of shape `fp` succeeded.
    pub fn succeeded(&self, fp: u64) {
        if !self.ttl.is_zero() {
            stamp(&mut self.tables().good, fp, self.ttl);
        }
    }

    /// Did a read of shape `fp` succeed within the TTL?
    pub fn known_good(&self, fp: u64) -> bool {
        self.tables().good.get(&fp).is_some_and(|at| at.elapsed() < self.ttl)
    }

    /// A write of shape `fp`, known good, killed its replica: a second death of the shape within
    /// the TTL makes it a query of death.
    pub fn strike(&self, fp: u64) {
        if !self.ttl.is_zero() {
            stamp(&mut self.tables().struck, fp, self.ttl);
        }
    }

    /// Was shape `fp` struck within the TTL?
    pub fn struck(&self, fp: u64) -> bool {
        self.tables().struck.get(&fp).is_some_and(|at| at.elapsed() < self.ttl)
    }

    /// A statement of shape `fp` killed `replica`: refuse the shape for the TTL. False when the
    /// quarantine is off.
    pub fn refuse(&self, fp: u64, replica: &str) -> bool {
        if self.ttl.is_zero() {
            return false;
        }
        let now = Instant::now();
        let mut t = self.tables();
        if t.refused.len() >= MAX_SHAPES {
            t.refused.retain(|_, (until, _)| *until > now);
            if t.refused.len() >= MAX_SHAPES {
                t.refused.clear();
            }
        }
        t.refused.insert(fp, (now + self.ttl, replica.to_string()));
        true
    }

    /// Is shape `fp` refused now?
    pub fn refused(&self, fp: u64) -> Option<Refusal> {
        let mut t = self.tables();
        if t.refused.is_empty() {
            return None;
        }
        let now = Instant::now();
        match t.refused.get(&fp) {
            Some((until, replica)) if *until > now => Some(Refusal { replica: replica.clone(), left: *until - now }),
            Some(_) => {
                t.refused.remove(&fp);
                None
            }
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read with no body is fingerprinted by its `query` alone: the line end the attempts put
    /// between the two must not change its shape.
    #[test]
    fn a_trailing_line_end_does_not_change_the_shape() {
        let texts = [
            "SELECT 1",
            "SELECT 1 -- note",
            "SELECT 'open",
            "SELECT 1 /* open",
            "SELECT x FROM t WHERE s = 'a\\'' ",
            "SELECT 0x1F",
            "",
            " ",
            "select\tNOW()\n",
        ];
        for t in texts {
            assert_eq!(fingerprint(t), fingerprint(&format!("{t}\n")), "{t:?}");
        }
    }

    #[test]
    fn literals_whitespace_comments_and_case_do_not_change_the_shape() {
        let a = fingerprint("SELECT * FROM items WHERE shop_id = 123 AND name = 'x''y\\'z'");
        assert_eq!(a, fingerprint("select *\n  from items -- a comment\n where shop_id = 7 and name = ''"));
        assert_eq!(a, fingerprint("SELECT /* c */ * FROM items WHERE shop_id = 0x1F AND name = 'a'"));
        assert_ne!(a, fingerprint("SELECT * FROM items WHERE shop_id = 123 OR name = 'x'"));
        assert_ne!(a, fingerprint("SELECT * FROM items2 WHERE shop_id = 123 AND name = 'x'"), "a digit in a name");
        let deep = |n: usize| format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(fingerprint(&deep(1000)), fingerprint(&deep(1000).replace('1', "2")));
        assert_ne!(fingerprint(&deep(1000)), fingerprint(&deep(999)), "the nesting is the shape");
        // Unterminated strings and comments end the text without a panic.
        fingerprint("SELECT 'abc");
        fingerprint("SELECT 1 /* open");
    }

    #[test]
    fn refused_for_the_ttl_and_known_good_for_the_ttl() {
        let q = Quarantine::new(Duration::from_millis(50));
        assert!(q.refused(1).is_none());
        q.succeeded(2);
        assert!(q.known_good(2) && !q.known_good(1));
        assert!(q.refuse(1, "1.1"));
        let r = q.refused(1).expect("refused");
        assert_eq!(r.replica, "1.1");
        assert!(r.left <= Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(60));
        assert!(q.refused(1).is_none(), "the TTL passed");
        assert!(!q.known_good(2));
        let off = Quarantine::new(Duration::ZERO);
        assert!(!off.refuse(1, "1.1"));
        assert!(off.refused(1).is_none());
    }

    #[test]
    fn the_tables_are_bounded() {
        let q = Quarantine::new(Duration::from_secs(60));
        for fp in 0..(MAX_SHAPES as u64 + 10) {
            q.succeeded(fp);
            q.refuse(fp, "1.1");
        }
        let t = q.tables();
        assert!(t.good.len() <= MAX_SHAPES && t.refused.len() <= MAX_SHAPES);
    }
}
