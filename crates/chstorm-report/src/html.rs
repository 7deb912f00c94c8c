//! HTML building blocks: a self-contained page (inline CSS, no scripts, no fonts, no network),
//! escaping, and tables.

use crate::Table;
use std::fmt::Write as _;

/// Escapes `& < > " '` so that `s` is safe both as element text and inside a quoted attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page's style sheet. Charts sit two to a row on screens wider than about 1100 px and one to
/// a row on narrower ones; every chart scales with its column (SVG viewBox).
pub const CSS: &str = r#"
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --soft: #f6f8fa; --accent: #0072B2; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; color: var(--fg); background: #fff;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1360px; margin: 0 auto; padding: 12px 20px 32px; }
h1 { font-size: 22px; margin: 4px 0 2px; }
h2 { font-size: 18px; margin: 22px 0 6px; padding-top: 10px; border-top: 2px solid var(--line); }
h3 { font-size: 15px; margin: 16px 0 6px; }
p { margin: 4px 0 8px; }
code { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--soft);
  padding: 1px 4px; border-radius: 4px; overflow-wrap: anywhere; }
.sub, .muted, .note { color: var(--muted); }
.note { font-size: 12.5px; margin: 4px 0 12px; }
nav.toc { font-size: 13px; margin: 4px 0 0; }
nav.toc a { color: var(--accent); text-decoration: none; margin-right: 12px; white-space: nowrap; }
nav.toc a:hover { text-decoration: underline; }
dl.env { display: flex; flex-wrap: wrap; gap: 6px 32px;
  margin: 8px 0; padding: 8px 12px; background: var(--soft); border: 1px solid var(--line); border-radius: 6px; }
dl.env div { min-width: 0; }
dl.env dt { font-size: 11.5px; color: var(--muted); text-transform: uppercase; letter-spacing: .03em; }
dl.env dd { margin: 0; font-weight: 600; overflow-wrap: anywhere; }
.grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 540px), 1fr));
  gap: 12px 16px; align-items: start; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 540px), 1fr)); gap: 12px 16px; }
figure { margin: 0; min-width: 0; border: 1px solid var(--line); border-radius: 6px; padding: 2px; background: #fff; }
svg.chart { display: block; width: 100%; height: auto; }
.summary-panels { align-items: start; }
svg.chart circle:hover, svg.chart rect.bar:hover { stroke: #1f2328; stroke-width: 2; }
.table-wrap { overflow-x: auto; margin: 6px 0 12px; min-width: 0; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; font-weight: 600; padding: 2px 0 6px; }
th, td { padding: 3px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; white-space: nowrap; position: sticky; top: 0; }
td.num, th.num { text-align: right; white-space: nowrap; }
tbody tr:hover td { background: #eef4fb; }
tr.group td { border-top: 2px solid var(--line); }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; vertical-align: baseline; }
details { margin: 6px 0; border: 1px solid var(--line); border-radius: 6px; padding: 4px 10px; }
details > summary { cursor: pointer; font-weight: 600; padding: 2px 0; }
details[open] > summary { margin-bottom: 8px; }
ul.workload { margin: 4px 0 8px; padding-left: 20px; }
footer { margin-top: 28px; padding-top: 10px; border-top: 2px solid var(--line); color: var(--muted); font-size: 12.5px; }
footer li { margin-bottom: 4px; }
@media (max-width: 700px) { main { padding: 8px 10px 24px; } th, td { padding: 3px 6px; } }
@media print { details { border: none; } figure { break-inside: avoid; } }
"#;

/// A complete HTML document: doctype, UTF-8, viewport for small screens, and the inline [`CSS`].
/// `body` is inserted as is (it must already be escaped); `title` is escaped here.
pub fn page(title: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + CSS.len() + 512);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<meta name=\"generator\" content=\"chstorm\">\n");
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    out.push_str("<style>");
    out.push_str(CSS);
    out.push_str("</style>\n</head>\n<body>\n<main>\n");
    out.push_str(body);
    out.push_str("\n</main>\n</body>\n</html>\n");
    out
}

/// A table with its title as caption and its note below. Every cell is escaped; cells that look
/// like numbers (optionally with a unit such as `ms` or `k`) are right-aligned. Rows shorter than
/// the header are padded with empty cells.
pub fn table(t: &Table) -> String {
    table_grouped(t, None)
}

