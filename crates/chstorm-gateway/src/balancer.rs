//! Replica selection: power of two choices on outstanding requests, with an error penalty that
//! decays (half-life [`PENALTY_HALF_LIFE`]).
//!
//! The balancer knows the replicas of each shard and reads *which are healthy* from a snapshot
//! that health checking (active probes, [`crate::health`]) and passive detection (a failed request,
//! [`Balancer::report_failure`]) publish by swapping an `Arc` (`arc_swap`). A request never waits
//! for a lock to pick a replica.

use crate::config::{Cluster, ReplicaAddr};
use arc_swap::ArcSwap;
use rand::Rng;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Time for an error penalty to halve.
pub const PENALTY_HALF_LIFE: Duration = Duration::from_secs(5);
/// What one unit of error penalty weighs against one outstanding request.
const PENALTY_WEIGHT: f64 = 4.0;

/// One backend replica and its live counters.
#[derive(Debug)]
pub struct Replica {
    pub addr: ReplicaAddr,
    /// 0-based shard index.
    pub shard: usize,
    /// 0-based index within the shard.
    pub index: usize,
    /// Requests in flight on it through this gateway.
    pub outstanding: AtomicUsize,
    /// Consecutive good / failed active probes.
    pub probe_ok: AtomicU32,
    pub probe_fail: AtomicU32,
    healthy: AtomicBool,
    /// Error penalty and when it was last updated.
    penalty: Mutex<(f64, Instant)>,
    /// Total failures seen (for metrics).
    pub failures: AtomicU64,
}

impl Replica {
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    fn penalty_now(&self, now: Instant) -> f64 {
        let (p, at) = *self.penalty.lock().unwrap_or_else(|e| e.into_inner());
        p * 0.5f64.powf(now.saturating_duration_since(at).as_secs_f64() / PENALTY_HALF_LIFE.as_secs_f64())
    }

    fn add_penalty(&self, now: Instant) {
        let mut g = self.penalty.lock().unwrap_or_else(|e| e.into_inner());
        let decayed =
            g.0 * 0.5f64.powf(now.saturating_duration_since(g.1).as_secs_f64() / PENALTY_HALF_LIFE.as_secs_f64());
        *g = (decayed + 1.0, now);
    }

    /// The P2C score: lower is better.
    fn score(&self, now: Instant) -> f64 {
        self.outstanding.load(Ordering::Relaxed) as f64 + PENALTY_WEIGHT * self.penalty_now(now)
    }

    /// `shard.replica`, 1-based, for logs and metrics.
    pub fn label(&self) -> String {
        format!("{}.{}", self.shard + 1, self.index + 1)
    }
}

/// Which replicas are healthy, per shard (indexes into [`Balancer::shards`]).
#[derive(Debug, Default)]
pub struct Snapshot {
    pub healthy: Vec<Vec<usize>>,
}

