//! `candidate.json` (`routeval replay candidate`): a candidate route table's
//! off-policy estimates on the traffic a signed config served, per slice
//! and over all requests. Versioned; readers reject unknown keys.

use serde::{Deserialize, Serialize};

use super::InputFile;

pub const CANDIDATE_REPLAY_SCHEMA_VERSION: u32 = 2;

/// The document's `kind`, by which `report --records` knows it.
pub const CANDIDATE_REPLAY_KIND: &str = "candidate";

/// What `replay candidate --out` writes.
pub const CANDIDATE_REPLAY_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a candidate replay",
    crate::atomic::Replaces::Document {
        keys: &[
            "schema_version",
            "records",
            "labels",
            "candidate",
            "overall",
        ],
        kind: Some(CANDIDATE_REPLAY_KIND),
    },
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateReplay {
    #[serde(deserialize_with = "crate::version::known::<_, 1, CANDIDATE_REPLAY_SCHEMA_VERSION>")]
    pub schema_version: u32,
    /// `candidate`.
    pub kind: String,
    pub routeval_version: String,
    /// The records read, and how many were the config's decisions.
    pub records: InputFile,
    pub labels: LabelsUsed,
    /// The signed config that decided the records (`--config`).
    pub logged_by: LoggedBy,
    pub candidate: InputFile,
    /// The graded results the direct model was fitted on (`--results`).
    pub results: InputFile,
    pub confidence: f64,
    /// The bound every interval is: `betting_sequence` (a confidence
    /// sequence, valid at every look at once; from version 2) or
    /// `empirical_bernstein` (valid for one look).
    pub bound: String,
    pub overall: SliceEstimate,
    pub slices: Vec<SliceEstimate>,
    /// With `--state`: the running comparison against the config that
    /// decided the records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<super::Comparison>,
}

/// The label set, and the draw it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelsUsed {
    pub path: String,
    pub sha256: String,
    pub rows: u64,
    pub seed: u64,
    pub inclusion_probability: f64,
    /// Whether the signed config committed this draw
    /// (`[serving.explore.labels]`) before the records existed; a draw it
    /// did not commit could have been chosen after them.
    #[serde(default)]
    pub committed: bool,
    /// With an audit: the power-tuning λ the rewards ended at (1 is the
    /// plain correction; under a sequence λ is learnt from the audited
    /// requests before each, under the one-look interval it stays 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_tuning: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggedBy {
    pub path: String,
    pub version: u64,
    pub sha256: String,
}

/// An estimate with its interval at the document's confidence, where one
/// holds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Estimate {
    pub estimate: f64,
    pub lower: Option<f64>,
    pub upper: Option<f64>,
}

/// `0.812 [0.701, 0.903]`, or the estimate alone where it has no interval:
/// how every table and summary shows one.
impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.lower, self.upper) {
            (Some(lower), Some(upper)) => {
                write!(f, "{:.3} [{lower:.3}, {upper:.3}]", self.estimate)
            }
            _ => write!(f, "{:.3}", self.estimate),
        }
    }
}

/// The three estimators of one quantity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Estimators {
    /// Inverse propensity: each matching labelled request weighted by one
    /// over its propensity and its inclusion probability.
    pub ips: Estimate,
    /// Self-normalised: the same, divided by the sum of the weights.
    pub snips: Estimate,
    /// Doubly robust: the direct model's value of the candidate's route on
    /// every request, corrected by the weighted residuals.
    pub dr: Estimate,
}

/// A candidate on one slice's logged requests (or all of them, `*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceEstimate {
    pub slice: String,
    /// The config's decisions in the records.
    pub requests: u64,
    /// Of them, drawn into the label set.
    pub labelled: u64,
    /// Requests whose decided route is the one the candidate would choose.
    pub matched: u64,
    pub matched_labelled: u64,
    /// The largest weight the design can give a request: one over the
    /// smallest propensity of a route and the inclusion probability. The
    /// intervals' range.
    pub max_weight: f64,
    /// The share of requests whose answer was acceptable.
    pub quality: Estimators,
    /// USD per request; no interval, since a cost has no range known in
    /// advance.
    pub mean_cost: Estimators,
    /// The share of requests the candidate sends past its cheapest tier:
    /// computed, not estimated, on the logged requests, with a
    /// Clopper–Pearson interval for the traffic they were drawn from.
    pub escalation_rate: Estimate,
    /// Against the config that decided the records: its own quality on the
    /// same requests, and the candidate's minus it, paired.
    pub running_quality: Estimate,
    pub quality_difference: Estimate,
}

/// The bound name of a confidence sequence.
pub const BETTING_SEQUENCE: &str = "betting_sequence";

impl CandidateReplay {
    /// Whether the intervals hold at every look (a confidence sequence),
    /// not only for one.
    pub fn holds_at_every_look(&self) -> bool {
        self.bound == BETTING_SEQUENCE
    }

    /// The bound as a reader is told it.
    pub fn bound_described(&self) -> &'static str {
        if self.holds_at_every_look() {
            "a betting confidence sequence: holds at every look"
        } else {
            "empirical Bernstein: holds for one look"
        }
    }

    /// Each slice, then all requests, as a table's header and rows: for the
    /// terminal and the report alike.
    pub fn table(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let interval = Estimate::to_string;
        let header = vec![
            "slice",
            "requests",
            "matched/labelled",
            "quality IPS",
            "SNIPS",
            "DR",
            "cost DR (USD)",
            "escalation",
            "running IPS",
            "difference",
        ];
        let rows = self
            .slices
            .iter()
            .chain(std::iter::once(&self.overall))
            .map(|slice| {
                vec![
                    slice.slice.clone(),
                    slice.requests.to_string(),
                    format!("{}/{}", slice.matched_labelled, slice.labelled),
                    interval(&slice.quality.ips),
                    interval(&slice.quality.snips),
                    interval(&slice.quality.dr),
                    format!("{:.6}", slice.mean_cost.dr.estimate),
                    format!("{:.3}", slice.escalation_rate.estimate),
                    interval(&slice.running_quality),
                    interval(&slice.quality_difference),
                ]
            })
            .collect();
        (header, rows)
    }
}
