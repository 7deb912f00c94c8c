//! The listeners: HTTP or HTTPS for ClickHouse's interface ([`crate::http::conn`] serves each
//! connection), `/metrics` on `listen` or on its own `metrics_listen`, and the native protocol
//! on `listen_native` and over TLS on `listen_native_secure` ([`crate::native`]); SIGHUP
//! reloads the config; SIGTERM stops gracefully ([`super::drain`], HTTP and native connections
//! alike), and with `reuse_port` a new gateway can take over the ports first ([`super::listen`]).

use crate::config::Config;
use crate::http::conn::{Listener, Role};
use crate::log::log;
use crate::metrics::Metrics;
use crate::state::State;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use super::error::GatewayError;

fn tls_acceptor(cfg: &Config) -> Result<Option<tokio_rustls::TlsAcceptor>, GatewayError> {
    let Some(t) = &cfg.tls else { return Ok(None) };
    let bad = |what: &str, p: &PathBuf, e: String| GatewayError::Tls(format!("tls.{what} {}: {e}", p.display()));
    let cert_pem = std::fs::read(&t.cert).map_err(|e| bad("cert", &t.cert, e.to_string()))?;
    let key_pem = std::fs::read(&t.key).map_err(|e| bad("key", &t.key, e.to_string()))?;
    let certs = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("cert", &t.cert, e.to_string()))?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| bad("key", &t.key, e.to_string()))?
        .ok_or_else(|| bad("key", &t.key, "no private key in the file".into()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let sc = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| GatewayError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| GatewayError::Tls(format!("tls.cert/tls.key: {e}")))?;
    Ok(Some(tokio_rustls::TlsAcceptor::from(Arc::new(sc))))
}

/// A running gateway.
pub struct Gateway {
    pub addr: SocketAddr,
    /// Where `/metrics` is served when `metrics_listen` is set.
    pub metrics_addr: Option<SocketAddr>,
    /// Where the native protocol is served when `listen_native` is set.
    pub native_addr: Option<SocketAddr>,
    /// Where the native protocol is served over TLS when `listen_native_secure` is set.
    pub native_secure_addr: Option<SocketAddr>,
    state: Arc<ArcSwap<State>>,
    config_path: PathBuf,
    metrics: Arc<Metrics>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    drain: Arc<super::drain::Drain>,
    /// The worker threads that serve the connections; they stop when the gateway is dropped
    /// (and the accept loops, which share them, are stopped).
    workers: Arc<super::workers::Workers>,
}

/// The signals [`Gateway::run_until_signal`] acts on: SIGHUP and SIGTERM. Taken before
/// [`Gateway::start`], so that a SIGHUP sent as soon as the `gateway listening` line is out
/// reloads, where the signal's default action would end the process. (Taken, they stay the
/// process's: tests that start a gateway in-process do not take them.)
pub struct Signals {
    hup: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Takes SIGHUP and SIGTERM from their default actions. Must run inside a tokio runtime
    /// with signals (and I/O) enabled.
    pub fn take() -> Result<Signals, GatewayError> {
        use tokio::signal::unix::{signal, SignalKind};
        let failed = |e: std::io::Error| GatewayError::Setup(format!("cannot handle SIGHUP and SIGTERM: {e}"));
        Ok(Signals {
            hup: signal(SignalKind::hangup()).map_err(failed)?,
            term: signal(SignalKind::terminate()).map_err(failed)?,
        })
    }
}

fn bind(addr: SocketAddr, reuse_port: bool) -> Result<(tokio::net::TcpListener, SocketAddr), GatewayError> {
    let listener = super::listen::bind(addr, reuse_port).map_err(|e| GatewayError::Listen { addr, source: e })?;
    let bound = listener.local_addr().map_err(|e| GatewayError::Listen { addr, source: e })?;
    Ok((listener, bound))
}

/// Accepts connections on every worker until the tasks are aborted; each is served on its own
/// task on the worker that took it.
fn accept_loop(
    listener: tokio::net::TcpListener,
    serve: Listener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    workers: &super::workers::Workers,
) -> Result<Vec<tokio::task::JoinHandle<()>>, GatewayError> {
    let addr = listener.local_addr().map_err(|e| GatewayError::Setup(e.to_string()))?;
    workers
        .accept(listener, move |tcp, peer| serve.clone().serve_tcp(tcp, peer, tls.clone()))
        .map_err(|e| GatewayError::Listen { addr, source: e })
}

