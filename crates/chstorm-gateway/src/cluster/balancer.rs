//! Replica selection: power of two choices on outstanding requests plus a decaying error
//! penalty ([`Replica::score`]), and rendezvous hashing for sessions.
//!
//! The balancer knows the replicas of each shard and reads *which are healthy* from a snapshot
//! that health checking (active probes, [`crate::cluster::health`]) and passive detection (a failed request)
//! publish by swapping an `Arc` (`arc_swap`). A request never waits for a lock to pick a replica.
//! Replica state itself lives in [`crate::cluster::replica`].

pub use crate::cluster::replica::{InFlight, Replica};
use crate::config::Cluster;
use arc_swap::ArcSwap;
use rand::Rng;
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
}

impl Balancer {
    /// Every replica starts healthy; the first probes correct that within `fall` intervals, and
    /// the first failed request at once.
    pub fn new(cluster: &Cluster) -> Balancer {
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

    fn pick_inner(
        &self,
        shard: Option<usize>,
        exclude: &[(usize, usize)],
        only: Option<&(dyn Fn(&Replica) -> bool + Sync)>,
    ) -> Option<InFlight> {
        let snap = self.snapshot.load();
        let mut cands: Vec<(usize, usize)> = Vec::with_capacity(8);
        let shards: Vec<usize> = match shard {
            Some(s) if s < self.shards.len() => vec![s],
            Some(_) => return None,
            None => (0..self.shards.len()).collect(),
        };
        for &s in &shards {
            cands.extend(
                snap.healthy[s]
                    .iter()
                    .map(|&i| (s, i))
                    .filter(|c| !exclude.contains(c))
                    .filter(|c| only.is_none_or(|ok| ok(&self.shards[c.0][c.1]))),
            );
        }
        if cands.is_empty() && only.is_none() {
            for &s in &shards {
                cands.extend((0..self.shards[s].len()).map(|i| (s, i)).filter(|c| !exclude.contains(c)));
            }
        }
        let chosen = match cands.len() {
            0 => return None,
            1 => cands[0],
            n => {
                let mut rng = rand::thread_rng();
                let a = cands[rng.gen_range(0..n)];
                let mut b = cands[rng.gen_range(0..n - 1)];
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
        let b = Balancer::new(&cluster(2, 2));
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
        let b = Balancer::new(&cluster(1, 2));
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
        let b = Balancer::new(&cluster(1, 2));
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
        let b = Balancer::new(&cluster(1, 2));
        let r0 = b.shards[0][0].clone();
        r0.set_penalty(1.0, Instant::now() - std::time::Duration::from_secs(16));
        let picks0 = (0..400).filter(|_| b.pick(Some(0), &[]).unwrap().replica().index == 0).count();
        assert!((120..=280).contains(&picks0), "{picks0} of 400 picks went to the replica that lost a race 16 s ago");
        // A fresh lost race still steers (weight about 4 requests).
        r0.lost_race();
        let picks0 = (0..100).filter(|_| b.pick(Some(0), &[]).unwrap().replica().index == 0).count();
        assert_eq!(picks0, 0);
    }

    #[test]
    fn health_changes_are_published() {
        let b = Balancer::new(&cluster(1, 3));
        assert!(b.set_health(&b.shards[0][2], false));
        assert!(!b.set_health(&b.shards[0][2], false), "no change the second time");
        assert_eq!(b.snapshot.load().healthy[0], vec![0, 1]);
        assert!(b.set_health(&b.shards[0][2], true));
        assert_eq!(b.snapshot.load().healthy[0], vec![0, 1, 2]);
    }

    #[test]
    fn sessions_stay_on_their_replica_while_others_come_and_go() {
        let b = Balancer::new(&cluster(2, 2));
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
