//! HTTP sessions kept whole: a `session_id` session lives on one server, and never silently
//! continues without what its client made in it.
//!
//! ClickHouse keeps a session's state on the server it lives on: the values of its `SET`s, its
//! `USE`, its temporary tables (18.16.1: URL settings of a session's request do not stay in the
//! session; `SET` and `USE` do). A replica that dies or restarts loses its sessions, and a
//! request with the same `session_id` to another replica (or to the restarted one) silently
//! opens a fresh, empty session: a client that made itself read-only runs with `readonly = 0`.
//!
//! So the gateway keeps, per session, the replica it lives on (its *home*), and what it can carry
//! to another replica: the settings of its successful `SET`s, in order, and its last `USE`.
//! Every request after a session's first goes to its home with `session_check=1`, so the server
//! itself refuses to open a fresh session in its place (Code 372, SESSION_NOT_FOUND). When the
//! home is down, or answers 372 (it restarted), the session is *moved*: its `SET`s and `USE` are
//! replayed, as they were sent, on a healthy replica (the home itself after a restart), checked
//! as the native port checks them (each must succeed), the request is sent there, and its answer
//! says so in `X-Chstorm-Session-Moved` (from and to). It stays there: the old home coming back
//! does not move it again. A session that made a temporary table, or ran a statement whose effect
//! on the session the gateway cannot know (a transaction), cannot be carried: its requests fail
//! in one line that says the session was lost, until it expires.
//!
//! Bounded: at most [`MAX_SESSIONS`] sessions (the least recently used is forgotten first; a
//! forgotten session's next request is its first again), each with at most [`MAX_SETTINGS`]
//! settings (past them it cannot be carried); a session is forgotten after its `session_timeout`
//! (default 60 s, as ClickHouse's) without requests, plus a margin.

use crate::cluster::balancer::Balancer;
use crate::cluster::replica::Replica;
use crate::cluster::upstream::{empty, full, Backend, BackendRequest};
use crate::query::plan::SessionEffect;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most sessions kept per cluster: 65,536.
pub const MAX_SESSIONS: usize = 1 << 16;
/// Most settings kept per session: 256.
pub const MAX_SETTINGS: usize = 256;
/// A session's timeout when its requests name none: ClickHouse's default, 60 s.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long past its timeout a session is still remembered: 10 s.
const MARGIN: Duration = Duration::from_secs(10);
/// Longest wait for one replayed statement's answer: 5 s.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(5);

/// One session as the gateway knows it.
#[derive(Debug, Clone)]
struct Record {
    /// The replica it lives on: (shard, index).
    home: (usize, usize),
    /// Its settings, as SQL literals, in the order they were first set.
    settings: Vec<(String, String)>,
    /// Its last `USE`.
    database: Option<String>,
    /// Why it cannot be carried to another replica, if it cannot.
    bound: Option<&'static str>,
    /// Why it was lost, once it was.
    lost: Option<String>,
    timeout: Duration,
    last: Instant,
}

/// Where a session's request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Its first request: wherever the balancer puts it.
    First,
    /// Its home, with `session_check=1`.
    Home((usize, usize)),
    /// Moved here from `from`, its state replayed: with `session_check=1`, and the answer says
    /// so.
    Moved { from: String, to: (usize, usize) },
}

