//! Writes the synthetic reports used by the tests:
//! `cargo run -p chstorm-report --example synthetic -- OUT.html [demo]`; with `demo`, the sweep
//! shaped like `chstorm demo`'s (five scenarios, from about 100k QPS down to about 300).

#[path = "../tests/common/mod.rs"]
mod common;

fn main() {
    let mut args = std::env::args().skip(1);
    let out = args.next().unwrap_or_else(|| "report.html".into());
    let input = match args.next().as_deref() {
        Some("demo") => common::demo_like_input(),
        _ => common::synthetic_input(),
    };
    if let Err(e) = chstorm_report::write_sweep(std::path::Path::new(&out), &input) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
