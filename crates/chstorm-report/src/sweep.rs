//! The sweep report: one page for a sweep of scenarios × variants × concurrency levels.
//!
//! Layout, top to bottom: title and contents; the environment; a summary (best QPS of each
//! scenario and variant: one bar chart per scenario, each on its own scale, then a table); one
//! section per scenario; a footer on how the numbers were made.
//!
//! The summary is small multiples rather than one chart: a demo's scenarios are two orders of
//! magnitude apart (/ping at tens of thousands of QPS, a `FINAL` point lookup at hundreds), and
//! on one linear axis the slow ones were slivers at the axis; a log axis would keep them visible
//! but makes bar lengths lie about ratios, which is what an operator reads between variants. Each
//! panel's bars are labelled with their variant, so a panel needs no legend.
//!
//! A scenario's section has QPS against concurrency (log2 x axis, one line per variant, as in the
//! Altinity "ClickHouse In the Storm" figures) and then **one chart per percentile** (P50, P90,
//! P99) against concurrency, again one line per variant. One chart per percentile was chosen over
//! one chart per variant because the question these charts answer is "which variant is faster at
//! this load", which needs the variants on one set of axes (the article's P90 figure does the
//! same); a per-variant view of the spread between P50 and P99 is in the numbers table. Then come
//! QPS and P99 in each second of the run at each variant's highest-QPS point, the same per second
//! for every point folded away in one `<details>` per variant, a table with every number, and the
//! suite's extra tables.
//!
//! A variant has the same colour in every chart of the page.

use crate::format::{fmt_bytes, fmt_duration, fmt_in_unit, fmt_int, fmt_qps_exact, fmt_seconds, LatencyUnit};
use crate::html::{escape, page, table, table_grouped};
use crate::svg::{color, BarChart, BarSeries, LineChart, Series, XScale, YUnit};
use crate::{Point, ReportInput, Section, Table};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Workload texts shown per scenario, and the characters shown of each.
const MAX_WORKLOAD: usize = 8;
const MAX_QUERY_CHARS: usize = 400;
/// Per-second charts in the folded details: their plot height, and above how many seconds they
/// drop their circles (to keep the page small).
const DETAIL_PLOT_H: u32 = 150;
const DETAIL_MAX_MARKERS: usize = 30;

struct Scenario<'a> {
    name: &'a str,
    section: Option<&'a Section>,
    variants: Vec<Variant<'a>>,
}

struct Variant<'a> {
    name: &'a str,
    /// Palette index, the same for this variant name everywhere in the page.
    color: usize,
    /// Sorted by concurrency (stable: equal levels keep input order).
    points: Vec<&'a Point>,
}

impl<'a> Variant<'a> {
    /// The point with the highest finite QPS (the lowest concurrency on a tie).
    fn best(&self) -> Option<&'a Point> {
        let mut best: Option<&'a Point> = None;
        for &p in &self.points {
            let better = match best {
                None => true,
                Some(b) => p.result.qps > b.result.qps,
            };
            if p.result.qps.is_finite() && better {
                best = Some(p);
            }
        }
        best
    }
}

impl Scenario<'_> {
    fn points(&self) -> impl Iterator<Item = &Point> + '_ {
        self.variants.iter().flat_map(|v| v.points.iter().copied())
    }
}

/// Groups points by scenario (section order first, then first appearance) and variant (first appearance).
fn group(input: &ReportInput) -> Vec<Scenario<'_>> {
    let mut scenarios: Vec<Scenario<'_>> = Vec::new();
    for s in &input.sections {
        if !scenarios.iter().any(|x| x.name == s.scenario) {
            scenarios.push(Scenario { name: &s.scenario, section: Some(s), variants: Vec::new() });
        }
    }
    let mut colors: Vec<&str> = Vec::new();
    for p in &input.points {
        let si = match scenarios.iter().position(|s| s.name == p.scenario) {
            Some(i) => i,
            None => {
                scenarios.push(Scenario { name: &p.scenario, section: None, variants: Vec::new() });
                scenarios.len() - 1
            }
        };
        let s = &mut scenarios[si];
        let vi = match s.variants.iter().position(|v| v.name == p.variant) {
            Some(i) => i,
            None => {
                s.variants.push(Variant { name: &p.variant, color: 0, points: Vec::new() });
                s.variants.len() - 1
            }
        };
        s.variants[vi].points.push(p);
    }
    for s in &mut scenarios {
        for v in &mut s.variants {
            v.points.sort_by_key(|p| p.concurrency);
        }
    }
    // Colours in page order.
    for s in &mut scenarios {
        for v in &mut s.variants {
            v.color = match colors.iter().position(|&n| n == v.name) {
                Some(i) => i,
                None => {
                    colors.push(v.name);
                    colors.len() - 1
                }
            };
        }
    }
    scenarios
}

