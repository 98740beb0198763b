//! `routeval simulate`: graded results from a documented generative model, so
//! the cost–quality–latency trade-off of routing can be studied without data,
//! and tests and benchmarks have realistic tables of any size.
//!
//! The model, every number a parameter:
//! - a request's difficulty d ~ Beta(2, 3);
//! - a model of skill s solves it with probability 1 / (1 + e^(−(s − d)/0.05));
//!   the small model has s = 0.55, the large s = 0.92, and a mid-price model
//!   between them s = 0.75 (its outcomes drawn from a stream of their own,
//!   so the two-model rows of a seed do not change);
//! - prices per million input/output tokens: small $0.15/$0.60, mid
//!   $0.60/$2.40, large $3/$15,
//!   with 1,500 input and 300 output tokens per request;
//! - latencies: small TTFT 0.25 s and full answer 3 s, large TTFT 0.9 s and
//!   full answer 6 s;
//! - a verifier of the small answer ($0.0002, 0.4 s) that accepts 10% of
//!   wrong answers and rejects 8% of right ones;
//! - a predictive router ($0.00002, 0.02 s) that sees d plus Gaussian noise
//!   (σ 0.10) and, in `--compare`, escalates when that reaches 0.5 (score
//!   >= 0.5, the rule every stage shares).

mod compare;
mod model;
mod tiers;

pub use compare::{PolicySummary, compare, render_comparison};
pub use model::{SimulatedRow, Simulation, SimulationError, to_table};
pub use tiers::{TieredSummary, compare_tiers, render_tiered};
