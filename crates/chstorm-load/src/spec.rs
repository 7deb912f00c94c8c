//! What a run does.

use crate::schedule::Schedule;
use crate::template::Template;
use chstorm_proto::{Target, TlsOptions};
use std::sync::Arc;
use std::time::Duration;

/// What each request is.
#[derive(Debug, Clone)]
pub enum Work {
    /// `GET /ping` over HTTP, a Ping packet over the native protocol: the server's network
    /// layer alone, no query.
    Ping,
    /// Queries, taken in turn (or at random with `randomize`).
    Queries { templates: Vec<Arc<Template>>, randomize: bool },
}

/// A complete description of one run.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub target: Target,
    pub tls: TlsOptions,
    pub work: Work,
    /// Settings added to every query (after the URL's own). HTTP: URL parameters; native: a
    /// `SETTINGS` clause appended to the query (portable to every server version).
    pub settings: Vec<(String, String)>,
    /// Connections. Closed loop: queries in flight; open loop: the ceiling on them.
    pub concurrency: usize,
    pub schedule: Schedule,
    /// Measured length of the run (after warm-up). At least one of `duration` and `requests`
    /// must be set; the run ends at whichever comes first.
    pub duration: Option<Duration>,
    /// Measured queries to send (after warm-up).
    pub requests: Option<u64>,
    /// Time before measuring starts; its queries are sent but not recorded. Default 0.
    pub warmup: Duration,
    /// Per-query timeout, connect included. Default 30 s.
    pub timeout: Duration,
    /// Reuse connections (true) or open one per query.
    pub keepalive: bool,
    /// Stop once this many measured queries failed.
    pub max_errors: Option<u64>,
    /// Seed of the placeholder generators.
    pub seed: u64,
    /// Worker threads (each a single-threaded runtime). Default: min(cores, concurrency).
    pub threads: usize,
}

impl LoadSpec {
    /// Checks the numbers before anything is started.
    pub fn validate(&self) -> Result<(), String> {
        if self.concurrency == 0 {
            return Err("--concurrency must be at least 1".into());
        }
        if self.threads == 0 {
            return Err("--threads must be at least 1".into());
        }
        if self.duration.is_none() && self.requests.is_none() {
            return Err("give a run length: --duration and/or --requests".into());
        }
        if self.duration == Some(Duration::ZERO) {
            return Err("--duration must be longer than 0s".into());
        }
        if self.requests == Some(0) {
            return Err("--requests must be at least 1".into());
        }
        if self.timeout.is_zero() {
            return Err("--timeout must be longer than 0s".into());
        }
        if let Work::Queries { templates, .. } = &self.work {
            if templates.is_empty() {
                return Err("no queries to send: give --query, --queries FILE or --ping".into());
            }
        }
        self.schedule.validate()
    }
}
