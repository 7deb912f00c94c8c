//! The listener: HTTP or HTTPS, `/ping` and `/metrics` answered by the gateway itself, every
//! other request through the layer stack; SIGHUP reloads the config.

use crate::config::Config;
use crate::layers::{stack, ClientAddr};
use crate::log::log;
use crate::metrics::Metrics;
use crate::proxy::reply;
use crate::state::State;
use crate::upstream::full;
use arc_swap::ArcSwap;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tower::Service;

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
    state: Arc<ArcSwap<State>>,
    config_path: PathBuf,
    metrics: Arc<Metrics>,
    task: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Loads the config, starts health checks and listens. Returns once the socket is bound.
    pub async fn start(config_path: PathBuf) -> Result<Gateway, GatewayError> {
        let cfg = Config::load(&config_path)?;
        let metrics = Arc::new(Metrics::default());
        let acceptor = tls_acceptor(&cfg)?;
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| GatewayError::Listen { addr: cfg.listen, source: e })?;
        let addr = listener.local_addr().map_err(|e| GatewayError::Listen { addr: cfg.listen, source: e })?;
        let state =
            Arc::new(ArcSwap::from_pointee(State::build(cfg, metrics.clone()).await.map_err(GatewayError::Setup)?));
        let st = state.clone();
        let m = metrics.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, peer)) = listener.accept().await else { continue };
                let _ = tcp.set_nodelay(true);
                let (st, m, acceptor) = (st.clone(), m.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                        let state = st.load_full();
                        let m = m.clone();
                        async move {
                            let path = req.uri().path();
                            let no_query =
                                req.uri().query().map_or(true, |q| !q.split('&').any(|p| p.starts_with("query=")));
                            if path == "/ping" || (path == "/" && req.method() == http::Method::GET && no_query) {
                                return Ok::<_, std::convert::Infallible>(Response::new(full("Ok.\n")));
                            }
                            if path == "/metrics" {
                                let mut r = Response::new(full(m.render()));
                                r.headers_mut().insert(
                                    "content-type",
                                    http::HeaderValue::from_static(
                                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                    ),
                                );
                                return Ok(r);
                            }
                            if path != "/" {
                                return Ok(reply(
                                    StatusCode::NOT_FOUND,
                                    format!("chstorm gateway: no handler for {path}; queries go to /"),
                                ));
                            }
                            req.extensions_mut().insert(state);
                            req.extensions_mut().insert(ClientAddr(peer));
                            stack().call(req).await
                        }
                    });
                    let builder = hyper::server::conn::http1::Builder::new();
                    let res = match acceptor {
                        Some(a) => match a.accept(tcp).await {
                            Ok(tls) => builder.serve_connection(TokioIo::new(tls), svc).await,
                            Err(_) => return,
                        },
                        None => builder.serve_connection(TokioIo::new(tcp), svc).await,
                    };
                    let _ = res;
                });
            }
        });
        let idle = state.load().upstream.idle_timeout;
        log(
            "info",
            "gateway listening",
            serde_json::json!({"addr": addr.to_string(), "config": config_path.display().to_string(), "pool_idle_timeout_ms": idle.as_millis() as u64}),
        );
        Ok(Gateway { addr, state, config_path, metrics, task })
    }

    /// Reloads the config file. A bad file keeps the running config; queries in flight finish
    /// on the config they started with.
    pub async fn reload(&self) -> Result<(), GatewayError> {
        let cfg = Config::load(&self.config_path)?;
        if cfg.listen != self.state.load().config.listen {
            log("warn", "listen address changed in the config; restart the gateway to apply it", serde_json::json!({}));
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
        self.task.abort();
        log("info", "gateway stopped", serde_json::json!({}));
        Ok(())
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}
