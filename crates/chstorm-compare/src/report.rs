//! `DIR/report.html`: one self-contained page (inline CSS and SVG, no scripts, nothing fetched),
//! built from chstorm-report's blocks like the sweep report.
//!
//! Sections: changes in performance (red rows slower, green rows faster), unstable queries,
//! errors, metrics that moved, the rest (collapsed), a chart of each changed query's runs (left
//! against right), flamegraphs (or why there are none), and what every column means.
//!
//! Flamegraphs are also written beside the report as `flamegraphs/q<N>-{left,right,diff}.svg`
//! (interactive when opened on their own; inside the page they are pictures) with the folded
//! stacks they came from (`.folded`), so a change can be looked into without running it again.

use crate::flame;
use crate::result::{CompareResult, FlameSide, MetricResult, QueryResult};
use crate::stats::Verdict;
use crate::table::{figures, pct, pct_signed, sig, truncate, value_headers};
use crate::CompareError;
use base64::Engine as _;
use chstorm_report::html::{escape, CSS};
use chstorm_report::svg::{LineChart, Series, XScale, YUnit};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The report's file name in `--out DIR`.
pub const REPORT_HTML: &str = "report.html";
/// The flamegraphs' folder in `--out DIR`.
pub const FLAME_DIR: &str = "flamegraphs";

