//! Everything a request needs, built from one config. A reload builds a new `State` and swaps
//! it in; requests in flight keep the one they started with.

use crate::attempt::hedge::HeadTimes;
use crate::cluster::balancer::Balancer;
use crate::cluster::login::{BackendLogin, Logins};
use crate::cluster::upstream::{Backend, Upstream};
use crate::config::{Cluster, Config, User};
use crate::metrics::Metrics;
use crate::query::admission::Limiter;
pub use crate::query::admission::UserRt;
use crate::query::plan::Target;
use std::collections::BTreeMap;
use std::sync::Arc;
use tower::retry::budget::TpsBudget;

pub struct ClusterRt {
    pub cfg: Cluster,
    pub balancer: Arc<Balancer>,
    /// The cluster's own login: the thread budget's polls, and the queries of users without a
    /// `backend`.
    pub login: Arc<BackendLogin>,
    /// The thread budget, when the cluster has a `threads` section.
    pub budget: Option<Arc<crate::cluster::budget::ClusterBudget>>,
    /// Recent answer-head times per route: one per shard, then fan-out and sessions.
    head_times: Vec<HeadTimes>,
    /// The same for the native port, whose heads come sooner (`crate::native::transport`).
    native_head_times: Vec<HeadTimes>,
    /// Shapes of reads that killed a replica, refused for a while (`crate::attempt::quarantine`).
    pub quarantine: crate::attempt::quarantine::Quarantine,
    /// The HTTP sessions, their homes and what can be carried of them (`crate::http::session`).
    pub sessions: crate::http::session::Sessions,
}

impl ClusterRt {
    /// The grammars a statement for this cluster is read under ([`chstorm_sql::reading`]):
    /// those of its replicas' releases, both while any replica's release is not known.
    pub fn grammars(&self) -> chstorm_sql::reading::Grammars {
        use chstorm_sql::reading::Grammars;
        let mut set: Option<Grammars> = None;
        for r in self.balancer.replicas() {
            let Some(major) = r.detected.0.load().as_deref().map(|v| v.major) else { return Grammars::ALL };
            let g = Grammars::of_release(major);
            set = Some(set.map_or(g, |s| s.union(g)));
        }
        set.unwrap_or(Grammars::ALL)
    }

    /// The recent answer-head times of the route a query takes.
    pub fn head_times(&self, target: Target) -> &HeadTimes {
        route_times(&self.head_times, target)
    }

    /// The recent answer-head times of the route a native query takes.
    pub fn native_head_times(&self, target: Target) -> &HeadTimes {
        route_times(&self.native_head_times, target)
    }

    /// What the attempt loop needs of this cluster and `state` for a query that runs as `login`
    /// (its user's, [`State::login`]), with `head_times` the route's answer-head times
    /// ([`ClusterRt::head_times`] or [`ClusterRt::native_head_times`]).
    pub fn attempt_ctx<'a>(
        &'a self,
        state: &'a State,
        login: &'a Arc<BackendLogin>,
        head_times: &'a HeadTimes,
    ) -> crate::attempt::Ctx<'a> {
        crate::attempt::Ctx {
            backend: &state.backend,
            balancer: &self.balancer,
            threads: self.budget.as_ref(),
            login,
            retry_budget: &state.retry_budget,
            metrics: &state.metrics,
            hedging: &state.config.hedging,
            head_times,
            quarantine: &self.quarantine,
        }
    }
}

fn route_times(times: &[HeadTimes], target: Target) -> &HeadTimes {
    let fanout = times.len() - 1;
    match target {
        Target::Shard(s) => times.get(s).unwrap_or(&times[fanout]),
        Target::Any | Target::Session(_) => &times[fanout],
    }
}

