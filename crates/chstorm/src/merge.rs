//! `chstorm merge`: combine bench JSON files from several client machines, and optionally
//! re-weight a closed loop's latencies for coordinated omission (`--correct-omission`).
//! Incompatible runs, the same run twice, files whose counts disagree with their histogram and
//! segments that do not make up one run are refused (see `chstorm_output::merge::check`); the
//! inputs' thresholds and `--threshold` are judged on the merged run (exit 4 if one fails).

use crate::cli::{Interval, MergeArgs};
use chstorm_output::file::JsonOut;
use chstorm_output::merge::{check, merge, read_report};

pub fn run(args: MergeArgs) -> anyhow::Result<i32> {
    let json = args.json.as_deref().map(JsonOut::open).transpose()?;
    let mut reports = Vec::new();
    for p in &args.inputs {
        let path = p.display().to_string();
        reports.push((path.clone(), read_report(&path)?));
    }
    check(&reports, args.allow_mixed)?;
    let mut merged = merge(&reports)?;
    if let Some(i) = args.correct_omission {
        let fixed = match i {
            Interval::Auto => None,
            Interval::Fixed(d) => Some(d),
        };
        chstorm_output::omission::correct_omission(&mut merged, fixed)?;
    }
    // One verdict for the whole run: the inputs' thresholds and --threshold, on the merged figures.
    chstorm_output::judge::judge_merged(&mut merged, &args.thresholds)?;
    let summary = chstorm_output::text::summary(&merged);
    if json.as_ref().is_some_and(JsonOut::is_stdout) {
        eprint!("{summary}");
    } else {
        print!("{summary}");
    }
    if let Some(json) = json {
        json.write(&merged.to_json())?;
    }
    Ok(if chstorm_output::judge::failed(&merged) { crate::bench::EXIT_THRESHOLD } else { 0 })
}
