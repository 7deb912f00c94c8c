//! Replication delay: how far each replica lags behind its shard, read on the health loop, and
//! how that sorts the replicas for a read (`health.max_replica_delay`, docs/GATEWAY.md,
//! "Replication delay").
//!
//! **What is read.** One query a replica a health round (`health.interval`), bounded by
//! `health.timeout`, answered by one row:
//!
//! ```sql
//! SELECT max(absolute_delay), max(is_readonly), max(is_session_expired), count(),
//!        maxIf(absolute_delay, <the cluster's routed local tables>) FROM system.replicas
//! ```
//!
//! `absolute_delay` is what a `Distributed` table itself compares with
//! `max_replica_delay_for_distributed_queries` (the TablesStatus request;
//! ClickHouse/ClickHouse `src/Client/ConnectionEstablisher.cpp`, commit 024d938: a replica is up
//! to date when `delay < max_allowed_delay`, else stale, `staleness = delay`). It is the age of the
//! oldest part the replica has not fetched yet, 0 when its queue holds none, and the current Unix
//! time when its queue was never loaded (a replica that started and has not reached ZooKeeper
//! yet): `StorageReplicatedMergeTree::getAbsoluteDelay` (`src/Storages/StorageReplicatedMergeTree.cpp`,
//! commit 000ba8a). These columns are the replica's own state: 18.16 and current releases read
//! ZooKeeper for `system.replicas` only for `log_max_index`, `log_pointer`, `total_replicas` and
//! `active_replicas`, which the query leaves out, so its cost does not grow with ZooKeeper's.
//!
//! `/replicas_status` is not used: on 18.16.1 a replica 395 s behind answers `200` with its
//! tables' delays instead of `Ok.`, and a replica whose ZooKeeper session is gone answers `500`
//! (Code 242, `Table is in readonly mode`; both seen on the real server); current releases answer
//! `503` only when the *relative* delay reaches `min_relative_delay_to_close` (300 s; it is
//! measured only from `min_relative_delay_to_measure`, 120 s, and costs ZooKeeper reads), and a
//! read-only table keeps `200` (`src/Server/ReplicasStatusHandler.cpp`, commit 001a380).
//!
//! **Views.** A routed read reads the routed local tables (`routing.tables`' values): it is
//! judged by their largest delay. Any other read (a fan-out's coordinator, which also reads its
//! own shard) by the largest delay of all the replica's replicated tables. A replica without
//! replicated tables lags by 0.
//!
//! **Tiers.** For a read, a replica is *fresh* when its delay is known and below the limit
//! (ClickHouse's `delay < max`), *stale* when known and at or above it, *unknown* when the status
//! could not be read (an error, a timeout, a replica just up, or not read yet). Reads go to
//! healthy fresh replicas first; with none, to healthy replicas whose delay is unknown; with
//! none, to the least stale healthy replica when falling back is allowed
//! (`health.fallback_to_stale_replicas`, or the query's
//! `fallback_to_stale_replicas_for_distributed_queries`), else they are refused with Code 369
//! (ClickHouse's ALL_REPLICAS_ARE_STALE). Writes skip a replica whose tables are read-only or
//! whose ZooKeeper session expired while another healthy replica is not.
//!
//! This module is the rule and the state, pure; the query is sent by
//! [`crate::cluster::delay_probe`] on the health loop, and the balancer sorts by the tiers.

use prometheus_client::metrics::counter::Counter;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// What a replica's `system.replicas` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reading {
    /// The largest `absolute_delay` of its replicated tables, in seconds.
    pub delay: u64,
    /// The largest `absolute_delay` of the cluster's routed local tables on it.
    pub routed_delay: u64,
    /// A replicated table of it is read-only (`is_readonly`).
    pub read_only: bool,
    /// Its ZooKeeper session expired (`is_session_expired`).
    pub session_expired: bool,
    /// Its replicated tables.
    pub tables: u64,
}

impl Reading {
    /// The delay a read through `view` is judged by.
    pub fn delay_for(&self, view: View) -> u64 {
        match view {
            View::Routed => self.routed_delay,
            View::Any => self.delay,
        }
    }

