//! Replica selection: power of two choices on outstanding requests plus a decaying error
//! penalty ([`Replica::score`]), and rendezvous hashing for sessions.
//!
//! The balancer knows the replicas of each shard and reads *which are healthy* from a snapshot
//! that health checking (active probes, [`crate::cluster::health`]) and passive detection (a failed request)
//! publish by swapping an `Arc` (`arc_swap`). A request never waits for a lock to pick a replica.
//! Replica state itself lives in [`crate::cluster::replica`].
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
use crate::config::Cluster;
use arc_swap::ArcSwap;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Which replicas are healthy, per shard (indexes into [`Balancer::shards`]).
#[derive(Debug, Default)]
pub struct Snapshot {
    pub healthy: Vec<Vec<usize>>,
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
        };
        b.republish();
        b
    }

    pub fn replicas(&self) -> impl Iterator<Item = &Arc<Replica>> {
        self.shards.iter().flatten()
    }

    fn republish(&self) {
        let _g = self.publish.lock().unwrap_or_else(|e| e.into_inner());
        let healthy = self
            .shards
            .iter()
            .map(|s| s.iter().enumerate().filter(|(_, r)| r.is_healthy()).map(|(i, _)| i).collect())
            .collect();
        self.snapshot.store(Arc::new(Snapshot { healthy }));
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
    /// a certain failure). Returns a guard that counts the request as outstanding.
    pub fn pick(&self, shard: Option<usize>, exclude: &[(usize, usize)]) -> Option<InFlight> {
        self.pick_inner(shard, exclude, None)
    }

    /// [`Balancer::pick`] for a hedge: only healthy replicas that pass `ok`, by power of two
    /// choices; None when there is none (no fallback to a down one).
    pub fn pick_healthy_where(
        &self,
        shard: Option<usize>,
        exclude: &[(usize, usize)],
        ok: &(dyn Fn(&Replica) -> bool + Sync),
    ) -> Option<InFlight> {
        self.pick_inner(shard, exclude, Some(ok))
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
        for s in shards.clone() {
            cands.extend(
                snap.healthy[s]
                    .iter()
                    .map(|&i| (s, i))
                    .filter(|c| !exclude.contains(c))
                    .filter(|c| only.is_none_or(|ok| ok(&self.shards[c.0][c.1]))),
            );
        }
        if cands.is_empty() && only.is_none() {
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
        Some(InFlight::new(self.shards[chosen.0][chosen.1].clone()))
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
