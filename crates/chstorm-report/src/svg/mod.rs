//! A tiny SVG chart writer with no dependencies: line charts (linear or log2 x axis) and
//! horizontal bar charts.
//!
//! Every chart is one `<svg class="chart" data-points="N">` element, where N is the number of
//! points (or bars) actually plotted, so a test can tell that a chart has data. Charts are 640 px
//! wide in user units and scale with their container through `viewBox`. Values that are NaN or
//! infinite (and x ≤ 0 on a log2 axis) are skipped; a chart with nothing left to plot says
//! "no data" in its plot area.
//!
//! Units: with [`YUnit::Seconds`] values are given in seconds and the axis is drawn in µs, ms or s
//! (see [`LatencyUnit::for_max`]); with [`YUnit::Qps`] in queries per second, ticks as `20k`.

mod axis;
mod bar;
#[cfg(test)]
mod tests;

pub use axis::{fmt_pow2, linear_ticks, log2_ticks, nice_step};
pub use bar::{BarChart, BarSeries};

use crate::format::{fmt_qps, fmt_qps_exact, fmt_seconds, fmt_seconds_sig, fmt_sig, LatencyUnit};
use crate::html::escape;
use axis::Axis;
use std::fmt::Write as _;
/// A colour-blind-friendly palette (Okabe & Ito), in the order series get them.
pub const PALETTE: [&str; 8] = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"];

/// The colour of palette index `i` (wraps around).
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// The fill of a bar (and its legend key) of palette index `i`: the colour for the first
/// [`PALETTE`] series, then the same colours striped (series 9 to 16), then cross-striped
/// (17 to 24), so no two of 24 variants look alike; the patterns come from [`bar_patterns`].
pub fn bar_fill(i: usize) -> String {
    match (i / PALETTE.len()) % 3 {
        0 => color(i).to_string(),
        k => format!("url(#chstorm-bar-{k}-{})", i % PALETTE.len()),
    }
}

/// `<defs>` with the patterns [`bar_fill`] refers to for `indices` (nothing when all are plain).
/// The ids depend only on the index, so several charts on one page may define them alike.
pub fn bar_patterns(indices: &[usize]) -> String {
    let mut out = String::new();
    let mut done: Vec<usize> = Vec::new();
    for &i in indices {
        let k = (i / PALETTE.len()) % 3;
        let key = k * PALETTE.len() + i % PALETTE.len();
        if k == 0 || done.contains(&key) {
            continue;
        }
        done.push(key);
        let c = color(i);
        let stripes = if k == 1 {
            format!("<rect width=\"3\" height=\"6\" fill=\"{c}\"/>")
        } else {
            format!("<rect width=\"3\" height=\"6\" fill=\"{c}\"/><rect width=\"6\" height=\"2\" fill=\"{c}\"/>")
        };
        let _ = write!(
            out,
            "<pattern id=\"chstorm-bar-{k}-{}\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\" \
             patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fff\"/>{stripes}</pattern>",
            i % PALETTE.len()
        );
    }
    if out.is_empty() {
        out
    } else {
        format!("<defs>{out}</defs>")
    }
}

/// Lines past the palette's length are dashed, so the 9th series differs from the 1st.
fn dash(i: usize) -> &'static str {
    match (i / PALETTE.len()) % 3 {
        0 => "",
        1 => " stroke-dasharray=\"7 4\"",
        _ => " stroke-dasharray=\"2 3\"",
    }
}

/// Chart width in SVG user units (px at 100%).
pub const WIDTH: f64 = 640.0;
const DEFAULT_PLOT_H: f64 = 250.0;
const MARGIN_R: f64 = 18.0;
const FONT: &str = "system-ui, -apple-system, Segoe UI, Roboto, Arial, sans-serif";
const GRID: &str = "#e3e6ea";
const AXIS: &str = "#8c959f";
const TEXT: &str = "#1f2328";
const MUTED: &str = "#59636e";

/// One line: `(x, y)` points in the chart's units. Order does not matter; lines join points by x.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), points }
    }
}

/// How the x axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XScale {
    /// Evenly spaced 1-2-5 ticks.
    #[default]
    Linear,
    /// Powers of two, labelled 1, 2, 4, … 2048 (for concurrency levels). x ≤ 0 is skipped.
    Log2,
}

