//! Each replica's ClickHouse version, as detected: `SELECT version()` over HTTP, asked by a
//! loop of its own beside the health checks ([`run`]), and the revision its native Hello tells
//! ([`Replica::observe_hello`]). Everything that differs between releases (how the gateway words
//! its own errors, which SQL grammar a cluster speaks) reads it here, through
//! [`Replica::version`], and looks the difference up in `chstorm_proto::versions`.
//!
//! # Reading a replica's version
//!
//! [`Replica::version`] is `None` ("unknown") until the first probe of the replica answered,
//! and again from the moment the replica is marked down or a probe fails, until a probe
//! answers again: a replica that comes back up may be another release (an upgrade restarts
//! it). The native revision is known once the gateway has said Hello to the replica's native
//! port. [`Balancer::versions`] lists a cluster's replicas with theirs; [`lowest_version`] is
//! the oldest release known in a cluster, the one whose rules a cluster-wide choice must follow
//! (a grammar every replica reads, an error wording every client of the cluster expects).
//!
//! Exposed as `chstorm_gateway_replica_version{cluster, replica, version}` (1 for the version
//! detected now, 0 for one detected before; `unknown` while none is) and on
//! `/replicas_status?verbose=1`.

use crate::cluster::balancer::Balancer;
use crate::cluster::replica::Replica;
use crate::cluster::upstream::Upstream;
use crate::metrics::{Metrics, VersionLabels};
use chstorm_proto::native::ServerInfo;
use chstorm_proto::versions::ServerVersion;
use std::sync::Arc;
use std::time::Duration;

/// How often a replica whose version is known is asked again: every 60 s (a replica restarted
/// faster than the health checks notice keeps its old version at most that long).
const RECHECK: Duration = Duration::from_secs(60);

impl Replica {
    /// The replica's ClickHouse version, as last detected; `None` while unknown (see the module
    /// doc: before the first answer, and after the replica went down or a probe failed).
    pub fn version(&self) -> Option<ServerVersion> {
        self.detected.0.load_full().map(|v| *v)
    }

    /// Records what the replica's native Hello said (its version and protocol revision).
    pub fn observe_hello(&self, info: &ServerInfo) {
        let v = ServerVersion {
            major: info.version_major,
            minor: info.version_minor,
            patch: info.version_patch,
            revision: Some(info.revision),
        };
        if self.version() != Some(v) {
            self.detected.0.store(Some(Arc::new(v)));
        }
    }

    fn set_version(&self, v: Option<ServerVersion>) {
        // A revision the native Hello told stays with the same release.
        let keep = self.version().filter(|old| v.is_some_and(|n| old.label() == n.label()));
        let v = v.map(|n| ServerVersion { revision: keep.and_then(|k| k.revision), ..n });
        self.detected.0.store(v.map(Arc::new));
    }
}

impl Balancer {
    /// Every replica of the cluster (`shard.replica` label) with its detected version.
    pub fn versions(&self) -> Vec<(String, Option<ServerVersion>)> {
        self.replicas().map(|r| (r.label().to_string(), r.version())).collect()
    }
}

/// The oldest release detected among `balancer`'s replicas; `None` while none is known.
pub fn lowest_version(balancer: &Balancer) -> Option<ServerVersion> {
    balancer.versions().into_iter().filter_map(|(_, v)| v).min()
}

/// How [`run`] asks: through `upstream`, as the cluster's user (`auth`, an `Authorization`
/// value), each `interval`, each ask bounded by `timeout`, counted in `metrics`; `wanted`: the
/// settings the config names for the cluster ([`super::server_settings`]).
pub struct Probe {
    pub upstream: Arc<Upstream>,
    pub auth: http::HeaderValue,
    pub interval: Duration,
    pub timeout: Duration,
    pub metrics: Arc<Metrics>,
    pub wanted: Vec<super::server_settings::Wanted>,
}

