//! The safety pass of `routeval run` and `routeval grade`, against serve-sim
//! on loopback with responses flowing: a kill loses only the calls in
//! flight, a cut part is quarantined, SIGTERM is an orderly stop, one run
//! directory has one writer, failed calls fail the run and leave no silent
//! holes in grading, and the preflight is as polite as every call.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use predicates::prelude::*;
use routeval::schema::read_all_responses;
use routeval::upstream_sim::{FaultProfile, SimSettings};

use crate::common::binary;
use crate::common::copy_tree;
use crate::common::flowing;
use crate::common::routeval;
use crate::common::{
    Tuning, base_url, repo, run_args, run_command, start_sim, write_config, write_dataset,
};

fn spawn_run(config: &Path, dataset: &Path, out: &Path, extra: &[&str]) -> std::process::Child {
    std::process::Command::new(binary())
        .args(run_args(config, dataset, out, &out.with_extension("cache")))
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `ready` holds, for at most 30 s.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `child` the signal `name` (`TERM`, `INT`, ...) with kill(1).
fn send(child: &std::process::Child, name: &str) {
    let sent = std::process::Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{name} {}", child.id());
}

fn journal_bytes(out: &Path) -> u64 {
    std::fs::read_dir(out.join("journal")).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.metadata().ok())
            .map(|metadata| metadata.len())
            .sum()
    })
}

fn parts(out: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(out.join("parts")).map_or_else(
        |_| Vec::new(),
        |entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| !path.file_name().unwrap().to_string_lossy().starts_with('.'))
                .collect()
        },
    )
}

#[cfg(unix)]
#[test]
fn a_kill_with_responses_flowing_resends_only_the_calls_in_flight() {
    let directory = tempfile::tempdir().unwrap();
    let (sim, dataset, config) = flowing(directory.path(), 600, 40, 400.0, 8);
    let out = directory.path().join("killed");
    let mut child = spawn_run(&config, &dataset, &out, &["--no-cache"]);
    // Killed between two part flushes (every 2 s), with calls completing
    // all the while.
    wait_for("no part was written", || !parts(&out).is_empty());
    std::thread::sleep(Duration::from_millis(1200));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let completed_before_the_kill = sim.stats().completed;
    assert!(
        !out.join("responses.parquet").exists(),
        "the run finished before the kill"
    );
    assert!(
        journal_bytes(&out) > 0,
        "the kill came after a flush: nothing was in the journal only"
    );

    run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .arg("--no-cache")
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "calls recovered from the journal of an interrupted run",
        ));
    let stats = sim.stats();
    let resent: Vec<&String> = completed_before_the_kill
        .keys()
        .filter(|key| stats.completed[*key] > 1)
        .collect();
    eprintln!(
        "{} calls completed before the kill; {} of them were sent again",
        completed_before_the_kill.len(),
        resent.len()
    );
    // At most the calls in flight: 8 per tier, 2 tiers.
    assert!(
        resent.len() <= 16,
        "{} calls completed before the kill were paid again: {resent:?}",
        resent.len()
    );
    let rows = read_all_responses(&out.join("responses.parquet")).unwrap();
    assert_eq!(rows.len(), 1200, "one row per prompt and tier");
    assert!(
        std::fs::read_dir(out.join("journal"))
            .unwrap()
            .next()
            .is_none(),
        "the journal is removed once its rows are in the table"
    );
}

#[cfg(unix)]
#[test]
fn a_part_cut_short_is_quarantined_and_its_calls_sent_again() {
    let directory = tempfile::tempdir().unwrap();
    // 400 calls of 80 ms, four at a time, take 8 s: the first part (after
    // the 2 s flush) stands for seconds before the finished run merges it,
    // however loaded the machine, instead of the one second 30 ms calls
    // left the poll to see it in.
    let (_sim, dataset, config) = flowing(directory.path(), 200, 80, 0.0, 4);
    let out = directory.path().join("run");
    let mut child = spawn_run(&config, &dataset, &out, &["--no-cache"]);
    wait_for("no part was written", || !parts(&out).is_empty());
    child.kill().unwrap();
    child.wait().unwrap();
    let part = parts(&out).remove(0);
    let bytes = std::fs::read(&part).unwrap();
    std::fs::write(&part, &bytes[..bytes.len() / 2]).unwrap();

    let assert = run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .arg("--no-cache")
        .assert()
        .success();
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr);
    assert!(
        stderr.contains("unreadable") && stderr.contains("its calls will be sent again"),
        "{stderr}"
    );
    let quarantined = out.join("quarantine").join(part.file_name().unwrap());
    assert_eq!(std::fs::read(&quarantined).unwrap().len(), bytes.len() / 2);
    let rows = read_all_responses(&out.join("responses.parquet")).unwrap();
    assert_eq!(rows.len(), 400);
}

