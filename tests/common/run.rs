//! A run against serve-sim on loopback: a dataset, the simulated endpoint,
//! a config pointing at it and the `routeval run` command.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use routeval::schema::read_dataset;
use routeval::upstream_sim::{RunningSim, SimSettings, spawn};

use super::routeval;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `count` prompts with distinct texts, references and difficulties.
pub fn write_dataset(directory: &Path, count: usize) -> PathBuf {
    let path = directory.join("prompts.jsonl");
    let lines: Vec<String> = (0..count)
        .map(|index| {
            let slice = ["billing", "orders", "account"][index % 3];
            serde_json::json!({
                "id": format!("q{index:04}"),
                "slice": slice,
                "prompt": format!("What is {index} plus {}? Answer with the number.", index % 7),
                "reference": (index + index % 7).to_string(),
                "rubric": "exact",
                "difficulty": (index % 10) as f64 / 10.0,
            })
            .to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

pub fn start_sim(dataset: &Path, settings: SimSettings) -> RunningSim {
    let names: BTreeSet<String> = routeval::rubric::load_rubrics(&repo().join("rubrics"))
        .unwrap()
        .into_keys()
        .collect();
    let rows = read_dataset(dataset, &names).unwrap();
    spawn(settings, &rows, "127.0.0.1:0".parse().unwrap()).unwrap()
}

pub fn base_url(sim: &RunningSim) -> String {
    format!("http://{}/v1", sim.address)
}

#[derive(Clone, Copy)]
pub struct Tuning {
    pub concurrency: usize,
    pub deadline_s: f64,
    pub verifier: bool,
    pub key_env: Option<&'static str>,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            concurrency: 8,
            deadline_s: 5.0,
            verifier: true,
            key_env: None,
        }
    }
}

pub fn write_config(directory: &Path, base_url: &str, tuning: &Tuning) -> PathBuf {
    let key = tuning
        .key_env
        .map(|name| format!("api_key_env = \"{name}\"\n"))
        .unwrap_or_default();
    let endpoint = |model: &str, extra: &str| {
        format!(
            "base_url = \"{base_url}\"\nmodel = \"{model}\"\n{key}price_input_per_mtok = 1.0\nprice_output_per_mtok = 2.0\nmax_concurrency = {}\nmax_retries = 4\nbackoff_base_ms = 20\nfirst_token_s = {d}\nstall_s = {d}\ntotal_s = 10\n{extra}",
            tuning.concurrency,
            d = tuning.deadline_s
        )
    };
    let mut text = format!(
        "[tiers.small]\n{}\n[tiers.large]\n{}\n",
        endpoint("sim-small-2026-11-01", ""),
        endpoint("sim-large-2026-11-01", "")
    );
    if tuning.verifier {
        text.push_str(&format!(
            "[verifier]\n{}\n",
            endpoint("sim-verifier-2026-11-01", "template = \"verifier\"\n")
        ));
    }
    text.push_str("[run]\nseed = 3\nretry_budget = 1.0\n");
    let path = directory.join("routeval.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub fn run_args(
    config: &Path,
    dataset: &Path,
    out: &Path,
    cache: &Path,
) -> Vec<std::ffi::OsString> {
    let rubrics = repo().join("rubrics");
    let arguments: [&std::ffi::OsStr; 12] = [
        "run".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--dataset".as_ref(),
        dataset.as_os_str(),
        "--rubrics".as_ref(),
        rubrics.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--cache-dir".as_ref(),
        cache.as_os_str(),
        "--quiet".as_ref(),
    ];
    arguments
        .iter()
        .map(|argument| argument.to_os_string())
        .collect()
}

pub fn run_command(config: &Path, dataset: &Path, out: &Path, cache: &Path) -> assert_cmd::Command {
    let mut command = routeval();
    command.args(run_args(config, dataset, out, cache));
    command
}
