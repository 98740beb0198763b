//! `routeval simulate`: deterministic tables that the other stages read.

use predicates::prelude::*;
use routeval::schema::CalibrationDocument;

use crate::common::routeval;

#[test]
fn a_seed_gives_the_same_table_and_calibrate_reads_it() {
    let directory = tempfile::tempdir().unwrap();
    let write = |name: &str, seed: &str| {
        let path = directory.path().join(name);
        routeval()
            .args(["simulate", "--requests", "3000", "--seed", seed, "--out"])
            .arg(&path)
            .assert()
            .code(0);
        std::fs::read(&path).unwrap()
    };
    assert_eq!(write("a.parquet", "1"), write("b.parquet", "1"));
    assert_ne!(write("a.parquet", "1"), write("c.parquet", "2"));

    let output = routeval()
        .args([
            "calibrate",
            "--policy",
            "cascade",
            "--score-col",
            "verifier_score",
            "--target",
            "0.9",
            "--json",
            "--results",
        ])
        .arg(directory.path().join("a.parquet"))
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let document: CalibrationDocument = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document.results.rows, 3000);
    // A binary verdict leaves three candidates: escalate all, the rejected, none.
    assert!(document.slices[0].frontier_points <= 3);
}

#[test]
fn compare_prints_the_four_policies() {
    routeval()
        .args(["simulate", "--compare", "--requests", "2000"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("2000 simulated requests"))
        .stdout(predicate::str::contains("always large"))
        .stdout(predicate::str::contains("always small"))
        .stdout(predicate::str::contains("cascade"))
        .stdout(predicate::str::contains("predictive"));
}

#[test]
fn bad_parameters_are_one_line_usage_errors() {
    for (flags, expected) in [
        (
            &["simulate", "--compare", "--large-total", "0.5"][..],
            "--large-total must be at least --large-ttft, got 0.5",
        ),
        (
            &["simulate"],
            "nothing to do: give --out FILE, --compare, or both",
        ),
        (
            &["simulate", "--compare", "--requests", "0"],
            "--requests must be at least 1",
        ),
    ] {
        let output = routeval().args(flags).output().unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1);
        assert!(stderr.contains(expected), "{stderr}");
    }
}

#[test]
fn with_a_mid_model_three_tiers_reach_the_target_for_less_than_any_two() {
    let simulation = routeval::simulate::Simulation::default();
    let rows = simulation.rows();
    let target = 0.95;
    let summaries = routeval::simulate::compare_tiers(
        &simulation,
        &rows,
        routeval::units::Target::new(target).unwrap(),
    );
    assert_eq!(summaries.len(), 8);
    let three = summaries
        .iter()
        .find(|summary| summary.policy == "predictive small→mid→large")
        .unwrap();
    let thresholds = three
        .thresholds
        .as_ref()
        .expect("three tiers reach the target");
    assert!(thresholds[0] <= thresholds[1]);
    assert!(three.quality >= target);
    let best_two = summaries
        .iter()
        .filter(|summary| summary.tiers.len() == 2 && summary.thresholds.is_some())
        .map(|summary| summary.dollars_per_1k)
        .fold(f64::INFINITY, f64::min);
    assert!(
        three.dollars_per_1k < best_two,
        "three tiers {} against the best two {best_two}",
        three.dollars_per_1k
    );
    for summary in &summaries {
        assert!(
            (summary.shares.iter().sum::<f64>() - 1.0).abs() < 1e-12,
            "{}",
            summary.policy
        );
        if summary.thresholds.is_some() {
            assert!(summary.quality >= target, "{}", summary.policy);
        }
    }
    routeval()
        .args([
            "simulate",
            "--compare",
            "--requests",
            "2000",
            "--target",
            "0.9",
        ])
        .assert()
        .code(0)
        .stdout(predicate::str::contains(
            "cheapest thresholds reaching quality 0.9",
        ))
        .stdout(predicate::str::contains("predictive small→mid→large"))
        .stdout(predicate::str::contains("cascade small→mid→large"));
}

#[test]
fn millions_of_requests_show_their_progress_and_the_tables_do_not_change() {
    let simulate = |progress: &str| {
        routeval()
            .args([
                "simulate",
                "--requests",
                "20000",
                "--compare",
                "--progress",
                progress,
            ])
            .output()
            .unwrap()
    };
    let (quiet, json) = (simulate("none"), simulate("json"));
    assert!(quiet.status.success() && json.status.success());
    assert_eq!(quiet.stdout, json.stdout);
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    let events: Vec<serde_json::Value> = String::from_utf8(json.stderr)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["event"], "planned");
    assert_eq!(events.first().unwrap()["total"], 20_000);
    assert_eq!(events.last().unwrap()["event"], "finished");
    let progress: Vec<u64> = events
        .iter()
        .filter(|event| event["event"] == "progress")
        .map(|event| event["done"].as_u64().unwrap())
        .collect();
    assert_eq!(progress.last(), Some(&20_000), "{events:?}");
    assert!(
        progress.windows(2).all(|pair| pair[0] < pair[1]),
        "{progress:?}"
    );
    assert!(
        events
            .iter()
            .all(|event| event["stage"] == "simulate" && event["schema_version"] == 1)
    );
}