/// Detects the versions of `balancer`'s replicas until the task is aborted: each `interval`,
/// a replica marked down becomes unknown, and one up whose version is unknown (or was detected
/// [`RECHECK`] ago) is asked `SELECT version()` with the cluster's credentials (`auth`, an
/// `Authorization` value), each ask bounded by `timeout`; `first_round` fires when the first
/// round has finished (the gateway starts serving after it, so its first answers already know
/// their replicas' versions). Once a replica's version is first known, the settings the config
/// names (`wanted`) are checked against its `system.settings` ([`super::server_settings`]).
pub async fn run(balancer: Arc<Balancer>, probe: Probe, first_round: tokio::sync::oneshot::Sender<()>) {
    let Probe { upstream, auth, interval, timeout, metrics, wanted } = probe;
    let mut first_round = Some(first_round);
    // The config's settings are checked on the first replica whose version is known.
    let mut settings_checked = false;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut asked: Vec<Option<tokio::time::Instant>> = vec![None; balancer.replicas().count()];
    loop {
        tick.tick().await;
        // The replicas to ask, asked at once (each bounded by `timeout`).
        let mut asks = Vec::new();
        for (i, r) in balancer.replicas().enumerate() {
            if !r.is_healthy() {
                let was = r.version();
                r.set_version(None);
                asked[i] = None;
                publish(&metrics, &balancer.cluster, r, was);
            } else if r.version().is_none() || asked[i].is_none_or(|t| t.elapsed() >= RECHECK) {
                asked[i] = Some(tokio::time::Instant::now());
                let (r, up, auth) = (r.clone(), upstream.clone(), auth.clone());
                asks.push(tokio::spawn(async move {
                    let v = ask(&up, &r, &auth, timeout).await;
                    (r, v)
                }));
            }
        }
        for a in asks {
            if let Ok((r, v)) = a.await {
                let was = r.version();
                r.set_version(v);
                publish(&metrics, &balancer.cluster, &r, was);
                if !settings_checked && v.is_some() {
                    let c = &balancer.cluster;
                    settings_checked = super::server_settings::check(&upstream, c, &r, &auth, &wanted, timeout).await;
                }
            }
        }
        if let Some(done) = first_round.take() {
            let _ = done.send(());
        }
    }
}

/// `SELECT version()` on `r`'s HTTP interface; None when it does not answer with a version.
async fn ask(upstream: &Upstream, r: &Replica, auth: &http::HeaderValue, timeout: Duration) -> Option<ServerVersion> {
    let text = upstream.query_text(&r.addr, "SELECT version()", auth, timeout, 4096).await?;
    ServerVersion::parse(&text)
}

/// The replica's version on `chstorm_gateway_replica_version`: 1 for the one detected now
/// (`unknown` while none is), 0 for the one before it when it changed.
fn publish(metrics: &Metrics, cluster: &str, r: &Replica, was: Option<ServerVersion>) {
    let label = |v: Option<ServerVersion>| VersionLabels {
        cluster: cluster.to_string(),
        replica: r.label().to_string(),
        version: v.map_or_else(|| "unknown".to_string(), |v| v.label()),
    };
    let now = r.version();
    if was.map(|v| v.label()) != now.map(|v| v.label()) {
        metrics.replica_version.get_or_create(&label(was)).set(0);
    }
    metrics.replica_version.get_or_create(&label(now)).set(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ReplicaAddr;

    #[test]
    fn a_hello_s_revision_stays_with_its_release_and_goes_with_it() {
        let r = Replica::new(ReplicaAddr { base: "http://127.0.0.1:1".into(), https: false }, 0, 0);
        assert_eq!(r.version(), None, "unknown at first");
        r.set_version(ServerVersion::parse("18.16.1"));
        assert_eq!(r.version().unwrap().revision, None);
        let info = ServerInfo::of_version(ServerVersion::V18_16);
        r.observe_hello(&info);
        assert_eq!(r.version(), Some(ServerVersion::V18_16));
        r.set_version(ServerVersion::parse("18.16.1"));
        assert_eq!(r.version(), Some(ServerVersion::V18_16), "the same release keeps its revision");
        r.set_version(ServerVersion::parse("26.9.1.1"));
        assert_eq!(r.version().map(|v| (v.label(), v.revision)), Some(("26.9.1".into(), None)));
        r.set_version(None);
        assert_eq!(r.version(), None);
    }
}
