//! Horizontal bar charts.

use super::Axis;
use super::{
    axis_labels, bar_fill, bar_patterns, exact, no_data, open_svg, short, truncate, Legend, YUnit, AXIS, GRID,
    MARGIN_R, MUTED, TEXT, WIDTH,
};
use crate::format::LatencyUnit;
use crate::html::escape;
use std::fmt::Write as _;

/// Width in px of one character of a category label (11 px text), and the most the labels' column
/// takes of the chart's 640: room for a variant such as `http max_threads=32
/// use_uncompressed_cache=0`; longer labels are cut with an ellipsis (the whole in a tooltip).
const LABEL_CHAR_W: f64 = 6.4;
const MAX_LABEL_W: f64 = 300.0;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct BarSeries {
    pub name: String,
    pub values: Vec<f64>,
}

/// A horizontal bar chart: one group of bars per category, top to bottom, one bar per series
/// that has a finite value for that category. Missing, NaN or infinite values draw no bar, and the
/// remaining bars of a group close up. Bars are labelled with their value at the end.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BarChart {
    pub title: String,
    /// Label of the value (horizontal) axis, without unit; for [`YUnit::Seconds`] the unit is appended.
    pub value_label: String,
    pub unit: YUnit,
    pub categories: Vec<String>,
    pub series: Vec<BarSeries>,
    /// Palette index of each series; series past the end of this list use their position.
    pub colors: Vec<usize>,
    /// With one series: the palette index of each category's bar, for a chart whose categories
    /// are the variants (each labelled where its bar is, so no legend is drawn). Categories past
    /// the end of this list, and every bar of a chart with several series, use the series' colour.
    pub category_colors: Vec<usize>,
}

impl BarChart {
    /// The chart as one `<svg class="chart" data-points="N">` element, N being the number of bars.
    pub fn to_svg(&self) -> String {
        const BAR: f64 = 14.0;
        const GAP: f64 = 3.0;
        const GROUP_PAD: f64 = 10.0;
        let colors: Vec<usize> = (0..self.series.len()).map(|i| self.colors.get(i).copied().unwrap_or(i)).collect();
        // The palette index of the bar of series `s` in category `c`.
        let bar_color = |s: usize, c: usize| match self.category_colors.get(c) {
            Some(&k) if self.series.len() == 1 => k,
            _ => colors[s],
        };
        let mut used: Vec<usize> = colors.clone();
        if self.series.len() == 1 {
            used.extend(&self.category_colors);
        }
        // Bars per category: (series index, value).
        let groups: Vec<Vec<(usize, f64)>> = (0..self.categories.len())
            .map(|c| {
                self.series
                    .iter()
                    .enumerate()
                    .filter_map(|(s, ser)| ser.values.get(c).copied().filter(|v| v.is_finite()).map(|v| (s, v)))
                    .collect()
            })
            .collect();
        let n: usize = groups.iter().map(Vec::len).sum();
        let names: Vec<&str> = self.series.iter().map(|s| s.name.as_str()).collect();
        let legend = if self.series.len() > 1 {
            Legend { square: true, ..Legend::layout(&names, &colors, 14.0, WIDTH - MARGIN_R, 38.0) }
        } else {
            Legend { items: Vec::new(), bottom: 30.0, square: false }
        };
        let top = legend.bottom + 8.0;
        let mut out = String::new();
        if n == 0 {
            let h = 120.0;
            open_svg(&mut out, &self.title, top + h + 20.0, 0);
            out.push_str(&bar_patterns(&used));
            legend.write(&mut out);
            no_data(&mut out, 14.0, top, WIDTH - MARGIN_R - 14.0, h);
            out.push_str("</svg>");
            return out;
        }
        let axis = Axis::linear(groups.iter().flatten().map(|b| b.1), 6, true, self.unit);
        let factor = axis.unit.map_or(1.0, LatencyUnit::factor);
        let label_chars = self.categories.iter().map(|c| c.chars().count()).max().unwrap_or(0);
        let label_w = (label_chars as f64 * LABEL_CHAR_W + 14.0).clamp(60.0, MAX_LABEL_W);
        let left = label_w + 8.0;
        let right = WIDTH - MARGIN_R - 52.0; // room for the value at a bar's end
        let heights: Vec<f64> = groups.iter().map(|g| g.len().max(1) as f64 * (BAR + GAP) - GAP + GROUP_PAD).collect();
        let plot_h: f64 = heights.iter().sum::<f64>() + GROUP_PAD;
        let bottom = top + plot_h;
        let height = bottom + 44.0;
        let px = |v: f64| left + axis.frac(v * factor) * (right - left);

        open_svg(&mut out, &self.title, height, n);
        out.push_str(&bar_patterns(&used));
        legend.write(&mut out);
        out.push_str("<g class=\"grid\">");
        for (i, &t) in axis.ticks.iter().enumerate() {
            let x = left + axis.frac(t) * (right - left);
            let _ =
                write!(out, "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top:.1}\" y2=\"{bottom:.1}\" stroke=\"{GRID}\"/>");
            let _ = write!(
                out,
                "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"{MUTED}\">{}</text>",
                bottom + 15.0,
                escape(axis.labels.get(i).map(String::as_str).unwrap_or(""))
            );
        }
        out.push_str("</g>");
        let value_label = match axis.unit {
            Some(u) => format!("{} ({})", self.value_label, u.suffix()),
            None => self.value_label.clone(),
        };
        axis_labels(&mut out, &value_label, "", (left + right) / 2.0, bottom + 35.0, 0.0);
        let zero = px(0.0f64.clamp(axis.lo / factor, axis.hi / factor));
        let mut y = top + GROUP_PAD;
        let max_chars = ((label_w - 10.0) / LABEL_CHAR_W).max(4.0) as usize;
        for (c, group) in groups.iter().enumerate() {
            let cat = &self.categories[c];
            let gh = heights[c] - GROUP_PAD;
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{TEXT}\">{}<title>{}</title></text>",
                label_w,
                y + gh / 2.0 + 4.0,
                escape(&truncate(cat, max_chars)),
                escape(cat)
            );
            if group.is_empty() {
                let _ = write!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{MUTED}\">no data</text>",
                    left + 6.0,
                    y + BAR - 3.0
                );
            }
            for (k, &(s, v)) in group.iter().enumerate() {
                let by = y + k as f64 * (BAR + GAP);
                let (x0, x1) = if px(v) >= zero { (zero, px(v)) } else { (px(v), zero) };
                let _ = write!(
                    out,
                    "<rect class=\"bar\" x=\"{x0:.1}\" y=\"{by:.1}\" width=\"{:.1}\" height=\"{BAR:.1}\" fill=\"{}\"><title>{}&#10;{}: {}</title></rect>",
                    (x1 - x0).max(0.5),
                    bar_fill(bar_color(s, c)),
                    escape(cat),
                    escape(names[s]),
                    escape(&exact(v, self.unit))
                );
                let _ = write!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{TEXT}\" font-size=\"10.5\">{}</text>",
                    x1 + 4.0,
                    by + BAR - 3.0,
                    escape(&short(v, self.unit))
                );
            }
            y += heights[c];
        }
        let _ = write!(
            out,
            "<line x1=\"{zero:.1}\" x2=\"{zero:.1}\" y1=\"{top:.1}\" y2=\"{bottom:.1}\" stroke=\"{AXIS}\"/>"
        );
        out.push_str("</svg>");
        out
    }
}
