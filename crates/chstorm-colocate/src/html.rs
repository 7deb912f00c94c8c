//! The HTML page: one self-contained document (inline CSS and SVG, no scripts, nothing fetched)
//! built from [`chstorm_report`]'s blocks: the environment, the phase table, bar charts of QPS
//! and latency per phase, and what each mechanism did or why it was unavailable.

use crate::report::ColocateReport;
use crate::table::{cells, COLUMNS};
use chstorm_report::html::{escape, page, table};
use chstorm_report::svg::{BarChart, BarSeries, YUnit};
use chstorm_report::Table;
use std::fmt::Write;

/// The category label of a phase in the charts: `baseline`, `offline`, `isolated: sched-idle`.
fn label(name: &str, mechanism: &str) -> String {
    if mechanism == "none" {
        name.to_string()
    } else {
        format!("{name}: {mechanism}")
    }
}

/// Renders the page.
pub fn render(r: &ColocateReport) -> String {
    let mut b = String::new();
    b.push_str("<h1>chstorm colocate</h1>");
    let _ = write!(
        b,
        "<p class=\"sub\">An online ClickHouse measured alone, beside an offline CPU load, and beside the same load isolated. {}</p>",
        escape(r.started_at.as_deref().unwrap_or(""))
    );
    let load = match (&r.offline.command, r.offline.threads) {
        (Some(c), _) => format!("sh -c '{c}'"),
        (None, Some(n)) => format!("{n} burner threads"),
        _ => "?".into(),
    };
    let mut per_phase = match (r.bench.duration_s, r.bench.requests) {
        (Some(d), _) => format!("{d:.1} s"),
        (None, Some(n)) => format!("{n} queries"),
        _ => String::new(),
    };
    if r.rounds > 1 {
        let _ = write!(per_phase, " × {} rounds", r.rounds);
    }
    let env = [
        ("target", format!("{} ({})", r.target, r.protocol)),
        (
            "server",
            format!(
                "{}{}",
                r.server_version.as_deref().unwrap_or("unknown"),
                if r.local_server { ", started by chstorm" } else { "" }
            ),
        ),
        ("machine", format!("{} CPUs, kernel {}", r.cores, r.kernel)),
        ("concurrency", format!("{} ({} loop)", r.bench.concurrency, r.bench.mode)),
        ("per phase", per_phase),
        ("offline load", format!("{load}, warm-up {:.1} s", r.offline.warmup_s)),
        ("isolation", r.isolation.clone()),
        ("server CPU from", r.server_cpu_source.clone()),
    ];
    b.push_str("<dl class=\"env\">");
    for (k, v) in env {
        let _ = write!(b, "<div><dt>{}</dt><dd>{}</dd></div>", escape(k), escape(&v));
    }
    b.push_str("</dl>");
    let _ = write!(b, "<p>Workload: <code>{}</code></p>", escape(&r.bench.workload.join(" | ")));

    let t = Table {
        title: "Phases".into(),
        columns: COLUMNS.iter().map(|c| c.to_string()).collect(),
        rows: r.phases.iter().map(cells).collect(),
        note: Some(format!(
            "Δ against the baseline. CPU shares are percent of all {} CPUs over each measured run.{}",
            r.cores,
            if r.stop_reason == "interrupted" { " Interrupted: these phases are all that was measured." } else { "" }
        )),
    };
    b.push_str(&table(&t));

    let categories: Vec<String> = r.phases.iter().map(|p| label(&p.name, &p.mechanism)).collect();
    let qps = BarChart {
        title: "QPS per phase".into(),
        value_label: "queries per second".into(),
        unit: YUnit::Qps,
        categories: categories.clone(),
        series: vec![BarSeries { name: "QPS".into(), values: r.phases.iter().map(|p| p.qps).collect() }],
        colors: vec![0],
        category_colors: Vec::new(),
    };
    let lat = |name: &str, f: fn(&chstorm_stats::Percentiles) -> f64| BarSeries {
        name: name.into(),
        values: r.phases.iter().map(|p| f(&p.latency_s)).collect(),
    };
    let latency = BarChart {
        title: "Latency per phase".into(),
        value_label: "latency".into(),
        unit: YUnit::Seconds,
        categories,
        series: vec![lat("P50", |l| l.p50), lat("P90", |l| l.p90), lat("P99", |l| l.p99)],
        colors: vec![2, 4, 1],
        category_colors: Vec::new(),
    };
    let _ =
        write!(b, "<div class=\"charts\"><figure>{}</figure><figure>{}</figure></div>", qps.to_svg(), latency.to_svg());

    let m = Table {
        title: "Mechanisms, in detection order".into(),
        columns: vec!["#".into(), "mechanism".into(), "available".into(), "detail".into()],
        rows: r
            .mechanisms
            .iter()
            .map(|m| {
                vec![
                    m.rank.to_string(),
                    m.name.clone(),
                    if m.available { "yes" } else { "no" }.into(),
                    m.detail.clone(),
                ]
            })
            .collect(),
        note: None,
    };
    b.push_str(&table(&m));
    for p in r.phases.iter().filter(|p| !p.isolation.is_empty()) {
        let _ =
            write!(b, "<details><summary>{}: what was applied</summary><ul>", escape(&label(&p.name, &p.mechanism)));
        for line in &p.isolation {
            let _ = write!(b, "<li><code>{}</code></li>", escape(line));
        }
        b.push_str("</ul></details>");
    }
    b.push_str(
        "<footer><ul><li>The bench client (chstorm) runs at normal priority on the same CPUs and competes with the \
         server and the offline load; its own CPU share is in the JSON (<code>client_cpu_pct</code>).</li>\
         <li>Closed-loop latencies leave out queueing for a free connection (see the bench note).</li></ul></footer>",
    );
    page("chstorm colocate", &b)
}
