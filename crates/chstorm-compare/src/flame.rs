//! Flamegraphs from `system.trace_log`: samples of the changed queries' runs → folded stacks →
//! SVG (left, right and differential) with `inferno`.
//!
//! The server symbolizes the stacks (`addressToSymbol`, `demangle`; introspection functions are
//! allowed for this one query) and groups samples by query_id and stack; [`fold`] turns the rows
//! into folded lines (`root;caller;callee count`, root first, as `flamegraph.pl` reads them).
//! `trace_log` stores the innermost frame first, so frames are reversed. An empty symbol (an
//! address the server cannot resolve) becomes `[unknown]`; `;` inside a name becomes `:`.
//!
//! Where a server has no `system.trace_log` (18.16, or a server with the `trace_log` section
//! switched off), [`unavailable_reason`] says so, and the report shows that line instead.

use crate::metrics::{quote_list, Caps};
use chstorm_data::SqlClient;
use chstorm_proto::ProtoError;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Folded stacks: `root;...;leaf` → samples.
pub type Folded = BTreeMap<String, u64>;

/// The profiler period chstorm asks for when both servers have the profiler: 10 ms of real time
/// (ClickHouse's own performance tests use the same), so a 0.1 s query yields ~10 samples a run.
pub const PROFILER_PERIOD_NS: u64 = 10_000_000;

/// One row of the samples query: a symbolized stack (innermost frame first, as in trace_log)
/// and how many samples of one query_id had it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct TraceRow {
    pub query_id: String,
    pub frames: Vec<String>,
    #[serde(deserialize_with = "u64_or_string")]
    pub samples: u64,
}

fn u64_or_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum N {
        U(u64),
        S(String),
    }
    match N::deserialize(d)? {
        N::U(v) => Ok(v),
        N::S(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

/// The SQL that reads the samples of `ids` (JSONEachRow rows of [`TraceRow`]).
pub fn samples_sql(ids: &[String], trace_type_column: bool) -> String {
    let real = if trace_type_column { " AND trace_type = 'Real'" } else { "" };
    format!(
        "SELECT query_id, arrayMap(x -> demangle(addressToSymbol(x)), trace) AS frames, count() AS samples \
         FROM system.trace_log WHERE event_date >= yesterday() AND query_id IN ({}){real} \
         GROUP BY query_id, trace \
         SETTINGS allow_introspection_functions = 1, output_format_json_quote_64bit_integers = 0 \
         FORMAT JSONEachRow",
        quote_list(ids)
    )
}

/// Parses JSONEachRow text into rows; the error names the line.
pub fn parse_rows(text: &str) -> Result<Vec<TraceRow>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("trace_log row {}: {e}", i + 1)))
        .collect()
}

/// Sums rows into folded stacks, root first.
pub fn fold(rows: &[TraceRow]) -> Folded {
    let mut out = Folded::new();
    for r in rows {
        if r.frames.is_empty() || r.samples == 0 {
            continue;
        }
        let stack: Vec<String> = r.frames.iter().rev().map(|f| clean_frame(f)).collect();
        *out.entry(stack.join(";")).or_insert(0) += r.samples;
    }
    out
}

