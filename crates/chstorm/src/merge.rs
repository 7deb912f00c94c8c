//! `chstorm merge`: combine bench JSON files from several client machines.

use crate::cli::MergeArgs;
use anyhow::Context;
use chstorm_output::merge::{merge, read_report};
use std::path::Path;

pub fn run(args: MergeArgs) -> anyhow::Result<i32> {
    let mut reports = Vec::new();
    for p in &args.inputs {
        let path = p.display().to_string();
        reports.push((path.clone(), read_report(&path)?));
    }
    let merged = merge(&reports)?;
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
