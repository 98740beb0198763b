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

mod document;
mod engine;
mod ingest;
mod options;
mod select;
mod terminal;
#[cfg(test)]
mod tests;
mod tiered;

pub use crate::policy::{
    Candidate, Curve, GradedRow, Observation, SliceObservations, Totals, to_picodollars,
};
pub use document::{
    AuditSummary, Baselines, CALIBRATION_OUTPUT, CALIBRATION_SCHEMA_VERSION, CalibrationDocument,
    FrontierPoint, HoldoutResult, HoldoutVerdict, InputFile, Point, SliceCalibration, Threshold,
    TieredChoice, TieredPoint,
};
pub use engine::{CalibrateError, calibrate, thin};
pub use ingest::GLOBAL_SLICE;
pub use options::{CalibrateOptions, Guarantee, Holdout, Policy, Scope};
pub use select::{Selection, select};
pub(crate) use terminal::table;
pub use terminal::{AUDIT_HEADER, audit_rows, render_table};
pub use tiered::{DEFAULT_GRID, acceptable, calibrate_tiered};
