//! Writes the synthetic report used by the tests: `cargo run -p chstorm-report --example synthetic -- OUT.html`.

#[path = "../tests/common/mod.rs"]
mod common;

fn main() {
    let out = std::env::args().nth(1).unwrap_or_else(|| "report.html".into());
    if let Err(e) = chstorm_report::write_sweep(std::path::Path::new(&out), &common::synthetic_input()) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
