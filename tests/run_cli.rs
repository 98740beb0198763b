//! `routeval run` and `routeval merge` against the simulated endpoint on
//! loopback: faults, a SIGKILL and resume, setup errors, key hygiene,
//! shards and the cache.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use routeval::schema::{ResponseRow, read_all_responses};
use routeval::upstream_sim::{FaultProfile, SimSettings};

use crate::common::Tuning;
use crate::common::base_url;
use crate::common::repo;
use crate::common::routeval;
use crate::common::run_args;
use crate::common::run_command;
use crate::common::start_sim;
use crate::common::write_config;
use crate::common::write_dataset;

/// What a row says about the model's answer, without timings.
fn content(row: &ResponseRow) -> ResponseRow {
    ResponseRow {
        ttft_ms: None,
        total_ms: None,
        attempts: 0,
        cached: false,
        ..row.clone()
    }
}

#[test]
fn under_twenty_percent_faults_every_call_ends_in_one_row_with_a_reason() {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 150);
    let faults = FaultProfile {
        rate_limit: 0.04,
        retry_after_s: 1,
        server_error: 0.03,
        unavailable: 0.02,
        reset: 0.02,
        slow_first_token: 0.02,
        slow_first_token_ms: 800,
        stall: 0.02,
        stall_ms: 800,
        cut_stream: 0.02,
        malformed_chunk: 0.01,
        missing_usage: 0.01,
        bad_request: 0.01,
    };
    let sim = start_sim(
        &dataset,
        SimSettings {
            faults,
            seed: 11,
            ..SimSettings::default()
        },
    );
    let config = write_config(
        directory.path(),
        &base_url(&sim),
        &Tuning {
            concurrency: 16,
            deadline_s: 0.4,
            ..Tuning::default()
        },
    );
    let out = directory.path().join("run");
    // Requests the server refused (400) are never retried, so some calls
    // fail for good: a run with failed calls is a failed check.
    let ran = run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .assert()
        .code(1)
        .stderr(predicates::str::contains("calls ended in an error ("));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&ran.get_output().stdout).into_owned(),
        String::from_utf8_lossy(&ran.get_output().stderr).into_owned(),
    );
    let rows = read_all_responses(&out.join("responses.parquet")).unwrap();
    assert!(rows.iter().any(|row| !row.answered()));
    assert_eq!(rows.len(), 450, "one row per prompt and tier");
    let keys: BTreeSet<_> = rows.iter().map(ResponseRow::key).collect();
    assert_eq!(keys.len(), 450, "a (prompt, tier, sample) twice");
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for row in &rows {
        match &row.error_kind {
            None => {
                assert_eq!(row.finish_reason.as_deref(), Some("stop"), "{row:?}");
                assert!(row.error_message.is_none());
                if row.tier == routeval::schema::CallTier::VERIFIER {
                    // A broken stream never becomes an accepted answer.
                    routeval::rubric::verdict_score(row.text.as_deref().unwrap(), None)
                        .unwrap_or_else(|problem| panic!("{problem}: {row:?}"));
                }
            }
            Some(kind) => {
                assert!(
                    !row.error_message.as_deref().unwrap_or_default().is_empty(),
                    "{row:?}"
                );
                assert!(row.text.is_none(), "{row:?}");
                *kinds.entry(kind.clone()).or_default() += 1;
            }
        }
    }
    // The closing line and the table say why the calls failed, by kind,
    // as the rows do.
    let error_line = stderr
        .lines()
        .find(|line| line.contains("calls ended in an error"))
        .unwrap();
    for (kind, count) in &kinds {
        assert!(
            error_line.contains(&format!("{kind} {count}")),
            "{kind} {count}: {error_line}"
        );
    }
    assert!(
        stdout.contains("why") && stdout.contains("sent now"),
        "{stdout}"
    );
    let stats = sim.stats();
    eprintln!(
        "errors by kind: {kinds:?}; server: {:?} {:?}",
        stats.by_status, stats.faults
    );
    assert!(
        stats.faults.len() >= 9,
        "every kind of fault was drawn: {:?}",
        stats.faults
    );
    assert_eq!(stats.early_retries, 0, "a retry came before Retry-After");
    assert_eq!(stats.retried_non_retryable, 0, "a 400 was retried");
    assert!(rows.iter().filter(|row| row.answered()).count() >= 400);
    assert!(
        rows.iter().any(|row| row.usage_estimated),
        "missing usage is estimated"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["complete"], true);
    assert_eq!(manifest["prompts"], 150);
}

