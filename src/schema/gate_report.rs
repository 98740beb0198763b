//! `gate-report.json`: every candidate's metrics and failures, which one was
//! chosen, and what was emitted. Versioned; readers reject unknown keys.

use serde::{Deserialize, Serialize};

use super::InputFile;

use super::{ExplorationPrice, Metrics};
use crate::stats::PairedVerdict;

/// Version 7 added `max_cost_increase`, each candidate's `cost_change`
/// against the deployed config and its rule, the deployed config's own
/// `quality` and `mean_cost` on the rows, and `signed` (a gate without
/// `--key` chooses but signs nothing); version 6 added each exploring
/// candidate's `exploration` price, its `production` evidence and their
/// rules; version 5 added `scores`; version 4 added `rollback`; version 3
/// added `served` to the metrics of candidates over more than two tiers;
/// version 2 added each candidate's `regressions` against `--baseline`.
pub const GATE_REPORT_SCHEMA_VERSION: u32 = 9;

/// The gate report's file name in the gate's `--out`.
pub const GATE_REPORT_FILE: &str = "gate-report.json";

/// What a gate writes as `gate-report.json`.
pub const GATE_REPORT_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a gate report",
    crate::atomic::Replaces::Document {
        keys: &[
            "schema_version",
            "routeval_version",
            "results",
            "target",
            "candidates",
        ],
        kind: None,
    },
);

/// The first line of `gate-report.md`, by which a gate knows its own.
pub const GATE_MARKDOWN_HEADER: &str = "## routeval gate\n";

/// What a gate writes as `gate-report.md`.
pub const GATE_MARKDOWN_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a gate report",
    crate::atomic::Replaces::Prefix(GATE_MARKDOWN_HEADER.as_bytes()),
);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    Constraint,
    Unevaluated,
    Capacity,
    MissingThreshold,
    BelowTarget,
    Regression,
    VersionMismatch,
    /// The candidate leaves open something serving it needs (`[serving]`).
    Serving,
    /// Its `[serving.explore]` costs more than the bound it declares.
    Exploration,
    /// With `--production`: no estimate on production traffic was given
    /// for it, so the production checks did not run.
    Production,
    /// Its quality on production traffic (the doubly-robust estimate) is
    /// below the target: the upper bound at the confidence is.
    ProductionBelowTarget,
    /// On production traffic it is worse than the running config by more
    /// than `--max-regression`: the upper bound of the paired difference
    /// is below −margin.
    ProductionRegression,
    /// On production traffic the interval of its quality holds the target,
    /// or that of its difference from the running config holds −margin:
    /// the labels so far cannot tell it passes (version 8 on).
    ProductionUndecided,
    /// It costs more than the deployed config on the same rows by more
    /// than the ceiling (`--max-cost-increase`, or the table's own
    /// `[gate] accept_cost_increase`).
    CostIncrease,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    pub rule: Rule,
    pub slice: Option<String>,
    pub message: String,
}

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
    /// The largest cost increase over the deployed config a candidate may
    /// have unless its table accepts more (version 7 on; null before).
    #[serde(default)]
    pub max_cost_increase: Option<f64>,
    /// Whether the gate held a key to sign what it chose: false when it was
    /// run without `--key`, to evaluate only (version 7 on).
    #[serde(default = "signed_by_default")]
    pub signed: bool,
    /// Whether `confidence` held for all slices jointly (Holm) rather than
    /// for each slice.
    #[serde(default)]
    pub familywise: bool,
    pub baseline: Option<BaselineRef>,
    pub candidates: Vec<CandidateReport>,
    /// The file of the cheapest candidate that passed.
    pub chosen: Option<String>,
    pub emitted: Option<Emitted>,
    /// A rollback (`gate --rollback-to`): nothing was evaluated; the
    /// earlier config's table is signed again as the next version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<Rollback>,
}

/// What a rollback signed again: the earlier config, by its file, version
/// and sha256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rollback {
    pub to: BaselineRef,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineRef {
    pub path: String,
    pub version: u64,
    pub sha256: String,
    /// The deployed config's own quality and mean cost (USD per request)
    /// on the gate's rows; absent where it was not evaluated (a rollback,
    /// and before version 7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_cost: Option<f64>,
}

/// Reports before version 7 signed whatever they chose.
fn signed_by_default() -> bool {
    true
}

/// A candidate's mean cost against the deployed config's on the same rows,
/// and the ceiling it was held to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostChange {
    /// USD per request, the deployed config's then the candidate's.
    pub baseline_mean_cost: f64,
    pub mean_cost: f64,
    /// `mean_cost / baseline_mean_cost − 1`; null where the deployed config
    /// costs nothing and the candidate does.
    pub increase: Option<f64>,
    /// The largest increase allowed.
    pub ceiling: f64,
    /// Where the ceiling came from: `--max-cost-increase` or the table's
    /// `[gate] accept_cost_increase`.
    pub ceiling_from: String,
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
    /// With `--baseline`: per slice, the paired test against the deployed
    /// config on the same rows. Empty without a baseline (and in version 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regressions: Vec<SliceRegression>,
    /// With `--baseline`: its mean cost against the deployed config's on
    /// the same rows (version 7 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_change: Option<CostChange>,
    /// A predictive candidate's scores: what its certificate is about.
    /// Absent for other policies (and before version 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<CertifiedScores>,
    /// A candidate that explores (`[serving.explore]`): what it costs at
    /// these measurements, all rows then each slice (version 6 on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exploration: Vec<ExplorationPrice>,
    /// With `--production`: the candidate's estimates on the traffic the
    /// running config served (version 6 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub production: Option<ProductionEvidence>,
}

