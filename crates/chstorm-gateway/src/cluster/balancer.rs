//! Replica selection: power of two choices on outstanding requests plus a decaying error
//! penalty ([`Replica::score`]), and rendezvous hashing for sessions.
//!
//! The balancer knows the replicas of each shard and reads *which are healthy* from a snapshot
//! that health checking (active probes, [`crate::cluster::health`]) and passive detection (a failed request)
//! publish by swapping an `Arc` (`arc_swap`). A request never waits for a lock to pick a replica.
//! Replica state itself lives in [`crate::cluster::replica`].
//!
//! The snapshot also sorts each shard's healthy replicas by their replication delay
//! ([`crate::cluster::replication`]): for reads, fresh ones, then those whose delay is unknown,
//! then the stale ones least stale first; for writes, those that are not read-only. A pick
//! ([`Balancer::pick_for`]) takes the first non-empty group, so the hedges, retries and thread
//! grants of a query all see the same view.
//!
//! The two draws of a pick come from a `SmallRng` that each thread keeps for each balancer it
//! picks for: stream `k` of the balancer's seed, `k` counting the threads that picked before
//! it. So picks share no lock and no counter between worker threads, and one thread picking
//! with a given seed ([`Balancer::with_seed`]: tests use fixed seeds, the gateway a seed from
//! the OS's entropy) picks the same replicas in the same states. A thread keeps at most
//! [`STREAMS_PER_THREAD`] generators (a reload makes new balancers; the oldest goes). Measured
//! against `rand::thread_rng` with a release build of the two draws alone, 20 million picks on
//! 1 and 2 threads (2026-11-26, 2 cores, load average 7): 46 to 59 ns a pick against 82 to 112
//! on one thread, 107 to 197 against 170 to 198 on two; a seed plus one shared atomic counter
//! per pick cost 130 to 161 and 322 to 500.

pub use crate::cluster::replica::{InFlight, Replica};
use crate::cluster::replication::{Freshness, Reading, Rule, Tier, View};
use crate::config::Cluster;
use arc_swap::ArcSwap;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Which replicas are healthy, per shard (indexes into [`Balancer::shards`]), and how they stand
/// for reads and writes.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub healthy: Vec<Vec<usize>>,
    /// By [`View`] (routed, any) and shard: its healthy replicas by tier.
    pub reads: [Vec<Tiers>; 2],
    /// By shard: its healthy replicas that take writes (not read-only, or not known to be).
    pub writable: Vec<Vec<usize>>,
}

/// A shard's healthy replicas by tier, for one [`View`].
#[derive(Debug, Default, Clone)]
pub struct Tiers {
    pub fresh: Vec<usize>,
    pub unknown: Vec<usize>,
    /// With their delays in seconds, least stale first.
    pub stale: Vec<(usize, u64)>,
}

/// What a pick is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// A read judged by `view`'s delay; `fallback`: a stale replica may serve when no fresher is
    /// healthy.
    Read { view: View, fallback: bool },
    /// A write (any statement that is not a read): not to a read-only replica if another is up.
    Write,
}

/// The replicas of one cluster.
pub struct Balancer {
    pub cluster: String,
    pub shards: Vec<Vec<Arc<Replica>>>,
    snapshot: ArcSwap<Snapshot>,
    /// Serialises snapshot rebuilds (rare: only on health changes).
    publish: Mutex<()>,
    /// Tells this balancer's generators from others' in a thread's [`STREAMS`].
    id: u64,
    /// The seed of the picks' random draws.
    seed: u64,
    /// Threads that made a generator for this balancer: the next one's stream number.
    streams: AtomicU64,
    /// `health.max_replica_delay` and `health.fallback_to_stale_replicas`.
    rule: Rule,
}

/// The most generators a thread keeps, one per balancer it picked for lately.
pub const STREAMS_PER_THREAD: usize = 8;

/// The next balancer's [`Balancer::id`].
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's generators by balancer id, oldest first.
    static STREAMS: RefCell<Vec<(u64, SmallRng)>> = const { RefCell::new(Vec::new()) };
}

impl Balancer {
    /// Every replica starts healthy; the first probes correct that within `fall` intervals, and
    /// the first failed request at once. The picks' seed comes from the OS's entropy.
    pub fn new(cluster: &Cluster) -> Balancer {
        Balancer::with_seed(cluster, rand::random())
    }

