//! Asks the server who it is before a run: its version, and whether it answers at all.

use chstorm_proto::http::{HttpConn, RequestHead};
use chstorm_proto::native::NativeConn;
use chstorm_proto::stream::{Connector, TlsOptions};
use chstorm_proto::{ProtoError, Target};
use std::time::Duration;

/// Returns the server's version string (`18.16.1`), using `SELECT version()` over HTTP and the
/// handshake over the native protocol.
pub async fn server_version(target: &Target, tls: &TlsOptions, timeout: Duration) -> Result<String, ProtoError> {
    let connector = Connector::new(target, tls, timeout)?;
    if target.protocol.is_http() {
        let mut conn = HttpConn::connect(&connector).await?;
        let head = RequestHead::query(target, &[], true);
        let v = conn.send_text(&head, b"SELECT version()", timeout, 256).await?;
        Ok(v.trim().to_string())
    } else {
        let conn = NativeConn::connect(&connector, target, timeout).await?;
        Ok(conn.server().version())
    }
}
