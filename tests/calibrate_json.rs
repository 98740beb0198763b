//! Pins the calibration document's format: its keys, their types, and the
//! schema version. A change here is a change for every consumer.

use std::collections::BTreeSet;

use routeval::schema::{CALIBRATION_SCHEMA_VERSION, CalibrationDocument};
use serde_json::Value;

use crate::common::{example_results, keys, routeval};

fn calibration_json(extra: &[&str]) -> Value {
    let output = routeval()
        .args(["calibrate", "--target", "0.9", "--json", "--results"])
        .arg(example_results())
        .args(extra)
        .output()
        .unwrap();
    assert!(output.status.code() == Some(0) || output.status.code() == Some(1));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn document_keys_are_pinned() {
    let json = calibration_json(&["--confidence", "0.95", "--holdout", "0.2", "--seed", "3"]);
    assert_eq!(json["schema_version"], 7);
    assert_eq!(CALIBRATION_SCHEMA_VERSION, 7);
    assert_eq!(
        keys(&json),
        BTreeSet::from([
            "schema_version",
            "routeval_version",
            "results",
            "policy",
            "score_column",
            "target",
            "confidence",
            "guarantee",
            "slice_confidence",
            "scope",
            "holdout",
            "feasible",
            "slices",
        ])
    );
    assert_eq!(
        keys(&json["results"]),
        BTreeSet::from(["path", "sha256", "rows"])
    );
    assert_eq!(keys(&json["holdout"]), BTreeSet::from(["fraction", "seed"]));
    assert_eq!(json["policy"], "predictive");
    assert_eq!(json["score_column"], "score");
    assert_eq!(json["scope"], "per_slice");
    assert_eq!(json["guarantee"], "per_slice");
    assert_eq!(json["slice_confidence"], 0.95);
    let slice = &json["slices"][0];
    assert_eq!(
        keys(slice),
        BTreeSet::from([
            "slice",
            "n",
            "feasible",
            "reason",
            "threshold",
            "quality",
            "quality_lower_bound",
            "mean_cost",
            "escalation_rate",
            "savings_vs_always_large",
            "max_quality",
            "baselines",
            "holdout",
            "frontier_points",
            "frontier",
        ])
    );
    assert_eq!(
        keys(&slice["baselines"]),
        BTreeSet::from(["always_small", "always_large", "oracle"])
    );
    assert_eq!(
        keys(&slice["baselines"]["oracle"]),
        BTreeSet::from(["quality", "mean_cost"])
    );
    assert_eq!(
        keys(&slice["holdout"]),
        BTreeSet::from([
            "n",
            "quality",
            "mean_cost",
            "escalation_rate",
            "meets_target",
            "quality_interval",
            "verdict"
        ])
    );
    assert_eq!(
        keys(&slice["frontier"][0]),
        BTreeSet::from(["threshold", "quality", "mean_cost", "escalation_rate"])
    );
    assert_eq!(json["results"]["sha256"].as_str().unwrap().len(), 64);
}

#[test]
fn escalate_nothing_is_the_string_inf() {
    let json = calibration_json(&[]);
    let frontier = json["slices"][0]["frontier"].as_array().unwrap();
    // The cheapest point of a predictive frontier escalates nothing.
    assert_eq!(frontier[0]["threshold"], "inf");
    assert!(frontier[1]["threshold"].is_f64());
}

#[test]
fn plain_fits_have_no_lower_bound() {
    let json = calibration_json(&[]);
    assert!(json["confidence"].is_null());
    for slice in json["slices"].as_array().unwrap() {
        assert!(slice["quality_lower_bound"].is_null());
        assert!(slice["holdout"].is_null());
    }
}

#[test]
fn document_deserializes_strictly() {
    let json = calibration_json(&["--confidence", "0.95"]);
    let document: CalibrationDocument = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(serde_json::to_value(&document).unwrap(), json);
    let mut extended = json;
    extended["surprise"] = Value::Bool(true);
    assert!(serde_json::from_value::<CalibrationDocument>(extended).is_err());
}

#[test]
fn version_2_documents_read_as_per_slice_guarantees() {
    let mut json = calibration_json(&["--confidence", "0.95"]);
    json["schema_version"] = 2.into();
    let object = json.as_object_mut().unwrap();
    object.remove("guarantee");
    object.remove("slice_confidence");
    let document: CalibrationDocument = serde_json::from_value(json).unwrap();
    assert_eq!(document.guarantee, routeval::schema::Guarantee::PerSlice);
}

#[test]
fn version_1_documents_read_as_calibrated_on_score() {
    let mut json = calibration_json(&[]);
    json["schema_version"] = 1.into();
    json.as_object_mut().unwrap().remove("score_column");
    let document: CalibrationDocument = serde_json::from_value(json).unwrap();
    assert_eq!(document.score_column, "score");
}
