//! `routeval drift`: fresh traffic against the deployed config.

use std::collections::BTreeSet;
use std::path::PathBuf;

use routeval::schema::{DriftDocument, Verdict};

use crate::common::Workspace;
use crate::common::certified_synthetic;
use crate::common::deployed;
use crate::common::slice_names;
use crate::common::{example_results, keys, routeval};

/// The example results with `edit(slice, header, fields)` applied to each row.
fn fresh(
    workspace: &Workspace,
    name: &str,
    edit: impl Fn(&[&str], &mut Vec<String>, usize),
) -> PathBuf {
    let text = std::fs::read_to_string(example_results()).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let mut out = header.join(",") + "\n";
    for (index, line) in lines.enumerate() {
        let mut fields: Vec<String> = line.split(',').map(str::to_owned).collect();
        edit(&header, &mut fields, index);
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    workspace.write(name, &out)
}

fn run(config: &str, results: &PathBuf, extra: &[&str]) -> (Option<i32>, DriftDocument) {
    let output = routeval()
        .args(["drift", "--json", "--config", config, "--results"])
        .arg(results)
        .args(extra)
        .output()
        .unwrap();
    let document = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&output.stderr)));
    (output.status.code(), document)
}

fn column(header: &[&str], name: &str) -> usize {
    header.iter().position(|field| *field == name).unwrap()
}

#[test]
fn the_traffic_it_was_calibrated_on_is_ok() {
    let (_workspace, config) = deployed();
    let results = example_results();
    let baseline = results.to_str().unwrap();
    let (code, document) = run(&config, &results, &["--baseline-results", baseline]);
    assert_eq!(code, Some(0));
    assert_eq!(document.verdict, Verdict::Ok);
    assert_eq!(document.target, 0.9);
    for slice in &document.slices {
        assert_eq!(
            slice.escalation_rate_at_calibration,
            Some(slice.escalation_rate)
        );
        let shift = slice.score_shift.unwrap();
        assert!(shift.psi.abs() < 1e-12 && shift.ks_statistic == 0.0 && shift.ks_p_value == 1.0);
    }
}

#[test]
fn shifted_scores_worse_answers_and_swapped_models_need_recalibration() {
    let (workspace, config) = deployed();
    let results = fresh(&workspace, "fresh.csv", |header, fields, index| {
        let slice = fields[column(header, "slice")].clone();
        match slice.as_str() {
            // Harder traffic: the router scores everything higher.
            "technical" => {
                let score: f64 = fields[column(header, "score")].parse().unwrap();
                fields[column(header, "score")] = format!("{:.3}", score + 0.2);
            }
            // The small model got worse.
            "billing" if index % 3 == 0 => fields[column(header, "small_ok")] = "false".to_owned(),
            // The provider swapped the large model under the pinned name.
            "legal" => fields[column(header, "large_model")] = "gpt-4o-2024-11-20".to_owned(),
            _ => {}
        }
    });
    let baseline = example_results();
    let (code, document) = run(
        &config,
        &results,
        &["--baseline-results", baseline.to_str().unwrap()],
    );
    assert_eq!(code, Some(1));
    assert_eq!(document.verdict, Verdict::Recalibrate);
    let slice = |name: &str| {
        document
            .slices
            .iter()
            .find(|slice| slice.slice == name)
            .unwrap()
    };

    let technical = slice("technical");
    assert_eq!(technical.verdict, Verdict::Recalibrate);
    assert!(technical.escalation_rate > technical.escalation_rate_at_calibration.unwrap());
    assert!(technical.escalation_p_value.unwrap() < 0.01);
    assert!(technical.score_shift.unwrap().psi >= 0.25);

    let billing = slice("billing");
    assert_eq!(billing.verdict, Verdict::Recalibrate);
    assert!(billing.quality < 0.9 && billing.quality_p_value < 0.05);
    assert!(
        billing
            .reasons
            .iter()
            .any(|reason| reason.contains("below the target"))
    );

    let legal = slice("legal");
    assert_eq!(legal.verdict, Verdict::Recalibrate);
    assert_eq!(
        legal.tier_drift,
        [
            "the large tier answered 700 rows with gpt-4o-2024-11-20, not the pinned gpt-4o-2024-08-06"
        ]
    );

    assert_eq!(slice("sales").verdict, Verdict::Ok);
}

#[test]
fn without_baseline_results_the_gate_metrics_are_the_reference() {
    let (workspace, config) = deployed();
    let results = fresh(&workspace, "fresh.csv", |header, fields, _| {
        if fields[column(header, "slice")] == "technical" {
            let score: f64 = fields[column(header, "score")].parse().unwrap();
            fields[column(header, "score")] = format!("{:.3}", score + 0.2);
        }
    });
    let (code, document) = run(&config, &results, &[]);
    assert_eq!(code, Some(1));
    let technical = document
        .slices
        .iter()
        .find(|slice| slice.slice == "technical")
        .unwrap();
    assert!(technical.escalation_p_value.unwrap() < 0.01);
    assert_eq!(technical.score_shift, None);
}

