//! The listeners: HTTP or HTTPS for ClickHouse's interface ([`crate::conn`] serves each
//! connection), and `/metrics` on `listen` or on its own `metrics_listen`; SIGHUP reloads the
//! config.

use crate::config::Config;
use crate::conn::{Listener, Role};
use crate::log::log;
use crate::metrics::Metrics;
use crate::state::State;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Errors that stop the gateway from starting.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("{0}")]
    Setup(String),
}

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
    state: Arc<ArcSwap<State>>,
    config_path: PathBuf,
    metrics: Arc<Metrics>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), GatewayError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| GatewayError::Listen { addr, source: e })?;
    let bound = listener.local_addr().map_err(|e| GatewayError::Listen { addr, source: e })?;
    Ok((listener, bound))
}

/// Accepts connections until the task is aborted; each is served on its own task.
fn accept_loop(
    listener: tokio::net::TcpListener,
    serve: Listener,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((tcp, peer)) = listener.accept().await else { continue };
            tokio::spawn(serve.clone().serve_tcp(tcp, peer, tls.clone()));
        }
    })
}

impl Gateway {
    /// Loads the config, starts health checks and listens. Returns once the sockets are bound.
    pub async fn start(config_path: PathBuf) -> Result<Gateway, GatewayError> {
        let cfg = Config::load(&config_path)?;
        let metrics = Arc::new(Metrics::default());
        let acceptor = tls_acceptor(&cfg)?;
        let (listener, addr) = bind(cfg.listen).await?;
        let metrics_listener = match cfg.metrics_listen {
            Some(m) => Some(bind(m).await?),
            None => None,
        };
        let metrics_addr = metrics_listener.as_ref().map(|(_, a)| *a);
        let state =
            Arc::new(ArcSwap::from_pointee(State::build(cfg, metrics.clone()).await.map_err(GatewayError::Setup)?));
        let main = Listener {
            state: state.clone(),
            metrics: metrics.clone(),
            role: Role::Main { metrics_here: metrics_listener.is_none() },
        };
        let mut tasks = vec![accept_loop(listener, main, acceptor)];
        if let Some((l, _)) = metrics_listener {
            let only = Listener { state: state.clone(), metrics: metrics.clone(), role: Role::MetricsOnly };
            tasks.push(accept_loop(l, only, None));
        }
        let idle = state.load().upstream.idle_timeout;
        log(
            "info",
            "gateway listening",
            serde_json::json!({"addr": addr.to_string(), "metrics_addr": metrics_addr.map(|a| a.to_string()),
                "config": config_path.display().to_string(), "pool_idle_timeout_ms": idle.as_millis() as u64}),
        );
        Ok(Gateway { addr, metrics_addr, state, config_path, metrics, tasks })
    }

    /// Reloads the config file. A bad file keeps the running config; queries in flight finish
    /// on the config they started with.
    pub async fn reload(&self) -> Result<(), GatewayError> {
        let cfg = Config::load(&self.config_path)?;
        let running = &self.state.load().config;
        if cfg.listen != running.listen {
            log("warn", "listen address changed in the config; restart the gateway to apply it", serde_json::json!({}));
        }
        if cfg.metrics_listen != running.metrics_listen {
            log("warn", "metrics_listen changed in the config; restart the gateway to apply it", serde_json::json!({}));
        }
        let new = State::build(cfg, self.metrics.clone()).await.map_err(GatewayError::Setup)?;
        self.state.store(Arc::new(new));
        Ok(())
    }

    /// The file the config is (re)loaded from.
    pub fn config_path(&self) -> &std::path::Path {
        &self.config_path
    }

    /// The running config's user names (for tests and logs).
    pub fn users(&self) -> Vec<String> {
        self.state.load().config.users.keys().cloned().collect()
    }

    /// Serves until SIGINT/SIGTERM; SIGHUP reloads.
    pub async fn run_until_signal(self) -> Result<(), GatewayError> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).map_err(|e| GatewayError::Setup(e.to_string()))?;
        let mut term = signal(SignalKind::terminate()).map_err(|e| GatewayError::Setup(e.to_string()))?;
        loop {
            tokio::select! {
                _ = hup.recv() => match self.reload().await {
                    Ok(()) => log("info", "config reloaded", serde_json::json!({"config": self.config_path.display().to_string()})),
                    Err(e) => log("error", "config reload failed; keeping the running config", serde_json::json!({"error": e.to_string()})),
                },
                _ = term.recv() => break,
                _ = tokio::signal::ctrl_c() => break,
            }
        }
        self.stop();
        log("info", "gateway stopped", serde_json::json!({}));
        Ok(())
    }

    /// Stops accepting connections (connections already open are served to their end).
    pub fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
