//! The library's own source files, for the tests that read the code.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `directory`, at any depth.
pub fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}
