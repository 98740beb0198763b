//! `routeval drift --records`: the deployed config watched from the
//! gateway's request records alone, no labels. Per slice: the escalation
//! rate now against the gate's at calibration (z-test and interval) and the
//! score distribution against the calibration rows (PSI, KS); per route:
//! fallbacks by reason, TTFT p50/p95, cost per request, and the share
//! answered by a model other than the pinned one; each also per time window,
//! so a brown-out shows as a window rather than an average.
//!
//! Records stream through one fold whose memory grows with slices, routes,
//! windows and histogram bins, never with rows: scores in bins of 0.01, first
//! tokens in bins of 1% (`floor(ln(ms) / ln(1.01))`). The same fold reads a
//! table pre-aggregated by those keys in the warehouse (docs/records-sql.md),
//! so billions of rows never leave it.

mod engine;
mod render;

pub use engine::{RecordsDriftOptions, RecordsInput, drift_records, score_bin, ttft_bin};
pub use render::render_records;