/// What y values are, which decides tick labels, the axis unit and tooltip text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum YUnit {
    /// Plain numbers (large ones as `k`/`M`).
    #[default]
    Plain,
    /// Queries per second: ticks `20k`, tooltips `12,345 QPS`.
    Qps,
    /// Seconds, shown in µs, ms or s according to the largest value; the unit is added to the axis label.
    Seconds,
}

/// A line chart. Build with [`LineChart::new`] (or `..Default::default()`), then [`LineChart::to_svg`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    /// Axis label without unit; for [`YUnit::Seconds`] the unit (`ms`, …) is appended.
    pub y_label: String,
    pub x_scale: XScale,
    pub series: Vec<Series>,
    pub y_unit: YUnit,
    /// Palette index of each series, so one variant keeps its colour across charts; series past the
    /// end of this list use their position.
    pub colors: Vec<usize>,
    /// Series with more points than this are drawn as a plain line without circles (their points
    /// still count in `data-points`); 0 means the default, 120.
    pub max_markers: usize,
    /// Height of the plot area in px; 0 means the default, 250.
    pub plot_height: u32,
}

impl LineChart {
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
        x_scale: XScale,
        y_unit: YUnit,
    ) -> LineChart {
        LineChart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_scale,
            y_unit,
            ..Default::default()
        }
    }

    /// The chart as one `<svg class="chart" data-points="N">` element.
    pub fn to_svg(&self) -> String {
        // Plottable points per series, joined in x order.
        let series: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|s| {
                let mut p: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|&(x, y)| x.is_finite() && y.is_finite() && (self.x_scale == XScale::Linear || x > 0.0))
                    .collect();
                p.sort_by(|a, b| a.0.total_cmp(&b.0));
                p
            })
            .collect();
        let n: usize = series.iter().map(Vec::len).sum();
        let colors: Vec<usize> = (0..self.series.len()).map(|i| self.colors.get(i).copied().unwrap_or(i)).collect();
        let names: Vec<&str> = self.series.iter().map(|s| s.name.as_str()).collect();
        let plot_h = if self.plot_height == 0 { DEFAULT_PLOT_H } else { f64::from(self.plot_height) };

        let mut out = String::new();
        // A lone series already named in the title needs no legend.
        let legend = if names.len() == 1 && self.title.contains(names[0]) {
            Legend { items: Vec::new(), bottom: 30.0, square: false }
        } else {
            Legend::layout(&names, &colors, 14.0, WIDTH - MARGIN_R, 38.0)
        };
        let top = legend.bottom + 10.0;
        if n == 0 {
            let height = top + plot_h + 20.0;
            open_svg(&mut out, &self.title, height, 0);
            legend.write(&mut out);
            no_data(&mut out, 14.0, top, WIDTH - MARGIN_R - 14.0, plot_h);
            out.push_str("</svg>");
            return out;
        }

        let xs = series.iter().flatten().map(|p| p.0);
        let ys = series.iter().flatten().map(|p| p.1);
        let x_axis = match self.x_scale {
            XScale::Linear => Axis::linear(xs, 7, false, YUnit::Plain),
            XScale::Log2 => Axis::log2(xs),
        };
        let y_axis = Axis::linear(ys, 5, true, self.y_unit);
        let y_label = match y_axis.unit {
            Some(u) if self.y_label.is_empty() => u.suffix().to_string(),
            Some(u) => format!("{} ({})", self.y_label, u.suffix()),
            None => self.y_label.clone(),
        };
        let widest = y_axis.labels.iter().map(|l| text_w(l, 11.0)).fold(0.0, f64::max);
        let left = (30.0 + widest + 8.0).clamp(52.0, 140.0);
        let right = WIDTH - MARGIN_R;
        let bottom = top + plot_h;
        let height = bottom + 44.0;
        let px = |x: f64| left + x_axis.frac(x) * (right - left);
        // Ticks are in the axis's display unit (ms for latencies); data is in the chart's unit (s).
        let y_factor = y_axis.unit.map_or(1.0, LatencyUnit::factor);
        let tick_y = |t: f64| bottom - y_axis.frac(t) * plot_h;
        let py = |y: f64| tick_y(y * y_factor);

        open_svg(&mut out, &self.title, height, n);
        legend.write(&mut out);
        // Grid: one path; tick labels: one group per axis.
        out.push_str("<path class=\"grid\" fill=\"none\" stroke=\"");
        out.push_str(GRID);
        out.push_str("\" d=\"");
        for &t in &y_axis.ticks {
            let _ = write!(out, "M{left:.1} {:.1}H{right:.1}", tick_y(t));
        }
        for &t in &x_axis.ticks {
            let _ = write!(out, "M{:.1} {top:.1}V{bottom:.1}", px(t));
        }
        let _ = write!(out, "\"/><g fill=\"{MUTED}\" text-anchor=\"end\">");
        for (t, label) in y_axis.ticks.iter().zip(&y_axis.labels) {
            let _ = write!(out, "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>", left - 6.0, tick_y(*t) + 4.0, escape(label));
        }
        let _ = write!(out, "</g><g fill=\"{MUTED}\" text-anchor=\"middle\">");
        for (t, label) in x_axis.ticks.iter().zip(&x_axis.labels) {
            if !label.is_empty() {
                let _ = write!(out, "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>", px(*t), bottom + 15.0, escape(label));
            }
        }
        out.push_str("</g>");
        let _ = write!(
            out,
            "<rect x=\"{left:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{plot_h:.1}\" fill=\"none\" stroke=\"{AXIS}\"/>",
            right - left
        );
        axis_labels(&mut out, &self.x_label, &y_label, (left + right) / 2.0, bottom + 35.0, (top + bottom) / 2.0);

        // Lines, then markers on top. A marker's tooltip names its series only when there are several.
        let max_markers = if self.max_markers == 0 { 120 } else { self.max_markers };
        let x_name = escape(if self.x_label.is_empty() { "x" } else { &self.x_label });
        // "12,345 QPS" says what it is; other values get the axis name: "P99 latency: 4.5 ms".
        let y_prefix = match self.y_unit {
            YUnit::Qps => String::new(),
            _ => format!("{}: ", escape(if self.y_label.is_empty() { "y" } else { &self.y_label })),
        };
        for (i, pts) in series.iter().enumerate() {
            if pts.is_empty() {
                continue;
            }
            let c = color(colors[i]);
            let name = escape(names[i]);
            let _ = write!(out, "<g class=\"series\" data-series=\"{name}\">");
            if pts.len() > 1 {
                let _ = write!(
                    out,
                    "<polyline fill=\"none\" stroke-width=\"2\" stroke-linejoin=\"round\" stroke=\"{c}\"{} points=\"",
                    dash(colors[i])
                );
                for (k, &(x, y)) in pts.iter().enumerate() {
                    let sep = if k == 0 { "" } else { " " };
                    let _ = write!(out, "{sep}{:.1},{:.1}", px(x), py(y));
                }
                let _ = write!(out, "\"><title>{name}</title></polyline>");
            }
            if pts.len() <= max_markers {
                let _ = write!(out, "<g fill=\"{c}\" stroke=\"#fff\">");
                let prefix = if series.len() > 1 { format!("{name}&#10;") } else { String::new() };
                for &(x, y) in pts {
                    let _ = write!(
                        out,
                        "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.2\"><title>{prefix}{x_name}: {}&#10;{y_prefix}{}</title></circle>",
                        px(x),
                        py(y),
                        fmt_sig(x, 6),
                        escape(&exact(y, self.y_unit))
                    );
                }
                out.push_str("</g>");
            }
            out.push_str("</g>");
        }
        out.push_str("</svg>");
        out
    }
}

