//! The `chstorm` binary: parse arguments, call [`chstorm::run`], print a one-line error; and the
//! process's allocator ([`allocator`]). It holds nothing else; see the library's doc for what the
//! `chstorm` crate owns.

use clap::Parser;

mod allocator;

#[global_allocator]
static GLOBAL: allocator::Split = allocator::Split;

fn main() {
    let cli = match chstorm::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => std::process::exit(chstorm::cli::report_parse_error(e)),
    };
    if chstorm::cli::parse_only() {
        std::process::exit(0);
    }
    match chstorm::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("chstorm: error: {}", chstorm::one_line(&e));
            std::process::exit(2);
        }
    }
}