#[cfg(unix)]
#[test]
fn a_run_killed_with_sigkill_resumes_to_the_table_of_an_uninterrupted_run() {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 100);
    let slow = || SimSettings {
        ttft_ms: 100,
        ..SimSettings::default()
    };
    let tuning = Tuning {
        concurrency: 2,
        verifier: false,
        ..Tuning::default()
    };

    let interrupted = start_sim(&dataset, slow());
    let config = write_config(directory.path(), &base_url(&interrupted), &tuning);
    let out = directory.path().join("killed");
    let cache = directory.path().join("cache");
    #[allow(deprecated, reason = "the path of the binary under test")]
    let binary = assert_cmd::cargo::cargo_bin("routeval");
    let mut child = std::process::Command::new(binary)
        .args(run_args(&config, &dataset, &out, &cache))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let parts = out.join("parts");
    let waited = Instant::now();
    while std::fs::read_dir(&parts).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
            .count()
    }) == 0
    {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "no part was written"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Hold every response, and give the ones the server already finished
    // time to reach the runner's cache, so that what counts as completed on
    // both sides is the same at the moment of the kill: the requests held
    // are the ones in flight.
    interrupted.set_paused(true);
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let completed_before_the_kill = interrupted.stats().completed;
    // The held responses now finish into dead connections: lost in flight.
    interrupted.set_paused(false);
    assert!(
        !out.join("responses.parquet").exists(),
        "the run finished before the kill"
    );

    // What an aborted run left is readable as it is.
    let mut saved = 0;
    for part in std::fs::read_dir(&parts).unwrap().filter_map(Result::ok) {
        if part.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        saved += read_all_responses(&part.path()).unwrap().len();
    }
    assert!(
        saved > 0 && saved < 200,
        "{saved} rows saved before the kill"
    );

    run_command(&config, &dataset, &out, &cache)
        .assert()
        .success();
    let resumed = read_all_responses(&out.join("responses.parquet")).unwrap();
    let stats = interrupted.stats();
    let resent: Vec<_> = completed_before_the_kill
        .keys()
        .filter(|key| stats.completed[*key] > 1)
        .collect();
    assert!(
        resent.is_empty(),
        "completed before the kill, and sent again: {resent:?}"
    );
    let twice = stats.completed.values().filter(|count| **count > 1).count();
    assert!(
        twice <= 4,
        "{twice} calls ran twice; at most the 4 in flight may"
    );

    let reference_sim = start_sim(&dataset, SimSettings::default());
    let reference_config_directory = directory.path().join("reference");
    std::fs::create_dir_all(&reference_config_directory).unwrap();
    let reference_config = write_config(
        &reference_config_directory,
        &base_url(&reference_sim),
        &Tuning {
            concurrency: 8,
            ..tuning
        },
    );
    let reference_out = directory.path().join("uninterrupted");
    run_command(&reference_config, &dataset, &reference_out, &cache)
        .arg("--no-cache")
        .assert()
        .success();
    let reference = read_all_responses(&reference_out.join("responses.parquet")).unwrap();
    assert_eq!(resumed.len(), 200);
    let resumed: Vec<_> = resumed.iter().map(content).collect();
    let reference: Vec<_> = reference.iter().map(content).collect();
    assert_eq!(resumed, reference);
}

