//! `routeval calibrate`: reads the graded-results table and, per slice of
//! traffic (or once for all rows), picks the cheapest router or verifier
//! threshold whose quality meets the target, optionally certified at a
//! confidence level. Writes a versioned [`CalibrationDocument`].
//!
//! The semantics, which `tests` pin against a brute-force twin (the row
//! arithmetic and the sweep are the policy kernel's, [`crate::policy`]):
//! - a row is escalated to the large tier when `score >= t`; the candidate
//!   thresholds are every distinct score of the slice plus `+inf`;
//! - quality(t) is the share of rows whose served answer (large if escalated,
//!   else small) was acceptable;
//! - predictive cost(t) = mean(cost_router + (escalated ? cost_large :
//!   cost_small)); cascade cost(t) = mean(cost_small + cost_verifier +
//!   (escalated ? cost_large : 0)); costs are summed exactly in integer
//!   picodollars, so equal costs tie exactly;
//! - the cheapest candidate with quality ≥ target wins; ties go to higher
//!   quality, then to the lower threshold;
//! - with a confidence level, only thresholds certified by fixed-sequence
//!   exact binomial tests (walked from escalate-all upwards, stopping at the
//!   first failure) are eligible.

mod audits;
mod engine;
mod error;
mod ingest;
mod options;
mod pipeline;
mod select;
mod terminal;
#[cfg(test)]
mod tests;
mod tiered;

pub use error::CalibrateError;
pub use options::CalibrateOptions;
pub use pipeline::calibrate;
pub use select::{Selection, select};
pub use terminal::render_table;
pub use tiered::{DEFAULT_GRID, acceptable};