const EXTRA_CSS: &str = r#"
tr.slower td { background: #fde7e4; } tr.faster td { background: #e0f4e6; }
tr.slower td.verdict { color: #a4161a; font-weight: 600; } tr.faster td.verdict { color: #1a7f37; font-weight: 600; }
td.query { min-width: 260px; max-width: 760px; } td.query code { white-space: pre-wrap; background: none; padding: 0; }
.badges { margin: 8px 0; } .badges span { display: inline-block; padding: 2px 10px; margin: 0 6px 4px 0; border-radius: 12px;
  border: 1px solid var(--line); background: var(--soft); font-size: 13px; }
.badges span.slower { background: #fde7e4; border-color: #f3b5ad; } .badges span.faster { background: #e0f4e6; border-color: #a6dcb5; }
.flames figure { margin: 8px 0; }
img.flame { display: block; width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; }
dl.cols dt { font-weight: 600; margin-top: 6px; } dl.cols dd { margin: 0 0 0 18px; }
"#;

/// The report and the files it refers to (paths relative to the report's folder).
pub struct Rendered {
    pub html: String,
    pub files: Vec<(PathBuf, String)>,
}

/// Writes `dir/report.html` and the flamegraphs; returns the report's path.
pub fn write(dir: &Path, r: &CompareResult) -> Result<PathBuf, CompareError> {
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |source| CompareError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let rendered = render(r);
    for (rel, text) in &rendered.files {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&p, text).map_err(io(&p))?;
    }
    let path = dir.join(REPORT_HTML);
    let tmp = dir.join(format!("{REPORT_HTML}.tmp"));
    std::fs::write(&tmp, &rendered.html).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    Ok(path)
}

/// The page and its side files; a pure function of `r`.
pub fn render(r: &CompareResult) -> Rendered {
    let sorted = r.sorted();
    let changed: Vec<&QueryResult> =
        sorted.iter().copied().filter(|q| matches!(q.verdict, Verdict::Slower | Verdict::Faster)).collect();
    let unstable: Vec<&QueryResult> = sorted.iter().copied().filter(|q| q.verdict == Verdict::Unstable).collect();
    let errors: Vec<&QueryResult> = sorted.iter().copied().filter(|q| q.verdict.is_error()).collect();
    let rest: Vec<&QueryResult> =
        sorted.iter().copied().filter(|q| matches!(q.verdict, Verdict::NotSignificant | Verdict::TooSmall)).collect();
    let mut files = Vec::new();

    let mut b = String::new();
    b.push_str("<h1>chstorm compare: old (left) against new (right)</h1>\n");
    let _ = writeln!(b, "<p class=\"sub\">{} &middot; {}</p>", escape(&r.date), escape(&r.summary_line()));
    environment(&mut b, r);
    b.push_str("<nav class=\"toc\"><a href=\"#changes\">Changes</a><a href=\"#unstable\">Unstable</a><a href=\"#errors\">Errors</a>\
<a href=\"#metrics\">Metrics that moved</a><a href=\"#rest\">Not significant</a><a href=\"#runs\">Runs</a>\
<a href=\"#flamegraphs\">Flamegraphs</a><a href=\"#columns\">Columns</a></nav>\n");
    badges(&mut b, r);

    b.push_str("<h2 id=\"changes\">Changes in performance</h2>\n");
    if changed.is_empty() {
        b.push_str("<p>No query changed by more than its threshold and --min-change.</p>\n");
    } else {
        let _ = writeln!(
            b,
            "<p class=\"note\">Red: slower on the new server; green: faster. A change is reported when |diff| &ge; threshold \
             and |diff| &ge; {} (--min-change).</p>",
            pct(Some(r.options.rules.min_change))
        );
        query_table(&mut b, &changed, true, value_headers(r));
    }

    b.push_str("<h2 id=\"unstable\">Unstable queries</h2>\n");
    if unstable.is_empty() {
        b.push_str("<p>None.</p>\n");
    } else {
        let _ = writeln!(
            b,
            "<p class=\"note\">The threshold stayed at {} or more (--unstable) until the budget ran out, or there were too \
             few runs: these queries vary so much from run to run, on the same server, that a change of their size could \
             not be told from noise. Under each: how many runs it got, the largest source of spread seen, and what to \
             change.</p>",
            pct(Some(r.options.rules.unstable))
        );
        query_table(&mut b, &unstable, true, value_headers(r));
    }

    b.push_str("<h2 id=\"errors\">Errors</h2>\n");
    if errors.is_empty() {
        b.push_str("<p>None.</p>\n");
    } else {
        error_table(&mut b, &errors);
    }

    b.push_str("<h2 id=\"metrics\">Metrics that moved</h2>\n");
    metrics_section(&mut b, r, &sorted);

    b.push_str("<h2 id=\"rest\">Not significant</h2>\n");
    if rest.is_empty() {
        b.push_str("<p>None.</p>\n");
    } else {
        let _ = writeln!(
            b,
            "<details><summary>{} queries: no significant change ({} not significant, {} too small)</summary>",
            rest.len(),
            rest.iter().filter(|q| q.verdict == Verdict::NotSignificant).count(),
            rest.iter().filter(|q| q.verdict == Verdict::TooSmall).count()
        );
        query_table(&mut b, &rest, true, value_headers(r));
        b.push_str("</details>\n");
    }

    b.push_str("<h2 id=\"runs\">Runs of the changed queries</h2>\n");
    if changed.is_empty() {
        b.push_str("<p>No query changed, so there is nothing to chart.</p>\n");
    } else {
        b.push_str(
            "<p class=\"note\">Client time of every measured run, in the order they ran (left and right alternate); \
dashed lines are the medians.</p>\n<div class=\"charts\">\n",
        );
        for q in &changed {
            b.push_str("<figure>");
            b.push_str(&run_chart(q));
            b.push_str("</figure>\n");
        }
        b.push_str("</div>\n");
    }

    b.push_str("<h2 id=\"flamegraphs\">Flamegraphs</h2>\n");
    flamegraphs(&mut b, r, &changed, &mut files);

    b.push_str("<h2 id=\"columns\">What the columns mean</h2>\n");
    b.push_str(COLUMNS);
    footer(&mut b, r);
    Rendered { html: page("chstorm compare", &b), files }
}

fn page(title: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + CSS.len() + EXTRA_CSS.len() + 512);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<meta name=\"generator\" content=\"chstorm compare\">\n");
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    out.push_str("<style>");
    out.push_str(CSS);
    out.push_str(EXTRA_CSS);
    out.push_str("</style>\n</head>\n<body>\n<main>\n");
    out.push_str(body);
    out.push_str("\n</main>\n</body>\n</html>\n");
    out
}