pub struct State {
    pub config: Config,
    pub clusters: BTreeMap<String, ClusterRt>,
    /// Resolved once per request by authentication, then carried in the request's extensions.
    pub users: BTreeMap<String, Arc<UserRt>>,
    /// The login of each user with a `backend` (the others run as their cluster's).
    user_logins: BTreeMap<String, Arc<BackendLogin>>,
    pub global: Limiter,
    /// What clients' buffered bytes may take, all connections together
    /// (`limits.max_buffered_mib`).
    pub mem: chstorm_proto::mem::Budget,
    pub upstream: Arc<Upstream>,
    /// The same, as the attempt loop sees it.
    pub backend: Arc<dyn Backend>,
    pub metrics: Arc<Metrics>,
    pub retry_budget: TpsBudget,
    /// Kept answers and running shared reads (`users[*].cache`); emptied by a reload.
    pub cache: crate::cache::Cache,
    health_tasks: Vec<tokio::task::AbortHandle>,
    /// One per cluster: fires when its first health round has finished.
    first_health_round: std::sync::Mutex<Vec<tokio::sync::oneshot::Receiver<()>>>,
}

impl Drop for State {
    fn drop(&mut self) {
        for t in &self.health_tasks {
            t.abort();
        }
    }
}

impl State {
    /// The ClickHouse login `user`'s queries run as on the replicas of `cluster` (its cluster):
    /// its own `backend`, else the cluster's. The one answer to "as whom" for both fronts: the
    /// attempts (HTTP and native), their KILL guards, and the native port's connections.
    pub fn login<'a>(&'a self, user: &User, cluster: &'a ClusterRt) -> &'a Arc<BackendLogin> {
        self.user_logins.get(&user.name).unwrap_or(&cluster.login)
    }

    /// A new client connection's memory account (`limits.max_client_buffer_mib`, within
    /// `limits.max_buffered_mib`).
    pub fn client_mem(&self) -> chstorm_proto::mem::Mem {
        self.mem.conn(self.config.limits.max_client_buffer_mib << 20)
    }

    /// Builds the state and starts health checks. Must run inside a tokio runtime.
    pub async fn build(config: Config, metrics: Arc<Metrics>) -> Result<State, String> {
        let replicas: Vec<_> =
            config.clusters.values().flat_map(|c| c.shards.iter().flat_map(|s| s.replicas.clone())).collect();
        let idle = Upstream::choose_idle_timeout(&config.pool, &replicas).await;
        let upstream = Arc::new(Upstream::new(
            &config.pool,
            idle,
            config.pool.max_idle(config.limits.max_concurrency),
            &replicas,
            config.workers,
            Logins::new(&config).len(),
        )?);
        let mut state = State::new(config, metrics, upstream.clone(), upstream);
        state.start().await;
        Ok(state)
    }