/// A `replay candidate` document the gate checked a candidate against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProductionEvidence {
    pub file: String,
    pub sha256: String,
    /// The estimator the rules read: `dr`.
    pub estimator: String,
    /// The document's intervals: `betting_sequence` (hold at every look;
    /// from version 9) or `empirical_bernstein` (one look).
    #[serde(default = "one_look")]
    pub bound: String,
    pub requests: u64,
    pub labelled: u64,
    pub overall: ProductionQuality,
    pub slices: Vec<ProductionQuality>,
}

fn one_look() -> String {
    "empirical_bernstein".to_owned()
}

/// One slice's production quality and its difference from the running
/// config, each with its interval where the document gives one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProductionQuality {
    pub slice: String,
    pub requests: u64,
    pub quality: super::Estimate,
    pub running_quality: super::Estimate,
    pub quality_difference: super::Estimate,
}

/// The scores a predictive candidate was measured and certified on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertifiedScores {
    /// The results' column.
    pub column: String,
    pub scorer: ScoresFrom,
    /// The pinned router's sha256 (`deployed_router`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_sha256: Option<String>,
    /// How many distinct prompts the pinned router was fitted on, none of
    /// them among the rows (`deployed_router`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_trained_on: Option<u64>,
}

/// Where a predictive candidate's scores come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoresFrom {
    /// The pinned built-in router's own scores, checked on every row, of
    /// prompts it was not fitted on: the scorer serve runs.
    DeployedRouter,
    /// An external router's, as the results give them: nothing checked.
    External,
}

/// A candidate against the deployed config on one slice's rows
/// (`crate::stats::worse_by_more_than` documents the test).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceRegression {
    pub slice: String,
    pub n: u64,
    /// Rows the deployed config served acceptably and the candidate did not.
    pub baseline_only: u64,
    /// Rows the candidate served acceptably and the deployed config did not.
    pub candidate_only: u64,
    /// Candidate quality minus deployed quality, and its interval.
    pub difference: f64,
    pub difference_interval: [f64; 2],
    /// One-sided p-value of "worse by more than --max-regression".
    pub p_value: f64,
    /// θ0 of the test: the baseline's share of the discordant rows on the
    /// boundary of the null hypothesis.
    pub boundary_share: f64,
    /// Power against a regression of the margin plus max(margin, 0.02).
    pub power: f64,
    pub verdict: PairedVerdict,
    /// Whether the data show the candidate better: McNemar's exact
    /// one-sided test at half the test's level (version 7 on).
    #[serde(default)]
    pub better: bool,
    /// Candidate minus deployed mean USD per request, and its interval.
    pub cost_difference: f64,
    pub cost_difference_interval: [f64; 2],
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Emitted {
    pub config: String,
    pub signature: String,
    /// The LiteLLM export; `None` where LiteLLM cannot carry out the policy
    /// and no `--serve-url` was given (the candidate's warnings say so).
    pub litellm: Option<String>,
    pub version: u64,
    pub sha256: String,
}

pub fn optional_cell(value: Option<f64>, format: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "-".to_owned(), format)
}

/// The share escalated past the first tier, and with more than two tiers
/// each tier's share: `60.3% (39.7 / 55.6 / 4.7)`.
pub fn escalated_cell(m: &Metrics) -> String {
    let rate = format!("{:.1}%", m.escalation_rate * 100.0);
    match &m.served {
        Some(served) => {
            let shares: Vec<String> = served
                .iter()
                .map(|share| format!("{:.1}", share * 100.0))
                .collect();
            format!("{rate} ({})", shares.join(" / "))
        }
        None => rate,
    }
}

/// The rows every rendering shares: a label and one cell per candidate.
pub fn comparison_rows(report: &GateReport) -> Vec<(String, Vec<String>)> {
    let metric = |label: &str, cell: &dyn Fn(&Metrics) -> String| -> (String, Vec<String>) {
        (
            label.to_owned(),
            report
                .candidates
                .iter()
                .map(|candidate| cell(&candidate.overall))
                .collect(),
        )
    };
    let each = |label: &str, cell: &dyn Fn(&CandidateReport) -> String| -> (String, Vec<String>) {
        (
            label.to_owned(),
            report.candidates.iter().map(cell).collect(),
        )
    };
    vec![
        each("policy", &|candidate| candidate.policy.clone()),
        each("verdict", &|candidate| {
            if report.chosen.as_deref() == Some(candidate.file.as_str()) {
                "chosen".to_owned()
            } else if candidate.passed {
                "passed".to_owned()
            } else {
                format!("rejected ({})", candidate.failures.len())
            }
        }),
        metric("quality", &|m| format!("{:.4}", m.quality)),
        metric("lower bound", &|m| {
            optional_cell(m.quality_lower_bound, |v| format!("{v:.4}"))
        }),
        metric("$/1k req", &|m| format!("{:.4}", m.mean_cost * 1000.0)),
        metric("p50 ms", &|m| {
            optional_cell(m.p50_ms, |v| format!("{v:.0}"))
        }),
        metric("p95 ms", &|m| {
            optional_cell(m.p95_ms, |v| format!("{v:.0}"))
        }),
        metric("escalated", &escalated_cell),
        metric("false accepts", &|m| {
            optional_cell(m.false_accept_rate, |v| format!("{:.1}%", v * 100.0))
        }),
    ]
}
