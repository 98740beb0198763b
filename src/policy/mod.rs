//! The policy kernel: the one copy of what a tier-routing policy does to
//! graded rows. Which tier serves a row (escalated when its score is at or
//! above the threshold), what the row then costs in exact picodollars,
//! whether the served answer was acceptable, whether a cascade's verifier
//! accepted a wrong answer, and when the first token arrived; the integer
//! counts of many rows and the rates rendered from them; and the threshold
//! sweep over a slice; and what a whole route table does to graded rows
//! ([`evaluate_table`]), and how it compares with the deployed one on the same rows
//! ([`regressions`]). `calibrate`, `gate`, `drift`, `simulate`, `evaluate`
//! and `report` all call it; none keeps its own copy.

mod breaker;
mod certify;
mod decide;
mod explore;
mod money;
mod regression;
mod resilience;
mod row;
mod row_outcome;
mod search;
mod separation;
mod sweep;
mod table;
mod tally;
mod tiers;

pub use crate::schema::{Policy, escalates};
pub use breaker::{Admit, Breaker, CallOutcome, State as BreakerState};
pub use certify::{SequenceCertificate, certify_fixed_sequence, certify_in_order, fixed_sequence};
pub use decide::{Plan, Refusal, allowed, applicable, plan};
pub use explore::{Drawn, draw, price_table, propensity, tier_count};
pub use money::{PICODOLLARS_PER_USD, to_picodollars, to_usd};
pub use regression::regressions;
pub use resilience::{
    BudgetSettings, MinuteWindow, MinuteWindows, Move as FallbackMove, RetryBudget, Stay,
    take_fallback,
};
pub use row::GradedRow;
pub use row_outcome::{
    Latencies, Priced, first_token_alone_ms, first_token_ms, serve_row, serve_row_alone,
    serve_row_priced,
};
pub use search::{MAX_CANDIDATES, TieredCandidate, TieredSearch, TieredSlice, search_tiers};
pub use separation::{ScoredOutcome, oracle_scores, random_scores, routing_quality};
pub use sweep::{Audit, Candidate, Curve, Observation, SliceObservations, Totals, thin};
pub use table::{Evaluation, TieredRows, evaluate_table, recorded_models, scores_of, tiered_rows};
pub use tally::{Counts, Tally};
pub use tiers::{
    Served, TierLatency, TieredOutcomes, cascade_stage, first_token_tier_ms, predictive_tier,
    serve_at, serve_tier,
};