    /// [`Balancer::new`] whose picks draw from `seed`: the same seed, the same replicas picked
    /// in the same states.
    pub fn with_seed(cluster: &Cluster, seed: u64) -> Balancer {
        let shards: Vec<Vec<Arc<Replica>>> = cluster
            .shards
            .iter()
            .enumerate()
            .map(|(si, s)| {
                s.replicas.iter().enumerate().map(|(ri, a)| Arc::new(Replica::new(a.clone(), si, ri))).collect()
            })
            .collect();
        let b = Balancer {
            cluster: cluster.name.clone(),
            shards,
            snapshot: ArcSwap::from_pointee(Snapshot::default()),
            publish: Mutex::new(()),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            seed,
            streams: AtomicU64::new(0),
            rule: Rule::default(),
        };
        b.republish();
        b
    }

    /// This balancer judging replicas by their replication delay with `rule` (default: off).
    pub fn with_rule(mut self, rule: Rule) -> Balancer {
        self.rule = rule;
        self.republish();
        self
    }

    /// The freshness rule.
    pub fn rule(&self) -> Rule {
        self.rule
    }

    pub fn replicas(&self) -> impl Iterator<Item = &Arc<Replica>> {
        self.shards.iter().flatten()
    }

    fn republish(&self) {
        let _g = self.publish.lock().unwrap_or_else(|e| e.into_inner());
        let healthy: Vec<Vec<usize>> = self
            .shards
            .iter()
            .map(|s| s.iter().enumerate().filter(|(_, r)| r.is_healthy()).map(|(i, _)| i).collect())
            .collect();
        let readings: Vec<Vec<Option<Reading>>> =
            self.shards.iter().map(|s| s.iter().map(|r| r.replication.reading()).collect()).collect();
        let tiers = |view: View| -> Vec<Tiers> {
            healthy
                .iter()
                .enumerate()
                .map(|(s, ids)| {
                    let mut t = Tiers::default();
                    for &i in ids {
                        let reading = readings[s][i].as_ref();
                        match self.rule.tier(reading, view) {
                            Tier::Fresh => t.fresh.push(i),
                            Tier::Unknown => t.unknown.push(i),
                            Tier::Stale => t.stale.push((i, reading.map_or(0, |r| r.delay_for(view)))),
                        }
                    }
                    t.stale.sort_by_key(|&(i, d)| (d, i));
                    t
                })
                .collect()
        };
        let reads = [tiers(View::Routed), tiers(View::Any)];
        let writable = healthy
            .iter()
            .enumerate()
            .map(|(s, ids)| ids.iter().copied().filter(|&i| readings[s][i].is_none_or(|r| r.writable())).collect())
            .collect();
        self.snapshot.store(Arc::new(Snapshot { healthy, reads, writable }));
    }

    /// Records what `r`'s replication status read (`Err`: why it is unknown) and republishes
    /// when that moves it between tiers or changes whether it takes writes. Returns the
    /// previous reading.
    pub fn record_replication(&self, r: &Replica, read: Result<Reading, String>) -> Option<Reading> {
        let before = self.standing(r);
        let old = r.replication.record(read);
        if self.standing(r) != before {
            self.republish();
        }
        old
    }

    /// Takes over the replication readings `old` (the balancer of the config before a reload)
    /// has for replicas of the same URL, so a reload does not forget which replicas lag.
    pub fn adopt_readings(&self, old: &Balancer) {
        // A replica this balancer's own probes have read already keeps its reading.
        for r in self.replicas().filter(|r| r.replication.reading().is_none() && r.replication.error().is_none()) {
            if let Some(o) = old.replicas().find(|o| o.addr.base == r.addr.base) {
                if let Some(reading) = o.replication.reading() {
                    r.replication.record(Ok(reading));
                }
            }
        }
        self.republish();
    }

    /// How `r` stands for reads in both views (a stale replica's delays too: they order the
    /// stale ones) and for writes.
    fn standing(&self, r: &Replica) -> (Tier, Tier, bool, Option<(u64, u64)>) {
        let reading = r.replication.reading();
        let (routed, any) = (self.tier_of(r, View::Routed), self.tier_of(r, View::Any));
        let stale = (routed == Tier::Stale || any == Tier::Stale).then_some(reading).flatten();
        (routed, any, reading.is_none_or(|x| x.writable()), stale.map(|x| (x.routed_delay, x.delay)))
    }

    /// `r`'s tier for a read through `view`.
    pub fn tier_of(&self, r: &Replica, view: View) -> Tier {
        self.rule.tier(r.replication.reading().as_ref(), view)
    }

