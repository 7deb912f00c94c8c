//! `--store URL`: each query's metrics go into `chstorm.compare_results`, one row per query and
//! metric, so the history of a query can be read with SQL (as ClickHouse keeps its own).
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS chstorm.compare_results (
//!     date Date, time DateTime, run_id String,
//!     left String, right String, left_version String, right_version String,
//!     query String, metric String,
//!     old Float64, new Float64, diff Float64, threshold Float64,
//!     verdict String, runs_left UInt32, runs_right UInt32
//! ) ENGINE = MergeTree() PARTITION BY toYYYYMM(date) ORDER BY (query, metric, time)
//! ```
//!
//! `old`/`new` are medians in the metric's unit (client_time in seconds); `diff` and `threshold`
//! are fractions of `old`, `nan` where old is 0. A query that failed has one `client_time` row
//! with `nan` values and its error verdict. `left`/`right` are the URLs without passwords.

use crate::result::CompareResult;
use crate::CompareError;
use chstorm_data::SqlClient;
use chstorm_proto::TlsOptions;

/// The table's definition (works on 18.16 and current releases).
pub const CREATE: &str = "CREATE TABLE IF NOT EXISTS chstorm.compare_results (\
date Date, time DateTime, run_id String, left String, right String, left_version String, right_version String, \
query String, metric String, old Float64, new Float64, diff Float64, threshold Float64, \
verdict String, runs_left UInt32, runs_right UInt32\
) ENGINE = MergeTree() PARTITION BY toYYYYMM(date) ORDER BY (query, metric, time)";

/// An open history table.
pub struct Store {
    client: SqlClient,
    target: String,
}

impl Store {
    /// Connects and creates the database and table when missing. Do this before the runs, so a
    /// bad URL fails at once.
    pub fn open(url: &str, tls: &TlsOptions) -> Result<Store, CompareError> {
        let shown = chstorm_proto::Target::parse(url).map(|t| t.to_string()).unwrap_or_else(|_| url.to_string());
        let fail = |source| CompareError::Store { target: shown.clone(), source };
        let mut client = SqlClient::new(url, tls).map_err(fail)?;
        client.query("CREATE DATABASE IF NOT EXISTS chstorm").map_err(fail)?;
        client.query(CREATE).map_err(fail)?;
        Ok(Store { client, target: shown })
    }

    /// Inserts every query's metrics; returns the number of rows.
    pub fn insert(&mut self, r: &CompareResult) -> Result<usize, CompareError> {
        let body = rows(r);
        let n = body.lines().count();
        if n > 0 {
            let sql = format!("INSERT INTO chstorm.compare_results FORMAT TabSeparated\n{body}");
            self.client.query(&sql).map_err(|source| CompareError::Store { target: self.target.clone(), source })?;
        }
        Ok(n)
    }
}

/// The TabSeparated rows for `r`.
pub fn rows(r: &CompareResult) -> String {
    let when = chrono::DateTime::parse_from_rfc3339(&r.date)
        .map(|d| d.with_timezone(&chrono::Utc))
        .unwrap_or_else(|_| chrono::Utc::now());
    let (date, time) = (when.format("%Y-%m-%d").to_string(), when.format("%Y-%m-%d %H:%M:%S").to_string());
    let mut out = String::new();
    for q in &r.queries {
        let mut push = |metric: &str, old: f64, new: f64, diff: Option<f64>, t: Option<f64>, verdict: &str| {
            let fields = [
                date.clone(),
                time.clone(),
                tsv(&r.run_id),
                tsv(&r.left.target),
                tsv(&r.right.target),
                tsv(&r.left.version),
                tsv(&r.right.version),
                tsv(&q.query),
                tsv(metric),
                num(old),
                num(new),
                num(diff.unwrap_or(f64::NAN)),
                num(t.unwrap_or(f64::NAN)),
                verdict.to_string(),
                q.runs.left.to_string(),
                q.runs.right.to_string(),
            ];
            out.push_str(&fields.join("\t"));
            out.push('\n');
        };
        if q.all_metrics.is_empty() {
            push("client_time", f64::NAN, f64::NAN, None, None, q.verdict.as_str());
        }
        for m in &q.all_metrics {
            push(&m.name, m.old, m.new, m.diff, m.threshold, m.verdict.as_str());
        }
    }
    out
}

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else if v.is_nan() {
        "nan".into()
    } else if v > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

/// Escapes a TabSeparated field.
fn tsv(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '\t' => o.push_str("\\t"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_escaped() {
        assert_eq!(tsv("a\tb\nc\\"), "a\\tb\\nc\\\\");
        assert_eq!(num(f64::NAN), "nan");
        assert_eq!(num(0.25), "0.25");
    }
}