#[cfg(unix)]
#[test]
fn sigterm_stops_a_run_like_ctrl_c_and_a_second_writer_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    let (sim, dataset, config) = flowing(directory.path(), 300, 50, 0.0, 2);
    let out = directory.path().join("run");
    let child = spawn_run(&config, &dataset, &out, &["--no-cache"]);
    wait_for("the run did not start", || sim.stats().requests > 10);

    // A second process on the same directory sends nothing.
    let before = sim.stats().requests;
    run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .arg("--no-cache")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "another routeval run is writing to this directory",
        ));
    let second_sent = sim.stats().requests - before;
    // The first run keeps going at its own pace: 2 calls per tier at 50 ms.
    assert!(second_sent < 200, "{second_sent}");

    send(&child, "TERM");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("interrupted; the calls that finished are saved"),
        "{stderr}"
    );
    let saved: usize = parts(&out)
        .iter()
        .map(|part| read_all_responses(part).unwrap().len())
        .sum();
    assert!(saved > 0, "SIGTERM flushed nothing");

    run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .arg("--no-cache")
        .assert()
        .success();
    assert_eq!(
        read_all_responses(&out.join("responses.parquet"))
            .unwrap()
            .len(),
        600
    );
}

/// A run in which a tenth of the calls were refused by the upstream, made
/// once for the tests of what follows from its holes.
struct RunWithHoles {
    directory: tempfile::TempDir,
    config: PathBuf,
    out: PathBuf,
    run: std::process::Output,
    failed_prompts: usize,
    /// Graded with `--allow-missing`: the holes dropped.
    graded: PathBuf,
    graded_stdout: String,
}

impl RunWithHoles {
    fn shared() -> &'static RunWithHoles {
        static SHARED: std::sync::OnceLock<RunWithHoles> = std::sync::OnceLock::new();
        SHARED.get_or_init(RunWithHoles::new)
    }

    fn new() -> RunWithHoles {
        let directory = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let dataset = write_dataset(directory.path(), 60);
        let sim = start_sim(
            &dataset,
            SimSettings {
                faults: FaultProfile {
                    bad_request: 0.1,
                    ..FaultProfile::default()
                },
                seed: 4,
                ..SimSettings::default()
            },
        );
        let tuning = Tuning {
            verifier: false,
            ..Tuning::default()
        };
        let config = write_config(directory.path(), &base_url(&sim), &tuning);
        let out = directory.path().join("run");
        let run = run_command(&config, &dataset, &out, &directory.path().join("cache"))
            .arg("--no-cache")
            .output()
            .unwrap();
        let rows = read_all_responses(&out.join("responses.parquet")).unwrap();
        let failed_prompts = rows
            .iter()
            .filter(|row| !row.answered())
            .map(|row| row.prompt_index)
            .collect::<std::collections::BTreeSet<u64>>()
            .len();
        let graded = directory.path().join("graded.parquet");
        let output = grade(&out, &graded)
            .arg("--allow-missing")
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        RunWithHoles {
            config,
            out,
            run,
            failed_prompts,
            graded,
            graded_stdout: String::from_utf8(output.stdout).unwrap(),
            directory,
        }
    }
}

/// `grade` of `run` into `graded`.
fn grade(run: &Path, graded: &Path) -> assert_cmd::Command {
    let mut command = routeval();
    command
        .args(["grade", "--rubrics"])
        .arg(repo().join("rubrics"))
        .arg("--run")
        .arg(run)
        .arg("--out")
        .arg(graded);
    command
}

