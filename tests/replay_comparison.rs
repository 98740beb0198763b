//! `replay candidate --state`: the candidate against the running config,
//! looked at again as the records grow, through the binary. The traffic is
//! `replay_candidate`'s simulated population, whose truth is known: a
//! candidate cutting at `t` has quality ∫₀^t (1 − x) dx + (1 − t)·0.9,
//! the running config cuts at 0.5.

use std::path::{Path, PathBuf};

use routeval::schema::{ComparisonState, ComparisonVerdict};
use serde_json::Value;

use crate::common::Pipeline;
use crate::common::production::{
    RUNNING_THRESHOLD, candidate_at, labelled, quality_at, replay_command, signed_running, simulate,
};

/// Records of one stream and what each look reads: its first `n` records
/// and their label set (the draw is per record, so a prefix's labels are
/// the prefix of the whole set's).
struct Stream {
    directory: tempfile::TempDir,
    config: PathBuf,
    lines: Vec<String>,
    truth: std::collections::HashMap<String, bool>,
}

impl Stream {
    fn new(pipeline: &Pipeline, tag: &str, share: f64, n: usize, seed: u64) -> Stream {
        let directory = tempfile::tempdir().unwrap();
        let (config, sha256) = signed_running(pipeline, tag, share);
        let all = directory.path().join("all.jsonl");
        let truth = simulate(&all, &sha256, share, n, seed);
        let lines = std::fs::read_to_string(&all)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        Stream {
            directory,
            config,
            lines,
            truth,
        }
    }

    /// The first `n` records and their labels, as a look reads them
    /// (drawn once for each `n`).
    fn first(&self, n: usize) -> (PathBuf, PathBuf) {
        let records = self.directory.path().join(format!("first-{n}.jsonl"));
        let labels = records.with_extension("labels.jsonl");
        if !labels.exists() {
            std::fs::write(&records, self.lines[..n].join("\n") + "\n").unwrap();
            labelled(&records, 0.5, 3, &self.truth);
        }
        (records, labels)
    }