#[test]
fn setup_errors_stop_the_run_before_any_request() {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 5);
    let sim = start_sim(&dataset, SimSettings::default());
    let base = format!("http://{}/v1", sim.address);
    let tuning = |key_env| Tuning {
        concurrency: 2,
        verifier: false,
        key_env,
        ..Tuning::default()
    };
    let check = |config: &Path, dataset: &Path, expected: &str| {
        let out = directory.path().join("out");
        let assert = run_command(config, dataset, &out, &directory.path().join("cache"))
            .env_remove("ROUTEVAL_TEST_MISSING_KEY")
            .assert()
            .code(2);
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(!out.join("responses.parquet").exists());
    };
    let missing_key = write_config(
        directory.path(),
        &base,
        &tuning(Some("ROUTEVAL_TEST_MISSING_KEY")),
    );
    check(
        &missing_key,
        &dataset,
        "the environment variable ROUTEVAL_TEST_MISSING_KEY (api_key_env) is not set",
    );

    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let unreachable = write_config(
        directory.path(),
        &format!("http://{closed_port}/v1"),
        &tuning(None),
    );
    check(
        &unreachable,
        &dataset,
        &format!("[tiers.small]: cannot reach http://{closed_port}/v1"),
    );

    let config = write_config(directory.path(), &base, &tuning(None));
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("max_retries = 4", "max_retry = 4")).unwrap();
    check(&config, &dataset, "unknown field `max_retry`");

    let config = write_config(directory.path(), &base, &tuning(None));
    let bad_dataset = directory.path().join("bad.jsonl");
    let mut text = std::fs::read_to_string(&dataset).unwrap();
    text.push_str(
        "{\"id\": \"x\", \"slice\": \"s\", \"prompt\": \"p\", \"rubric\": \"no-such-rubric\"}\n",
    );
    std::fs::write(&bad_dataset, text).unwrap();
    check(
        &config,
        &bad_dataset,
        "bad.jsonl: line 6, field \"rubric\": unknown rubric \"no-such-rubric\"",
    );

    assert_eq!(sim.stats().requests, 0, "a request was sent");
}

#[test]
fn the_api_key_never_appears_in_any_output() {
    const KEY: &str = "sk-test-0123456789abcdefSECRET";
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 20);
    let sim = start_sim(
        &dataset,
        SimSettings {
            require_key: Some(KEY.to_owned()),
            ..SimSettings::default()
        },
    );
    let config = write_config(
        directory.path(),
        &base_url(&sim),
        &Tuning {
            concurrency: 4,
            key_env: Some("ROUTEVAL_TEST_KEY"),
            ..Tuning::default()
        },
    );
    let out = directory.path().join("out");
    let cache = directory.path().join("cache");
    let wrong = "sk-test-9999999999999999WRONGKEY";
    let refused = run_command(&config, &dataset, &out, &cache)
        .env("ROUTEVAL_TEST_KEY", wrong)
        .assert()
        .code(2);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).into_owned();
    assert!(
        stderr.contains("refused the API key in $ROUTEVAL_TEST_KEY (HTTP 401)"),
        "{stderr}"
    );
    let accepted = run_command(&config, &dataset, &out, &cache)
        .env("ROUTEVAL_TEST_KEY", KEY)
        .assert()
        .success();
    let mut seen = vec![
        String::from_utf8_lossy(&accepted.get_output().stdout).into_owned(),
        String::from_utf8_lossy(&accepted.get_output().stderr).into_owned(),
        stderr,
    ];
    for root in [&out, &cache] {
        let mut stack = vec![root.clone()];
        while let Some(path) = stack.pop() {
            if path.is_dir() {
                stack.extend(
                    std::fs::read_dir(&path)
                        .unwrap()
                        .map(|entry| entry.unwrap().path()),
                );
            } else {
                seen.push(String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned());
            }
        }
    }
    assert!(seen.len() > 20, "the run wrote its files");
    for text in &seen {
        for secret in [KEY, "SECRET", wrong, "WRONGKEY"] {
            assert!(!text.contains(secret), "{secret} leaked");
        }
    }
    assert_eq!(
        read_all_responses(&out.join("responses.parquet"))
            .unwrap()
            .len(),
        60
    );
}

