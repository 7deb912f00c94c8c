//! Tests of the chart writer.

use super::*;

fn points_attr(svg: &str) -> usize {
    let i = svg.find("data-points=\"").expect("data-points") + 13;
    svg[i..].split('"').next().unwrap().parse().unwrap()
}

#[test]
fn ticks_are_1_2_5() {
    assert_eq!(nice_step(97_000.0, 5), 20_000.0);
    assert_eq!(nice_step(1.0, 5), 0.2);
    assert_eq!(nice_step(40.0, 5), 10.0);
    assert_eq!(nice_step(7.0, 7), 1.0);
    assert_eq!(nice_step(0.003, 5), 0.001);
    assert_eq!(linear_ticks(0.0, 97_000.0, 5), vec![0.0, 20_000.0, 40_000.0, 60_000.0, 80_000.0, 100_000.0]);
    assert_eq!(linear_ticks(0.0, 1.0, 5), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
    assert_eq!(linear_ticks(0.0, 0.3, 3), vec![0.0, 0.1, 0.2, 0.3]);
    assert_eq!(linear_ticks(3.0, 17.0, 7), vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0]);
    assert_eq!(linear_ticks(-5.0, 5.0, 5), vec![-6.0, -4.0, -2.0, 0.0, 2.0, 4.0, 6.0]);
    assert_eq!(linear_ticks(f64::NAN, 1.0, 5), vec![0.0, 1.0]);
    assert!(linear_ticks(-1e308, 1e308, 5).len() <= 100);
}

#[test]
fn log2_ticks_are_powers_of_two() {
    let t = log2_ticks(1.0, 2048.0);
    assert_eq!(t.len(), 12);
    let labels: Vec<String> = t.iter().map(|&v| fmt_pow2(v)).collect();
    assert_eq!(labels.join(","), "1,2,4,8,16,32,64,128,256,512,1024,2048");
    assert_eq!(log2_ticks(3.0, 100.0), vec![2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]);
    assert_eq!(log2_ticks(1.0, 1.0), vec![1.0, 2.0]);
    assert_eq!(log2_ticks(8.0, 8.0), vec![4.0, 8.0, 16.0]);
    assert_eq!(log2_ticks(0.0, 8.0), vec![1.0, 2.0]);
    assert_eq!(fmt_pow2(0.5), "0.5");
    // Many ticks: every other label is left out.
    let a = Axis::log2([1.0, 65536.0].into_iter());
    assert_eq!(a.ticks.len(), 17);
    assert!(a.labels.iter().filter(|l| l.is_empty()).count() >= 8);
}

#[test]
fn empty_chart_says_no_data() {
    let mut c = LineChart::new("QPS", "concurrency", "QPS", XScale::Log2, YUnit::Qps);
    let svg = c.to_svg();
    assert!(svg.contains("class=\"chart\""));
    assert!(svg.contains(">no data</text>"));
    assert_eq!(points_attr(&svg), 0);
    c.series.push(Series::new("empty", vec![]));
    c.series.push(Series::new("bad", vec![(f64::NAN, 1.0), (0.0, 5.0), (4.0, f64::INFINITY)]));
    let svg = c.to_svg();
    assert!(svg.contains(">no data</text>"));
    assert_eq!(points_attr(&svg), 0);
    let b = BarChart { title: "best".into(), ..Default::default() }.to_svg();
    assert!(b.contains(">no data</text>"));
    assert_eq!(points_attr(&b), 0);
}

#[test]
fn nan_and_inf_are_skipped() {
    let mut c = LineChart::new("P99", "concurrency", "P99", XScale::Log2, YUnit::Seconds);
    c.series.push(Series::new(
        "http <keep-alive>",
        vec![(1.0, 0.002), (2.0, f64::NAN), (4.0, f64::INFINITY), (8.0, 0.004), (-1.0, 0.1)],
    ));
    let svg = c.to_svg();
    assert_eq!(points_attr(&svg), 2);
    assert_eq!(svg.matches("<circle cx=").count(), 2);
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
    assert!(svg.contains("P99 (ms)"));
    assert!(svg.contains("http &lt;keep-alive&gt;"));
    assert!(svg.contains("P99: 4 ms"));
    assert!(!svg.contains(">no data<"));
}

fn circle_ys(svg: &str) -> Vec<f64> {
    svg.split("<circle cx=\"")
        .skip(1)
        .filter_map(|c| c.split("cy=\"").nth(1)?.split('"').next()?.parse().ok())
        .collect()
}

#[test]
fn seconds_are_plotted_in_the_axis_unit() {
    let mut c = LineChart::new("P99", "concurrency", "P99", XScale::Log2, YUnit::Seconds);
    c.series.push(Series::new("a", vec![(1.0, 0.0), (2.0, 0.010)]));
    let svg = c.to_svg();
    let ys = circle_ys(&svg);
    assert_eq!(ys.len(), 2);
    // 0 sits on the bottom edge and 10 ms on the top tick: the whole plot height apart.
    assert!((ys[0] - ys[1] - DEFAULT_PLOT_H).abs() < 0.2, "{ys:?}");
    // ... and so does the 10 ms tick label (4 px below the gridline).
    assert!(svg.contains(&format!("y=\"{:.1}\">10<", ys[1] + 4.0)), "{svg}");
}

