//! The ClickHouse users a local cluster makes for its gateway: each gateway user in
//! `DIR/gateway.yaml` runs as a server user of its own (`backend:`), written into every node's
//! `users.xml` (ClickHouse 18.16's format), so the gateway's tests run with the server enforcing
//! its profiles and quotas too, as an operator would deploy it (docs/GATEWAY.md, "Users").
//!
//! | gateway user | server user | profile | quota |
//! |---|---|---|---|
//! | `default` (writes, no rules) | `chstorm_writer` | `chstorm_writer`: `log_queries=1`, `max_execution_time=30` | `chstorm` |
//! | `viewer` (read-only) | `chstorm_viewer` | `chstorm_viewer`: the same, and `readonly=1` | `chstorm` |
//!
//! `chstorm_writer` keeps DDL and every database (the gateway's tests create, drop and read
//! tables of several databases through the gateway's `default`); `chstorm_viewer` is as
//! restricted as 18.16 allows: `readonly=1`, the database `default` only.
//!
//! The server user `default` (no password, loopback only) stays the administrator: the
//! cluster's login in `gateway.yaml` (the gateway's own work: the thread budget's polls) and what
//! tests load data and check the servers with. Passwords are made afresh for each cluster (16
//! random bytes, hex), kept as SHA-256 in `users.xml` and as they are in `gateway.yaml` (the
//! gateway needs them), so they are known to whoever can read the cluster's folder.
//!
//! What 18.16 cannot restrict, and so these users cannot either: every user reads
//! `system.processes` and `system.query_log` whole, every user's query texts included (users.xml
//! row filters do not exist in 18.16; `allow_databases` never covers `system`); a setting the
//! client sends under `readonly=0` (so `allow_ddl=0` and a profile's values are defaults a
//! client can change); a quota is counted by each server on its own.

use std::fmt::Write as _;
use std::io::Read as _;

use crate::error::LocalError;

/// Users, profiles and quotas added to a server's `users.xml` beside `default`: raw XML for
/// inside its `<profiles>`, `<users>` and `<quotas>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtraUsersXml {
    pub profiles: String,
    pub users: String,
    pub quotas: String,
}

/// A server user a local cluster made for one of its gateway users.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerLogin {
    /// The gateway user (`default`, `viewer`).
    pub gateway_user: String,
    /// The ClickHouse user it runs as (`chstorm_writer`, `chstorm_viewer`).
    pub user: String,
    pub password: String,
    /// Its profile has `readonly=1`.
    pub readonly: bool,
}

/// The server's `max_execution_time` for these users, in seconds: the gateway users' own, which
/// a `readonly=1` profile needs to equal (18.16 refuses a URL setting that changes a value).
pub const MAX_EXECUTION_TIME_S: u32 = 30;

/// The quota of every user here, per hour: bounds far above what a test or a benchmark on one
/// machine sends, so that it counts and is never in the way.
const QUOTA_QUERIES: u64 = 1_000_000_000;
const QUOTA_ERRORS: u64 = 100_000_000;

/// The local cluster's server users, with fresh passwords.
pub(crate) fn make_logins() -> Result<Vec<ServerLogin>, LocalError> {
    let login = |gateway: &str, user: &str, readonly| -> Result<ServerLogin, LocalError> {
        Ok(ServerLogin { gateway_user: gateway.into(), user: user.into(), password: random_hex()?, readonly })
    };
    Ok(vec![login("default", "chstorm_writer", false)?, login("viewer", "chstorm_viewer", true)?])
}

/// 16 bytes from the kernel's random source, as 32 hex digits.
fn random_hex() -> Result<String, LocalError> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| LocalError::io("read /dev/urandom for a password", e))?;
    Ok(hex(&b))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// What `users.xml` gets for `logins`: a profile and a user each (loopback only, the password's
/// SHA-256; a read-only one sees the database `default` only), and the quota `chstorm`.
pub(crate) fn users_xml(logins: &[ServerLogin]) -> ExtraUsersXml {
    use sha2::Digest as _;
    let mut x = ExtraUsersXml::default();
    for l in logins {
        let readonly = if l.readonly { "<readonly>1</readonly>" } else { "" };
        let _ = write!(
            x.profiles,
            "<{u}><log_queries>1</log_queries><max_execution_time>{MAX_EXECUTION_TIME_S}</max_execution_time>{readonly}</{u}>",
            u = l.user
        );
        let databases = if l.readonly { "<allow_databases><database>default</database></allow_databases>" } else { "" };
        let _ = write!(
            x.users,
            "<{u}><password_sha256_hex>{}</password_sha256_hex><networks><ip>127.0.0.1</ip><ip>::1</ip></networks>\
             <profile>{u}</profile><quota>chstorm</quota>{databases}</{u}>",
            hex(&sha2::Sha256::digest(l.password.as_bytes())),
            u = l.user
        );
    }
    let _ = write!(
        x.quotas,
        "<chstorm><interval><duration>3600</duration><queries>{QUOTA_QUERIES}</queries><errors>{QUOTA_ERRORS}</errors>\
         <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></chstorm>"
    );
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gateway_user_gets_its_server_user_profile_and_quota() {
        let logins = make_logins().unwrap();
        assert_eq!(logins.len(), 2);
        assert_ne!(logins[0].password, logins[1].password);
        assert!(logins.iter().all(|l| l.password.len() == 32 && l.password.bytes().all(|b| b.is_ascii_hexdigit())));
        let x = users_xml(&logins);
        assert!(x.profiles.contains("<chstorm_viewer><log_queries>1</log_queries><max_execution_time>30</max_execution_time><readonly>1</readonly></chstorm_viewer>"), "{}", x.profiles);
        assert!(x.profiles.contains("<chstorm_writer><log_queries>1</log_queries><max_execution_time>30</max_execution_time></chstorm_writer>"), "{}", x.profiles);
        assert!(!x.users.contains(&logins[0].password), "no password in the clear");
        assert!(x.users.contains("<profile>chstorm_viewer</profile><quota>chstorm</quota><allow_databases>"));
        assert!(x.quotas.starts_with("<chstorm><interval><duration>3600</duration>"));
        assert_eq!(hex(&[0, 15, 255]), "000fff");
    }
}