/// Holds a replica's outstanding count up while a request runs (RAII).
pub struct InFlight(Arc<Replica>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

impl InFlight {
    pub fn replica(&self) -> &Arc<Replica> {
        &self.0
    }
}

/// The replicas of one cluster.
pub struct Balancer {
    pub cluster: String,
    pub shards: Vec<Vec<Arc<Replica>>>,
    pub weights: Vec<u32>,
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
                s.replicas
                    .iter()
                    .enumerate()
                    .map(|(ri, addr)| {
                        Arc::new(Replica {
                            addr: addr.clone(),
                            shard: si,
                            index: ri,
                            outstanding: AtomicUsize::new(0),
                            probe_ok: AtomicU32::new(0),
                            probe_fail: AtomicU32::new(0),
                            healthy: AtomicBool::new(true),
                            penalty: Mutex::new((0.0, Instant::now())),
                            failures: AtomicU64::new(0),
                        })
                    })
                    .collect()
            })
            .collect();
        let b = Balancer {
            cluster: cluster.name.clone(),
            weights: cluster.shards.iter().map(|s| s.weight).collect(),
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

    /// Marks a replica up or down; returns true when that changed its state.
    pub fn set_health(&self, r: &Replica, up: bool) -> bool {
        let changed = r.healthy.swap(up, Ordering::AcqRel) != up;
        if changed {
            self.republish();
        }
        changed
    }

    /// A request failed on `r` in a way that says the replica is in trouble (refused, reset,
    /// timed out, overloaded): it is marked down now, not at the next probe.
    pub fn report_failure(&self, r: &Replica) -> bool {
        r.failures.fetch_add(1, Ordering::Relaxed);
        r.add_penalty(Instant::now());
        r.probe_ok.store(0, Ordering::Relaxed);
        self.set_health(r, false)
    }

    /// Picks the same replica for the same `hash` while the set of healthy replicas stays the same
    /// (for `session_id`: a ClickHouse session lives on one server).
    pub fn pick_sticky(&self, hash: u64, exclude: &[(usize, usize)]) -> Option<InFlight> {
        let snap = self.snapshot.load();
        let mut cands: Vec<(usize, usize)> = snap
            .healthy
            .iter()
            .enumerate()
            .flat_map(|(s, v)| v.iter().map(move |&i| (s, i)))
            .filter(|c| !exclude.contains(c))
            .collect();
        if cands.is_empty() {
            cands = (0..self.shards.len())
                .flat_map(|s| (0..self.shards[s].len()).map(move |i| (s, i)))
                .filter(|c| !exclude.contains(c))
                .collect();
        }
        let &(s, i) = cands.get((hash % cands.len().max(1) as u64) as usize)?;
        let r = self.shards[s][i].clone();
        r.outstanding.fetch_add(1, Ordering::Relaxed);
        Some(InFlight(r))
    }

    /// Picks a replica of `shard` (any shard when None), not in `exclude`, by power of two
    /// choices. Healthy replicas first; when none is healthy, any replica (better one try than
    /// a certain failure). Returns a guard that counts the request as outstanding.
    pub fn pick(&self, shard: Option<usize>, exclude: &[(usize, usize)]) -> Option<InFlight> {
        let snap = self.snapshot.load();
        let mut cands: Vec<(usize, usize)> = Vec::with_capacity(8);
        let shards: Vec<usize> = match shard {
            Some(s) if s < self.shards.len() => vec![s],
            Some(_) => return None,
            None => (0..self.shards.len()).collect(),
        };
        for &s in &shards {
            cands.extend(snap.healthy[s].iter().map(|&i| (s, i)).filter(|c| !exclude.contains(c)));
        }
        if cands.is_empty() {
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
        let r = self.shards[chosen.0][chosen.1].clone();
        r.outstanding.fetch_add(1, Ordering::Relaxed);
        Some(InFlight(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Shard;

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
        let total: usize = b.replicas().map(|r| r.outstanding.load(Ordering::Relaxed)).sum();
        assert_eq!(total, 10);
        // P2C with two replicas always compares both: the loads stay balanced.
        let loads: Vec<usize> = b.replicas().map(|r| r.outstanding.load(Ordering::Relaxed)).collect();
        assert!(loads[0].abs_diff(loads[1]) <= 1, "{loads:?}");
        drop(held);
        assert!(b.replicas().all(|r| r.outstanding.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn an_error_penalty_steers_away_then_decays() {
        let b = Balancer::new(&cluster(1, 2));
        let r0 = b.shards[0][0].clone();
        r0.add_penalty(Instant::now());
        r0.add_penalty(Instant::now());
        let picks0 = (0..100).filter(|_| b.pick(Some(0), &[]).unwrap().replica().index == 0).count();
        assert_eq!(picks0, 0, "a penalised replica loses every two-way comparison");
        // After many half-lives the penalty is gone.
        *r0.penalty.lock().unwrap() = (2.0, Instant::now() - PENALTY_HALF_LIFE * 20);
        assert!(r0.penalty_now(Instant::now()) < 1e-5);
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
}
