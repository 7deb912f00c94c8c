//! `cached`: the native port's side of the result cache (`crate::cache`, docs/GATEWAY.md,
//! "Cache and merging"): a read of a user that keeps answers is looked up before its slots are
//! taken ([`cached`]), keyed by its Query packet from its settings on
//! ([`crate::cache::key::native_key`]); a miss's answer is captured as written to its client
//! ([`Capture`]) and kept when it ended whole. No read is merged here. Called by
//! `super::query`; must not import it.

use super::client::ClientConn;
use crate::query::plan::Plan;
use crate::state::{ClusterRt, State, UserRt};
use chstorm_proto::mem::Charge;
use chstorm_proto::native::server::packets::Query;

/// What the cache has for a native query of a user that keeps answers ([`cached`]).
pub(super) enum Cached<'a> {
    /// A kept answer, as the packets the server sent, and its route.
    Hit(bytes::Bytes, &'static str),
    /// Nothing kept: the query runs, and its answer is kept when it is whole.
    Miss(Box<Kept<'a>>),
    /// It may not be cached.
    No,
}

/// A query whose answer is to be kept: its Query packet (taken for the run), the key and the
/// policy, and when it was looked up.
pub(super) struct Kept<'a> {
    pub encoded: Option<super::transport::Encoded>,
    pub key: crate::cache::key::Key,
    pub policy: &'a crate::config::UserCache,
    pub sent_at: tokio::time::Instant,
}

/// Looks up the answer of `q`, planned as `planned` (`users[].cache`, docs/GATEWAY.md, "Cache and merging"):
/// a read the plan lets the cache take, outside a session pinned to a connection and without
/// external tables, keyed by [`crate::cache::key::native_key`]. The native port keeps answers
/// and serves them; it merges no reads in flight.
pub(super) fn cached<'a>(
    state: &State,
    user: &'a UserRt,
    cluster: &ClusterRt,
    conn: &ClientConn,
    q: &Query,
    (policy, planned): (&'a crate::config::UserCache, &(Plan, Option<String>)),
) -> Cached<'a> {
    let (plan, client_readonly) = planned;
    if plan.caching != crate::query::cacheable::Caching::Eligible {
        return Cached::No;
    }
    let sql = plan.replace_body.as_deref().unwrap_or(&q.sql);
    let settings = backend_settings(plan, client_readonly.clone());
    // Encoded once: the key is the packet from its settings on, and a miss's attempts send it.
    let Ok(encoded) = super::transport::encode_query(q, &plan.query_id, &settings, sql) else {
        return Cached::No;
    };
    let mut packet = encoded.head[encoded.settings_at..].to_vec();
    if user.cfg.readonly && super::settings::put_setting_at(&mut packet, "readonly", "1", 0, q.revision).is_err() {
        return Cached::No;
    }
    packet.extend_from_slice(&encoded.tail);
    let login = state.login(&user.cfg, cluster);
    let key = crate::cache::key::native_key(plan, login, &user.cfg.cluster, &conn.database, q.revision, &packet);
    let sent_at = tokio::time::Instant::now();
    match state.cache.kept(&key, &user.cfg.name, policy) {
        Some((stored, _age)) => Cached::Hit(stored.body.clone(), plan.target.label()),
        None => Cached::Miss(Box::new(Kept { encoded: Some(encoded), key, policy, sent_at })),
    }
}

/// The settings a query's Query packet carries to its replica: the plan's, then the client's
/// own `readonly` (1 or 2, in the Query packet or SET) as it is; a read-only user's
/// `readonly = 1` comes after them (`Native::query_packet`) and wins.
pub(super) fn backend_settings(plan: &Plan, client_readonly: Option<String>) -> Vec<(String, String)> {
    let mut settings: Vec<(String, String)> =
        plan.params.iter().filter(|(k, _)| crate::request::is_setting(k)).cloned().collect();
    if let Some(ro) = client_readonly.filter(|v| v == "1" || v == "2") {
        settings.push(("readonly".into(), ro));
    }
    settings
}

/// The bytes of an answer as written to its client, kept for the cache while they fit its
/// entry limit and the connection's memory account; `whole` until they do not, or the answer
/// is cut, cancelled or streamed through.
pub(super) struct Capture {
    pub bytes: Vec<u8>,
    max: usize,
    charge: Charge,
    pub whole: bool,
}

impl Capture {
    pub(super) fn new(max: usize, charge: Charge) -> Capture {
        Capture { bytes: Vec::new(), max, charge, whole: true }
    }

    pub(super) fn add(&mut self, b: &[u8]) {
        if !self.whole {
            return;
        }
        if self.bytes.len() + b.len() > self.max || self.charge.grow(b.len()).is_err() {
            return self.spoil();
        }
        self.bytes.extend_from_slice(b);
    }

    /// Not to be kept.
    pub(super) fn spoil(&mut self) {
        self.whole = false;
        self.bytes = Vec::new();
        let _ = self.charge.set(0);
    }
}
