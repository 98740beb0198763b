//! The real data sets of `$ROUTEVAL_DATA`, or a test that says it was
//! skipped (and fails under `CI`).

use std::path::PathBuf;

/// The data directory, or `None` after saying the test is skipped. Under
/// CI a missing data set fails the test: a skip there would pass a check
/// that never ran.
pub fn data_dir(test: &str) -> Option<PathBuf> {
    match std::env::var_os("ROUTEVAL_DATA") {
        Some(directory) => {
            let directory = PathBuf::from(directory);
            assert!(
                directory.is_dir(),
                "{test}: ROUTEVAL_DATA={} is not a directory",
                directory.display()
            );
            Some(directory)
        }
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: ROUTEVAL_DATA is not set under CI; .ci/run sets it to ../shared/data"
            );
            eprintln!("skipped {test}: set ROUTEVAL_DATA to the shared data directory to run it");
            None
        }
    }
}