/// Exact value for a tooltip.
fn exact(v: f64, unit: YUnit) -> String {
    match unit {
        YUnit::Qps => format!("{} QPS", fmt_qps_exact(v)),
        YUnit::Seconds => fmt_seconds_sig(v, 4),
        YUnit::Plain => fmt_sig(v, 6),
    }
}

/// Short value for a bar label.
fn short(v: f64, unit: YUnit) -> String {
    match unit {
        YUnit::Qps | YUnit::Plain => fmt_qps(v),
        YUnit::Seconds => fmt_seconds(v),
    }
}

fn open_svg(out: &mut String, title: &str, height: f64, points: usize) {
    let t = escape(title);
    let _ = write!(
        out,
        "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH:.0} {height:.0}\" width=\"{WIDTH:.0}\" height=\"{height:.0}\" role=\"img\" data-points=\"{points}\" font-family=\"{FONT}\" font-size=\"11\">"
    );
    let _ = write!(out, "<title>{t}</title><rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>");
    let _ = write!(
        out,
        "<text x=\"14\" y=\"22\" font-size=\"14\" font-weight=\"600\" fill=\"{TEXT}\">{}</text>",
        escape(&truncate(title, 70))
    );
}

fn no_data(out: &mut String, x: f64, y: f64, w: f64, h: f64) {
    let _ = write!(
        out,
        "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"#f6f8fa\" stroke=\"{AXIS}\" stroke-dasharray=\"4 3\"/>"
    );
    let _ = write!(
        out,
        "<text class=\"no-data\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"18\" fill=\"{MUTED}\">no data</text>",
        x + w / 2.0,
        y + h / 2.0 + 6.0
    );
}

