//! One CSV row per run.
//!
//! The first 18 columns are those of Altinity's clickhouse-sts results file (latencies in
//! seconds), so existing spreadsheets keep working; chstorm's own columns follow. A run of
//! several scenarios writes a row per scenario (its name in `scenario`) and one for the total
//! (`scenario` = `total`); `verdict` is the thresholds' (`pass`, `fail`, `pending`, or empty).

use crate::report::BenchReport;
use crate::OutputError;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The header line, without newline.
pub const HEADER: &str = "test_name,test_subtype1,test_subtype2,test_subtype3,protocol,http_keepalive,concurrency,QPS,num_queries,MiBPS_result,\
latency_0percentile,latency_20percentile,latency_50percentile,latency_80percentile,latency_90percentile,latency_95percentile,latency_99percentile,latency_999percentile,\
errors,mode,rate,duration_s,latency_mean,latency_9999percentile,latency_max,late,dropped,stop_reason,server_version,chstorm_version,started_at,target,settings,\
scenario,verdict";

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
        quote(r.scenario.as_deref().unwrap_or("")),
        r.verdict.clone().unwrap_or_default(),
    ];
    fields.join(",")
}

/// The rows of `r`: one, or with scenarios one per scenario and then the total's.
pub fn rows(r: &BenchReport) -> Vec<String> {
    if r.scenarios.is_empty() {
        return vec![row(r)];
    }
    let mut total = r.clone();
    total.scenario = Some("total".into());
    r.scenarios.iter().map(row).chain(std::iter::once(row(&total))).collect()
}

/// Bytes of an existing file read to check its header: the header line and its line break.
/// Never more, so a device such as `/dev/zero` cannot make the check read forever.
const HEADER_READ_LIMIT: usize = HEADER.len() + 2;

/// A CSV results file, checked and opened before a run (see [`CsvFile::open`]).
#[derive(Debug)]
pub struct CsvFile {
    path: PathBuf,
    file: std::fs::File,
}

impl CsvFile {
    /// Opens `path` for appending and makes sure rows can go there:
    ///
    /// * a folder is refused;
    /// * an existing regular file must start with chstorm's header line (at most the header's
    ///   length is read); an empty one gets the header;
    /// * a new file, or anything that is not a regular file (`/dev/stdout`, a pipe, a device),
    ///   gets the header now, so a device that cannot be written (`/dev/full`) fails here.
    pub fn open(path: &Path) -> Result<CsvFile, OutputError> {
        let io = |e: std::io::Error| OutputError::Io { path: path.display().to_string(), source: e };
        if path.is_dir() {
            return Err(crate::file::folder_error(path));
        }
        let regular = match std::fs::metadata(path) {
            Ok(m) => m.is_file(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(io(e)),
        };
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if e.kind() == std::io::ErrorKind::NotFound && !dir.is_dir() {
                io(std::io::Error::new(e.kind(), format!("folder {} does not exist", dir.display())))
            } else {
                io(e)
            }
        })?;
        let needs_header = if regular {
            let mut head = Vec::with_capacity(HEADER_READ_LIMIT);
            std::fs::File::open(path).map_err(io)?.take(HEADER_READ_LIMIT as u64).read_to_end(&mut head).map_err(io)?;
            let len = file.metadata().map_err(io)?.len();
            if head.iter().all(u8::is_ascii_whitespace) && len <= head.len() as u64 {
                true
            } else if head.starts_with(HEADER.as_bytes())
                && matches!(&head[HEADER.len()..], [b'\n', ..] | [b'\r', b'\n'])
            {
                false
            } else {
                return Err(OutputError::CsvHeader { path: path.display().to_string() });
            }
        } else {
            true
        };
        if needs_header {
            writeln!(file, "{HEADER}").map_err(io)?;
            file.flush().map_err(io)?;
        }
        Ok(CsvFile { path: path.to_path_buf(), file })
    }

    /// Appends one row.
    pub fn append(&mut self, row: &str) -> Result<(), OutputError> {
        writeln!(self.file, "{row}").map_err(|e| OutputError::Io { path: self.path.display().to_string(), source: e })
    }
}

/// Appends `row` to the CSV file at `path`, writing the header first when the file is new or
/// empty. Refuses to append under a different header.
pub fn append(path: &Path, row: &str) -> Result<(), OutputError> {
    CsvFile::open(path)?.append(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_checked_with_a_bounded_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.csv");
        append(&p, "a").unwrap();
        append(&p, "b").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{HEADER}\na\nb\n"));
        let other = dir.path().join("other.csv");
        std::fs::write(&other, "x,y\n1,2\n").unwrap();
        assert!(matches!(CsvFile::open(&other), Err(OutputError::CsvHeader { .. })));
        // A header that only starts like ours is not ours.
        std::fs::write(&other, format!("{HEADER},extra\n")).unwrap();
        assert!(matches!(CsvFile::open(&other), Err(OutputError::CsvHeader { .. })));
        let e = CsvFile::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a folder"), "{e}");
    }

    #[test]
    fn devices_are_not_read_and_a_full_one_fails_at_once() {
        // /dev/zero would read forever; it is a device, so only the header is written.
        if Path::new("/dev/full").exists() {
            let t = std::time::Instant::now();
            let e = CsvFile::open(Path::new("/dev/full")).unwrap_err().to_string();
            assert!(e.contains("/dev/full"), "{e}");
            assert!(t.elapsed() < std::time::Duration::from_secs(1));
        }
        if Path::new("/dev/null").exists() {
            CsvFile::open(Path::new("/dev/null")).unwrap().append("x").unwrap();
        }
    }
}