/// The one line of a command that failed with exit 2.
fn refused_line(output: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn a_run_with_failed_calls_is_a_failed_check() {
    let shared = RunWithHoles::shared();
    assert!(shared.failed_prompts > 0, "the faults failed no call");
    let stderr = String::from_utf8_lossy(&shared.run.stderr);
    assert_eq!(shared.run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("calls ended in an error"), "{stderr}");
}

#[test]
fn grading_a_run_with_holes_is_refused_in_one_line_that_names_allow_missing() {
    let shared = RunWithHoles::shared();
    let directory = tempfile::tempdir().unwrap();
    let graded = directory.path().join("graded.parquet");
    let stderr = refused_line(&grade(&shared.out, &graded).output().unwrap());
    assert!(
        stderr.contains(&format!(
            "{} prompts have no answer from a tier",
            shared.failed_prompts
        )) && stderr.contains("--allow-missing"),
        "{stderr}"
    );
    assert!(!graded.exists());
}

#[test]
fn with_allow_missing_grading_drops_the_holes_and_says_there_is_no_score_yet() {
    let shared = RunWithHoles::shared();
    assert!(
        shared.graded_stdout.contains(&format!(
            "dropped {} prompts whose call to a tier failed",
            shared.failed_prompts
        )),
        "{}",
        shared.graded_stdout
    );
    // No verifier and one sample: no score yet.
    assert!(
        shared.graded_stdout.contains("score: none (null)"),
        "{}",
        shared.graded_stdout
    );
    let table = routeval::schema::read_graded(
        &shared.graded,
        &routeval::schema::ReadOptions {
            score_optional: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(table.num_rows(), 60 - shared.failed_prompts);
    assert_eq!(
        arrow::array::Array::null_count(&table.batches[0].score),
        table.num_rows()
    );
}

#[test]
fn calibrate_names_an_empty_score_column_and_a_router_fills_it() {
    let shared = RunWithHoles::shared();
    let output = routeval()
        .args(["calibrate", "--target", "0.8", "--results"])
        .arg(&shared.graded)
        .output()
        .unwrap();
    let stderr = refused_line(&output);
    assert!(
        stderr.contains("column \"score\": no score (the column is empty"),
        "{stderr}"
    );
    let directory = tempfile::tempdir().unwrap();
    let scored = directory.path().join("scored.parquet");
    routeval()
        .args(["router", "train", "--folds", "2", "--results"])
        .arg(&shared.graded)
        .arg("--out")
        .arg(directory.path().join("router.bin"))
        .arg("--scored-out")
        .arg(&scored)
        .assert()
        .success();
    routeval()
        .args(["calibrate", "--target", "0.5", "--results"])
        .arg(&scored)
        .assert()
        .code(0);
}

#[test]
fn a_manifest_of_version_one_is_read_and_one_of_a_version_unknown_to_this_build_refused() {
    let shared = RunWithHoles::shared();
    let directory = tempfile::tempdir().unwrap();
    let out = directory.path().join("run");
    copy_tree(&shared.out, &out);
    let manifest_path = out.join("manifest.json");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap();
    let current = format!(
        "\"schema_version\": {}",
        routeval::schema::MANIFEST_SCHEMA_VERSION
    );
    assert!(manifest.contains(&current), "{manifest}");
    // Version 1: two tiers, no tier_order.
    let mut version_one: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    version_one["schema_version"] = 1.into();
    version_one.as_object_mut().unwrap().remove("tier_order");
    std::fs::write(&manifest_path, version_one.to_string()).unwrap();
    let output = grade(&out, &directory.path().join("from-version-one.parquet"))
        .arg("--allow-missing")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    std::fs::write(
        &manifest_path,
        manifest.replacen(&current, "\"schema_version\": 9", 1),
    )
    .unwrap();
    let output = grade(&out, &directory.path().join("from-version-nine.parquet"))
        .arg("--allow-missing")
        .output()
        .unwrap();
    let stderr = refused_line(&output);
    assert!(
        stderr.contains("schema_version 9 is not one this routeval reads"),
        "{stderr}"
    );
}

#[test]
fn grading_with_a_config_other_than_the_runs_is_refused() {
    let shared = RunWithHoles::shared();
    let other = shared.directory.path().join("other.toml");
    let text = std::fs::read_to_string(&shared.config).unwrap();
    std::fs::write(&other, text.replace("seed = 3", "seed = 4")).unwrap();
    let graded = shared.directory.path().join("other.parquet");
    let output = grade(&shared.out, &graded)
        .arg("--allow-missing")
        .arg("--config")
        .arg(&other)
        .output()
        .unwrap();
    let stderr = refused_line(&output);
    assert!(
        stderr.contains("the config changed since the run"),
        "{stderr}"
    );
    assert!(!graded.exists());
}

#[test]
fn the_preflight_waits_out_retry_after() {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 5);
    let sim = start_sim(
        &dataset,
        SimSettings {
            models_rate_limited: 2,
            faults: FaultProfile {
                retry_after_s: 1,
                ..FaultProfile::default()
            },
            ..SimSettings::default()
        },
    );
    let tuning = Tuning {
        verifier: false,
        ..Tuning::default()
    };
    let config = write_config(directory.path(), &base_url(&sim), &tuning);
    let started = Instant::now();
    run_command(
        &config,
        &dataset,
        &directory.path().join("run"),
        &directory.path().join("cache"),
    )
    .assert()
    .success();
    let stats = sim.stats();
    assert_eq!(stats.by_status.get(&429), Some(&2));
    assert_eq!(stats.early_retries, 0, "a check came before Retry-After");
    assert!(started.elapsed() >= Duration::from_secs(2));

    // An endpoint that never lets the check through is an input error.
    let refusing = start_sim(
        &dataset,
        SimSettings {
            models_rate_limited: u64::MAX,
            faults: FaultProfile {
                retry_after_s: 0,
                ..FaultProfile::default()
            },
            ..SimSettings::default()
        },
    );
    let config = write_config(directory.path(), &base_url(&refusing), &tuning);
    run_command(
        &config,
        &dataset,
        &directory.path().join("refused"),
        &directory.path().join("cache"),
    )
    .assert()
    .code(2)
    .stderr(predicate::str::contains("answered HTTP 429 to 5 checks"));
    assert_eq!(refusing.stats().requests, 5, "only the checks were sent");
}

#[test]
fn setup_messages_name_each_cause_once_and_never_a_key_in_a_url() {
    let directory = tempfile::tempdir().unwrap();
    let dataset = write_dataset(directory.path(), 5);
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let with_key = format!("http://user:sk-urlsecret123456@{closed_port}/v1");
    let config = write_config(directory.path(), &with_key, &Tuning::default());
    let output = run_command(
        &config,
        &dataset,
        &directory.path().join("out"),
        &directory.path().join("cache"),
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("sk-urlsecret"), "{stderr}");
    assert!(stderr.contains("[redacted]@127.0.0.1"), "{stderr}");

    let sim = start_sim(&dataset, SimSettings::default());
    let config = write_config(directory.path(), &base_url(&sim), &Tuning::default());
    let output = run_command(
        &config,
        directory.path(),
        &directory.path().join("out2"),
        &directory.path().join("cache"),
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("is a directory, not a dataset file")
            && stderr.matches("cannot read").count() == 1,
        "{stderr}"
    );

    // A run directory is never reached through a symbolic link.
    let elsewhere = directory.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let link = directory.path().join("linked-out");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let output = run_command(&config, &dataset, &link, &directory.path().join("cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("exists and is not a directory (--out)"),
        "{stderr}"
    );
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());

    // Nor is its lock followed through a symbolic link planted in it.
    let planted = directory.path().join("planted");
    std::fs::create_dir_all(&planted).unwrap();
    let target = directory.path().join("precious.txt");
    std::fs::write(&target, "keep").unwrap();
    std::os::unix::fs::symlink(&target, planted.join(".lock")).unwrap();
    let output = run_command(&config, &dataset, &planted, &directory.path().join("cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(".lock: is a symbolic link"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");

    // A dataset line that gives a field twice is refused, as in graded results.
    let twice = directory.path().join("twice.jsonl");
    std::fs::write(
        &twice,
        "{\"id\": \"a\", \"slice\": \"s\", \"prompt\": \"p\", \"prompt\": \"q\", \"rubric\": \"exact\"}\n",
    )
    .unwrap();
    let output = run_command(
        &config,
        &twice,
        &directory.path().join("out3"),
        &directory.path().join("cache"),
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "twice.jsonl: line 1: not a JSON object: key \"prompt\" appears more than once"
        ),
        "{stderr}"
    );
    assert_eq!(sim.stats().requests, 0, "a request was sent");
}

/// `strace`, which kills a process at a named system call: the tests that
/// need it fail without it rather than pass untried (`.ci/run` installs it).
fn strace() -> PathBuf {
    let path = PathBuf::from("/usr/bin/strace");
    assert!(
        path.exists(),
        "this test kills routeval at a rename with strace: apt-get install strace"
    );
    path
}

#[cfg(unix)]
#[test]
fn a_kill_at_any_rename_of_the_final_compaction_loses_no_answer() {
    let strace = strace();
    let directory = tempfile::tempdir().unwrap();
    let (sim, dataset, config) = flowing(directory.path(), 300, 0, 0.0, 8);
    let cache = directory.path().join("cache");
    let first = directory.path().join("first");
    run_command(&config, &dataset, &first, &cache)
        .arg("--no-cache")
        .assert()
        .success();
    let answered = read_all_responses(&first.join("responses.parquet")).unwrap();
    assert_eq!(answered.len(), 600);
    let calls = || sim.stats().completed.values().sum::<u64>();
    let paid = calls();
    // The same rows as a long run leaves them before its final compaction:
    // 40 sorted parts, more than two rounds of 16.
    let staged = directory.path().join("staged");
    std::fs::create_dir_all(staged.join("parts")).unwrap();
    std::fs::copy(first.join("manifest.json"), staged.join("manifest.json")).unwrap();
    for (index, chunk) in answered.chunks(15).enumerate() {
        let file = std::fs::File::create(
            staged
                .join("parts")
                .join(format!("part-0000000000000000-{index:06}.parquet")),
        )
        .unwrap();
        let mut writer = routeval::schema::ResponsesWriter::new(file).unwrap();
        writer.write(chunk).unwrap();
        writer.close().unwrap();
    }
    // strace counts a thread's renames; the compaction makes them on one.
    let resume = |out: &Path, killed_at_rename: Option<usize>| {
        let mut command = match killed_at_rename {
            Some(number) => {
                let mut command = std::process::Command::new(&strace);
                command
                    .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=rename"])
                    .arg("-e")
                    .arg(format!("inject=rename:signal=KILL:when={number}"))
                    .arg(binary());
                command
            }
            None => std::process::Command::new(binary()),
        };
        command
            .args(run_args(&config, &dataset, out, &cache))
            .arg("--no-cache")
            .output()
            .unwrap()
    };
    // The renames of a resume that only compacts, in order; each is killed
    // as it starts, so the state is the one right after the rename before.
    let renames = [
        "manifest.json",
        "parts/merge-00-000000.parquet",
        "parts/merge-00-000001.parquet",
        "parts/merge-00-000002.parquet",
        "responses.parquet",
        "manifest.json",
    ];
    for (index, target) in renames.iter().enumerate() {
        let out = directory.path().join(format!("kill-{index}"));
        copy_tree(&staged, &out);
        let killed = resume(&out, Some(index + 1));
        assert!(
            !killed.status.success(),
            "not killed at {target}: {}",
            String::from_utf8_lossy(&killed.stderr)
        );
        if target.ends_with(".parquet") {
            assert!(!out.join(target).exists(), "killed after renaming {target}");
        }
        if index >= 2 {
            assert!(
                out.join(renames[index - 1]).exists(),
                "killed before {target}"
            );
        }
        // And the resume killed too, at its first merge.
        let killed_again = resume(&out, Some(2));
        assert!(
            !killed_again.status.success(),
            "{target}: the resume was not killed"
        );
        let finished = resume(&out, None);
        assert!(
            finished.status.success(),
            "after a kill at {target}: {}",
            String::from_utf8_lossy(&finished.stderr)
        );
        let rows = read_all_responses(&out.join("responses.parquet")).unwrap();
        assert_eq!(rows.len(), answered.len(), "after a kill at {target}");
        assert!(rows == answered, "after a kill at {target}, rows changed");
        assert_eq!(
            calls(),
            paid,
            "after a kill at {target}, calls were sent again"
        );
        assert!(
            parts(&out).is_empty(),
            "after a kill at {target}: {:?}",
            parts(&out)
        );
    }
}

#[test]
fn a_directory_no_run_made_is_refused_as_out_and_left_as_it_was() {
    let directory = tempfile::tempdir().unwrap();
    let (sim, dataset, config) = flowing(directory.path(), 20, 0, 0.0, 4);
    let out = directory.path().join("notes");
    let files = [
        ("journal/journal-2026.jsonl", "my own journal\n"),
        ("parts/plan.parquet", "not parquet at all"),
        ("todo.txt", "call the vendor"),
    ];
    for (name, text) in files {
        std::fs::create_dir_all(out.join(name).parent().unwrap()).unwrap();
        std::fs::write(out.join(name), text).unwrap();
    }
    run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "is not empty and holds no routeval run (no manifest.json)",
        ));
    for (name, text) in files {
        assert_eq!(
            std::fs::read_to_string(out.join(name)).unwrap(),
            text,
            "{name}"
        );
    }
    let mut left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["journal", "parts", "todo.txt"]);
    assert!(sim.stats().completed.is_empty(), "a request was sent");
    // An empty directory, and a run's own, are runs to start or resume.
    let empty = directory.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    for _ in 0..2 {
        run_command(&config, &dataset, &empty, &directory.path().join("cache"))
            .assert()
            .success();
    }
}

