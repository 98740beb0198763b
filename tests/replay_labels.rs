//! The label draw committed before the records exist
//! (`[serving.explore.labels]`): `sample --config` draws it, `replay
//! candidate` refuses any other, and `gate --production` fails evidence
//! whose draw the running config did not commit, since a seed chosen after
//! the records can be tried until a label set passes.

use std::path::Path;

use predicates::prelude::*;
use predicates::str::contains;
use serde_json::Value;

use crate::common::production::{
    candidate_at, label_set, labelled_committed, replay_command, signed_running,
    signed_running_with, simulate,
};
use crate::common::{Pipeline, routeval};

fn estimate(
    pipeline: &Pipeline,
    config: &Path,
    candidate: &Path,
    records: &Path,
    labels: &Path,
    out: &Path,
) {
    replay_command(pipeline, config, candidate, records, labels)
        .arg("--out")
        .arg(out)
        .assert()
        .success();
}

/// The gate of `candidate` against the running `config` with `document`
/// as its production evidence: the candidate's failures.
fn production_failures(
    pipeline: &Pipeline,
    config: &Path,
    candidate: &Path,
    document: &Path,
    tag: &str,
) -> Vec<Value> {
    let out = pipeline.path(tag);
    pipeline
        .gate_pinned(&[candidate], "0.1", &out)
        .args(["--max-regression", "0.5", "--baseline"])
        .arg(config)
        .arg("--production")
        .arg(document)
        .assert()
        .code(predicate::in_iter([0, 1]));
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("gate-report.json")).unwrap()).unwrap();
    report["candidates"][0]["failures"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn only_the_committed_draw_is_drawn_and_estimated() {
    let pipeline = Pipeline::shared();
    let directory = tempfile::tempdir().unwrap();
    let (config, sha256) = signed_running_with(pipeline, "labels-committed", 0.5, Some((0.5, 17)));
    let signed: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    assert_eq!(signed["serving"]["explore"]["labels"]["seed"], 17);
    let records = directory.path().join("records.jsonl");
    let known = simulate(&records, &sha256, 0.5, 2_000, 5);
    let candidate = candidate_at(pipeline, "labels-committed", 0.3);

    // Another share or seed than the committed ones is refused, nothing
    // written.
    let refused = directory.path().join("refused.jsonl");
    for (flag, value, said) in [
        ("--label-share", "0.3", "--label-share 0.3: "),
        ("--seed", "3", "--seed 3: "),
    ] {
        routeval()
            .args(["sample", "--records"])
            .arg(&records)
            .arg("--config")
            .arg(&config)
            .args([flag, value, "--out"])
            .arg(&refused)
            .assert()
            .code(2)
            .stderr(contains(said).and(contains("commits its label draw")));
        assert!(!refused.exists());
    }

    // A set drawn with a seed of one's choosing, not the config's.
    let chosen = directory.path().join("chosen.jsonl");
    label_set(&records, &chosen, 0.5, 3, None, |id| known[id]);
    replay_command(pipeline, &config, &candidate, &records, &chosen)
        .assert()
        .code(2)
        .stderr(contains(
            "drawn with seed 3 at probability 0.5, where --config committed its own draw",
        ));

    // The committed set: drawn, estimated, carried as committed, and the
    // gate holds the candidate to no label rule.
    let labels = labelled_committed(&records, &config, &known);
    let document = directory.path().join("estimate.json");
    estimate(pipeline, &config, &candidate, &records, &labels, &document);
    let estimated: Value = serde_json::from_slice(&std::fs::read(&document).unwrap()).unwrap();
    assert_eq!(estimated["labels"]["committed"], true);
    assert_eq!(estimated["labels"]["seed"], 17);
    let failures = production_failures(
        pipeline,
        &config,
        &candidate,
        &document,
        "labels-committed-gate",
    );
    assert!(
        failures.iter().all(|failure| !failure["message"]
            .as_str()
            .unwrap()
            .contains("did not commit")),
        "{failures:?}"
    );
}

#[test]
fn evidence_whose_draw_the_config_did_not_commit_fails_the_gate() {
    let pipeline = Pipeline::shared();
    let directory = tempfile::tempdir().unwrap();
    let (config, sha256) = signed_running(pipeline, "labels-uncommitted", 0.5);
    let records = directory.path().join("records.jsonl");
    let known = simulate(&records, &sha256, 0.5, 2_000, 6);
    let candidate = candidate_at(pipeline, "labels-uncommitted", 0.3);

    // sample --config needs a config that commits a draw.
    routeval()
        .args(["sample", "--records"])
        .arg(&records)
        .arg("--config")
        .arg(&config)
        .arg("--out")
        .arg(directory.path().join("never.jsonl"))
        .assert()
        .code(2)
        .stderr(contains("commits no label draw ([serving.explore.labels])"));

    let labels = directory.path().join("labels.jsonl");
    label_set(&records, &labels, 0.5, 9, None, |id| known[id]);
    let document = directory.path().join("estimate.json");
    estimate(pipeline, &config, &candidate, &records, &labels, &document);
    let estimated: Value = serde_json::from_slice(&std::fs::read(&document).unwrap()).unwrap();
    assert_eq!(estimated["labels"]["committed"], false);
    let failures = production_failures(
        pipeline,
        &config,
        &candidate,
        &document,
        "labels-uncommitted-gate",
    );
    let uncommitted: Vec<&Value> = failures
        .iter()
        .filter(|failure| {
            failure["message"]
                .as_str()
                .unwrap()
                .contains("which the running config did not commit")
        })
        .collect();
    assert_eq!(uncommitted.len(), 1, "{failures:?}");
    assert_eq!(uncommitted[0]["rule"], "production");
}

#[test]
fn a_label_share_out_of_range_is_refused_by_the_gate() {
    let pipeline = Pipeline::shared();
    let table = pipeline.path("labels-out-of-range.toml");
    std::fs::write(
        &table,
        crate::common::demo_predictive(Some(0.5), "http://127.0.0.1:8089/v1")
            + "\n[serving.explore]\nshare = 0.2\n[serving.explore.labels]\nshare = 0\nseed = 1\n",
    )
    .unwrap();
    let out = pipeline.path("labels-out-of-range");
    pipeline
        .gate_pinned(&[&table], "0.1", &out)
        .assert()
        .code(1);
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("gate-report.json")).unwrap()).unwrap();
    let failure = &report["candidates"][0]["failures"][0];
    assert_eq!(failure["rule"], "serving", "{report}");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("[serving.explore.labels] share = 0: a label share is above 0 and at most 1"),
        "{failure}"
    );
    assert!(!out.join("route-config.v1.json").exists());
}