    /// Writes may go to it: no read-only table, its session alive.
    pub fn writable(&self) -> bool {
        !self.read_only && !self.session_expired
    }
}

/// Which delay judges a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// A routed read: the routed local tables' delay.
    Routed = 0,
    /// Any other read: the largest delay of the replica's tables.
    Any = 1,
}

/// How a replica stands for a read, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    Fresh,
    Unknown,
    Stale,
}

/// How the replica an attempt went to was judged, for the answer's `X-Chstorm-Stale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Freshness {
    /// Fresh, or nothing to judge (a write, a session, tracking off): no header.
    #[default]
    Fresh,
    /// No replica of the shard was known fresh, and its delay is unknown.
    Unknown,
    /// No replica of the shard was fresh: it lags this many seconds (the least stale).
    Stale(u64),
}

impl Freshness {
    /// The `reason` label of `chstorm_gateway_stale_reads_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::Unknown => "unknown",
            Freshness::Stale(_) => "stale",
        }
    }
}

/// The freshness rule of one cluster: `health.max_replica_delay` in whole seconds (None: off)
/// and `health.fallback_to_stale_replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub max_delay_s: Option<u64>,
    pub fallback: bool,
}

impl Default for Rule {
    /// Off: every replica counts as fresh, and nothing is read.
    fn default() -> Self {
        Rule { max_delay_s: None, fallback: true }
    }
}

impl Rule {
    /// From the config's `health.max_replica_delay` (0 s: off) and `fallback_to_stale_replicas`.
    pub fn new(max_delay: Duration, fallback: bool) -> Rule {
        Rule { max_delay_s: (!max_delay.is_zero()).then_some(max_delay.as_secs()), fallback }
    }

    /// The tier of a replica with `reading` (None: unknown) for `view`.
    pub fn tier(&self, reading: Option<&Reading>, view: View) -> Tier {
        let Some(max) = self.max_delay_s else { return Tier::Fresh };
        match reading {
            None => Tier::Unknown,
            Some(r) if r.delay_for(view) < max => Tier::Fresh,
            Some(_) => Tier::Stale,
        }
    }
}

/// One replica's replication state, kept beside its health ([`crate::cluster::replica::Replica`]).
#[derive(Debug, Default)]
pub struct State {
    /// The last reading; None while unknown.
    reading: Mutex<Option<Reading>>,
    /// Why it is unknown, once a read failed.
    error: Mutex<Option<String>>,
    /// `chstorm_gateway_reads_steered_total` of the replica, once the health loop bound it.
    pub(crate) steered: OnceLock<Counter>,
    /// `chstorm_gateway_writes_steered_total` of the replica, once bound.
    pub(crate) writes_steered: OnceLock<Counter>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// The last reading; None while unknown.
    pub fn reading(&self) -> Option<Reading> {
        *lock(&self.reading)
    }

    /// Why the status is unknown, if a read failed.
    pub fn error(&self) -> Option<String> {
        lock(&self.error).clone()
    }

    /// Records a read: the reading, or why there is none. Returns the previous reading.
    pub fn record(&self, read: Result<Reading, String>) -> Option<Reading> {
        let (reading, error) = match read {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e)),
        };
        *lock(&self.error) = error;
        std::mem::replace(&mut *lock(&self.reading), reading)
    }

    /// Counts a read sent to a fresher replica instead of this one.
    pub fn count_steered(&self) {
        if let Some(c) = self.steered.get() {
            c.inc();
        }
    }

    /// Counts a write sent to another replica because this one is read-only.
    pub fn count_write_steered(&self) {
        if let Some(c) = self.writes_steered.get() {
            c.inc();
        }
    }
}

/// The status query (see the module doc), for the routed local tables `routed` (a database
/// when the config names one, and a table).
pub fn status_sql(routed: &[(Option<String>, String)]) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
    let conds: Vec<String> = routed
        .iter()
        .map(|(db, t)| match db {
            Some(db) => format!("(database = {} AND table = {})", quote(db), quote(t)),
            None => format!("table = {}", quote(t)),
        })
        .collect();
    let routed = match conds.is_empty() {
        true => "toUInt64(0)".to_string(),
        false => format!("maxIf(absolute_delay, {})", conds.join(" OR ")),
    };
    format!(
        "SELECT max(absolute_delay), max(is_readonly), max(is_session_expired), count(), {routed} \
         FROM system.replicas FORMAT TabSeparated"
    )
}

