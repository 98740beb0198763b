//! The kinds of tier-routing policy, and the one rule that escalates a row.

use serde::{Deserialize, Serialize};

/// How the large tier comes to answer a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// A router scores the prompt first; escalated prompts go only to the
    /// large tier.
    Predictive,
    /// The small tier answers, a verifier scores the answer, and rejected
    /// answers are escalated: they pay for all three calls.
    Cascade,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Predictive => "predictive",
            Policy::Cascade => "cascade",
        }
    }
}

/// Whether a row with `score` is escalated at `threshold`: at or above it.
/// Every stage decides escalation here, so none can disagree on a tie.
pub fn escalates(score: f64, threshold: f64) -> bool {
    score >= threshold
}
