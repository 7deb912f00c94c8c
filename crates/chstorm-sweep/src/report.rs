//! `report.html` from a sweep directory (`suite.json` + `results.jsonl`).

use crate::run::{read_points, REPORT_HTML, SUITE_JSON};
use crate::{SuiteMeta, SweepError, SweepPoint};
use chstorm_report::{Point, ReportInput, Section, Table};
use std::path::{Path, PathBuf};

/// Rebuilds `DIR/report.html`; returns its path.
pub fn write_report(dir: &Path) -> Result<PathBuf, SweepError> {
    let meta_path = dir.join(SUITE_JSON);
    let text = std::fs::read_to_string(&meta_path).map_err(|e| SweepError::Io {
        path: meta_path.display().to_string(),
        source: std::io::Error::new(e.kind(), format!("{e}; is this a sweep directory (chstorm sweep --out DIR)?")),
    })?;
    let meta: SuiteMeta = serde_json::from_str(&text)
        .map_err(|e| SweepError::Invalid(format!("{}: not a chstorm suite.json: {e}", meta_path.display())))?;
    let points = read_points(dir)?;
    let input = build_input(&meta, &points);
    let path = dir.join(REPORT_HTML);
    chstorm_report::write_sweep(&path, &input).map_err(|e| SweepError::Invalid(e.to_string()))?;
    Ok(path)
}

/// The report's input: points in suite order, sections with their extra tables.
pub fn build_input(meta: &SuiteMeta, points: &[SweepPoint]) -> ReportInput {
    let mut env = meta.environment.clone();
    env.server_version = points.iter().find_map(|p| p.result.server_version.clone());
    let sections = meta
        .sections
        .iter()
        .map(|s| Section {
            scenario: s.scenario.clone(),
            description: s.description.clone(),
            extra_tables: match s.table.as_deref() {
                Some("threads") => vec![threads_table(&s.scenario, points)],
                _ => vec![],
            },
        })
        .collect();
    ReportInput {
        title: format!("chstorm sweep: {}", meta.suite),
        environment: env,
        points: points
            .iter()
            .map(|p| Point {
                scenario: p.scenario.clone(),
                variant: p.variant.clone(),
                concurrency: p.concurrency,
                result: p.result.clone(),
            })
            .collect(),
        sections,
    }
}

/// The threads table of the total_max_threads proposal: per variant (max_threads), QPS and time
/// at the lowest and the highest concurrency, and the total time.
pub fn threads_table(scenario: &str, points: &[SweepPoint]) -> Table {
    let pts: Vec<&SweepPoint> = points.iter().filter(|p| p.scenario == scenario).collect();
    let lo = pts.iter().map(|p| p.concurrency).min().unwrap_or(1);
    let hi = pts.iter().map(|p| p.concurrency).max().unwrap_or(1);
    let mut variants: Vec<&str> = Vec::new();
    for p in &pts {
        if !variants.contains(&p.variant.as_str()) {
            variants.push(&p.variant);
        }
    }
    let find = |v: &str, c: u64| pts.iter().find(|p| p.variant == v && p.concurrency == c);
    let mut rows = Vec::new();
    for v in variants {
        let label = v.split_whitespace().filter(|w| w.contains('=')).collect::<Vec<_>>().join(" ");
        let (a, b) = (find(v, lo), find(v, hi));
        let cell_qps = |p: Option<&&SweepPoint>| p.map_or("-".to_string(), |p| format!("{:.2}", p.result.qps));
        let cell_t = |p: Option<&&SweepPoint>| p.map_or("-".to_string(), |p| format!("{:.2}", p.result.duration_s));
        let total = match (a, b) {
            (Some(a), Some(b)) => format!("{:.2}", a.result.duration_s + b.result.duration_s),
            _ => "-".into(),
        };
        rows.push(vec![
            if label.is_empty() { v.to_string() } else { label },
            cell_qps(a),
            cell_t(a),
            cell_qps(b),
            cell_t(b),
            total,
        ]);
    }
    Table {
        title: "Threads: the total_max_threads benchmark table".into(),
        columns: vec![
            "settings".into(),
            format!("QPS, {lo} client(s)"),
            format!("time s, {lo} client(s)"),
            format!("QPS, {hi} clients"),
            format!("time s, {hi} clients"),
            "total time s".into(),
        ],
        rows,
        note: Some(
            "Each point sends the same fixed number of queries; time is how long that took. Lower total is better."
                .to_string(),
        ),
    }
}
