//! The KILL guard: an attempt's query, cancelled on its server when the gateway gives up on it.
//!
//! Whatever ends an attempt early (a faster copy won, its replica went down, the client left, a
//! deadline passed) drops its guard, and a guard dropped while armed sends `KILL QUERY` for the
//! attempt's `query_id` on its replica ([`Backend::kill`], bounded there), counted by reason in
//! `chstorm_gateway_killed_queries_total{reason}` and logged. An attempt whose query has ended
//! on the server (an error answer, a broken connection, the answer read to its end) disarms it.

use crate::cluster::replica::Replica;
use crate::cluster::upstream::Backend;
use crate::metrics::{KillLabel, Metrics};
use std::sync::Arc;

/// Sends `KILL QUERY` for `query_id` on `replica` if dropped while armed.
pub struct KillGuard {
    pub armed: bool,
    pub reason: &'static str,
    pub query_id: Arc<str>,
    pub replica: Arc<Replica>,
    /// The `Authorization` of the login that ran the query ([`crate::cluster::login`]): a user
    /// may always kill its own queries, on 18.16 (even a `readonly` one) and on current releases
    /// (without the `KILL QUERY` grant).
    pub auth: Arc<str>,
    pub backend: Arc<dyn Backend>,
    pub metrics: Arc<Metrics>,
}

impl KillGuard {
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// The same query on the same replica, disarmed.
    pub fn clone_disarmed(&self) -> KillGuard {
        KillGuard {
            armed: false,
            reason: self.reason,
            query_id: self.query_id.clone(),
            replica: self.replica.clone(),
            auth: self.auth.clone(),
            backend: self.backend.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (up, r, auth, qid, m, reason) = (
            self.backend.clone(),
            self.replica.clone(),
            self.auth.clone(),
            self.query_id.clone(),
            self.metrics.clone(),
            self.reason,
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let ok = up.kill(&r.addr, &auth, &qid).await;
                m.killed.get_or_create(&KillLabel { reason }).inc();
                crate::log::log(
                    "info",
                    "killed query",
                    serde_json::json!({"query_id": &*qid, "replica": r.addr.base, "reason": reason, "ok": ok}),
                );
            });
        }
    }
}
