mod common;

use chstorm_report::{render_sweep, ReportInput, Section};
use common::{chart_points, synthetic_input};

#[test]
fn renders_one_self_contained_document() {
    let input = synthetic_input();
    let html = render_sweep(&input);
    println!("report size: {} bytes", html.len());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<html").count(), 1);
    assert_eq!(html.matches("</html>").count(), 1);
    assert!(html.trim_end().ends_with("</html>"));
    // Nothing is loaded from anywhere.
    for bad in ["<script", "src=", "@import", "<link", "<iframe", "<img", "https://"] {
        assert!(!html.contains(bad), "report contains {bad:?}");
    }
    // url() only for the page's own patterns (striped bars), never to fetch anything.
    assert!(html.split("url(").skip(1).all(|u| u.starts_with('#')), "report loads a url()");
    for href in html.split("href=\"").skip(1) {
        assert!(href.starts_with('#'), "href to {:?}", &href[..href.len().min(40)]);
    }
    // http:// appears only in the SVG namespace and in the (escaped) target text.
    let ns = html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count();
    let target = html.matches("http://127.0.0.1:8123").count();
    assert_eq!(html.matches("http://").count(), ns + target);
    assert!(html.len() < 1_500_000, "report is {} bytes", html.len());
}

#[test]
fn every_chart_has_data() {
    let html = render_sweep(&synthetic_input());
    let points = chart_points(&html);
    // A summary panel per scenario + per scenario: 4 by concurrency, 2 over time, 2 per point in
    // the details.
    assert_eq!(points.len(), 2 + 2 * (4 + 2 + 3 * 9 * 2));
    assert!(points.iter().all(|&n| n > 0), "{points:?}");
    assert_eq!(&points[..2], &[3, 3], "each summary panel has one bar per variant of its scenario");
    assert_eq!(points[2], 27, "QPS chart of the first scenario: 3 variants × 9 levels");
    assert!(!html.contains(">no data<"));
    // log2 axis labelled 1 … 256.
    for l in [">1<", ">2<", ">16<", ">128<", ">256<"] {
        assert!(html.contains(l), "{l}");
    }
}

#[test]
fn tables_hold_the_numbers() {
    let input = synthetic_input();
    let html = render_sweep(&input);
    // ping, http keep-alive at 64: QPS 97000 × 64/72 / 1.0256 = 84,070; P99 = 3 × 64/QPS s = 2.28 ms.
    assert!(html.contains("<td>http keep-alive</td><td class=\"num\">64</td><td class=\"num\">84,070</td>"));
    assert!(html.contains("<td class=\"num\">2.28</td>"), "P99 in ms");
    // Every point's QPS is in a table.
    for p in &input.points {
        let q = chstorm_report::format::fmt_qps_exact(p.result.qps);
        assert!(html.contains(&format!("<td class=\"num\">{q}</td>")), "{q}");
    }
    // Headers, summary, environment, extra table, footer note.
    for s in [
        "P50 (ms)",
        "P99.9 (ms)",
        "Best QPS per scenario and variant",
        "24.3.2.23",
        "8.0 GiB",
        "<caption>Threads</caption>",
        "max_threads=1 helps at high concurrency",
        "closed loop: each latency",
        "connect: 3",
        "<code>log_queries=0</code>",
        "synthetic data for tests &amp; screenshots",
    ] {
        assert!(html.contains(s), "missing {s:?}");
    }
}

#[test]
fn text_is_escaped_and_sections_ordered() {
    let html = render_sweep(&synthetic_input());
    assert!(html.contains("WHERE number &lt; 5 AND &#39;a&#39; &lt;&gt; &#39;b&#39; &amp; 1"));
    assert!(!html.contains("number < 5"));
    assert!(!html.contains("<filter>"));
    assert!(html.contains("select 1 &lt;filter&gt;"));
    // Section order follows `sections`, not the points.
    let a = html.find("<h2>select 1 &lt;filter&gt;</h2>").unwrap();
    let b = html.find("<h2>ping</h2>").unwrap();
    assert!(a < b);
}

#[test]
fn output_is_deterministic() {
    let input = synthetic_input();
    assert_eq!(render_sweep(&input), render_sweep(&input));
}

#[test]
fn odd_input_does_not_panic() {
    // Nothing at all.
    let html = render_sweep(&ReportInput::default());
    assert!(html.contains("No results yet"));
    assert!(chart_points(&html).is_empty());
    // A section without points, NaN and zero values, a lone point, no per-second data.
    let mut input = synthetic_input();
    input.sections.push(Section { scenario: "empty".into(), description: "nothing ran".into(), extra_tables: vec![] });
    input.points.truncate(2);
    input.points[0].result.qps = f64::NAN;
    input.points[0].result.latency_s.p99 = f64::INFINITY;
    input.points[1].result.qps = 0.0;
    input.points[1].result.per_second.clear();
    input.points[1].concurrency = 0;
    let mut lone = input.points[1].clone();
    lone.scenario = "lone".into();
    lone.concurrency = 7;
    input.points.push(lone);
    let html = render_sweep(&input);
    assert!(html.contains("No results for this scenario."));
    assert!(!html.contains("NaN") && !html.contains("inf<"));
}

#[test]
fn write_sweep_writes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.html");
    chstorm_report::write_sweep(&path, &synthetic_input()).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("<!DOCTYPE html>"));
    assert!(!dir.path().join("report.html.tmp").exists());
}

