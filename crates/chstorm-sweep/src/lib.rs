//! Scenario suites swept over protocols, settings and concurrency.
//!
//! * [`suite`]: the YAML format, validated with errors that name file, line and field.
//! * [`plan`]: a suite becomes a list of points (scenario × protocol × settings × params ×
//!   concurrency).
//! * [`run`]: each point runs through the bench engine; results are appended to
//!   `results.jsonl` and `results.csv` as each point finishes, so a re-run skips finished
//!   points (resume) and a Ctrl-C keeps them. A finished point is reused only when its
//!   [`PointIdentity`] (suite, target, settings, duration, queries, ...) is the one the re-run
//!   would measure; otherwise the sweep refuses, or with `--restart` starts over.
//! * [`report`]: `report.html` from a sweep directory.
//! * [`store`]: `--store URL` also writes each point into `chstorm.results`.
//!
//! # Boundaries
//!
//! This crate owns suites, sweep plans, resumable results and `--store`. It builds on
//! `chstorm-proto`, `chstorm-load`, `chstorm-output`, `chstorm-data`, `chstorm-report` and
//! `chstorm-yaml`; it must not import compare, the gateway, the isolation or colocate crates or
//! the CLI, and uses the local harness only in its tests.

pub mod plan;
pub mod report;
pub mod run;
pub mod store;
pub mod suite;

pub use plan::Targets;
pub use run::{read_points, sweep, SweepOptions, SweepOutcome, REPORT_HTML, RESULTS_CSV, RESULTS_JSONL, SUITE_JSON};
pub use suite::{Suite, SuiteError};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Errors of a sweep.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("{0}")]
    Suite(#[from] SuiteError),
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

/// One finished point, as a line of `results.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepPoint {
    /// `scenario|variant|c=N`, unique within the suite.
    pub key: String,
    pub scenario: String,
    pub variant: String,
    pub protocol: String,
    pub params: BTreeMap<String, String>,
    pub concurrency: u64,
    /// The point's full bench result (`chstorm.bench.v1`).
    pub result: chstorm_output::BenchReport,
    /// What the point was measured with, and its fingerprint: a resumed sweep reuses the point
    /// only when both match. Absent in lines written by older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<PointIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

/// Everything that makes two measurements of a point comparable.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PointIdentity {
    pub suite: String,
    /// The URL measured, without password.
    pub target: String,
    /// The URL's settings, then the point's.
    pub settings: Vec<(String, String)>,
    /// Planned measured length in seconds (None: a fixed number of queries).
    pub duration_s: Option<f64>,
    pub requests: Option<u64>,
    pub warmup_s: f64,
    pub concurrency: u64,
    pub keepalive: bool,
    /// The queries as sent (placeholders unrendered), or `ping`.
    pub queries: Vec<String>,
    /// The placeholder seed.
    pub seed: u64,
}

impl PointIdentity {
    /// A stable fingerprint (FNV-1a 64 over the identity's JSON, hex): the same identity gives
    /// the same fingerprint on every machine and chstorm version.
    pub fn fingerprint(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    /// What differs between `self` (finished) and `other` (to be measured), for messages:
    /// `target http://a/ (now http://b/)`.
    pub fn differences(&self, other: &PointIdentity) -> Vec<String> {
        let mut out = Vec::new();
        let mut diff = |name: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{name} {a} (now {b})"));
            }
        };
        let secs = |d: Option<f64>| d.map_or("none".to_string(), |s| format!("{s}s"));
        let list = |v: &[(String, String)]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.iter().map(|(k, x)| format!("{k}={x}")).collect::<Vec<_>>().join(",")
            }
        };
        diff("suite", self.suite.clone(), other.suite.clone());
        diff("target", self.target.clone(), other.target.clone());
        diff("settings", list(&self.settings), list(&other.settings));
        diff("duration", secs(self.duration_s), secs(other.duration_s));
        diff("requests", format!("{:?}", self.requests), format!("{:?}", other.requests));
        diff("warmup", format!("{}s", self.warmup_s), format!("{}s", other.warmup_s));
        diff("concurrency", self.concurrency.to_string(), other.concurrency.to_string());
        diff("keep-alive", self.keepalive.to_string(), other.keepalive.to_string());
        diff("queries", self.queries.join("; "), other.queries.join("; "));
        diff("seed", self.seed.to_string(), other.seed.to_string());
        out
    }
}

/// `suite.json`: what the sweep directory holds, for `chstorm report`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SuiteMeta {
    pub suite: String,
    pub description: String,
    pub quick: bool,
    pub sections: Vec<SectionMeta>,
    pub environment: chstorm_report::Environment,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SectionMeta {
    pub scenario: String,
    pub description: String,
    pub table: Option<String>,
}

/// Total memory of this machine in bytes, from /proc/meminfo (0 when unknown).
fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()))
        })
        .map_or(0, |kb| kb * 1024)
}

impl SuiteMeta {
    pub fn new(suite: &Suite, quick: bool, targets: &Targets) -> SuiteMeta {
        let urls: Vec<String> = [&targets.http, &targets.https, &targets.native, &targets.native_tls]
            .into_iter()
            .flatten()
            .filter_map(|u| chstorm_proto::Target::parse(u).ok().map(|t| t.to_string()))
            .collect();
        let loopback = urls.iter().all(|u| chstorm_proto::Target::parse(u).map(|t| t.is_loopback()).unwrap_or(false));
        let mut notes = vec![format!(
            "cores and memory are this client machine's{}",
            if loopback { "; the server runs on it too (loopback)" } else { "" }
        )];
        if quick {
            notes.push("quick mode: short points, few concurrency levels".into());
        }
        SuiteMeta {
            suite: suite.name.clone(),
            description: suite.description.clone(),
            quick,
            sections: suite
                .scenarios
                .iter()
                .map(|s| SectionMeta {
                    scenario: s.name.clone(),
                    description: s.description.clone(),
                    table: s.table.clone(),
                })
                .collect(),
            environment: chstorm_report::Environment {
                server_version: None,
                cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
                memory_bytes: memory_bytes(),
                chstorm_version: env!("CARGO_PKG_VERSION").to_string(),
                date: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                target: urls.join(", "),
                suite: suite.name.clone(),
                notes,
            },
        }
    }
}