/// Settings every point has with the same value, and the names of those that vary.
fn common_settings(points: &[Point]) -> (BTreeMap<&str, &str>, Vec<&str>) {
    let mut all: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in points {
        for (k, v) in &p.result.settings {
            all.entry(k.as_str()).or_default().push(v.as_str());
        }
    }
    let mut common = BTreeMap::new();
    let mut varying = Vec::new();
    for (k, vals) in all {
        if vals.len() == points.len() && vals.iter().all(|v| *v == vals[0]) {
            common.insert(k, vals[0]);
        } else {
            varying.push(k);
        }
    }
    (common, varying)
}

fn slug(i: usize, name: &str) -> String {
    let mut s = format!("s{}-", i + 1);
    let mut dash = false;
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            s.push(c);
            dash = false;
        } else if !dash {
            s.push('-');
            dash = true;
        }
        if s.len() > 60 {
            break;
        }
    }
    s.trim_end_matches('-').to_string()
}

/// The complete HTML document for a sweep. Deterministic: the same input gives the same bytes.
pub fn render_sweep(input: &ReportInput) -> String {
    let scenarios = group(input);
    let (common, varying) = common_settings(&input.points);
    let title = if input.title.trim().is_empty() { "chstorm report" } else { input.title.as_str() };
    let mut b = String::with_capacity(64 * 1024);

    // Title, subtitle, contents.
    let _ = write!(b, "<header><h1>{}</h1>", escape(title));
    let env = &input.environment;
    let sub: Vec<String> = [env.suite.as_str(), env.target.as_str(), env.date.as_str()]
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| escape(s))
        .collect();
    if !sub.is_empty() {
        let _ = write!(b, "<p class=\"sub\">{}</p>", sub.join(" · "));
    }
    b.push_str("<nav class=\"toc\"><a href=\"#environment\">Environment</a><a href=\"#summary\">Summary</a>");
    for (i, s) in scenarios.iter().enumerate() {
        let _ = write!(b, "<a href=\"#{}\">{}</a>", slug(i, s.name), escape(s.name));
    }
    b.push_str("<a href=\"#method\">Method</a></nav></header>\n");

    environment(&mut b, input, &common, &varying);
    summary(&mut b, &scenarios);
    for (i, s) in scenarios.iter().enumerate() {
        scenario_section(&mut b, i, s, &common);
    }
    footer(&mut b, input);
    page(title, &b)
}

