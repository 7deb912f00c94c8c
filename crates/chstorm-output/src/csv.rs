//! One CSV row per run.
//!
//! The first 18 columns are those of Altinity's clickhouse-sts results file (latencies in
//! seconds), so existing spreadsheets keep working; chstorm's own columns follow.

use crate::report::BenchReport;
use crate::OutputError;
use std::io::Write;
use std::path::Path;

/// The header line, without newline.
pub const HEADER: &str = "test_name,test_subtype1,test_subtype2,test_subtype3,protocol,http_keepalive,concurrency,QPS,num_queries,MiBPS_result,\
latency_0percentile,latency_20percentile,latency_50percentile,latency_80percentile,latency_90percentile,latency_95percentile,latency_99percentile,latency_999percentile,\
errors,mode,rate,duration_s,latency_mean,latency_9999percentile,latency_max,late,dropped,stop_reason,server_version,chstorm_version,started_at,target,settings";

fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The row for `r`. `test_name` is the run's label (or `bench`); subtypes are the label's
/// `/`-separated parts after the first.
pub fn row(r: &BenchReport) -> String {
    // clickhouse-sts also reports the 20th and 80th percentiles: read them off the histogram.
    let (hist_p20, hist_p80) = chstorm_stats::LatencyHistogram::from_base64(&r.histogram)
        .map(|h| (h.percentile_s(20.0), h.percentile_s(80.0)))
        .unwrap_or((0.0, 0.0));
    let label = r.label.clone().unwrap_or_else(|| "bench".into());
    let mut parts = label.split('/').map(str::to_string);
    let name = parts.next().unwrap_or_default();
    let subs: Vec<String> = parts.chain(std::iter::repeat(String::new())).take(3).collect();
    let l = &r.latency_s;
    let mibs = if r.duration_s > 0.0 { r.bytes as f64 / r.duration_s / 1048576.0 } else { 0.0 };
    let settings: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let fields: Vec<String> = vec![
        quote(&name),
        quote(&subs[0]),
        quote(&subs[1]),
        quote(&subs[2]),
        r.protocol.clone(),
        (r.keepalive as u8).to_string(),
        r.concurrency.to_string(),
        format!("{:.3}", r.qps),
        r.queries.to_string(),
        format!("{mibs:.6}"),
        format!("{:.6}", l.min),
        format!("{hist_p20:.6}"),
        format!("{:.6}", l.p50),
        format!("{hist_p80:.6}"),
        format!("{:.6}", l.p90),
        format!("{:.6}", l.p95),
        format!("{:.6}", l.p99),
        format!("{:.6}", l.p99_9),
        r.errors.to_string(),
        r.mode.clone(),
        r.rate.map(|x| x.to_string()).unwrap_or_default(),
        format!("{:.3}", r.duration_s),
        format!("{:.6}", l.mean),
        format!("{:.6}", l.p99_99),
        format!("{:.6}", l.max),
        r.late.to_string(),
        r.dropped.to_string(),
        r.stop_reason.clone(),
        quote(r.server_version.as_deref().unwrap_or("")),
        r.chstorm_version.clone(),
        r.started_at.clone(),
        quote(&r.target),
        quote(&settings.join(";")),
    ];
    fields.join(",")
}

/// Appends `row` to the CSV file at `path`, writing the header first when the file is new or
/// empty. Refuses to append under a different header.
pub fn append(path: &Path, row: &str) -> Result<(), OutputError> {
    let io = |e| OutputError::Io { path: path.display().to_string(), source: e };
    let existing = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io(e)),
    };
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(io)?;
    if existing.trim().is_empty() {
        writeln!(f, "{HEADER}").map_err(io)?;
    } else if existing.lines().next() != Some(HEADER) {
        return Err(OutputError::CsvHeader { path: path.display().to_string() });
    }
    writeln!(f, "{row}").map_err(io)
}
