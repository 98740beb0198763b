//! The process exit codes, in one place so the README, the CLI and the tests
//! agree on them.

use std::process::ExitCode;

/// The command did what was asked and every check passed.
pub const SUCCESS: u8 = 0;

/// The command ran, but the check it performs failed: a slice cannot meet its
/// target, a gate rejected every candidate, drift was found, or a signature did
/// not verify.
pub const CHECK_FAILED: u8 = 1;

/// The command could not run: bad flags, or input that is missing, unreadable
/// or invalid. Nothing was written.
pub const USAGE_OR_INPUT: u8 = 2;

/// The command was stopped before it finished (SIGTERM, SIGINT or SIGHUP,
/// or a run that could not write its rows): what had finished is kept, and
/// the same command resumes a run or does the work again. Not an input to
/// fix: a retry.
pub const INTERRUPTED: u8 = 3;

/// The error a stopped command returns, so that it exits [`INTERRUPTED`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Interrupted(pub String);

/// Whether a finished command's check passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    CheckFailed,
}

impl From<Outcome> for ExitCode {
    fn from(outcome: Outcome) -> Self {
        ExitCode::from(match outcome {
            Outcome::Passed => SUCCESS,
            Outcome::CheckFailed => CHECK_FAILED,
        })
    }
}
