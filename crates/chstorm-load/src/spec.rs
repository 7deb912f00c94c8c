//! What a run does.

use crate::schedule::Schedule;
use crate::segment::Segment;
use crate::template::Template;
use chstorm_proto::{Target, TlsOptions};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Longest measured run (`--duration`) and ramp (`--ramp-over`): 7 days.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longest warm-up (`--warmup`): 1 day.
pub const MAX_WARMUP: Duration = Duration::from_secs(24 * 3600);
/// Longest per-query timeout (`--timeout`): 1 day.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Most connections (`--concurrency`): 100,000.
pub const MAX_CONCURRENCY: usize = 100_000;
/// Most measured queries (`--requests`): 10^12.
pub const MAX_REQUESTS: u64 = 1_000_000_000_000;
/// Highest arrival rate (`--rate`, `--ramp-to`): 10,000,000 queries per second.
pub const MAX_RATE: f64 = 10_000_000.0;
/// Most client threads (`--threads`): 1024.
pub const MAX_THREADS: usize = 1024;

/// "7 days", "1 day", "30s": a limit as people say it.
pub fn describe_limit(d: Duration) -> String {
    match d.as_secs() {
        s if s % 86_400 == 0 && s > 0 => format!("{} day{}", s / 86_400, if s == 86_400 { "" } else { "s" }),
        _ => humantime::format_duration(d).to_string(),
    }
}

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
    /// Which part of the workload this process runs (see [`crate::segment`]); `concurrency`
    /// and `requests` are already this segment's share ([`LoadSpec::segmented`]), `schedule`
    /// is the whole workload's. Default: the whole.
    pub segment: Segment,
    /// Start the clock at this wall-clock instant instead of as soon as the connections are
    /// open: the connections open [`crate::segment::CONNECT_LEAD`] before it. None: at once.
    pub start_at: Option<SystemTime>,
}

impl LoadSpec {
    /// The most queries this workload will send after warm-up, when that is known before the
    /// run: `--requests`, or an open loop's sends due within `--duration` (the smaller when both
    /// are given). None for a closed loop with a duration alone. Ask the whole workload, before
    /// [`LoadSpec::segmented`], for the figure of all segments together.
    pub fn planned_sends(&self) -> Option<u64> {
        let due = match (self.schedule.is_open(), self.duration) {
            (true, Some(d)) => {
                let (w, end) = (self.warmup, self.warmup + d);
                Some(self.schedule.due_before(end).saturating_sub(self.schedule.due_before(w)))
            }
            _ => None,
        };
        match (self.requests, due) {
            (Some(n), Some(d)) => Some(n.min(d)),
            (n, d) => n.or(d),
        }
    }

    /// This spec cut down to `segment`'s share of the connections and of `--requests`; the
    /// schedule stays the whole one (the engine makes this segment's sends of it). Refuses a
    /// split that leaves the segment no connection or no query.
    pub fn segmented(mut self, segment: Segment) -> Result<LoadSpec, String> {
        if segment.is_whole() {
            return Ok(self);
        }
        let n = segment.count;
        let connections = segment.share_of(self.concurrency as u64) as usize;
        if connections == 0 {
            return Err(format!(
                "--segment {segment}: -c {} split in {n} segments leaves this one no connection; give -c of at least {n}",
                self.concurrency
            ));
        }
        if let Some(r) = self.requests {
            if segment.share_of(r) == 0 {
                return Err(format!(
                    "--segment {segment}: -n {r} split in {n} segments leaves this one no query; give -n of at least {n}"
                ));
            }
            self.requests = Some(segment.share_of(r));
        }
        self.concurrency = connections;
        self.threads = self.threads.min(connections).max(1);
        self.segment = segment;
        Ok(self)
    }

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
        let too_long = |flag: &str, d: Duration, max: Duration| {
            (d > max).then(|| {
                format!(
                    "{flag} {} is longer than {}, the most chstorm accepts",
                    humantime::format_duration(d),
                    describe_limit(max)
                )
            })
        };
        if let Some(e) = self
            .duration
            .and_then(|d| too_long("--duration", d, MAX_DURATION))
            .or_else(|| too_long("--warmup", self.warmup, MAX_WARMUP))
            .or_else(|| too_long("--timeout", self.timeout, MAX_TIMEOUT))
        {
            return Err(e);
        }
        if self.concurrency > MAX_CONCURRENCY {
            return Err(format!(
                "--concurrency {} is more than {MAX_CONCURRENCY}, the most chstorm accepts",
                self.concurrency
            ));
        }
        if self.threads > MAX_THREADS {
            return Err(format!("--threads {} is more than {MAX_THREADS}, the most chstorm accepts", self.threads));
        }
        if let Some(n) = self.requests.filter(|n| *n > MAX_REQUESTS) {
            return Err(format!("--requests {n} is more than {MAX_REQUESTS}, the most chstorm accepts"));
        }
        if let Work::Queries { templates, .. } = &self.work {
            if templates.is_empty() {
                return Err("no queries to send: give --query, --queries FILE or --ping".into());
            }
        }
        if let Some(at) = self.start_at {
            crate::segment::check_start_at(at, SystemTime::now())?;
        }
        self.schedule.validate()
    }
}