    /// One look at the first `n` records with `--state state` and `extra`
    /// flags: the exit code, the document (when written) and stderr.
    fn look(
        &self,
        pipeline: &Pipeline,
        candidate: &Path,
        n: usize,
        state: &Path,
        extra: &[&str],
    ) -> (i32, Option<Value>, String) {
        let (records, labels) = self.first(n);
        let output = replay_command(pipeline, &self.config, candidate, &records, &labels)
            .arg("--state")
            .arg(state)
            .args(extra)
            .output()
            .unwrap();
        let document = serde_json::from_slice(&output.stdout).ok();
        (
            output.status.code().unwrap(),
            document,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

fn state_of(path: &Path) -> ComparisonState {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_better_candidate_is_found_better_as_the_records_grow_and_stays_stopped() {
    let pipeline = Pipeline::shared();
    let stream = Stream::new(pipeline, "compare-better", 0.6, 10_000, 21);
    // Cutting at 0.3: truly 0.06 better than the running config.
    let candidate = candidate_at(pipeline, "compare-better", 0.3);
    assert!(quality_at(0.3) - quality_at(RUNNING_THRESHOLD) > 0.05);
    let state = stream.directory.path().join("comparison.json");
    let mut verdicts = Vec::new();
    for n in [2_000, 4_000, 6_000, 8_000, 10_000] {
        let (code, document, stderr) = stream.look(pipeline, &candidate, n, &state, &[]);
        assert_eq!(code, 0, "{stderr}");
        let comparison = document.unwrap()["comparison"].clone();
        verdicts.push((
            comparison["verdict"].as_str().unwrap().to_owned(),
            comparison["looks"].as_u64().unwrap(),
            comparison["stopped"].as_bool().unwrap(),
        ));
    }
    // Never called worse; better by the last look, and once stopped the
    // verdict and its look stay what they were.
    assert!(
        verdicts.iter().all(|(verdict, ..)| verdict != "worse"),
        "{verdicts:?}"
    );
    let first_better = verdicts
        .iter()
        .position(|(verdict, ..)| verdict == "better")
        .unwrap_or_else(|| panic!("never better in 10,000 requests: {verdicts:?}"));
    for (verdict, looks, stopped) in &verdicts[first_better..] {
        assert_eq!(verdict, "better");
        assert_eq!(*looks, first_better as u64 + 1);
        assert!(stopped);
    }
    for (verdict, _, stopped) in &verdicts[..first_better] {
        assert_eq!((verdict.as_str(), *stopped), ("undecided", false));
    }
    let kept = state_of(&state);
    assert_eq!(kept.stopped_at, Some(first_better + 1));
    assert_eq!(kept.looks.len(), first_better + 1);
    assert_eq!(kept.looks[first_better].verdict, ComparisonVerdict::Better);
    assert!(kept.looks[first_better].difference.lower.unwrap() > 0.0);
}

#[test]
fn a_worse_candidate_is_found_worse_and_a_label_budget_stops_an_undecided_one() {
    let pipeline = Pipeline::shared();
    let stream = Stream::new(pipeline, "compare-worse", 0.6, 4_000, 22);
    // Cutting at 0.8: truly 0.165 worse.
    let worse = candidate_at(pipeline, "compare-worse", 0.8);
    let state = stream.directory.path().join("worse.json");
    let (code, document, stderr) = stream.look(pipeline, &worse, 4_000, &state, &[]);
    assert_eq!(code, 0, "{stderr}");
    let comparison = &document.unwrap()["comparison"];
    assert_eq!(comparison["verdict"], "worse", "{comparison}");
    assert!(comparison["difference"]["upper"].as_f64().unwrap() < 0.0);

    // Cutting at 0.49: within 0.0001 of the running config, which no label
    // budget here can tell apart. The budget stops it undecided.
    let close = candidate_at(pipeline, "compare-close", 0.49);
    let state = stream.directory.path().join("close.json");
    let budget = ["--max-labels", "1500"];
    let (_, first, _) = stream.look(pipeline, &close, 2_000, &state, &budget);
    let first = &first.unwrap()["comparison"];
    assert_eq!(
        (first["verdict"].as_str(), first["stopped"].as_bool()),
        (Some("undecided"), Some(false)),
        "{first}"
    );
    let (_, second, _) = stream.look(pipeline, &close, 4_000, &state, &budget);
    let second = &second.unwrap()["comparison"];
    assert!(second["labelled"].as_u64().unwrap() >= 1_500, "{second}");
    assert_eq!(
        (second["verdict"].as_str(), second["stopped"].as_bool()),
        (Some("undecided"), Some(true)),
        "{second}"
    );
    assert!(
        second["message"]
            .as_str()
            .unwrap()
            .contains("the budget (1500 labels) is spent"),
        "{second}"
    );
}

#[test]
fn records_that_do_not_extend_the_compared_ones_and_a_one_look_bound_are_refused() {
    let pipeline = Pipeline::shared();
    let stream = Stream::new(pipeline, "compare-refused", 0.6, 3_000, 23);
    let candidate = candidate_at(pipeline, "compare-refused", 0.3);
    let state = stream.directory.path().join("state.json");
    let (code, _, stderr) = stream.look(pipeline, &candidate, 2_000, &state, &[]);
    assert_eq!(code, 0, "{stderr}");
    let before = std::fs::read(&state).unwrap();

    // The same records in another order: not one growing stream.
    let (records, _) = stream.first(3_000);
    let mut lines: Vec<String> = std::fs::read_to_string(&records)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.swap(0, 1);
    std::fs::write(&records, lines.join("\n") + "\n").unwrap();
    let (code, _, stderr) = stream.look(pipeline, &candidate, 3_000, &state, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(
            "state.json: the records do not begin with the 2000 decisions compared before"
        ),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&state).unwrap(),
        before,
        "the state was changed"
    );

    // Fewer records than compared before: the same refusal.
    let (code, _, stderr) = stream.look(pipeline, &candidate, 1_000, &state, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("do not begin with the 2000 decisions"),
        "{stderr}"
    );

    // Another candidate on the same state.
    let other = candidate_at(pipeline, "compare-other", 0.35);
    let (code, _, stderr) = stream.look(pipeline, &other, 3_000, &state, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("compares the candidate of sha256"),
        "{stderr}"
    );

    // A one-look interval cannot be compared at every look.
    let fresh = stream.directory.path().join("fresh.json");
    let (code, _, stderr) = stream.look(
        pipeline,
        &candidate,
        3_000,
        &fresh,
        &["--bound", "empirical-bernstein"],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--state compares at every look"),
        "{stderr}"
    );
    assert!(!fresh.exists());
    assert_eq!(std::fs::read(&state).unwrap(), before);
}
