//! The running comparison of a candidate against the config whose records
//! it is estimated on (`replay candidate --state FILE`): the verdict each
//! look reached in `candidate.json`'s `comparison`, and the state carried
//! between looks. Versioned; readers reject unknown keys.

use serde::{Deserialize, Serialize};

use super::Estimate;

pub const COMPARISON_STATE_SCHEMA_VERSION: u32 = 1;

/// The state's `kind`.
pub const COMPARISON_STATE_KIND: &str = "candidate-comparison";

/// What `replay candidate --state` keeps, and may replace.
pub const COMPARISON_STATE_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a candidate comparison state (--state)",
    crate::atomic::Replaces::Document {
        keys: &[
            "schema_version",
            "kind",
            "config_sha256",
            "candidate_sha256",
        ],
        kind: Some(COMPARISON_STATE_KIND),
    },
);

/// Where a comparison stands: the candidate shown better or worse than the
/// running config (the sequence of their paired difference excludes 0),
/// or not yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComparisonVerdict {
    Better,
    Worse,
    Undecided,
}

/// A label or day budget; a comparison that spends it stops undecided.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComparisonBudget {
    pub max_labels: Option<u64>,
    pub max_days: Option<f64>,
}

/// One look: the decisions and labels read, the paired difference
/// (candidate minus running, over all requests) and what it said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComparisonLook {
    pub decisions: u64,
    pub labelled: u64,
    pub difference: Estimate,
    pub verdict: ComparisonVerdict,
}

/// The state between looks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComparisonState {
    #[serde(deserialize_with = "crate::version::known::<_, 1, COMPARISON_STATE_SCHEMA_VERSION>")]
    pub schema_version: u32,
    /// `candidate-comparison`.
    pub kind: String,
    pub config_sha256: String,
    pub candidate_sha256: String,
    pub confidence: f64,
    /// The label draw every look read: its seed and probability.
    pub label_seed: u64,
    pub inclusion_probability: f64,
    pub budget: ComparisonBudget,
    /// The config's decisions compared so far, in the records' order, and
    /// the sha256 of their ids in that order: a later look must read them
    /// first, so that every look extends one sequence.
    pub decisions: u64,
    pub decisions_sha256: String,
    /// When the first decision compared was made (ms since the epoch).
    pub first_decision_ms: Option<i64>,
    pub looks: Vec<ComparisonLook>,
    /// The look (1-based) that stopped the comparison; later looks change
    /// nothing.
    pub stopped_at: Option<usize>,
}

/// What a look says, in `candidate.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparison {
    /// The state file.
    pub state: String,
    pub verdict: ComparisonVerdict,
    /// Whether the comparison has stopped: decided, or its budget spent.
    pub stopped: bool,
    /// Looks so far, this one included (a stopped comparison's: the ones up
    /// to its stop).
    pub looks: usize,
    /// The labels the verdict rests on.
    pub labelled: u64,
    pub difference: Estimate,
    /// One line saying it.
    pub message: String,
}