fn axis_labels(out: &mut String, x_label: &str, y_label: &str, x_mid: f64, x_base: f64, y_mid: f64) {
    if !x_label.is_empty() {
        let _ = write!(
            out,
            "<text x=\"{x_mid:.1}\" y=\"{x_base:.1}\" text-anchor=\"middle\" font-size=\"12\" fill=\"{TEXT}\">{}</text>",
            escape(x_label)
        );
    }
    if !y_label.is_empty() {
        let _ = write!(
            out,
            "<text transform=\"translate(16 {y_mid:.1}) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\" fill=\"{TEXT}\">{}</text>",
            escape(y_label)
        );
    }
}

/// Approximate width in px of `s` in the chart font at `size` px.
fn text_w(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.58
}

fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max_chars.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A legend laid out left to right under the title, wrapping onto more rows as needed.
struct Legend {
    /// (x, y, colour index, name)
    items: Vec<(f64, f64, usize, String)>,
    bottom: f64,
    /// Square keys (bars) instead of a line with a dot.
    square: bool,
}

impl Legend {
    fn layout(names: &[&str], colors: &[usize], left: f64, right: f64, first_row_y: f64) -> Legend {
        const ROW: f64 = 17.0;
        let mut items = Vec::new();
        let (mut x, mut y) = (left, first_row_y);
        for (i, name) in names.iter().enumerate() {
            let label = truncate(name, 48);
            let w = 24.0 + text_w(&label, 12.0) + 16.0;
            if x > left && x + w > right {
                x = left;
                y += ROW;
            }
            items.push((x, y, colors.get(i).copied().unwrap_or(i), label));
            x += w;
        }
        let bottom = if items.is_empty() { first_row_y - 10.0 } else { y + 6.0 };
        Legend { items, bottom, square: false }
    }

    fn write(&self, out: &mut String) {
        if self.items.is_empty() {
            return;
        }
        out.push_str("<g class=\"legend\" font-size=\"12\">");
        for (x, y, c, name) in &self.items {
            let col = color(*c);
            if self.square {
                let _ = write!(
                    out,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"11\" height=\"11\" rx=\"2\" fill=\"{}\" stroke=\"{col}\"/>",
                    x + 4.0,
                    y - 10.0,
                    bar_fill(*c)
                );
                let _ = write!(out, "<text x=\"{:.1}\" y=\"{y:.1}\" fill=\"{TEXT}\">{}</text>", x + 20.0, escape(name));
                continue;
            }
            let _ = write!(
                out,
                "<line x1=\"{x:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{col}\" stroke-width=\"2.5\"{}/><circle class=\"key\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.2\" fill=\"{col}\"/>",
                x + 18.0,
                y - 4.0,
                y - 4.0,
                dash(*c),
                x + 9.0,
                y - 4.0
            );
            let _ = write!(out, "<text x=\"{:.1}\" y=\"{y:.1}\" fill=\"{TEXT}\">{}</text>", x + 24.0, escape(name));
        }
        out.push_str("</g>");
    }
}
