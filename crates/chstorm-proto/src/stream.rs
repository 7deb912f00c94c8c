//! Byte streams to a server: plain TCP or TLS (rustls), opened with a connect timeout.
//!
//! The address is resolved once when the [`Connector`] is built, so a run that opens a new
//! connection per query (`--no-keepalive`) does not pay for name resolution each time.

use crate::error::ProtoError;
use crate::target::Target;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, pki_types::ServerName};

/// How to verify the server's certificate.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// Accept any certificate (for self-signed test servers). Default: false.
    pub insecure: bool,
    /// A PEM file with the CA certificates to trust instead of the built-in web roots.
    pub ca_file: Option<PathBuf>,
}

/// A connected byte stream.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Opens [`Stream`]s to one target.
#[derive(Clone)]
pub struct Connector {
    addrs: Arc<[SocketAddr]>,
    authority: String,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    connect_timeout: Duration,
}

impl Connector {
    /// Resolves the target's address and prepares TLS when the scheme asks for it.
    pub fn new(target: &Target, tls: &TlsOptions, connect_timeout: Duration) -> Result<Connector, ProtoError> {
        let authority = target.authority();
        let addrs: Vec<SocketAddr> = (target.host.as_str(), target.port)
            .to_socket_addrs()
            .map_err(|e| ProtoError::InvalidTarget(format!("cannot resolve '{}': {e}", target.host)))?
            .collect();
        if addrs.is_empty() {
            return Err(ProtoError::InvalidTarget(format!("'{}' resolves to no address", target.host)));
        }
        let tls = if target.protocol.is_tls() {
            let config = client_config(tls)?;
            let name = ServerName::try_from(target.host.clone())
                .map_err(|e| ProtoError::InvalidTarget(format!("bad TLS server name '{}': {e}", target.host)))?;
            Some((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
        } else {
            None
        };
        Ok(Connector { addrs: addrs.into(), authority, tls, connect_timeout })
    }

    /// The resolved socket addresses, first one used first.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Connects (TCP, then TLS when configured) within the connect timeout. Sets TCP_NODELAY.
    pub async fn connect(&self) -> Result<Stream, ProtoError> {
        let fut = async {
            let mut last = None;
            for addr in self.addrs.iter() {
                match TcpStream::connect(addr).await {
                    Ok(tcp) => {
                        let _ = tcp.set_nodelay(true);
                        return match &self.tls {
                            None => Ok(Stream::Plain(tcp)),
                            Some((connector, name)) => connector
                                .connect(name.clone(), tcp)
                                .await
                                .map(|s| Stream::Tls(Box::new(s)))
                                .map_err(|e| ProtoError::Connect { addr: self.authority.clone(), source: e }),
                        };
                    }
                    Err(e) => last = Some(e),
                }
            }
            Err(ProtoError::Connect {
                addr: self.authority.clone(),
                source: last.unwrap_or_else(|| io::Error::other("no address")),
            })
        };
        match tokio::time::timeout(self.connect_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(ProtoError::Timeout(self.connect_timeout, "connecting")),
        }
    }
}

fn client_config(opts: &TlsOptions) -> Result<rustls::ClientConfig, ProtoError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ProtoError::TlsSetup(e.to_string()))?;
    let config = if opts.insecure {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerify(provider))).with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &opts.ca_file {
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| ProtoError::TlsSetup(format!("cannot read CA file {}: {e}", path.display())))?;
                for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                    let cert = cert.map_err(|e| ProtoError::TlsSetup(format!("bad PEM in {}: {e}", path.display())))?;
                    roots
                        .add(cert)
                        .map_err(|e| ProtoError::TlsSetup(format!("bad certificate in {}: {e}", path.display())))?;
                }
                if roots.is_empty() {
                    return Err(ProtoError::TlsSetup(format!("no certificate found in {}", path.display())));
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    Ok(config)
}

/// Certificate verifier for `--insecure`: checks signatures, accepts any certificate.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
