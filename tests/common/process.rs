//! The routeval binary as a child process, stopped while responses flow.

use std::path::{Path, PathBuf};

use routeval::upstream_sim::{RunningSim, SimSettings};

use crate::common::Tuning;
use crate::common::base_url;
use crate::common::start_sim;
use crate::common::write_config;
use crate::common::write_dataset;

pub fn binary() -> PathBuf {
    #[allow(deprecated, reason = "the path of the binary under test")]
    assert_cmd::cargo::cargo_bin("routeval")
}

/// `command` started with its stdout piped, and the first line it printed
/// (a server's address, as serve-sim and the test collectors print it).
pub fn first_line(command: &mut std::process::Command) -> (std::process::Child, String) {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    (child, line)
}

/// `prompts` prompts served by a sim answering after `ttft_ms` (at
/// `tokens_per_second`, 0 for at once), and a config with `concurrency` per
/// tier and no verifier: (the sim, the dataset, the config).
pub fn flowing(
    directory: &Path,
    prompts: usize,
    ttft_ms: u64,
    tokens_per_second: f64,
    concurrency: usize,
) -> (RunningSim, PathBuf, PathBuf) {
    let dataset = write_dataset(directory, prompts);
    let sim = start_sim(
        &dataset,
        SimSettings {
            ttft_ms,
            tokens_per_second,
            ..SimSettings::default()
        },
    );
    let tuning = Tuning {
        concurrency,
        verifier: false,
        ..Tuning::default()
    };
    let config = write_config(directory, &base_url(&sim), &tuning);
    (sim, dataset, config)
}