    /// The one-line refusal of a read of `shard` (any shard when None) that no replica may serve:
    /// healthy replicas exist, but none is fresh and falling back is off (ClickHouse's Code 369,
    /// ALL_REPLICAS_ARE_STALE). None when that is not why no replica was picked.
    pub fn stale_refusal(&self, shard: Option<usize>, view: View) -> Option<String> {
        let max = self.rule.max_delay_s?;
        let snap = self.snapshot.load();
        let scope: Vec<usize> = match shard {
            Some(s) if s < self.shards.len() => vec![s],
            Some(_) => return None,
            None => (0..self.shards.len()).collect(),
        };
        let tiers = &snap.reads[view as usize];
        if scope.iter().any(|&s| !tiers[s].fresh.is_empty()) || scope.iter().all(|&s| snap.healthy[s].is_empty()) {
            return None;
        }
        let mut seen = Vec::new();
        for &s in &scope {
            seen.extend(tiers[s].unknown.iter().map(|&i| format!("{} unknown", self.shards[s][i].label())));
            seen.extend(tiers[s].stale.iter().map(|&(i, d)| format!("{} {d} s", self.shards[s][i].label())));
        }
        let which = shard.map_or("of any shard".to_string(), |s| format!("of shard {}", s + 1));
        Some(format!(
            "Code: 369. chstorm gateway: every healthy replica {which} lags {max} s or more (health.max_replica_delay) \
             or its delay is unknown ({}), and falling back to a stale replica is off \
             (fallback_to_stale_replicas_for_distributed_queries = 0)",
            seen.join(", ")
        ))
    }

    /// A probe result for `r`; republishes and returns `Some(up)` when its health changed.
    pub fn probe_result(&self, r: &Replica, ok: bool, rise: u32, fall: u32) -> Option<bool> {
        let changed = r.probe_result(ok, rise, fall);
        if changed.is_some() {
            self.republish();
        }
        changed
    }

    /// Marks a replica up or down by hand; returns true when that changed its state.
    #[cfg(test)]
    pub fn set_health(&self, r: &Replica, up: bool) -> bool {
        let changed = r.force_health(up).is_some();
        if changed {
            self.republish();
        }
        changed
    }

    /// A request failed on `r` in a way that says the replica is in trouble (refused, reset,
    /// timed out, overloaded): it is marked down now, not at the next probe, and every attempt
    /// waiting on it is told (its down signal). Returns true when it was up.
    pub fn report_failure(&self, r: &Replica) -> bool {
        let changed = r.request_failed().is_some();
        if changed {
            self.republish();
        }
        changed
    }

    /// The replica a session lives on: rendezvous hashing of `hash` over the healthy replicas
    /// (any replica when none is healthy), so a session stays where it is while *other* replicas
    /// come and go. A ClickHouse session (`session_id`) lives on one server.
    pub fn pick_sticky(&self, hash: u64, exclude: &[(usize, usize)]) -> Option<InFlight> {
        let snap = self.snapshot.load();
        let healthy = snap.healthy.iter().enumerate().flat_map(|(s, v)| v.iter().map(move |&i| (s, i)));
        let all = (0..self.shards.len()).flat_map(|s| (0..self.shards[s].len()).map(move |i| (s, i)));
        let best = |it: &mut dyn Iterator<Item = (usize, usize)>| {
            it.filter(|c| !exclude.contains(c)).max_by_key(|&(s, i)| rendezvous(hash, &self.shards[s][i].addr.base))
        };
        let (s, i) = best(&mut healthy.into_iter()).or_else(|| best(&mut all.into_iter()))?;
        Some(InFlight::new(self.shards[s][i].clone()))
    }

    /// The replica at (shard, index), if there is one.
    pub fn replica_at(&self, (s, i): (usize, usize)) -> Option<Arc<Replica>> {
        self.shards.get(s).and_then(|v| v.get(i)).cloned()
    }

    /// The healthy replica other than `not` that a session of `hash` moves to: its rendezvous
    /// choice among the healthy replicas.
    pub fn sticky_other(&self, hash: u64, not: (usize, usize)) -> Option<Arc<Replica>> {
        let snap = self.snapshot.load();
        snap.healthy
            .iter()
            .enumerate()
            .flat_map(|(s, v)| v.iter().map(move |&i| (s, i)))
            .filter(|c| *c != not)
            .max_by_key(|&(s, i)| rendezvous(hash, &self.shards[s][i].addr.base))
            .map(|(s, i)| self.shards[s][i].clone())
    }

    /// The replica at (shard, index), counted as outstanding: a session's home.
    pub fn pick_at(&self, at: (usize, usize), exclude: &[(usize, usize)]) -> Option<InFlight> {
        if exclude.contains(&at) {
            return None;
        }
        self.replica_at(at).map(InFlight::new)
    }

