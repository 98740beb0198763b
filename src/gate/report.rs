//! `gate-report.json`: every candidate's metrics and failures, which one was
//! chosen, and what was emitted. Versioned; readers reject unknown keys.

use serde::{Deserialize, Serialize};

use crate::calibrate::InputFile;

use super::rules::Failure;
use crate::policy::Metrics;

pub const GATE_REPORT_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateReport {
    #[serde(deserialize_with = "crate::version::known::<_, 1, GATE_REPORT_SCHEMA_VERSION>")]
    pub schema_version: u32,
    pub routeval_version: String,
    pub results: InputFile,
    pub target: f64,
    pub confidence: Option<f64>,
    pub max_regression: f64,
    pub baseline: Option<BaselineRef>,
    pub candidates: Vec<CandidateReport>,
    /// The file of the cheapest candidate that passed.
    pub chosen: Option<String>,
    pub emitted: Option<Emitted>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineRef {
    pub path: String,
    pub version: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateReport {
    pub file: String,
    pub sha256: String,
    pub logical_model: String,
    pub policy: String,
    pub passed: bool,
    pub failures: Vec<Failure>,
    pub warnings: Vec<String>,
    pub overall: Metrics,
    pub slices: Vec<Metrics>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Emitted {
    pub config: String,
    pub signature: String,
    pub litellm: String,
    pub version: u64,
    pub sha256: String,
}
