//! `--store URL`: every point also goes into a ClickHouse table, so history can be queried
//! with SQL (as ClickHouse's own performance tests keep theirs).
//!
//! ```sql
//! CREATE TABLE chstorm.results (
//!     stored DateTime, started_at String, suite String, scenario String, variant String,
//!     protocol String, concurrency UInt32, qps Float64, queries UInt64, errors UInt64,
//!     p50 Float64, p90 Float64, p99 Float64, p999 Float64, max Float64, duration_s Float64,
//!     server_version String, chstorm_version String, target String, settings String, report String
//! ) ENGINE = MergeTree ORDER BY (suite, scenario, variant, concurrency, stored)
//! ```
//! Latencies are in seconds; `report` holds the point's whole `chstorm.bench.v1` JSON.

use crate::{SweepError, SweepPoint};
use chstorm_data::SqlClient;
use chstorm_proto::TlsOptions;

pub struct Store {
    client: SqlClient,
}

/// The table definition (18.16-compatible).
pub const CREATE: &str =
    "CREATE TABLE IF NOT EXISTS chstorm.results (stored DateTime, started_at String, suite String, \
scenario String, variant String, protocol String, concurrency UInt32, qps Float64, queries UInt64, errors UInt64, \
p50 Float64, p90 Float64, p99 Float64, p999 Float64, max Float64, duration_s Float64, server_version String, \
chstorm_version String, target String, settings String, report String) \
ENGINE = MergeTree ORDER BY (suite, scenario, variant, concurrency, stored)";

impl Store {
    pub fn open(url: &str, tls: &TlsOptions) -> Result<Store, SweepError> {
        let bad = |e: chstorm_proto::ProtoError| SweepError::Invalid(format!("--store {url}: {e}"));
        let mut client = SqlClient::new(url, tls).map_err(bad)?;
        client.query("CREATE DATABASE IF NOT EXISTS chstorm").map_err(bad)?;
        client.query(CREATE).map_err(bad)?;
        Ok(Store { client })
    }

    pub fn insert(&mut self, suite: &str, p: &SweepPoint) -> Result<(), chstorm_proto::ProtoError> {
        let r = &p.result;
        let settings: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let row = serde_json::json!({
            "stored": chrono::Utc::now().format("%Y-%m-%d %H:%M:%S").to_string(),
            "started_at": r.started_at, "suite": suite, "scenario": p.scenario, "variant": p.variant,
            "protocol": p.protocol, "concurrency": p.concurrency, "qps": r.qps, "queries": r.queries,
            "errors": r.errors, "p50": r.latency_s.p50, "p90": r.latency_s.p90, "p99": r.latency_s.p99,
            "p999": r.latency_s.p99_9, "max": r.latency_s.max, "duration_s": r.duration_s,
            "server_version": r.server_version.clone().unwrap_or_default(), "chstorm_version": r.chstorm_version,
            "target": r.target, "settings": settings.join(";"), "report": serde_json::to_string(r).unwrap_or_default(),
        });
        self.client.query(&format!("INSERT INTO chstorm.results FORMAT JSONEachRow {row}"))?;
        Ok(())
    }
}