impl Gateway {
    /// Loads the config, starts health checks and listens. Returns once the sockets are bound.
    pub async fn start(config_path: PathBuf) -> Result<Gateway, GatewayError> {
        let cfg = Config::load(&config_path)?;
        let metrics = Arc::new(Metrics::default());
        let acceptor = tls_acceptor(&cfg)?;
        // The state first (health checks, pools, budgets), then the sockets: with reuse_port a
        // new gateway takes the port's new connections from the moment it binds.
        let (listen, reuse_port, metrics_listen, listen_native, listen_native_secure) =
            (cfg.listen, cfg.reuse_port, cfg.metrics_listen, cfg.listen_native, cfg.listen_native_secure);
        let workers = Arc::new(
            super::workers::Workers::start(cfg.workers)
                .map_err(|e| GatewayError::Setup(format!("cannot start {} worker threads: {e}", cfg.workers)))?,
        );
        let state =
            Arc::new(ArcSwap::from_pointee(State::build(cfg, metrics.clone()).await.map_err(GatewayError::Setup)?));
        let (listener, addr) = bind(listen, reuse_port)?;
        let metrics_listener = match metrics_listen {
            Some(m) => Some(bind(m, reuse_port)?),
            None => None,
        };
        let metrics_addr = metrics_listener.as_ref().map(|(_, a)| *a);
        let native_listener = match listen_native {
            Some(n) => Some(bind(n, reuse_port)?),
            None => None,
        };
        let native_addr = native_listener.as_ref().map(|(_, a)| *a);
        let native_secure_listener = match listen_native_secure {
            Some(n) => Some(bind(n, reuse_port)?),
            None => None,
        };
        let native_secure_addr = native_secure_listener.as_ref().map(|(_, a)| *a);
        let drain = Arc::new(super::drain::Drain::default());
        let main = Listener {
            state: state.clone(),
            metrics: metrics.clone(),
            role: Role::Main { metrics_here: metrics_listener.is_none() },
            drain: drain.clone(),
        };
        let mut tasks = accept_loop(listener, main, acceptor.clone(), &workers)?;
        if let Some((l, _)) = metrics_listener {
            let only = Listener {
                state: state.clone(),
                metrics: metrics.clone(),
                role: Role::MetricsOnly,
                drain: drain.clone(),
            };
            tasks.extend(accept_loop(l, only, None, &workers)?);
        }
        if native_listener.is_some() || native_secure_listener.is_some() {
            let shared = crate::native::shared(state.clone(), drain.clone());
            let failed = |addr| move |source| GatewayError::Listen { addr, source };
            if let Some((l, addr)) = native_listener {
                tasks.extend(crate::native::spawn(l, shared.clone(), None, &workers).map_err(failed(addr))?);
            }
            if let Some((l, addr)) = native_secure_listener {
                // Config validation makes sure `tls` is set with `listen_native_secure`.
                let tls = acceptor.ok_or_else(|| GatewayError::Tls("listen_native_secure needs `tls:`".into()))?;
                tasks.extend(crate::native::spawn(l, shared, Some(tls), &workers).map_err(failed(addr))?);
            }
        }
        let idle = state.load().upstream.idle_timeout;
        log(
            "info",
            "gateway listening",
            serde_json::json!({"addr": addr.to_string(), "metrics_addr": metrics_addr.map(|a| a.to_string()),
                "native_addr": native_addr.map(|a| a.to_string()),
                "native_secure_addr": native_secure_addr.map(|a| a.to_string()), "workers": workers.count(),
                "config": config_path.display().to_string(), "pool_idle_timeout_ms": idle.as_millis() as u64}),
        );
        Ok(Gateway {
            addr,
            metrics_addr,
            native_addr,
            native_secure_addr,
            state,
            config_path,
            metrics,
            tasks,
            drain,
            workers,
        })
    }