fn environment(b: &mut String, input: &ReportInput, common: &BTreeMap<&str, &str>, varying: &[&str]) {
    let env = &input.environment;
    let server = env
        .server_version
        .clone()
        .or_else(|| input.points.iter().find_map(|p| p.result.server_version.clone()))
        .unwrap_or_else(|| "unknown".into());
    let unknown = |s: &str| if s.trim().is_empty() { "unknown".to_string() } else { s.to_string() };
    let mut modes: Vec<&str> = input.points.iter().map(|p| p.result.mode.as_str()).collect();
    modes.sort_unstable();
    modes.dedup();
    let items: [(&str, String); 9] = [
        ("Server version", server),
        ("Server CPU cores", if env.cores == 0 { "unknown".into() } else { env.cores.to_string() }),
        ("Server memory", if env.memory_bytes == 0 { "unknown".into() } else { fmt_bytes(env.memory_bytes) }),
        ("chstorm version", unknown(&env.chstorm_version)),
        ("Date", unknown(&env.date)),
        ("Suite", unknown(&env.suite)),
        ("Target", unknown(&env.target)),
        ("Runs", fmt_int(input.points.len() as u64)),
        (
            "Load",
            if modes.is_empty() {
                "–".into()
            } else {
                modes.iter().map(|m| format!("{m} loop")).collect::<Vec<_>>().join(", ")
            },
        ),
    ];
    b.push_str("<section id=\"environment\"><h2>Environment</h2><dl class=\"env\">");
    for (k, v) in items {
        let _ = write!(b, "<div><dt>{}</dt><dd>{}</dd></div>", escape(k), escape(&v));
    }
    b.push_str("</dl>");
    if !common.is_empty() || !varying.is_empty() {
        b.push_str("<p>Settings");
        if common.is_empty() {
            b.push_str(": server defaults");
        } else {
            b.push_str(" of every run: ");
            let list: Vec<String> =
                common.iter().map(|(k, v)| format!("<code>{}={}</code>", escape(k), escape(v))).collect();
            b.push_str(&list.join(" "));
        }
        if !varying.is_empty() {
            let list: Vec<String> = varying.iter().map(|k| format!("<code>{}</code>", escape(k))).collect();
            let _ = write!(b, "; set per variant: {}", list.join(" "));
        }
        b.push_str(".</p>");
    } else if !input.points.is_empty() {
        b.push_str("<p>Settings: server defaults (none set by chstorm).</p>");
    }
    if !env.notes.is_empty() {
        b.push_str("<ul>");
        for n in &env.notes {
            let _ = write!(b, "<li>{}</li>", escape(n));
        }
        b.push_str("</ul>");
    }
    b.push_str("</section>\n");
}