/// A real filesystem of a few kilobytes (tmpfs) mounted for one test, and
/// unmounted when dropped.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    /// `None` (the test is skipped, and fails under CI) where mounting needs
    /// a root this process is not.
    fn mount(path: &Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(path).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .is_ok_and(|status| status.success());
        if !mounted {
            assert!(
                std::env::var_os("CI").is_none(),
                "a full disk needs a tmpfs, which needs root"
            );
            eprintln!("skipped: cannot mount a tmpfs (not root)");
            return None;
        }
        Some(SmallDisk {
            path: path.to_owned(),
        })
    }

    fn grow(&self, size: &str) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.path)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_stops_the_run_at_once_and_the_resume_sends_only_what_was_lost() {
    let directory = tempfile::tempdir().unwrap();
    let (sim, dataset, config) = flowing(directory.path(), 600, 5, 0.0, 8);
    let Some(disk) = SmallDisk::mount(&directory.path().join("small"), "96k") else {
        return;
    };
    let out = disk.path.join("run");
    let cache = directory.path().join("cache");
    let full = run_command(&config, &dataset, &out, &cache)
        .arg("--no-cache")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&full.stderr);
    assert_eq!(full.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("No space left on device") && stderr.contains("stopped sending requests"),
        "{stderr}"
    );
    let paid = sim.stats().completed;
    let sent: u64 = paid.values().sum();
    assert!(
        sent < 800,
        "{sent} of 1,200 calls were sent on a disk that held a fraction of them"
    );
    disk.grow("64m");
    run_command(&config, &dataset, &out, &cache)
        .arg("--no-cache")
        .assert()
        .success();
    let rows = read_all_responses(&out.join("responses.parquet")).unwrap();
    assert_eq!(rows.len(), 1200);
    let stats = sim.stats();
    let resent = paid.keys().filter(|key| stats.completed[*key] > 1).count();
    eprintln!(
        "{sent} calls before the disk was full and the run stopped ({}); {resent} sent again",
        stderr.trim()
    );
    // At most the calls in flight when the disk filled, and the rows held
    // in memory that no part could take: tens, not the hundreds sent.
    assert!(
        resent <= 64,
        "{resent} of {sent} paid calls were sent again"
    );
}

