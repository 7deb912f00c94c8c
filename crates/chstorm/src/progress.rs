//! Live progress on stderr, once a second: a bar on a terminal, plain lines otherwise.

use chstorm_load::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

pub struct ProgressSink {
    quiet: bool,
    bar: Option<ProgressBar>,
}

/// A second's line: QPS, totals, percentiles.
pub fn line(p: &Progress) -> String {
    let t = &p.total;
    format!(
        "qps {:.1}  queries {}  errors {}  p50 {:.3} ms  p99 {:.3} ms",
        p.last_second.queries as f64,
        t.queries,
        t.errors,
        t.hist.percentile_s(50.0) * 1e3,
        t.hist.percentile_s(99.0) * 1e3
    )
}

impl ProgressSink {
    pub fn new(quiet: bool, planned: Option<Duration>) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = match planned {
                Some(d) => ProgressBar::new(d.as_secs().max(1)),
                None => ProgressBar::new_spinner(),
            };
            bar.set_style(
                ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len}s  {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        ProgressSink { quiet, bar }
    }

    pub fn update(&mut self, p: &Progress) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(bar) => {
                bar.set_position(p.elapsed.as_secs());
                bar.set_message(line(p));
            }
            None => eprintln!("[{:>4}s] {}", p.elapsed.as_secs(), line(p)),
        }
    }

    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