    /// Reloads the config file. A bad file keeps the running config; queries in flight finish
    /// on the config they started with.
    pub async fn reload(&self) -> Result<(), GatewayError> {
        let cfg = Config::load(&self.config_path)?;
        let running = &self.state.load().config;
        if cfg.listen != running.listen {
            log("warn", "listen address changed in the config; restart the gateway to apply it", serde_json::json!({}));
        }
        if cfg.listen_native != running.listen_native {
            log("warn", "listen_native changed in the config; restart the gateway to apply it", serde_json::json!({}));
        }
        if cfg.listen_native_secure != running.listen_native_secure {
            log(
                "warn",
                "listen_native_secure changed in the config; restart the gateway to apply it",
                serde_json::json!({}),
            );
        }
        if cfg.metrics_listen != running.metrics_listen {
            log("warn", "metrics_listen changed in the config; restart the gateway to apply it", serde_json::json!({}));
        }
        let new = State::build(cfg, self.metrics.clone()).await.map_err(GatewayError::Setup)?;
        new.adopt_readings(&self.state.load());
        self.state.store(Arc::new(new));
        Ok(())
    }

    /// How many worker threads serve the connections (`workers`).
    pub fn workers(&self) -> usize {
        self.workers.count()
    }

    /// The file the config is (re)loaded from.
    pub fn config_path(&self) -> &std::path::Path {
        &self.config_path
    }

    /// Client connections open now, HTTP and native (for tests and logs).
    pub fn open_connections(&self) -> usize {
        self.drain.open()
    }

    /// The running config's user names (for tests and logs).
    pub fn users(&self) -> Vec<String> {
        self.state.load().config.users.keys().cloned().collect()
    }

    /// Serves until SIGINT/SIGTERM, then stops gracefully ([`Gateway::shutdown`]); SIGHUP
    /// reloads (`signals`, taken before the gateway started). Tells a service manager
    /// (`NOTIFY_SOCKET`, [`super::notify`]) when it is ready (listeners bound, first health round
    /// finished), reloading, and stopping, and sends its watchdog pings.
    pub async fn run_until_signal(self, signals: Signals) -> Result<(), GatewayError> {
        let Signals { mut hup, mut term } = signals;
        let notifier = super::notify::Notifier::from_env();
        if notifier.enabled() {
            if !self.state.load().first_health_round().await {
                log("warn", "first health round unfinished; reporting ready anyway", serde_json::json!({}));
            }
            notifier.ready(&self.status());
        }
        let watchdog = notifier.watchdog();
        tokio::pin!(watchdog);
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    notifier.reloading();
                    let status = match self.reload().await {
                        Ok(()) => {
                            log("info", "config reloaded", serde_json::json!({"config": self.config_path.display().to_string()}));
                            format!("config reloaded; {}", self.status())
                        }
                        Err(e) => {
                            log("error", "config reload failed; keeping the running config", serde_json::json!({"error": e.to_string()}));
                            format!("config reload failed, running config kept: {e}")
                        }
                    };
                    notifier.ready(&status);
                }
                _ = term.recv() => break,
                _ = tokio::signal::ctrl_c() => break,
                _ = &mut watchdog => {}
            }
        }
        notifier.stopping("draining connections");
        self.shutdown().await;
        Ok(())
    }

    /// One line for the service manager's `STATUS=`: the address and the replicas up.
    fn status(&self) -> String {
        let state = self.state.load();
        let (mut up, mut all) = (0, 0);
        for c in state.clusters.values() {
            for r in c.balancer.replicas() {
                all += 1;
                up += r.is_healthy() as usize;
            }
        }
        format!("serving on {}; {up}/{all} replicas healthy", self.addr)
    }

    /// Stops gracefully: closes the listeners, answers `/ping` with 503, closes each client
    /// connection after its next answer (a native session after the query it runs), and waits
    /// for the queries in flight, at most `shutdown.drain_timeout`. Returns the connections
    /// still open then (cut off).
    pub async fn shutdown(&self) -> usize {
        self.stop();
        let timeout = self.state.load().config.shutdown.drain_timeout.0;
        let open = self.drain.open();
        log(
            "info",
            "gateway stopping: draining connections",
            serde_json::json!({"open": open, "timeout_ms": timeout.as_millis() as u64}),
        );
        let t = std::time::Instant::now();
        let left = self.drain.run(timeout).await;
        log(
            if left == 0 { "info" } else { "warn" },
            "gateway stopped",
            serde_json::json!({"drained": open.saturating_sub(left), "cut_off": left, "ms": t.elapsed().as_millis() as u64}),
        );
        left
    }

    /// Stops accepting connections at once (connections already open are served to their end).
    pub fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