#[test]
fn shards_merge_into_what_one_run_produces_and_the_cache_keeps_latencies() {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 40);
    let sim = start_sim(&dataset, SimSettings::default());
    let config = write_config(directory.path(), &base_url(&sim), &Tuning::default());
    let cache = directory.path().join("cache");
    let path = |name: &str| directory.path().join(name);
    for shard in ["1/3", "2/3", "3/3"] {
        run_command(&config, &dataset, &path(&shard.replace('/', "of")), &cache)
            .args(["--shard", shard, "--no-cache"])
            .assert()
            .success();
    }
    routeval()
        .arg("merge")
        .args([path("1of3"), path("2of3"), path("3of3")])
        .arg("--out")
        .arg(path("merged"))
        .assert()
        .success();
    routeval()
        .arg("merge")
        .args([path("1of3"), path("3of3")])
        .arg("--out")
        .arg(path("incomplete"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("shards 2/3 are missing"));
    run_command(&config, &dataset, &path("whole"), &cache)
        .assert()
        .success();
    let merged = read_all_responses(&path("merged/responses.parquet")).unwrap();
    let whole = read_all_responses(&path("whole/responses.parquet")).unwrap();
    assert_eq!(merged.len(), 120);
    assert_eq!(
        merged.iter().map(content).collect::<Vec<_>>(),
        whole.iter().map(content).collect::<Vec<_>>()
    );
    let shard_sizes: Vec<usize> = ["1of3", "2of3", "3of3"]
        .iter()
        .map(|name| {
            read_all_responses(&path(&format!("{name}/responses.parquet")))
                .unwrap()
                .len()
        })
        .collect();
    assert!(
        shard_sizes.iter().all(|size| *size > 0 && *size < 120),
        "{shard_sizes:?}"
    );

    let requests = sim.stats().requests;
    run_command(&config, &dataset, &path("again"), &cache)
        .assert()
        .success();
    assert_eq!(sim.stats().requests, requests, "the cache was not used");
    let again = read_all_responses(&path("again/responses.parquet")).unwrap();
    assert!(again.iter().all(|row| row.cached));
    for (first, second) in whole.iter().zip(&again) {
        assert_eq!(
            first.ttft_ms, second.ttft_ms,
            "a cached row keeps its latency"
        );
        assert_eq!(content(first), content(second));
    }
}

#[test]
fn a_run_grades_into_the_table_calibrate_reads_and_stray_responses_are_refused() {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 30);
    let sim = start_sim(&dataset, SimSettings::default());
    let config = write_config(directory.path(), &base_url(&sim), &Tuning::default());
    let out = directory.path().join("run");
    run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .assert()
        .success();
    let graded = directory.path().join("graded.parquet");
    routeval()
        .args(["grade", "--rubrics"])
        .arg(repo().join("rubrics"))
        .arg("--run")
        .arg(&out)
        .arg("--out")
        .arg(&graded)
        .assert()
        .success()
        .stdout(predicates::str::contains(
            "score: the verifier's reject probability",
        ));
    let table = routeval::schema::read_graded(
        &graded,
        &routeval::schema::ReadOptions {
            details: true,
            carry_extra: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(table.num_rows(), 30);
    let responses = read_all_responses(&out.join("responses.parquet")).unwrap();
    let batch = &table.batches[0];
    for index in 0..30 {
        let id = batch.id.value(index);
        let small = responses
            .iter()
            .find(|row| row.id == id && row.tier == routeval::schema::CallTier::SMALL)
            .unwrap();
        let reference = (0..30)
            .map(|q| (format!("q{q:04}"), (q + q % 7).to_string()))
            .find(|(name, _)| name == id)
            .unwrap()
            .1;
        assert_eq!(
            batch.small_ok.value(index),
            small.text.as_deref() == Some(reference.as_str()),
            "{id}"
        );
        assert_eq!(batch.cost_small.value(index), small.cost_usd.unwrap());
        assert!((0.0..=1.0).contains(&batch.score.value(index)));
    }
    routeval()
        .args([
            "calibrate",
            "--policy",
            "cascade",
            "--target",
            "0.5",
            "--results",
        ])
        .arg(&graded)
        .assert()
        .success();

    // A response whose prompt is not in the dataset.
    let mut rows = responses.clone();
    rows[4].id = "stranger".to_owned();
    let file = std::fs::File::create(out.join("responses.parquet")).unwrap();
    let mut writer = routeval::schema::ResponsesWriter::new(file).unwrap();
    writer.write(&rows).unwrap();
    writer.close().unwrap();
    let stray = directory.path().join("stray.parquet");
    routeval()
        .args(["grade", "--rubrics"])
        .arg(repo().join("rubrics"))
        .arg("--run")
        .arg(&out)
        .arg("--out")
        .arg(&stray)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "responses.parquet: row 5: id \"stranger\" has no matching prompt",
        ));
    assert!(!stray.exists());
}