/// The sessions of one cluster.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Record>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where a request of session `id` goes, moving the session when its home is down: `Err`
    /// is the one-line reason it was lost.
    pub async fn route(
        &self,
        id: &str,
        balancer: &Balancer,
        replay: &Replay<'_>,
        restarted: bool,
    ) -> Result<Route, String> {
        let Some(rec) = self.get(id) else { return Ok(Route::First) };
        if let Some(why) = rec.lost {
            return Err(why);
        }
        let home = balancer.replica_at(rec.home);
        let home_up = home.as_ref().is_some_and(|r| r.is_healthy());
        if home_up && !restarted {
            return Ok(Route::Home(rec.home));
        }
        let from = home.as_ref().map_or_else(|| "?".into(), |r| r.label().to_string());
        if let Some(what) = rec.bound {
            let why = format!(
                "session lost: its replica {from} {} and the session held {what}, which the gateway cannot carry to \
                 another replica; start a new session",
                if restarted { "restarted," } else { "is down," }
            );
            self.lose(id, &why);
            return Err(why);
        }
        // The home again after a restart; else the session's rendezvous choice among the others.
        let to = if restarted { home } else { balancer.sticky_other(crate::query::plan::session_hash(id), rec.home) };
        let Some(to) = to else {
            return Err(format!("session lost: its replica {from} is down, and no other replica is healthy"));
        };
        if let Err(e) = replay.run(&to, id, &rec).await {
            let why = format!(
                "session lost: its replica {from} is down, and replaying its state on {} failed: {e}",
                to.label()
            );
            self.lose(id, &why);
            return Err(why);
        }
        let at = (to.shard, to.index);
        if let Some(r) = self.lock().get_mut(id) {
            r.home = at;
        }
        Ok(Route::Moved { from, to: at })
    }

    fn get(&self, id: &str) -> Option<Record> {
        let mut map = self.lock();
        let now = Instant::now();
        match map.get(id) {
            Some(r) if now.duration_since(r.last) > r.timeout + MARGIN => {
                map.remove(id);
                None
            }
            Some(r) => Some(r.clone()),
            None => None,
        }
    }

    fn lose(&self, id: &str, why: &str) {
        if let Some(r) = self.lock().get_mut(id) {
            r.lost = Some(why.to_string());
        }
    }

    /// Session `id`'s request succeeded on `replica` (shard, index) with `effect`: recorded.
    pub fn answered(&self, id: &str, replica: (usize, usize), timeout: Option<Duration>, effect: &SessionEffect) {
        let mut map = self.lock();
        let now = Instant::now();
        if !map.contains_key(id) && map.len() >= MAX_SESSIONS {
            map.retain(|_, r| now.duration_since(r.last) <= r.timeout + MARGIN);
            if map.len() >= MAX_SESSIONS {
                if let Some(oldest) = map.iter().min_by_key(|(_, r)| r.last).map(|(k, _)| k.clone()) {
                    map.remove(&oldest);
                }
            }
        }
        let r = map.entry(id.to_string()).or_insert_with(|| Record {
            home: replica,
            settings: Vec::new(),
            database: None,
            bound: None,
            lost: None,
            timeout: DEFAULT_TIMEOUT,
            last: now,
        });
        r.home = replica;
        r.last = now;
        if let Some(t) = timeout {
            r.timeout = t;
        }
        match effect {
            SessionEffect::None => {}
            SessionEffect::Set(pairs) => {
                for (k, v) in pairs {
                    if let Some(slot) = r.settings.iter_mut().find(|(rk, _)| rk == k) {
                        slot.1 = v.clone();
                    } else if r.settings.len() < MAX_SETTINGS {
                        r.settings.push((k.clone(), v.clone()));
                    } else {
                        r.bound = Some("more settings than the gateway keeps");
                    }
                }
            }
            SessionEffect::Use(db) => r.database = Some(db.clone()),
            SessionEffect::Bound(what) => r.bound = Some(what),
        }
    }
}

/// What replays a session's state on a replica: the backend, and the credentials and
/// parameters of the session's requests.
pub struct Replay<'a> {
    pub backend: &'a Arc<dyn Backend>,
    /// The session's user's login: its `Authorization` and pools.
    pub login: &'a Arc<crate::cluster::login::BackendLogin>,
    /// `session_timeout`, when the session's requests give one.
    pub timeout: Option<String>,
}

impl Replay<'_> {
    /// Sends session `id`'s `SET` (its settings in one statement, `readonly` last) and `USE` to
    /// `to`; each must succeed.
    async fn run(&self, to: &Replica, id: &str, rec: &Record) -> Result<(), String> {
        let mut statements = Vec::new();
        let mut settings: Vec<&(String, String)> = rec.settings.iter().filter(|(k, _)| k != "readonly").collect();
        settings.extend(rec.settings.iter().filter(|(k, _)| k == "readonly"));
        if !settings.is_empty() {
            let list: Vec<String> = settings.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            statements.push(format!("SET {}", list.join(", ")));
        }
        if let Some(db) = &rec.database {
            statements.push(format!("USE `{}`", db.replace('\\', "\\\\").replace('`', "\\`")));
        }
        let mut target = String::from("/?");
        crate::request::encode_param_into(&mut target, "session_id", id);
        if let Some(t) = &self.timeout {
            target.push('&');
            crate::request::encode_param_into(&mut target, "session_timeout", t);
        }
        for sql in statements {
            let req = BackendRequest {
                method: http::Method::POST,
                target: target.clone(),
                headers: Default::default(),
                auth: Some(self.login.header.clone()),
                pool: self.login.slot,
                empty_post: sql.is_empty(),
                body: if sql.is_empty() { empty() } else { full(Bytes::from(sql.clone())) },
            };
            let (status, body) = tokio::time::timeout(REPLAY_TIMEOUT, self.send(to, req))
                .await
                .map_err(|_| format!("no answer to `{sql}` within {} s", REPLAY_TIMEOUT.as_secs()))??;
            if !status.is_success() {
                let text = String::from_utf8_lossy(&body);
                return Err(format!("`{sql}` answered {status}: {}", text.lines().next().unwrap_or("").trim()));
            }
        }
        Ok(())
    }

    /// One replayed statement's whole answer, read to its end before the next statement: the
    /// server holds the session until its request ends, and a request sent sooner finds it
    /// locked (18.16: Code 373, SESSION_IS_LOCKED). A SET's or USE's answer is empty, an error's
    /// a line: 64 KiB at most.
    async fn send(&self, to: &Replica, req: BackendRequest) -> Result<(http::StatusCode, Bytes), String> {
        let resp = match self.backend.send(&to.addr, req).await {
            Ok(r) => r,
            Err(e) => return Err(e.to_string()),
        };
        let status = resp.status();
        Ok((status, crate::attempt::read_limited(resp.into_body(), 64 << 10).await))
    }
}
