//! Who the gateway is on a replica: the distinct ClickHouse logins of one config (each cluster's
//! own, and each user's `backend`), made once per config with what every exchange needs (the
//! `Authorization` value) and a *slot*: the index of the login's own pools. Every HTTP pool
//! ([`super::upstream`]) and every pooled native connection (`crate::native::backend`) belongs to
//! one login, so a connection opened for one login never carries another's query.
//!
//! Which login does what:
//! * a user's queries, over both protocols, and the `KILL QUERY` of their guards: the user's
//!   `backend`, else its cluster's (a user may always kill its own queries: 18.16 lets a
//!   `readonly` user kill only its own, and current releases need the `KILL QUERY` grant only for
//!   other users' queries);
//! * the thread budget's polls (`system.processes`, CPU figures): the cluster's;
//! * health probes (`GET /ping`): none.

use crate::config::{Config, Login};
use base64::Engine as _;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One login, as the exchanges use it.
pub struct BackendLogin {
    pub user: String,
    pub password: String,
    /// `Basic base64(user:password)`, as text (for `KILL QUERY` and the budget's polls) and as a
    /// header value (for every attempt), both made once per config.
    pub auth: Arc<str>,
    pub header: http::HeaderValue,
    /// Its pools' index among each replica's pools: 0 to [`Logins::len`] - 1.
    pub slot: usize,
}

impl BackendLogin {
    /// `login` with its pools at `slot`.
    pub fn new(login: &Login, slot: usize) -> BackendLogin {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", login.user, login.password));
        let auth = format!("Basic {basic}");
        let header = http::HeaderValue::from_str(&auth).unwrap_or(http::HeaderValue::from_static(""));
        BackendLogin { user: login.user.clone(), password: login.password.clone(), auth: Arc::from(auth), header, slot }
    }

    /// True when `other` is the same ClickHouse login (the same user and password), whichever
    /// config made it: a native connection made before a reload stays with its login.
    pub fn same_as(&self, other: &BackendLogin) -> bool {
        self.user == other.user && self.password == other.password
    }
}

impl std::fmt::Debug for BackendLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendLogin").field("user", &self.user).field("slot", &self.slot).finish()
    }
}

/// The distinct logins of a config: the clusters' first (in name order), then the users' own.
pub struct Logins {
    by_login: BTreeMap<Login, Arc<BackendLogin>>,
}

impl Logins {
    pub fn new(config: &Config) -> Logins {
        let clusters = config.clusters.values().map(|c| c.login());
        let users = config.users.values().filter_map(|u| u.backend.clone());
        let mut by_login = BTreeMap::new();
        for login in clusters.chain(users) {
            let slot = by_login.len();
            by_login.entry(login).or_insert_with_key(|l| Arc::new(BackendLogin::new(l, slot)));
        }
        Logins { by_login }
    }

    /// How many distinct logins (so pools per replica and worker) there are: at least 1.
    pub fn len(&self) -> usize {
        self.by_login.len().max(1)
    }

    /// The runtime form of `login`. One the config does not have gets a slot past every pool, so
    /// its exchanges fail rather than borrow another login's connections.
    pub fn get(&self, login: &Login) -> Arc<BackendLogin> {
        self.by_login.get(login).cloned().unwrap_or_else(|| Arc::new(BackendLogin::new(login, usize::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_distinct_login_has_its_own_slot_and_users_sharing_one_share_it() {
        let text = "listen: 127.0.0.1:0\nclusters:\n  a:\n    user: gw\n    password: p\n    shards:\n      - replicas: [http://127.0.0.1:1]\n  b:\n    user: gw\n    password: p\n    shards:\n      - replicas: [http://127.0.0.1:2]\nusers:\n  - name: u1\n    cluster: a\n    backend: {user: r, password: x}\n  - name: u2\n    cluster: b\n    backend: {user: r, password: x}\n  - name: u3\n    cluster: a\n    backend: {user: r, password: y}\n  - name: u4\n    cluster: a\n";
        let cfg = Config::parse(text, std::path::Path::new("t.yaml")).unwrap();
        let logins = Logins::new(&cfg);
        assert_eq!(logins.len(), 3, "gw:p, r:x, r:y");
        let slot = |l: &Login| logins.get(l).slot;
        assert_eq!(slot(&cfg.clusters["a"].login()), slot(&cfg.clusters["b"].login()));
        let (u1, u2, u3) = (&cfg.users["u1"], &cfg.users["u2"], &cfg.users["u3"]);
        assert_eq!(slot(u1.backend.as_ref().unwrap()), slot(u2.backend.as_ref().unwrap()));
        assert_ne!(slot(u1.backend.as_ref().unwrap()), slot(u3.backend.as_ref().unwrap()), "another password");
        assert!(cfg.users["u4"].backend.is_none(), "u4 runs as its cluster's login");
        let mut slots: Vec<_> =
            [&cfg.clusters["a"].login(), u1.backend.as_ref().unwrap(), u3.backend.as_ref().unwrap()]
                .iter()
                .map(|l| slot(l))
                .collect();
        slots.sort();
        assert_eq!(slots, [0, 1, 2]);
        let stranger = Login { user: "z".into(), password: String::new() };
        assert_eq!(slot(&stranger), usize::MAX);
        let r = logins.get(u1.backend.as_ref().unwrap());
        assert_eq!(&*r.auth, "Basic cjp4");
        assert!(!format!("{r:?}").contains('x'), "{r:?}");
    }
}