    /// The state of `config`, sending to the replicas through `backend`, with no task started
    /// and no thread budget: [`State::start`] adds them. Every replica starts up.
    pub fn new(config: Config, metrics: Arc<Metrics>, upstream: Arc<Upstream>, backend: Arc<dyn Backend>) -> State {
        let logins = Logins::new(&config);
        let mut clusters = BTreeMap::new();
        for (name, c) in &config.clusters {
            let login = logins.get(&c.login());
            let routes = || (0..=c.shards.len()).map(|_| HeadTimes::default()).collect();
            let (head_times, native_head_times) = (routes(), routes());
            let quarantine = crate::attempt::quarantine::Quarantine::new(config.limits.query_of_death_ttl.0);
            let rule = crate::cluster::replication::Rule::new(
                config.health.max_replica_delay.0,
                config.health.fallback_to_stale_replicas,
            );
            let balancer = Arc::new(Balancer::new(c).with_rule(rule));
            let rt = ClusterRt {
                cfg: c.clone(),
                balancer,
                login,
                budget: None,
                head_times,
                native_head_times,
                quarantine,
                sessions: Default::default(),
            };
            clusters.insert(name.clone(), rt);
        }
        let users = config.users.iter().map(|(n, u)| (n.clone(), Arc::new(UserRt::new(u)))).collect();
        let user_logins =
            config.users.iter().filter_map(|(n, u)| Some((n.clone(), logins.get(u.backend.as_ref()?)))).collect();
        let l = &config.limits;
        let mem = chstorm_proto::mem::Budget::new(config.limits.max_buffered_mib << 20);
        let cache = crate::cache::Cache::new(config.cache.max_size_mib << 20, metrics.cache.clone(), mem.clone());
        State {
            global: Limiter::new(l.max_concurrency, l.queue_size, l.queue_max_wait.0),
            mem,
            retry_budget: TpsBudget::new(
                std::time::Duration::from_secs(10),
                config.retries.min_per_second,
                config.retries.budget_ratio,
            ),
            cache,
            config,
            clusters,
            users,
            user_logins,
            backend,
            upstream,
            metrics,
            health_tasks: Vec::new(),
            first_health_round: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Starts each cluster's health checks, and its thread budget (`threads:`) with its probes.
    async fn start(&mut self) {
        let mut first_round = Vec::new();
        for (name, rt) in self.clusters.iter_mut() {
            let (round_done, round_wait) = tokio::sync::oneshot::channel();
            first_round.push(round_wait);
            let delays = (!self.config.health.max_replica_delay.0.is_zero())
                .then(|| Arc::new(crate::cluster::delay_probe::DelayProbe::new(&rt.cfg, &rt.login.auth)));
            let task = tokio::spawn(crate::cluster::health::run(
                rt.balancer.clone(),
                self.upstream.clone(),
                self.config.health.clone(),
                self.metrics.clone(),
                delays,
                round_done,
            ));
            self.health_tasks.push(task.abort_handle());
            let (round_done, round_wait) = tokio::sync::oneshot::channel();
            first_round.push(round_wait);
            let probe = crate::cluster::version::Probe {
                upstream: self.upstream.clone(),
                auth: rt.login.header.clone(),
                interval: self.config.health.interval.0,
                timeout: self.config.health.timeout.0,
                metrics: self.metrics.clone(),
                wanted: crate::cluster::server_settings::wanted(self.config.users.values(), name),
            };
            let versions = tokio::spawn(crate::cluster::version::run(rt.balancer.clone(), probe, round_done));
            self.health_tasks.push(versions.abort_handle());
            if let Some(t) = self.config.threads.get(name) {
                let b = Arc::new(crate::cluster::budget::ClusterBudget::new(&rt.cfg, t, Some(&self.metrics)));
                let facts = crate::cluster::budget::probe::resolve(&b, &self.upstream, &rt.login.auth).await;
                self.health_tasks.extend(crate::cluster::budget::probe::spawn(
                    &b,
                    &self.upstream,
                    &rt.login.auth,
                    facts,
                ));
                rt.budget = Some(b);
            }
        }
        *self.first_health_round.get_mut().unwrap_or_else(|e| e.into_inner()) = first_round;
    }

    /// Takes over the replication delays `old` read (the state before a reload) for the
    /// replicas both configs have.
    pub fn adopt_readings(&self, old: &State) {
        for (name, rt) in &self.clusters {
            if let Some(o) = old.clusters.get(name) {
                rt.balancer.adopt_readings(&o.balancer);
            }
        }
    }

    /// Waits until every cluster's first health round has finished (at once after the first
    /// call), at most `health.timeout` plus 1 s: each probe of a round is bounded by
    /// `health.timeout`. Returns false when the wait timed out.
    pub async fn first_health_round(&self) -> bool {
        let waits = std::mem::take(&mut *self.first_health_round.lock().unwrap_or_else(|e| e.into_inner()));
        let all = async {
            for w in waits {
                let _ = w.await;
            }
        };
        let bound = self.config.health.timeout.0 + std::time::Duration::from_secs(1);
        tokio::time::timeout(bound, all).await.is_ok()
    }
}
