//! `auth`: who a client is. [`authenticate`] checks a user name, password and address against
//! the configured users: the one check of both fronts (HTTP per request, native at the Hello).
//! Where the name and password come from is the front's business (`crate::http::service` reads
//! basic auth, `X-ClickHouse-User`/`-Key` or the `user`/`password` parameters; the native front
//! reads the Hello).

use super::admission::UserRt;
use super::refusal::{Kind, Refusal};
use crate::metrics::UNKNOWN_USER;
use sha2::Digest;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Why [`authenticate`] refused a client.
#[derive(Debug, Clone)]
pub struct Denied {
    /// The metrics label: the user's name once the password was right, else [`UNKNOWN_USER`].
    pub label: String,
    /// [`Kind::Unauthorized`] (unknown user, wrong password, a name no user could have) or
    /// [`Kind::Network`].
    pub refusal: Refusal,
}

/// Checks a client's user `name`, `password` and address `addr` against `users`.
pub fn authenticate(
    users: &BTreeMap<String, Arc<UserRt>>,
    name: &str,
    password: &str,
    addr: Option<IpAddr>,
) -> Result<Arc<UserRt>, Denied> {
    let refuse =
        |kind, label: &str, message: String| Denied { label: label.to_string(), refusal: Refusal::new(kind, message) };
    if let Err(why) = crate::config::check_user_name(name) {
        return Err(refuse(Kind::Unauthorized, UNKNOWN_USER, why.to_string()));
    }
    let wrong = || refuse(Kind::Unauthorized, UNKNOWN_USER, "unknown user or wrong password".into());
    let Some(user) = users.get(name) else { return Err(wrong()) };
    let ok = match &user.cfg.password_sha256 {
        None => password.is_empty(),
        Some(hash) => sha2::Sha256::digest(password.as_bytes()).as_slice() == hash,
    };
    if !ok {
        return Err(wrong());
    }
    let allowed = addr.is_some_and(|ip| {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        user.cfg.networks.iter().any(|n| n.contains(&ip))
    });
    if !allowed {
        let from = addr.map(|a| a.to_string()).unwrap_or_else(|| "?".into());
        return Err(refuse(Kind::Network, name, format!("user '{name}' may not connect from {from}")));
    }
    Ok(user.clone())
}