#[test]
fn single_point_and_zeros() {
    let mut c = LineChart::new("one", "concurrency", "QPS", XScale::Log2, YUnit::Qps);
    c.series.push(Series::new("a", vec![(64.0, 0.0)]));
    let svg = c.to_svg();
    assert_eq!(points_attr(&svg), 1);
    assert!(svg.contains(">32<") && svg.contains(">64<") && svg.contains(">128<"));
    let mut l = LineChart::new("t", "second", "QPS", XScale::Linear, YUnit::Qps);
    l.series.push(Series::new("a", vec![(5.0, 100.0)]));
    assert_eq!(points_attr(&l.to_svg()), 1);
}

#[test]
fn microseconds_when_all_under_a_millisecond() {
    let mut c = LineChart::new("P50", "concurrency", "P50", XScale::Log2, YUnit::Seconds);
    c.series.push(Series::new("a", vec![(1.0, 0.000_120), (2.0, 0.000_450)]));
    assert!(c.to_svg().contains("P50 (µs)"));
}

#[test]
fn colours_and_legend() {
    let mut c = LineChart::new("QPS", "concurrency", "QPS", XScale::Log2, YUnit::Qps);
    for i in 0..10 {
        c.series.push(Series::new(format!("variant {i}"), vec![(1.0, i as f64), (2.0, 2.0 * i as f64)]));
    }
    let svg = c.to_svg();
    for p in &PALETTE[..4] {
        assert!(svg.contains(p));
    }
    assert!(svg.contains("stroke-dasharray=\"7 4\""));
    assert!(svg.contains(">variant 9</text>"));
    assert_eq!(points_attr(&svg), 20);
}

#[test]
fn bars() {
    let b = BarChart {
        title: "best QPS".into(),
        value_label: "QPS".into(),
        unit: YUnit::Qps,
        categories: vec!["ping".into(), "select 1".into(), "nothing".into()],
        series: vec![
            BarSeries { name: "http".into(), values: vec![97_000.0, 14_000.0, f64::NAN] },
            BarSeries { name: "native".into(), values: vec![f64::NAN, 10_100.0] },
        ],
        colors: vec![],
        category_colors: vec![],
    }
    .to_svg();
    assert_eq!(points_attr(&b), 3);
    assert_eq!(b.matches("<rect class=\"bar\"").count(), 3);
    assert!(b.contains(">97k<"));
    assert!(b.contains(">no data</text>"));
}

#[test]
fn up_to_24_bar_series_look_different() {
    let n = 20;
    let b = BarChart {
        title: "best".into(),
        categories: vec!["a".into()],
        series: (0..n).map(|i| BarSeries { name: format!("variant {i}"), values: vec![i as f64 + 1.0] }).collect(),
        ..Default::default()
    }
    .to_svg();
    // Each bar's fill, in order: 20 bars, 20 different fills, each pattern defined.
    let fills: Vec<&str> = b
        .split("<rect class=\"bar\"")
        .skip(1)
        .map(|r| r.split("fill=\"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    assert_eq!(fills.len(), n);
    let distinct: std::collections::BTreeSet<&&str> = fills.iter().collect();
    assert_eq!(distinct.len(), n, "{fills:?}");
    for f in fills.iter().filter(|f| f.starts_with("url(#")) {
        let id = &f[5..f.len() - 1];
        assert!(b.contains(&format!("<pattern id=\"{id}\"")), "{id} is defined");
    }
    // The legend keys match their bars.
    for f in &fills {
        assert!(b.matches(&format!("fill=\"{f}\"")).count() >= 2, "{f}: bar and legend key");
    }
}

#[test]
fn one_series_bars_take_their_categories_colours() {
    let fills = |b: &str| -> Vec<String> {
        b.split("<rect class=\"bar\"")
            .skip(1)
            .map(|r| r.split("fill=\"").nth(1).unwrap().split('"').next().unwrap().to_string())
            .collect()
    };
    let chart = BarChart {
        title: "ping: best QPS".into(),
        unit: YUnit::Qps,
        categories: vec!["http".into(), "native".into(), "http-close".into()],
        series: vec![BarSeries { name: "best QPS".into(), values: vec![97_000.0, 30_000.0, 18_000.0] }],
        category_colors: vec![4, 9],
        ..Default::default()
    };
    let b = chart.to_svg();
    // The third category has no colour of its own: it takes the series' (0).
    assert_eq!(fills(&b), vec![bar_fill(4), bar_fill(9), bar_fill(0)]);
    assert!(b.contains("<pattern id=\"chstorm-bar-1-1\""), "the striped fill of 9 is defined");
    assert!(!b.contains("class=\"legend\""), "one series: no legend");
    // With several series the categories' colours do not apply.
    let mut two = chart.clone();
    two.series.push(BarSeries { name: "other".into(), values: vec![1.0, 2.0, 3.0] });
    let f = fills(&two.to_svg());
    assert_eq!(&f[..2], &[bar_fill(0), bar_fill(1)]);
    // A long variant name keeps its whole label: the label column widens up to 300 of 640.
    let long = "http max_threads=32 use_uncompressed_cache=0";
    let b = BarChart { categories: vec![long.into()], ..chart }.to_svg();
    assert!(b.contains(&format!(">{long}<title>")), "{long} is not cut");
}
