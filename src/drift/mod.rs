//! `routeval drift`: re-evaluates fresh graded traffic at the deployed route
//! config's thresholds and says, per slice, whether they still hold: `ok`,
//! `watch` or `recalibrate`, with the evidence behind the verdict (the
//! escalation rate against calibration time, quality against the target, the
//! score distribution's shift, and silent changes of a tier's model); with
//! `--state`, quality and escalation as an anytime-valid monitor across runs.

mod engine;
mod monitor;
mod records;
mod render;
mod sequential;

pub use engine::{DriftOptions, drift};
pub use records::{
    RecordsDriftOptions, RecordsInput, drift_records, render_records, score_bin, ttft_bin,
};
pub use render::{markdown, terminal};
pub use sequential::{
    Arl, DEFAULT_ARL, DRIFT_STATE_OUTPUT, DRIFT_STATE_SCHEMA_VERSION, Detector, DriftState,
    FamilySlice, RunCounts, SliceState, Wealth,
};
