//! The retry and hedge rules, shaped like tower's `retry::Policy` and `hedge::Policy`: pure
//! decisions from what happened, no I/O and no clock.

use crate::query::plan::Latitude;
use http::StatusCode;
use std::time::Duration;

/// Why an attempt ended without an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The connection could not be made: the query never reached the server.
    Unsent(String),
    /// The connection broke before the answer head: the query's fate is unknown.
    Lost(String),
    /// ClickHouse answered with a code proving the query did not run there (202, 209, 210, 279, 745;
    /// 216, the query id taken: [`chstorm_proto::rules::may_run_elsewhere`]).
    Busy(i32),
    /// The replica was marked down while the attempt waited.
    Down,
}

impl Failure {
    /// The client's status when the attempts give up after this failure: 503 for a busy server,
    /// else 502.
    pub fn status(&self) -> StatusCode {
        match self {
            Failure::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// The client's message when the attempts give up: a busy server's own exception text
    /// (`detail`), else a ClickHouse-style NETWORK_ERROR line.
    pub fn message(&self, detail: &str) -> String {
        match self {
            Failure::Busy(_) => detail.to_string(),
            _ => format!("Code: 210. chstorm gateway: {detail}"),
        }
    }
}

/// What to do after an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send the request to another replica (if the budget allows).
    Retry,
    /// Give the failure to the client.
    Stop,
}

/// The retry and hedge rules for one request, shaped like tower's `retry::Policy` (a decision
/// per failed attempt) and `hedge::Policy` (may this request be hedged).
#[derive(Debug, Clone)]
pub struct Policy {
    pub latitude: Latitude,
    /// At most this many attempts in all (replicas + 1).
    pub max_attempts: usize,
    /// At most this many extra copies in flight at once.
    pub max_extra: usize,
    /// The per-try deadline (None: no hedging).
    pub hedge_after: Option<Duration>,
}

impl Policy {
    /// tower's `retry::Policy::retry`: after `failure`, with `attempts` made so far.
    pub fn retry(&self, failure: &Failure, attempts: usize) -> Decision {
        if attempts >= self.max_attempts {
            return Decision::Stop;
        }
        let ok = match failure {
            Failure::Unsent(_) => self.latitude.resend_unsent,
            Failure::Lost(_) | Failure::Busy(_) => self.latitude.retry,
            Failure::Down => self.latitude.hedge,
        };
        if ok {
            Decision::Retry
        } else {
            Decision::Stop
        }
    }

    /// tower's `hedge::Policy::can_retry`: may another copy start now, with `running` attempts in
    /// flight and `attempts` made so far?
    pub fn can_hedge(&self, running: usize, attempts: usize) -> bool {
        self.latitude.hedge
            && self.hedge_after.is_some()
            && running < 1 + self.max_extra
            && attempts < self.max_attempts
    }
}
