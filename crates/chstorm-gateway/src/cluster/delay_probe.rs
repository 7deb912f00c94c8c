//! The replication-delay probe of the health loop: after each replica's `GET /ping`, one
//! query of `system.replicas` ([`crate::cluster::replication::status_sql`], one row), bounded
//! by `health.timeout`, sent as the cluster's user with the query_id prefix of the gateway's own
//! probes (so the thread budget's `observe` leaves it out). What it reads goes to the balancer
//! ([`Balancer::record_replication`]), the metrics and, when a replica's standing changes, the
//! log. A replica that does not answer its ping is not asked: its delay becomes unknown, so a
//! replica coming back is judged by a fresh reading before its first read.
//!
//! Off (nothing sent) when `health.max_replica_delay` is `0s`.

use crate::cluster::balancer::{Balancer, Replica};
use crate::cluster::budget::probe;
use crate::cluster::replication::{self, Reading, Tier, View};
use crate::cluster::upstream::Upstream;
use crate::config::Cluster;
use crate::log::log;
use crate::metrics::{Metrics, ReplicaLabels};
use std::time::Duration;

/// Why the status of a replica that did not answer its ping is unknown (not counted as a
/// failed read: its health says it).
const NOT_PINGED: &str = "it does not answer its ping";

/// The status query of a cluster, and the credentials to send it with.
#[derive(Debug, Clone)]
pub struct DelayProbe {
    sql: String,
    /// The backends' `Authorization` header value.
    auth: String,
}

impl DelayProbe {
    /// The probe of `cluster` (its routed local tables in the query), sent with `auth`.
    pub fn new(cluster: &Cluster, auth: &str) -> DelayProbe {
        let routed = cluster.routing.as_ref().map(|r| r.local_tables()).unwrap_or_default();
        DelayProbe { sql: replication::status_sql(&routed), auth: auth.to_string() }
    }

    /// Hands every replica of `balancer` its steering counters, so that picks count into them.
    pub fn bind(&self, balancer: &Balancer, metrics: &Metrics) {
        for r in balancer.replicas() {
            let l = labels(balancer, r);
            let _ = r.replication.steered.set(metrics.replication.reads_steered.get_or_create(&l).clone());
            let _ = r.replication.writes_steered.set(metrics.replication.writes_steered.get_or_create(&l).clone());
        }
    }

    /// Reads `r`'s status within `timeout` after its ping (`ping_ok`); a replica that did not
    /// answer its ping is not asked.
    pub async fn read(
        &self,
        upstream: &Upstream,
        r: &Replica,
        ping_ok: bool,
        timeout: Duration,
    ) -> Result<Reading, String> {
        if !ping_ok {
            return Err(NOT_PINGED.into());
        }
        let q = probe::query(upstream, &self.auth, &r.addr, &self.sql);
        match tokio::time::timeout(timeout, q).await {
            Ok(answer) => replication::parse(&answer?),
            Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
        }
    }

    /// Records what `read` found for `r`: the balancer's tiers, the gauges, and a log line when
    /// its standing changed.
    pub fn record(&self, balancer: &Balancer, r: &Replica, read: Result<Reading, String>, metrics: &Metrics) {
        let l = labels(balancer, r);
        let m = &metrics.replication;
        let (before, old_error) =
            (balancer.tier_of(r, View::Any).max(balancer.tier_of(r, View::Routed)), r.replication.error());
        let old = balancer.record_replication(r, read);
        let reading = r.replication.reading();
        let gauge = |v: Option<u64>| v.map_or(-1, |d| i64::try_from(d).unwrap_or(i64::MAX));
        m.delay.get_or_create(&l).set(gauge(reading.map(|x| x.delay)));
        m.routed_delay.get_or_create(&l).set(gauge(reading.map(|x| x.routed_delay)));
        m.writable.get_or_create(&l).set(reading.map_or(-1, |x| x.writable() as i64));
        let after = balancer.tier_of(r, View::Any).max(balancer.tier_of(r, View::Routed));
        let max_s = balancer.rule().max_delay_s.unwrap_or(0);
        let ctx = |extra: serde_json::Value| {
            let mut v = serde_json::json!({"cluster": balancer.cluster, "replica": r.label(), "url": r.addr.base,
                "max_replica_delay_s": max_s});
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            v
        };
        match (reading, r.replication.error()) {
            (Some(x), _) => {
                let delays = serde_json::json!({"delay_s": x.delay, "routed_delay_s": x.routed_delay});
                if after == Tier::Stale && before != Tier::Stale {
                    log("warn", "replica lags: reads go to fresher replicas", ctx(delays));
                } else if after == Tier::Fresh && before == Tier::Stale {
                    log("info", "replica caught up", ctx(delays));
                }
                match (old.is_none_or(|o| o.writable()), x.writable()) {
                    (true, false) => log(
                        "warn",
                        "replica read-only: writes go to other replicas",
                        ctx(serde_json::json!({"read_only": x.read_only, "session_expired": x.session_expired})),
                    ),
                    (false, true) if old.is_some() => {
                        log("info", "replica takes writes again", ctx(serde_json::json!({})))
                    }
                    _ => {}
                }
            }
            (None, Some(e)) if e != NOT_PINGED => {
                m.status_errors.get_or_create(&l).inc();
                if r.is_healthy() && old_error.as_deref() != Some(e.as_str()) {
                    log(
                        "warn",
                        "replica replication status unknown: it is read only when no replica of its shard is known fresh",
                        ctx(serde_json::json!({"error": e})),
                    );
                }
            }
            (None, _) => {}
        }
    }
}

fn labels(balancer: &Balancer, r: &Replica) -> ReplicaLabels {
    ReplicaLabels { cluster: balancer.cluster.clone(), replica: r.label().to_string() }
}
