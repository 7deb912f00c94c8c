//! Active health checks: `GET /ping` on a fresh connection to every replica each `interval`;
//! `fall` failures in a row mark it down, `rise` successes mark it up (the state machine is
//! [`crate::cluster::replica::HealthMachine`]). Passive detection (a failed request) lives in the attempt
//! loop and marks a replica down at once; this loop is what brings it back. Going down drops the
//! replica's pooled connections and fires its down signal, so attempts waiting on it move.
//! With a [`DelayProbe`], each replica that answers its ping is then asked for its replication
//! delay, recorded before the ping's result, so a replica coming back up is judged by it first.

use crate::cluster::balancer::Balancer;
use crate::cluster::delay_probe::DelayProbe;
use crate::cluster::upstream::{Backend, Upstream};
use crate::config::Health;
use crate::log::log;
use crate::metrics::{Metrics, ReplicaLabels};
use std::sync::Arc;

/// Probes every replica of `balancer` until the task is aborted; `first_round` fires when the
/// first round of probes has finished (each probe is bounded by `health.timeout`).
pub async fn run(
    balancer: Arc<Balancer>,
    upstream: Arc<Upstream>,
    cfg: Health,
    metrics: Arc<Metrics>,
    delays: Option<Arc<DelayProbe>>,
    first_round: tokio::sync::oneshot::Sender<()>,
) {
    if let Some(d) = &delays {
        d.bind(&balancer, &metrics);
    }
    let mut first_round = Some(first_round);
    let mut tick = tokio::time::interval(cfg.interval.0);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let probes = balancer.replicas().map(|r| {
            let (r, up, delays) = (r.clone(), upstream.clone(), delays.clone());
            async move {
                let ok = up.ping(&r.addr, cfg.timeout.0).await;
                let delay = match &delays {
                    Some(d) => Some(d.read(&up, &r, ok, cfg.timeout.0).await),
                    None => None,
                };
                (r, ok, delay)
            }
        });
        for (r, ok, delay) in futures_join_all(probes).await {
            if let (Some(d), Some(read)) = (&delays, delay) {
                d.record(&balancer, &r, read, &metrics);
            }
            let labels = ReplicaLabels { cluster: balancer.cluster.clone(), replica: r.label().to_string() };
            match balancer.probe_result(&r, ok, cfg.rise, cfg.fall) {
                Some(true) => log(
                    "info",
                    "replica up",
                    serde_json::json!({"cluster": balancer.cluster, "replica": r.label(), "url": r.addr.base}),
                ),
                Some(false) => {
                    upstream.reset_pool(&r.addr);
                    log(
                        "warn",
                        "replica down (probes)",
                        serde_json::json!({"cluster": balancer.cluster, "replica": r.label(), "url": r.addr.base}),
                    )
                }
                None => {}
            }
            metrics.replica_up.get_or_create(&labels).set(r.is_healthy() as i64);
        }
        if let Some(done) = first_round.take() {
            let _ = done.send(());
        }
    }
}

/// Runs futures concurrently and collects their outputs in order.
async fn futures_join_all<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(v) = h.await {
            out.push(v);
        }
    }
    out
}
