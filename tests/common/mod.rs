//! Helpers shared by the integration tests: a graded-results table built in
//! code and written in each supported format, and the CLI under test.

pub mod actions;
pub mod browser;
mod data;
mod docs;
mod drift;
mod graded;
mod litellm;
pub mod otlp;
pub mod population;
mod process;
pub mod production;
mod records;
pub mod router_drive;
mod run;
mod serve;
mod sources;
mod upstream;
mod workspace;

pub use data::data_dir;
pub use docs::{CodeBlock, code_blocks, page_name, pages};

/// The `[serving]` section a candidate of `policy` (its TOML) needs to be
/// signed: what an unnamed slice gets, and a predictive policy's external
/// scorer or a cascade's verifier template.
pub fn serving_for(policy: &str) -> &'static str {
    if policy.contains("[policy.cascade") {
        "\n[serving]\nunknown_slice = \"strongest\"\n\n[serving.verifier]\ntemplate = \"verifier\"\n"
    } else if policy.contains("[policy.predictive") {
        "\n[serving]\nunknown_slice = \"strongest\"\n\n[serving.scorer]\nname = \"test-router\"\nversion = \"1\"\nheader = \"x-router-score\"\n"
    } else {
        "\n[serving]\nunknown_slice = \"global\"\n"
    }
}
pub use drift::{certified_synthetic, deployed, slice_names};
pub use graded::{
    HEADER, Random, Row, csv_line, record_batch, synthetic_rows, write_csv, write_json_lines,
    write_parquet, write_parquet_batch,
};
pub use litellm::{Proxy, cooldown_of, loads_into_litellm, proxy_python};
pub use process::{binary, first_line, flowing};
pub use records::{records_from_results, table_with_fallback, write_day};
pub use run::{
    Tuning, base_url, repo, run_args, run_command, start_sim, write_config, write_dataset,
};
pub use serve::{
    EU_KEY, KEY, NOWHERE_KEY, Pipeline, Served, ask_all, ask_with, column, demo_predictive,
    demo_prompts, deploy, falling_back, gate_single, header_of, log_events, log_lines, one_route,
    ready_at, serve_command, served_records, signed_single, signed_single_with, signed_table,
    signed_threshold, start_serve, status_of, write_keys,
};
pub use sources::rust_files;
pub use upstream::{
    Received, ScriptedUpstream, Step, answers_hello, completion, response, sse_chunk, sse_head,
};
pub use workspace::{Workspace, by_router, calibrate_into, example_routes, two_scores, variant};

use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub fn routeval() -> Command {
    Command::cargo_bin("routeval").unwrap()
}

/// The example table shipped in `datasets/`.
pub fn example_results() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/example/graded.csv")
}

/// The keys of a JSON object, for tests that pin a document's format.
pub fn keys(value: &serde_json::Value) -> std::collections::BTreeSet<&str> {
    value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// The Python with `litellm`, `pyyaml` and `scipy` that checks routeval
/// against other implementations (`ROUTEVAL_TEST_PYTHON`, which `.ci/run`
/// sets); `None` after saying `what` was skipped, and a failure under CI.
pub fn test_python(what: &str) -> Option<std::ffi::OsString> {
    python_named_by("ROUTEVAL_TEST_PYTHON", what)
}

/// The Python the environment `variable` names; skipped without it, a
/// failure under CI.
pub fn python_named_by(variable: &str, what: &str) -> Option<std::ffi::OsString> {
    let python = std::env::var_os(variable);
    if python.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{what}: {variable} is not set; .ci/run sets it"
        );
        eprintln!("skipped {what}: {variable} is not set");
    }
    python
}

/// Runs `script` with `python -c`, failing the test with Python's stderr
/// when it fails; its stdout.
pub fn run_python(python: &std::ffi::OsStr, script: &str) -> String {
    run_python_with(python, script, &[])
}

