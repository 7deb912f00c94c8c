//! `chstorm merge`: combine bench JSON files from several client machines, and optionally
//! re-weight a closed loop's latencies for coordinated omission (`--correct-omission`).

use crate::cli::{Interval, MergeArgs};
use anyhow::Context;
use chstorm_output::merge::{merge, read_report};
use std::path::Path;

pub fn run(args: MergeArgs) -> anyhow::Result<i32> {
    let mut reports = Vec::new();
    for p in &args.inputs {
        let path = p.display().to_string();
        reports.push((path.clone(), read_report(&path)?));
    }
    let mut merged = merge(&reports)?;
    if let Some(i) = args.correct_omission {
        let fixed = match i {
            Interval::Auto => None,
            Interval::Fixed(d) => Some(d),
        };
        chstorm_output::omission::correct_omission(&mut merged, fixed)?;
    }
    let summary = chstorm_output::text::summary(&merged);
    match args.json.as_deref() {
        Some(p) if p == Path::new("-") => {
            eprint!("{summary}");
            println!("{}", merged.to_json());
        }
        Some(p) => {
            print!("{summary}");
            std::fs::write(p, merged.to_json() + "\n").with_context(|| format!("cannot write {}", p.display()))?;
        }
        None => print!("{summary}"),
    }
    Ok(0)
}