#[test]
fn many_variants_keep_distinct_colours_and_the_best_of_table_its_width() {
    // Two suites in one page, as the demo makes: 17 variants, more than the palette's 8 colours.
    let mut input = synthetic_input();
    input.points.clear();
    for (scenario, n) in [("storm", 9), ("shopee", 8)] {
        for v in 0..n {
            for c in [1u64, 8] {
                let variant = format!("{scenario} variant {v} max_threads={v} use_uncompressed_cache=0");
                input.points.push(chstorm_report::Point {
                    scenario: scenario.into(),
                    variant: variant.clone(),
                    concurrency: c,
                    result: common::bench(scenario, &variant, c, 1000.0 + v as f64, "SELECT 1"),
                });
            }
        }
    }
    let html = render_sweep(&input);
    let summary = summary_of(&html);
    let fills: Vec<&str> = summary.split("<rect class=\"bar\"").skip(1).map(|r| attr(r, "fill")).collect();
    assert_eq!(fills.len(), 17);
    let distinct: std::collections::BTreeSet<&&str> = fills.iter().collect();
    assert_eq!(distinct.len(), 17, "variants share a colour: {fills:?}");
    // The best-of table is not squeezed into half the page beside the panels.
    let table_at = summary.find("<caption>Best QPS per scenario and variant").unwrap();
    assert!(!summary[..table_at].contains("class=\"grid2\""), "the table sits in a grid column");
    assert!(!summary[summary.find("</div>").unwrap()..table_at].contains("<figure"), "the table follows the panels");
}

/// The summary section of a report.
fn summary_of(html: &str) -> &str {
    let summary = &html[html.find("id=\"summary\"").unwrap()..];
    &summary[..summary.find("</section>").unwrap()]
}

/// The value of attribute `name` in the tag that `tag` starts.
fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let tag = tag.split('>').next().unwrap();
    let at = tag.find(&format!(" {name}=\"")).unwrap_or_else(|| panic!("no {name} in {tag}")) + name.len() + 3;
    tag[at..].split('"').next().unwrap()
}

/// The bar fill of the palette index a line was drawn with: its colour, and past the palette's
/// length its dashes (striped and cross-striped bars).
fn bar_fill_of_line(polyline: &str) -> String {
    let stroke = attr(polyline, "stroke");
    let palette = chstorm_report::svg::PALETTE;
    let i = palette.iter().position(|c| *c == stroke).unwrap_or_else(|| panic!("{stroke} is not in the palette"));
    let tag = polyline.split('>').next().unwrap();
    let k = if tag.contains("stroke-dasharray=\"7 4\"") {
        1
    } else if tag.contains("stroke-dasharray=\"2 3\"") {
        2
    } else {
        0
    };
    chstorm_report::svg::bar_fill(i + k * palette.len())
}

fn num(s: &str) -> f64 {
    s.parse().unwrap_or_else(|_| panic!("{s:?} is not a number"))
}

/// The summary of a demo's sweep: one panel per scenario, in page order, each with one bar per
/// variant of its scenario (labelled with it, coloured as its lines in the scenario's charts), no
/// legend, and its own scale: the longest bar of every panel, the slowest scenario's too, spans
/// most of the panel (on one axis for all, a 300 QPS lookup beside /ping's 97k was 0.3 % of it).
#[test]
fn one_summary_panel_per_scenario() {
    let input = common::demo_like_input();
    let html = render_sweep(&input);
    let summary = summary_of(&html);
    let panels: Vec<&str> = summary.split("<figure class=\"summary-panel\"").skip(1).collect();
    let names: Vec<&str> = panels.iter().map(|p| attr(p, "data-scenario")).collect();
    let scenarios: Vec<&str> = input.sections.iter().map(|s| s.scenario.as_str()).collect();
    assert_eq!(names, scenarios, "one panel per scenario, in page order");
    assert_eq!(summary.matches("<svg class=\"chart\"").count(), scenarios.len(), "no other chart in the summary");
    for (panel, name) in panels.iter().zip(&names) {
        let panel = &panel[..panel.find("</figure>").unwrap()];
        let mut variants: Vec<&str> = Vec::new();
        for p in input.points.iter().filter(|p| p.scenario == *name) {
            if !variants.contains(&p.variant.as_str()) {
                variants.push(&p.variant);
            }
        }
        assert_eq!(common::chart_points(panel), vec![variants.len()], "{name}: a bar per variant");
        assert!(!panel.contains("class=\"legend\""), "{name}: the bars are labelled, no legend");
        // Each bar: its variant's label and the colour of the variant's line in the scenario's QPS chart.
        let section = &html[html.find(&format!("<h2>{name}</h2>")).unwrap()..];
        let bars: Vec<&str> = panel.split("<rect class=\"bar\"").skip(1).collect();
        for (v, bar) in variants.iter().zip(&bars) {
            let title = bar.split("<title>").nth(1).unwrap().split("</title>").next().unwrap();
            assert!(title.starts_with(&format!("{v}&#10;")), "{name}: bar of {v} is titled {title}");
            assert!(panel.contains(&format!(">{v}<title>")), "{name}: {v} labels its bar");
            let line = section.split(&format!("data-series=\"{v}\"")).nth(1).unwrap();
            let polyline = line.split("<polyline").nth(1).unwrap();
            assert_eq!(attr(bar, "fill"), bar_fill_of_line(polyline), "{name}: {v} has its colour");
        }
        // Its own scale: from the zero line to the last gridline is the plot; the longest bar
        // covers more than half of it (1-2-5 ticks put the top tick under 1.5 x the largest bar).
        let grid = panel.split("<g class=\"grid\">").nth(1).unwrap().split("</g>").next().unwrap();
        let xs: Vec<f64> = grid.split("<line").skip(1).map(|l| num(attr(l, "x1"))).collect();
        let (zero, end) = (xs[0], xs[xs.len() - 1]);
        let longest = bars.iter().map(|b| num(attr(b, "width"))).fold(0.0, f64::max);
        assert!(longest > 0.5 * (end - zero), "{name}: longest bar {longest} of a {} px plot", end - zero);
    }
}