/// [`run_python`] with `args` after the script (its `sys.argv[1:]`).
pub fn run_python_with(python: &std::ffi::OsStr, script: &str, args: &[&str]) -> String {
    let output = std::process::Command::new(python)
        .args(["-c", script])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// One request of a population where a target of 0.85 sits at the edge of
/// what a router can reach: difficulty uniform, each tier solving it with a
/// probability that falls with difficulty, and the router seeing difficulty
/// through noise. Returns (score, small_ok, large_ok).
pub fn edge_request(random: &mut Random) -> (f64, bool, bool) {
    let difficulty = random.unit();
    (
        ((difficulty + 0.1 * random.normal()) * 1000.0).round() / 1000.0,
        random.unit() < logistic((0.55 - difficulty) / 0.05),
        random.unit() < logistic((0.97 - difficulty) / 0.05),
    )
}

/// `rows` fresh requests of [`edge_request`]'s population as predictive
/// observations: the truth a threshold is judged against.
pub fn edge_truth(random: &mut Random, rows: usize) -> routeval::policy::SliceObservations {
    let mut truth = routeval::policy::SliceObservations::default();
    for _ in 0..rows {
        let (score, small_ok, large_ok) = edge_request(random);
        let row = routeval::policy::GradedRow {
            score,
            small_ok,
            large_ok,
            cost_small: 0.0004,
            cost_large: 0.008,
            cost_verifier: 0.0,
            cost_router: 0.00002,
        };
        truth.push(routeval::schema::Policy::Predictive, &row);
    }
    truth
}

/// `routeval gate` of `candidate` on `results` into `directory/out`, with a
/// key made once in `directory` and `flags`: the gate report, whose verdict
/// the exit code must state (0 when it emitted a config, 1 when not).
pub fn gate_report(
    directory: &Path,
    results: &Path,
    candidate: &Path,
    out: &str,
    flags: &[&str],
) -> routeval::schema::GateReport {
    let key = directory.join("k.key");
    if !key.exists() {
        routeval()
            .arg("keygen")
            .arg("--out")
            .arg(&key)
            .assert()
            .code(0);
    }
    let output = routeval()
        .args(["gate", "--candidates"])
        .arg(candidate)
        .arg("--results")
        .arg(results)
        .arg("--key")
        .arg(&key)
        .arg("--out")
        .arg(directory.join(out))
        .args(flags)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(directory.join(out).join("gate-report.json")).unwrap();
    let report: routeval::schema::GateReport = serde_json::from_str(&text).unwrap();
    assert_eq!(
        output.status.code(),
        Some(if report.emitted.is_some() { 0 } else { 1 }),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    report
}

/// `routeval calibrate --json` of `results` with `flags`, feasible or not.
pub fn calibration_of(results: &Path, flags: &[&str]) -> routeval::schema::CalibrationDocument {
    calibration_and_text(results, flags).0
}

/// [`calibration_of`], and the document's text as printed.
pub fn calibration_and_text(
    results: &Path,
    flags: &[&str],
) -> (routeval::schema::CalibrationDocument, String) {
    let output = routeval()
        .args(["calibrate", "--json", "--results"])
        .arg(results)
        .args(flags)
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let document: routeval::schema::CalibrationDocument =
        serde_json::from_str(&text).expect("a calibration document");
    assert_feasibility_is_the_exit_code(output.status.code(), &document, &output.stderr);
    (document, text)
}

/// A calibration's exit code states its verdict: 0 when feasible, 1 when
/// not.
pub fn assert_feasibility_is_the_exit_code(
    code: Option<i32>,
    document: &routeval::schema::CalibrationDocument,
    stderr: &[u8],
) {
    assert_eq!(
        code,
        Some(if document.feasible { 0 } else { 1 }),
        "{}",
        String::from_utf8_lossy(stderr)
    );
}

/// The keys of `objects` that docs/schema.md's section `heading` does not
/// name (as `` `key` ``, or inside a `{a, b}` list).
pub fn undocumented_keys(heading: &str, objects: &[&serde_json::Value]) -> Vec<String> {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schema.md")).unwrap();
    let section = docs
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("docs/schema.md has no {heading:?}"));
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut missing = Vec::new();
    for object in objects {
        for key in keys(object) {
            let named = [
                format!("`{key}`"),
                format!("{key},"),
                format!("{{{key}"),
                format!("{key}}}"),
                format!(" {key}\n"),
            ];
            if !named.iter().any(|form| section.contains(form.as_str())) {
                missing.push(key.to_owned());
            }
        }
    }
    missing
}

/// Splits a command line into words, keeping double-quoted spaces.
pub fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for character in line.chars() {
        match character {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            other => word.push(other),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// A copy of the directory `from` at `to`, every file and folder below it.
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