fn environment(b: &mut String, r: &CompareResult) {
    let o = &r.options;
    let items = [
        ("old (left)", r.left.target.clone()),
        ("old version", r.left.version.clone()),
        ("new (right)", r.right.target.clone()),
        ("new version", r.right.version.clone()),
        (
            "runs per side",
            format!(
                ">= {} and >= {} s, then until decided (a look at every {}x), at most {} s or {}",
                o.plan.runs,
                sig(o.plan.min_time.as_secs_f64(), 3),
                o.look_growth,
                sig(o.plan.max_time.as_secs_f64(), 3),
                o.plan.max_runs
            ),
        ),
        (
            "clients per side",
            match o.window_s {
                Some(w) => format!("{}, windows of {} s judged by QPS", o.concurrency, sig(w, 3)),
                None => "1, query by query".into(),
            },
        ),
        ("min change / unstable", format!("{} / {}", pct(Some(o.rules.min_change)), pct(Some(o.rules.unstable)))),
        ("threshold", format!("{} quantile of {} random splits", o.quantile, o.iterations)),
        ("seed / run id", format!("{} / {}", o.seed, r.run_id)),
    ];
    b.push_str("<dl class=\"env\">");
    for (k, v) in items {
        let _ = write!(b, "<div><dt>{}</dt><dd>{}</dd></div>", escape(k), escape(&v));
    }
    b.push_str("</dl>\n");
}

fn badges(b: &mut String, r: &CompareResult) {
    b.push_str("<div class=\"badges\">");
    for v in Verdict::ALL {
        let n = r.summary.count(v);
        if n > 0 || matches!(v, Verdict::Slower | Verdict::Faster) {
            let _ = write!(b, "<span class=\"{}\">{} {}</span>", v.as_str(), n, v.as_str());
        }
    }
    let _ = write!(
        b,
        "<span>{} regression{} (--fail-on {}): exit {}</span>",
        r.summary.regressions,
        if r.summary.regressions == 1 { "" } else { "s" },
        r.options.fail_on,
        r.exit_code()
    );
    b.push_str("</div>\n");
}

fn query_cell(q: &QueryResult) -> String {
    let label =
        q.name.as_deref().map(|n| format!("<span class=\"muted\">{}</span><br>", escape(n))).unwrap_or_default();
    format!("<td class=\"query\">{label}<code>{}</code></td>", escape(&truncate(&q.query, 400)))
}

/// old, new, ratio, diff, threshold, runs, query; rows coloured by verdict.
fn query_table(b: &mut String, qs: &[&QueryResult], with_verdict: bool, heads: [&str; 2]) {
    b.push_str("<div class=\"table-wrap\"><table><thead><tr>");
    if with_verdict {
        b.push_str("<th>verdict</th>");
    }
    let _ = write!(
        b,
        "<th class=\"num\">#</th><th class=\"num\">{}</th><th class=\"num\">{}</th><th class=\"num\">ratio</th>\
<th class=\"num\">diff</th><th class=\"num\">threshold</th><th class=\"num\">runs</th><th>query</th></tr></thead><tbody>",
        heads[0], heads[1]
    );
    for q in qs {
        let _ = write!(b, "<tr class=\"{}\">", q.verdict.as_str());
        if with_verdict {
            let _ = write!(b, "<td class=\"verdict\">{}</td>", q.verdict.as_str());
        }
        for cell in std::iter::once(q.index.to_string()).chain(figures(q)) {
            let _ = write!(b, "<td class=\"num\">{}</td>", escape(&cell));
        }
        b.push_str(&query_cell(q));
        b.push_str("</tr>");
    }
    b.push_str("</tbody></table></div>\n");
    for q in qs {
        if let Some(n) = &q.note {
            let _ = writeln!(b, "<p class=\"note\">#{}: {}</p>", q.index, escape(n));
        }
    }
}

fn error_table(b: &mut String, qs: &[&QueryResult]) {
    b.push_str("<div class=\"table-wrap\"><table><thead><tr><th>verdict</th><th class=\"num\">#</th><th>error</th><th>query</th></tr></thead><tbody>");
    for q in qs {
        let _ = write!(
            b,
            "<tr class=\"{}\"><td class=\"verdict\">{}</td><td class=\"num\">{}</td><td>{}</td>{}</tr>",
            q.verdict.as_str(),
            q.verdict.as_str(),
            q.index,
            escape(q.error.as_deref().unwrap_or("")),
            query_cell(q)
        );
    }
    b.push_str("</tbody></table></div>\n");
}