    /// True when a healthy replica of `shard` (any shard when None) is not in `exclude`.
    pub fn has_healthy(&self, shard: Option<usize>, exclude: &[(usize, usize)]) -> bool {
        self.healthy_where(shard, exclude, |_| true)
    }

    /// True when a healthy replica of `shard` (any shard when None), not in `exclude`, passes
    /// `ok`.
    pub fn healthy_where(
        &self,
        shard: Option<usize>,
        exclude: &[(usize, usize)],
        ok: impl Fn(&Replica) -> bool,
    ) -> bool {
        let snap = self.snapshot.load();
        snap.healthy
            .iter()
            .enumerate()
            .filter(|(s, _)| shard.is_none_or(|want| want == *s))
            .any(|(s, v)| v.iter().any(|&i| !exclude.contains(&(s, i)) && ok(&self.shards[s][i])))
    }

    /// Picks a replica of `shard` (any shard when None), not in `exclude`, by power of two
    /// choices. Healthy replicas first; when none is healthy, any replica (better one try than
    /// a certain failure). Returns a guard that counts the request as outstanding. Replication
    /// delays are not looked at: [`Balancer::pick_for`] does. (Tests; the attempts use
    /// `pick_for`.)
    #[cfg(test)]
    pub fn pick(&self, shard: Option<usize>, exclude: &[(usize, usize)]) -> Option<InFlight> {
        self.pick_inner(None, shard, exclude, None)
    }

    /// [`Balancer::pick`] for `want`. A read goes to a healthy fresh replica; with none, to a
    /// healthy one whose delay is unknown; with none, to the least stale healthy one if
    /// `fallback`, else to none (see [`Balancer::stale_refusal`]). A write goes to a healthy
    /// replica that is not read-only, else to any healthy one. With no healthy replica at all,
    /// any one (as [`Balancer::pick`]). `only` (a hedge's rule) keeps healthy replicas only, and
    /// among those the ones it passes.
    pub fn pick_for(
        &self,
        want: Want,
        shard: Option<usize>,
        exclude: &[(usize, usize)],
        only: Option<&(dyn Fn(&Replica) -> bool + Sync)>,
    ) -> Option<InFlight> {
        self.pick_inner(Some(want), shard, exclude, only)
    }

    /// Runs `f` with this thread's generator for this balancer, made on first use.
    fn with_rng<T>(&self, f: impl FnOnce(&mut SmallRng) -> T) -> T {
        STREAMS.with(|streams| {
            let mut streams = streams.borrow_mut();
            let at = match streams.iter().position(|(id, _)| *id == self.id) {
                Some(at) => at,
                None => {
                    if streams.len() == STREAMS_PER_THREAD {
                        streams.remove(0);
                    }
                    let k = self.streams.fetch_add(1, Ordering::Relaxed);
                    let seed = self.seed.wrapping_add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                    streams.push((self.id, SmallRng::seed_from_u64(seed)));
                    streams.len() - 1
                }
            };
            f(&mut streams[at].1)
        })
    }