#[test]
fn records_from_a_run_refuse_a_changed_dataset_and_an_interval_past_any_clock() {
    let directory = tempfile::tempdir().unwrap();
    let (_sim, dataset, config) = flowing(directory.path(), 12, 0, 0.0, 4);
    let out = directory.path().join("run");
    run_command(&config, &dataset, &out, &directory.path().join("cache"))
        .assert()
        .success();
    let import = |interval: &str, target: &str| {
        routeval()
            .args(["records", "import", "--from", "run", "--input"])
            .arg(&out)
            .args(["--interval", interval, "--out"])
            .arg(directory.path().join(target))
            .assert()
    };
    import("1s", "fine.parquet").success();
    import("3000000000000h", "far.parquet")
        .code(2)
        .stderr(predicate::str::contains("--interval: prompt"));
    assert!(!directory.path().join("far.parquet").exists());
    // The dataset edited after the run: its prompts are no longer the run's.
    let text = std::fs::read_to_string(&dataset).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.swap(0, 1);
    std::fs::write(&dataset, lines.join("\n") + "\n").unwrap();
    import("1s", "changed.parquet")
        .code(2)
        .stderr(predicate::str::contains(
            "the dataset changed since the run",
        ));
    assert!(!directory.path().join("changed.parquet").exists());
}