fn metrics_section(b: &mut String, r: &CompareResult, sorted: &[&QueryResult]) {
    let mut notes = Vec::new();
    for (side, info) in [("left (old)", &r.left), ("right (new)", &r.right)] {
        if !info.query_log {
            notes.push(format!("{side}: no query_log rows were read, so this side has client time only."));
        }
    }
    let _ = writeln!(
        b,
        "<p class=\"note\">Every server metric of every query is compared like client time (medians, diff, threshold); listed \
         are those with |diff| &ge; threshold and &ge; {}. Client time alone decides the verdict; these say where a change \
         came from. Values are medians in the metric's unit (query_duration_ms in ms, memory_usage in bytes, ProfileEvents as \
         counted by the server). {}</p>",
        pct(Some(r.options.rules.min_change)),
        escape(&notes.join(" "))
    );
    let with: Vec<&&QueryResult> = sorted.iter().filter(|q| !q.metrics.is_empty()).collect();
    if with.is_empty() {
        b.push_str("<p>No metric moved.</p>\n");
        return;
    }
    b.push_str("<div class=\"table-wrap\"><table><thead><tr><th class=\"num\">#</th><th>query verdict</th><th>metric</th>\
<th>change</th><th class=\"num\">old</th><th class=\"num\">new</th><th class=\"num\">diff</th><th class=\"num\">threshold</th>\
<th>query</th></tr></thead><tbody>");
    for q in with {
        for (i, m) in q.metrics.iter().enumerate() {
            let group = if i == 0 { " class=\"group\"" } else { "" };
            // The query's verdict is about client time; a metric only went up or down.
            let verdict = if i == 0 { q.verdict.as_str() } else { "" };
            let _ = write!(
                b,
                "<tr{group}><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
                q.index,
                verdict,
                escape(&m.name),
                metric_change(m),
                escape(&sig(m.old, 4)),
                escape(&sig(m.new, 4)),
                pct_signed(m.diff),
                pct(m.threshold)
            );
            if i == 0 {
                b.push_str(&query_cell(q));
            } else {
                b.push_str("<td></td>");
            }
            b.push_str("</tr>");
        }
    }
    b.push_str("</tbody></table></div>\n");
}

/// The direction of a metric's change on the new server: "higher" or "lower". Not "slower" or
/// "faster": fewer Seeks or less memory is not a slower query.
fn metric_change(m: &MetricResult) -> &'static str {
    if m.new > m.old {
        "higher"
    } else if m.new < m.old {
        "lower"
    } else {
        "same"
    }
}

/// Left and right client times per run, with dashed medians.
pub fn run_chart(q: &QueryResult) -> String {
    let pts = |v: &[f64]| v.iter().enumerate().map(|(i, &t)| ((i + 1) as f64, t)).collect::<Vec<_>>();
    let flat = |v: Option<f64>, n: usize| match v {
        Some(m) if n > 0 => vec![(1.0, m), (n as f64, m)],
        _ => vec![],
    };
    let n = q.times_s.left.len().max(q.times_s.right.len());
    let mut c = LineChart::new(
        format!("#{} {}: {}", q.index, q.verdict.as_str(), truncate(&q.query, 70)),
        "run",
        "client time",
        XScale::Linear,
        YUnit::Seconds,
    );
    c.series = vec![
        Series::new("old (left)", pts(&q.times_s.left)),
        Series::new("new (right)", pts(&q.times_s.right)),
        Series::new("old median", flat(q.old_s, n)),
        Series::new("new median", flat(q.new_s, n)),
    ];
    // Palette 8 and 9 are palette 0 and 1 dashed: the medians in their side's colour.
    c.colors = vec![0, 1, 8, 9];
    c.plot_height = 200;
    c.to_svg()
}

