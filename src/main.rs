//! The `routeval` binary: everything lives in the library; this only maps the
//! outcome of a command to the documented exit codes.

use std::process::ExitCode;

// glibc's per-thread arenas keep freed memory from a long run's many small
// allocations across tokio's threads; mimalloc returns it, so a run's
// resident memory stays flat in the number of prompts.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    routeval::cli::main()
}
