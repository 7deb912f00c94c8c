//! The `chstorm` binary: parse arguments, call [`chstorm::run`], print a one-line error. It holds
//! nothing else; see the library's doc for what the `chstorm` crate owns.

use clap::Parser;

/// mimalloc, not glibc's allocator: a query through the gateway makes and frees about a hundred
/// small allocations, and glibc's allocator spent about a fifth of the gateway's user-space
/// instructions on them (docs/PERFORMANCE.md, "The allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = match chstorm::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => std::process::exit(chstorm::cli::report_parse_error(e)),
    };
    match chstorm::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("chstorm: error: {}", chstorm::one_line(&e));
            std::process::exit(2);
        }
    }
}
