//! Server-side metrics of each run, from `system.query_log`.
//!
//! After all runs, each side gets `SYSTEM FLUSH LOGS`, then its query_log rows are read by the
//! query_ids chstorm set: `query_duration_ms` (ms), `read_rows`, `memory_usage` (bytes) and every
//! ProfileEvent (in the event's own unit; an event missing from a run counts as 0, as the server
//! only lists events that happened).
//!
//! This goes over HTTP ([`chstorm_data::SqlClient`]): a side whose URL is native needs an
//! http(s) URL of the same server (`--left-http` / `--right-http`) for server metrics and
//! flamegraphs; without one, the side has client time only.
//!
//! Nothing about a version is assumed; the server is asked ([`Caps::detect`]):
//! * ProfileEvents are `ProfileEvents.Names` / `ProfileEvents.Values` arrays on old servers
//!   (18.16) and a `Map(String, UInt64)` named `ProfileEvents` on current ones (21.x+): the
//!   columns of `system.query_log` say which.
//! * `type` is a UInt8 on old servers and an Enum8 on current ones.
//! * `system.trace_log` exists only where the server has the query profiler (20.x+) and its
//!   section is configured.
//! * The profiler settings exist where `system.settings` lists
//!   `query_profiler_real_time_period_ns`.

use chstorm_data::SqlClient;
use chstorm_proto::{ProtoError, TlsOptions};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// Metrics of one run: name → value.
pub type RunMetrics = BTreeMap<String, f64>;

/// The query_log columns read for every run, besides ProfileEvents.
pub const BASE_METRICS: [&str; 3] = ["query_duration_ms", "read_rows", "memory_usage"];

/// How a server keeps ProfileEvents in query_log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileEventsForm {
    /// `ProfileEvents.Names` and `ProfileEvents.Values` arrays (18.16 – 21.x).
    Arrays,
    /// A `ProfileEvents` Map (current releases).
    Map,
    /// Neither column exists.
    None,
}

/// What a server can tell, found by asking it.
#[derive(Debug, Clone, Serialize)]
pub struct Caps {
    pub version: String,
    /// `system.query_log` exists (after a flush).
    pub query_log: bool,
    pub profile_events: ProfileEventsForm,
    /// `query_log.type` is an Enum (compare with 'QueryFinish') rather than a number (2).
    #[serde(skip)]
    pub type_is_enum: bool,
    /// `system.trace_log` exists.
    pub trace_log: bool,
    /// `trace_log` has a `trace_type` column (20.x+), so samples can be limited to 'Real'.
    #[serde(skip)]
    pub trace_type_column: bool,
    /// The server knows `query_profiler_real_time_period_ns`.
    pub profiler_setting: bool,
}

/// A server's query_log (and trace_log), read over HTTP.
pub struct MetricsSource {
    pub client: SqlClient,
    pub url: String,
    pub caps: Caps,
}

impl MetricsSource {
    /// Connects and asks what the server has. `timeout` bounds each statement.
    pub fn open(url: &str, tls: &TlsOptions, timeout: Duration) -> Result<MetricsSource, ProtoError> {
        let mut client = SqlClient::new(url, tls)?;
        client.timeout = timeout;
        let caps = Caps::detect(&mut client)?;
        Ok(MetricsSource { client, url: client_url(url), caps })
    }

    /// `SYSTEM FLUSH LOGS`, then detects again: the log tables of a fresh server appear at the
    /// first flush.
    pub fn flush(&mut self) -> Result<(), ProtoError> {
        self.client.query("SYSTEM FLUSH LOGS")?;
        self.caps = Caps::detect(&mut self.client)?;
        Ok(())
    }

    /// The metrics of the finished runs among `ids`, by query_id. Runs without a query_log row
    /// (log_queries off, or not flushed) are missing from the map.
    pub fn fetch(&mut self, ids: &[String]) -> Result<HashMap<String, RunMetrics>, ProtoError> {
        let mut out: HashMap<String, RunMetrics> = HashMap::new();
        if !self.caps.query_log || ids.is_empty() {
            return Ok(out);
        }
        let where_ = self.where_clause(ids);
        let sql = format!(
            "SELECT query_id, {} FROM system.query_log WHERE {where_} FORMAT TabSeparated",
            BASE_METRICS.join(", ")
        );
        for line in self.client.query(&sql)?.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() != 1 + BASE_METRICS.len() {
                continue;
            }
            let m = out.entry(f[0].to_string()).or_default();
            for (name, v) in BASE_METRICS.iter().zip(&f[1..]) {
                if let Ok(v) = v.parse::<f64>() {
                    m.insert((*name).to_string(), v);
                }
            }
        }
        let join = match self.caps.profile_events {
            ProfileEventsForm::Arrays => "ARRAY JOIN ProfileEvents.Names AS name, ProfileEvents.Values AS value",
            ProfileEventsForm::Map => "ARRAY JOIN mapKeys(ProfileEvents) AS name, mapValues(ProfileEvents) AS value",
            ProfileEventsForm::None => return Ok(out),
        };
        let sql =
            format!("SELECT query_id, name, value FROM system.query_log {join} WHERE {where_} FORMAT TabSeparated");
        for line in self.client.query(&sql)?.lines() {
            let mut f = line.split('\t');
            let (Some(id), Some(name), Some(v)) = (f.next(), f.next(), f.next()) else { continue };
            if let (Some(m), Ok(v)) = (out.get_mut(id), v.parse::<f64>()) {
                m.insert(name.to_string(), v);
            }
        }
        Ok(out)
    }

    fn where_clause(&self, ids: &[String]) -> String {
        let finish = if self.caps.type_is_enum { "'QueryFinish'" } else { "2" };
        format!("type = {finish} AND event_date >= yesterday() AND query_id IN ({})", quote_list(ids))
    }
}