/// As [`table`]; with `group_by = Some(c)`, a rule is drawn above each row whose column `c`
/// differs from the row before (e.g. between variants).
pub fn table_grouped(t: &Table, group_by: Option<usize>) -> String {
    let mut out = String::new();
    out.push_str("<div class=\"table-wrap\"><table>");
    if !t.title.is_empty() {
        let _ = write!(out, "<caption>{}</caption>", escape(&t.title));
    }
    // A column is numeric when every non-empty cell in it is.
    let ncols = t.rows.iter().map(Vec::len).chain([t.columns.len()]).max().unwrap_or(0);
    let numeric: Vec<bool> = (0..ncols)
        .map(|c| {
            let mut any = false;
            let all = t.rows.iter().all(|r| match r.get(c).map(|s| s.trim()) {
                None | Some("") | Some(crate::format::NA) => true,
                Some(s) => {
                    any = true;
                    looks_numeric(s)
                }
            });
            all && any
        })
        .collect();
    let class = |c: usize| if numeric.get(c).copied().unwrap_or(false) { " class=\"num\"" } else { "" };
    if !t.columns.is_empty() {
        out.push_str("<thead><tr>");
        for (c, h) in t.columns.iter().enumerate() {
            let _ = write!(out, "<th{}>{}</th>", class(c), escape(h));
        }
        out.push_str("</tr></thead>");
    }
    out.push_str("<tbody>");
    for (i, row) in t.rows.iter().enumerate() {
        let new_group = match (group_by, i.checked_sub(1).and_then(|p| t.rows.get(p))) {
            (Some(c), Some(prev)) => prev.get(c) != row.get(c),
            _ => false,
        };
        out.push_str(if new_group { "<tr class=\"group\">" } else { "<tr>" });
        for c in 0..ncols.max(row.len()) {
            let cell = row.get(c).map(String::as_str).unwrap_or("");
            let _ = write!(out, "<td{}>{}</td>", class(c), escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    if let Some(note) = &t.note {
        let _ = write!(out, "<p class=\"note\">{}</p>", escape(note));
    }
    out.push_str("</div>\n");
    out
}

/// Whether a table cell reads as a number: digits with separators, maybe a sign and a unit.
fn looks_numeric(s: &str) -> bool {
    const UNITS: [&str; 14] = ["q/s", "QPS", "GiB", "MiB", "KiB", "µs", "ms", "s", "k", "M", "%", "x", "×", "B"];
    let mut body = s.trim();
    for u in UNITS {
        if let Some(b) = body.strip_suffix(u) {
            body = b.trim_end();
            break;
        }
    }
    let body = body.strip_prefix(['-', '+', '~', '≈']).unwrap_or(body);
    !body.is_empty()
        && body.chars().any(|c| c.is_ascii_digit())
        && body.chars().next().is_some_and(|c| c.is_ascii_digit() || c == '.')
        && body.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | ',' | 'e' | 'E' | '-' | '+'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("SELECT a < b && c > 'd' \"e\""),
            "SELECT a &lt; b &amp;&amp; c &gt; &#39;d&#39; &quot;e&quot;"
        );
        assert_eq!(escape("µs plain"), "µs plain");
    }

    #[test]
    fn page_is_self_contained() {
        let p = page("a <b>", "<p>x</p>");
        assert!(p.starts_with("<!DOCTYPE html>"));
        assert!(p.contains("<title>a &lt;b&gt;</title>"));
        assert!(!p.contains("<script"));
        assert!(!p.contains("@import"));
        assert!(!p.contains("url("));
        assert!(!p.contains("http"));
    }

    #[test]
    fn tables_escape_and_align() {
        let t = Table {
            title: "threads <x>".into(),
            columns: vec!["setting".into(), "QPS".into(), "P99".into()],
            rows: vec![
                vec!["max_threads=1".into(), "12,345".into(), "1.2 ms".into()],
                vec!["a&b".into(), "99.5".into()],
            ],
            note: Some("n < 1".into()),
        };
        let h = table(&t);
        assert!(h.contains("<caption>threads &lt;x&gt;</caption>"));
        assert!(h.contains("<td>a&amp;b</td><td class=\"num\">99.5</td><td class=\"num\"></td>"));
        assert!(h.contains("<td class=\"num\">1.2 ms</td>"));
        assert!(h.contains("<p class=\"note\">n &lt; 1</p>"));
        let g = table_grouped(&t, Some(0));
        assert_eq!(g.matches("<tr class=\"group\">").count(), 1);
        assert!(looks_numeric("-3.5"));
        assert!(looks_numeric("64"));
        assert!(!looks_numeric("max_threads=1"));
        assert!(!looks_numeric("1 (best)"));
        assert!(!looks_numeric("s"));
    }
}
