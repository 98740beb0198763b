//! `routeval evaluate`: how well a score separates the prompts that need the
//! large tier, with RouteLLM's metrics.
//!
//! Escalating the top x share of prompts by score gives quality q(x). The
//! performance gap recovered is PGR(x) = (q(x) − q_small) / (q_large −
//! q_small). APGR is the area under PGR over x in [0, 1] (prompts with equal
//! scores are escalated together, the curve linear across them); CPT(p) is
//! the smallest share of calls to the large tier with PGR ≥ p. A random
//! router's APGR is 0.5 in expectation.

mod engine;
mod metrics;

pub use engine::{EvaluateOptions, evaluate, render};
pub use metrics::{ScoredOutcome, oracle_scores, random_scores, routing_quality};
