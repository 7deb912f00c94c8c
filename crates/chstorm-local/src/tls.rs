//! Self-signed TLS certificate for a local server.
//!
//! The certificate covers the SANs `localhost` and IP `127.0.0.1`, uses an
//! ECDSA P-256 key and is valid until the year 4096. It is its own issuer, so
//! clients trust it by adding `DIR/tls/server.crt` as their only root.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

use crate::error::LocalError;

/// Paths of the PEM files of a generated certificate.
pub(crate) struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// The file locations under `dir` (`DIR/tls/server.crt`, `DIR/tls/server.key`).
    pub fn in_dir(dir: &Path) -> Self {
        TlsFiles { cert: dir.join("tls").join("server.crt"), key: dir.join("tls").join("server.key") }
    }
}

/// Generates a fresh certificate and key and writes them as PEM into `DIR/tls/`.
/// The key file is created with mode 0600.
pub(crate) fn write_self_signed(dir: &Path) -> Result<TlsFiles, LocalError> {
    let files = TlsFiles::in_dir(dir);
    let (cert_pem, key_pem) = generate().map_err(|e| LocalError::Tls(e.to_string()))?;
    write(&files.cert, &cert_pem, 0o644)?;
    write(&files.key, &key_pem, 0o600)?;
    Ok(files)
}

/// Returns `(certificate PEM, private key PEM)`.
fn generate() -> Result<(String, String), rcgen::Error> {
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "chstorm-local");
    params.distinguished_name = dn;
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), LocalError> {
    let err = |e| LocalError::io(format!("write {}", path.display()), e);
    // Remove first so the mode of a new file applies even if one existed.
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pem_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("tls")).unwrap();
        let files = write_self_signed(dir.path()).unwrap();
        let cert = fs::read_to_string(&files.cert).unwrap();
        let key = fs::read_to_string(&files.key).unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"));
        // A second run replaces the files.
        write_self_signed(dir.path()).unwrap();
        assert_ne!(fs::read_to_string(&files.cert).unwrap(), cert);
    }
}