    fn pick_inner(
        &self,
        want: Option<Want>,
        shard: Option<usize>,
        exclude: &[(usize, usize)],
        only: Option<&(dyn Fn(&Replica) -> bool + Sync)>,
    ) -> Option<InFlight> {
        let snap = self.snapshot.load();
        let mut cands: Vec<(usize, usize)> = Vec::with_capacity(8);
        let shards = match shard {
            Some(s) if s < self.shards.len() => s..s + 1,
            Some(_) => return None,
            None => 0..self.shards.len(),
        };
        let usable = |c: &(usize, usize)| !exclude.contains(c) && only.is_none_or(|ok| ok(&self.shards[c.0][c.1]));
        let gather = |cands: &mut Vec<(usize, usize)>, lists: &[Vec<usize>]| {
            for s in shards.clone() {
                cands.extend(lists[s].iter().map(|&i| (s, i)).filter(usable));
            }
        };
        let mut freshness = Freshness::Fresh;
        match want {
            None => gather(&mut cands, &snap.healthy),
            Some(Want::Write) => {
                gather(&mut cands, &snap.writable);
                if cands.is_empty() {
                    gather(&mut cands, &snap.healthy);
                } else if only.is_none() {
                    self.count_steered(&snap.healthy, &snap.writable, shards.clone(), exclude, true);
                }
            }
            Some(Want::Read { view, fallback }) => {
                let tiers = &snap.reads[view as usize];
                for s in shards.clone() {
                    cands.extend(tiers[s].fresh.iter().map(|&i| (s, i)).filter(usable));
                }
                if !cands.is_empty() && only.is_none() {
                    self.count_steered(&snap.healthy, tiers, shards.clone(), exclude, false);
                }
                if cands.is_empty() {
                    for s in shards.clone() {
                        cands.extend(tiers[s].unknown.iter().map(|&i| (s, i)).filter(usable));
                    }
                    freshness = Freshness::Unknown;
                }
                if cands.is_empty() {
                    // The least stale: the smallest delay among the usable stale replicas.
                    let stale = shards.clone().flat_map(|s| tiers[s].stale.iter().map(move |&(i, d)| ((s, i), d)));
                    let stale: Vec<((usize, usize), u64)> = stale.filter(|(c, _)| usable(c)).collect();
                    if let Some(least) = stale.iter().map(|&(_, d)| d).min() {
                        if !fallback {
                            return None;
                        }
                        cands.extend(stale.iter().filter(|&&(_, d)| d == least).map(|&(c, _)| c));
                        freshness = Freshness::Stale(least);
                    }
                }
            }
        }
        if cands.is_empty() && only.is_none() {
            freshness = Freshness::Fresh;
            for s in shards {
                cands.extend((0..self.shards[s].len()).map(|i| (s, i)).filter(|c| !exclude.contains(c)));
            }
        }
        let chosen = match cands.len() {
            0 => return None,
            1 => cands[0],
            n => {
                let (i, j) = self.with_rng(|rng| (rng.gen_range(0..n), rng.gen_range(0..n - 1)));
                let a = cands[i];
                let mut b = cands[j];
                if b == a {
                    b = cands[n - 1];
                }
                let now = Instant::now();
                let (ra, rb) = (&self.shards[a.0][a.1], &self.shards[b.0][b.1]);
                if rb.score(now) < ra.score(now) {
                    b
                } else {
                    a
                }
            }
        };
        Some(InFlight::judged(self.shards[chosen.0][chosen.1].clone(), freshness))
    }

    /// Counts a pick that went to a fresh replica (or, for writes, a writable one) past the
    /// healthy replicas of `shards` that were not: each of those, not excluded, had a read (a
    /// write) steered away from it.
    fn count_steered<L: Listed>(
        &self,
        healthy: &[Vec<usize>],
        kept: &[L],
        shards: std::ops::Range<usize>,
        exclude: &[(usize, usize)],
        write: bool,
    ) {
        for s in shards {
            if kept[s].len() == healthy[s].len() {
                continue;
            }
            for &i in healthy[s].iter().filter(|&&i| !kept[s].lists(i) && !exclude.contains(&(s, i))) {
                let state = &self.shards[s][i].replication;
                if write {
                    state.count_write_steered();
                } else {
                    state.count_steered();
                }
            }
        }
    }
}

/// A shard's list of replicas that a pick keeps: its writable ones, or its fresh ones for reads.
trait Listed {
    fn len(&self) -> usize;
    fn lists(&self, i: usize) -> bool;
}

impl Listed for Vec<usize> {
    fn len(&self) -> usize {
        <[usize]>::len(self)
    }
    fn lists(&self, i: usize) -> bool {
        self.contains(&i)
    }
}

impl Listed for Tiers {
    fn len(&self) -> usize {
        self.fresh.len()
    }
    fn lists(&self, i: usize) -> bool {
        self.fresh.contains(&i)
    }
}

