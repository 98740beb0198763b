//! `drift.json`: the verdict per slice and the evidence behind it.
//! Versioned; readers reject unknown keys.

use serde::{Deserialize, Serialize};

use crate::schema::{InputFile, Threshold};

/// Version 2 added per-slice `thresholds` for configs over more than two
/// tiers; version 1 documents read as two-tier ones.
pub const DRIFT_SCHEMA_VERSION: u32 = 4;

/// What `drift --out` writes from graded results.
pub const DRIFT_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a drift document",
    crate::atomic::Replaces::Document {
        keys: &[
            "schema_version",
            "routeval_version",
            "config",
            "results",
            "verdict",
            "slices",
        ],
        kind: None,
    },
);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ok,
    Watch,
    Recalibrate,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Watch => "watch",
            Verdict::Recalibrate => "recalibrate",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftDocument {
    #[serde(deserialize_with = "crate::version::known::<_, 1, DRIFT_SCHEMA_VERSION>")]
    pub schema_version: u32,
    pub routeval_version: String,
    pub config: ConfigRef,
    pub results: InputFile,
    pub baseline_results: Option<InputFile>,
    pub target: f64,
    pub confidence: f64,
    /// The worst slice verdict.
    pub verdict: Verdict,
    /// How many tests the run's false-alarm control spans (every slice's
    /// quality, escalation and score tests); version 3 on.
    #[serde(default)]
    pub tests: u64,
    pub slices: Vec<SliceDrift>,
    /// With `--state`: the anytime-valid monitor after this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<SequentialDrift>,
}

/// The anytime-valid monitor (`drift --state`) after a run: quality and
/// escalation judged by e-processes over every run counted so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SequentialDrift {
    pub state: String,
    /// Runs counted, this one included.
    pub runs: u64,
    /// Rows of this run the monitor counted: those it had not counted in
    /// an earlier run (version 4 on).
    #[serde(default)]
    pub rows_counted: u64,
    /// Rows of this run an earlier run had counted, left out (a rolling
    /// window or a growing file repeats rows).
    #[serde(default)]
    pub rows_repeated: u64,
    /// Each test's level: an e-value of 1 / level alarms.
    pub level: f64,
    /// The change detectors' average run length to a false alarm, in runs:
    /// a statistic of this much alarms (version 4 on).
    #[serde(default)]
    pub arl: f64,
    pub slices: Vec<SequentialSlice>,
    /// Slices of this run outside the monitor's family (new since its
    /// first run): not monitored.
    pub left_out: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SequentialSlice {
    pub slice: String,
    pub rows: u64,
    pub runs: u64,
    pub quality_e_value: f64,
    /// The larger of the two directions' e-values; `None` without
    /// thresholds.
    pub escalation_e_value: Option<f64>,
    /// The run in which each first alarmed.
    pub quality_alarm_run: Option<u64>,
    pub escalation_alarm_run: Option<u64>,
    /// "Changed since calibration": the detector's statistic of quality
    /// below the calibration's interval (`None` where calibration measured
    /// no quality), and the run it first reached the average run length.
    #[serde(default)]
    pub quality_change_statistic: Option<f64>,
    #[serde(default)]
    pub quality_change_run: Option<u64>,
    /// "Escalation moved since calibration": the mean statistic of the two
    /// directions' detectors (`None` without thresholds), and the run it
    /// first reached the average run length.
    #[serde(default)]
    pub escalation_change_statistic: Option<f64>,
    #[serde(default)]
    pub escalation_change_run: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigRef {
    pub path: String,
    pub sha256: String,
    pub config_id: String,
    pub version: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceDrift {
    pub slice: String,
    pub n: u64,
    pub verdict: Verdict,
    /// Why the verdict is not `ok`.
    pub reasons: Vec<String>,
    /// The deployed threshold; `None` for policies without one.
    pub threshold: Option<Threshold>,
    /// A config over more than two tiers: the slice's deployed thresholds
    /// (escalation is then leaving the first tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<Vec<Threshold>>,
    /// With `thresholds`: the share of the fresh rows each tier served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<Vec<f64>>,
    pub escalation_rate: f64,
    pub escalation_rate_at_calibration: Option<f64>,
    /// Two-sided p-value of the two-proportion z-test.
    pub escalation_p_value: Option<f64>,
    pub quality: f64,
    pub quality_lower_bound: f64,
    /// One-sided exact binomial p-value of "quality ≥ target".
    pub quality_p_value: f64,
    pub score_shift: Option<ScoreShift>,
    /// Rows answered by a model other than the pinned one, per tier.
    pub tier_drift: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreShift {
    /// Population stability index over the baseline's deciles.
    pub psi: f64,
    /// What PSI averages at these sizes when nothing changed; version 3 on.
    #[serde(default)]
    pub psi_null: f64,
    /// Pearson's χ² test of the same bins; version 3 on.
    #[serde(default = "one")]
    pub psi_p_value: f64,
    pub ks_statistic: f64,
    pub ks_p_value: f64,
}

/// The p-value a document of an earlier version, without the test, reads as.
pub(super) fn one() -> f64 {
    1.0
}
