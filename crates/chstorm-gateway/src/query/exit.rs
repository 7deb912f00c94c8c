//! `exit`: the one place that records a query's end, for both fronts. Every outcome (a refusal
//! at admission, authentication or the plan, a failure of the attempts, an answer passed on) is
//! counted in `chstorm_gateway_requests_total` (user, status, route) and observed in
//! `chstorm_gateway_request_duration_seconds` (route) here, so no exit skips the metrics. The
//! HTTP front turns the outcome into a response (`crate::http::respond`), the native front into
//! packets (`crate::native::query`); both record through an [`Exit`].

use super::refusal::Refusal;
use crate::metrics::{Metrics, RequestLabels, RouteLabel};
use std::time::Instant;

/// The route label of a query refused before any backend saw it.
pub const REJECTED: &str = "rejected";

/// Who a query is recorded under, and since when.
pub struct Exit<'a> {
    pub metrics: &'a Metrics,
    /// The user label (a configured name, or `crate::metrics::UNKNOWN_USER`).
    pub user: &'a str,
    pub started: Instant,
}

impl<'a> Exit<'a> {
    /// A query of `user` that started now.
    pub fn new(metrics: &'a Metrics, user: &'a str) -> Exit<'a> {
        Exit { metrics, user, started: Instant::now() }
    }

    /// Records the end of the query: `status` (HTTP, or the native front's equivalent) on
    /// `route` (`rejected`, `routed`, `fanout`, `session`), and its duration.
    pub fn record(&self, status: u16, route: &'static str) {
        let labels = RequestLabels { user: self.user.to_string(), status, route };
        self.metrics.requests.get_or_create(&labels).inc();
        self.metrics.duration.get_or_create(&RouteLabel { route }).observe(self.started.elapsed().as_secs_f64());
    }

    /// Records a refusal (route `rejected`).
    pub fn refused(&self, refusal: &Refusal) {
        self.record(refusal.status().as_u16(), REJECTED);
    }
}
