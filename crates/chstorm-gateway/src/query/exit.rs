//! `exit`: the one place that records a query's end, for both fronts. Every outcome (a refusal
//! at admission, authentication or the plan, a failure of the attempts, an answer passed on) is
//! counted in `chstorm_gateway_requests_total` (user, status, route) and observed in
//! `chstorm_gateway_request_duration_seconds` (route) here, so no exit skips the metrics. The
//! HTTP front turns the outcome into a response (`crate::http::respond`), the native front into
//! packets (`crate::native::query`); both record through an [`Exit`].

use super::refusal::Refusal;
use crate::metrics::{Metrics, RequestLabels, RouteLabel};
use std::time::Instant;

/// A worker thread's series of `requests` and `duration` already looked up, by metrics, user,
/// status and route: a query's exit finds its two series in this short list, where the families
/// would cost a label allocation, a hash and a lock each time. At most [`MAX_HANDLES`]; a full
/// list starts over (the series stay in the families).
struct Handles {
    metrics: u64,
    user: Box<str>,
    status: u16,
    route: &'static str,
    requests: prometheus_client::metrics::counter::Counter,
    duration: prometheus_client::metrics::histogram::Histogram,
}

/// The most series pairs one thread keeps at hand: 64.
const MAX_HANDLES: usize = 64;

thread_local! {
    static HANDLES: std::cell::RefCell<Vec<Handles>> = const { std::cell::RefCell::new(Vec::new()) };
}

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
        let seconds = self.started.elapsed().as_secs_f64();
        let m = self.metrics;
        HANDLES.with_borrow_mut(|handles| {
            let same =
                |h: &&Handles| h.metrics == m.id && h.status == status && h.route == route && *h.user == *self.user;
            if let Some(h) = handles.iter().find(same) {
                h.requests.inc();
                h.duration.observe(seconds);
                return;
            }
            let labels = RequestLabels { user: self.user.to_string(), status, route };
            let requests = m.requests.get_or_create(&labels).clone();
            let duration = m.duration.get_or_create(&RouteLabel { route }).clone();
            requests.inc();
            duration.observe(seconds);
            if handles.len() >= MAX_HANDLES {
                handles.clear();
            }
            handles.push(Handles { metrics: m.id, user: self.user.into(), status, route, requests, duration });
        });
    }

    /// Records a refusal (route `rejected`).
    pub fn refused(&self, refusal: &Refusal) {
        self.record(refusal.status().as_u16(), REJECTED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(m: &Metrics, user: &str, status: u16, route: &'static str) -> u64 {
        m.requests.get_or_create(&RequestLabels { user: user.into(), status, route }).get()
    }

    fn durations(m: &Metrics, route: &str) -> String {
        let text = m.render_for(None).0;
        let at = format!("chstorm_gateway_request_duration_seconds_count{{route=\"{route}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&at)).unwrap_or("none").to_string()
    }

    #[test]
    fn every_exit_counts_in_its_own_gateways_series() {
        let (a, b) = (Metrics::default(), Metrics::default());
        for _ in 0..3 {
            Exit::new(&a, "u1").record(200, "fanout");
        }
        Exit::new(&a, "u2").record(200, "fanout");
        Exit::new(&b, "u1").record(200, "fanout");
        Exit::new(&a, "u1").record(500, "fanout");
        Exit::new(&a, "u1").record(200, "routed");
        assert_eq!(count(&a, "u1", 200, "fanout"), 3);
        assert_eq!(count(&a, "u2", 200, "fanout"), 1);
        assert_eq!(count(&a, "u1", 500, "fanout"), 1);
        assert_eq!(count(&a, "u1", 200, "routed"), 1);
        assert_eq!(count(&b, "u1", 200, "fanout"), 1, "another gateway's metrics");
        assert_eq!(durations(&a, "fanout"), "5");
        assert_eq!(durations(&b, "fanout"), "1");
        // More series than a thread keeps at hand: each is still counted, every time.
        let users: Vec<String> = (0..MAX_HANDLES * 2 + 3).map(|i| format!("v{i}")).collect();
        for _ in 0..2 {
            for u in &users {
                Exit::new(&a, u).record(200, "session");
            }
        }
        assert!(users.iter().all(|u| count(&a, u, 200, "session") == 2));
        assert_eq!(durations(&a, "session"), (users.len() * 2).to_string());
    }
}