fn clean_frame(f: &str) -> String {
    let f = f.trim();
    if f.is_empty() {
        return "[unknown]".into();
    }
    f.chars()
        .map(|c| {
            if c == ';' {
                ':'
            } else if c.is_control() {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// Folded stacks as text lines, sorted as inferno expects them.
pub fn folded_lines(f: &Folded) -> Vec<String> {
    let mut lines: Vec<String> = f.iter().map(|(s, n)| format!("{s} {n}")).collect();
    lines.sort_unstable();
    lines
}

/// Total samples.
pub fn total(f: &Folded) -> u64 {
    f.values().sum()
}

fn options(title: &str, subtitle: &str) -> inferno::flamegraph::Options<'static> {
    let mut o = inferno::flamegraph::Options::default();
    o.title = title.to_string();
    o.subtitle = (!subtitle.is_empty()).then(|| subtitle.to_string());
    o.count_name = "samples".into();
    o.image_width = Some(1200);
    // Colours from a hash of the name, not a random draw: the same input gives the same SVG.
    o.deterministic = true;
    o
}

/// A flamegraph SVG of `f`. None when there are no samples.
pub fn render(f: &Folded, title: &str, subtitle: &str) -> Result<Option<String>, String> {
    if f.is_empty() {
        return Ok(None);
    }
    let lines = folded_lines(f);
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut options(title, subtitle), lines.iter().map(String::as_str), &mut out)
        .map_err(|e| format!("flamegraph: {e}"))?;
    Ok(Some(String::from_utf8_lossy(&out).into_owned()))
}

/// A differential flamegraph: frames are as wide as in `after`, red where they take a larger share
/// than in `before`, blue where a smaller one. `before` is scaled to `after`'s total first
/// (inferno's `normalize`), so a query that is slower everywhere shows where the share moved.
pub fn render_diff(before: &Folded, after: &Folded, title: &str, subtitle: &str) -> Result<Option<String>, String> {
    if before.is_empty() || after.is_empty() {
        return Ok(None);
    }
    let b = folded_lines(before).join("\n");
    let a = folded_lines(after).join("\n");
    let mut diff = Vec::new();
    let opt = inferno::differential::Options { normalize: true, strip_hex: false };
    inferno::differential::from_readers(opt, b.as_bytes(), a.as_bytes(), &mut diff)
        .map_err(|e| format!("differential folding: {e}"))?;
    let text = String::from_utf8_lossy(&diff).into_owned();
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines.sort_unstable();
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut options(title, subtitle), lines, &mut out)
        .map_err(|e| format!("differential flamegraph: {e}"))?;
    Ok(Some(String::from_utf8_lossy(&out).into_owned()))
}

/// Reads and folds the samples of `ids` from a server that has `system.trace_log`.
pub fn fetch(client: &mut SqlClient, caps: &Caps, ids: &[String]) -> Result<Folded, String> {
    if ids.is_empty() {
        return Ok(Folded::new());
    }
    let text = client.query(&samples_sql(ids, caps.trace_type_column)).map_err(|e: ProtoError| e.to_string())?;
    Ok(fold(&parse_rows(&text)?))
}

/// Why a side has no flamegraphs, or None when it can have them.
pub fn unavailable_reason(side: &str, caps: Option<&Caps>, version: &str) -> Option<String> {
    match caps {
        None => Some(format!(
            "no flamegraphs for the {side} server (version {version}): its URL is native and no --{}-http URL was given, \
             so system.trace_log cannot be read",
            side.split(' ').next().unwrap_or(side)
        )),
        Some(c) if !c.trace_log => Some(format!(
            "no system.trace_log on the {side} server (version {}); flamegraphs need ClickHouse 20.x+ with the \
             trace_log section configured and the query profiler on",
            c.version
        )),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_reversed_and_cleaned() {
        let rows = vec![
            TraceRow { query_id: "a".into(), frames: vec!["leaf".into(), "".into(), "root".into()], samples: 2 },
            TraceRow { query_id: "b".into(), frames: vec!["leaf".into(), "".into(), "root".into()], samples: 3 },
            TraceRow { query_id: "b".into(), frames: vec!["x;y\n".into(), "root".into()], samples: 1 },
            TraceRow { query_id: "b".into(), frames: vec![], samples: 9 },
        ];
        let f = fold(&rows);
        assert_eq!(f.get("root;[unknown];leaf"), Some(&5));
        assert_eq!(f.get("root;x:y"), Some(&1));
        assert_eq!(total(&f), 6);
        assert_eq!(folded_lines(&f), vec!["root;[unknown];leaf 5".to_string(), "root;x:y 1".to_string()]);
    }

    #[test]
    fn rows_parse_with_numbers_or_strings() {
        let rows = parse_rows("{\"query_id\":\"q\",\"frames\":[\"a\"],\"samples\":3}\n\n{\"query_id\":\"q\",\"frames\":[\"b\"],\"samples\":\"4\"}\n").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].samples, 4);
        assert!(parse_rows("{\"query_id\":1}").unwrap_err().contains("row 1"));
    }

    #[test]
    fn the_sql_limits_to_real_samples_when_it_can() {
        let ids = vec!["chstorm-cmp-x-1".to_string()];
        assert!(samples_sql(&ids, true).contains("trace_type = 'Real'"));
        assert!(!samples_sql(&ids, false).contains("trace_type"));
        assert!(samples_sql(&ids, true).contains("allow_introspection_functions = 1"));
    }

    #[test]
    fn reasons_name_the_side_and_version() {
        let caps = Caps {
            version: "18.16.1".into(),
            query_log: true,
            profile_events: crate::metrics::ProfileEventsForm::Arrays,
            type_is_enum: false,
            trace_log: false,
            trace_type_column: false,
            profiler_setting: false,
        };
        let r = unavailable_reason("left (old)", Some(&caps), "18.16.1").unwrap();
        assert!(r.contains("no system.trace_log on the left (old) server (version 18.16.1)"), "{r}");
        let r = unavailable_reason("right (new)", None, "23.8.1").unwrap();
        assert!(r.contains("--right-http"), "{r}");
        assert!(unavailable_reason("left (old)", Some(&Caps { trace_log: true, ..caps }), "x").is_none());
    }
}