fn summary(b: &mut String, scenarios: &[Scenario<'_>]) {
    b.push_str("<section id=\"summary\"><h2>Summary</h2>");
    if scenarios.iter().all(|s| s.variants.is_empty()) {
        b.push_str("<p class=\"muted\">No results yet.</p></section>\n");
        return;
    }
    let with_points: Vec<&Scenario<'_>> = scenarios.iter().filter(|s| !s.variants.is_empty()).collect();
    b.push_str(SUMMARY_NOTE);
    b.push_str("<div class=\"charts summary-panels\">");
    for s in &with_points {
        let _ = write!(
            b,
            "<figure class=\"summary-panel\" data-scenario=\"{}\">{}</figure>",
            escape(s.name),
            summary_panel(s).to_svg()
        );
    }
    b.push_str("</div>");
    let mut rows = Vec::new();
    for s in &with_points {
        for v in &s.variants {
            let errors: u64 = v.points.iter().map(|p| p.result.errors).sum();
            let row = match v.best() {
                Some(p) => vec![
                    s.name.to_string(),
                    v.name.to_string(),
                    fmt_qps_exact(p.result.qps),
                    p.concurrency.to_string(),
                    fmt_seconds(p.result.latency_s.p99),
                    fmt_int(errors),
                ],
                None => {
                    vec![s.name.to_string(), v.name.to_string(), "–".into(), "–".into(), "–".into(), fmt_int(errors)]
                }
            };
            rows.push(row);
        }
    }
    let t = Table {
        title: "Best QPS per scenario and variant".into(),
        columns: ["scenario", "variant", "best QPS", "at concurrency", "P99 there", "errors"]
            .map(String::from)
            .to_vec(),
        rows,
        note: Some(
            "Best QPS: the concurrency level with the most queries per second. Errors: all runs of the variant.".into(),
        ),
    };
    // The panels, then the table at the page's full width: beside the panels, in half of it, the
    // table's last columns were cut off (scrolled away) on a 1400 px wide window.
    let _ = writeln!(b, "{}</section>", table(&t));
}

/// What the summary's panels show, above them.
const SUMMARY_NOTE: &str = "<p class=\"note\">One panel per scenario, each on its own scale from 0: \
    the best QPS of each variant, at the concurrency the table below gives. The panels share no \
    axis: compare scenarios by the numbers at the bars' ends.</p>";

/// A scenario's summary panel: one bar per variant (its best QPS), labelled with the variant's
/// name and coloured as in the scenario's charts, on the scenario's own linear axis from 0.
fn summary_panel(s: &Scenario<'_>) -> BarChart {
    BarChart {
        title: format!("{}: best QPS of each variant", s.name),
        value_label: "queries per second at the best concurrency".into(),
        unit: YUnit::Qps,
        categories: s.variants.iter().map(|v| v.name.to_string()).collect(),
        series: vec![BarSeries {
            name: "best QPS".into(),
            values: s.variants.iter().map(|v| v.best().map_or(f64::NAN, |p| p.result.qps)).collect(),
        }],
        colors: Vec::new(),
        category_colors: s.variants.iter().map(|v| v.color).collect(),
    }
}

/// What a variant is, from its runs: protocol, keep-alive, loop, and settings that are not common to all runs.
fn variant_detail(v: &Variant<'_>, common: &BTreeMap<&str, &str>) -> String {
    let Some(p) = v.points.first() else { return String::new() };
    let r = &p.result;
    let mut parts = vec![r.protocol.clone()];
    if r.protocol.starts_with("http") {
        parts.push(if r.keepalive { "keep-alive".into() } else { "no keep-alive".into() });
    }
    if r.mode == "open" {
        parts.push(match r.rate {
            Some(rate) => format!("open loop at {} q/s", fmt_qps_exact(rate)),
            None => "open loop".into(),
        });
    }
    for (k, val) in &r.settings {
        if common.get(k.as_str()) != Some(&val.as_str()) {
            parts.push(format!("{k}={val}"));
        }
    }
    parts.retain(|s| !s.is_empty());
    parts.join(", ")
}

fn figure(b: &mut String, svg: &str) {
    let _ = write!(b, "<figure>{svg}</figure>");
}

fn scenario_section(b: &mut String, i: usize, s: &Scenario<'_>, common: &BTreeMap<&str, &str>) {
    let _ = write!(b, "<section id=\"{}\"><h2>{}</h2>", slug(i, s.name), escape(s.name));
    if let Some(sec) = s.section {
        for para in sec.description.split("\n\n").filter(|p| !p.trim().is_empty()) {
            let _ = write!(b, "<p>{}</p>", escape(para.trim()));
        }
    }
    // What was run.
    let mut workload: Vec<&str> = Vec::new();
    for p in s.points() {
        for q in &p.result.workload {
            if !workload.contains(&q.as_str()) {
                workload.push(q);
            }
        }
    }
    let shown = |q: &str| {
        let mut t: String = q.chars().take(MAX_QUERY_CHARS).collect();
        if q.chars().count() > MAX_QUERY_CHARS {
            t.push('…');
        }
        format!("<code>{}</code>", escape(&t))
    };
    if workload.len() == 1 {
        let _ = write!(b, "<p><span class=\"muted\">Workload:</span> {}</p>", shown(workload[0]));
    } else if !workload.is_empty() {
        b.push_str("<p class=\"muted\">Workload:</p><ul class=\"workload\">");
        for q in workload.iter().take(MAX_WORKLOAD) {
            let _ = write!(b, "<li>{}</li>", shown(q));
        }
        if workload.len() > MAX_WORKLOAD {
            let _ = write!(b, "<li class=\"muted\">and {} more</li>", workload.len() - MAX_WORKLOAD);
        }
        b.push_str("</ul>");
    }
    if s.variants.is_empty() {
        b.push_str("<p class=\"muted\">No results for this scenario.</p>");
    } else {
        b.push_str("<p>");
        for v in &s.variants {
            let detail = variant_detail(v, common);
            let _ = write!(
                b,
                "<span style=\"white-space:nowrap;margin-right:14px\"><span class=\"swatch\" style=\"background:{}\"></span><b>{}</b>",
                color(v.color),
                escape(v.name)
            );
            if !detail.is_empty() && detail != v.name {
                let _ = write!(b, " <span class=\"muted\">({})</span>", escape(&detail));
            }
            b.push_str("</span> ");
        }
        b.push_str("</p>");
        concurrency_charts(b, s);
        over_time(b, s);
        numbers_table(b, s);
    }
    if let Some(sec) = s.section {
        for t in &sec.extra_tables {
            b.push_str(&table(t));
        }
    }
    b.push_str("</section>\n");
}

fn concurrency_chart(s: &Scenario<'_>, title: String, y_label: &str, unit: YUnit, value: fn(&Point) -> f64) -> String {
    let mut c = LineChart::new(title, "concurrent connections", y_label, XScale::Log2, unit);
    for v in &s.variants {
        c.series.push(Series::new(v.name, v.points.iter().map(|p| (p.concurrency as f64, value(p))).collect()));
        c.colors.push(v.color);
    }
    c.to_svg()
}

fn concurrency_charts(b: &mut String, s: &Scenario<'_>) {
    b.push_str("<div class=\"charts\">");
    figure(
        b,
        &concurrency_chart(s, format!("{}: QPS by concurrency", s.name), "queries per second", YUnit::Qps, |p| {
            p.result.qps
        }),
    );
    figure(
        b,
        &concurrency_chart(s, format!("{}: P50 latency by concurrency", s.name), "P50 latency", YUnit::Seconds, |p| {
            p.result.latency_s.p50
        }),
    );
    figure(
        b,
        &concurrency_chart(s, format!("{}: P90 latency by concurrency", s.name), "P90 latency", YUnit::Seconds, |p| {
            p.result.latency_s.p90
        }),
    );
    figure(
        b,
        &concurrency_chart(s, format!("{}: P99 latency by concurrency", s.name), "P99 latency", YUnit::Seconds, |p| {
            p.result.latency_s.p99
        }),
    );
    b.push_str("</div>");
}

/// QPS in each second: the successful queries that completed in it.
fn qps_series(p: &Point) -> Vec<(f64, f64)> {
    p.result.per_second.iter().map(|s| (s.t as f64, s.qps())).collect()
}

/// P99 in each second that completed at least one query (an empty second has no latency).
fn p99_series(p: &Point) -> Vec<(f64, f64)> {
    p.result.per_second.iter().filter(|s| s.queries > 0).map(|s| (s.t as f64, s.p99)).collect()
}

fn over_time(b: &mut String, s: &Scenario<'_>) {
    let best: Vec<(&Variant<'_>, &Point)> = s.variants.iter().filter_map(|v| v.best().map(|p| (v, p))).collect();
    if best.iter().all(|(_, p)| p.result.per_second.is_empty()) {
        return;
    }
    b.push_str("<h3>Over time</h3><p class=\"note\">Each second of the run at each variant's highest-QPS concurrency. The same for every concurrency is folded away below.</p>");
    let mut q = LineChart::new(
        format!("{}: QPS over time at the best point", s.name),
        "second of the run",
        "queries per second",
        XScale::Linear,
        YUnit::Qps,
    );
    let mut l = LineChart::new(
        format!("{}: P99 over time at the best point", s.name),
        "second of the run",
        "P99 latency",
        XScale::Linear,
        YUnit::Seconds,
    );
    for (v, p) in &best {
        let name = format!("{} (c={})", v.name, p.concurrency);
        q.series.push(Series::new(name.clone(), qps_series(p)));
        l.series.push(Series::new(name, p99_series(p)));
        q.colors.push(v.color);
        l.colors.push(v.color);
    }
    b.push_str("<div class=\"charts\">");
    figure(b, &q.to_svg());
    figure(b, &l.to_svg());
    b.push_str("</div>");
    for v in &s.variants {
        let pts: Vec<&Point> = v.points.iter().copied().filter(|p| !p.result.per_second.is_empty()).collect();
        if pts.is_empty() {
            continue;
        }
        let _ = write!(
            b,
            "<details><summary><span class=\"swatch\" style=\"background:{}\"></span>{}: QPS and P99 over time at every concurrency ({} runs)</summary>",
            color(v.color),
            escape(v.name),
            pts.len()
        );
        b.push_str("<div class=\"charts\">");
        for p in pts {
            let head = format!("{}, concurrency {}", v.name, p.concurrency);
            let mut q = LineChart::new(
                format!("{head}: QPS over time"),
                "second of the run",
                "queries per second",
                XScale::Linear,
                YUnit::Qps,
            );
            q.series.push(Series::new(head.clone(), qps_series(p)));
            let mut l = LineChart::new(
                format!("{head}: P99 over time"),
                "second of the run",
                "P99 latency",
                XScale::Linear,
                YUnit::Seconds,
            );
            l.series.push(Series::new(head, p99_series(p)));
            for c in [&mut q, &mut l] {
                c.colors.push(v.color);
                c.plot_height = DETAIL_PLOT_H;
                c.max_markers = DETAIL_MAX_MARKERS;
            }
            figure(b, &q.to_svg());
            figure(b, &l.to_svg());
        }
        b.push_str("</div></details>");
    }
}

fn numbers_table(b: &mut String, s: &Scenario<'_>) {
    let pts: Vec<&Point> = s.points().collect();
    let u = LatencyUnit::for_values(pts.iter().flat_map(|p| {
        let l = &p.result.latency_s;
        [l.p50, l.p90, l.p99, l.p99_9]
    }));
    let open = pts.iter().any(|p| p.result.mode == "open");
    let kinds = pts.iter().any(|p| !p.result.errors_by_kind.is_empty());
    let us = u.suffix();
    let mut columns: Vec<String> = vec![
        "variant".into(),
        "concurrency".into(),
        "QPS".into(),
        format!("P50 ({us})"),
        format!("P90 ({us})"),
        format!("P99 ({us})"),
        format!("P99.9 ({us})"),
        format!("max ({us})"),
        "queries".into(),
        "errors".into(),
        "duration".into(),
    ];
    if open {
        columns.extend(["rate (q/s)", "late", "dropped"].map(String::from));
    }
    if kinds {
        columns.push("error kinds".into());
    }
    let mut rows = Vec::new();
    for p in pts {
        let r = &p.result;
        let l = &r.latency_s;
        let mut row = vec![
            p.variant.clone(),
            p.concurrency.to_string(),
            fmt_qps_exact(r.qps),
            fmt_in_unit(l.p50, u),
            fmt_in_unit(l.p90, u),
            fmt_in_unit(l.p99, u),
            fmt_in_unit(l.p99_9, u),
            fmt_in_unit(l.max, u),
            fmt_int(r.queries),
            fmt_int(r.errors),
            fmt_duration(r.duration_s),
        ];
        if open {
            row.push(r.rate.map_or("–".into(), fmt_qps_exact));
            row.push(fmt_int(r.late));
            row.push(fmt_int(r.dropped));
        }
        if kinds {
            row.push(r.errors_by_kind.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", "));
        }
        rows.push(row);
    }
    let t = Table {
        title: format!("{}: every run", s.name),
        columns,
        rows,
        note: Some(
            "QPS counts successful queries per second of the measured time; latencies are of the whole run.".into(),
        ),
    };
    b.push_str("<h3>Numbers</h3>");
    b.push_str(&table_grouped(&t, Some(0)));
}

fn footer(b: &mut String, input: &ReportInput) {
    let mut notes: Vec<(&str, usize)> = Vec::new();
    for p in &input.points {
        let n = p.result.latency_note.as_str();
        match notes.iter_mut().find(|(x, _)| *x == n) {
            Some(e) => e.1 += 1,
            None => notes.push((n, 1)),
        }
    }
    b.push_str("<footer id=\"method\"><h3>How these numbers were made</h3><ul>");
    b.push_str("<li>Each point is one chstorm bench run with a fixed number of concurrent connections, after a warm-up that is not measured. QPS is the successful queries divided by the measured time.</li>");
    b.push_str("<li>Latency percentiles come from an HDR histogram with 3 significant digits (each within 0.1% of the true value). Per-second charts show the queries and the P99 of the queries that completed in each second.</li>");
    for (n, count) in notes.iter().filter(|(n, _)| !n.trim().is_empty()) {
        let _ = write!(b, "<li>{} <span class=\"muted\">({} runs)</span></li>", escape(n), fmt_int(*count as u64));
    }
    let env = &input.environment;
    let by =
        if env.chstorm_version.is_empty() { "chstorm".to_string() } else { format!("chstorm {}", env.chstorm_version) };
    let when = if env.date.is_empty() { String::new() } else { format!(", from the sweep of {}", env.date) };
    let _ = write!(
        b,
        "<li>Made by {}{}. This file is self-contained: it loads nothing from the network.</li>",
        escape(&by),
        escape(&when)
    );
    b.push_str("</ul></footer>");
}