#[cfg(unix)]
#[test]
fn sigterm_during_the_endpoint_check_is_an_orderly_stop() {
    let directory = tempfile::tempdir().unwrap();
    // An endpoint that takes connections and never answers: the run waits
    // in its check of the endpoints.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}/v1", silent.local_addr().unwrap());
    let dataset = write_dataset(directory.path(), 10);
    let tuning = Tuning {
        verifier: false,
        ..Tuning::default()
    };
    let config = write_config(directory.path(), &base_url, &tuning);
    let out = directory.path().join("run");
    let child = spawn_run(&config, &dataset, &out, &["--no-cache"]);
    std::thread::sleep(Duration::from_millis(700));
    send(&child, "TERM");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("interrupted before the first call; nothing was sent"),
        "{stderr}"
    );
    drop(silent);
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_is_named_by_the_file_that_did_not_fit() {
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path().join("records.jsonl");
    let lines: Vec<String> = (0..4000)
        .map(|index| {
            let slice = ["billing", "legal"][index as usize % 2];
            serde_json::json!({
                "id": format!("r{index}"),
                "timestamp": 1_764_504_000_000u64 + index,
                "slice": slice,
                "route": "mini",
                "status": "ok",
                "score": (index % 100) as f64 / 100.0,
                "prompt": format!("{} {index}", "a question about an invoice ".repeat(12)),
            })
            .to_string()
        })
        .collect();
    std::fs::write(&records, lines.join("\n") + "\n").unwrap();
    let Some(disk) = SmallDisk::mount(&directory.path().join("full"), "12k") else {
        return;
    };
    let out = |name: &str| disk.path.join(name);
    let commands: [(&str, Vec<std::ffi::OsString>); 3] = [
        (
            "records.parquet",
            vec![
                "records".into(),
                "import".into(),
                "--from".into(),
                "generic".into(),
                "--input".into(),
                records.clone().into(),
                "--out".into(),
                out("records.parquet").into(),
            ],
        ),
        (
            "sample.jsonl",
            vec![
                "sample".into(),
                "--records".into(),
                records.clone().into(),
                "--per-slice".into(),
                "2000".into(),
                "--out".into(),
                out("sample.jsonl").into(),
            ],
        ),
        (
            "report/report.html",
            vec![
                "report".into(),
                "--results".into(),
                crate::common::example_results().into(),
                "--out".into(),
                out("report").into(),
            ],
        ),
    ];
    for (file, args) in commands {
        let output = routeval().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{file}: {stderr}");
        assert!(
            stderr.contains(&format!("{}: cannot write", out(file).display()))
                && stderr.contains("No space left on device"),
            "{file}: {stderr}"
        );
        assert!(!out(file).exists(), "{file} was left half-written");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn keygen_on_a_full_disk_leaves_no_key_and_the_next_try_works() {
    let directory = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&directory.path().join("full"), "64k") else {
        return;
    };
    // Filled to the last block.
    let filler = disk.path.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let block = vec![0u8; 4096];
    while std::io::Write::write_all(&mut file, &block).is_ok() {}
    drop(file);
    let key = disk.path.join("ci.key");
    let output = routeval()
        .arg("keygen")
        .arg("--out")
        .arg(&key)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("ci.key: cannot write the secret key"),
        "{stderr}"
    );
    let left: Vec<String> = std::fs::read_dir(&disk.path)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["filler"], "a key or a temporary file was left");
    std::fs::remove_file(&filler).unwrap();
    routeval()
        .arg("keygen")
        .arg("--out")
        .arg(&key)
        .assert()
        .success();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        std::fs::metadata(disk.path.join("ci.key.pub"))
            .unwrap()
            .len()
            > 0
    );
}

