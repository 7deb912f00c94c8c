//! What stops the gateway from starting.

use std::net::SocketAddr;

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