/// The `[judge]` section of a run config: `model` at serve-sim's `url`.
fn judge_section(url: &str, model: &str) -> String {
    format!(
        "\n[judge]\nbase_url = \"{url}\"\nmodel = \"{model}\"\nprice_input_per_mtok = 1.0\nprice_output_per_mtok = 2.0\n"
    )
}

/// `grade` of `run` into `graded`, its judge's calls cached in `cache`.
fn grade_judged(run: &Path, cache: &Path, graded: &Path) -> assert_cmd::Command {
    let mut command = routeval();
    command
        .args(["grade", "--rubrics"])
        .arg(repo().join("rubrics"))
        .arg("--run")
        .arg(run)
        .arg("--cache-dir")
        .arg(cache)
        .arg("--out")
        .arg(graded);
    command
}

/// Forty prompts of a judged rubric run against serve-sim with a judge
/// and graded once, made once for the tests of what the judge does.
struct JudgedRun {
    directory: tempfile::TempDir,
    dataset: PathBuf,
    sim: routeval::upstream_sim::RunningSim,
    /// The run config without its `[judge]`.
    config_text: String,
    out: PathBuf,
    cache: PathBuf,
    responses: Vec<ResponseRow>,
    /// Distinct (prompt, answer) pairs of the answering tiers.
    distinct_answers: usize,
    graded: PathBuf,
    graded_stdout: String,
    /// Requests serve-sim received while grading.
    judge_requests: u64,
}

impl JudgedRun {
    fn shared() -> &'static JudgedRun {
        static SHARED: std::sync::OnceLock<JudgedRun> = std::sync::OnceLock::new();
        SHARED.get_or_init(JudgedRun::new)
    }

    fn new() -> JudgedRun {
        let directory = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let dataset = directory.path().join("judged.jsonl");
        let lines: Vec<String> = (0..40)
            .map(|index| {
                serde_json::json!({
                    "id": format!("a{index:02}"),
                    "slice": "account",
                    "prompt": format!("Customer {index} is locked out of the account. What should they do?"),
                    "reference": "Use the reset link we emailed you.",
                    "rubric": "support-reset-judged",
                    "difficulty": f64::from(index % 10) / 10.0,
                })
                .to_string()
            })
            .collect();
        std::fs::write(&dataset, lines.join("\n") + "\n").unwrap();
        let sim = start_sim(&dataset, SimSettings::default());
        let config = write_config(directory.path(), &base_url(&sim), &Tuning::default());
        let config_text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(
            &config,
            config_text.clone() + &judge_section(&base_url(&sim), "sim-verifier-2026-11-01"),
        )
        .unwrap();
        let out = directory.path().join("run");
        let cache = directory.path().join("cache");
        run_command(&config, &dataset, &out, &cache)
            .assert()
            .success();
        let responses = read_all_responses(&out.join("responses.parquet")).unwrap();
        let distinct_answers = responses
            .iter()
            .filter(|row| row.tier != routeval::schema::CallTier::VERIFIER)
            .map(|row| (row.id.as_str(), row.text.as_deref()))
            .collect::<std::collections::HashSet<_>>()
            .len();
        let before = sim.stats().requests;
        let graded = directory.path().join("graded.parquet");
        let output = grade_judged(&out, &cache, &graded).output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let judge_requests = sim.stats().requests - before;
        JudgedRun {
            dataset,
            config_text,
            out,
            cache,
            responses,
            distinct_answers,
            graded,
            graded_stdout: String::from_utf8(output.stdout).unwrap(),
            judge_requests,
            sim,
            directory,
        }
    }
}

