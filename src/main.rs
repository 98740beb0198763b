//! The `routeval` binary: everything lives in the library; this only maps the
//! outcome of a command to the documented exit codes.

use std::process::ExitCode;

fn main() -> ExitCode {
    routeval::cli::main()
}