fn flamegraphs(b: &mut String, r: &CompareResult, changed: &[&QueryResult], files: &mut Vec<(PathBuf, String)>) {
    let reasons: Vec<&String> = [&r.left, &r.right]
        .iter()
        .flat_map(|i| i.notes.iter())
        .filter(|n| n.contains("flamegraph") || n.contains("trace_log"))
        .collect();
    for n in &reasons {
        let _ = writeln!(b, "<p class=\"note\">{}</p>", escape(n));
    }
    if changed.is_empty() {
        b.push_str("<p>No query changed, so no flamegraphs were gathered.</p>\n");
        return;
    }
    let mut any = false;
    for q in changed {
        let (FlameSide::Samples(l), FlameSide::Samples(rt)) = (&q.flames.left, &q.flames.right) else {
            for (side, f) in [("left", &q.flames.left), ("right", &q.flames.right)] {
                if let FlameSide::Failed(e) = f {
                    let _ = writeln!(b, "<p class=\"note\">#{} {side}: {}</p>", q.index, escape(e));
                }
            }
            continue;
        };
        any = true;
        let _ = writeln!(b, "<h3>#{} {}: {}</h3>", q.index, q.verdict.as_str(), escape(&truncate(&q.query, 120)));
        let title = truncate(&q.query, 90);
        let graphs = [
            ("left", flame::render(l, &format!("old (left): {title}"), &format!("{} samples", flame::total(l)))),
            ("right", flame::render(rt, &format!("new (right): {title}"), &format!("{} samples", flame::total(rt)))),
            (
                "diff",
                flame::render_diff(
                    l,
                    rt,
                    &format!("differential: {title}"),
                    "width: new; red: larger share than old, blue: smaller (old scaled to new's total)",
                ),
            ),
        ];
        for (name, folded) in [("left", l), ("right", rt)] {
            files.push((
                PathBuf::from(FLAME_DIR).join(format!("q{}-{name}.folded", q.index)),
                flame::folded_lines(folded).join("\n") + "\n",
            ));
        }
        b.push_str("<div class=\"flames\">");
        for (name, svg) in graphs {
            match svg {
                Ok(Some(svg)) => {
                    let rel = PathBuf::from(FLAME_DIR).join(format!("q{}-{name}.svg", q.index));
                    let data = base64::engine::general_purpose::STANDARD.encode(svg.as_bytes());
                    let _ = write!(
                        b,
                        "<figure><img class=\"flame\" alt=\"{name} flamegraph of #{}\" src=\"data:image/svg+xml;base64,{data}\">\
<p class=\"note\"><a href=\"{}\">{name}: open the interactive SVG</a></p></figure>",
                        q.index,
                        escape(&rel.to_string_lossy())
                    );
                    files.push((rel, svg));
                }
                Ok(None) => {
                    let _ = write!(b, "<p class=\"note\">{name}: no samples</p>");
                }
                Err(e) => {
                    let _ = write!(b, "<p class=\"note\">{name}: {}</p>", escape(&e));
                }
            }
        }
        b.push_str("</div>\n");
    }
    if !any && reasons.is_empty() {
        b.push_str("<p>No samples were found for the changed queries.</p>\n");
    }
}

fn footer(b: &mut String, r: &CompareResult) {
    b.push_str("<footer><ul>");
    for (side, info) in [("left (old)", &r.left), ("right (new)", &r.right)] {
        let _ = write!(
            b,
            "<li>{side}: {} version {}; server metrics from {}{}</li>",
            escape(&info.target),
            escape(&info.version),
            escape(info.metrics_url.as_deref().unwrap_or("nowhere")),
            info.notes.iter().map(|n| format!("; {}", escape(n))).collect::<String>()
        );
    }
    let _ = write!(
        b,
        "<li>chstorm {} &middot; schema {} &middot; query_ids chstorm-cmp-{}-N</li>",
        escape(&r.chstorm_version),
        escape(r.schema),
        escape(&r.run_id)
    );
    if r.interrupted {
        b.push_str("<li>Interrupted: the queries not run yet are left out.</li>");
    }
    b.push_str("</ul></footer>\n");
}