#[cfg(target_os = "linux")]
#[test]
fn temporary_files_of_dead_processes_are_swept_and_live_ones_kept() {
    let directory = tempfile::tempdir().unwrap();
    let out = directory.path().join("calibration.json");
    // No process can have this id: it is above the kernel's largest.
    let dead = directory.path().join(".calibration.json.4194305.tmp");
    let live = directory
        .path()
        .join(format!(".calibration.json.{}.tmp", std::process::id()));
    let other = directory.path().join(".notes.txt.4194305.tmp");
    for path in [&dead, &live, &other] {
        std::fs::write(path, "35 MB of a killed write").unwrap();
    }
    routeval()
        .args(["calibrate", "--target", "0.9", "--results"])
        .arg(crate::common::example_results())
        .arg("--out")
        .arg(&out)
        .assert()
        .code(0);
    assert!(out.exists());
    assert!(!dead.exists(), "a dead process's temporary file stayed");
    assert!(live.exists(), "a live process's temporary file was removed");
    assert!(
        other.exists(),
        "another output's temporary file was removed"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_command_stopped_by_a_signal_takes_its_unfinished_file_with_it() {
    let directory = tempfile::tempdir().unwrap();
    // Enough records that the import is still writing when the signal comes.
    let input = directory.path().join("records.jsonl");
    let mut text = String::new();
    for index in 0..400_000u64 {
        text.push_str(&format!(
            "{{\"id\":\"r-{index}\",\"timestamp\":{},\"slice\":\"support\",\"route\":\"primary\",\"status\":200,\"prompt\":\"question {index} about an invoice\"}}\n",
            1_764_504_000_000u64 + index
        ));
    }
    std::fs::write(&input, text).unwrap();
    for signal in ["TERM", "INT", "HUP"] {
        let out = directory.path().join(format!("records-{signal}.parquet"));
        let child = std::process::Command::new(binary())
            .args(["records", "import", "--from", "generic", "--input"])
            .arg(&input)
            .arg("--out")
            .arg(&out)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let temporary = directory
            .path()
            .join(format!(".records-{signal}.parquet.{}.tmp", child.id()));
        wait_for("the import's temporary file", || temporary.exists());
        send(&child, signal);
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(3), "SIG{signal}: {stderr}");
        assert_eq!(
            stderr.trim_end(),
            format!("error: stopped by SIG{signal}; outputs not yet in place were removed")
        );
        assert!(
            !temporary.exists(),
            "SIG{signal} left {}",
            temporary.display()
        );
        assert!(!out.exists(), "SIG{signal} left a half-written output");
    }
}

/// A signal after the demo's run step stops the demo (its run's engine had
/// listened for signals, and the demo used to finish regardless, exit 0),
/// while a signal during the step still stops the run in its orderly way.
#[cfg(target_os = "linux")]
#[test]
fn the_demo_stops_on_a_signal_after_its_run_step_too() {
    let directory = tempfile::tempdir().unwrap();
    let log = directory.path().join("demo.log");
    let child = std::process::Command::new(binary())
        .current_dir(repo())
        .arg("demo")
        .arg("--out")
        .arg(directory.path().join("demo"))
        .arg("--report")
        .arg(directory.path().join("report"))
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the demo's step after its run", || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains("== router train"))
    });
    send(&child, "TERM");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("stopped by SIGTERM"), "{stderr}");
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("demo finished")
    );
}