fn read_graded_with_details(path: &Path) -> routeval::schema::GradedTable {
    routeval::schema::read_graded(
        path,
        &routeval::schema::ReadOptions {
            carry_extra: true,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn two_tiers_that_answered_alike_are_judged_by_one_call() {
    let shared = JudgedRun::shared();
    let calls = shared.distinct_answers;
    assert!(calls > 40, "the tiers disagree somewhere");
    assert!(
        shared
            .graded_stdout
            .contains(&format!("judge: 80 checks, {calls} calls (0 cached)")),
        "{}",
        shared.graded_stdout
    );
    assert_eq!(
        shared.judge_requests, calls as u64,
        "one judge call per distinct answer"
    );
}

#[test]
fn the_judge_agrees_with_the_reference_and_alone_fails_a_right_answer() {
    let shared = JudgedRun::shared();
    let table = read_graded_with_details(&shared.graded);
    let batch = &table.batches[0];
    let details = batch
        .extra
        .iter()
        .find(|(field, _)| field.name() == "detail")
        .map(|(_, column)| arrow::array::AsArray::as_string::<i32>(column.as_ref()).clone())
        .unwrap();
    let mut agreements = 0;
    for index in 0..batch.num_rows() {
        let small = shared
            .responses
            .iter()
            .find(|row| {
                row.id == batch.id.value(index) && row.tier == routeval::schema::CallTier::SMALL
            })
            .unwrap();
        let right = small.text.as_deref() == Some("Use the reset link we emailed you.");
        agreements += usize::from(batch.small_ok.value(index) == right);
        if !batch.small_ok.value(index) && right {
            let detail = details.value(index);
            assert!(
                detail.contains("llm_judge"),
                "only the judge fails a right answer: {detail}"
            );
        }
    }
    assert!(agreements >= 36, "the judge agreed on {agreements} of 40");
}

#[test]
fn the_same_grading_again_comes_from_the_cache() {
    let shared = JudgedRun::shared();
    let calls = shared.distinct_answers;
    let directory = tempfile::tempdir().unwrap();
    let before = shared.sim.stats().requests;
    grade_judged(
        &shared.out,
        &shared.cache,
        &directory.path().join("again.parquet"),
    )
    .assert()
    .success()
    .stdout(predicates::str::contains(format!(
        "judge: 80 checks, {calls} calls ({calls} cached)"
    )));
    assert_eq!(shared.sim.stats().requests, before);
}

#[test]
fn grading_with_a_judge_other_than_the_runs_is_refused() {
    let shared = JudgedRun::shared();
    let other = shared.directory.path().join("other-judge.toml");
    std::fs::write(
        &other,
        shared.config_text.clone() + &judge_section(&base_url(&shared.sim), "sim-small-2026-11-01"),
    )
    .unwrap();
    let graded = shared.directory.path().join("other-judge.parquet");
    grade_judged(&shared.out, &shared.cache, &graded)
        .arg("--config")
        .arg(&other)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "the config changed since the run",
        ));
    assert!(!graded.exists());
}

#[test]
fn a_judge_that_does_not_answer_in_the_required_form_fails_every_judged_check() {
    let shared = JudgedRun::shared();
    // A sim of its own, so that its calls do not count against the
    // cache's test; a model that answers in prose, not a verdict.
    let sim = start_sim(&shared.dataset, SimSettings::default());
    let directory = tempfile::tempdir().unwrap();
    let config = write_config(directory.path(), &base_url(&sim), &Tuning::default());
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text + &judge_section(&base_url(&sim), "sim-small-2026-11-01"),
    )
    .unwrap();
    let (run, cache) = (directory.path().join("run"), directory.path().join("cache"));
    run_command(&config, &shared.dataset, &run, &cache)
        .assert()
        .success();
    let failed = directory.path().join("failed.parquet");
    grade_judged(&run, &cache, &failed)
        .assert()
        .success()
        .stderr(predicates::str::contains(
            "80 judged checks failed because the judge failed or answered unreadably",
        ));
    let table = read_graded_with_details(&failed);
    assert!(
        (0..40).all(|index| !table.batches[0].small_ok.value(index)
            && !table.batches[0].large_ok.value(index)),
        "an unreadable judgement passed"
    );
}

#[test]
fn without_a_judge_grading_names_what_is_missing() {
    let shared = JudgedRun::shared();
    let sim = start_sim(&shared.dataset, SimSettings::default());
    let directory = tempfile::tempdir().unwrap();
    let config = write_config(directory.path(), &base_url(&sim), &Tuning::default());
    let (run, cache) = (directory.path().join("run"), directory.path().join("cache"));
    run_command(&config, &shared.dataset, &run, &cache)
        .assert()
        .success();
    let graded = directory.path().join("graded.parquet");
    grade_judged(&run, &cache, &graded)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "the rubrics use llm_judge, but the config has no [judge]",
        ));
    assert!(!graded.exists());
}
