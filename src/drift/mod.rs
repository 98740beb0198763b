//! `routeval drift`: re-evaluates fresh graded traffic at the deployed route
//! config's thresholds and says, per slice, whether they still hold: `ok`,
//! `watch` or `recalibrate`, with the evidence behind the verdict (the
//! escalation rate against calibration time, quality against the target, the
//! score distribution's shift, and silent changes of a tier's model).

mod document;
mod engine;
mod records;
mod render;
mod statistics;

pub use document::{
    DRIFT_OUTPUT, DRIFT_SCHEMA_VERSION, DriftDocument, ScoreShift, SliceDrift, Verdict,
};
pub use engine::{DriftOptions, drift};
pub use records::{
    RECORDS_DRIFT_OUTPUT, RECORDS_DRIFT_SCHEMA_VERSION, RecordsDriftDocument, RecordsDriftOptions,
    RecordsInput, RecordsRouteDrift, RecordsSliceDrift, drift_records, render_records, score_bin,
    ttft_bin,
};
pub use render::{markdown, terminal};
pub use statistics::{ks_two_sample, psi, two_proportion_z};