impl Caps {
    /// Asks the server for its version, its log tables and their columns.
    pub fn detect(c: &mut SqlClient) -> Result<Caps, ProtoError> {
        let version = c.query("SELECT version()")?.trim().to_string();
        let tables: BTreeSet<String> = c
            .query("SELECT name FROM system.tables WHERE database = 'system' AND name IN ('query_log', 'trace_log')")?
            .lines()
            .map(str::to_string)
            .collect();
        let columns = |c: &mut SqlClient, table: &str| -> Result<BTreeMap<String, String>, ProtoError> {
            Ok(c.query(&format!(
                "SELECT name, type FROM system.columns WHERE database = 'system' AND table = '{table}' FORMAT TabSeparated"
            ))?
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect())
        };
        let ql = columns(c, "query_log")?;
        let profile_events = if ql.get("ProfileEvents").is_some_and(|t| t.starts_with("Map")) {
            ProfileEventsForm::Map
        } else if ql.contains_key("ProfileEvents.Names") && ql.contains_key("ProfileEvents.Values") {
            ProfileEventsForm::Arrays
        } else {
            ProfileEventsForm::None
        };
        let trace_log = tables.contains("trace_log");
        let trace_type_column = trace_log && columns(c, "trace_log")?.contains_key("trace_type");
        let profiler_setting =
            c.query_u64("SELECT count() FROM system.settings WHERE name = 'query_profiler_real_time_period_ns'")? > 0;
        Ok(Caps {
            version,
            query_log: tables.contains("query_log"),
            profile_events,
            type_is_enum: ql.get("type").is_some_and(|t| t.starts_with("Enum")),
            trace_log,
            trace_type_column,
            profiler_setting,
        })
    }
}

/// `'a', 'b'` with quotes and backslashes escaped.
pub fn quote_list(ids: &[String]) -> String {
    ids.iter().map(|s| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))).collect::<Vec<_>>().join(", ")
}

/// The URL as shown (no password).
fn client_url(url: &str) -> String {
    chstorm_proto::Target::parse(url).map(|t| t.to_string()).unwrap_or_else(|_| "?".into())
}

/// The values of `metric` over `runs` (in order), for runs that have a query_log row; an event
/// missing from a row counts as 0.
pub fn series(rows: &HashMap<String, RunMetrics>, runs: &[String], metric: &str) -> Vec<f64> {
    runs.iter().filter_map(|id| rows.get(id)).map(|m| m.get(metric).copied().unwrap_or(0.0)).collect()
}

/// Every metric name any of these runs has, base metrics first, then ProfileEvents by name.
pub fn metric_names<'a>(rows: impl IntoIterator<Item = &'a RunMetrics>) -> Vec<String> {
    let mut names: BTreeSet<&str> = BTreeSet::new();
    for m in rows {
        names.extend(m.keys().map(String::as_str));
    }
    let mut out: Vec<String> = BASE_METRICS.iter().filter(|b| names.contains(**b)).map(|s| s.to_string()).collect();
    out.extend(names.into_iter().filter(|n| !BASE_METRICS.contains(n)).map(str::to_string));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_and_series() {
        assert_eq!(quote_list(&["a".into(), "b'c\\".into()]), "'a', 'b\\'c\\\\'");
        let mut rows = HashMap::new();
        rows.insert("1".to_string(), RunMetrics::from([("read_rows".to_string(), 5.0), ("Seek".to_string(), 2.0)]));
        rows.insert("2".to_string(), RunMetrics::from([("read_rows".to_string(), 7.0)]));
        let ids = ["1".to_string(), "2".to_string(), "3".to_string()];
        assert_eq!(series(&rows, &ids, "read_rows"), vec![5.0, 7.0]);
        assert_eq!(series(&rows, &ids, "Seek"), vec![2.0, 0.0], "a missing event is 0; a missing row is skipped");
        let names = metric_names(rows.values());
        assert_eq!(names, vec!["read_rows".to_string(), "Seek".to_string()]);
    }
}