#[test]
fn document_keys_are_pinned_and_markdown_summarises() {
    let (_workspace, config) = deployed();
    let output = routeval()
        .args(["drift", "--json", "--config", &config, "--results"])
        .arg(example_results())
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["schema_version"], 3);
    assert_eq!(
        keys(&json),
        BTreeSet::from([
            "schema_version",
            "routeval_version",
            "config",
            "results",
            "baseline_results",
            "target",
            "confidence",
            "verdict",
            "tests",
            "slices"
        ])
    );
    assert_eq!(
        keys(&json["config"]),
        BTreeSet::from(["path", "sha256", "config_id", "version"])
    );
    assert_eq!(
        keys(&json["slices"][0]),
        BTreeSet::from([
            "slice",
            "n",
            "verdict",
            "reasons",
            "threshold",
            "escalation_rate",
            "escalation_rate_at_calibration",
            "escalation_p_value",
            "quality",
            "quality_lower_bound",
            "quality_p_value",
            "score_shift",
            "tier_drift",
        ])
    );
    let strict: DriftDocument = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(serde_json::to_value(&strict).unwrap(), json);

    let markdown = routeval()
        .args(["drift", "--markdown", "--config", &config, "--results"])
        .arg(example_results())
        .output()
        .unwrap();
    let markdown = String::from_utf8(markdown.stdout).unwrap();
    assert!(markdown.starts_with("## routeval drift: ok"));
    assert!(markdown.contains("| billing | 900 | ok |"));
}

#[test]
fn drift_reads_the_score_column_the_deployed_config_names() {
    use crate::common::{by_router, calibrate_into, two_scores};
    let workspace = Workspace::new();
    let (both, _) = two_scores(&workspace);
    let calibration = workspace.path("on-router.json");
    calibrate_into(&both, "router_score", "predictive", &calibration);
    let by_router = by_router(&workspace);
    workspace
        .gate_on(
            &both,
            &[by_router],
            &[calibration],
            "dist",
            &["--target", "0.9"],
        )
        .code(0);
    let config = workspace.report("dist").emitted.unwrap().config;
    // The same rows as at the gate: escalation matches the gate's metrics.
    let (code, document) = run(&config, &both, &[]);
    assert_eq!(code, Some(0));
    for slice in &document.slices {
        assert_eq!(
            slice.escalation_rate_at_calibration,
            Some(slice.escalation_rate),
            "{}",
            slice.slice
        );
    }
    // Read by the other score, the same thresholds escalate other rows.
    let (_, other) = run(&config, &both, &["--score-col", "score"]);
    assert!(
        other
            .slices
            .iter()
            .any(|slice| slice.escalation_rate_at_calibration != Some(slice.escalation_rate))
    );
}

/// Issue 25: nothing changed (a family-wise certified config, fresh draws
/// from the population it was calibrated on, 20 slices of 1,000 rows), and
/// the run as a whole raises an alarm in at most about δ of runs (1 of these
/// 40); the earlier per-test bands flagged all 40 (7 `recalibrate`). A
/// modest shift of the scores (+0.056) is still flagged in nearly every run
/// (20 of 20).
#[test]
fn unchanged_traffic_rarely_raises_an_alarm_and_a_modest_shift_nearly_always_does() {
    use crate::common::{synthetic_rows, write_csv};
    let workspace = Workspace::new();
    let names = slice_names(20);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (baseline, config) = certified_synthetic(&workspace, &names);
    let drift = |run: u64, shift: f64| -> DriftDocument {
        let fresh = workspace.path(&format!("fresh-{run}.csv"));
        let rows: Vec<_> = synthetic_rows(&names, 1000, 100 + run)
            .into_iter()
            .map(|row| crate::common::Row {
                score: (row.score + shift).min(1.0),
                ..row
            })
            .collect();
        write_csv(&fresh, &rows);
        let output = routeval()
            .args(["drift", "--json", "--config", &config, "--results"])
            .arg(&fresh)
            .arg("--baseline-results")
            .arg(&baseline)
            .output()
            .unwrap();
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let runs = 40;
    let (mut recalibrate, mut watch) = (0, 0);
    for run in 0..runs {
        let document = drift(run, 0.0);
        assert_eq!(document.tests, 80, "four tests a slice");
        recalibrate += usize::from(document.verdict == Verdict::Recalibrate);
        watch += usize::from(document.verdict == Verdict::Watch);
    }
    eprintln!("unchanged: {recalibrate} of {runs} runs recalibrate, {watch} watch");
    // At most δ = 5% of runs in expectation, 2 of 40; 7 or more has
    // probability 0.0005 under that bound.
    assert!(
        recalibrate + watch <= 6,
        "{recalibrate} recalibrate, {watch} watch of {runs}"
    );
    let shifted = 20;
    let flagged = (0..shifted)
        .filter(|&run| drift(1000 + run, 0.056).verdict != Verdict::Ok)
        .count();
    eprintln!("shifted by 0.056: {flagged} of {shifted} runs flagged");
    assert!(flagged >= 19, "{flagged} of {shifted} shifted runs flagged");
}
