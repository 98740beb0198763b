//! The metrics of a route table on one slice: the rows of the gate report,
//! the signed route config and the drift documents.

use serde::{Deserialize, Serialize};

/// How a route table does on one slice (or on all rows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    pub slice: String,
    pub n: u64,
    pub quality: f64,
    /// One-sided Clopper–Pearson bound at the gate's confidence.
    pub quality_lower_bound: Option<f64>,
    /// Mean USD per request.
    pub mean_cost: f64,
    /// Time to the served answer's first token, where the results have the
    /// latencies it needs.
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub escalation_rate: f64,
    /// Cascades: the share of requests whose wrong small answer the verifier
    /// accepted, which escalation can never repair.
    pub false_accept_rate: Option<f64>,
    /// Policies over more than two tiers: the share of requests each tier
    /// served, cheapest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<Vec<f64>>,
}

/// What exploring a slice at `share` does to it, at the gate's
/// measurements: the expected cost and quality of the exploring policy, and
/// how far each moves from the policy's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplorationPrice {
    pub slice: String,
    pub n: u64,
    pub share: f64,
    /// Mean USD per request, the policy alone and exploring.
    pub mean_cost: f64,
    pub mean_cost_exploring: f64,
    /// `mean_cost_exploring / mean_cost − 1`.
    pub added_cost_share: f64,
    pub quality: f64,
    pub quality_exploring: f64,
}
