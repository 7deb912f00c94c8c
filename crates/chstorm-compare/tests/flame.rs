//! Folding and rendering flamegraphs from a trace_log fixture (see tests/fixtures/README.md).

use chstorm_compare::flame;

fn fixture(name: &str) -> flame::Folded {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    flame::fold(&flame::parse_rows(&text).unwrap())
}

#[test]
fn trace_log_rows_fold_into_root_first_stacks() {
    let left = fixture("trace_log_left.jsonl");
    let right = fixture("trace_log_right.jsonl");
    // Three runs of 3 + 6 + 1 (+ 1 unresolved) samples on the left; the right adds overhead.
    assert_eq!(flame::total(&left), 33);
    assert_eq!(flame::total(&right), 60);
    for stack in left.keys().chain(right.keys()) {
        assert!(stack.starts_with("__clone;start_thread;"), "root first: {stack}");
        assert!(!stack.contains(";;"), "no empty frames: {stack}");
    }
    let cityhash =
        left.keys().find(|s| s.ends_with("CityHash_v1_0_2::CityHash64(char const*, unsigned long)")).unwrap();
    assert_eq!(left[cityhash], 18, "the same stack of three runs is summed");
    assert!(left.keys().any(|s| s.contains(";[unknown];")), "an unresolved address is named");
    assert!(right.keys().any(|s| s.ends_with(";[unknown]")));
    // The folded text is what flamegraph.pl and inferno read: "stack count", sorted.
    let lines = flame::folded_lines(&left);
    assert!(lines.windows(2).all(|w| w[0] <= w[1]));
    assert!(lines.iter().all(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().is_ok()));
}

#[test]
fn left_right_and_differential_flamegraphs_render() {
    let left = fixture("trace_log_left.jsonl");
    let right = fixture("trace_log_right.jsonl");
    let l = flame::render(&left, "old", "33 samples").unwrap().unwrap();
    let r = flame::render(&right, "new", "60 samples").unwrap().unwrap();
    let d = flame::render_diff(&left, &right, "diff", "").unwrap().unwrap();
    for svg in [&l, &r, &d] {
        assert!(svg.starts_with("<?xml") && svg.contains("<svg"), "{}", &svg[..200.min(svg.len())]);
        assert!(svg.trim_end().ends_with("</svg>"));
    }
    // Frames carry their sample counts in their titles.
    assert!(l.contains("CityHash64") && l.contains("18 samples"), "left frames");
    assert!(r.contains("Allocator&lt;false, false&gt;::alloc") || r.contains("Allocator<false, false>::alloc"));
    assert!(!l.contains("Allocator"), "the left side never allocated per block");
    // The differential graph colours by change: frames only on the right are red, and its
    // titles carry the change in percent.
    assert!(d.contains("rgb(255,"), "red frames in the differential graph");
    assert!(d.contains('%'));
    // Deterministic: the same input gives the same bytes.
    assert_eq!(l, flame::render(&left, "old", "33 samples").unwrap().unwrap());
    // Nothing to draw.
    assert!(flame::render(&flame::Folded::new(), "x", "").unwrap().is_none());
    assert!(flame::render_diff(&left, &flame::Folded::new(), "x", "").unwrap().is_none());
}