/// The rendezvous weight of `key` for a session hash (FNV-1a of the key, mixed with the hash).
fn rendezvous(hash: u64, key: &str) -> u64 {
    let mut h = 0xcbf29ce484222325u64 ^ hash;
    for b in key.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    // splitmix64 finaliser
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d049bb133111eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ReplicaAddr, Shard};

    /// The seed of every test's balancer: the picks below are exact.
    const SEED: u64 = 0x0005_eed0_fc45_702a;

    fn cluster(shards: usize, replicas: usize) -> Cluster {
        Cluster {
            name: "c".into(),
            user: "default".into(),
            password: String::new(),
            shards: (0..shards)
                .map(|s| Shard {
                    weight: 1,
                    replicas: (0..replicas)
                        .map(|r| ReplicaAddr { base: format!("http://h{s}{r}:1"), https: false })
                        .collect(),
                })
                .collect(),
            routing: None,
            native: Default::default(),
        }
    }

    #[test]
    fn picks_within_the_shard_and_skips_down_and_excluded_replicas() {
        let b = Balancer::with_seed(&cluster(2, 2), SEED);
        for _ in 0..50 {
            let g = b.pick(Some(1), &[]).unwrap();
            assert_eq!(g.replica().shard, 1);
        }
        b.report_failure(&b.shards[1][0]);
        for _ in 0..50 {
            assert_eq!(b.pick(Some(1), &[]).unwrap().replica().index, 1, "down replica skipped");
        }
        // All of the shard down: still try one (not excluded) rather than fail.
        b.report_failure(&b.shards[1][1]);
        assert_eq!(b.pick(Some(1), &[(1, 1)]).unwrap().replica().index, 0);
        assert!(b.pick(Some(1), &[(1, 0), (1, 1)]).is_none());
        assert!(b.pick(Some(5), &[]).is_none());
    }

    #[test]
    fn outstanding_is_released_by_drop_and_steers_choices() {
        let b = Balancer::with_seed(&cluster(1, 2), SEED);
        let held: Vec<InFlight> = (0..10).map(|_| b.pick(Some(0), &[]).unwrap()).collect();
        let total: usize = b.replicas().map(|r| r.outstanding()).sum();
        assert_eq!(total, 10);
        // P2C with two replicas always compares both: the loads stay balanced.
        let loads: Vec<usize> = b.replicas().map(|r| r.outstanding()).collect();
        assert!(loads[0].abs_diff(loads[1]) <= 1, "{loads:?}");
        drop(held);
        assert!(b.replicas().all(|r| r.outstanding() == 0));
    }

    #[test]
    fn an_error_penalty_steers_away_then_decays() {
        let b = Balancer::with_seed(&cluster(1, 2), SEED);
        let r0 = b.shards[0][0].clone();
        r0.lost_race();
        r0.lost_race();
        let picks0 = (0..100).filter(|_| b.pick(Some(0), &[]).unwrap().replica().index == 0).count();
        assert_eq!(picks0, 0, "a penalised replica loses every two-way comparison");
        // After many half-lives the penalty is gone.
        r0.set_penalty(2.0, Instant::now() - crate::cluster::replica::PENALTY_HALF_LIFE * 20);
        assert!(r0.score(Instant::now()) < 1e-4);
    }

    /// One lost race 16 s ago weighs less than half a request (4 x 2^-3.2 = 0.44): between two
    /// idle replicas it does not decide, and the picks split again. (Compared as a fraction it
    /// would decide every pick for as long as the penalty was above zero: minutes.)
    #[test]
    fn a_faded_penalty_no_longer_steers_between_equal_loads() {
        let b = Balancer::with_seed(&cluster(1, 2), SEED);
        let r0 = b.shards[0][0].clone();
        r0.set_penalty(1.0, Instant::now() - std::time::Duration::from_secs(16));
        let picks0 = (0..400).filter(|_| b.pick(Some(0), &[]).unwrap().replica().index == 0).count();
        assert_eq!(picks0, PICKS0, "picks of 400 that went to the replica that lost a race 16 s ago");
        // A fresh lost race still steers (weight about 4 requests).
        r0.lost_race();
        let picks0 = (0..100).filter(|_| b.pick(Some(0), &[]).unwrap().replica().index == 0).count();
        assert_eq!(picks0, 0);
    }

    /// The faded penalty's picks of 400 with [`SEED`]: the first draw of each pick, as between
    /// two equal replicas.
    const PICKS0: usize = 221;

    /// Picks of `n` requests, each released before the next, by replica index of shard 0.
    fn picks(b: &Balancer, n: usize) -> Vec<usize> {
        let mut count = vec![0; b.shards[0].len()];
        for _ in 0..n {
            count[b.pick(Some(0), &[]).unwrap().replica().index] += 1;
        }
        count
    }

    /// Power of two choices weighs replicas by their scores: of two distinct replicas drawn at
    /// random the lower score wins, so among three scored 0 < 1 < 2 the best is picked in 2 of
    /// 3 pairs, the middle one in 1, the worst never; among equal scores the pick is uniform.
    #[test]
    fn picks_follow_the_scores_over_a_seeded_run() {
        let b = Balancer::with_seed(&cluster(1, 3), SEED);
        let held: Vec<InFlight> = [1, 2, 2].iter().map(|&i| InFlight::new(b.shards[0][i].clone())).collect();
        let got = picks(&b, 600);
        assert_eq!(got, SCORED, "outstanding 0, 1, 2");
        assert!(got[2] == 0 && got[0] > 360 && got[1] > 160, "about 400, 200, 0: {got:?}");
        drop(held);
        let got = picks(&b, 600);
        assert_eq!(got, EQUAL, "idle");
        assert!(got.iter().all(|&n| (160..=240).contains(&n)), "about 200 each: {got:?}");
    }

    const SCORED: [usize; 3] = [428, 172, 0];
    const EQUAL: [usize; 3] = [193, 225, 182];

    /// The same seed gives the same picks; another seed, other picks; a second thread picking
    /// for the same balancer draws from a stream of its own.
    #[test]
    fn the_seed_decides_the_picks() {
        let run = |b: &Balancer| {
            (0..64).map(|_| b.pick(None, &[]).map(|g| (g.replica().shard, g.replica().index))).collect::<Vec<_>>()
        };
        let seeded = |seed: u64| run(&Balancer::with_seed(&cluster(2, 3), seed));
        assert_eq!(seeded(SEED), seeded(SEED));
        assert_ne!(seeded(SEED), seeded(SEED + 1));
        let b = Balancer::with_seed(&cluster(2, 3), SEED);
        let here = run(&b);
        let there = std::thread::scope(|s| s.spawn(|| run(&b)).join().unwrap());
        assert_ne!(here, there, "each thread has its own stream");
        assert_eq!(here, seeded(SEED), "the first thread's stream is the seed's");
    }

    #[test]
    fn health_changes_are_published() {
        let b = Balancer::with_seed(&cluster(1, 3), SEED);
        assert!(b.set_health(&b.shards[0][2], false));
        assert!(!b.set_health(&b.shards[0][2], false), "no change the second time");
        assert_eq!(b.snapshot.load().healthy[0], vec![0, 1]);
        assert!(b.set_health(&b.shards[0][2], true));
        assert_eq!(b.snapshot.load().healthy[0], vec![0, 1, 2]);
    }

    fn lagging(b: &Balancer, s: usize, i: usize, delay: u64) {
        let r = Reading { delay, routed_delay: delay, tables: 1, ..Default::default() };
        b.record_replication(&b.shards[s][i], Ok(r));
    }

    fn tracked(shards: usize, replicas: usize) -> Balancer {
        let b = Balancer::with_seed(&cluster(shards, replicas), SEED)
            .with_rule(Rule::new(std::time::Duration::from_secs(300), true));
        for r in b.replicas() {
            r.replication.steered.set(Default::default()).unwrap();
            r.replication.writes_steered.set(Default::default()).unwrap();
        }
        b
    }

    const ROUTED: Want = Want::Read { view: View::Routed, fallback: true };

    fn picked(b: &Balancer, want: Want, shard: Option<usize>) -> Option<((usize, usize), Freshness)> {
        b.pick_for(want, shard, &[], None).map(|g| ((g.replica().shard, g.replica().index), g.freshness()))
    }

    #[test]
    fn reads_go_to_fresh_replicas_and_count_the_ones_steered_away() {
        let b = tracked(2, 2);
        for r in b.replicas() {
            b.record_replication(r, Ok(Reading::default()));
        }
        lagging(&b, 1, 0, 300);
        for _ in 0..50 {
            assert_eq!(picked(&b, ROUTED, Some(1)), Some(((1, 1), Freshness::Fresh)), "300 s behind is stale");
        }
        assert_eq!(b.shards[1][0].replication.steered.get().unwrap().get(), 50);
        assert_eq!(b.shards[1][1].replication.steered.get().unwrap().get(), 0);
        // A fan-out coordinator is judged the same way, across the shards.
        let any = Want::Read { view: View::Any, fallback: true };
        assert!((0..50).all(|_| picked(&b, any, None).unwrap().0 != (1, 0)));
        // 299 s is fresh again, as ClickHouse's delay < max.
        lagging(&b, 1, 0, 299);
        let to_first = (0..100).filter(|_| picked(&b, ROUTED, Some(1)).unwrap().0 == (1, 0)).count();
        assert!(to_first > 20, "used again once caught up: {to_first} of 100");
    }

    #[test]
    fn unknown_is_not_fresh_but_comes_before_stale() {
        let b = tracked(1, 3);
        // Nothing read yet: all unknown, all used, each answer says so.
        let p = picked(&b, ROUTED, Some(0)).unwrap();
        assert_eq!(p.1, Freshness::Unknown);
        b.record_replication(&b.shards[0][0], Ok(Reading::default()));
        assert!((0..30).all(|_| picked(&b, ROUTED, Some(0)) == Some(((0, 0), Freshness::Fresh))));
        lagging(&b, 0, 0, 5000);
        b.record_replication(&b.shards[0][1], Err("HTTP 500: Code: 497".into()));
        lagging(&b, 0, 2, 400);
        assert!((0..30).all(|_| picked(&b, ROUTED, Some(0)) == Some(((0, 1), Freshness::Unknown))), "unknown first");
        b.record_replication(&b.shards[0][1], Ok(Reading { delay: 900, routed_delay: 900, ..Default::default() }));
        assert_eq!(picked(&b, ROUTED, Some(0)), Some(((0, 2), Freshness::Stale(400))), "then the least stale");
        // Falling back off: none, and the refusal names each replica.
        let strict = Want::Read { view: View::Routed, fallback: false };
        assert_eq!(picked(&b, strict, Some(0)), None);
        let why = b.stale_refusal(Some(0), View::Routed).unwrap();
        assert!(
            why.starts_with("Code: 369.") && why.contains("(1.3 400 s, 1.2 900 s, 1.1 5000 s)") && !why.contains('\n'),
            "{why}"
        );
        assert_eq!(b.stale_refusal(Some(5), View::Routed), None);
        // A down replica is not a candidate; with none healthy, any one (as before).
        b.report_failure(&b.shards[0][2]);
        assert_eq!(picked(&b, ROUTED, Some(0)).unwrap().1, Freshness::Stale(900));
        b.report_failure(&b.shards[0][0]);
        b.report_failure(&b.shards[0][1]);
        assert_eq!(b.stale_refusal(Some(0), View::Routed), None, "no healthy replica: not a staleness refusal");
        assert_eq!(picked(&b, strict, Some(0)).unwrap().1, Freshness::Fresh, "no healthy replica: any one");
    }

    #[test]
    fn the_views_judge_by_their_own_tables() {
        let b = tracked(1, 2);
        let busy_log = Reading { delay: 4000, routed_delay: 0, tables: 2, ..Default::default() };
        b.record_replication(&b.shards[0][0], Ok(busy_log));
        b.record_replication(&b.shards[0][1], Ok(Reading::default()));
        let to_first = (0..60).filter(|_| picked(&b, ROUTED, Some(0)).unwrap().0 == (0, 0)).count();
        assert!(to_first > 10, "a routed read looks at the routed tables only: {to_first} of 60");
        let any = Want::Read { view: View::Any, fallback: true };
        assert!((0..60).all(|_| picked(&b, any, None).unwrap().0 == (0, 1)), "a fan-out at every table");
    }

    #[test]
    fn writes_skip_read_only_replicas_while_another_takes_them() {
        let b = tracked(1, 2);
        let ro = Reading { read_only: true, session_expired: true, tables: 1, ..Default::default() };
        b.record_replication(&b.shards[0][0], Ok(ro));
        assert!((0..40).all(|_| picked(&b, Want::Write, None).unwrap().0 == (0, 1)));
        assert_eq!(b.shards[0][0].replication.writes_steered.get().unwrap().get(), 40);
        b.record_replication(&b.shards[0][1], Ok(ro));
        let firsts = (0..60).filter(|_| picked(&b, Want::Write, None).unwrap().0 == (0, 0)).count();
        assert!(firsts > 10 && firsts < 50, "all read-only: the servers decide, either one: {firsts}");
    }

    #[test]
    fn off_means_every_replica_is_fresh_and_a_reload_keeps_what_was_read() {
        let b = Balancer::with_seed(&cluster(1, 2), SEED);
        lagging(&b, 0, 0, 10_000);
        assert!((0..20).all(|_| picked(&b, ROUTED, Some(0)).unwrap().1 == Freshness::Fresh));
        assert!((0..40).any(|_| picked(&b, ROUTED, Some(0)).unwrap().0 == (0, 0)), "not steered when off");
        let reloaded = tracked(1, 2);
        reloaded.adopt_readings(&b);
        assert!((0..20).all(|_| picked(&reloaded, ROUTED, Some(0)).unwrap().0 == (0, 1)), "the lag is known at once");
        assert_eq!(reloaded.tier_of(&reloaded.shards[0][1], View::Routed), Tier::Unknown, "nothing read there");
    }

    #[test]
    fn sessions_stay_on_their_replica_while_others_come_and_go() {
        let b = Balancer::with_seed(&cluster(2, 2), SEED);
        let home: Vec<(usize, usize)> = (0..64u64)
            .map(|h| {
                let g = b.pick_sticky(h, &[]).unwrap();
                (g.replica().shard, g.replica().index)
            })
            .collect();
        assert!(home.iter().collect::<std::collections::BTreeSet<_>>().len() == 4, "sessions spread over all replicas");
        // Replica 1.1 goes down: only its sessions move.
        b.report_failure(&b.shards[0][0]);
        for (h, &was) in home.iter().enumerate() {
            let g = b.pick_sticky(h as u64, &[]).unwrap();
            let now = (g.replica().shard, g.replica().index);
            if was != (0, 0) {
                assert_eq!(now, was, "session {h} moved although its replica is up");
            } else {
                assert_ne!(now, (0, 0));
            }
        }
    }
}