/// Reads the status query's one row.
pub fn parse(tsv: &str) -> Result<Reading, String> {
    let line = tsv.lines().next().unwrap_or("");
    let f: Vec<&str> = line.split('\t').collect();
    let num = |i: usize| -> Result<u64, String> {
        f.get(i)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| format!("unexpected answer to the system.replicas query: {:?}", line.trim()))
    };
    if f.len() != 5 {
        return Err(format!("unexpected answer to the system.replicas query: {:?}", line.trim()));
    }
    Ok(Reading {
        delay: num(0)?,
        read_only: num(1)? != 0,
        session_expired: num(2)? != 0,
        tables: num(3)?,
        routed_delay: num(4)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_the_routed_tables() {
        let none = status_sql(&[]);
        assert!(none.contains(", toUInt64(0) FROM system.replicas"), "{none}");
        let two = status_sql(&[(None, "items_local".into()), (Some("shop".into()), "o'k".into())]);
        assert!(
            two.contains("maxIf(absolute_delay, table = 'items_local' OR (database = 'shop' AND table = 'o\\'k'))"),
            "{two}"
        );
        assert!(!two.contains("log_pointer") && !two.contains("active_replicas"), "no column that reads ZooKeeper");
    }

    #[test]
    fn answers_are_read_or_refused_in_one_line() {
        let r = parse("412\t0\t1\t3\t7\n").unwrap();
        assert_eq!(r, Reading { delay: 412, routed_delay: 7, read_only: false, session_expired: true, tables: 3 });
        assert!(!r.writable());
        assert_eq!((r.delay_for(View::Any), r.delay_for(View::Routed)), (412, 7));
        assert_eq!(parse("0\t0\t0\t0\t0").unwrap(), Reading::default());
        for bad in ["", "1\t2", "x\t0\t0\t0\t0", "1\t0\t0\t0\t0\t9", "Code: 60, e.displayText() = ..."] {
            let e = parse(bad).unwrap_err();
            assert!(e.starts_with("unexpected answer") && !e.contains('\n'), "{bad:?}: {e}");
        }
    }

    #[test]
    fn tiers_follow_clickhouse_delay_below_max_is_fresh() {
        let rule = Rule::new(Duration::from_secs(300), true);
        let at = |d: u64| Reading { delay: d, routed_delay: d / 2, ..Default::default() };
        assert_eq!(rule.tier(Some(&at(299)), View::Any), Tier::Fresh);
        assert_eq!(rule.tier(Some(&at(300)), View::Any), Tier::Stale, "delay >= max is stale, as in ClickHouse");
        assert_eq!(rule.tier(Some(&at(400)), View::Routed), Tier::Fresh, "a routed read: the routed tables' delay");
        assert_eq!(rule.tier(None, View::Routed), Tier::Unknown, "unknown is not fresh");
        let off = Rule::new(Duration::ZERO, true);
        assert_eq!((off.max_delay_s, off.tier(None, View::Any)), (None, Tier::Fresh), "0s: off");
        assert!(Tier::Fresh < Tier::Unknown && Tier::Unknown < Tier::Stale);
    }

    #[test]
    fn the_state_keeps_the_last_reading_or_why_there_is_none() {
        let s = State::default();
        assert_eq!((s.reading(), s.error()), (None, None));
        let r = Reading { delay: 5, ..Default::default() };
        assert_eq!(s.record(Ok(r)), None);
        assert_eq!(s.record(Err("HTTP 500: Code: 497".into())), Some(r));
        assert_eq!((s.reading(), s.error().as_deref()), (None, Some("HTTP 500: Code: 497")));
        s.count_steered();
        assert_eq!((Freshness::Stale(412).reason(), Freshness::Unknown.reason()), ("stale", "unknown"));
    }
}
