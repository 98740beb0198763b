//! `routeval report`: what a reviewer reads before approving a route change.
//! From the graded results, and optionally a calibration, a gate report and a
//! drift document, it writes a self-contained HTML file with SVG charts (per
//! slice: the cost–quality curve with always-small, always-large, the oracle
//! and the chosen threshold; quality, cost and escalation by threshold;
//! cascade against predictive; drift) and the tables behind them, plus a
//! Markdown summary for the pull request. A replica-routing replay
//! (`--replay`) and what request records said (`--records`: drift per
//! window, replayed breakers, hedging) add sections of their own, or make a
//! report on their own. With the deployed config
//! (`--baseline`), both lead with the change: per slice, before and after.

mod change;
mod curves;
mod html;
mod markdown;
mod records;
mod replay;
mod svg;

pub use change::{Change, ChangeRows, SliceChange, change, proposed_from_calibration};
pub use curves::{SliceCurves, slice_curves};
pub use html::{ReportInputs, render};
pub use markdown::summary;
pub use records::{RecordsDocuments, records_page, records_section, records_summary};
pub use replay::{replay_page, replay_summary};
pub use svg::{Chart, Marker, Rule, Series, Style, escape};