const COLUMNS: &str = r#"<dl class="cols">
<dt>verdict</dt><dd><b>slower</b> / <b>faster</b>: |diff| &ge; threshold and |diff| &ge; --min-change.
<b>unstable</b>: otherwise, when the threshold is still &ge; --unstable when the budget runs out (too noisy to tell), or there
were fewer than 5 runs per side; its note says why.
<b>not_significant</b>: |diff| &lt; threshold. <b>too_small</b>: significant, but below --min-change.
<b>error_left</b> / <b>error_right</b> / <b>error_both</b>: the query failed on the old / new / both servers.
Slower and error_right count as regressions against --fail-on.</dd>
<dt>#</dt><dd>The query's position in the query file (or suite), from 0. Queries ran in a seeded random order.</dd>
<dt>old (s), new (s)</dt><dd>Median client time of the measured runs on the left (old) and right (new) server, in seconds:
the wall time from sending the query to reading the end of its result, on a fresh connection opened before the clock starts
(each run has its own). The warm-up run is not counted.</dd>
<dt>ratio</dt><dd>new / old. Above 1 the new server is slower.</dd>
<dt>diff</dt><dd>(new - old) / old, as a percentage. Positive: slower.</dd>
<dt>threshold</dt><dd>How large a diff the noise alone gives: both sides' runs are pooled and split at random into two halves 20,000
times; the threshold is the 99.95th percentile of |median(half 1) - median(half 2)|, divided by old: the quantile that keeps
the chance of a false slower/faster at 1 % over every look the stopping rule takes. A diff at least this large is
statistically significant. Seeded, so the same runs give the same threshold. (Server metrics: one look, the 99th
percentile of 10,000 splits.)</dd>
<dt>runs</dt><dd>Measured runs on the left / right. After one warm-up on each side, runs go in counterbalanced pairs; once each
side has --runs runs and --min-time of measured time they are judged, and again at every tenth more, until the verdict is
decided (a change, or no change of --min-change in reach) or a side reaches --max-time or 500 runs. With --concurrency, a run
is a window of that many clients per side, and old / new are the windows' median QPS.</dd>
<dt>query</dt><dd>The query as written; placeholders were rendered identically for both sides.</dd>
<dt>metric, old, new (metrics table)</dt><dd>A server metric from system.query_log matched by query_id: query_duration_ms (ms),
read_rows, memory_usage (bytes), or a ProfileEvent (missing in a run counts as 0); old and new are medians; diff and threshold as above.
<b>change</b>: higher or lower on the new server. Only client time makes a query slower or faster; the query verdict column repeats
that verdict for the query's first metric.</dd>
<dt>flamegraphs</dt><dd>Samples of system.trace_log for the changed queries' runs: left, right, and differential (frames as wide as
on the new server; red: a larger share of the time than on the old server, blue: a smaller one).</dd>
</dl>
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::*;
    use crate::schedule::{Plan, Stop};
    use crate::stats::Rules;

    pub(crate) fn sample() -> CompareResult {
        let side = |t: &str| SideInfo {
            target: t.into(),
            protocol: "http".into(),
            version: "18.16.1".into(),
            metrics_url: Some(t.into()),
            query_log: true,
            profile_events: Some(crate::metrics::ProfileEventsForm::Arrays),
            trace_log: false,
            notes: vec![
                "no system.trace_log on the left (old) server (version 18.16.1); flamegraphs need ClickHouse 20.x+"
                    .into(),
            ],
        };
        let q = |index: usize, verdict: Verdict, old: f64, new: f64, sql: &str| QueryResult {
            index,
            name: None,
            query: sql.into(),
            verdict,
            old_s: Some(old),
            new_s: Some(new),
            ratio: Some(new / old),
            diff: Some((new - old) / old),
            threshold: Some(0.03),
            runs: Sides { left: 7, right: 7 },
            stop: Stop::Decided,
            metrics: vec![],
            error: None,
            note: None,
            times_s: Sides { left: vec![old; 7], right: vec![new; 7] },
            qps: None,
            explanation: None,
            all_metrics: vec![],
            ids: Sides::default(),
            flames: Sides::default(),
        };
        let mut slower =
            q(0, Verdict::Slower, 0.1, 0.2, "SELECT sum(cityHash64(number)) FROM numbers(10000000) -- <b>");
        slower.metrics.push(MetricResult {
            name: "query_duration_ms".into(),
            old: 100.0,
            new: 200.0,
            diff: Some(1.0),
            threshold: Some(0.04),
            verdict: Verdict::Slower,
        });
        let mut err = q(2, Verdict::ErrorRight, 0.0, 0.0, "SELECT number FROM numbers(10)");
        err.error = Some("right (new): HTTP 500: Code: 396".into());
        let queries = vec![
            slower,
            q(1, Verdict::Faster, 0.2, 0.1, "SELECT 2"),
            err,
            q(3, Verdict::Unstable, 0.01, 0.011, "SELECT 3"),
            q(4, Verdict::NotSignificant, 0.01, 0.0101, "SELECT 4"),
        ];
        CompareResult {
            schema: SCHEMA,
            chstorm_version: "0.1.0".into(),
            run_id: "abcd1234".into(),
            date: "2024-01-01T00:00:00Z".into(),
            left: side("http://127.0.0.1:8123/"),
            right: side("http://127.0.0.1:8123/?max_block_size=256"),
            options: OptionsEcho {
                plan: Plan::default(),
                rules: Rules::default(),
                seed: 1,
                fail_on: 0,
                timeout_s: 60.0,
                iterations: 20_000,
                quantile: 0.9995,
                look_growth: 1.1,
                metric_quantile: 0.99,
                concurrency: 1,
                window_s: None,
                profiler: false,
            },
            summary: Summary::of(&queries),
            interrupted: false,
            queries,
        }
    }

    #[test]
    fn sections_rows_and_explanations() {
        let r = sample();
        let html = render(&r).html;
        for id in ["changes", "unstable", "errors", "metrics", "rest", "runs", "flamegraphs", "columns"] {
            assert!(html.contains(&format!("id=\"{id}\"")), "section {id}");
        }
        assert!(html.contains("<tr class=\"slower\">") && html.contains("<tr class=\"faster\">"));
        assert!(html.contains("&lt;b&gt;") && !html.contains("-- <b>"), "query text is escaped");
        assert!(html.contains("<details><summary>1 queries"));
        assert!(html.contains("query_duration_ms"));
        assert!(html.contains("no system.trace_log on the left (old) server (version 18.16.1)"));
        assert!(html.contains("What the columns mean") && html.contains("<dt>threshold</dt>"));
        assert!(html.contains("2 regressions (--fail-on 0): exit 1"));
        assert!(!html.contains("<script") && !html.contains("src=\"http"));
        // Two run charts (slower and faster), each with both sides' points and medians.
        assert_eq!(html.matches("class=\"chart\"").count(), 2);
        assert!(html.contains("data-points=\"18\""));
        // The order of the sections' rows: slower before faster.
        assert!(html.find("SELECT sum(").unwrap() < html.find("SELECT 2").unwrap());
    }

    #[test]
    fn metrics_go_higher_or_lower_and_runs_are_on_fresh_connections() {
        let mut r = sample();
        // A slower query whose Seeks vanished and whose memory fell: neither is "slower".
        for (name, old, new) in [("Seek", 40.0, 0.0), ("memory_usage", 1000.0, 620.0)] {
            r.queries[0].metrics.push(MetricResult {
                name: name.into(),
                old,
                new,
                diff: Some((new - old) / old),
                threshold: Some(0.05),
                verdict: Verdict::Faster,
            });
        }
        let html = render(&r).html;
        let metrics = &html[html.find("id=\"metrics\"").unwrap()..html.find("id=\"rest\"").unwrap()];
        let row = |name: &str| {
            let at = metrics.find(&format!("<td>{name}</td>")).unwrap();
            let start = metrics[..at].rfind("<tr").unwrap();
            metrics[start..at + metrics[at..].find("</tr>").unwrap()].to_string()
        };
        for (name, word) in [("query_duration_ms", "higher"), ("Seek", "lower"), ("memory_usage", "lower")] {
            let tr = row(name);
            assert!(tr.contains(&format!("<td>{word}</td>")), "{name}: {tr}");
        }
        for name in ["Seek", "memory_usage"] {
            let tr = row(name);
            assert!(!tr.contains("slower") && !tr.contains("faster"), "{name}: {tr}");
        }
        assert!(!html.contains("kept-alive"), "each run opens its own connection");
        assert!(html.contains("fresh connection"));
    }

    #[test]
    fn flamegraphs_are_embedded_and_written() {
        let mut r = sample();
        let left = flame::fold(&flame::parse_rows(include_str!("../tests/fixtures/trace_log_left.jsonl")).unwrap());
        let right = flame::fold(&flame::parse_rows(include_str!("../tests/fixtures/trace_log_right.jsonl")).unwrap());
        r.queries[0].flames = Sides { left: FlameSide::Samples(left), right: FlameSide::Samples(right) };
        let out = render(&r);
        assert_eq!(out.html.matches("<img class=\"flame\"").count(), 3);
        let names: Vec<String> = out.files.iter().map(|(p, _)| p.display().to_string()).collect();
        for n in ["q0-left.svg", "q0-right.svg", "q0-diff.svg", "q0-left.folded", "q0-right.folded"] {
            assert!(names.iter().any(|p| p.ends_with(n)), "{n} in {names:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &r).unwrap();
        assert!(path.ends_with(REPORT_HTML));
        assert!(dir.path().join(FLAME_DIR).join("q0-diff.svg").exists());
    }
}
