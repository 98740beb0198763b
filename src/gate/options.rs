//! What a gate is asked: the candidates, the results, the rules' settings,
//! the key and where its outputs go.

use std::path::PathBuf;

use crate::schema::{ColumnNames, ReadOptions};
use crate::units::{Confidence, Margin, NonNegative, Target};

use super::litellm::ServeEndpoint;

/// The confidence of the regression test when the gate is given none.
pub const DEFAULT_REGRESSION_CONFIDENCE: f64 = 0.95;

#[derive(Debug, Clone)]
pub struct GateOptions {
    pub candidates: Vec<PathBuf>,
    /// `routeval serve`, to which the LiteLLM export sends the logical model
    /// (`--serve-url`, `--serve-key-env`).
    pub serve: Option<ServeEndpoint>,
    pub results: PathBuf,
    /// The results' score and slice columns.
    pub names: ColumnNames,
    /// Calibrations for the policies that take their thresholds from one,
    /// matched by policy and score column.
    pub calibrations: Vec<PathBuf>,
    pub baseline: Option<PathBuf>,
    /// The key the baseline must verify with; `None`: the `.pub` beside `key`.
    pub baseline_pubkey: Option<String>,
    pub constraints: Option<PathBuf>,
    pub target: Target,
    pub confidence: Option<Confidence>,
    pub max_regression: Margin,
    /// The largest increase of mean cost over the deployed config (0.1:
    /// 10% more) a candidate may have unless its table accepts more.
    pub max_cost_increase: NonNegative,
    /// The secret key that signs the chosen candidate; `None`: evaluate and
    /// report only.
    pub key: Option<PathBuf>,
    pub out: PathBuf,
    pub ttl_days: u64,
    pub dataset_sha256: Option<String>,
    /// Constraints may name slices the results do not have.
    pub allow_unknown_slices: bool,
    /// With a confidence, certify the target for all slices jointly (Holm).
    pub familywise: bool,
    /// The built-in router whose scores a predictive candidate's thresholds
    /// apply to: pinned by sha256 in the signed config.
    pub router: Option<PathBuf>,
    /// The results' column with the prompt text, which the router's scores
    /// are checked against.
    pub prompt_col: String,
    /// Where a cascade candidate's `[serving.verifier] template` is found.
    pub rubrics: PathBuf,
    /// Score the deployed config's own table, as it was signed, beside the
    /// candidates: renewing it needs no new thresholds while they hold.
    pub include_baseline: bool,
    /// `replay candidate` documents of the candidates on the traffic the
    /// `baseline` config served: the production checks.
    pub production: Vec<PathBuf>,
}

impl GateOptions {
    /// The confidence as a number, where one is asked.
    pub(super) fn confidence_level(&self) -> Option<f64> {
        self.confidence.map(Confidence::get)
    }

    /// How the gate reads the results: with the details its report shows.
    pub(super) fn read_options(&self) -> ReadOptions {
        ReadOptions::of(self.names.clone()).with_details()
    }
}

/// The longest a signed config may live, in days: ten years keeps
/// `expires_at` a date every reader parses.
pub const MAX_TTL_DAYS: u64 = 3650;
